//! The job-flow load: P producer connections submit jobs and W worker connections take them,
//! one job at a time, each worker with its own blocking connection (threads, all on the load
//! CPU the process is pinned to). A job's payload is its submit time, so a worker records the
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use wetask_protocol::{encode, Frame, FrameDecoder, Protocol};

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

    fn call(&mut self, args: &[&[u8]]) -> io::Result<Frame> {
        let frame = Frame::Array(
            args.iter()
                .map(|a| Frame::Bulk(Bytes::copy_from_slice(a)))
                .collect(),
        );
        self.out.clear();
        encode(&mut self.out, &frame, Protocol::Resp2);
        self.stream.write_all(&self.out)?;
        self.reply()
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

struct Shared {
    start: Instant,
    measure_from: Instant,
    stop: AtomicBool,
    submitted: AtomicU64,
    taken: AtomicU64,
    measured: AtomicU64,
    errors: AtomicU64,
    latency: Mutex<Histogram<u64>>,
}

fn produce(spec: &FlowSpec, shared: &Shared) -> io::Result<()> {
    let mut conn = Conn::open(spec.addr)?;
    let queue = spec.queue.as_bytes();
    let mut sent = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let backlog = shared
            .submitted
            .load(Ordering::Relaxed)
            .saturating_sub(shared.taken.load(Ordering::Relaxed));
        if backlog >= BACKLOG_MAX {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        let stamp = shared.start.elapsed().as_nanos().to_string();
        let reply = match spec.flow {
            Flow::Tasks if spec.groups > 0 => {
                sent += 1;
                let group = format!("t{}", sent % spec.groups as u64);
                conn.call(&[
                    b"TASK.SUBMIT",
                    queue,
                    stamp.as_bytes(),
                    b"GROUP",
                    group.as_bytes(),
                ])?
            }
            Flow::Tasks => conn.call(&[b"TASK.SUBMIT", queue, stamp.as_bytes()])?,
            Flow::Brpop | Flow::Lmove => conn.call(&[b"LPUSH", queue, stamp.as_bytes()])?,
        };
        if reply.is_error() {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        shared.submitted.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
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

fn work(spec: &FlowSpec, shared: &Shared, worker: usize) -> io::Result<()> {
    let mut conn = Conn::open(spec.addr)?;
    let queue = spec.queue.as_bytes();
    let processing = format!("{}:processing:{worker}", spec.queue);
    let mut previous: Option<Bytes> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let reply = match spec.flow {
            Flow::Tasks => match &previous {
                Some(id) => conn.call(&[b"TASK.FETCH", queue, b"BLOCK", b"100", b"ACK", id])?,
                None => conn.call(&[b"TASK.FETCH", queue, b"BLOCK", b"100"])?,
            },
            Flow::Brpop => conn.call(&[b"BRPOP", queue, b"0.1"])?,
            Flow::Lmove => conn.call(&[
                b"BLMOVE",
                queue,
                processing.as_bytes(),
                b"RIGHT",
                b"LEFT",
                b"0.1",
            ])?,
        };
        if reply.is_error() {
            shared.errors.fetch_add(1, Ordering::Relaxed);
            previous = None;
            continue;
        }
        let Some(payload) = job_of(spec.flow, &reply) else {
            previous = None;
            continue;
        };
        let now = shared.start.elapsed().as_nanos() as u64;
        let submitted: u64 = std::str::from_utf8(&payload)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(now);
        shared.taken.fetch_add(1, Ordering::Relaxed);
        if Instant::now() >= shared.measure_from {
            shared.measured.fetch_add(1, Ordering::Relaxed);
            let micros = now.saturating_sub(submitted) / 1000;
            let _ = shared
                .latency
                .lock()
                .expect("latency")
                .record(micros.max(1));
        }
        match spec.flow {
            Flow::Tasks => previous = task_id_of(&reply),
            Flow::Brpop => {}
            Flow::Lmove => {
                let done = conn.call(&[b"LREM", processing.as_bytes(), b"1", &payload])?;
                if done.is_error() {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    Ok(())
}

/// Runs the flow for warm-up plus duration and reports the measured window.
pub fn run(spec: FlowSpec) -> io::Result<FlowResult> {
    let start = Instant::now();
    let shared = Arc::new(Shared {
        start,
        measure_from: start + spec.warmup,
        stop: AtomicBool::new(false),
        submitted: AtomicU64::new(0),
        taken: AtomicU64::new(0),
        measured: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        latency: Mutex::new(Histogram::new(3).expect("histogram")),
    });
    let spec = Arc::new(spec);
    let mut threads = Vec::new();
    for worker in 0..spec.workers {
        let (spec, shared) = (spec.clone(), shared.clone());
        threads.push(std::thread::spawn(move || work(&spec, &shared, worker)));
    }
    for _ in 0..spec.producers {
        let (spec, shared) = (spec.clone(), shared.clone());
        threads.push(std::thread::spawn(move || produce(&spec, &shared)));
    }
    std::thread::sleep(spec.warmup);
    let measured_from = shared.measured.load(Ordering::Relaxed);
    let window_start = Instant::now();
    while window_start.elapsed() < spec.duration {
        let measured = shared.measured.load(Ordering::Relaxed) - measured_from;
        if spec.jobs.is_some_and(|limit| measured >= limit) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let jobs = shared.measured.load(Ordering::Relaxed) - measured_from;
    let elapsed = window_start.elapsed();
    shared.stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread
            .join()
            .map_err(|_| io::Error::other("a flow thread panicked"))??;
    }
    let latency_us = shared.latency.lock().expect("latency").clone();
    Ok(FlowResult {
        jobs,
        total_jobs: shared.taken.load(Ordering::Relaxed),
        elapsed,
        latency_us,
        errors: shared.errors.load(Ordering::Relaxed),
    })
}
