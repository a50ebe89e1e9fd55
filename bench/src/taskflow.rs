//! The job-flow load: P producer connections submit jobs and W worker connections take them,
//! one job at a time, each connection with one command in flight, all driven by one thread's
//! poll loop on the load CPU the process is pinned to. A job's payload is its submit time, so a worker records the
//! end-to-end latency from submit to the moment it holds the job. Producers keep at most
//! `BACKLOG_MAX` jobs waiting, so the run measures the servers' job throughput, not a queue
//! that grows without bound.
//!
//! Three flows, one per way of running jobs:
//! - `Tasks`: WeTask's `TASK.SUBMIT`, and `TASK.FETCH … BLOCK … ACK previous` (one command
//!   per job, with leases: a killed worker's job comes back);
//! - `Brpop`: Redis `LPUSH` + `BRPOP` (Sidekiq's way: one command per job, a killed worker's
//!   job is lost);
//! - `Lmove`: Redis `LPUSH` + `BLMOVE` to a per-worker processing list, then `LREM` once done
//!   (the reliable pattern: two commands per job).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use wetask_protocol::{encode, Frame, FrameDecoder, Protocol};

use crate::loadgen::{write_bulk, write_header, Link};

/// Most jobs submitted but not yet taken; producers wait above it.
pub const BACKLOG_MAX: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Flow {
    Tasks,
    Brpop,
    Lmove,
}

pub struct FlowSpec {
    pub addr: SocketAddr,
    pub flow: Flow,
    pub producers: usize,
    pub workers: usize,
    /// `Tasks` jobs carry `GROUP t<n>` for n in 0..groups, in turn (0: no groups).
    pub groups: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Or stop once this many jobs were measured (whichever comes first).
    pub jobs: Option<u64>,
    /// A name no earlier run used, so a run never sees another's leftover jobs.
    pub queue: String,
}

pub struct FlowResult {
    /// Jobs taken by workers during the measured window.
    pub jobs: u64,
    /// Every job taken, warm-up included (for CPU per job).
    pub total_jobs: u64,
    pub elapsed: Duration,
    pub latency_us: Histogram<u64>,
    pub errors: u64,
}

impl FlowResult {
    pub fn jobs_per_sec(&self) -> f64 {
        self.jobs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

struct Conn {
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    out: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Conn {
            stream,
            decoder: FrameDecoder::default(),
            buf: BytesMut::new(),
            out: Vec::new(),
        })
    }

    /// The next reply.
    fn reply(&mut self) -> io::Result<Frame> {
        loop {
            if let Some(reply) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                return Ok(reply);
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Queues `count` jobs of `payload_bytes` in one queue, in pipelines of 100 (`Tasks`:
/// TASK.SUBMIT; the Redis flows: LPUSH), nobody taking them: what waiting jobs cost.
pub fn fill_queue(
    addr: SocketAddr,
    flow: Flow,
    count: u64,
    payload_bytes: usize,
) -> io::Result<()> {
    let mut conn = Conn::open(addr)?;
    let payload = vec![b'x'; payload_bytes];
    let verb: &[u8] = if flow == Flow::Tasks {
        b"TASK.SUBMIT"
    } else {
        b"LPUSH"
    };
    let mut left = count;
    while left > 0 {
        let batch = left.min(100);
        conn.out.clear();
        for _ in 0..batch {
            let frame = Frame::Array(
                [verb, b"waiting".as_slice(), &payload]
                    .iter()
                    .map(|a| Frame::Bulk(Bytes::copy_from_slice(a)))
                    .collect(),
            );
            encode(&mut conn.out, &frame, Protocol::Resp2);
        }
        conn.stream.write_all(&conn.out)?;
        for _ in 0..batch {
            if let Frame::Error(e) = conn.reply()? {
                return Err(io::Error::other(String::from_utf8_lossy(&e).into_owned()));
            }
        }
        left -= batch;
    }
    Ok(())
}

/// What a connection waits for the answer to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    /// Nothing in flight: a producer held back while the backlog is full.
    Nothing,
    Submit,
    Fetch,
    /// `Lmove`: the `LREM` that finishes the job it holds.
    Remove,
}

enum Role {
    Producer,
    Worker {
        /// `Lmove`: this worker's processing list.
        processing: Vec<u8>,
        /// `Tasks`: the task to acknowledge with the next fetch.
        previous: Option<Bytes>,
    },
}

struct FlowConn {
    link: Link,
    role: Role,
    awaiting: Awaiting,
}

/// The flow's counts, kept by the one thread that runs it.
struct Tally {
    start: Instant,
    measure_from: Instant,
    /// Submissions answered.
    submitted: u64,
    /// Jobs workers got, warm-up included.
    taken: u64,
    /// Jobs workers got after the warm-up.
    measured: u64,
    errors: u64,
    groups_turn: u64,
    latency: Histogram<u64>,
}

impl Tally {
    fn backlog(&self) -> u64 {
        self.submitted.saturating_sub(self.taken)
    }
}

/// Runs the flow for warm-up plus duration and reports the measured window.
///
/// One thread drives every connection through one `mio` poll loop, as the key-value load
/// generator does: each connection still has one command in flight at a time, so the
/// servers see the same traffic as from P + W blocking clients, but the load CPU spends a
/// `read` and a `write` per command rather than a thread's sleep and wake-up as well. With a
/// thread per connection, the load CPU saturated before either server did (98% busy against
/// the server's 93%), so the flow measured the client (docs/perf-notes.md).
pub fn run(spec: FlowSpec) -> io::Result<FlowResult> {
    use mio::{Events, Poll, Token};

    let mut poll = Poll::new()?;
    let mut conns = Vec::with_capacity(spec.producers + spec.workers);
    for index in 0..spec.workers + spec.producers {
        let role = if index < spec.workers {
            Role::Worker {
                processing: format!("{}:processing:{index}", spec.queue).into_bytes(),
                previous: None,
            }
        } else {
            Role::Producer
        };
        conns.push(FlowConn {
            link: Link::connect(spec.addr, &poll, Token(index))?,
            role,
            awaiting: Awaiting::Nothing,
        });
    }
    let start = Instant::now();
    let mut tally = Tally {
        start,
        measure_from: start + spec.warmup,
        submitted: 0,
        taken: 0,
        measured: 0,
        errors: 0,
        groups_turn: 0,
        latency: Histogram::new(3).expect("histogram"),
    };
    for conn in conns.iter_mut() {
        next_command(&spec, &mut tally, conn, &poll)?;
    }
    let mut events = Events::with_capacity(256);
    let mut scratch = vec![0u8; 16 * 1024];
    let mut window_start: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if window_start.is_none() && now >= tally.measure_from {
            window_start = Some(now);
        }
        if let Some(from) = window_start {
            let by_jobs = spec.jobs.is_some_and(|limit| tally.measured >= limit);
            if by_jobs || now.duration_since(from) >= spec.duration {
                break;
            }
        }
        poll.poll(&mut events, Some(Duration::from_millis(5)))?;
        for event in events.iter() {
            let index = event.token().0;
            let conn = &mut conns[index];
            if event.is_writable() {
                conn.link.flush(&poll)?;
            }
            if !event.is_readable() {
                continue;
            }
            conn.link.read_available(&mut scratch)?;
            while let Some(reply) = conn.link.reply()? {
                on_reply(&spec, &mut tally, conn, reply)?;
                next_command(&spec, &mut tally, conn, &poll)?;
            }
        }
        // Producers held back by a full backlog go on once workers have taken jobs.
        for conn in conns.iter_mut().skip(spec.workers) {
            if tally.backlog() >= BACKLOG_MAX {
                break;
            }
            if conn.awaiting == Awaiting::Nothing {
                next_command(&spec, &mut tally, conn, &poll)?;
            }
        }
    }
    let window_start = window_start.unwrap_or(start);
    Ok(FlowResult {
        jobs: tally.measured,
        total_jobs: tally.taken,
        elapsed: window_start.elapsed(),
        latency_us: tally.latency,
        errors: tally.errors,
    })
}

/// Takes in the reply to what `conn` sent, and sets what it sends next.
fn on_reply(
    spec: &FlowSpec,
    tally: &mut Tally,
    conn: &mut FlowConn,
    reply: Frame,
) -> io::Result<()> {
    let was = std::mem::replace(&mut conn.awaiting, Awaiting::Nothing);
    if reply.is_error() {
        tally.errors += 1;
    }
    match was {
        Awaiting::Nothing => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a reply to nothing sent",
            ))
        }
        Awaiting::Submit => tally.submitted += 1,
        Awaiting::Remove => {}
        Awaiting::Fetch => {
            let Role::Worker { previous, .. } = &mut conn.role else {
                unreachable!("only workers fetch");
            };
            *previous = None;
            let Some(payload) = job_of(spec.flow, &reply) else {
                return Ok(());
            };
            let now = tally.start.elapsed().as_nanos() as u64;
            let submitted: u64 = std::str::from_utf8(&payload)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(now);
            tally.taken += 1;
            if Instant::now() >= tally.measure_from {
                tally.measured += 1;
                let micros = now.saturating_sub(submitted) / 1000;
                let _ = tally.latency.record(micros.max(1));
            }
            match spec.flow {
                Flow::Tasks => *previous = task_id_of(&reply),
                Flow::Brpop => {}
                Flow::Lmove => {
                    // The job is done: take it off this worker's processing list.
                    let Role::Worker { processing, .. } = &conn.role else {
                        unreachable!("only workers fetch");
                    };
                    conn.link.out.clear();
                    command(&mut conn.link.out, &[b"LREM", processing, b"1", &payload]);
                    conn.awaiting = Awaiting::Remove;
                }
            }
        }
    }
    Ok(())
}

/// Sends `conn`'s next command unless one is set already (an `LREM`) or it is a producer
/// held back by the backlog.
fn next_command(
    spec: &FlowSpec,
    tally: &mut Tally,
    conn: &mut FlowConn,
    poll: &mio::Poll,
) -> io::Result<()> {
    let queue = spec.queue.as_bytes();
    if conn.awaiting == Awaiting::Nothing {
        conn.link.out.clear();
        match &conn.role {
            Role::Producer => {
                if tally.backlog() >= BACKLOG_MAX {
                    return Ok(());
                }
                let stamp = tally.start.elapsed().as_nanos().to_string();
                match spec.flow {
                    Flow::Tasks if spec.groups > 0 => {
                        tally.groups_turn += 1;
                        let group = format!("t{}", tally.groups_turn % spec.groups as u64);
                        command(
                            &mut conn.link.out,
                            &[
                                b"TASK.SUBMIT",
                                queue,
                                stamp.as_bytes(),
                                b"GROUP",
                                group.as_bytes(),
                            ],
                        );
                    }
                    Flow::Tasks => command(
                        &mut conn.link.out,
                        &[b"TASK.SUBMIT", queue, stamp.as_bytes()],
                    ),
                    Flow::Brpop | Flow::Lmove => {
                        command(&mut conn.link.out, &[b"LPUSH", queue, stamp.as_bytes()])
                    }
                }
                conn.awaiting = Awaiting::Submit;
            }
            Role::Worker {
                processing,
                previous,
            } => {
                match (spec.flow, previous) {
                    (Flow::Tasks, Some(id)) => command(
                        &mut conn.link.out,
                        &[b"TASK.FETCH", queue, b"BLOCK", b"100", b"ACK", id],
                    ),
                    (Flow::Tasks, None) => command(
                        &mut conn.link.out,
                        &[b"TASK.FETCH", queue, b"BLOCK", b"100"],
                    ),
                    (Flow::Brpop, _) => command(&mut conn.link.out, &[b"BRPOP", queue, b"0.1"]),
                    (Flow::Lmove, _) => command(
                        &mut conn.link.out,
                        &[b"BLMOVE", queue, processing, b"RIGHT", b"LEFT", b"0.1"],
                    ),
                }
                conn.awaiting = Awaiting::Fetch;
            }
        }
    }
    conn.link.send(poll)
}

fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    write_header(out, b'*', args.len());
    for arg in args {
        write_bulk(out, arg);
    }
}

/// The payload (the submit time) of a job a worker got, if it got one.
fn job_of(flow: Flow, reply: &Frame) -> Option<Bytes> {
    match (flow, reply) {
        (Flow::Tasks, Frame::Array(tasks)) => match tasks.first() {
            Some(Frame::Array(fields)) => match fields.get(2) {
                Some(Frame::Bulk(payload)) => Some(payload.clone()),
                _ => None,
            },
            _ => None,
        },
        (Flow::Brpop, Frame::Array(pair)) => match pair.get(1) {
            Some(Frame::Bulk(payload)) => Some(payload.clone()),
            _ => None,
        },
        (Flow::Lmove, Frame::Bulk(payload)) => Some(payload.clone()),
        _ => None,
    }
}

fn task_id_of(reply: &Frame) -> Option<Bytes> {
    let Frame::Array(tasks) = reply else {
        return None;
    };
    let Some(Frame::Array(fields)) = tasks.first() else {
        return None;
    };
    match fields.first() {
        Some(Frame::Bulk(id)) => Some(id.clone()),
        _ => None,
    }
}
