//! What a command owes around its handler, beside its reply: keyspace notifications (the
//! keys looked at before and the events derived after), CLIENT TRACKING (reads remembered,
//! writes invalidating), WATCH versions bumped by writes, and the signals that wake blocked
//! clients when a write changes what a key holds.

use super::*;

impl Shard {
    /// Keyspace notifications before a command runs: its keys as they are (each looked at
    /// once, which expires a key whose time is up, as Redis's lookup does), and `keymiss`
    /// for a read command's missing key.
    #[cold]
    pub(super) fn look_before(&mut self, db: usize, call: &Call<'_>) -> (Vec<notify::Seen>, usize) {
        let (spec, args) = (call.spec, call.args);
        let write = spec.has(crate::table::flag::WRITE);
        let mut seen: Vec<notify::Seen> = Vec::new();
        if spec.has(crate::table::flag::TASK)
            || !(write || self.notes.wants(notify::class::KEY_MISS))
        {
            return (seen, self.notes.len());
        }
        let now = self.now_ms;
        let other = write
            .then(|| notify::other_db_key(spec.name, db, args))
            .flatten();
        let keys = call.keys().map(|key| (db, key.clone()));
        for (d, key) in keys.chain(other) {
            if seen.iter().any(|s| s.db == d && s.key == key) {
                continue;
            }
            let before = self.dbs[d].probe(&key, now);
            seen.push(notify::Seen {
                db: d,
                key,
                before,
                after: false,
            });
        }
        (0..DATABASES).for_each(|d| self.drain_expired(d));
        if !write {
            for s in seen.iter().filter(|s| s.before.is_none()) {
                self.notes
                    .push(notify::class::KEY_MISS, s.db, "keymiss", &s.key);
            }
            seen.clear();
        }
        (seen, self.notes.len())
    }

    /// Keyspace notifications after a write ran: the table's events from its reply and
    /// which keys it created or deleted.
    #[cold]
    pub(super) fn notify_after(
        &mut self,
        db: usize,
        call: &Call<'_>,
        reply: &Frame,
        mut seen: Vec<notify::Seen>,
        mark: usize,
    ) {
        let (spec, args) = (call.spec, call.args);
        let now = self.now_ms;
        for s in &mut seen {
            s.after = self.dbs[s.db].probe(&s.key, now).is_some();
        }
        let facts = notify::Facts {
            db,
            args,
            reply,
            seen: &seen,
        };
        notify::emit(spec.name, &facts, &mut self.notes, mark);
        (0..DATABASES).for_each(|d| self.drain_expired(d));
    }

    /// Whether keys that expire are noted: for CLIENT TRACKING's invalidations, `expired`
    /// events, and a blocked XREADGROUP (answered when its stream expires, as Redis does).
    pub(super) fn expiry_logs_wanted(&self) -> bool {
        self.tracking.active()
            || self.notes.on() && self.notes.wants(notify::class::EXPIRED)
            || self.blocked.has_group_waiters()
    }

    /// CLIENT TRACKING after a command ran: the keys a tracking client read are remembered
    /// (here, or on their owner when lent to a cross-shard step), and keys that expired on
    /// the way are invalidated.
    #[cold]
    pub(super) fn track_after(&mut self, db: usize, client: u64, call: &Call<'_>) {
        use crate::table::flag;
        let spec = call.spec;
        self.drain_expired(db);
        if !self.tracking.active() {
            self.set_expiry_logs(self.expiry_logs_wanted());
            return;
        }
        if !self.tracking.has_readers() || (spec.first_key <= 0 && spec.movable_keys.is_none()) {
            return;
        }
        let reads = spec.has(flag::READONLY) && !spec.has(flag::TASK);
        let Some(home) = self.tracking.should_remember(client, reads) else {
            return;
        };
        for key in call.keys() {
            // A key another shard owns, read here for a cross-shard step (a script's, a
            // coordinator's), is remembered by its owner, whose writes invalidate it: lent
            // here, or missing (nothing was lent).
            let owner = crate::slot::shard_of(key, self.shard_count);
            if owner != self.id {
                self.tracking.remember_remote(owner, client, home, key);
            } else {
                self.tracking.remember(client, home, key);
            }
        }
    }

    /// The keys of `db` that expired since last asked are owed their invalidations, and
    /// their `expired` events.
    pub(super) fn drain_expired(&mut self, db: usize) {
        for key in self.dbs[db].take_expired() {
            if self.tracking.active() {
                self.tracking.key_changed(&key, 0);
            }
            self.blocked.signal_gone(db, &key);
            self.notes.push(notify::class::EXPIRED, db, "expired", &key);
        }
    }

    pub(super) fn set_expiry_logs(&mut self, on: bool) {
        if on != self.tracking_on {
            self.tracking_on = on;
            self.dbs.iter_mut().for_each(|d| d.log_expiries(on));
        }
    }

    /// The keys a write command changes, for CLIENT TRACKING (all of them, for a flush).
    #[cold]
    pub(super) fn track_written(&mut self, call: &Call<'_>, writer: u64) {
        match call.spec.name {
            // SWAPDB changes both databases wholesale: it invalidates as a flush does (Redis
            // sends nothing, and a client's cached values of either database go stale).
            "flushall" | "flushdb" | "swapdb" => self.tracking.flushed(),
            "move" => self.tracking.key_changed(&call.args[1], writer),
            _ => {
                for key in call.keys() {
                    self.tracking.key_changed(key, writer);
                }
            }
        }
    }

    /// Bumps the version of every watched key a write command names (all of a database's,
    /// or all, for FLUSHDB and FLUSHALL). A write that changes nothing still counts: EXEC may
    /// abort when Redis would not, never the other way round.
    pub(super) fn touch_written(&mut self, db: usize, call: &Call<'_>) {
        let (spec, args) = (call.spec, call.args);
        self.watch_epoch += 1;
        let epoch = self.watch_epoch;
        match spec.name {
            "flushall" => self.watched.values_mut().for_each(|v| v.0 = epoch),
            // Both databases' keys changed; MOVE's key changed in both.
            "swapdb" => {
                let dbs: Vec<usize> = args[1..]
                    .iter()
                    .filter_map(|a| crate::args::parse_i64(a).map(|d| d as usize))
                    .collect();
                self.watched
                    .iter_mut()
                    .filter(|((d, _), _)| dbs.contains(d))
                    .for_each(|(_, v)| v.0 = epoch);
            }
            "move" => {
                let to = crate::args::parse_i64(&args[2]).map_or(db, |d| d as usize);
                for d in [db, to] {
                    if let Some(v) = self.watched.get_mut(&(d, args[1].clone())) {
                        v.0 = epoch;
                    }
                }
            }
            "flushdb" => self
                .watched
                .iter_mut()
                .filter(|((d, _), _)| *d == db)
                .for_each(|(_, v)| v.0 = epoch),
            _ => {
                for key in call.keys() {
                    if let Some(v) = self.watched.get_mut(&(db, key.clone())) {
                        v.0 = epoch;
                    }
                }
                // COPY … DB n writes another database's key.
                if spec.name == "copy" {
                    if let Ok(opts) = crate::families::keys::copy_options(args) {
                        if let Some(v) = self
                            .watched
                            .get_mut(&(opts.db.unwrap_or(db), args[2].clone()))
                        {
                            v.0 = epoch;
                        }
                    }
                }
            }
        }
    }

    /// The keys a write command names, each with the type it holds now.
    pub(super) fn written_types(
        &mut self,
        db: usize,
        call: &Call<'_>,
    ) -> Vec<(Bytes, Option<&'static str>)> {
        let now = self.now_ms;
        let mut out = Vec::new();
        for key in call.keys() {
            let type_name = self.dbs[db].probe_type(key, now);
            out.push((key.clone(), type_name));
        }
        out
    }

    /// Tells blocked clients what a write did to its keys, as Redis 7.2's `dbAdd`,
    /// `dbSetValue` and `dbDelete` signal (see `blocking`): a key that came into being is
    /// ready for the waiters of its value's kind; one deleted, or now of another type, for
    /// blocked XREADGROUPs (NOGROUP or WRONGTYPE). Pushes and XADD signal for themselves.
    pub(super) fn signal_written(
        &mut self,
        db: usize,
        spec: &CommandSpec,
        before: Vec<(Bytes, Option<&'static str>)>,
    ) {
        match spec.name {
            "flushall" => (0..self.dbs.len()).for_each(|d| self.blocked.signal_db_gone(d)),
            "flushdb" => self.blocked.signal_db_gone(db),
            // Their handlers signal the keys of both databases.
            "swapdb" | "move" => {}
            _ => {
                let now = self.now_ms;
                for (key, was) in before {
                    match (was, self.dbs[db].probe_type(&key, now)) {
                        (None, Some(now_is)) => self.blocked.signal_value(db, &key, now_is),
                        (Some(_), None) => self.blocked.signal_gone(db, &key),
                        (Some(was), Some(now_is)) if was != now_is => {
                            self.blocked.signal_gone(db, &key)
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}
