//! At a start, how the shards decide the cross-shard parts a crash left open at the end of
//! their journals (`wetask_shards::shard::cross_commit`): a part is replayed only if its
//! coordinator's journal, which another shard loads on another thread, shows the commit.
//! Each shard publishes its last commits as soon as it has loaded; only a shard with an
//! open part (rare: a crash cut a cross-shard operation) waits, for its coordinator's. A
//! shard publishes before it could wait, so no two wait on each other, and a start with no
//! open part waits for nothing.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex};

use wetask_shards::shard::cross_commit::OpenPart;
use wetask_shards::Shard;

/// A shard's last commits (`Shard::last_commits`).
pub type Commits = BTreeMap<u64, u64>;

/// Replays `part`, left open on shard `shard`, or rolls it back: it committed when its
/// coordinator's last commit naming `shard` is its token. Logs which.
pub fn resolve(
    part: OpenPart,
    shard: usize,
    coordinator: Option<&Commits>,
    into: &mut Shard,
) -> Result<(), String> {
    let last = coordinator.and_then(|c| c.get(&(shard as u64)).copied());
    let committed = part.committed(last);
    tracing::warn!(
        shard,
        token = part.token,
        coordinator = part.coordinator(),
        operations = part.operations(),
        committed,
        "the journal ends inside a cross-shard operation (a crash mid-operation): {}",
        if committed {
            "it committed; replayed"
        } else {
            "it never committed; its part here is rolled back"
        }
    );
    part.resolve(into, committed)
}

pub struct Rendezvous {
    state: Mutex<State>,
    published: Condvar,
}

struct State {
    commits: Vec<Option<Commits>>,
    /// A shard failed to load (or to start): nobody waits any more, the start fails.
    failed: bool,
}

impl Rendezvous {
    pub fn new(shard_count: usize) -> Self {
        Rendezvous {
            state: Mutex::new(State {
                commits: vec![None; shard_count],
                failed: false,
            }),
            published: Condvar::new(),
        }
    }

    /// Shard `id` has loaded: its last commits (`None`: its load failed).
    pub fn publish(&self, id: usize, commits: Option<Commits>) {
        let mut state = self.state.lock().expect("rendezvous");
        match commits {
            Some(commits) => state.commits[id] = Some(commits),
            None => state.failed = true,
        }
        self.published.notify_all();
    }

    /// Shard `id`'s last commits, once it has published them; `None` when a shard failed
    /// (or `id` names no shard: a damaged token).
    pub fn commits_of(&self, id: usize) -> Option<Commits> {
        let state = self.state.lock().expect("rendezvous");
        if id >= state.commits.len() {
            return None;
        }
        let state = self
            .published
            .wait_while(state, |s| s.commits[id].is_none() && !s.failed)
            .expect("rendezvous");
        if state.failed {
            return None;
        }
        state.commits[id].clone()
    }

    /// A shard that will never publish (it failed before its load): nobody waits for it.
    pub fn abandon(&self) {
        self.state.lock().expect("rendezvous").failed = true;
        self.published.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_shard_waits_only_for_the_coordinator_it_asks_for() {
        let meeting = Arc::new(Rendezvous::new(3));
        let waiter = {
            let meeting = meeting.clone();
            std::thread::spawn(move || meeting.commits_of(2))
        };
        meeting.publish(0, Some(BTreeMap::from([(1, 10)])));
        assert_eq!(meeting.commits_of(0), Some(BTreeMap::from([(1, 10)])));
        meeting.publish(2, Some(BTreeMap::from([(0, 7)])));
        assert_eq!(
            waiter.join().expect("joins"),
            Some(BTreeMap::from([(0, 7)]))
        );
        assert_eq!(meeting.commits_of(9), None);
    }

    #[test]
    fn a_failed_shard_releases_the_waiters() {
        let meeting = Arc::new(Rendezvous::new(2));
        let waiter = {
            let meeting = meeting.clone();
            std::thread::spawn(move || meeting.commits_of(1))
        };
        meeting.publish(1, None);
        assert!(waiter.join().expect("joins").is_none());
        let late = Rendezvous::new(2);
        late.abandon();
        assert!(late.commits_of(0).is_none());
    }
}
