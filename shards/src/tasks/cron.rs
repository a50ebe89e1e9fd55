//! Schedules for TASK.CRON: five-field cron lines (minute hour day-of-month month
//! day-of-week, in UTC, with `*`, lists, ranges and steps, and the usual `@hourly`-style
//! names) and fixed intervals (`@every 30s`). A schedule is a function from a time to the next
//! tick after it; ticks are absolute instants (an interval's are the multiples of it since the
//! Unix epoch), so every definition of one schedule names the same ticks, whoever defines it
//! and however often the server restarts.

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every this many ms, at the multiples of it since the epoch.
    Every(u64),
    Cron(CronFields),
}

/// The allowed values of each cron field, as bit sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronFields {
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday 0 (7 is read as Sunday too).
    weekdays: u8,
    /// Day-of-month or day-of-week was `*`: cron's rule is that when both are restricted a
    /// day matches either, otherwise both.
    days_any: bool,
    weekdays_any: bool,
}

/// The shortest interval `@every` takes.
pub const EVERY_MS_MIN: u64 = 10;
const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;

/// Reads one field: `*`, `n`, `a-b`, any of them `/step`, comma lists. `names` maps words
/// (jan, mon …) to numbers.
fn field(text: &str, min: u32, max: u32, names: &[&str], name_base: u32) -> Result<u64, String> {
    let value = |word: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(word)) {
            return Ok(name_base + i as u32);
        }
        word.parse::<u32>()
            .ok()
            .filter(|v| (min..=max).contains(v))
            .ok_or_else(|| format!("'{word}' is not {min}..{max}"))
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("bad step in '{part}'"))?;
                (range, step)
            }
            None => (part, 1),
        };
        let (low, high) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `n/step` runs from n to the field's end, as in Vixie cron.
            (v, if step > 1 { max } else { v })
        };
        if low > high {
            return Err(format!("empty range '{range}'"));
        }
        let mut v = low;
        while v <= high {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        let line = match text.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".into(),
            "@weekly" => "0 0 * * 0".into(),
            "@daily" | "@midnight" => "0 0 * * *".into(),
            "@hourly" => "0 * * * *".into(),
            lower => {
                if let Some(every) = lower.strip_prefix("@every") {
                    return Schedule::every(every.trim());
                }
                text.to_string()
            }
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(
                "a cron line has 5 fields: minute hour day-of-month month day-of-week".into(),
            );
        };
        let weekdays = field(weekday, 0, 7, &WEEKDAYS, 0)?;
        Ok(Schedule::Cron(CronFields {
            minutes: field(minute, 0, 59, &[], 0)?,
            hours: field(hour, 0, 23, &[], 0)? as u32,
            days: field(day, 1, 31, &[], 0)? as u32,
            months: field(month, 1, 12, &MONTHS, 1)? as u16,
            weekdays: ((weekdays | (weekdays >> 7)) & 0x7f) as u8,
            days_any: day == "*",
            weekdays_any: weekday == "*",
        }))
    }

    /// `@every 500ms`, `30s`, `5m`, `2h`, `1d`, or bare ms.
    fn every(text: &str) -> Result<Schedule, String> {
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let n: u64 = number
            .parse()
            .map_err(|_| format!("'@every {text}' needs a number"))?;
        let scale = match unit {
            "" | "ms" => 1,
            "s" => 1000,
            "m" => MINUTE_MS,
            "h" => 60 * MINUTE_MS,
            "d" => DAY_MS,
            _ => return Err(format!("unknown unit '{unit}' (ms, s, m, h, d)")),
        };
        match n.checked_mul(scale) {
            Some(ms) if ms >= EVERY_MS_MIN => Ok(Schedule::Every(ms)),
            _ => Err(format!("@every must be {EVERY_MS_MIN} ms or more")),
        }
    }

    /// The first tick strictly after `t_ms` (`None`: never, e.g. February 30th).
    pub fn next_after(&self, t_ms: u64) -> Option<u64> {
        match self {
            Schedule::Every(ms) => (t_ms / ms).checked_add(1)?.checked_mul(*ms),
            Schedule::Cron(fields) => fields.next_after(t_ms),
        }
    }
}

/// (year, month 1..=12, day 1..=31) of a day number since 1970-01-01 (Howard Hinnant's
/// civil-from-days).
pub fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl CronFields {
    fn day_matches(&self, days: i64) -> bool {
        let (_, month, day) = civil(days);
        if self.months & (1 << month) == 0 {
            return false;
        }
        // 1970-01-01 was a Thursday.
        let weekday = (days + 4).rem_euclid(7) as u32;
        let by_day = self.days & (1 << day) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        match (self.days_any, self.weekdays_any) {
            (false, false) => by_day || by_weekday,
            _ => by_day && by_weekday,
        }
    }

    fn next_after(&self, t_ms: u64) -> Option<u64> {
        // The next whole minute after t.
        let start = (t_ms / MINUTE_MS + 1) * MINUTE_MS;
        let first_day = (start / DAY_MS) as i64;
        let first_minute = (start % DAY_MS) / MINUTE_MS;
        // Every date pattern comes back within 40 years (February 29th on a given weekday
        // takes the longest, 28 years); past that the schedule never ticks.
        for day in first_day..first_day + 366 * 40 {
            if !self.day_matches(day) {
                continue;
            }
            let from = if day == first_day { first_minute } else { 0 };
            for m in from..(24 * 60) {
                let (hour, minute) = (m / 60, m % 60);
                if self.hours & (1 << hour) != 0 && self.minutes & (1 << minute) != 0 {
                    return Some(day as u64 * DAY_MS + m * MINUTE_MS);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-02T10:17:31Z
    const T: u64 = 1_796_206_651_000;

    fn at(iso_day: i64, hour: u64, minute: u64) -> u64 {
        iso_day as u64 * DAY_MS + hour * 3_600_000 + minute * MINUTE_MS
    }

    /// Days since the epoch of a date, by counting (a check independent of `civil`).
    fn days_of(year: i64, month: u32, day: u32) -> i64 {
        let mut d = 0i64;
        for y in 1970..year {
            d += if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
                366
            } else {
                365
            };
        }
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let lengths = [
            31,
            if leap { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        d += lengths[..(month - 1) as usize].iter().sum::<i64>();
        d + i64::from(day) - 1
    }

    #[test]
    fn civil_dates_match_counting() {
        for (y, m, d) in [
            (1970, 1, 1),
            (2000, 2, 29),
            (2026, 12, 2),
            (2100, 3, 1),
            (2024, 12, 31),
        ] {
            assert_eq!(civil(days_of(y, m, d)), (y, m, d));
        }
    }

    #[test]
    fn intervals_tick_on_multiples_of_the_epoch() {
        let every = Schedule::parse("@every 30s").unwrap();
        assert_eq!(every, Schedule::Every(30_000));
        assert_eq!(every.next_after(T), Some(1_796_206_680_000));
        assert_eq!(every.next_after(1_796_206_680_000), Some(1_796_206_710_000));
        assert_eq!(
            Schedule::parse("@every 250ms").unwrap(),
            Schedule::Every(250)
        );
        assert!(Schedule::parse("@every 5ms").is_err());
        assert!(Schedule::parse("@every 3 weeks").is_err());
    }

    #[test]
    fn cron_lines_find_the_next_matching_minute_in_utc() {
        let today = days_of(2026, 12, 2);
        let next = |line: &str| Schedule::parse(line).unwrap().next_after(T).unwrap();
        assert_eq!(next("* * * * *"), at(today, 10, 18));
        assert_eq!(next("*/15 * * * *"), at(today, 10, 30));
        assert_eq!(next("0 9 * * *"), at(today + 1, 9, 0));
        assert_eq!(next("@hourly"), at(today, 11, 0));
        assert_eq!(next("@daily"), at(today + 1, 0, 0));
        // 2026-12-02 is a Wednesday; the next Monday is the 7th.
        assert_eq!(next("30 8 * * mon"), at(days_of(2026, 12, 7), 8, 30));
        assert_eq!(next("0 0 1 jan *"), at(days_of(2027, 1, 1), 0, 0));
        assert_eq!(next("0 12 29 2 *"), at(days_of(2028, 2, 29), 12, 0));
        // Both day fields restricted: either matches (the 10th, or a Friday: the 4th).
        assert_eq!(next("0 0 10 * 5"), at(days_of(2026, 12, 4), 0, 0));
        assert_eq!(
            next("0 0 * * 7"),
            at(days_of(2026, 12, 6), 0, 0),
            "7 is Sunday"
        );
        assert_eq!(next("5-10/5 22 * * *"), at(today, 22, 5));
        assert_eq!(Schedule::parse("0 0 30 2 *").unwrap().next_after(T), None);
    }

    #[test]
    fn bad_lines_are_refused_with_a_reason() {
        for line in [
            "",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "*/0 * * * *",
            "5-1 * * * *",
            "x * * * *",
        ] {
            assert!(Schedule::parse(line).is_err(), "{line:?}");
        }
    }
}
