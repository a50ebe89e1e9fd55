//! The function libraries as a consensus group's state. FUNCTION LOAD's libraries are the
//! server's (Lua lives there), but in consensus mode they must be the same on every member
//! and survive a leader, so the metadata group's shard carries them as it carries keys: its
//! leader journals the whole set after each change (`Op::Functions`, one record, proposed
//! with the turn's other operations), its followers apply it, a snapshot holds it (a part
//! of its own), and the server takes each new set from here and loads it
//! ([`Shard::take_changed_functions`]). The shard itself only keeps the bytes.

use bytes::Bytes;

use super::Shard;
use crate::persist::journal::ops;

impl Shard {
    /// On the leader, after a FUNCTION change ran: `dump` (FUNCTION DUMP's format) is the
    /// set from here on, journaled so the group's log carries it.
    pub fn log_functions(&mut self, dump: Bytes) {
        if let Some(journal) = self.journal_turn() {
            ops::put_functions(journal, &dump);
        }
        self.functions = Some(dump);
    }

    /// A set the log or a snapshot carried: kept, and flagged for the server to load.
    pub(crate) fn set_functions(&mut self, dump: Bytes) {
        self.functions = Some(dump);
        self.functions_changed = true;
    }

    /// The set the state holds (`None`: no FUNCTION change ever went through the log).
    pub fn functions(&self) -> Option<&Bytes> {
        self.functions.as_ref()
    }

    /// Once after each set applied, loaded from a snapshot, or dropped by a rebuild
    /// ([`Shard::begin_full_sync`]): the set the server must load now (`Some(None)`: no
    /// libraries).
    pub fn take_changed_functions(&mut self) -> Option<Option<Bytes>> {
        std::mem::take(&mut self.functions_changed).then(|| self.functions.clone())
    }

    /// A rebuild starts: what the set was is unknown until the snapshot and log say again.
    pub(crate) fn forget_functions(&mut self) {
        self.functions = None;
        self.functions_changed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::cross_commit::Replay;
    use crate::shard::replica::tests::{loaded, records, snapshot_parts};

    #[test]
    fn a_set_the_leader_logs_reaches_a_follower_a_snapshot_and_a_rebuild() {
        let mut leader = Shard::new(0);
        leader.set_journaling(true);
        leader.log_functions(Bytes::from_static(b"first"));
        leader.log_functions(Bytes::from_static(b"second"));
        assert_eq!(leader.functions(), Some(&Bytes::from_static(b"second")));
        // The leader ran the change itself: nothing for its server to load again.
        assert_eq!(leader.take_changed_functions(), None);

        let mut follower = Shard::new(0);
        assert_eq!(follower.take_changed_functions(), None);
        let mut replay = Replay::default();
        for payload in records(&mut leader) {
            follower
                .apply_replicated(payload, &mut replay)
                .expect("applies");
        }
        assert_eq!(
            follower.take_changed_functions(),
            Some(Some(Bytes::from_static(b"second")))
        );
        assert_eq!(follower.take_changed_functions(), None, "taken once");

        let mut loaded = loaded(snapshot_parts(&mut follower));
        assert_eq!(
            loaded.take_changed_functions(),
            Some(Some(Bytes::from_static(b"second")))
        );

        // A rebuild drops the set until its snapshot and log say it again; with neither
        // holding one, the server is told there are none.
        loaded.begin_full_sync();
        assert_eq!(loaded.functions(), None);
        assert_eq!(loaded.take_changed_functions(), Some(None));
    }
}
