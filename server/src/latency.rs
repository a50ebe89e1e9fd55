//! The latency monitor (LATENCY LATEST | HISTORY | RESET | DOCTOR | GRAPH | HELP): off until
//! `latency-monitor-threshold` is set to some milliseconds, as in Redis; then every command
//! that takes at least that long is a sample of the event `command` (or `fast-command` for
//! the O(1) commands Redis flags fast), one sample per event and second (the second's worst),
//! the last 160 kept. The commands are timed where SLOWLOG times them (`slowlog`), so the
//! monitor costs nothing more while it is off. Redis also samples forks, AOF writes and
//! expiry cycles; those do not exist here or run elsewhere, so only the two command events
//! appear. GRAPH's ASCII chart is not drawn (an error says so).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::args::is;
use wetask_shards::errors::{unknown_subcommand, wrong_arity};

/// Samples kept per event (Redis's LATENCY_TS_LEN).
const SAMPLES_MAX: usize = 160;

const HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
];

const DISABLED: &str = "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n";
const NO_SPIKES: &str = "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sleep better.\n";

#[derive(Default)]
struct Event {
    /// (unix seconds, milliseconds), oldest first.
    samples: VecDeque<(i64, u64)>,
    max_ms: u64,
}

#[derive(Default)]
pub struct LatencyMonitor {
    /// `latency-monitor-threshold` in ms; 0: off.
    pub threshold_ms: AtomicU64,
    events: Mutex<BTreeMap<&'static str, Event>>,
}

impl LatencyMonitor {
    /// Notes a command that took `micros` if it reaches the threshold.
    pub fn sample(&self, fast: bool, micros: u64) {
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        let ms = micros / 1000;
        if threshold == 0 || ms < threshold {
            return;
        }
        let now = (crate::clock::unix_ms() / 1000) as i64;
        let name = if fast { "fast-command" } else { "command" };
        let mut events = self.events.lock().expect("latency");
        let event = events.entry(name).or_default();
        match event.samples.back_mut() {
            Some((at, worst)) if *at == now => *worst = (*worst).max(ms),
            _ => {
                event.samples.push_back((now, ms));
                if event.samples.len() > SAMPLES_MAX {
                    event.samples.pop_front();
                }
            }
        }
        event.max_ms = event.max_ms.max(ms);
    }

    /// LATENCY's subcommands but HISTOGRAM (`commands::info::latency_histogram`).
    pub fn command(&self, args: &[Bytes]) -> Frame {
        let sub = &args[1];
        let known = [
            ("latest", 2..=2),
            ("history", 3..=3),
            ("reset", 2..=usize::MAX),
            ("doctor", 2..=2),
            ("graph", 3..=3),
            ("help", 2..=2),
            ("histogram", 2..=usize::MAX),
        ];
        let Some((name, arity)) = known.into_iter().find(|(name, _)| is(sub, name)) else {
            return unknown_subcommand("latency", sub);
        };
        if !arity.contains(&args.len()) {
            return wrong_arity(&format!("latency|{name}"));
        }
        let mut events = self.events.lock().expect("latency");
        match name {
            "latest" => latest(&events),
            "history" => history(&events, &args[2]),
            "reset" if args.len() == 2 => {
                let count = events.len();
                events.clear();
                Frame::Integer(count as i64)
            }
            "reset" => {
                let before = events.len();
                events.retain(|name, _| !args[2..].iter().any(|a| is(a, name)));
                Frame::Integer((before - events.len()) as i64)
            }
            "doctor" => Frame::Verbatim(*b"txt", Bytes::from(self.doctor(&events))),
            "graph" => match events.iter().find(|(n, _)| is(&args[2], n)) {
                Some((name, event)) => {
                    let now = (crate::clock::unix_ms() / 1000) as i64;
                    Frame::Verbatim(*b"txt", Bytes::from(graph(name, event, now)))
                }
                None => Frame::error(format!(
                    "ERR No samples available for event '{}'",
                    String::from_utf8_lossy(&args[2])
                )),
            },
            "histogram" => {
                unreachable!("LATENCY HISTOGRAM gathers from every shard (commands::info)")
            }
            _ => Frame::Array(
                HELP.iter()
                    .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
                    .collect(),
            ),
        }
    }

    fn doctor(&self, events: &BTreeMap<&'static str, Event>) -> String {
        if self.threshold_ms.load(Ordering::Relaxed) == 0 {
            return DISABLED.to_string();
        }
        if events.values().all(|e| e.samples.is_empty()) {
            return NO_SPIKES.to_string();
        }
        let mut report = String::from(
            "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n",
        );
        for (i, (name, event)) in events.iter().enumerate() {
            let n = event.samples.len().max(1) as f64;
            let avg = event.samples.iter().map(|(_, ms)| *ms as f64).sum::<f64>() / n;
            let mad = event
                .samples
                .iter()
                .map(|(_, ms)| (*ms as f64 - avg).abs())
                .sum::<f64>()
                / n;
            let span = match (event.samples.front(), event.samples.back()) {
                (Some((first, _)), Some((last, _))) => (last - first).max(1) as f64,
                _ => 1.0,
            };
            report += &format!(
                "{}. {name}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.\n",
                i + 1,
                event.samples.len(),
                avg as u64,
                mad as u64,
                span / n,
                event.max_ms
            );
        }
        report += "\nI have a few advices for you:\n\n- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n";
        report
    }
}

/// LATEST: each event's newest sample and its worst ever.
fn latest(events: &BTreeMap<&'static str, Event>) -> Frame {
    Frame::Array(
        events
            .iter()
            .filter_map(|(name, e)| {
                let (at, ms) = *e.samples.back()?;
                Some(Frame::Array(vec![
                    Frame::Bulk(Bytes::from_static(name.as_bytes())),
                    Frame::Integer(at),
                    Frame::Integer(ms as i64),
                    Frame::Integer(e.max_ms as i64),
                ]))
            })
            .collect(),
    )
}

/// HISTORY event: its samples, oldest first (none for an unknown event).
fn history(events: &BTreeMap<&'static str, Event>, name: &[u8]) -> Frame {
    let samples = event_named(events, name).map(|e| &e.samples);
    Frame::Array(
        samples
            .into_iter()
            .flatten()
            .map(|(at, ms)| Frame::Array(vec![Frame::Integer(*at), Frame::Integer(*ms as i64)]))
            .collect(),
    )
}

/// Columns of LATENCY GRAPH's chart, and its rows of bars (Redis's).
const GRAPH_COLUMNS: usize = 80;
const GRAPH_ROWS: usize = 4;

/// LATENCY GRAPH: Redis's header line, a rule, then the samples as a filled sparkline of
/// `GRAPH_ROWS` rows with each sample's age (`12s`, `3m`, `2h`, `1d`) written downwards
/// under it, `GRAPH_COLUMNS` samples a block.
fn graph(name: &str, event: &Event, now: i64) -> String {
    let ages: Vec<(f64, String)> = event
        .samples
        .iter()
        .map(|&(at, ms)| {
            let elapsed = (now - at).max(0);
            let age = match elapsed {
                e if e < 60 => format!("{e}s"),
                e if e < 3600 => format!("{}m", e / 60),
                e if e < 86_400 => format!("{}h", e / 3600),
                e => format!("{}d", e / 86_400),
            };
            (ms as f64, age)
        })
        .collect();
    let low = ages.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let high = ages.iter().map(|s| s.0).fold(0.0, f64::max);
    let low = if ages.is_empty() { 0.0 } else { low };
    let mut out = format!(
        "{name} - high {} ms, low {} ms (all time high {} ms)\n{}\n",
        high as u64,
        low as u64,
        event.max_ms,
        "-".repeat(GRAPH_COLUMNS)
    );
    for (block, chunk) in ages.chunks(GRAPH_COLUMNS).enumerate() {
        if block > 0 {
            out.push('\n');
        }
        sparkline(&mut out, chunk, low, high);
    }
    out
}

/// One block of a filled sparkline: each sample a column `GRAPH_ROWS` characters high
/// (`_`, `o`, `#` at the top of a bar, `|` below it), scaled between the sequence's low and
/// high as Redis scales it; then a blank row and each sample's label downwards.
fn sparkline(out: &mut String, samples: &[(f64, String)], low: f64, high: f64) {
    const FILL: [char; 3] = ['_', 'o', '#'];
    let range = if high - low == 0.0 { 1.0 } else { high - low };
    let steps = FILL.len() * GRAPH_ROWS;
    let heights: Vec<i64> = samples
        .iter()
        .map(|(value, _)| {
            // Redis truncates the scaled value before it divides.
            let scaled = ((value - low) * steps as f64) as i64 as f64;
            ((scaled / range) as i64).clamp(0, steps as i64 - 1)
        })
        .collect();
    for row in 0..GRAPH_ROWS {
        let line: String = heights
            .iter()
            .map(
                |&step| match step - ((GRAPH_ROWS - row - 1) * FILL.len()) as i64 {
                    at @ 0..=2 => FILL[at as usize],
                    at if at > 2 => '|',
                    _ => ' ',
                },
            )
            .collect();
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&" ".repeat(samples.len()));
    out.push('\n');
    let longest = samples.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    for i in 0..longest {
        let line: String = samples
            .iter()
            .map(|(_, label)| label.as_bytes().get(i).map_or(' ', |&b| b as char))
            .collect();
        out.push_str(&line);
        out.push('\n');
    }
}

fn event_named<'a>(events: &'a BTreeMap<&'static str, Event>, name: &[u8]) -> Option<&'a Event> {
    events.iter().find(|(n, _)| is(name, n)).map(|(_, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_is_drawn_as_redis_draws_it() {
        // A redis-server 7.0 drew this for samples of 48 ms (1 s ago) and 141 ms (now).
        let event = Event {
            samples: [(99, 48), (100, 141)].into_iter().collect(),
            max_ms: 141,
        };
        let expected = "command - high 141 ms, low 48 ms (all time high 141 ms)\n".to_string()
            + &"-".repeat(80)
            + "\n #\n |\n |\n_|\n  \n10\nss\n";
        assert_eq!(graph("command", &event, 100), expected);
        // Twelve steps over four rows: 3 is the second row's `_`, the top is 11 (`#`).
        let event = Event {
            samples: [(40, 0), (40, 3), (40, 6), (40, 12)].into_iter().collect(),
            max_ms: 12,
        };
        let drawn = graph("fast-command", &event, 100);
        let rows: Vec<&str> = drawn.lines().skip(2).take(4).collect();
        assert_eq!(rows, ["   #", "  _|", " _||", "_|||"]);
        assert!(drawn.ends_with("    \n1111\nmmmm\n"));
    }
}
