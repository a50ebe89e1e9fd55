//! Raft messages between nodes, on threads of their own (no shard thread waits on a
//! socket). Each node listens on its `raft-port`; for each other member one thread holds a
//! connection and writes what the shards hand it, `[length u32][shard u16][message]`
//! (little-endian, the message in raft-rs's protobuf encoding). A message that cannot be
//! sent is dropped: Raft resends what matters (heartbeats, appends after a rejection).
//! Arriving messages go to the shard's inbox ([`super::Consensus::deliver`]).
//!
//! A link opens with a hello frame (shard [`HELLO`]): `wetask-raft 1 ` and the group's
//! secret (`--raft-auth`, compared in constant time). A reader drops a link whose first
//! frame is not a hello with its own secret, so a node that does not know it cannot step
//! a message into a group. The secret goes in the clear, as Redis's AUTH does: the Raft
//! ports belong on a private network (docs/SECURITY.md).

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};

use super::{Consensus, Peer};

/// A message larger than this is refused by the reader: an append carries at most
/// raft-rs's `max_size_per_msg`, far below it, and a snapshot the whole shard's state
/// (so a shard whose snapshot file passes this cannot catch a follower up yet: snapshots
/// are not sent in chunks). The reader's buffer grows with what arrives, not with what a
/// frame's header claims.
pub const FRAME_MAX: usize = 1 << 30;
/// The shard number of a link's first frame, the hello.
const HELLO: u16 = u16::MAX;
const HELLO_PREFIX: &[u8] = b"wetask-raft 1 ";
/// A hello longer than this is refused (a secret is a few dozen bytes).
const HELLO_MAX: usize = 4096;
/// How much of a frame the reader takes at a time.
const READ_STEP: usize = 4 << 20;
/// After a failed connect, messages to that node are dropped for this long.
const RETRY_AFTER: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A message on its way: its shard's group, its encoding, and, for a snapshot, who to
/// tell the leader it went to (raft-rs's `report_snapshot`).
type Frame = (u16, Vec<u8>, Option<u64>);

/// The links to the other members: a queue each, drained by its sender thread.
#[derive(Default)]
pub struct Outbound {
    senders: RwLock<HashMap<u64, Link>>,
    /// A simulation's: messages kept for it to deliver, no links opened.
    captured: Option<Mutex<Vec<(usize, Message)>>>,
}

/// One member's queue, and where its thread connects (shared with the thread, so that a
/// member's new address reaches it).
struct Link {
    queue: Mutex<Sender<Frame>>,
    peer: Arc<Mutex<Peer>>,
}

impl Outbound {
    /// An outbound side that keeps what is sent for a simulation (`consensus::sim`).
    #[cfg(test)]
    pub fn capturing() -> Outbound {
        Outbound {
            senders: RwLock::default(),
            captured: Some(Mutex::default()),
        }
    }

    /// What was sent since the last call (a capturing side's).
    #[cfg(test)]
    pub fn take_captured(&self) -> Vec<(usize, Message)> {
        self.captured
            .as_ref()
            .map(|c| std::mem::take(&mut *c.lock().expect("captured")))
            .unwrap_or_default()
    }

    /// Queues `message` of `shard`'s group for its recipient.
    pub fn send(&self, shard: usize, message: &Message) {
        if let Some(captured) = &self.captured {
            captured
                .lock()
                .expect("captured")
                .push((shard, message.clone()));
            return;
        }
        let senders = self.senders.read().expect("raft senders");
        let Some(link) = senders.get(&message.to) else {
            return;
        };
        let sender = &link.queue;
        let snapshot = (message.get_msg_type() == MessageType::MsgSnapshot).then_some(message.to);
        match message.write_to_bytes() {
            Ok(bytes) => {
                let _ = sender
                    .lock()
                    .expect("raft sender")
                    .send((shard as u16, bytes, snapshot));
            }
            Err(e) => tracing::error!("cannot encode a Raft message: {e}"),
        }
    }
}

/// Starts the listener on this node's raft port and a sender thread per other member.
pub fn spawn(consensus: Arc<Consensus>) -> Result<(), String> {
    let me = consensus.peer(consensus.me).expect("this node is a member");
    let address = format!("{}:{}", me.host, me.raft_port);
    let listener = TcpListener::bind(&address)
        .map_err(|e| format!("cannot listen on {address} for Raft: {e}"))?;
    for peer in consensus.peers() {
        if peer.id != consensus.me {
            open_link(&consensus, peer);
        }
    }
    std::thread::Builder::new()
        .name("wetask-raft-listen".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let consensus = consensus.clone();
                let _ = std::thread::Builder::new()
                    .name("wetask-raft-from".into())
                    .spawn(move || receive_loop(&consensus, stream));
            }
        })
        .map_err(|e| format!("cannot start the Raft listener: {e}"))?;
    Ok(())
}

/// Starts the link to `peer` (a sender thread and its queue), or points the existing one
/// at its new address.
pub fn open_link(consensus: &Arc<Consensus>, peer: Peer) {
    if consensus.transport.captured.is_some() {
        return;
    }
    let mut senders = consensus.transport.senders.write().expect("raft senders");
    if let Some(link) = senders.get(&peer.id) {
        *link.peer.lock().expect("raft peer") = peer;
        return;
    }
    let (tx, rx) = channel();
    let shared = Arc::new(Mutex::new(peer.clone()));
    let thread_peer = shared.clone();
    let thread_consensus = consensus.clone();
    let started = std::thread::Builder::new()
        .name(format!("wetask-raft-to-{}", peer.id))
        .spawn(move || send_loop(&thread_consensus, &thread_peer, rx));
    if let Err(e) = started {
        tracing::error!(member = %peer, "cannot start a Raft sender: {e}");
        return;
    }
    senders.insert(
        peer.id,
        Link {
            queue: Mutex::new(tx),
            peer: shared,
        },
    );
}

/// Writes the queue's messages to `peer`, connecting as needed; ends when the process does.
fn send_loop(consensus: &Consensus, peer: &Mutex<Peer>, queue: Receiver<Frame>) {
    let mut link: Option<BufWriter<TcpStream>> = None;
    let mut failed_at: Option<Instant> = None;
    // Snapshots written since the last flush: (shard, to).
    let mut snapshots = Vec::new();
    while let Ok(first) = queue.recv() {
        if link.is_none() && failed_at.is_none_or(|at| at.elapsed() >= RETRY_AFTER) {
            let to = peer.lock().expect("raft peer").clone();
            link = connect(&to).map(BufWriter::new);
            if let Some(writer) = link.as_mut() {
                let hello = [
                    HELLO_PREFIX,
                    consensus.auth.as_deref().unwrap_or("").as_bytes(),
                ]
                .concat();
                if !write_frame(writer, (HELLO, hello, None)) {
                    link = None;
                }
            }
            failed_at = link.is_none().then(Instant::now);
        }
        let Some(writer) = link.as_mut() else {
            report_snapshot(consensus, &first, false);
            continue;
        };
        let mut next = Some(first);
        let mut ok = true;
        while let Some(frame) = next.take() {
            if ok {
                if let (shard, _, Some(to)) = &frame {
                    snapshots.push((*shard, *to));
                }
                ok = write_frame(writer, frame);
            } else {
                report_snapshot(consensus, &frame, false);
            }
            next = queue.try_recv().ok();
        }
        ok = ok && writer.flush().is_ok();
        for (shard, to) in snapshots.drain(..) {
            report_snapshot(consensus, &(shard, Vec::new(), Some(to)), ok);
        }
        if !ok {
            if let Some(writer) = link.take() {
                let _ = writer.get_ref().shutdown(Shutdown::Both);
            }
            failed_at = Some(Instant::now());
        }
    }
}

fn connect(peer: &Peer) -> Option<TcpStream> {
    let address = (peer.host.as_str(), peer.raft_port)
        .to_socket_addrs()
        .ok()?
        .next()?;
    let stream = TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).ok()?;
    stream.set_nodelay(true).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    Some(stream)
}

/// Tells the leader's shard how sending a snapshot went (its drive calls raft-rs's
/// `report_snapshot`): until then raft-rs sends that follower nothing more.
fn report_snapshot(consensus: &Consensus, frame: &Frame, sent: bool) {
    let (shard, _, Some(to)) = frame else {
        return;
    };
    let status = Message {
        msg_type: MessageType::MsgSnapStatus,
        from: *to,
        to: consensus.me,
        reject: !sent,
        ..Default::default()
    };
    consensus.deliver(*shard as usize, status);
}

fn write_frame(writer: &mut BufWriter<TcpStream>, (shard, bytes, _): Frame) -> bool {
    let header = [
        &(bytes.len() as u32).to_le_bytes()[..],
        &shard.to_le_bytes()[..],
    ]
    .concat();
    writer
        .write_all(&header)
        .and_then(|()| writer.write_all(&bytes))
        .is_ok()
}

/// Reads one peer's messages until the connection ends or sends something malformed.
fn receive_loop(consensus: &Consensus, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream);
    let mut header = [0u8; 6];
    let mut body = Vec::new();
    if !hello(consensus, &mut reader, &mut body) {
        return;
    }
    while reader.read_exact(&mut header).is_ok() {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let shard = u16::from_le_bytes(header[4..].try_into().expect("2 bytes")) as usize;
        if len > FRAME_MAX || shard >= consensus.groups.len() {
            tracing::warn!(
                len,
                shard,
                "a Raft peer sent a bad frame: dropping the link"
            );
            return;
        }
        if !read_body(&mut reader, len, &mut body) {
            return;
        }
        match Message::parse_from_bytes(&body) {
            // A status is the sender thread's own note (`report_snapshot`), never a peer's.
            Ok(message) if message.get_msg_type() == MessageType::MsgSnapStatus => {
                tracing::warn!("a Raft peer sent a snapshot status: dropped")
            }
            Ok(message) if consensus.peer(message.from).is_some() && message.to == consensus.me => {
                consensus.deliver(shard, message)
            }
            Ok(_) => tracing::warn!("a Raft message from or to a non-member: dropped"),
            Err(e) => {
                tracing::warn!("a Raft peer sent an undecodable message ({e}): dropping the link");
                return;
            }
        }
    }
}

/// Reads a link's first frame: a hello with this node's secret, or the link is dropped.
fn hello(consensus: &Consensus, reader: &mut impl Read, body: &mut Vec<u8>) -> bool {
    let mut header = [0u8; 6];
    if reader.read_exact(&mut header).is_err() {
        return false;
    }
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let shard = u16::from_le_bytes(header[4..].try_into().expect("2 bytes"));
    let said = shard == HELLO && len <= HELLO_MAX && read_body(reader, len, body);
    let secret = consensus.auth.as_deref().unwrap_or("").as_bytes();
    let ok = said
        && body.starts_with(HELLO_PREFIX)
        && crate::replication::constant_time_eq(&body[HELLO_PREFIX.len()..], secret);
    if !ok {
        tracing::warn!("a Raft link opened without this group's hello or secret: dropped");
    }
    ok
}

/// Reads a frame's `len` bytes into `body`, growing it as they arrive; false when the
/// connection ends first.
fn read_body(reader: &mut impl Read, len: usize, body: &mut Vec<u8>) -> bool {
    body.clear();
    if body.capacity() > READ_STEP * 4 {
        // A snapshot's buffer is not kept for the appends that follow it.
        *body = Vec::new();
    }
    while body.len() < len {
        let step = (len - body.len()).min(READ_STEP);
        let at = body.len();
        body.resize(at + step, 0);
        if reader.read_exact(&mut body[at..]).is_err() {
            return false;
        }
    }
    true
}
