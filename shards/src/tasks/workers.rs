//! Worker identities (TASK.WORKER): a name that one or more connections share, so that a
//! lease belongs to the worker rather than to the connection that fetched it. Any of the
//! worker's connections may ACK, FAIL or EXTEND its leases; when its last connection closes,
//! or its heartbeats stop, the leases wait GRACE ms and then go back, as a closed
//! connection's do at once.
//!
//! A worker lives on its home shard (the shard of its name, as a key): that shard counts its
//! connections and runs its timers, and tells every shard to release the worker's leases when
//! GRACE runs out. Leases carry the worker's owner id ([`worker_owner`]), so the engines need
//! no name lookup. This registry is the home shard's book: pure, driven by the caller's
//! clock, and not persisted (a restart ends every connection, and with them every lease).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

/// Set in every worker's owner id and in no connection's (those count up from 1).
pub const WORKER_OWNER_BIT: u64 = 1 << 63;
/// Longest GRACE or HEARTBEAT a worker may ask for.
pub const WORKER_MS_MAX: u64 = 24 * 3_600_000;
/// Most workers one shard's registry holds.
pub const WORKERS_MAX: usize = 100_000;

/// The owner id a worker's leases carry: a 63-bit hash of its name with the top bit set.
/// Stable across shards and processes (two crc32c lanes, not a seeded hash).
pub fn worker_owner(name: &[u8]) -> u64 {
    let high = u64::from(crc32c::crc32c(name));
    let low = u64::from(crc32c::crc32c_append(0x5bd1_e995, name));
    WORKER_OWNER_BIT | (high << 32 | low)
}

/// How TASK.GET's `leased_by` and TASK.WORKERS' `owner` name a lease's holder:
/// `worker:<owner id in hex>` for a worker identity, `client:<id>` for a plain connection.
pub fn owner_label(owner: u64) -> String {
    if owner & WORKER_OWNER_BIT != 0 {
        format!("worker:{owner:016x}")
    } else {
        format!("client:{owner}")
    }
}

/// What TASK.WORKER sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerOptions {
    /// How long leases wait for the worker to come back once it is gone.
    pub grace_ms: u64,
    /// A worker that sends nothing for this long counts as gone, its connections open or not.
    pub heartbeat_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worker {
    pub name: Bytes,
    pub owner: u64,
    pub options: WorkerOptions,
    /// Its connections' client ids.
    pub connections: BTreeSet<u64>,
    pub registered_ms: u64,
    pub last_seen_ms: u64,
    /// TASK.QUIET: its fetches lease nothing.
    pub quiet: bool,
    /// When its last connection closed (`None` while it has one).
    pub gone_since_ms: Option<u64>,
    /// Its leases were released for the absence now going on.
    pub released: bool,
}

impl Worker {
    /// When its leases go back, if it stays as it is: GRACE after it went (its last
    /// connection closed, or its heartbeat stopped). `None` while it is present.
    pub fn release_at(&self) -> Option<u64> {
        if self.released {
            return None;
        }
        let gone = match (self.gone_since_ms, self.options.heartbeat_ms) {
            (Some(since), _) => since,
            (None, Some(beat)) => self.last_seen_ms.saturating_add(beat),
            (None, None) => return None,
        };
        Some(gone.saturating_add(self.options.grace_ms))
    }

    /// `present`, `gone` (waiting out GRACE) or `released`, for TASK.WORKERS.
    pub fn status(&self, now_ms: u64) -> &'static str {
        if self.released {
            "released"
        } else if self.gone_since_ms.is_some()
            || self
                .options
                .heartbeat_ms
                .is_some_and(|beat| now_ms >= self.last_seen_ms.saturating_add(beat))
        {
            "gone"
        } else {
            "present"
        }
    }
}

/// A worker whose leases are due to go back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub owner: u64,
    /// The worker had no connection left and is forgotten (its quiet flag goes too).
    pub forgotten: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum BindError {
    /// The registry is full.
    TooMany,
    /// Two names with one owner id (a 63-bit hash collision).
    Collision,
}

#[derive(Default, Debug)]
pub struct Workers {
    by_name: HashMap<Bytes, Worker>,
    /// Owner id -> name, to refuse a colliding name.
    names: BTreeMap<u64, Bytes>,
}

impl Workers {
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn get(&self, name: &[u8]) -> Option<&Worker> {
        self.by_name.get(name)
    }

    /// Binds connection `conn` to worker `name` (created if new; its options replaced if
    /// not), and counts as a heartbeat. Returns the worker's owner id.
    pub fn bind(
        &mut self,
        name: &[u8],
        conn: u64,
        options: WorkerOptions,
        now_ms: u64,
    ) -> Result<u64, BindError> {
        let owner = worker_owner(name);
        if let Some(other) = self.names.get(&owner) {
            if other.as_ref() != name {
                return Err(BindError::Collision);
            }
        } else if self.by_name.len() >= WORKERS_MAX {
            return Err(BindError::TooMany);
        }
        let name = Bytes::copy_from_slice(name);
        self.names.insert(owner, name.clone());
        let worker = self.by_name.entry(name.clone()).or_insert_with(|| Worker {
            name,
            owner,
            options,
            connections: BTreeSet::new(),
            registered_ms: now_ms,
            last_seen_ms: now_ms,
            quiet: false,
            gone_since_ms: None,
            released: false,
        });
        worker.options = options;
        worker.connections.insert(conn);
        worker.last_seen_ms = now_ms;
        worker.gone_since_ms = None;
        worker.released = false;
        Ok(owner)
    }

    /// A sign of life from one of `name`'s connections.
    pub fn beat(&mut self, name: &[u8], now_ms: u64) {
        if let Some(worker) = self.by_name.get_mut(name) {
            worker.last_seen_ms = worker.last_seen_ms.max(now_ms);
            worker.released = false;
        }
    }

    /// Connection `conn` of `name` closed (or left with RESET).
    pub fn unbind(&mut self, name: &[u8], conn: u64, now_ms: u64) {
        if let Some(worker) = self.by_name.get_mut(name) {
            if worker.connections.remove(&conn) && worker.connections.is_empty() {
                worker.gone_since_ms = Some(now_ms);
            }
        }
    }

    /// Marks `name` quiet; its owner id, or `None` for an unknown worker.
    pub fn quiet(&mut self, name: &[u8]) -> Option<u64> {
        let worker = self.by_name.get_mut(name)?;
        worker.quiet = true;
        Some(worker.owner)
    }

    /// The workers whose GRACE ran out by `now_ms`: marked released, and forgotten when no
    /// connection is left. The caller releases their leases on every shard.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Release> {
        let mut due: Vec<(&Bytes, &mut Worker)> = self
            .by_name
            .iter_mut()
            .filter(|(_, w)| w.release_at().is_some_and(|at| at <= now_ms))
            .collect();
        due.sort_by(|a, b| a.0.cmp(b.0));
        let mut releases = Vec::with_capacity(due.len());
        for (_, worker) in due {
            worker.released = true;
            releases.push(Release {
                owner: worker.owner,
                forgotten: worker.connections.is_empty(),
            });
        }
        for release in releases.iter().filter(|r| r.forgotten) {
            if let Some(name) = self.names.remove(&release.owner) {
                self.by_name.remove(&name);
            }
        }
        releases
    }

    /// The soonest a worker's leases are due to go back.
    pub fn next_release_ms(&self) -> Option<u64> {
        self.by_name.values().filter_map(Worker::release_at).min()
    }

    /// Every worker, by name.
    pub fn list(&self) -> Vec<&Worker> {
        let mut all: Vec<&Worker> = self.by_name.values().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn options(grace_ms: u64, heartbeat_ms: Option<u64>) -> WorkerOptions {
        WorkerOptions {
            grace_ms,
            heartbeat_ms,
        }
    }

    #[test]
    fn owners_are_stable_distinct_and_never_a_client_id() {
        assert_eq!(worker_owner(b"w1"), worker_owner(b"w1"));
        assert_ne!(worker_owner(b"w1"), worker_owner(b"w2"));
        assert!(worker_owner(b"") & WORKER_OWNER_BIT != 0);
    }

    #[test]
    fn leases_wait_grace_after_the_last_connection_only() {
        let mut w = Workers::default();
        let owner = w.bind(b"w", 1, options(100, None), 0).unwrap();
        assert_eq!(w.bind(b"w", 2, options(100, None), 0), Ok(owner));
        w.unbind(b"w", 1, 10);
        assert_eq!(w.next_release_ms(), None, "a connection is left");
        w.unbind(b"w", 2, 20);
        assert_eq!(w.next_release_ms(), Some(120));
        assert!(w.expire(119).is_empty());
        // Back within GRACE: nothing is released.
        w.bind(b"w", 3, options(100, None), 119).unwrap();
        assert!(w.expire(10_000).is_empty());
        w.unbind(b"w", 3, 200);
        assert_eq!(
            w.expire(300),
            vec![Release {
                owner,
                forgotten: true
            }]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn grace_zero_releases_at_once_and_a_stopped_heartbeat_counts_as_gone() {
        let mut w = Workers::default();
        let owner = w.bind(b"w", 1, WorkerOptions::default(), 0).unwrap();
        w.unbind(b"w", 1, 5);
        assert_eq!(w.expire(5).len(), 1);
        let owner2 = w.bind(b"beat", 2, options(50, Some(100)), 0).unwrap();
        w.beat(b"beat", 90);
        assert!(w.expire(239).is_empty());
        assert_eq!(w.get(b"beat").unwrap().status(190), "gone");
        assert_eq!(
            w.expire(240),
            vec![Release {
                owner: owner2,
                forgotten: false
            }]
        );
        assert_eq!(w.get(b"beat").unwrap().status(240), "released");
        assert!(w.expire(10_000).is_empty(), "released once per absence");
        w.beat(b"beat", 10_000);
        assert_eq!(w.get(b"beat").unwrap().status(10_000), "present");
        assert_ne!(owner, owner2);
    }

    #[test]
    fn quiet_marks_a_known_worker_only() {
        let mut w = Workers::default();
        assert_eq!(w.quiet(b"nobody"), None);
        let owner = w.bind(b"w", 1, WorkerOptions::default(), 0).unwrap();
        assert_eq!(w.quiet(b"w"), Some(owner));
        assert!(w.get(b"w").unwrap().quiet);
    }

    #[derive(Clone, Debug)]
    enum Step {
        Bind { worker: u8, conn: u64, grace: u64 },
        Unbind { worker: u8, conn: u64 },
        Beat { worker: u8 },
        Advance { ms: u64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..3, 1u64..5, 0u64..50).prop_map(|(worker, conn, grace)| Step::Bind {
                worker,
                conn,
                grace
            }),
            (0u8..3, 1u64..5).prop_map(|(worker, conn)| Step::Unbind { worker, conn }),
            (0u8..3).prop_map(|worker| Step::Beat { worker }),
            (1u64..40).prop_map(|ms| Step::Advance { ms }),
        ]
    }

    proptest! {
        /// Against a model of connections and absence: a worker's leases are released
        /// exactly when it has had no connection for GRACE (the GRACE its last bind set),
        /// never while one is open, and once per absence.
        #[test]
        fn releases_follow_the_model(steps in proptest::collection::vec(step(), 1..120)) {
            let mut w = Workers::default();
            let mut now = 0u64;
            // worker -> (connections, grace, gone since)
            let mut model: HashMap<u8, (BTreeSet<u64>, u64, Option<u64>)> = HashMap::new();
            for step in steps {
                match step {
                    Step::Bind { worker, conn, grace } => {
                        w.bind(&[worker], conn, options(grace, None), now).unwrap();
                        let entry = model.entry(worker).or_default();
                        entry.0.insert(conn);
                        entry.1 = grace;
                        entry.2 = None;
                    }
                    Step::Unbind { worker, conn } => {
                        w.unbind(&[worker], conn, now);
                        if let Some(entry) = model.get_mut(&worker) {
                            if entry.0.remove(&conn) && entry.0.is_empty() {
                                entry.2 = Some(now);
                            }
                        }
                    }
                    Step::Beat { worker } => w.beat(&[worker], now),
                    Step::Advance { ms } => now += ms,
                }
                let released: Vec<u64> = w.expire(now).into_iter().map(|r| r.owner).collect();
                let mut expected: Vec<u64> = Vec::new();
                model.retain(|worker, (conns, grace, gone)| {
                    let due = conns.is_empty() && gone.is_some_and(|g| g + *grace <= now);
                    if due {
                        expected.push(worker_owner(&[*worker]));
                    }
                    !due
                });
                let mut released_sorted = released.clone();
                released_sorted.sort_unstable();
                expected.sort_unstable();
                prop_assert_eq!(released_sorted, expected);
                for worker in model.keys() {
                    prop_assert!(w.get(&[*worker]).is_some(), "a worker with a connection or in grace is kept");
                }
            }
        }
    }
}
