//! The load generator: one thread, one `mio` poll loop, many connections. Each connection
//! sends a pipeline of requests, waits for all its replies, records the pipeline's latency
//! for each request in it (as redis-benchmark does), and sends the next one.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use wetask_protocol::{Frame, FrameDecoder};

use crate::keys::{key_name, Distribution, KeyChooser};

/// What each request of a pipeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Mix {
    Set,
    Get,
    /// SET, GET, DEL in turn on random keys.
    SetGetDel,
    /// SET of keys 0, 1, 2 ... in order (loading a key space).
    LoadKeys,
}

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    pub connections: usize,
    pub pipeline: usize,
    pub mix: Mix,
    pub value_bytes: usize,
    pub keyspace: u64,
    pub distribution: Distribution,
    pub warmup: Duration,
    /// Stop after this many requests (after warm-up), or after `duration`, whichever first.
    pub ops: Option<u64>,
    pub duration: Option<Duration>,
}

#[derive(Debug)]
pub struct LoadResult {
    /// Requests answered after the warm-up.
    pub ops: u64,
    /// Requests answered in all, warm-up included (for cost per request over the whole run).
    pub total_ops: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Latency per request, microseconds.
    pub latency_us: Histogram<u64>,
}

impl LoadResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

struct Conn {
    stream: TcpStream,
    out: Vec<u8>,
    written: usize,
    input: BytesMut,
    decoder: FrameDecoder,
    awaiting: usize,
    sent_at: Instant,
    /// Registered for writability because a write was short.
    want_write: bool,
}

struct Generator<'a> {
    spec: &'a LoadSpec,
    keys: KeyChooser,
    value: Vec<u8>,
    next_sequential: u64,
    turn: u64,
}

impl Generator<'_> {
    fn command(&mut self, out: &mut Vec<u8>) {
        let kind = match self.spec.mix {
            Mix::Set => 0,
            Mix::Get => 1,
            Mix::SetGetDel => self.turn % 3,
            Mix::LoadKeys => 3,
        };
        self.turn += 1;
        let key = if kind == 3 {
            self.next_sequential += 1;
            (self.next_sequential - 1) % self.spec.keyspace.max(1)
        } else {
            self.keys.next()
        };
        let mut name = Vec::with_capacity(16);
        key_name(key, &mut name);
        let (verb, with_value): (&[u8], bool) = match kind {
            0 | 3 => (b"SET", true),
            1 => (b"GET", false),
            _ => (b"DEL", false),
        };
        let argc = if with_value { 3 } else { 2 };
        write_header(out, b'*', argc);
        write_bulk(out, verb);
        write_bulk(out, &name);
        if with_value {
            write_bulk(out, &self.value);
        }
    }
}

pub(crate) fn write_header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn write_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    write_header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Runs the load and returns what was measured after the warm-up.
pub fn run(spec: &LoadSpec) -> io::Result<LoadResult> {
    let mut poll = Poll::new()?;
    let mut conns = Vec::with_capacity(spec.connections);
    for i in 0..spec.connections {
        let std_stream = std::net::TcpStream::connect(spec.addr)?;
        std_stream.set_nodelay(true)?;
        std_stream.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std_stream);
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE)?;
        conns.push(Conn {
            stream,
            out: Vec::new(),
            written: 0,
            input: BytesMut::with_capacity(16 * 1024),
            decoder: FrameDecoder::default(),
            awaiting: 0,
            sent_at: Instant::now(),
            want_write: false,
        });
    }
    let mut generator = Generator {
        spec,
        keys: KeyChooser::new(spec.keyspace, spec.distribution),
        value: vec![b'x'; spec.value_bytes],
        next_sequential: 0,
        turn: 0,
    };
    let mut latency =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let start = Instant::now();
    let mut measuring = spec.warmup.is_zero();
    let mut measure_start = start;
    let (mut ops, mut errors, mut issued, mut total_ops) = (0u64, 0u64, 0u64, 0u64);
    let mut stopping = false;
    let mut events = Events::with_capacity(1024);
    let mut scratch = vec![0u8; 64 * 1024];

    for (i, conn) in conns.iter_mut().enumerate() {
        issue(conn, &mut generator, spec.pipeline, &poll, i)?;
        issued += spec.pipeline as u64;
    }
    loop {
        let now = Instant::now();
        if !measuring && now.duration_since(start) >= spec.warmup {
            measuring = true;
            measure_start = now;
            latency.reset();
            ops = 0;
            errors = 0;
            issued = conns.iter().map(|c| c.awaiting as u64).sum();
        }
        if measuring && !stopping {
            let by_ops = spec.ops.is_some_and(|n| issued >= n);
            let by_time = spec
                .duration
                .is_some_and(|d| now.duration_since(measure_start) >= d);
            stopping = by_ops || by_time;
        }
        if stopping && conns.iter().all(|c| c.awaiting == 0) {
            break;
        }
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        for event in events.iter() {
            let index = event.token().0;
            let conn = &mut conns[index];
            if event.is_writable() {
                flush(conn, &poll, index)?;
            }
            if !event.is_readable() {
                continue;
            }
            loop {
                match conn.stream.read(&mut scratch) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "server closed a connection",
                        ))
                    }
                    Ok(n) => conn.input.extend_from_slice(&scratch[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            while conn.awaiting > 0 {
                let frame = conn
                    .decoder
                    .decode(&mut conn.input)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let Some(frame) = frame else { break };
                if matches!(frame, Frame::Error(_)) {
                    errors += 1;
                }
                conn.awaiting -= 1;
                ops += 1;
                total_ops += 1;
            }
            if conn.awaiting == 0 {
                let micros = conn.sent_at.elapsed().as_micros().max(1) as u64;
                if measuring {
                    latency.saturating_record_n(micros, spec.pipeline as u64);
                }
                if !stopping {
                    issue(conn, &mut generator, spec.pipeline, &poll, index)?;
                    issued += spec.pipeline as u64;
                }
            }
        }
    }
    Ok(LoadResult {
        ops,
        total_ops,
        errors,
        elapsed: measure_start.elapsed(),
        latency_us: latency,
    })
}

fn issue(
    conn: &mut Conn,
    generator: &mut Generator<'_>,
    pipeline: usize,
    poll: &Poll,
    index: usize,
) -> io::Result<()> {
    conn.out.clear();
    conn.written = 0;
    for _ in 0..pipeline {
        generator.command(&mut conn.out);
    }
    conn.awaiting = pipeline;
    conn.sent_at = Instant::now();
    flush(conn, poll, index)
}

/// Writes what is pending; asks for writability only while a write is short, so the common
/// case costs one `write` and no `epoll_ctl`.
fn flush(conn: &mut Conn, poll: &Poll, index: usize) -> io::Result<()> {
    while conn.written < conn.out.len() {
        match conn.stream.write(&conn.out[conn.written..]) {
            Ok(n) => conn.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !conn.want_write {
                    let both = Interest::READABLE | Interest::WRITABLE;
                    poll.registry()
                        .reregister(&mut conn.stream, Token(index), both)?;
                    conn.want_write = true;
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
    if conn.want_write {
        poll.registry()
            .reregister(&mut conn.stream, Token(index), Interest::READABLE)?;
        conn.want_write = false;
    }
    Ok(())
}
