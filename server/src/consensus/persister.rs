//! A group's Raft log written off the shard thread: each Ready's entries and hard state go
//! to a thread of the shard's own, which writes what has gathered, syncs it once, then
//! sends the messages that had to wait for it (a follower's acknowledgements, votes) and
//! tells the shard how far it got (raft-rs's asynchronous Ready: `advance_append_async`,
//! then `on_persist_ready`). So the shard keeps running commands while the disk flushes,
//! and one fdatasync covers every Ready that arrived meanwhile, as the journal's group
//! commit does under `appendfsync always` (docs/DURABILITY.md). A leader counts its own
//! log as a quorum member only once it is synced, so nothing is acknowledged before a
//! quorum has it on disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use raft::eraftpb::Message;

use super::log_file::LogFile;
use super::Consensus;

/// One Ready's share: its number, its encoded records, the messages sent once synced;
/// with `rewrite`, the records replace the whole log (`LogFile::rewrite`).
pub struct Job {
    number: u64,
    bytes: Vec<u8>,
    messages: Vec<Message>,
    rewrite: bool,
}

pub enum Persister {
    /// The log writer thread.
    Thread {
        jobs: Sender<Job>,
        persisted: Arc<AtomicU64>,
    },
    /// Built only with a simulated clock, which only the tests have.
    #[cfg_attr(not(test), allow(dead_code))]
    /// A simulation's (`consensus::sim`): jobs wait until it writes them ([`Persister::write_next`]);
    /// a crash loses the ones still waiting, as it loses what a real writer had not synced.
    Held {
        log: LogFile,
        waiting: std::collections::VecDeque<Job>,
        persisted: u64,
        consensus: Arc<Consensus>,
        shard: usize,
    },
}

impl Persister {
    pub fn spawn(
        log: LogFile,
        consensus: Arc<Consensus>,
        shard: usize,
    ) -> Result<Persister, String> {
        if consensus.clock.is_simulated() {
            return Ok(Persister::Held {
                log,
                waiting: Default::default(),
                persisted: 0,
                consensus,
                shard,
            });
        }
        let (jobs, queue) = channel();
        let persisted = Arc::new(AtomicU64::new(0));
        let published = persisted.clone();
        std::thread::Builder::new()
            .name(format!("wetask-raftlog-{shard}"))
            .spawn(move || run(log, queue, &published, &consensus, shard))
            .map_err(|e| format!("cannot start the Raft log writer: {e}"))?;
        Ok(Persister::Thread { jobs, persisted })
    }

    /// Queues Ready `number`'s records and its messages to send once they are synced.
    pub fn submit(&mut self, number: u64, bytes: Vec<u8>, messages: Vec<Message>) {
        self.queue(Job {
            number,
            bytes,
            messages,
            rewrite: false,
        });
    }

    /// Queues a rewrite of the whole log as `bytes` (after what is queued before it), for
    /// Ready `number` (0: none; the log was compacted).
    pub fn rewrite(&mut self, number: u64, bytes: Vec<u8>, messages: Vec<Message>) {
        self.queue(Job {
            number,
            bytes,
            messages,
            rewrite: true,
        });
    }

    fn queue(&mut self, job: Job) {
        match self {
            Persister::Thread { jobs, .. } => drop(jobs.send(job)),
            Persister::Held { waiting, .. } => waiting.push_back(job),
        }
    }

    /// The last Ready number synced.
    pub fn persisted(&self) -> u64 {
        match self {
            Persister::Thread { persisted, .. } => persisted.load(Ordering::Acquire),
            Persister::Held { persisted, .. } => *persisted,
        }
    }

    /// A simulation's crash mid-write: some bytes of the oldest waiting job reach the
    /// log, not all (`cut` picks how many), and nothing is acknowledged.
    #[cfg(test)]
    pub fn write_torn(&mut self, cut: u64) {
        let Persister::Held { log, waiting, .. } = self else {
            return;
        };
        let Some(job) = waiting.front() else {
            return;
        };
        if job.rewrite || job.bytes.len() < 2 {
            // A rewrite goes to a new file renamed into place: torn, it is not there.
            return;
        }
        let piece = 1 + (cut % (job.bytes.len() as u64 - 1)) as usize;
        if let Err(e) = log.write_synced(&job.bytes[..piece]) {
            panic!("a simulated torn write failed: {e}");
        }
    }

    #[cfg(test)]
    /// A simulation's: writes every waiting job, then sends their messages, as the thread
    /// does with what has gathered; false when none waited.
    pub fn write_waiting(&mut self) -> bool {
        let Persister::Held {
            log,
            waiting,
            persisted,
            consensus,
            shard,
        } = self
        else {
            return false;
        };
        if waiting.is_empty() {
            return false;
        }
        let jobs: Vec<Job> = waiting.drain(..).collect();
        for job in &jobs {
            let written = match job.rewrite {
                true => log.rewrite(&job.bytes),
                false => log.write_synced(&job.bytes),
            };
            if let Err(e) = written {
                panic!("a simulated Raft log write failed: {e}");
            }
        }
        for job in jobs {
            for message in &job.messages {
                consensus.transport.send(*shard, message);
            }
            *persisted = (*persisted).max(job.number);
        }
        true
    }
}

fn run(
    mut log: LogFile,
    queue: Receiver<Job>,
    persisted: &AtomicU64,
    consensus: &Consensus,
    shard: usize,
) {
    let mut bytes = Vec::new();
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        jobs.extend(queue.try_iter());
        bytes.clear();
        let started = std::time::Instant::now();
        for job in &mut jobs {
            if job.rewrite {
                // What came before it is written first: the rewrite holds it too, but a
                // crash between the two must find it somewhere.
                write(&mut log, &bytes);
                bytes.clear();
                if let Err(e) = log.rewrite(&job.bytes) {
                    tracing::error!("{e}: exiting");
                    std::process::exit(1);
                }
                continue;
            }
            bytes.append(&mut job.bytes);
        }
        // An empty batch (Readies with nothing to sync) only passes its messages on.
        write(&mut log, &bytes);
        if !bytes.is_empty() {
            let group = &consensus.groups[shard];
            group.syncs.fetch_add(1, Ordering::Relaxed);
            group
                .sync_us
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        let last = jobs.iter().map(|j| j.number).max().unwrap_or(0);
        for job in jobs {
            for message in &job.messages {
                consensus.transport.send(shard, message);
            }
        }
        persisted.fetch_max(last, Ordering::AcqRel);
        consensus.doorbells[shard].ring();
    }
}

/// Writes and syncs `bytes`; a failure ends the process: a reply may wait on this write,
/// and it must not go out unlogged.
fn write(log: &mut LogFile, bytes: &[u8]) {
    if let Err(e) = log.write_synced(bytes) {
        tracing::error!("{e}: exiting");
        std::process::exit(1);
    }
}
