//! Redis's `long double` arithmetic for INCRBYFLOAT and HINCRBYFLOAT, emulated exactly.
//!
//! Redis keeps these counters as text and adds in C's `long double`: on x86-64, the x87
//! 80-bit extended format (a 64-bit significand). It reads each side with `strtold`, adds,
//! and writes the sum with `%.17Lf` and its trailing zeros cut. So `INCRBYFLOAT k 0.1` three
//! times answers `0.3` (the extended sum is 0.3000000000000000000108…, whose 17 decimals are
//! all zero after the 3), where a 64-bit double would give 0.30000000000000004; and
//! `INCRBYFLOAT k 1e308` answers the 309 digits of the extended value nearest 1e308. Clients
//! compare these strings, so they are reproduced bit for bit: [`parse`] is a correctly
//! rounded `strtold` (decimal and hexadecimal, `inf`), [`LongDouble::plus`] rounds the exact
//! sum to nearest-even as the FPU does, and [`LongDouble::human`] prints the exact decimal
//! expansion rounded to 17 places. Big integers carry the exact values between.

use num_bigint::BigUint;

/// The smallest exponent of the significand's last bit (subnormals included).
const EXP_MIN: i64 = -16445;
/// The largest exponent of the significand's last bit of a finite value.
const EXP_MAX: i64 = 16320;
/// Bits of the significand.
const SIG_BITS: u64 = 64;
/// Redis refuses longer numbers (`MAX_LONG_DOUBLE_CHARS`).
pub const TEXT_MAX: usize = 5 * 1024 - 1;

/// An x87 extended value: ±`sig` × 2^`exp` (`sig` 0 is zero), or an infinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongDouble {
    Finite { negative: bool, sig: u64, exp: i64 },
    Infinite { negative: bool },
}

/// How a value came out of rounding: exact enough, or past the range (C's ERANGE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Range {
    Within,
    Overflow,
    /// Rounded to zero though not zero.
    Underflow,
}

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble::Finite {
        negative: false,
        sig: 0,
        exp: 0,
    };

    pub fn from_i64(n: i64) -> LongDouble {
        LongDouble::Finite {
            negative: n < 0,
            sig: n.unsigned_abs(),
            exp: 0,
        }
    }

    pub fn is_finite(self) -> bool {
        matches!(self, LongDouble::Finite { .. })
    }

    /// The sum, rounded to nearest (ties to even) as the FPU rounds it; `None` when it is
    /// not a number (infinities of both signs).
    pub fn plus(self, other: LongDouble) -> Option<LongDouble> {
        use LongDouble::*;
        match (self, other) {
            (Infinite { negative: a }, Infinite { negative: b }) if a != b => None,
            (Infinite { negative }, _) | (_, Infinite { negative }) => Some(Infinite { negative }),
            (
                Finite {
                    negative: na,
                    sig: sa,
                    exp: ea,
                },
                Finite {
                    negative: nb,
                    sig: sb,
                    exp: eb,
                },
            ) => {
                if sa == 0 && sb == 0 {
                    return Some(Finite {
                        negative: na && nb,
                        sig: 0,
                        exp: 0,
                    });
                }
                if sa == 0 {
                    return Some(other);
                }
                if sb == 0 {
                    return Some(self);
                }
                let exp = ea.min(eb);
                let a = BigUint::from(sa) << (ea - exp) as u64;
                let b = BigUint::from(sb) << (eb - exp) as u64;
                let (negative, sum) = if na == nb {
                    (na, a + b)
                } else if a >= b {
                    (na, a - b)
                } else {
                    (nb, b - a)
                };
                if sum == BigUint::ZERO {
                    return Some(LongDouble::ZERO);
                }
                Some(round(negative, &sum, &BigUint::from(1u8), exp).0)
            }
        }
    }

    /// `%.17Lf` with the trailing zeros (and a bare point) cut, `-0` as `0`: Redis's
    /// `ld2string(…, LD_STR_HUMAN)`.
    pub fn human(self) -> String {
        let (negative, sig, exp) = match self {
            LongDouble::Infinite { negative } => {
                return if negative { "-inf" } else { "inf" }.to_string()
            }
            LongDouble::Finite { negative, sig, exp } => (negative, sig, exp),
        };
        // round(|value| × 10^17), ties to even.
        let scaled = BigUint::from(sig) * BigUint::from(10u8).pow(17);
        let units = if exp >= 0 {
            scaled << exp as u64
        } else {
            let shift = exp.unsigned_abs();
            let whole = &scaled >> shift;
            let rest = &scaled - (&whole << shift);
            let half = BigUint::from(1u8) << (shift - 1);
            let up = rest > half || rest == half && whole.bit(0);
            if up {
                whole + 1u8
            } else {
                whole
            }
        };
        let digits = format!("{units:018}");
        let (int, frac) = digits.split_at(digits.len() - 17);
        let frac = frac.trim_end_matches('0');
        let mut text = String::with_capacity(digits.len() + 2);
        if negative {
            text.push('-');
        }
        text.push_str(int);
        if !frac.is_empty() {
            text.push('.');
            text.push_str(frac);
        }
        if text == "-0" {
            text = "0".to_string();
        }
        text
    }
}

/// Rounds ±`num`/`den` × 2^`exp2` to the nearest extended value (ties to even).
fn round(negative: bool, num: &BigUint, den: &BigUint, exp2: i64) -> (LongDouble, Range) {
    // Scale to a quotient of 66 or 67 bits: 64 to keep, a rounding bit, and more.
    let shift = 66 - (num.bits() as i64 - den.bits() as i64);
    let (num, den) = if shift >= 0 {
        (num << shift as u64, den.clone())
    } else {
        (num.clone(), den << shift.unsigned_abs())
    };
    let quotient = &num / &den;
    let sticky = &quotient * &den != num;
    // Bits to drop: down to 64, and more for a subnormal.
    let mut exp = exp2 - shift;
    let drop = (quotient.bits() as i64 - SIG_BITS as i64).max(EXP_MIN - exp) as u64;
    let kept = &quotient >> drop;
    let rest = &quotient - (&kept << drop);
    let half = BigUint::from(1u8) << (drop - 1);
    let up = rest > half || rest == half && (sticky || kept.bit(0));
    let mut kept = if up { kept + 1u8 } else { kept };
    exp += drop as i64;
    if kept.bits() > SIG_BITS {
        // Rounding carried into a 65th bit (the significand was all ones).
        kept >>= 1u8;
        exp += 1;
    }
    if exp > EXP_MAX {
        return (LongDouble::Infinite { negative }, Range::Overflow);
    }
    let sig = u64::try_from(&kept).expect("at most 64 bits");
    if sig == 0 {
        return (signed_zero(negative), Range::Underflow);
    }
    (LongDouble::Finite { negative, sig, exp }, Range::Within)
}

/// Parses a number as Redis's `string2ld` does (`strtold`, then its checks): an optional
/// sign, then decimal digits with an optional point and exponent, a hexadecimal float
/// (`0x1.8p3`), or `inf`/`infinity`; nothing before or after; not NaN; not so large it
/// overflows, nor so small it rounds to zero.
pub fn parse(text: &[u8]) -> Option<LongDouble> {
    if text.is_empty() || text.len() > TEXT_MAX {
        return None;
    }
    let (negative, body) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Some(LongDouble::Infinite { negative });
    }
    let parsed = if lower.starts_with(b"0x") {
        parse_hex(negative, &lower[2..])?
    } else {
        parse_decimal(negative, body)?
    };
    match parsed {
        (value, Range::Within) => Some(value),
        _ => None,
    }
}

/// Digits with an optional point: the integer they spell and how many came after the point.
fn mantissa(text: &[u8], radix: u32) -> Option<(BigUint, i64, usize)> {
    let mut value = BigUint::ZERO;
    let mut after_point = 0i64;
    let mut seen_point = false;
    let mut digits = 0usize;
    let mut used = 0usize;
    for &b in text {
        match b {
            b'.' if !seen_point => seen_point = true,
            _ => match (b as char).to_digit(radix) {
                Some(d) => {
                    value = value * radix + d;
                    digits += 1;
                    if seen_point {
                        after_point += 1;
                    }
                }
                None => break,
            },
        }
        used += 1;
    }
    (digits > 0).then_some((value, after_point, used))
}

/// An exponent: optional sign and digits (saturated far past any value's range).
fn exponent(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().fold(0i64, |acc, &d| {
        (acc * 10 + i64::from(d - b'0')).min(1 << 40)
    });
    Some(if negative { -magnitude } else { magnitude })
}

fn parse_decimal(negative: bool, text: &[u8]) -> Option<(LongDouble, Range)> {
    let (digits, after_point, used) = mantissa(text, 10)?;
    let rest = &text[used..];
    let exp10 = match rest.first() {
        None => 0,
        Some(b'e' | b'E') => exponent(&rest[1..])?,
        Some(_) => return None,
    } - after_point;
    if digits == BigUint::ZERO {
        return Some((signed_zero(negative), Range::Within));
    }
    // Far outside the range either way (the digits are at most TEXT_MAX long).
    if exp10 > 5000 {
        return Some((LongDouble::Infinite { negative }, Range::Overflow));
    }
    if exp10 < -(5000 + TEXT_MAX as i64) {
        return Some((signed_zero(negative), Range::Underflow));
    }
    let ten = BigUint::from(10u8);
    Some(if exp10 >= 0 {
        round(
            negative,
            &(digits * ten.pow(exp10 as u32)),
            &BigUint::from(1u8),
            0,
        )
    } else {
        round(negative, &digits, &ten.pow((-exp10) as u32), 0)
    })
}

fn parse_hex(negative: bool, text: &[u8]) -> Option<(LongDouble, Range)> {
    let (digits, after_point, used) = mantissa(text, 16)?;
    let rest = &text[used..];
    let exp2 = match rest.first() {
        None => 0,
        Some(b'p') => exponent(&rest[1..])?,
        Some(_) => return None,
    } - 4 * after_point;
    if digits == BigUint::ZERO {
        return Some((signed_zero(negative), Range::Within));
    }
    let exp2 = exp2.clamp(-(1 << 20), 1 << 20);
    Some(round(negative, &digits, &BigUint::from(1u8), exp2))
}

fn signed_zero(negative: bool) -> LongDouble {
    LongDouble::Finite {
        negative,
        sig: 0,
        exp: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(texts: &[&str]) -> String {
        texts
            .iter()
            .map(|t| parse(t.as_bytes()).expect(t))
            .reduce(|a, b| a.plus(b).expect("a number"))
            .expect("some")
            .human()
    }

    #[test]
    fn sums_print_as_redis_prints_them() {
        // Each expected text is what Redis 7 on x86-64 answers.
        assert_eq!(sum(&["0.1", "0.1", "0.1"]), "0.3");
        assert_eq!(sum(&["0.1", "0.2"]), "0.3");
        assert_eq!(sum(&["10.5", "0.1"]), "10.6");
        assert_eq!(sum(&["0", "1.23456789012345678"]), "1.23456789012345678");
        assert_eq!(sum(&["0.3", "1.23456789012345678"]), "1.53456789012345678");
        assert_eq!(sum(&["3.0e3"]), "3000");
        assert_eq!(sum(&["5", "-5"]), "0");
        assert_eq!(sum(&["-0.5", "0.25"]), "-0.25");
        assert_eq!(
            sum(&["0", "1e308"]),
            "99999999999999999996685879655845645660560099847415567207797047994921734868838061872100126921888539320446747225054013223152134749593960583597420814430196418767959100019603190778663109604507106667939153395788938914560543563061268364901618630217086589253444881623791300855757318142424510452728255046343928578048"
        );
        assert_eq!(
            sum(&["1e308", "1e308"]),
            "199999999999999999993371759311691291321120199694831134415594095989843469737676123744200253843777078640893494450108026446304269499187921167194841628860392837535918200039206381557326219209014213335878306791577877829121087126122536729803237260434173178506889763247582601711514636284849020905456510092687857156096"
        );
        assert_eq!(sum(&["1e-20"]), "0");
        assert_eq!(sum(&["-1e-20"]), "0");
        assert_eq!(sum(&["0x1.8p3"]), "12");
    }

    #[test]
    fn strtold_rounds_to_the_nearest_extended() {
        // 0.1 in extended: 0xCCCCCCCCCCCCCCCD × 2^-67.
        assert_eq!(
            parse(b"0.1"),
            Some(LongDouble::Finite {
                negative: false,
                sig: 0xCCCC_CCCC_CCCC_CCCD,
                exp: -67
            })
        );
        // 2^64 + 1 needs 65 bits: ties to even, down to 2^64.
        assert_eq!(
            parse(b"18446744073709551617"),
            Some(LongDouble::Finite {
                negative: false,
                sig: 1 << 63,
                exp: 1
            })
        );
        // … and 2^64 + 3 up to 2^64 + 4.
        assert_eq!(
            parse(b"18446744073709551619"),
            Some(LongDouble::Finite {
                negative: false,
                sig: (1 << 63) + 2,
                exp: 1
            })
        );
    }

    #[test]
    fn text_is_checked_as_string2ld_checks_it() {
        for bad in [
            "", " 1", "1 ", "nan", "-nan", "1e", "e5", ".", "1x", "0x", "1e99999", "1e-99999",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(
            parse(b"inf"),
            Some(LongDouble::Infinite { negative: false })
        );
        assert_eq!(
            parse(b"-Infinity"),
            Some(LongDouble::Infinite { negative: true })
        );
        assert!(
            parse(b"1e400").is_some(),
            "beyond a double, within an extended"
        );
        assert!(parse(b"1e4933").is_none(), "beyond an extended");
        assert!(parse(b"1e-4940").is_some(), "a subnormal");
        assert!(parse(b".5").is_some() && parse(b"5.").is_some() && parse(b"+5").is_some());
        let inf = parse(b"inf").unwrap();
        assert_eq!(inf.plus(parse(b"-inf").unwrap()), None);
        let max = parse(b"1.18973149535723176502e+4932").unwrap();
        assert_eq!(
            max.plus(max),
            Some(LongDouble::Infinite { negative: false })
        );
    }
}
