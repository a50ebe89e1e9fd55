//! A queue leaving one engine for another's: what `MIGRATE` sends when a cluster slot moves
//! to another node (docs/CLUSTER.md). [`Engine::export_queue`] takes the queue out with
//! everything that is its (tasks in every state with their deadlines, extras and UNIQUE
//! windows, its crons) as the snapshot format's parts; [`Engine::import_queue`] takes them
//! in. A lease held by a worker (`TASK.WORKER`, whose owner id is the same on every node)
//! carries over with its deadline, so the worker acks it on the new node; a lease held by a
//! plain connection is handed back to the queue's head, as when its connection closes: the
//! connection's id means nothing on the other node.

use bytes::Bytes;

use super::Engine;
use crate::tasks::workers::WORKER_OWNER_BIT;
use crate::wire::{put_bytes, Reader};

impl Engine {
    pub fn has_queue(&self, name: &[u8]) -> bool {
        self.queues.contains_key(name)
    }

    /// Takes queue `name` out of this engine: the payload of everything that is its, or
    /// None when there is no such queue.
    pub fn export_queue(&mut self, name: &[u8]) -> Option<Vec<u8>> {
        if !self.queues.contains_key(name) {
            return None;
        }
        let mut part = Engine::new(self.retention_ms).with_dead_retention(self.dead_retention_ms);
        part.absorb(self, &|queue| queue == name, false);
        let mut out = Vec::new();
        part.export(&mut |bytes| put_bytes(&mut out, bytes));
        Some(out)
    }

    /// Takes in a payload of [`Engine::export_queue`]. Refused when it is damaged, names no
    /// single queue, or the queue is here already (as RESTORE refuses a key that exists).
    pub fn import_queue(&mut self, payload: &[u8], now_ms: u64) -> Result<Bytes, String> {
        let mut part = self.read_payload(payload).map_err(|e| format!("ERR {e}"))?;
        let mut names = part.queues.keys();
        let (Some(name), None) = (names.next().cloned(), names.next()) else {
            return Err("ERR bad queue payload: not one queue".into());
        };
        if self.queues.contains_key(&name) {
            return Err("BUSYKEY Target key name already exists.".into());
        }
        let connections: Vec<u64> = part
            .by_owner
            .keys()
            .copied()
            .filter(|owner| owner & WORKER_OWNER_BIT == 0)
            .collect();
        for owner in connections {
            part.release_leases_of(owner, now_ms, false);
        }
        self.absorb(&mut part, &|_| true, false);
        Ok(name)
    }
}

/// The queues a consensus group's slot move carries (`crate::shard::slot_moves`): copied
/// out of the source group's engine without changing it (the source's members must stay
/// identical), taken in by the target's with every lease as it was (a worker's or a
/// connection's: a connection's ends by its expiry, as after a failover), and dropped by
/// the source once the target serves them.
impl Engine {
    /// A copy of every queue `owns` names, with everything that is its, as one payload for
    /// [`Engine::take_in_queues`] (`None` when there is none). This engine is left as it is.
    pub fn copy_queues(&self, owns: &dyn Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
        if !self.queues.keys().any(|name| owns(name)) {
            return None;
        }
        let mut whole = Engine::new(self.retention_ms).with_dead_retention(self.dead_retention_ms);
        let mut failed = false;
        self.export(&mut |part| {
            failed |= whole.import_part(Bytes::copy_from_slice(part)).is_err();
        });
        if failed || whole.finish_import().is_err() {
            return None;
        }
        let mut part = Engine::new(self.retention_ms).with_dead_retention(self.dead_retention_ms);
        part.absorb(&mut whole, owns, false);
        let mut out = Vec::new();
        part.export(&mut |bytes| put_bytes(&mut out, bytes));
        Some(out)
    }

    /// Takes in a payload of [`Engine::copy_queues`]: its queues replace any of theirs
    /// here (a copy begun again after a leader changed). Returns how many queues came.
    pub fn take_in_queues(&mut self, payload: &[u8]) -> Result<usize, String> {
        let mut part = self.read_payload(payload)?;
        let names: Vec<Bytes> = part.queues.keys().cloned().collect();
        self.remove_queues(&|name| names.iter().any(|n| n == name));
        self.absorb(&mut part, &|_| true, false);
        Ok(names.len())
    }

    /// An engine of this one's settings holding what a payload of queues holds.
    fn read_payload(&self, payload: &[u8]) -> Result<Engine, String> {
        let mut part = Engine::new(self.retention_ms).with_dead_retention(self.dead_retention_ms);
        let mut reader = Reader::new(Bytes::copy_from_slice(payload));
        let bad = |e: crate::wire::DecodeError| format!("bad queue payload: {}", e.0);
        while reader.position() < payload.len() {
            part.import_part(reader.bytes().map_err(bad)?)
                .map_err(bad)?;
        }
        part.finish_import().map_err(bad)?;
        Ok(part)
    }

    /// Removes every queue `owns` names, with everything that is its; how many there were.
    pub fn remove_queues(&mut self, owns: &dyn Fn(&[u8]) -> bool) -> usize {
        let count = self.queues.keys().filter(|name| owns(name)).count();
        if count > 0 {
            let mut gone = Engine::new(self.retention_ms);
            gone.absorb(self, owns, false);
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::workers::worker_owner;
    use crate::tasks::SubmitOptions;

    const NOW: u64 = 1_000;

    /// Submits `payload` to `queue` at [`NOW`]; the task's id.
    fn submit(engine: &mut Engine, queue: &[u8], payload: &str) -> Bytes {
        let payload = Bytes::from(payload.to_string());
        let options = SubmitOptions::default();
        engine.submit(queue, payload, options, NOW).unwrap().0
    }

    #[test]
    fn a_queue_moves_whole_and_a_worker_acks_its_lease_on_the_new_engine() {
        let mut source = Engine::new(60_000);
        let mut target = Engine::new(60_000);
        let worker = worker_owner(b"w1");
        let now = NOW;
        let ids: Vec<Bytes> = (0..4)
            .map(|i| submit(&mut source, b"jobs", &format!("p{i}")))
            .collect();
        submit(&mut source, b"other", "stays");
        let jobs = [Bytes::from_static(b"jobs")];
        let leased = source.fetch(&jobs, 1, Some(30_000), worker, now);
        let by_connection = source.fetch(&jobs, 1, Some(30_000), 7, now);
        assert_eq!((leased.len(), by_connection.len()), (1, 1));
        let payload = source.export_queue(b"jobs").expect("the queue is there");
        assert!(!source.has_queue(b"jobs"));
        assert!(source.has_queue(b"other"), "other queues stay");
        assert!(ids.iter().all(|id| source.get(id).is_none()));
        assert_eq!(source.leases_of(worker), 0);
        source.check_invariants();
        assert_eq!(
            target.import_queue(&payload, now).unwrap(),
            Bytes::from_static(b"jobs")
        );
        target.check_invariants();
        assert!(ids.iter().all(|id| target.get(id).is_some()));
        // The worker's lease carried over; the connection's went back to the queue's head.
        assert_eq!(target.leases_of(7), 0);
        target.ack(&leased[0].id, worker, None, now).unwrap();
        assert_eq!(target.fetch(&jobs, 10, Some(30_000), 8, now).len(), 3);
        target.check_invariants();
        // A queue that is there already is refused, and the payload's queue is kept out.
        submit(&mut source, b"jobs", "again");
        let clash = source.export_queue(b"jobs").unwrap();
        assert_eq!(
            target.import_queue(&clash, now).unwrap_err(),
            "BUSYKEY Target key name already exists."
        );
        assert!(target.import_queue(b"\x05garbage", now).is_err());
        assert!(source.export_queue(b"nosuch").is_none());
        target.check_invariants();
    }

    #[test]
    fn queues_copied_for_a_slot_move_keep_their_leases_and_leave_the_source_as_it_was() {
        let mut source = Engine::new(60_000);
        let mut target = Engine::new(60_000);
        let worker = worker_owner(b"w1");
        let now = NOW;
        let ids: Vec<Bytes> = (0..3)
            .map(|i| submit(&mut source, b"jobs", &format!("p{i}")))
            .collect();
        submit(&mut source, b"other", "stays");
        let jobs = [Bytes::from_static(b"jobs")];
        let by_worker = source.fetch(&jobs, 1, Some(30_000), worker, now);
        let by_connection = source.fetch(&jobs, 1, Some(30_000), 7, now);
        let mut before = Vec::new();
        source.export(&mut |part| before.push(part.to_vec()));

        let owns = |name: &[u8]| name == b"jobs";
        let payload = source.copy_queues(&owns).expect("a queue to copy");
        let mut after = Vec::new();
        source.export(&mut |part| after.push(part.to_vec()));
        assert_eq!(before, after, "a copy leaves the source as it was");
        assert!(source.copy_queues(&|name| name == b"nosuch").is_none());

        // A copy begun before (a leader that lost its leadership mid-way) is replaced.
        assert_eq!(target.take_in_queues(&payload), Ok(1));
        assert_eq!(target.take_in_queues(&payload), Ok(1));
        target.check_invariants();
        assert!(ids.iter().all(|id| target.get(id).is_some()));
        assert!(target.get(b"nosuch").is_none());
        // Both leases carried over, the connection's too (it ends by its expiry).
        assert_eq!((target.leases_of(worker), target.leases_of(7)), (1, 1));
        target.ack(&by_worker[0].id, worker, None, now).unwrap();
        assert!(target.ack(&by_connection[0].id, 8, None, now).is_err());

        assert_eq!(source.remove_queues(&owns), 1);
        assert!(!source.has_queue(b"jobs") && source.has_queue(b"other"));
        assert!(ids.iter().all(|id| source.get(id).is_none()));
        assert_eq!(source.leases_of(worker), 0);
        source.check_invariants();
        assert!(target.take_in_queues(b"\x05garbage").is_err());
    }
}
