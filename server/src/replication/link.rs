//! What both kinds of link to a primary share (`receiver` for a WeTask primary,
//! `from_redis` for a Redis one): what they need from the server, and a blocking RESP
//! exchange for their handshakes.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use wetask_protocol::{Frame, FrameDecoder, Limits};

use super::Replication;

/// Connecting and each step of a handshake wait at most this long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a link needs from the server.
pub struct Env {
    pub replication: Arc<Replication>,
    pub doorbells: Arc<[crate::doorbell::Doorbell]>,
    /// Where the primary's PUBLISH messages go, for this node's subscribers.
    pub relay: Arc<crate::pubsub_relay::Relay>,
    pub shard_count: usize,
    /// This node's client port (the primary lists it).
    pub listening_port: u16,
    /// AUTH's arguments for the primary (`masteruser` and `masterauth`); empty: no AUTH.
    pub auth: Vec<String>,
    /// True once the server is shutting down.
    pub stopping: Box<dyn Fn() -> bool + Send + Sync>,
    /// How to reach this node's own client port (a Redis primary's stream is applied
    /// through it: `from_redis`), and its password.
    pub local_host: String,
    pub local_password: Option<String>,
    /// This node's journal (none under `appendonly no`): the ack thread tells the primary
    /// what its fsyncs cover.
    pub store: Option<Arc<crate::persist::Store>>,
}

pub(super) fn connect(host: &str, port: u16) -> Result<TcpStream, String> {
    let conn = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .find_map(|at| TcpStream::connect_timeout(&at, HANDSHAKE_TIMEOUT).ok())
        .ok_or_else(|| format!("cannot connect to {host}:{port}"))?;
    let _ = conn.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = conn.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = conn.set_nodelay(true);
    Ok(conn)
}

/// Sends one command and reads its reply.
pub(super) fn request(conn: &mut TcpStream, args: &[String]) -> Result<Frame, String> {
    send(conn, args)?;
    let mut decoder = FrameDecoder::new(Limits::default());
    let mut buffer = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        match decoder.decode(&mut buffer) {
            Ok(Some(frame)) => return Ok(frame),
            Ok(None) => {}
            Err(e) => return Err(format!("the primary's reply is malformed: {e:?}")),
        }
        match conn.read(&mut chunk) {
            Ok(0) => return Err("the primary closed the connection".into()),
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("cannot read from the primary: {e}")),
        }
    }
}

/// Sends one command, reading nothing.
pub(super) fn send(conn: &mut TcpStream, args: &[String]) -> Result<(), String> {
    let mut out = Vec::new();
    wetask_protocol::encode_command(&mut out, args);
    conn.write_all(&out)
        .map_err(|e| format!("cannot write to the primary: {e}"))
}

/// Sends one command that must answer a simple string (`+OK`).
pub(super) fn expect_ok(conn: &mut TcpStream, args: &[String]) -> Result<(), String> {
    match request(conn, args)? {
        Frame::Simple(_) => Ok(()),
        Frame::Error(e) => Err(format!(
            "the primary refused {}: {}",
            args[0],
            String::from_utf8_lossy(&e)
        )),
        other => Err(format!("an unexpected answer to {}: {other:?}", args[0])),
    }
}

/// `AUTH` with `auth`'s arguments (`masteruser` and `masterauth`), if there are any.
pub(super) fn authenticate(conn: &mut TcpStream, auth: &[String]) -> Result<(), String> {
    if auth.is_empty() {
        return Ok(());
    }
    let mut args = vec!["AUTH".to_string()];
    args.extend(auth.iter().cloned());
    expect_ok(conn, &args)
}
