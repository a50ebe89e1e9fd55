//! Raft messages between nodes, on threads of their own (no shard thread waits on a
//! socket). Each node listens on its `raft-port`; for each other member one thread holds a
//! connection and writes what the shards hand it, `[length u32][shard u16][message]`
//! (little-endian, the message in raft-rs's protobuf encoding). A message that cannot be
//! sent is dropped: Raft resends what matters (heartbeats, appends after a rejection).
//! Arriving messages go to the shard's inbox ([`super::Consensus::deliver`]).
//!
//! A snapshot is streamed, not framed whole: the leader's shard hands the transport the
//! snapshot file it opened (`send_snapshot`), and its sender thread writes a frame of shard
//! [`STREAM`] — `[length u32][STREAM u16][shard u16][the message, without its data]` —
//! then the file's length (u64) and the file itself, read from disk a piece at a time. The
//! reader writes the file to the Raft directory as it arrives, syncs it, and delivers the
//! message with the file's path (`Consensus::deliver_snapshot`). So no snapshot is held in
//! memory by either transport, none is read on a leader's shard thread, and its size has
//! no limit but [`SNAPSHOT_MAX`] (and the disk).
//!
//! A PUBLISH goes to every member (`Outbound::publish`), as Redis Cluster's bus carries one
//! to every node: a frame of shard [`PUBLISH`] whose body is the channel and the message
//! (`pubsub_relay::encode`); the receiver queues it for its node's subscribers
//! (`pubsub_relay`). A link whose peer reads slowly holds at most [`PUBLISH_QUEUED_MAX`]
//! bytes of them; past that a message to it is dropped (Raft's own messages never are).
//!
//! A link opens with a hello frame (shard [`HELLO`]): `wetask-raft 1 ` and the group's
//! secret (`--raft-auth`, compared in constant time). A reader drops a link whose first
//! frame is not a hello with its own secret, so a node that does not know it cannot step
//! a message into a group. The secret goes in the clear, as Redis's AUTH does: the Raft
//! ports belong on a private network (docs/SECURITY.md).

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};

use super::{Consensus, Peer};

/// A message larger than this is refused by the reader: an append carries at most
/// raft-rs's `max_size_per_msg`, far below it (a snapshot is streamed instead, [`STREAM`]).
/// The reader's buffer grows with what arrives, not with what a frame's header claims.
pub const FRAME_MAX: usize = 1 << 30;
/// The shard number of a link's first frame, the hello.
const HELLO: u16 = u16::MAX;
/// The shard number of a streamed snapshot's frame (its own shard follows).
const STREAM: u16 = u16::MAX - 1;
/// The shard number of a PUBLISH's frame.
const PUBLISH: u16 = u16::MAX - 2;
/// The most bytes of PUBLISH frames one link holds queued.
const PUBLISH_QUEUED_MAX: usize = 32 << 20;
/// A streamed snapshot larger than this is refused (the disk is the real limit).
pub const SNAPSHOT_MAX: u64 = 1 << 40;
const HELLO_PREFIX: &[u8] = b"wetask-raft 1 ";
/// A hello longer than this is refused (a secret is a few dozen bytes).
const HELLO_MAX: usize = 4096;
/// How much of a frame the reader takes at a time.
const READ_STEP: usize = 4 << 20;
/// After a failed connect, messages to that node are dropped for this long.
const RETRY_AFTER: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A message on its way: its shard's group, its encoding, and, for a snapshot, who to
/// tell the leader it went to (raft-rs's `report_snapshot`) and the file to stream after
/// the message, with its length.
struct Frame {
    shard: u16,
    bytes: Vec<u8>,
    snapshot_to: Option<u64>,
    file: Option<(std::fs::File, u64)>,
}

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
    /// Bytes of PUBLISH frames queued and not yet written (shared with the thread).
    publishing: Arc<AtomicUsize>,
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
                let _ = sender.lock().expect("raft sender").send(Frame {
                    shard: shard as u16,
                    bytes,
                    snapshot_to: snapshot,
                    file: None,
                });
            }
            Err(e) => tracing::error!("cannot encode a Raft message: {e}"),
        }
    }

    /// Queues a PUBLISH for every other member (dropped for a link already holding
    /// [`PUBLISH_QUEUED_MAX`] bytes of them).
    pub fn publish(&self, channel: &[u8], message: &[u8]) {
        if self.captured.is_some() {
            return;
        }
        let senders = self.senders.read().expect("raft senders");
        if senders.is_empty() {
            return;
        }
        let bytes = crate::pubsub_relay::encode(channel, message);
        for link in senders.values() {
            let queued = link.publishing.fetch_add(bytes.len(), Ordering::AcqRel);
            if queued + bytes.len() > PUBLISH_QUEUED_MAX {
                link.publishing.fetch_sub(bytes.len(), Ordering::AcqRel);
                continue;
            }
            let _ = link.queue.lock().expect("raft sender").send(Frame {
                shard: PUBLISH,
                bytes: bytes.clone(),
                snapshot_to: None,
                file: None,
            });
        }
    }

    /// Queues snapshot `message` (its data left out) with the snapshot `file` of `len`
    /// bytes, streamed after it; false when there is no link to its recipient.
    pub fn send_snapshot(
        &self,
        shard: usize,
        message: &Message,
        file: std::fs::File,
        len: u64,
    ) -> bool {
        let senders = self.senders.read().expect("raft senders");
        let Some(link) = senders.get(&message.to) else {
            return false;
        };
        let Ok(bytes) = message.write_to_bytes() else {
            return false;
        };
        let frame = Frame {
            shard: shard as u16,
            bytes,
            snapshot_to: Some(message.to),
            file: Some((file, len)),
        };
        let queued = link.queue.lock().expect("raft sender").send(frame).is_ok();
        queued
    }

    /// Whether this side keeps messages for a simulation instead of sending them.
    pub fn is_capturing(&self) -> bool {
        self.captured.is_some()
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
    let publishing = Arc::new(AtomicUsize::new(0));
    let thread_peer = shared.clone();
    let thread_consensus = consensus.clone();
    let thread_publishing = publishing.clone();
    let started = std::thread::Builder::new()
        .name(format!("wetask-raft-to-{}", peer.id))
        .spawn(move || send_loop(&thread_consensus, &thread_peer, rx, &thread_publishing));
    if let Err(e) = started {
        tracing::error!(member = %peer, "cannot start a Raft sender: {e}");
        return;
    }
    senders.insert(
        peer.id,
        Link {
            queue: Mutex::new(tx),
            peer: shared,
            publishing,
        },
    );
}

/// Writes the queue's messages to `peer`, connecting as needed; ends when the process does.
/// `publishing` counts the PUBLISH bytes still queued.
fn send_loop(
    consensus: &Consensus,
    peer: &Mutex<Peer>,
    queue: Receiver<Frame>,
    publishing: &AtomicUsize,
) {
    let mut link: Option<BufWriter<TcpStream>> = None;
    let mut failed_at: Option<Instant> = None;
    // Snapshots written since the last flush: (shard, to).
    let mut snapshots = Vec::new();
    while let Ok(first) = queue.recv() {
        if first.shard == PUBLISH {
            publishing.fetch_sub(first.bytes.len(), Ordering::AcqRel);
        }
        if link.is_none() && failed_at.is_none_or(|at| at.elapsed() >= RETRY_AFTER) {
            let to = peer.lock().expect("raft peer").clone();
            link = connect(&to).map(BufWriter::new);
            if let Some(writer) = link.as_mut() {
                let hello = [
                    HELLO_PREFIX,
                    consensus.auth.as_deref().unwrap_or("").as_bytes(),
                ]
                .concat();
                let frame = Frame {
                    shard: HELLO,
                    bytes: hello,
                    snapshot_to: None,
                    file: None,
                };
                if !write_frame(writer, frame) {
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
                if let Some(to) = frame.snapshot_to {
                    snapshots.push((frame.shard, to));
                }
                ok = write_frame(writer, frame);
            } else {
                report_snapshot(consensus, &frame, false);
            }
            next = queue.try_recv().ok();
            if let Some(frame) = next.as_ref().filter(|f| f.shard == PUBLISH) {
                publishing.fetch_sub(frame.bytes.len(), Ordering::AcqRel);
            }
        }
        ok = ok && writer.flush().is_ok();
        for (shard, to) in snapshots.drain(..) {
            report_snapshot_to(consensus, shard, to, ok);
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
    if let Some(to) = frame.snapshot_to {
        report_snapshot_to(consensus, frame.shard, to, sent);
    }
}

/// The same, for `shard`'s snapshot to `to`; also what a leader's shard tells itself when
/// a snapshot could not be queued (`shard::raft`).
pub fn report_snapshot_to(consensus: &Consensus, shard: u16, to: u64, sent: bool) {
    let status = Message {
        msg_type: MessageType::MsgSnapStatus,
        from: to,
        to: consensus.me,
        reject: !sent,
        ..Default::default()
    };
    consensus.deliver(shard as usize, status);
}

fn write_frame(writer: &mut impl Write, frame: Frame) -> bool {
    let Some((file, len)) = frame.file else {
        let header = [
            &(frame.bytes.len() as u32).to_le_bytes()[..],
            &frame.shard.to_le_bytes()[..],
        ]
        .concat();
        return writer
            .write_all(&header)
            .and_then(|()| writer.write_all(&frame.bytes))
            .is_ok();
    };
    let header = [
        &((frame.bytes.len() + 2) as u32).to_le_bytes()[..],
        &STREAM.to_le_bytes()[..],
        &frame.shard.to_le_bytes()[..],
    ]
    .concat();
    let streamed = writer
        .write_all(&header)
        .and_then(|()| writer.write_all(&frame.bytes))
        .and_then(|()| writer.write_all(&len.to_le_bytes()))
        .and_then(|()| std::io::copy(&mut file.take(len), writer));
    match streamed {
        Ok(copied) if copied == len => true,
        Ok(copied) => {
            tracing::warn!(copied, len, "a snapshot file ended early while it was sent");
            false
        }
        Err(_) => false,
    }
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
        if shard == STREAM as usize {
            if !receive_snapshot(consensus, &mut reader, len, &mut body) {
                return;
            }
            continue;
        }
        if shard == PUBLISH as usize {
            if len > FRAME_MAX || !read_body(&mut reader, len, &mut body) {
                return;
            }
            match crate::pubsub_relay::decode(&body) {
                Some((channel, message)) => consensus.relay.arrived(channel, message),
                None => {
                    tracing::warn!("a Raft peer sent a malformed PUBLISH: dropping the link");
                    return;
                }
            }
            continue;
        }
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

/// Reads a streamed snapshot (after its frame's header, `len` bytes of shard and message),
/// writing the file to the Raft directory; false when the link must be dropped.
fn receive_snapshot(
    consensus: &Consensus,
    reader: &mut impl Read,
    len: usize,
    body: &mut Vec<u8>,
) -> bool {
    if !(2..=HELLO_MAX * 16).contains(&len) || !read_body(reader, len, body) {
        tracing::warn!(
            len,
            "a Raft peer sent a bad snapshot frame: dropping the link"
        );
        return false;
    }
    let shard = u16::from_le_bytes([body[0], body[1]]) as usize;
    let message = match Message::parse_from_bytes(&body[2..]) {
        Ok(message) => message,
        Err(e) => {
            tracing::warn!(
                "a Raft peer sent an undecodable snapshot message ({e}): dropping the link"
            );
            return false;
        }
    };
    let mut size = [0u8; 8];
    if reader.read_exact(&mut size).is_err() {
        return false;
    }
    let size = u64::from_le_bytes(size);
    let meta = message.get_snapshot().get_metadata();
    let fits = shard < consensus.groups.len()
        && message.get_msg_type() == MessageType::MsgSnapshot
        && message.get_snapshot().data.is_empty()
        && consensus.peer(message.from).is_some()
        && message.to == consensus.me
        && size <= SNAPSHOT_MAX;
    if !fits {
        tracing::warn!(
            shard,
            size,
            "a Raft peer streamed a snapshot that does not fit: dropping the link"
        );
        return false;
    }
    let path = consensus.dir.join(format!(
        "raft-{shard}.snapshot-from-{}-{}-{}.incoming",
        message.from, meta.index, meta.term
    ));
    match write_stream(reader, &path, size) {
        Ok(()) => {
            consensus.deliver_snapshot(shard, message, path);
            true
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            tracing::warn!(
                shard,
                "a snapshot did not arrive whole ({e}): dropping the link"
            );
            false
        }
    }
}

/// Copies `size` bytes of `reader` to a new file at `path`, synced.
fn write_stream(reader: &mut impl Read, path: &std::path::Path, size: u64) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    let copied = std::io::copy(&mut reader.take(size), &mut file)?;
    if copied != size {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    file.sync_all()
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

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A fresh directory of this test's own.
    fn temp(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("wetask-raftstream-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn consensus(dir: &std::path::Path) -> Consensus {
        let peers =
            super::super::peers::parse("1=127.0.0.1:7000,2=127.0.0.2:7000,3=127.0.0.3:7000", 1)
                .expect("peers");
        let doorbells = crate::doorbell::Doorbell::for_shards(1).expect("doorbells");
        let mut consensus = Consensus::new(1, peers, 1, doorbells, 1 << 20, false, None);
        consensus.dir = dir.to_path_buf();
        consensus
    }

    fn snapshot_message(from: u64, index: u64) -> Message {
        let mut message = Message {
            msg_type: MessageType::MsgSnapshot,
            from,
            to: 1,
            ..Default::default()
        };
        message.mut_snapshot().mut_metadata().index = index;
        message.mut_snapshot().mut_metadata().term = 3;
        message
    }

    /// The bytes `write_frame` puts on the wire for `message` and a file holding `content`.
    fn streamed(message: &Message, content: &[u8]) -> Vec<u8> {
        let dir = temp(&format!("send-{}-{}", message.from, content.len()));
        let path = dir.join("snapshot");
        std::fs::write(&path, content).expect("file");
        let frame = Frame {
            shard: 0,
            bytes: message.write_to_bytes().expect("encode"),
            snapshot_to: Some(message.to),
            file: Some((
                std::fs::File::open(&path).expect("open"),
                content.len() as u64,
            )),
        };
        let mut wire = Vec::new();
        assert!(write_frame(&mut wire, frame));
        let _ = std::fs::remove_dir_all(&dir);
        wire
    }

    /// Reads one frame of `wire` as `receive_loop` does; whether the link lives on.
    fn receive(consensus: &Consensus, wire: &[u8]) -> bool {
        let len = u32::from_le_bytes(wire[..4].try_into().unwrap()) as usize;
        assert_eq!(u16::from_le_bytes(wire[4..6].try_into().unwrap()), STREAM);
        let mut reader = Cursor::new(&wire[6..]);
        receive_snapshot(consensus, &mut reader, len, &mut Vec::new())
    }

    fn files(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn a_streamed_snapshot_lands_on_disk_and_its_message_is_delivered_without_data() {
        let dir = temp("lands");
        let consensus = consensus(&dir);
        let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        assert!(receive(
            &consensus,
            &streamed(&snapshot_message(2, 40), &content)
        ));
        let group = &consensus.groups[0];
        let inbox = group.inbox.lock().unwrap();
        assert_eq!(inbox.len(), 1);
        assert!(inbox[0].get_snapshot().data.is_empty());
        let incoming = group.incoming.lock().unwrap();
        assert_eq!(
            (incoming[0].from, incoming[0].index, incoming[0].term),
            (2, 40, 3)
        );
        assert_eq!(std::fs::read(&incoming[0].path).unwrap(), content);
        drop((inbox, incoming));
        // A newer one from the same leader replaces it, file and all.
        assert!(receive(
            &consensus,
            &streamed(&snapshot_message(2, 41), b"newer")
        ));
        assert_eq!(group.incoming.lock().unwrap().len(), 1);
        assert_eq!(files(&dir), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_cut_short_or_foreign_stream_drops_the_link_and_leaves_no_file() {
        let dir = temp("refused");
        let consensus = consensus(&dir);
        // Cut short: the link ended before the file did.
        let wire = streamed(&snapshot_message(2, 40), &[7u8; 10_000]);
        assert!(!receive(&consensus, &wire[..wire.len() - 100]));
        // From a node that is not a member; carrying data of its own; claiming too much.
        assert!(!receive(
            &consensus,
            &streamed(&snapshot_message(9, 40), b"x")
        ));
        let mut with_data = snapshot_message(2, 40);
        with_data.mut_snapshot().data = b"inline".to_vec().into();
        assert!(!receive(&consensus, &streamed(&with_data, b"x")));
        let mut wire = streamed(&snapshot_message(2, 40), b"x");
        let at = 6 + 2 + snapshot_message(2, 40).write_to_bytes().unwrap().len();
        wire[at..at + 8].copy_from_slice(&(SNAPSHOT_MAX + 1).to_le_bytes());
        assert!(!receive(&consensus, &wire));
        assert_eq!(files(&dir), 0);
        assert!(consensus.groups[0].inbox.lock().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
