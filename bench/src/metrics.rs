//! Named measurements of one sample, and the paired-ratio summaries built from them.

use std::collections::BTreeMap;

/// Which way is better for each metric.
pub fn higher_is_better(metric: &str) -> bool {
    metric == "ops_per_sec"
}

/// Human label and unit for a metric name.
pub fn label(metric: &str) -> &'static str {
    match metric {
        "ops_per_sec" => "ops/s",
        "p50_us" => "p50 µs",
        "p95_us" => "p95 µs",
        "p99_us" => "p99 µs",
        "p999_us" => "p99.9 µs",
        "cpu_us_per_op" => "server CPU µs/op",
        "boot_ms" => "boot ms",
        "bytes_per_key" => "RSS bytes/key",
        "bytes_per_job" => "RSS bytes/waiting job",
        "restart_ms" => "restart ms",
        "log_bytes_per_key" => "log bytes/key",
        "disk_bytes_per_key" => "disk bytes/key",
        _ => "?",
    }
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Metrics(pub BTreeMap<String, f64>);

impl Metrics {
    pub fn set(&mut self, name: &str, value: f64) {
        self.0.insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }
}

/// Median, min and max of a list of numbers.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_median_of_pairs() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 10.0));
        assert!(Spread::of(&[]).is_none());
        assert_eq!(Spread::of(&[f64::NAN, 4.0]).unwrap().median, 4.0);
    }
}
