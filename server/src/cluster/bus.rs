//! The cluster bus: how nodes keep their views (`view::View`) in step. Each local node
//! listens on its bus port (`cluster-port`, by default its port + 10000, as Redis). Every
//! 100 ms it sends every node it knows its whole state (`view::Message`: itself, its config
//! epoch, its slots, the nodes it knows) as one RESP array; a receiver merges it with
//! Redis's rules (`View::merge`). Whole states rather than Redis's gossip deltas: a
//! message is at most a few kB per hundred nodes, and a lost one is repaired by the next.
//! There is no failure detector: failover is the replication issue's (docs/CLUSTER.md).
//!
//! A PUBLISH travels on the same links, as a message of its own (`bus_publish`).
//!
//! One thread serves the bus of every local node, with non-blocking sockets polled every
//! 10 ms: it is control traffic, a few messages a second, and it must never stall a shard.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use wetask_protocol::{CommandDecoder, Limits};

use super::bus_publish;
use super::view::{Message, Node};
use super::{now_ms, Cluster};

/// How often each node sends its state.
const TICK: Duration = Duration::from_millis(100);
/// How long the thread sleeps when there is nothing to read.
const POLL: Duration = Duration::from_millis(10);
/// A message's first word and version.
const MAGIC: &[u8] = b"WETASK-BUS";
const VERSION: &[u8] = b"1";
/// The most inbound links kept at once, and the most bytes one message may take.
const INBOUND_MAX: usize = 4096;
const MESSAGE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// A link not heard from for this long shows `disconnected` in CLUSTER NODES.
pub const LINK_TIMEOUT_MS: u64 = 2_000;

/// Counts for CLUSTER INFO.
#[derive(Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub received: AtomicU64,
}

struct Inbound {
    shard: usize,
    stream: TcpStream,
    peer_ip: String,
    local_ip: String,
    buffer: BytesMut,
    decoder: CommandDecoder,
}

struct Outbound {
    stream: Option<TcpStream>,
    retry_at: Instant,
}

/// Starts the bus thread over `listeners` (one per local shard, in shard order).
pub fn spawn(cluster: Arc<Cluster>, listeners: Vec<TcpListener>) -> Result<(), String> {
    for listener in &listeners {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cluster bus: {e}"))?;
    }
    std::thread::Builder::new()
        .name("cluster-bus".into())
        .spawn(move || run(&cluster, &listeners))
        .map(|_| ())
        .map_err(|e| format!("cannot start the cluster bus thread: {e}"))
}

fn run(cluster: &Cluster, listeners: &[TcpListener]) {
    let mut inbound: Vec<Inbound> = Vec::new();
    let mut outbound: HashMap<(usize, String, u16), Outbound> = HashMap::new();
    let mut next_tick = Instant::now();
    loop {
        accept(listeners, &mut inbound);
        let read_any = read(cluster, &mut inbound);
        if Instant::now() >= next_tick {
            next_tick = Instant::now() + TICK;
            tick(cluster, &mut outbound);
        }
        send_publishes(cluster, &mut outbound);
        if !read_any {
            std::thread::sleep(POLL);
        }
    }
}

fn accept(listeners: &[TcpListener], inbound: &mut Vec<Inbound>) {
    for (shard, listener) in listeners.iter().enumerate() {
        while let Ok((stream, peer)) = listener.accept() {
            if inbound.len() >= INBOUND_MAX || stream.set_nonblocking(true).is_err() {
                continue;
            }
            let local_ip = stream
                .local_addr()
                .map_or(String::new(), |a| a.ip().to_string());
            inbound.push(Inbound {
                shard,
                stream,
                peer_ip: peer.ip().to_string(),
                local_ip,
                buffer: BytesMut::with_capacity(8192),
                decoder: CommandDecoder::new(Limits {
                    bulk_bytes_max: MESSAGE_BYTES_MAX,
                    ..Limits::default()
                }),
            });
        }
    }
}

/// Reads what every inbound link has, and merges the messages. True when anything came.
fn read(cluster: &Cluster, inbound: &mut Vec<Inbound>) -> bool {
    let mut any = false;
    let mut messages: Vec<(usize, Message, String, String)> = Vec::new();
    inbound.retain_mut(|link| {
        let mut chunk = [0u8; 16384];
        loop {
            match link.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    any = true;
                    link.buffer.extend_from_slice(&chunk[..n]);
                    if link.buffer.len() > MESSAGE_BYTES_MAX {
                        return false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        loop {
            match link.decoder.decode(&mut link.buffer) {
                Ok(Some(args))
                    if args.first().is_some_and(|a| a.as_ref() == bus_publish::MAGIC) =>
                {
                    if !relay_publish(cluster, &args) {
                        tracing::warn!(peer = %link.peer_ip, "cluster bus: a malformed PUBLISH; link closed");
                        return false;
                    }
                }
                Ok(Some(args)) => match decode(&args[..]) {
                    Some(message) => messages.push((
                        link.shard,
                        message,
                        link.peer_ip.clone(),
                        link.local_ip.clone(),
                    )),
                    None => {
                        tracing::warn!(peer = %link.peer_ip, "cluster bus: a message that is not one; link closed");
                        return false;
                    }
                },
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    });
    if messages.is_empty() {
        return any;
    }
    let now = now_ms();
    let mut state = cluster.lock();
    let mut changed = false;
    for (shard, message, peer_ip, local_ip) in messages {
        cluster.counters.received.fetch_add(1, Relaxed);
        let view = &mut state.views[shard];
        if message.meet && view.me().ip.is_empty() && !local_ip.is_empty() {
            // As Redis: a node learns its own address from the first MEET it gets.
            view.me_mut().ip = local_ip;
            changed = true;
        }
        changed |= view.merge(&message, &peer_ip, now);
    }
    if changed {
        if let Err(e) = cluster.commit(state) {
            tracing::error!("cluster bus: {e}");
        }
    }
    any
}

/// Sends every local node's state to every node it knows.
fn tick(cluster: &Cluster, outbound: &mut HashMap<(usize, String, u16), Outbound>) {
    let now = now_ms();
    let mut sends: Vec<((usize, String, u16), Bytes)> = Vec::new();
    let mut staged = None;
    {
        let mut state = cluster.lock();
        let state = &mut *state;
        let mut expired = false;
        for view in &mut state.views {
            expired |= view.expire_handshakes(now, &state.met_ms);
        }
        state
            .met_ms
            .retain(|_, at| *at + super::view::HANDSHAKE_MS >= now);
        if expired {
            staged = Some(Cluster::stage(state));
        }
        for (shard, view) in state.views.iter().enumerate() {
            let plain = encode(&view.message(false));
            let mut met: Option<Bytes> = None;
            for node in view.nodes.iter().skip(1) {
                if node.ip.is_empty() || node.cport == 0 {
                    continue;
                }
                let bytes = if node.handshake {
                    met.get_or_insert_with(|| encode(&view.message(true)))
                        .clone()
                } else {
                    plain.clone()
                };
                sends.push(((shard, node.ip.clone(), node.cport), bytes));
            }
        }
    }
    if let Some(staged) = staged {
        if let Err(e) = cluster.write(staged) {
            tracing::error!("cluster bus: {e}");
        }
    }
    let wanted: std::collections::HashSet<_> = sends.iter().map(|(k, _)| k.clone()).collect();
    outbound.retain(|key, _| wanted.contains(key));
    for (key, bytes) in sends {
        if link(outbound, key).write(&bytes) {
            cluster.counters.sent.fetch_add(1, Relaxed);
        }
    }
}

/// Hands a PUBLISH that arrived to the node's relay, the first time it is seen (its copies
/// come through the process's other nodes); false when it is malformed.
fn relay_publish(cluster: &Cluster, args: &[Bytes]) -> bool {
    let Some((origin, number, channel, message)) = bus_publish::decode(args) else {
        return false;
    };
    if cluster.publishing.first_time(&origin, number) {
        if let Some(relay) = cluster.relay.get() {
            relay.arrived(channel, message);
        }
    }
    true
}

/// Sends the PUBLISH messages queued since the last loop to every node the first local
/// node knows, but its siblings (`bus_publish`), on the links `tick` keeps.
fn send_publishes(cluster: &Cluster, outbound: &mut HashMap<(usize, String, u16), Outbound>) {
    let messages = cluster.publishing.take();
    if messages.is_empty() {
        return;
    }
    let targets: Vec<(usize, String, u16)> = {
        let state = cluster.lock();
        let siblings: std::collections::HashSet<&str> =
            state.views.iter().map(|v| v.me().id.as_str()).collect();
        state.views[0]
            .nodes
            .iter()
            .skip(1)
            .filter(|n| !n.ip.is_empty() && n.cport != 0 && !n.handshake)
            .filter(|n| !siblings.contains(n.id.as_str()))
            .map(|n| (0, n.ip.clone(), n.cport))
            .collect()
    };
    for key in targets {
        let link = link(outbound, key);
        for bytes in &messages {
            if !link.write(bytes) {
                break;
            }
        }
    }
}

/// The link `key` names, connected now if it is down and may be tried again.
fn link(
    outbound: &mut HashMap<(usize, String, u16), Outbound>,
    key: (usize, String, u16),
) -> &mut Outbound {
    let link = outbound.entry(key.clone()).or_insert(Outbound {
        stream: None,
        retry_at: Instant::now(),
    });
    if link.stream.is_none() && Instant::now() >= link.retry_at {
        link.stream = connect(&key.1, key.2);
        if link.stream.is_none() {
            link.retry_at = Instant::now() + Duration::from_secs(1);
        }
    }
    link
}

impl Outbound {
    /// Writes `bytes` if the link is up; a failed write takes it down for 500 ms. True
    /// when written.
    fn write(&mut self, bytes: &[u8]) -> bool {
        let Some(stream) = self.stream.as_mut() else {
            return false;
        };
        if stream.write_all(bytes).is_ok() {
            return true;
        }
        self.stream = None;
        self.retry_at = Instant::now() + Duration::from_millis(500);
        false
    }
}

fn connect(ip: &str, port: u16) -> Option<TcpStream> {
    let address: SocketAddr = format!("{ip}:{port}")
        .parse()
        .or_else(|_| format!("[{ip}]:{port}").parse())
        .ok()?;
    let stream = TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
    stream.set_nodelay(true).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    Some(stream)
}

/// A message as the bus carries it: `WETASK-BUS 1 id ip port cport epoch currentEpoch meet
/// slots` and then four fields per gossiped node.
pub fn encode(message: &Message) -> Bytes {
    let sender = &message.sender;
    let mut fields: Vec<Vec<u8>> = vec![
        MAGIC.to_vec(),
        VERSION.to_vec(),
        sender.id.as_bytes().to_vec(),
        sender.ip.as_bytes().to_vec(),
        sender.port.to_string().into_bytes(),
        sender.cport.to_string().into_bytes(),
        sender.epoch.to_string().into_bytes(),
        message.current_epoch.to_string().into_bytes(),
        if message.meet {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        },
        message.slots.clone(),
    ];
    for (id, ip, port, cport) in &message.gossip {
        fields.push(id.as_bytes().to_vec());
        fields.push(ip.as_bytes().to_vec());
        fields.push(port.to_string().into_bytes());
        fields.push(cport.to_string().into_bytes());
    }
    let mut out = Vec::new();
    wetask_protocol::encode_command(&mut out, &fields);
    Bytes::from(out)
}

/// The message in `args`, or None when it is not a well-formed one.
pub fn decode(args: &[Bytes]) -> Option<Message> {
    let text = |b: &Bytes| std::str::from_utf8(b).ok().map(str::to_string);
    let number = |b: &Bytes| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    let port = |b: &Bytes| std::str::from_utf8(b).ok()?.parse::<u16>().ok();
    if args.len() < 10
        || args[0] != MAGIC
        || args[1] != VERSION
        || !(args.len() - 10).is_multiple_of(4)
    {
        return None;
    }
    let id = text(&args[2]).filter(|id| valid_id(id))?;
    let slots = args[9].to_vec();
    if slots.len() != usize::from(wetask_shards::slot::SLOT_COUNT) / 8 {
        return None;
    }
    let gossip = args[10..]
        .chunks_exact(4)
        .map(|g| {
            Some((
                text(&g[0]).filter(|id| valid_id(id))?,
                text(&g[1])?,
                port(&g[2])?,
                port(&g[3])?,
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Message {
        sender: Node {
            id,
            ip: text(&args[3])?,
            port: port(&args[4])?,
            cport: port(&args[5])?,
            epoch: number(&args[6])?,
            handshake: false,
            seen_ms: 0,
        },
        current_epoch: number(&args[7])?,
        meet: match &args[8][..] {
            b"1" => true,
            b"0" => false,
            _ => return None,
        },
        slots,
        gossip,
    })
}

/// 40 hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::view::View;

    #[test]
    fn a_message_survives_the_wire_and_damage_is_refused() {
        let mut view = View::alone(Node {
            id: "a".repeat(40),
            ip: "127.0.0.2".into(),
            port: 7000,
            cport: 17000,
            epoch: 4,
            handshake: false,
            seen_ms: 0,
        });
        view.add_slots(&[0, 9, 16383]).unwrap();
        view.nodes.push(Node {
            id: "b".repeat(40),
            ip: "127.0.0.3".into(),
            port: 7001,
            cport: 17001,
            epoch: 0,
            handshake: false,
            seen_ms: 0,
        });
        let message = view.message(true);
        let bytes = encode(&message);
        let mut buffer = BytesMut::from(&bytes[..]);
        let args = CommandDecoder::new(Limits::default())
            .decode(&mut buffer)
            .unwrap()
            .unwrap();
        assert_eq!(decode(&args), Some(message));
        let mut bad = args.clone();
        bad[9] = Bytes::from_static(b"short");
        assert_eq!(decode(&bad), None, "a slot bitmap of the wrong size");
        let mut bad = args.clone();
        bad[2] = Bytes::from_static(b"not-an-id");
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&args[..11]), None, "a cut gossip entry");
    }
}
