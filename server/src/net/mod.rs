//! The network paths. `uring` is the completion-based io_uring ring each shard owns (the
//! default); `fallback` is glommio's readiness-based TcpStream, kept as a measured baseline
//! and for kernels without the ring features. Both drive a [`crate::session::Session`].

pub mod bufring;
pub mod fallback;
pub mod held_sends;
pub mod uring;

use std::cell::RefCell;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;

use socket2::{Domain, Protocol, Socket, Type};

use crate::clients::ConnState;
use crate::shard::ShardCtx;

/// Backlog of each shard's listening socket.
pub const LISTEN_BACKLOG: i32 = 1024;

/// Binds one SO_REUSEPORT listener per shard on the same address, so the kernel spreads
/// connections over shards. Port 0 picks a free port once, shared by all. Returns the
/// listeners and the port.
pub fn bind_listeners(bind: &str, port: u16, count: usize) -> io::Result<(Vec<OwnedFd>, u16)> {
    let addr: SocketAddr = (bind, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for shard in 0..count {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        // The first listener binds *without* SO_REUSEPORT, so the port is ours alone: an
        // explicit port held by another process fails with "address in use" (as Redis
        // does), and port 0 gets a port no other SO_REUSEPORT group holds. Two servers run
        // as the same user could otherwise silently share a port and split its clients.
        // Then SO_REUSEPORT is turned on and the other shards' listeners join it.
        if shard > 0 {
            socket.set_reuse_port(true)?;
        }
        socket.set_nodelay(true)?;
        socket.bind(&addr.into())?;
        if shard == 0 {
            socket.set_reuse_port(true)?;
        }
        socket.listen(LISTEN_BACKLOG)?;
        if addr.port() == 0 {
            addr = socket.local_addr()?.as_socket().expect("inet socket");
        }
        // SAFETY: into_raw_fd hands over sole ownership of a valid socket fd.
        listeners.push(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) });
    }
    Ok((listeners, addr.port()))
}

/// Binds one listener of its own (no SO_REUSEPORT group: every connection to it lands on the
/// shard that serves it), for a cluster-mode shard port. Returns it and its port.
pub fn bind_one(bind: &str, port: u16) -> io::Result<(OwnedFd, u16)> {
    let addr: SocketAddr = (bind, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    let bound = socket
        .local_addr()?
        .as_socket()
        .expect("inet socket")
        .port();
    // SAFETY: into_raw_fd hands over sole ownership of a valid socket fd.
    Ok((unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) }, bound))
}

/// Formats a socket address from getpeername/getsockname.
pub fn socket_addr(fd: RawFd, peer: bool) -> String {
    // SAFETY: the fd is a live socket; from_raw_fd's Socket is forgotten, never closed here.
    let socket = std::mem::ManuallyDrop::new(unsafe { Socket::from_raw_fd(fd) });
    let addr = if peer {
        socket.peer_addr()
    } else {
        socket.local_addr()
    };
    addr.ok()
        .and_then(|a| a.as_socket())
        .map_or_else(|| "?:0".to_string(), |a| a.to_string())
}

/// Turns on TCP keepalive on an accepted socket, first probe after `idle_s` seconds (the
/// `tcp-keepalive` option; 0 leaves it off), so dead peers are noticed.
pub fn set_keepalive(fd: RawFd, idle_s: u64) {
    if idle_s == 0 {
        return;
    }
    let socket = std::mem::ManuallyDrop::new(
        // SAFETY: the fd is a live socket; this Socket is forgotten, never closed here.
        unsafe { Socket::from_raw_fd(fd) },
    );
    let idle = std::time::Duration::from_secs(idle_s);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(idle / 3);
    let _ = socket.set_tcp_keepalive(&keepalive);
}

/// Sets TCP_NODELAY on an accepted socket: replies are batched per turn already.
pub fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid pointer to an int on a live socket.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Creates and registers the state of a newly accepted connection.
pub fn new_connection(ctx: &ShardCtx, fd: RawFd) -> Rc<RefCell<ConnState>> {
    set_keepalive(fd, ctx.globals.tcp_keepalive_s.load(Ordering::Relaxed));
    let acl = &ctx.globals.acl;
    let epoch = acl.epoch();
    let user = acl.default_user();
    let authenticated = user.enabled && user.nopass;
    let state = Rc::new(RefCell::new(ConnState::new(
        ctx.globals.next_client_id(),
        fd,
        socket_addr(fd, true),
        socket_addr(fd, false),
        crate::globals::unix_ms(),
        authenticated,
        (user, epoch),
    )));
    ctx.clients.borrow_mut().add(state.clone());
    state
}
