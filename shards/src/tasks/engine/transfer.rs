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
        let mut part = Engine::new(self.retention_ms).with_dead_retention(self.dead_retention_ms);
        let mut reader = Reader::new(Bytes::copy_from_slice(payload));
        while reader.position() < payload.len() {
            let bytes = reader
                .bytes()
                .map_err(|e| format!("ERR bad queue payload: {}", e.0))?;
            part.import_part(bytes)
                .map_err(|e| format!("ERR bad queue payload: {}", e.0))?;
        }
        part.finish_import()
            .map_err(|e| format!("ERR bad queue payload: {}", e.0))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::workers::worker_owner;
    use crate::tasks::SubmitOptions;

    #[test]
    fn a_queue_moves_whole_and_a_worker_acks_its_lease_on_the_new_engine() {
        let mut source = Engine::new(60_000);
        let mut target = Engine::new(60_000);
        let worker = worker_owner(b"w1");
        let now = 1_000;
        let submit = |engine: &mut Engine, queue: &[u8], payload: &str| {
            let options = SubmitOptions::default();
            let payload = Bytes::from(payload.to_string());
            engine.submit(queue, payload, options, now).unwrap().0
        };
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
}
