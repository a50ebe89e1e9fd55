//! Per-shard counters for INFO. Each shard counts its own commands with plain cells (no
//! atomics on the hot path); INFO gathers a report from every shard.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use wetask_shards::{CommandSpec, COMMANDS};

#[derive(Default, Clone, Copy, Debug)]
pub struct CommandCounts {
    pub calls: u64,
    pub failed: u64,
    pub rejected: u64,
    /// Microseconds spent in the command (kept in ticks apart while counting).
    pub time: u64,
}

/// Latency buckets per command: powers of two of cycle-counter ticks, up to 2^47 (minutes).
pub const TICK_BUCKETS: usize = 48;

/// One command's time: its ticks in all, and how many calls fell in each bucket.
struct CommandTime {
    ticks: Cell<u64>,
    buckets: [Cell<u32>; TICK_BUCKETS],
}

impl Default for CommandTime {
    fn default() -> Self {
        CommandTime {
            ticks: Cell::new(0),
            buckets: std::array::from_fn(|_| Cell::new(0)),
        }
    }
}

impl CommandTime {
    fn reset(&self) {
        self.ticks.set(0);
        self.buckets.iter().for_each(|b| b.set(0));
    }
}

pub struct ShardStats {
    pub commands: Cell<u64>,
    /// Indexed by the command's row in the command table: O(1) per command.
    per_command: RefCell<Vec<CommandCounts>>,
    /// Each command's time in cycle-counter ticks and its latency histogram, apart from the
    /// counts: added for every command, so plain cells, no `RefCell` flag to set and clear.
    per_command_time: Box<[CommandTime]>,
    pub net_input_bytes: Cell<u64>,
    pub net_output_bytes: Cell<u64>,
    /// Receives and sends completed on the network (INFO's `total_reads_processed` and
    /// `total_writes_processed`).
    pub net_reads: Cell<u64>,
    pub net_writes: Cell<u64>,
    /// io_uring_enter calls on the network ring, and times the driver slept in it.
    pub ring_enters: Cell<u64>,
    pub ring_sleeps: Cell<u64>,
    /// Under `appendfsync always`: the ring's journal fsyncs, the µs they took in all, and
    /// the sends they held back (`net::held_sends`).
    pub ring_fsyncs: Cell<u64>,
    pub ring_fsync_us: Cell<u64>,
    pub held_sends: Cell<u64>,
    /// Counter samples for INFO's `instantaneous_*` rates.
    rates: RefCell<Rates>,
}

/// Redis's "instantaneous" rates: a sample of the counters every 100 ms, a rate over the
/// last 16 of them (1.6 s).
const SAMPLE_EVERY_MS: u64 = 100;
const SAMPLES: usize = 16;

#[derive(Default, Clone, Copy)]
struct Sample {
    at_ms: u64,
    commands: u64,
    input: u64,
    output: u64,
}

#[derive(Default)]
struct Rates {
    samples: [Sample; SAMPLES],
    taken: usize,
}

/// Commands per second and input and output kilobytes per second, over about 1.6 s.
#[derive(Default, Clone, Copy, Debug)]
pub struct Instantaneous {
    pub ops_per_sec: f64,
    pub input_kbps: f64,
    pub output_kbps: f64,
}

impl Default for ShardStats {
    fn default() -> Self {
        ShardStats {
            commands: Cell::new(0),
            per_command: RefCell::new(vec![CommandCounts::default(); COMMANDS.len()]),
            per_command_time: (0..COMMANDS.len())
                .map(|_| CommandTime::default())
                .collect(),
            net_input_bytes: Cell::new(0),
            net_output_bytes: Cell::new(0),
            net_reads: Cell::new(0),
            net_writes: Cell::new(0),
            ring_enters: Cell::new(0),
            ring_sleeps: Cell::new(0),
            ring_fsyncs: Cell::new(0),
            ring_fsync_us: Cell::new(0),
            held_sends: Cell::new(0),
            rates: RefCell::new(Rates::default()),
        }
    }
}

impl ShardStats {
    /// A receive of `bytes` completed.
    pub fn received(&self, bytes: u64) {
        self.net_input_bytes.set(self.net_input_bytes.get() + bytes);
        self.net_reads.set(self.net_reads.get() + 1);
    }

    /// A send of `bytes` completed.
    pub fn sent(&self, bytes: u64) {
        self.net_output_bytes
            .set(self.net_output_bytes.get() + bytes);
        self.net_writes.set(self.net_writes.get() + 1);
    }

    fn now(&self, at_ms: u64) -> Sample {
        Sample {
            at_ms,
            commands: self.commands.get(),
            input: self.net_input_bytes.get(),
            output: self.net_output_bytes.get(),
        }
    }

    /// Takes a sample of the counters if the last is 100 ms old (called every loop turn);
    /// true when it did.
    pub fn sample(&self, now_ms: u64) -> bool {
        let mut rates = self.rates.borrow_mut();
        let newest = rates
            .taken
            .checked_sub(1)
            .map(|i| rates.samples[i % SAMPLES]);
        if newest.is_some_and(|s| now_ms < s.at_ms + SAMPLE_EVERY_MS) {
            return false;
        }
        let slot = rates.taken % SAMPLES;
        rates.samples[slot] = self.now(now_ms);
        rates.taken += 1;
        true
    }

    /// The rates from the oldest sample kept to now (zero before any sample).
    pub fn instantaneous(&self, now_ms: u64) -> Instantaneous {
        let rates = self.rates.borrow();
        let kept = rates.taken.min(SAMPLES);
        let Some(oldest) = (0..kept).map(|i| rates.samples[i]).min_by_key(|s| s.at_ms) else {
            return Instantaneous::default();
        };
        let now = self.now(now_ms);
        let seconds = now_ms.saturating_sub(oldest.at_ms).max(1) as f64 / 1000.0;
        Instantaneous {
            ops_per_sec: now.commands.saturating_sub(oldest.commands) as f64 / seconds,
            input_kbps: now.input.saturating_sub(oldest.input) as f64 / 1024.0 / seconds,
            output_kbps: now.output.saturating_sub(oldest.output) as f64 / 1024.0 / seconds,
        }
    }

    pub fn record(&self, spec: &'static CommandSpec, failed: bool) {
        self.commands.set(self.commands.get() + 1);
        let mut counts = self.per_command.borrow_mut();
        let counts = &mut counts[spec.index()];
        counts.calls += 1;
        counts.failed += u64::from(failed);
    }

    /// Adds `ticks` (from `slowlog::ticks`) to the command's time (INFO commandstats' usec)
    /// and counts it in its power-of-two bucket (LATENCY HISTOGRAM).
    #[inline]
    pub fn add_time(&self, spec: &'static CommandSpec, ticks: u64) {
        let time = &self.per_command_time[spec.index()];
        time.ticks.set(time.ticks.get() + ticks);
        let bucket = ((u64::BITS - ticks.leading_zeros()) as usize).min(TICK_BUCKETS - 1);
        let count = &time.buckets[bucket];
        count.set(count.get().wrapping_add(1));
    }

    /// Each called command's latency buckets (by ticks: bucket b counts times under 2^b).
    pub fn histograms(&self) -> BTreeMap<&'static str, Vec<u64>> {
        COMMANDS
            .iter()
            .zip(self.per_command_time.iter())
            .filter(|(_, t)| t.buckets.iter().any(|b| b.get() > 0))
            .map(|(spec, t)| {
                let buckets = t.buckets.iter().map(|b| u64::from(b.get())).collect();
                (spec.name, buckets)
            })
            .collect()
    }

    pub fn record_rejected(&self, spec: &'static CommandSpec) {
        self.per_command.borrow_mut()[spec.index()].rejected += 1;
    }

    /// Counters of the commands called at least once, by name, their time in microseconds
    /// (`ticks_per_us`: the cycle counter's calibrated rate).
    pub fn per_command(&self, ticks_per_us: u64) -> BTreeMap<&'static str, CommandCounts> {
        let counts = self.per_command.borrow();
        COMMANDS
            .iter()
            .zip(counts.iter().zip(self.per_command_time.iter()))
            .filter(|(_, (c, _))| c.calls + c.rejected > 0)
            .map(|(spec, (c, ticks))| {
                let time = ticks.ticks.get() / ticks_per_us.max(1);
                (spec.name, CommandCounts { time, ..*c })
            })
            .collect()
    }

    pub fn reset(&self) {
        self.commands.set(0);
        self.per_command.borrow_mut().fill(CommandCounts::default());
        self.per_command_time.iter().for_each(CommandTime::reset);
        self.net_input_bytes.set(0);
        self.net_output_bytes.set(0);
        self.net_reads.set(0);
        self.net_writes.set(0);
        // The samples hold the counters from before: rates start again.
        *self.rates.borrow_mut() = Rates::default();
        self.ring_enters.set(0);
        self.ring_sleeps.set(0);
        self.ring_fsyncs.set(0);
        self.ring_fsync_us.set(0);
        self.held_sends.set(0);
    }
}

/// What one shard reports to INFO.
#[derive(Default, Clone, Debug)]
pub struct ShardReport {
    pub commands: u64,
    pub per_command: BTreeMap<&'static str, CommandCounts>,
    pub keyspace: Vec<(usize, usize, usize)>,
    pub expired_keys: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub ring_enters: u64,
    pub ring_sleeps: u64,
    pub ring_fsyncs: u64,
    pub ring_fsync_us: u64,
    pub held_sends: u64,
    pub mesh_envelopes: u64,
    pub mesh_messages: u64,
    pub tasks: wetask_shards::tasks::Totals,
    /// Every queue with its numbers (a queue lives on one shard).
    pub queues: Vec<(bytes::Bytes, wetask_shards::tasks::QueueStats)>,
    /// Clients with a blocking pop parked here (a client waiting on keys of several shards
    /// is on several shards' lists: INFO counts it once).
    pub blocked_clients: Vec<u64>,
    /// Keys with blocked clients, and those of them also answered when the key goes away
    /// (a key lives on one shard, so the shards' counts add up).
    pub blocking_keys: (usize, usize),
    /// Channels and patterns with subscribers here (INFO counts each name once).
    pub pubsub_channels: Vec<bytes::Bytes>,
    pub pubsub_patterns: Vec<bytes::Bytes>,
    /// Bytes the shard's Lua state holds (0 when it has none).
    pub lua_memory: u64,
    /// Keys removed by `maxmemory` eviction.
    pub evicted_keys: u64,
    /// One `INFO shards` line per shard: what it is waiting on (see `ShardCtx::report`).
    pub shard_lines: Vec<String>,
    /// Bytes in the shard's journal file, and taken from the shard but not yet written.
    pub journal_bytes: u64,
    pub journal_pending: u64,
    /// Writes journaled since the start (INFO's `rdb_changes_since_last_save`).
    pub journal_records: u64,
    pub instantaneous: Instantaneous,
    pub reads: u64,
    pub writes: u64,
    /// Read commands' key lookups that found their key, and that did not.
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    /// CLIENT TRACKING: this shard's tracking connections; the keys and (client, key)
    /// entries in its table; and the prefixes of broadcast clients (every shard knows all
    /// of them: INFO takes the largest count, not the sum).
    pub tracking_clients: u64,
    pub tracking_keys: u64,
    pub tracking_items: u64,
    pub tracking_prefixes: u64,
    /// Each command's latency buckets (`ShardStats::histograms`).
    pub histograms: BTreeMap<&'static str, Vec<u64>>,
}

impl ShardReport {
    pub fn merge(&mut self, other: ShardReport) {
        self.commands += other.commands;
        self.shard_lines.extend(other.shard_lines);
        for (name, counts) in other.per_command {
            let mine = self.per_command.entry(name).or_default();
            mine.calls += counts.calls;
            mine.failed += counts.failed;
            mine.rejected += counts.rejected;
            mine.time += counts.time;
        }
        for (db, keys, volatile) in other.keyspace {
            match self.keyspace.iter_mut().find(|(d, _, _)| *d == db) {
                Some(entry) => {
                    entry.1 += keys;
                    entry.2 += volatile;
                }
                None => self.keyspace.push((db, keys, volatile)),
            }
        }
        self.keyspace.sort();
        self.expired_keys += other.expired_keys;
        self.journal_bytes += other.journal_bytes;
        self.journal_pending += other.journal_pending;
        self.journal_records += other.journal_records;
        self.instantaneous.ops_per_sec += other.instantaneous.ops_per_sec;
        self.instantaneous.input_kbps += other.instantaneous.input_kbps;
        self.instantaneous.output_kbps += other.instantaneous.output_kbps;
        self.keyspace_hits += other.keyspace_hits;
        self.reads += other.reads;
        self.writes += other.writes;
        self.keyspace_misses += other.keyspace_misses;
        self.lua_memory += other.lua_memory;
        self.tracking_clients += other.tracking_clients;
        self.tracking_keys += other.tracking_keys;
        self.tracking_items += other.tracking_items;
        self.tracking_prefixes = self.tracking_prefixes.max(other.tracking_prefixes);
        for (name, buckets) in other.histograms {
            let mine = self
                .histograms
                .entry(name)
                .or_insert_with(|| vec![0; buckets.len()]);
            mine.iter_mut().zip(buckets).for_each(|(m, b)| *m += b);
        }
        self.evicted_keys += other.evicted_keys;
        self.net_input_bytes += other.net_input_bytes;
        self.net_output_bytes += other.net_output_bytes;
        self.ring_enters += other.ring_enters;
        self.ring_sleeps += other.ring_sleeps;
        self.ring_fsyncs += other.ring_fsyncs;
        self.ring_fsync_us += other.ring_fsync_us;
        self.held_sends += other.held_sends;
        self.mesh_envelopes += other.mesh_envelopes;
        self.mesh_messages += other.mesh_messages;
        self.tasks.add(&other.tasks);
        self.blocked_clients.extend(other.blocked_clients);
        self.blocking_keys.0 += other.blocking_keys.0;
        self.blocking_keys.1 += other.blocking_keys.1;
        self.blocked_clients.sort_unstable();
        self.blocked_clients.dedup();
        for (mine, theirs) in [
            (&mut self.pubsub_channels, other.pubsub_channels),
            (&mut self.pubsub_patterns, other.pubsub_patterns),
        ] {
            mine.extend(theirs);
            mine.sort_unstable();
            mine.dedup();
        }
        self.queues.extend(other.queues);
        self.queues.sort_by(|a, b| a.0.cmp(&b.0));
    }
}
