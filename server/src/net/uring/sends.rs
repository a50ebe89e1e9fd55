//! The reply path of the ring: a connection's output flushed as one send (or one SENDMSG
//! over iovecs for large shared values), held replies released once the journal's fsync
//! (under `appendfsync always`) completes, send completions, and the turn's sends in the
//! order Redis writes its pending clients (`flush_unflushed`).

use super::*;

impl Net {
    /// Hands queued replies to the kernel if no send is in flight (and none waits for a
    /// prompt batch: `Conn::holding`).
    pub(super) fn flush(&self, index: u32, conn: &mut Conn) {
        if conn.send_in_flight || conn.holding || conn.out.is_empty() {
            return;
        }
        std::mem::swap(&mut conn.out, &mut conn.sending);
        conn.sent = 0;
        conn.session.state.borrow_mut().unsent = conn.sending.len();
        self.submit_send(index, conn, true);
    }

    /// Submits the rest of `conn.sending`. `fresh`: it may reveal writes of this turn, so
    /// under `always` it waits for the journal's fsync; a send's continuation went out in
    /// part already and needs no wait.
    pub(super) fn submit_send(&self, index: u32, conn: &mut Conn, fresh: bool) {
        let entry = if conn.sending.has_spliced() {
            // Large payloads are referenced, not copied: send everything as one iovec list.
            let vectored = &mut *conn.vectored;
            vectored.iovecs.clear();
            conn.sending.for_each_slice(conn.sent, |piece| {
                vectored.iovecs.push(libc::iovec {
                    iov_base: piece.as_ptr() as *mut libc::c_void,
                    iov_len: piece.len(),
                });
                vectored.iovecs.len() < SEND_IOVECS_MAX
            });
            vectored.header.msg_iov = vectored.iovecs.as_mut_ptr();
            vectored.header.msg_iovlen = vectored.iovecs.len();
            on_socket!(conn, index, |socket| opcode::SendMsg::new(
                socket,
                &vectored.header
            )
            .flags(libc::MSG_NOSIGNAL as u32)
            .build())
        } else {
            let rest = &conn.sending[conn.sent..];
            on_socket!(conn, index, |socket| opcode::Send::new(
                socket,
                rest.as_ptr(),
                rest.len() as u32
            )
            .flags(libc::MSG_NOSIGNAL)
            .build())
        };
        let entry = entry.user_data(user_data(OP_SEND, index, conn.generation));
        if fresh && self.ring_syncs() {
            self.held.borrow_mut().held.push(entry);
        } else {
            self.push(entry);
        }
        conn.send_in_flight = true;
    }

    /// Under `appendfsync always`, whether sends wait for the ring's fsync.
    pub(super) fn ring_syncs(&self) -> bool {
        self.consensus
            || self
                .ctx
                .journal
                .borrow()
                .as_ref()
                .is_some_and(|j| j.ring_syncs())
    }

    /// Moves held sends on (see `held_sends`): `committed` at a commit point, when what was
    /// held has its records written. With no fsync in flight, the waiting sends get one, or
    /// go at once if everything written is already on disk.
    pub(super) fn release_held(&self, committed: bool) {
        if self.consensus {
            return self.release_on_commit(committed);
        }
        let mut held = self.held.borrow_mut();
        if held.is_idle() {
            return;
        }
        if committed {
            held.committed();
        }
        if held.in_flight.is_some() || held.next.is_empty() || held.gather_for().is_some() {
            return;
        }
        held.released_at = None;
        let sends = std::mem::take(&mut held.next);
        let target = self
            .ctx
            .journal
            .borrow()
            .as_ref()
            .and_then(|j| j.sync_target());
        match target {
            None => {
                drop(held);
                for entry in sends {
                    self.push(entry);
                }
            }
            Some((file, covers)) => {
                let entry = opcode::Fsync::new(types::Fd(file.file.as_raw_fd()))
                    .flags(types::FsyncFlags::DATASYNC)
                    .build()
                    .user_data(user_data(OP_FSYNC, 0, 0));
                let stats = &self.ctx.stats;
                stats
                    .held_sends
                    .set(stats.held_sends.get() + sends.len() as u64);
                held.in_flight = Some(InFlight {
                    _file: file,
                    covers,
                    sends,
                    submitted: Instant::now(),
                });
                drop(held);
                self.push(entry);
            }
        }
    }

    /// Consensus mode (`shard::raft`): at a commit point the sends held since the last one
    /// become a group behind the Raft barrier of their turn; a group goes once its barrier
    /// passes, and its connections close if the leadership ended before it did.
    fn release_on_commit(&self, committed: bool) {
        let mut go = Vec::new();
        let mut lost = Vec::new();
        {
            let mut held = self.held.borrow_mut();
            let mut raft = self.ctx.raft.borrow_mut();
            let raft = raft.as_mut().expect("consensus mode");
            if committed && !held.held.is_empty() {
                let sends = std::mem::take(&mut held.held);
                match raft.hold(&mut self.ctx.shard.borrow_mut(), sends.len()) {
                    Hold::Now => go.extend(sends),
                    Hold::Lost => lost.extend(sends),
                    Hold::Until(barrier) => held.raft.push_back((barrier, sends)),
                }
            }
            while let Some((barrier, _)) = held.raft.front() {
                match raft.passed(barrier) {
                    Passed::No => break,
                    Passed::Yes => go.extend(held.raft.pop_front().expect("a group").1),
                    Passed::Lost => lost.extend(held.raft.pop_front().expect("a group").1),
                }
            }
        }
        for entry in go {
            self.push(entry);
        }
        for entry in lost {
            let (_, index, generation) = split_user_data(entry.get_user_data());
            self.abandon_send(index, generation);
        }
    }

    /// A held send that must not go (its writes may never commit): the connection closes,
    /// as a failed send closes it.
    fn abandon_send(&self, index: u32, generation: u32) {
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            return;
        };
        conn.send_in_flight = false;
        conn.sending.clear();
        conn.out.clear();
        self.begin_close(conn);
        self.maybe_free(inner, index, generation);
    }

    /// The journal's fsync completed: its sends go, and the next group gets its fsync.
    pub(super) fn on_fsync(&self, result: i32) {
        let Some(done) = self.held.borrow_mut().in_flight.take() else {
            return;
        };
        if let Some(journal) = self.ctx.journal.borrow_mut().as_mut() {
            if result < 0 {
                journal.sync_failed(io::Error::from_raw_os_error(-result));
            }
            journal.made_durable(done.covers);
        }
        let stats = &self.ctx.stats;
        stats.ring_fsyncs.set(stats.ring_fsyncs.get() + 1);
        stats
            .ring_fsync_us
            .set(stats.ring_fsync_us.get() + done.submitted.elapsed().as_micros() as u64);
        {
            let mut held = self.held.borrow_mut();
            held.last_group = done.sends.len();
            held.released_at = Some(Instant::now());
        }
        for entry in done.sends {
            self.push(entry);
        }
        self.release_held(false);
    }

    pub(super) fn on_send(self: &Rc<Self>, index: u32, generation: u32, result: i32) {
        if result < 0 {
            return self.abandon_send(index, generation);
        }
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
            return;
        };
        conn.send_in_flight = false;
        self.ctx.stats.sent(result as u64);
        conn.sent += result as usize;
        conn.session.state.borrow_mut().unsent =
            conn.sending.len() - conn.sent.min(conn.sending.len());
        if conn.sent < conn.sending.len() {
            self.submit_send(index, conn, false);
        } else {
            conn.sending.clear();
            if conn.sending.capacity() > KEEP_BUFFER_BYTES_MAX {
                conn.sending = Output::default();
            }
            self.flush(index, conn);
            self.close_if_done(conn);
        }
        self.maybe_free(inner, index, generation);
    }

    /// Sends the replies the turn made, the connection that got its last reply first (as
    /// Redis writes its pending clients): a SUBMIT's hand-off to a parked worker is made
    /// after the SUBMIT's own reply, and the worker, whose wait is what a job's latency
    /// measures, should not queue behind the producer.
    pub(super) fn flush_unflushed(&self) {
        if self.unflushed.borrow().is_empty() {
            return;
        }
        let unflushed = std::mem::take(&mut *self.unflushed.borrow_mut());
        let mut inner = self.inner.borrow_mut();
        for &(index, generation) in unflushed.iter().rev() {
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            conn.flush_queued = false;
            self.flush(index, conn);
            self.close_if_done(conn);
        }
        // Recycle the vector's allocation.
        let mut slot = self.unflushed.borrow_mut();
        if slot.is_empty() {
            let mut unflushed = unflushed;
            unflushed.clear();
            *slot = unflushed;
        }
    }

    /// Queues a finished batch's replies for the driver. Never touches `inner` itself: the
    /// task may run while the driver holds it (glommio can run a woken task right away).
    pub(super) fn finish_batch(&self, index: u32, generation: u32, out: Output) {
        self.finished.borrow_mut().push((index, generation, out));
        self.notified.set(true);
    }
}
