//! The last hour of every queue, for the dashboard's charts. A thread of its own samples
//! `TASK.QUEUES` and each queue's `TASK.STATS` over a loopback connection (as the metrics
//! scrape reads them, logged in as `--monitor-user` or the default user) every [`SAMPLE_MS`], and keeps one
//! hour of samples per queue in memory. Depth charts the waiting tasks; throughput is the
//! change of the acknowledged total between samples, per minute.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::html::Series;
use crate::clock::unix_ms;
use crate::globals::Globals;
use crate::loopback::{self, Link};

/// How often the sampler reads the queues, unless `WETASK_DASHBOARD_SAMPLE_MS` (for tests)
/// says otherwise.
pub const SAMPLE_MS: u64 = 10_000;
/// What the charts cover.
pub const WINDOW_MS: u64 = 3_600_000;
/// Most queues whose history is kept (the first in name order).
pub const QUEUES_MAX: usize = 200;
/// Each sample's exchange must end within this.
const DEADLINE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    /// Queued and scheduled tasks.
    pub waiting: u64,
    pub leased: u64,
    pub dead: u64,
    /// The acknowledged total since the shard started.
    pub acked: u64,
}

#[derive(Debug, Default)]
pub struct History {
    queues: BTreeMap<String, VecDeque<Sample>>,
}

impl History {
    /// Adds one round of samples; drops what is older than the window, and queues with no
    /// sample left in it.
    pub fn record(&mut self, at_ms: u64, round: Vec<(String, Sample)>) {
        for (name, sample) in round {
            if !self.queues.contains_key(&name) && self.queues.len() >= QUEUES_MAX {
                continue;
            }
            self.queues.entry(name).or_default().push_back(sample);
        }
        let oldest = at_ms.saturating_sub(WINDOW_MS);
        self.queues.retain(|_, samples| {
            while samples.front().is_some_and(|s| s.at_ms < oldest) {
                samples.pop_front();
            }
            !samples.is_empty()
        });
    }

    /// When the oldest sample kept was taken (the charts start there, within the hour).
    pub fn oldest_ms(&self) -> Option<u64> {
        self.queues
            .values()
            .filter_map(|s| s.front())
            .map(|s| s.at_ms)
            .min()
    }

    /// The `lines` queues with the most waiting tasks, then the most acknowledged: their
    /// depth, and their throughput (acknowledged per minute between samples; a total that
    /// fell, after a restart, counts as none).
    /// Only queues `shown` lets through are charted (those the viewer may read).
    pub fn series(&self, lines: usize, shown: &dyn Fn(&str) -> bool) -> (Vec<Series>, Vec<Series>) {
        let mut ranked: Vec<(&String, &VecDeque<Sample>)> =
            self.queues.iter().filter(|(name, _)| shown(name)).collect();
        ranked.sort_by_key(|(name, samples)| {
            let last = samples.back().copied().unwrap_or_default();
            (
                std::cmp::Reverse((last.waiting, last.acked)),
                (*name).clone(),
            )
        });
        let mut depth = Vec::new();
        let mut throughput = Vec::new();
        for (name, samples) in ranked.into_iter().take(lines) {
            depth.push(Series {
                name: name.clone(),
                points: samples
                    .iter()
                    .map(|s| (s.at_ms, s.waiting as f64))
                    .collect(),
            });
            let rates = samples
                .iter()
                .zip(samples.iter().skip(1))
                .map(|(a, b)| {
                    let span = b.at_ms.saturating_sub(a.at_ms).max(1) as f64;
                    let done = b.acked.saturating_sub(a.acked) as f64;
                    (b.at_ms, done * 60_000.0 / span)
                })
                .collect();
            throughput.push(Series {
                name: name.clone(),
                points: rates,
            });
        }
        (depth, throughput)
    }
}

/// How often to sample: [`SAMPLE_MS`], or `WETASK_DASHBOARD_SAMPLE_MS` (50 ms at least).
pub fn sample_every() -> Duration {
    let ms = std::env::var("WETASK_DASHBOARD_SAMPLE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(SAMPLE_MS, |ms| ms.max(50));
    Duration::from_millis(ms)
}

/// Starts the sampler thread; it ends when the server shuts down.
pub fn spawn(globals: Arc<Globals>, history: Arc<Mutex<History>>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("dashboard-history".into())
        .spawn(move || sample_forever(&globals, &history))
        .map(|_| ())
        .map_err(|e| format!("cannot start the dashboard's sampler: {e}"))
}

fn sample_forever(globals: &Globals, history: &Mutex<History>) {
    let every = sample_every();
    let mut link: Option<Link> = None;
    let mut failing = false;
    while !globals.shutting_down() {
        match sample_once(globals, &mut link) {
            Ok((at_ms, round)) => {
                failing = false;
                history.lock().expect("history").record(at_ms, round);
            }
            Err(err) => {
                link = None;
                if !failing {
                    tracing::warn!("dashboard history: cannot sample the queues: {err}");
                }
                failing = true;
            }
        }
        std::thread::sleep(every);
    }
}

/// One round: when it was read, and each queue's sample.
fn sample_once(
    globals: &Globals,
    link: &mut Option<Link>,
) -> Result<(u64, Vec<(String, Sample)>), String> {
    if link.is_none() {
        *link = Some(loopback::helper(
            globals,
            "wetask-dashboard-history",
            DEADLINE,
        )?);
    }
    let link = link.as_mut().expect("connected");
    link.set_deadline(DEADLINE);
    let names = loopback::queue_names(link, QUEUES_MAX)?;
    let stats = loopback::queue_stats(link, &names)?;
    let at_ms = unix_ms();
    let mut round = Vec::with_capacity(names.len());
    for (name, stats) in names.into_iter().zip(stats) {
        let mut sample = Sample {
            at_ms,
            ..Sample::default()
        };
        for (field, n) in stats? {
            let n = n.max(0) as u64;
            match field.as_str() {
                "queued" | "scheduled" => sample.waiting += n,
                "leased" => sample.leased = n,
                "dead" => sample.dead = n,
                "acked" => sample.acked = n,
                _ => {}
            }
        }
        round.push((name, sample));
    }
    Ok((at_ms, round))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64, waiting: u64, acked: u64) -> Sample {
        Sample {
            at_ms,
            waiting,
            acked,
            ..Sample::default()
        }
    }

    #[test]
    fn throughput_is_the_acked_change_per_minute_and_a_restart_counts_as_none() {
        let mut h = History::default();
        h.record(0, vec![("q".into(), sample(0, 5, 100))]);
        h.record(30_000, vec![("q".into(), sample(30_000, 3, 130))]);
        h.record(60_000, vec![("q".into(), sample(60_000, 3, 10))]);
        let (depth, throughput) = h.series(8, &|_| true);
        assert_eq!(
            depth[0].points,
            vec![(0, 5.0), (30_000, 3.0), (60_000, 3.0)]
        );
        assert_eq!(throughput[0].points, vec![(30_000, 60.0), (60_000, 0.0)]);
    }

    #[test]
    fn only_the_last_hour_is_kept_and_the_busiest_queues_come_first() {
        let mut h = History::default();
        h.record(0, vec![("old".into(), sample(0, 9, 0))]);
        let later = WINDOW_MS + 1;
        h.record(
            later,
            vec![
                ("a".into(), sample(later, 1, 0)),
                ("b".into(), sample(later, 4, 0)),
            ],
        );
        let (depth, _) = h.series(8, &|_| true);
        let names: Vec<&str> = depth.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["b", "a"],
            "old fell out of the window; b waits most"
        );
        assert_eq!(h.series(1, &|_| true).0.len(), 1);
    }
}
