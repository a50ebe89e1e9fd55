//! Key choice: uniform, or zipfian (YCSB's skew, s = 0.99) over a fixed key space.

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Distribution {
    Uniform,
    Zipfian,
}

/// Zipf exponent, as YCSB uses.
const ZIPF_EXPONENT: f64 = 0.99;
/// The zipfian table is exact up to this many keys; larger key spaces fold onto it.
const ZIPF_TABLE_KEYS_MAX: u64 = 1 << 20;

pub struct KeyChooser {
    keyspace: u64,
    cdf: Option<Vec<f64>>,
}

impl KeyChooser {
    pub fn new(keyspace: u64, distribution: Distribution) -> Self {
        let keyspace = keyspace.max(1);
        let cdf = (distribution == Distribution::Zipfian).then(|| {
            let n = keyspace.min(ZIPF_TABLE_KEYS_MAX) as usize;
            let mut cdf = Vec::with_capacity(n);
            let mut total = 0.0;
            for rank in 1..=n {
                total += 1.0 / (rank as f64).powf(ZIPF_EXPONENT);
                cdf.push(total);
            }
            cdf.iter_mut().for_each(|c| *c /= total);
            cdf
        });
        KeyChooser { keyspace, cdf }
    }

    pub fn next(&self) -> u64 {
        match &self.cdf {
            None => fastrand::u64(..self.keyspace),
            Some(cdf) => {
                let u = fastrand::f64();
                let rank = cdf.partition_point(|&c| c < u) as u64;
                // Scatter ranks over the key space so hot keys are not neighbours.
                (rank.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % self.keyspace
            }
        }
    }
}

/// The key name for number `n`, fixed width like redis-benchmark's `key:__rand_int__`.
pub fn key_name(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"key:");
    let mut digits = [b'0'; 20];
    let mut rest = n;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let width = (digits.len() - i).max(12);
    out.extend_from_slice(&digits[digits.len() - width..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_prefers_few_keys() {
        let chooser = KeyChooser::new(10_000, Distribution::Zipfian);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..20_000 {
            *counts.entry(chooser.next()).or_insert(0) += 1;
        }
        let mut top: Vec<i32> = counts.values().copied().collect();
        top.sort_unstable_by(|a, b| b.cmp(a));
        assert!(
            top[0] > 1000,
            "the hottest key should take about 10% of picks: {}",
            top[0]
        );
        let uniform = KeyChooser::new(10_000, Distribution::Uniform);
        assert!((0..1000).all(|_| uniform.next() < 10_000));
    }

    #[test]
    fn key_names_are_fixed_width() {
        let mut out = Vec::new();
        key_name(42, &mut out);
        assert_eq!(out, b"key:000000000042");
    }
}
