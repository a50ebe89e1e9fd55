//! Raft messages between nodes, on threads of their own (no shard thread waits on a
//! socket). Each node listens on its `raft-port`; for each other member one thread holds a
//! connection and writes what the shards hand it, `[length u32][shard u16][message]`
//! (little-endian, the message in raft-rs's protobuf encoding). A message that cannot be
//! sent is dropped: Raft resends what matters (heartbeats, appends after a rejection).
//! Arriving messages go to the shard's inbox ([`super::Consensus::deliver`]).

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::Message;

use super::{Consensus, Peer};

/// A message larger than this is refused by the reader (an append carries at most
/// raft-rs's `max_size_per_msg`, set far below it).
pub const FRAME_MAX: usize = 64 << 20;
/// After a failed connect, messages to that node are dropped for this long.
const RETRY_AFTER: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A message on its way: its shard's group, and its encoding.
type Frame = (u16, Vec<u8>);

/// The senders to the other members.
pub struct Outbound {
    senders: HashMap<u64, Mutex<Sender<Frame>>>,
    receivers: Mutex<Vec<(Peer, Receiver<Frame>)>>,
}

impl Outbound {
    pub fn new(me: u64, peers: &[Peer]) -> Outbound {
        let mut senders = HashMap::new();
        let mut receivers = Vec::new();
        for peer in peers.iter().filter(|p| p.id != me) {
            let (tx, rx) = channel();
            senders.insert(peer.id, Mutex::new(tx));
            receivers.push((peer.clone(), rx));
        }
        Outbound {
            senders,
            receivers: Mutex::new(receivers),
        }
    }

    /// Queues `message` of `shard`'s group for its recipient.
    pub fn send(&self, shard: usize, message: &Message) {
        let Some(sender) = self.senders.get(&message.to) else {
            return;
        };
        match message.write_to_bytes() {
            Ok(bytes) => {
                let _ = sender
                    .lock()
                    .expect("raft sender")
                    .send((shard as u16, bytes));
            }
            Err(e) => tracing::error!("cannot encode a Raft message: {e}"),
        }
    }
}

/// Starts the listener on this node's raft port and a sender thread per other member.
pub fn spawn(consensus: Arc<Consensus>) -> Result<(), String> {
    let me = consensus
        .peer(consensus.me)
        .expect("this node is a member")
        .clone();
    let address = format!("{}:{}", me.host, me.raft_port);
    let listener = TcpListener::bind(&address)
        .map_err(|e| format!("cannot listen on {address} for Raft: {e}"))?;
    let receivers = std::mem::take(&mut *consensus.transport.receivers.lock().expect("receivers"));
    for (peer, queue) in receivers {
        std::thread::Builder::new()
            .name(format!("wetask-raft-to-{}", peer.id))
            .spawn(move || send_loop(peer, queue))
            .map_err(|e| format!("cannot start a Raft sender: {e}"))?;
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

/// Writes the queue's messages to `peer`, connecting as needed; ends when the process does.
fn send_loop(peer: Peer, queue: Receiver<Frame>) {
    let mut link: Option<BufWriter<TcpStream>> = None;
    let mut failed_at: Option<Instant> = None;
    while let Ok(first) = queue.recv() {
        if link.is_none() && failed_at.is_none_or(|at| at.elapsed() >= RETRY_AFTER) {
            link = connect(&peer).map(BufWriter::new);
            failed_at = link.is_none().then(Instant::now);
        }
        let Some(writer) = link.as_mut() else {
            continue;
        };
        let mut ok = write_frame(writer, first);
        while ok {
            match queue.try_recv() {
                Ok(next) => ok = write_frame(writer, next),
                Err(_) => break,
            }
        }
        if !ok || writer.flush().is_err() {
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

fn write_frame(writer: &mut BufWriter<TcpStream>, (shard, bytes): Frame) -> bool {
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
        body.resize(len, 0);
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        match Message::parse_from_bytes(&body) {
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
