//! A connection's life on the ring: multishot accept, multishot recv into the provided
//! buffers, the session pumped with what arrived, and closing (shutdown, then the slot
//! freed once nothing of it is in flight).

use super::*;

impl Net {
    /// A connection accepted on listener `which` (0: the shared port; 1: this shard's own
    /// port, in cluster mode).
    pub(super) fn on_accept(self: &Rc<Self>, which: usize, result: i32, flags: u32) {
        let mut inner = self.inner.borrow_mut();
        if which >= inner.listeners.len() {
            return;
        }
        if !cqueue::more(flags) {
            inner.accepting[which] = false;
            if !self.ctx.globals.shutting_down() {
                self.arm_accept(&mut inner, which);
            }
        }
        if result < 0 {
            if result != -libc::ECANCELED {
                tracing::warn!("accept failed: {}", io::Error::from_raw_os_error(-result));
            }
            return;
        }
        let fd = result;
        if self.ctx.globals.shutting_down() || !self.ctx.globals.admit_client() {
            let reply = b"-ERR max number of clients reached\r\n";
            // SAFETY: a best-effort send and close of the fd we were just handed.
            unsafe {
                libc::send(
                    fd,
                    reply.as_ptr().cast(),
                    reply.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                );
                libc::close(fd);
            }
            return;
        }
        set_nodelay(fd);
        let ctx = &self.ctx;
        let state = crate::net::new_connection(ctx, fd);
        state.borrow_mut().shard_port = which == 1;
        let generation = inner.next_generation;
        inner.next_generation = inner.next_generation.wrapping_add(1) & 0x00FF_FFFF;
        let mut conn = Conn {
            fd,
            registered: false,
            generation,
            session: Session::new(state, ctx.globals.config.proto_max_bulk_len),
            out: Output::default(),
            sending: Output::default(),
            vectored: Box::default(),
            sent: 0,
            send_in_flight: false,
            recv_armed: false,
            busy: false,
            holding: false,
            flush_queued: false,
            closing: false,
        };
        let index = match inner.free.pop() {
            Some(index) => index,
            None => {
                inner.conns.push(None);
                (inner.conns.len() - 1) as u32
            }
        };
        conn.session.state.borrow_mut().slot = (index, generation);
        conn.session.park_directly();
        conn.registered = self.register_socket(index, fd);
        let group = inner.bufs.group();
        self.arm_recv(index, &mut conn, group);
        inner.conns[index as usize] = Some(conn);
    }

    pub(super) fn on_recv(self: &Rc<Self>, index: u32, generation: u32, result: i32, flags: u32) {
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            if let Some(id) = cqueue::buffer_select(flags) {
                inner.bufs.recycle(id);
            }
            return;
        };
        if !cqueue::more(flags) {
            conn.recv_armed = false;
            // Rare (a multishot receive ends on no buffer, an overflow, or the peer's end):
            // logged for the stall under load that docs/ARCHITECTURE.md describes.
            tracing::debug!(
                client = conn.session.state.borrow().id,
                result,
                flags,
                closing = conn.closing,
                "multishot receive ended"
            );
        }
        if result > 0 {
            let id = cqueue::buffer_select(flags).expect("recv with a provided buffer");
            conn.session
                .input
                .extend_from_slice(inner.bufs.bytes(id, result as usize));
            inner.bufs.recycle(id);
            self.ctx.stats.received(result as u64);
            if !conn.recv_armed && !conn.closing {
                self.arm_recv(index, conn, inner.bufs.group());
            }
            if conn.session.input_overflowed() {
                tracing::warn!(
                    client = conn.session.state.borrow().id,
                    "query buffer limit reached; closing"
                );
                self.begin_close(conn);
            } else {
                self.pump(index, conn);
            }
        } else if result == -libc::ENOBUFS {
            if !conn.recv_armed && !conn.closing {
                self.arm_recv(index, conn, inner.bufs.group());
            }
        } else {
            // End of file, or an error: the client is gone.
            tracing::debug!(result, more = cqueue::more(flags), "recv ended");
            self.begin_close(conn);
        }
        self.maybe_free(inner, index, generation);
    }

    /// Runs the connection's buffered commands; spawns a task for cross-shard batches.
    pub(super) fn pump(self: &Rc<Self>, index: u32, conn: &mut Conn) {
        if conn.busy || conn.closing {
            return;
        }
        conn.session.state.borrow_mut().last_active_ms = self.ctx.shard.borrow().now_ms();
        match conn.session.pump(&self.ctx, &mut conn.out) {
            Pump::Idle | Pump::Close => {}
            // Its answer comes through `collect_direct`.
            Pump::Parked => conn.busy = true,
            Pump::Batch(batch) => {
                conn.busy = true;
                conn.holding = batch.prompt();
                let net = self.clone();
                let (state, generation) = (conn.session.state.clone(), conn.generation);
                let polls = self.polls.clone();
                glommio::spawn_local(counted(polls, async move {
                    let out = session::run_batch(net.ctx.clone(), state, batch).await;
                    net.finish_batch(index, generation, out);
                }))
                .detach();
            }
        }
        if conn.out.len() > OUTPUT_BUFFER_BYTES_MAX {
            tracing::warn!(
                client = conn.session.state.borrow().id,
                "output buffer limit reached; closing"
            );
            conn.out.clear();
            self.begin_close(conn);
            return;
        }
        if !conn.out.is_empty() && !conn.send_in_flight && !conn.holding {
            if !conn.flush_queued {
                conn.flush_queued = true;
                self.unflushed.borrow_mut().push((index, conn.generation));
            }
            return;
        }
        self.close_if_done(conn);
    }

    /// Starts closing once a close was asked for and every reply has left.
    pub(super) fn close_if_done(&self, conn: &mut Conn) {
        let requested = conn.session.state.borrow().close_requested;
        if requested && !conn.busy && !conn.send_in_flight && conn.out.is_empty() {
            self.begin_close(conn);
        }
    }

    pub(super) fn begin_close(&self, conn: &mut Conn) {
        if conn.closing {
            return;
        }
        tracing::debug!(
            client = conn.session.state.borrow().id,
            requested = conn.session.state.borrow().close_requested,
            "closing connection"
        );
        conn.closing = true;
        conn.session.state.borrow_mut().close_requested = true;
        if conn.busy {
            // A blocked TASK.FETCH holds the connection; let it go so the slot can free.
            self.ctx.connection_closing(&conn.session.state.borrow());
        }
        // Shutting the socket down ends the multishot recv (and any send) with a completion.
        // SAFETY: shutdown on our own live socket.
        unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
    }

    /// Frees a closing connection's slot once the kernel holds none of its buffers.
    pub(super) fn maybe_free(&self, inner: &mut Inner, index: u32, generation: u32) {
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            return;
        };
        if !(conn.closing && !conn.recv_armed && !conn.send_in_flight && !conn.busy) {
            return;
        }
        let conn = inner.conns[index as usize].take().expect("live");
        self.ctx.connection_closed(&conn.session.state.borrow());
        self.ctx.globals.release_client();
        if conn.registered {
            // The table holds a reference to the socket: drop it, or close would not close.
            self.register_socket(index, -1);
        }
        // SAFETY: closing our own fd; no operation on it is in flight any more.
        unsafe { libc::close(conn.fd) };
        inner.free.push(index);
    }

    /// Puts `fd` (or -1: nothing) into the registered-file table at `index`; false if it
    /// has no such slot.
    pub(super) fn register_socket(&self, index: u32, fd: RawFd) -> bool {
        if index >= self.registered_files {
            return false;
        }
        match self
            .ring
            .borrow()
            .submitter()
            .register_files_update(index, &[fd])
        {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!("cannot register a socket with the ring: {err}");
                false
            }
        }
    }
}
