//! One shard: its 16 databases, its coarse clock, and the entry points the server calls.
//! Everything here is synchronous and owned by one core; the server decides what runs where.

pub mod blocked;
mod call;
pub mod cross_commit;
pub(crate) mod durable;
mod entries;
mod functions;
mod replica;
pub mod slot_moves;
pub mod snapshot;
mod writes;

#[cfg(test)]
mod cross_commit_tests;
#[cfg(test)]
mod durable_tests;
#[cfg(test)]
mod shard_tests;

use bytes::Bytes;
use wetask_protocol::{Frame, Output};

use crate::ctx::{Ctx, DATABASES};
use crate::errors::{unknown_command, wrong_arity};
use crate::keyspace::blocked_keys::{Blocked, WaitKind};
use crate::keyspace::notify;
use crate::keyspace::{Db, Entry, ScanFilter};
use crate::table::{lookup, CommandSpec};
use crate::tasks::Engine;

/// Keys one write may evict to make room under `maxmemory` (a write adds about one key;
/// Redis bounds its eviction loop by time instead).
pub const EVICTIONS_PER_WRITE_MAX: usize = 64;
/// Keys sampled per database per active-expiry round, as Redis's `ACTIVE_EXPIRE_CYCLE_KEYS`.
pub const EXPIRE_SAMPLES_PER_ROUND: usize = 20;

pub struct Shard {
    pub id: usize,
    dbs: Vec<Db>,
    pub tasks: Engine,
    /// Keys with blocked clients (BLPOP …), and those that got data.
    pub blocked: Blocked,
    /// Keys some client WATCHes: (db, key) -> (version, watchers). A write to one bumps its
    /// version; EXEC compares the versions its client saw.
    watched: std::collections::HashMap<(usize, Bytes), (u64, u32)>,
    watch_epoch: u64,
    /// CLIENT TRACKING's table: who read which key here, and the invalidations owed.
    pub tracking: crate::keyspace::tracking::Tracking,
    /// The keyspace logs expired keys' names for `tracking` and expiry notifications (on
    /// while either wants them; turned off by the first command that finds neither does, so
    /// the log never grows unread).
    tracking_on: bool,
    /// Keyspace notifications: the classes on, and the events the server has yet to publish.
    pub notes: crate::keyspace::notify::Notes,
    now_ms: u64,
    expire_cursor_db: usize,
    /// The `maxmemory-policy` (eviction picks its victims here).
    eviction: crate::keyspace::evict::Policy,
    evicted_keys: u64,
    /// Set by the server while `maxmemory` is on: says whether the server is past it. A
    /// write then first evicts here (the shard that will hold the data gives the room), and
    /// a `denyoom` one is refused when nothing could be evicted.
    memory_over: Option<fn() -> bool>,
    /// Keys sampled per eviction (`maxmemory-samples`).
    eviction_samples: usize,
    /// Clients under CLIENT NO-TOUCH: their commands (but TOUCH) leave access stamps alone.
    no_touch: std::collections::HashSet<u64>,
    /// Write commands run here since the start (save points count changes with it).
    writes: u64,
    /// The operations of this loop turn, encoded for the journal; `None` when nothing is
    /// journaled (`appendonly no`, and while a journal is replayed). See `durable`.
    pub(crate) journal: Option<Vec<u8>>,
    /// Other shards' keys held here for a cross-shard operation (borrowed): a command that
    /// touches one is logged as its effect on this shard's own keys (the owner logs its key
    /// when it gets it back).
    pub(crate) borrowed: std::collections::HashSet<(usize, Bytes)>,
    /// The cross-shard operation holding this shard's lock, and the one the journal's last
    /// part marker named (`cross_commit`).
    pub(crate) cross_tag: Option<u64>,
    pub(crate) emitted_tag: Option<u64>,
    /// Per shard id: the last operation this shard coordinated that committed with a part
    /// there.
    pub(crate) cross_commits: std::collections::BTreeMap<u64, u64>,
    /// A part left open by the replay and resolved (`Some(token)`: dropped, `None`: kept),
    /// to journal when journaling starts.
    pub(crate) part_outcome: Option<Option<u64>>,
    /// How many shards the server runs (1 until the server says: `Shard::set_shard_count`).
    shard_count: usize,
    /// While a coordinator runs a command over borrowed keys: every key counts as this
    /// shard's (`Shard::execute_all_here`).
    all_keys_here: bool,
    /// Read commands' key lookups that found their key, and that did not.
    keyspace_hits: u64,
    keyspace_misses: u64,
    /// A replica's shard (`replica`): lookups keep expired keys.
    replica: bool,
    /// The function libraries its log carries (consensus mode's metadata group), and
    /// whether they changed since the server last took them (`functions`).
    functions: Option<Bytes>,
    functions_changed: bool,
    /// A replica's full sync began and has not ended (`replica`): what the shard holds is
    /// part of its primary's snapshot.
    partial_sync: bool,
    /// The snapshot being loaded was written from a shard that held part of a full sync
    /// (a compaction in the middle of one): [`Shard::finish_snapshot`] keeps the mark.
    snapshot_partial: bool,
    /// Consensus mode: this group's part in slot moves, and group 0's slot map.
    slot_moves: slot_moves::SlotMoves,
}

use call::{Body, Call};

impl Shard {
    pub fn new(id: usize) -> Self {
        Shard {
            id,
            dbs: (0..DATABASES).map(|_| Db::default()).collect(),
            tasks: crate::families::tasks::commands::new_engine(),
            blocked: Blocked::default(),
            watched: std::collections::HashMap::new(),
            watch_epoch: 0,
            tracking: crate::keyspace::tracking::Tracking::default(),
            tracking_on: false,
            notes: crate::keyspace::notify::Notes::default(),
            now_ms: 0,
            expire_cursor_db: 0,
            eviction: crate::keyspace::evict::Policy::NoEviction,
            evicted_keys: 0,
            memory_over: None,
            eviction_samples: 5,
            no_touch: std::collections::HashSet::new(),
            writes: 0,
            journal: None,
            borrowed: std::collections::HashSet::new(),
            cross_tag: None,
            emitted_tag: None,
            cross_commits: std::collections::BTreeMap::new(),
            part_outcome: None,
            shard_count: 1,
            all_keys_here: false,
            keyspace_hits: 0,
            keyspace_misses: 0,
            functions: None,
            functions_changed: false,
            partial_sync: false,
            snapshot_partial: false,
            slot_moves: Default::default(),
            replica: false,
        }
    }

    /// INFO's `keyspace_hits` and `keyspace_misses`: the key lookups of read commands that
    /// found a live key, and that did not.
    pub fn keyspace_lookups(&self) -> (u64, u64) {
        (self.keyspace_hits, self.keyspace_misses)
    }

    /// The server's shard count (this shard is `id` among them).
    pub fn set_shard_count(&mut self, count: usize) {
        self.shard_count = count.max(1);
    }

    /// CONFIG RESETSTAT.
    pub fn reset_keyspace_lookups(&mut self) {
        self.keyspace_hits = 0;
        self.keyspace_misses = 0;
    }

    /// The coarse clock, set once per loop turn by the server (unix milliseconds).
    pub fn set_clock(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        if self.eviction.tracking() != crate::keyspace::evict::Tracking::None {
            self.dbs.iter_mut().for_each(|db| db.set_clock(now_ms));
        }
    }

    /// Sets the `maxmemory-policy`: keys get access stamps from now on if it needs them.
    pub fn set_eviction_policy(&mut self, policy: crate::keyspace::evict::Policy) {
        if policy == self.eviction {
            return;
        }
        self.eviction = policy;
        let now = self.now_ms;
        for db in &mut self.dbs {
            db.set_tracking(policy.tracking(), now);
        }
    }

    /// Turns `maxmemory` enforcement on (`Some(check)`: true while the server is past it)
    /// or off, with the keys to sample per eviction.
    pub fn set_memory_check(&mut self, check: Option<fn() -> bool>, samples: usize) {
        self.memory_over = check;
        self.eviction_samples = samples.max(1);
    }

    /// Before a write while `maxmemory` is on: evicts until under it (at most
    /// `EVICTIONS_PER_WRITE_MAX` keys). `Err` (Redis's OOM) for a `denyoom` command when
    /// nothing could be evicted and the server is still past the limit.
    fn make_room(&mut self, spec: &CommandSpec) -> Result<(), Frame> {
        use crate::table::flag;
        let Some(over) = self.memory_over else {
            return Ok(());
        };
        if !spec.has(flag::WRITE | flag::DENYOOM) || !over() {
            return Ok(());
        }
        let mut evicted = false;
        for _ in 0..EVICTIONS_PER_WRITE_MAX {
            if !self.evict_one(self.eviction_samples) {
                break;
            }
            evicted = true;
            if !over() {
                return Ok(());
            }
        }
        if evicted || !spec.has(flag::DENYOOM) {
            Ok(())
        } else {
            Err(Frame::static_error(crate::errors::OOM))
        }
    }

    pub fn eviction_policy(&self) -> crate::keyspace::evict::Policy {
        self.eviction
    }

    /// Keys removed by `maxmemory` eviction so far.
    pub fn evicted_keys(&self) -> u64 {
        self.evicted_keys
    }

    /// Evicts one key under the policy: the best of `samples` random candidates over the
    /// databases that have one. Returns false when there is nothing the policy may evict
    /// (noeviction, or no key, or no key with a TTL for a volatile policy). Task data is not
    /// in the keyspace and is never evicted.
    pub fn evict_one(&mut self, samples: usize) -> bool {
        let policy = self.eviction;
        if policy == crate::keyspace::evict::Policy::NoEviction {
            return false;
        }
        let candidates: Vec<usize> = (0..DATABASES)
            .filter(|&d| {
                if policy.volatile_only() {
                    self.dbs[d].volatile_len() > 0
                } else {
                    !self.dbs[d].is_empty()
                }
            })
            .collect();
        if candidates.is_empty() {
            return false;
        }
        let now = self.now_ms;
        let mut best: Option<(usize, usize, u64)> = None;
        for _ in 0..samples.max(1) {
            let db = candidates[fastrand::usize(..candidates.len())];
            if let Some((pos, score)) = self.dbs[db].eviction_candidate(policy, now) {
                if best.is_none_or(|(_, _, s)| score > s) {
                    best = Some((db, pos, score));
                }
            }
        }
        let Some((db, pos, _)) = best else {
            return false;
        };
        let key = self.dbs[db].evict_at(pos);
        if let Some(journal) = self.journal_turn() {
            crate::persist::journal::ops::put_del(journal, db, &key);
        }
        self.evicted_keys += 1;
        self.notes.push(notify::class::EVICTED, db, "evicted", &key);
        self.touch_key(db, &key);
        true
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn db(&mut self, db: usize) -> &mut Db {
        &mut self.dbs[db]
    }

    /// Runs a command whose spec the caller already looked up and arity-checked.
    pub fn execute(&mut self, db: usize, client: u64, spec: &CommandSpec, args: &[Bytes]) -> Frame {
        self.run(db, client, Call::plain(spec, args), None)
    }

    /// Runs a request as the server parsed it once (`request::Request`): a blocking
    /// command's attempt or a SORT from its form, any other form through its handler, and
    /// its keys where the parse found them (WATCH, tracking, notifications and the journal
    /// read those; no key finder runs again). A reply may go straight into `out` (a local
    /// client's output buffer; the result may then be `Frame::Written`). Everything
    /// [`Shard::execute`] does around a handler is done.
    pub fn execute_request(
        &mut self,
        db: usize,
        client: u64,
        spec: &CommandSpec,
        request: &crate::request::Request,
        out: Option<&mut Output>,
    ) -> Frame {
        self.run(db, client, Call::of(spec, request), out)
    }

    fn run(&mut self, db: usize, client: u64, call: Call<'_>, out: Option<&mut Output>) -> Frame {
        debug_assert!(call.spec.arity_ok(call.args.len()));
        if self.freezes_slots() && self.touches_frozen(&call) {
            // Consensus mode: a slot moving to another group (`slot_moves`). Checked here,
            // where every command runs, so that no path around the routing changes it.
            return Frame::static_error(slot_moves::FROZEN);
        }
        if self.memory_over.is_some() {
            if let Err(oom) = self.make_room(call.spec) {
                return oom;
            }
        }
        // Off (the default), notifications cost this test and nothing else.
        if self.notes.on() {
            return self.run_noted(db, client, call, out);
        }
        self.run_handler(db, client, call, out, false)
    }

    /// [`Shard::run`] while keyspace notifications are on: the command's keys are looked
    /// at before and after it, and its events derived (`notify`).
    #[cold]
    fn run_noted(
        &mut self,
        db: usize,
        client: u64,
        call: Call<'_>,
        out: Option<&mut Output>,
    ) -> Frame {
        let (seen, mark) = self.look_before(db, &call);
        let frame = self.run_handler(db, client, call, out, true);
        if call.spec.has(crate::table::flag::WRITE) {
            self.notify_after(db, &call, &frame, seen, mark);
        }
        frame
    }

    /// The command's handler, with what every command pays around it: WATCH and tracking
    /// for writes, keyspace hit counts for reads, the journal.
    // Long: what every command pays around its handler, in the order it must be paid (WATCH, tracking, hit counts, blocked-key types, the handler, the journal); on the hot path, kept in one body.
    fn run_handler(
        &mut self,
        db: usize,
        client: u64,
        call: Call<'_>,
        out: Option<&mut Output>,
        noted: bool,
    ) -> Frame {
        let spec = call.spec;
        let args = call.args;
        let handler = spec.handler.expect("server commands never reach a shard");
        let write = spec.has(crate::table::flag::WRITE);
        if write {
            self.writes += 1;
            if !self.watched.is_empty() {
                self.touch_written(db, &call);
            }
            if self.tracking.active() {
                self.track_written(&call, client);
            }
        }
        let mark = out.as_ref().map(|o| o.mark());
        let lookups_before = (!write).then(|| self.dbs[db].lookups());
        // Only while a client is blocked on this shard: what the write's keys held before.
        let types_before = (write && self.blocked.active()).then(|| self.written_types(db, &call));
        // CLIENT NO-TOUCH: the command reads keys without refreshing their stamps.
        let untouched =
            !self.no_touch.is_empty() && self.no_touch.contains(&client) && spec.name != "touch";
        if untouched {
            self.dbs[db].set_touching(false);
        }
        let mut ctx = Ctx {
            dbs: &mut self.dbs,
            db,
            now_ms: self.now_ms,
            out,
            tasks: &mut self.tasks,
            client,
            blocked: &mut self.blocked,
            rewrite: None,
            layout: (
                self.id,
                if self.all_keys_here {
                    1
                } else {
                    self.shard_count
                },
            ),
            notes: noted.then_some(&mut self.notes),
        };
        let run = || match call.body {
            Body::Handler => handler(&mut ctx, args),
            Body::Blocking(blocking) => crate::families::blocking::attempt(&mut ctx, blocking),
            Body::Sort(sort) => crate::families::sort::run_parsed(&mut ctx, &args[1], sort),
        };
        let frame = match crate::contain::contained(spec.name, run) {
            Ok(frame) => frame,
            Err(_) => {
                // Whatever the handler had encoded of its reply is dropped.
                if let (Some(out), Some(mark)) = (ctx.out.as_mut(), mark) {
                    out.rewind(mark);
                }
                crate::errors::internal_error(spec.name)
            }
        };
        let rewrite = ctx.rewrite.take();
        if untouched {
            self.dbs[db].set_touching(true);
        }
        if let Some(before) = types_before {
            self.signal_written(db, spec, before);
        }
        if let Some((hits_before, misses_before)) = lookups_before {
            // As Redis counts them: the key lookups of read commands.
            let (hits, misses) = self.dbs[db].lookups();
            self.keyspace_hits += hits - hits_before;
            self.keyspace_misses += misses - misses_before;
        }
        if self.journal.is_some() && write {
            self.log_command(db, client, &call, rewrite);
        }
        if self.tracking_on {
            self.track_after(db, client, &call);
        }
        frame
    }

    /// The server's `notify-keyspace-events` flags.
    pub fn set_notify_flags(&mut self, flags: u32) {
        self.notes.set_flags(flags);
        self.set_expiry_logs(self.expiry_logs_wanted());
    }

    /// Queues a blocked client's `waiter` on `key` (`Blocked::watch`), noting expiries while
    /// an XREADGROUP waits.
    pub fn watch_blocked(&mut self, db: usize, key: &Bytes, waiter: u64, kind: WaitKind) {
        self.blocked.watch(db, key, waiter, kind);
        if kind == WaitKind::Group {
            self.set_expiry_logs(self.expiry_logs_wanted());
        }
    }

    /// Takes `waiter` off `key`'s line (`Blocked::unwatch`).
    pub fn unwatch_blocked(&mut self, db: usize, key: &[u8], waiter: u64) {
        let had_groups = self.blocked.has_group_waiters();
        self.blocked.unwatch(db, key, waiter);
        if had_groups && !self.blocked.has_group_waiters() {
            self.set_expiry_logs(self.expiry_logs_wanted());
        }
    }

    /// CLIENT TRACKING: a client starts or stops tracking; expired keys are then noted
    /// (an expiry invalidates) only while someone tracks.
    pub fn set_tracking(&mut self, client: u64, reader: Option<crate::keyspace::tracking::Reader>) {
        match reader {
            Some(reader) => self.tracking.register(client, reader),
            None => self.tracking.unregister(client),
        }
        self.set_expiry_logs(self.expiry_logs_wanted());
    }

    /// Runs `f` on a command context for database `db` and `client`, inside the panic
    /// boundary (`contain`, logged as `what`): `None` if it panicked. For operations the
    /// server asks of the shard besides commands (a blocked client's pop).
    pub(crate) fn with_ctx<R>(
        &mut self,
        db: usize,
        client: u64,
        what: &'static str,
        f: impl FnOnce(&mut Ctx<'_>) -> R,
    ) -> Option<R> {
        let mut ctx = Ctx {
            dbs: &mut self.dbs,
            db,
            now_ms: self.now_ms,
            out: None,
            tasks: &mut self.tasks,
            client,
            blocked: &mut self.blocked,
            rewrite: None,
            notes: None,
            layout: (
                self.id,
                if self.all_keys_here {
                    1
                } else {
                    self.shard_count
                },
            ),
        };
        crate::contain::contained(what, || f(&mut ctx)).ok()
    }

    /// The keys SORT's BY and GET patterns name now (see `sort::pattern_keys`).
    pub fn sort_pattern_keys(
        &mut self,
        db: usize,
        key: &[u8],
        sort: &crate::families::sort::SortArgs,
    ) -> Vec<Bytes> {
        self.with_ctx(db, 0, "sort", |ctx| {
            crate::families::sort::pattern_keys(ctx, key, sort)
        })
        .unwrap_or_default()
    }

    /// Runs a command as if this shard owned every key: what a cross-shard operation's
    /// coordinator does with other shards' keys borrowed in (a SORT whose patterns name
    /// keys anywhere).
    pub fn execute_all_here(
        &mut self,
        db: usize,
        client: u64,
        spec: &CommandSpec,
        request: &crate::request::Request,
    ) -> Frame {
        self.all_keys_here = true;
        let frame = self.run(db, client, Call::of(spec, request), None);
        self.all_keys_here = false;
        frame
    }

    /// Write commands run here since the start (Redis's `dirty`, for save points).
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// CLIENT NO-TOUCH for `client`, on this shard.
    pub fn set_no_touch(&mut self, client: u64, on: bool) {
        if on {
            self.no_touch.insert(client);
        } else {
            self.no_touch.remove(&client);
        }
    }

    pub(crate) fn touch_key(&mut self, db: usize, key: &[u8]) {
        if self.tracking.active() {
            self.tracking.key_changed(key, 0);
        }
        if self.watched.is_empty() {
            return;
        }
        self.watch_epoch += 1;
        if let Some(v) = self.watched.get_mut(&(db, Bytes::copy_from_slice(key))) {
            v.0 = self.watch_epoch;
        }
    }

    /// WATCH: registers one more watcher of `key` and returns its current version.
    pub fn watch(&mut self, db: usize, key: &Bytes) -> u64 {
        let entry = self.watched.entry((db, key.clone())).or_insert((0, 0));
        entry.1 += 1;
        entry.0
    }

    /// The current version of a watched key (0 for one nobody watches).
    pub fn watch_version(&self, db: usize, key: &Bytes) -> u64 {
        self.watched.get(&(db, key.clone())).map_or(0, |v| v.0)
    }

    /// One watcher of `key` is gone (UNWATCH, EXEC, DISCARD or a closed connection).
    pub fn unwatch(&mut self, db: usize, key: &Bytes) {
        if let Some(v) = self.watched.get_mut(&(db, key.clone())) {
            v.1 = v.1.saturating_sub(1);
            if v.1 == 0 {
                self.watched.remove(&(db, key.clone()));
            }
        }
    }

    /// Looks up, checks and runs a command given as a plain argument list (tests, scripts).
    pub fn execute_args(&mut self, db: usize, args: &[Bytes]) -> Frame {
        let Some(spec) = lookup(&args[0]).filter(|s| s.handler.is_some()) else {
            return unknown_command(args);
        };
        if !spec.arity_ok(args.len()) {
            return wrong_arity(spec.name);
        }
        self.execute(db, 0, spec, args)
    }

    /// Prefetches the keyspace entries of `keys` in database `db` (see [`Db::prefetch`]).
    pub fn prefetch(&self, db: usize, keys: &[&[u8]]) {
        self.dbs[db].prefetch(keys);
    }

    /// The newest id of the stream at `key` (0-0 when missing): what XREAD's `$` means.
    pub fn stream_last_id(&mut self, db: usize, key: &[u8]) -> crate::values::stream::StreamId {
        match crate::keyspace::typed::get::<crate::values::stream::Stream>(
            &mut self.dbs[db],
            key,
            self.now_ms,
        ) {
            Ok(Some(stream)) => stream.last_id,
            _ => crate::values::stream::StreamId::MIN,
        }
    }

    /// Up to `count` entries of the stream at `key` after `after`, as XREAD replies them;
    /// `None` when there are none.
    pub fn stream_read_after(
        &mut self,
        db: usize,
        key: &[u8],
        after: crate::values::stream::StreamId,
        count: usize,
    ) -> Option<Frame> {
        let stream = crate::keyspace::typed::get::<crate::values::stream::Stream>(
            &mut self.dbs[db],
            key,
            self.now_ms,
        )
        .ok()??;
        let from = after.next()?;
        let entries = stream.range(from, crate::values::stream::StreamId::MAX, false, count);
        (!entries.is_empty()).then(|| crate::families::streams::entries_frame(entries))
    }

    /// New entries of the stream at `key` for a blocked XREADGROUP (`>`), delivered to its
    /// consumer as XREADGROUP does; `None` when there are none, an error when the stream or
    /// its group is gone.
    pub fn stream_read_group(
        &mut self,
        db: usize,
        key: &[u8],
        read: &crate::families::stream_groups::XreadGroup,
    ) -> Option<Frame> {
        let now = self.now_ms;
        let no_group = || {
            crate::families::stream_groups::no_group(
                key,
                &read.group,
                "XREADGROUP with GROUP option",
            )
        };
        // A stream deleted or replaced, or its group destroyed, answers the reader with the
        // error XREADGROUP would give now, as Redis 7.2 re-runs it.
        let stream = match crate::keyspace::typed::get::<crate::values::stream::Stream>(
            &mut self.dbs[db],
            key,
            now,
        ) {
            Ok(Some(stream)) => stream,
            Ok(None) => return Some(no_group()),
            Err(wrong_type) => return Some(wrong_type),
        };
        match crate::families::stream_groups::read_group(stream, read, None, now) {
            Ok(found) => found,
            Err(_) => Some(no_group()),
        }
    }

    /// True when `key` holds the kind of value `op` takes: a list for a pop or a move, a
    /// sorted set for a sorted-set pop, a stream for a read. A waiter of another kind than
    /// the key's is passed over (Redis serves a key's waiters of its type), while a key of
    /// the waiter's kind that gave it nothing gives the waiters behind it nothing either.
    pub fn holds_kind_for(&mut self, db: usize, key: &[u8], op: &crate::BlockOp) -> bool {
        let now = self.now_ms;
        self.dbs[db]
            .get(key, now)
            .is_some_and(|entry| op.wait_kind().takes(entry.type_name()))
    }

    pub fn exists(&mut self, db: usize, key: &[u8]) -> bool {
        let now = self.now_ms;
        self.dbs[db].contains(key, now)
    }

    pub fn scan(
        &mut self,
        db: usize,
        cursor: u64,
        count: usize,
        filter: &ScanFilter,
    ) -> (u64, Vec<Bytes>) {
        self.dbs[db].scan(cursor, count, filter, self.now_ms)
    }

    /// [`Shard::scan`], with how many positions it looked at (see `Db::scan_counted`).
    pub fn scan_counted(
        &mut self,
        db: usize,
        cursor: u64,
        count: usize,
        filter: &ScanFilter,
    ) -> (u64, Vec<Bytes>, usize) {
        self.dbs[db].scan_counted(cursor, count, filter, self.now_ms)
    }

    /// Keeps a slot → keys index in every database from now on (cluster mode).
    pub fn index_slots(&mut self) {
        self.dbs.iter_mut().for_each(Db::index_slots);
    }

    /// How many keys `slot` holds in `db`, and up to `count` of its live keys
    /// (CLUSTER COUNTKEYSINSLOT and GETKEYSINSLOT; see `Db::keys_in_slot`).
    pub fn keys_in_slot(&self, db: usize, slot: u16, count: usize) -> (usize, Vec<Bytes>) {
        self.dbs[db].keys_in_slot(slot, count, self.now_ms)
    }

    pub fn random_key(&mut self, db: usize) -> Option<Bytes> {
        let now = self.now_ms;
        self.dbs[db].random_key(now)
    }

    /// Keys per database that are non-empty: (db, keys, keys with a TTL).
    pub fn keyspace_summary(&self) -> Vec<(usize, usize, usize)> {
        self.dbs
            .iter()
            .enumerate()
            .filter(|(_, db)| !db.is_empty())
            .map(|(i, db)| (i, db.len(), db.volatile_len()))
            .collect()
    }

    pub fn expired_keys(&self) -> u64 {
        self.dbs.iter().map(Db::expired_count).sum()
    }

    /// One bounded round of active expiry: samples databases in turn until `samples_max`
    /// keys were looked at, or the expired fraction drops under a quarter (Redis's rule).
    /// Returns the number of keys removed.
    pub fn active_expire(&mut self, samples_max: usize) -> usize {
        let mut sampled_total = 0;
        let mut expired_total = 0;
        let mut idle_dbs = 0;
        while sampled_total < samples_max && idle_dbs < DATABASES {
            let db = self.expire_cursor_db;
            let (sampled, expired) =
                self.dbs[db].expire_sample(self.now_ms, EXPIRE_SAMPLES_PER_ROUND);
            sampled_total += sampled;
            expired_total += expired;
            if sampled == 0 || expired * 4 < sampled {
                self.expire_cursor_db = (db + 1) % DATABASES;
                idle_dbs += 1;
            }
        }
        if expired_total > 0 && self.tracking_on {
            (0..DATABASES).for_each(|db| self.drain_expired(db));
        }
        expired_total
    }
}
