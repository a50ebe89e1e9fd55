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
    /// SET then `WAIT 1 0` on random keys, one request (what a Redis primary with one
    /// replica does to acknowledge a write only once a replica has it).
    SetWait,
}

impl Mix {
    /// Replies one request of this mix gets.
    fn replies(self) -> usize {
        match self {
            Mix::SetWait => 2,
            _ => 1,
        }
    }
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

/// One non-blocking client connection of a poll loop (this generator's and the job flow's):
/// what it has read, and what it has yet to write.
pub(crate) struct Link {
    stream: TcpStream,
    token: Token,
    input: BytesMut,
    decoder: FrameDecoder,
    /// The request(s) being sent; `written` bytes of it went.
    pub(crate) out: Vec<u8>,
    written: usize,
    /// Registered for writability because a write was short.
    want_write: bool,
}

impl Link {
    /// Connects (no Nagle) and registers for readability under `token`.
    pub(crate) fn connect(addr: SocketAddr, poll: &Poll, token: Token) -> io::Result<Link> {
        let std_stream = std::net::TcpStream::connect(addr)?;
        std_stream.set_nodelay(true)?;
        std_stream.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std_stream);
        poll.registry()
            .register(&mut stream, token, Interest::READABLE)?;
        Ok(Link {
            stream,
            token,
            input: BytesMut::with_capacity(16 * 1024),
            decoder: FrameDecoder::default(),
            out: Vec::with_capacity(256),
            written: 0,
            want_write: false,
        })
    }

    /// Reads everything the socket has (the poll is edge-triggered).
    pub(crate) fn read_available(&mut self, scratch: &mut [u8]) -> io::Result<()> {
        loop {
            match self.stream.read(scratch) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed a connection",
                    ))
                }
                Ok(n) => self.input.extend_from_slice(&scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// The next whole reply read, if any.
    pub(crate) fn reply(&mut self) -> io::Result<Option<Frame>> {
        self.decoder
            .decode(&mut self.input)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }

    /// Sends `out` from its start.
    pub(crate) fn send(&mut self, poll: &Poll) -> io::Result<()> {
        self.written = 0;
        self.flush(poll)
    }

    /// Writes what is pending; asks for writability only while a write is short, so the
    /// common case costs one `write` and no `epoll_ctl`.
    pub(crate) fn flush(&mut self, poll: &Poll) -> io::Result<()> {
        while self.written < self.out.len() {
            match self.stream.write(&self.out[self.written..]) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.want_write {
                        let both = Interest::READABLE | Interest::WRITABLE;
                        poll.registry()
                            .reregister(&mut self.stream, self.token, both)?;
                        self.want_write = true;
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        if self.want_write {
            poll.registry()
                .reregister(&mut self.stream, self.token, Interest::READABLE)?;
            self.want_write = false;
        }
        Ok(())
    }
}

struct Conn {
    link: Link,
    awaiting: usize,
    sent_at: Instant,
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
            Mix::SetWait => 4,
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
            0 | 3 | 4 => (b"SET", true),
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
        if kind == 4 {
            write_header(out, b'*', 3);
            write_bulk(out, b"WAIT");
            write_bulk(out, b"1");
            write_bulk(out, b"0");
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
        conns.push(Conn {
            link: Link::connect(spec.addr, &poll, Token(i))?,
            awaiting: 0,
            sent_at: Instant::now(),
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

    for conn in conns.iter_mut() {
        issue(conn, &mut generator, spec.pipeline, &poll)?;
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
                conn.link.flush(&poll)?;
            }
            if !event.is_readable() {
                continue;
            }
            conn.link.read_available(&mut scratch)?;
            while conn.awaiting > 0 {
                let Some(frame) = conn.link.reply()? else {
                    break;
                };
                if matches!(frame, Frame::Error(_)) {
                    errors += 1;
                }
                conn.awaiting -= 1;
                if conn.awaiting % spec.mix.replies() == 0 {
                    ops += 1;
                    total_ops += 1;
                }
            }
            if conn.awaiting == 0 {
                let micros = conn.sent_at.elapsed().as_micros().max(1) as u64;
                if measuring {
                    latency.saturating_record_n(micros, spec.pipeline as u64);
                }
                if !stopping {
                    issue(conn, &mut generator, spec.pipeline, &poll)?;
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
) -> io::Result<()> {
    conn.link.out.clear();
    for _ in 0..pipeline {
        generator.command(&mut conn.link.out);
    }
    conn.awaiting = pipeline * generator.spec.mix.replies();
    conn.sent_at = Instant::now();
    conn.link.send(poll)
}
