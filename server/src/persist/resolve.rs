//! At a start, the shards' meeting point for cross-shard parts a crash left open at the end
//! of their journals (`wetask_shards::cross_commit`): a part is replayed only if its
//! coordinator's journal, which another shard loads on another thread, shows the commit.
//! Each shard publishes its last commits once loaded and waits until every shard has.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex};

use wetask_shards::cross_commit::OpenPart;
use wetask_shards::Shard;

/// Every shard's last commits (`Shard::last_commits`), by shard id.
pub type Commits = Vec<BTreeMap<u64, u64>>;

/// Whether `part`, left open on shard `shard`, committed: its coordinator's last commit
/// naming `shard` is its token.
fn part_committed(part: &OpenPart, shard: usize, commits: &Commits) -> bool {
    let last = commits
        .get(part.coordinator())
        .and_then(|c| c.get(&(shard as u64)).copied());
    part.committed(last)
}

/// Replays `part`, left open on shard `shard`, or rolls it back, as `commits` say; logs
/// which.
pub fn resolve(
    part: OpenPart,
    shard: usize,
    commits: &Commits,
    into: &mut Shard,
) -> Result<(), String> {
    let committed = part_committed(&part, shard, commits);
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
    all_here: Condvar,
}

struct State {
    arrived: usize,
    commits: Commits,
    /// A shard failed to load (or to start): nobody resolves anything, the start fails.
    failed: bool,
}

impl Rendezvous {
    pub fn new(shard_count: usize) -> Self {
        Rendezvous {
            state: Mutex::new(State {
                arrived: 0,
                commits: vec![BTreeMap::new(); shard_count],
                failed: false,
            }),
            all_here: Condvar::new(),
        }
    }

    /// Publishes shard `id`'s last commits (`None`: its load failed) and waits for every
    /// other shard's. `None` when any shard failed.
    pub fn meet(&self, id: usize, commits: Option<BTreeMap<u64, u64>>) -> Option<Commits> {
        let mut state = self.state.lock().expect("rendezvous");
        match commits {
            Some(commits) => state.commits[id] = commits,
            None => state.failed = true,
        }
        state.arrived += 1;
        self.all_here.notify_all();
        let count = state.commits.len();
        let state = self
            .all_here
            .wait_while(state, |s| s.arrived < count && !s.failed)
            .expect("rendezvous");
        (!state.failed).then(|| state.commits.clone())
    }

    /// A shard that will never arrive (it failed before its load): the others stop waiting.
    pub fn abandon(&self) {
        self.state.lock().expect("rendezvous").failed = true;
        self.all_here.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_shard_sees_every_shards_commits() {
        let meeting = Arc::new(Rendezvous::new(3));
        let threads: Vec<_> = (0..3u64)
            .map(|id| {
                let meeting = meeting.clone();
                std::thread::spawn(move || {
                    meeting.meet(id as usize, Some(BTreeMap::from([(id, id + 10)])))
                })
            })
            .collect();
        for thread in threads {
            let commits = thread.join().expect("joins").expect("nobody failed");
            assert_eq!(commits[2].get(&2), Some(&12));
            assert_eq!(commits[0].get(&0), Some(&10));
        }
    }

    #[test]
    fn a_failed_shard_releases_the_others() {
        let meeting = Arc::new(Rendezvous::new(3));
        let waiter = {
            let meeting = meeting.clone();
            std::thread::spawn(move || meeting.meet(0, Some(BTreeMap::new())))
        };
        meeting.meet(1, None);
        assert!(waiter.join().expect("joins").is_none());
        let late = Rendezvous::new(2);
        late.abandon();
        assert!(late.meet(0, Some(BTreeMap::new())).is_none());
    }
}
