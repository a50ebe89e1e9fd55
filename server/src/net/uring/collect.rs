//! What comes back to the ring from outside a connection's own reads: peers' envelopes
//! served every turn, replies of batches that ran in tasks, answers to directly parked
//! commands, and pushes (pub/sub, invalidations) for the connections.

use super::*;

impl Net {
    /// Serves the envelopes peers have sent (those their posts on our doorbell count), and
    /// moves on what waits for room in peers' channels. Returns envelopes served.
    pub(super) fn serve_mesh(&self) -> usize {
        let Some(mesh) = self.ctx.mesh.as_ref() else {
            return 0;
        };
        let mut served = 0;
        let count = self.peers.borrow().len();
        for slot in 0..count {
            loop {
                let (peer, envelope) = {
                    let mut peers = self.peers.borrow_mut();
                    let peer = &mut peers[slot];
                    let posted = self.doorbell().posted(peer.id);
                    if peer.taken >= posted {
                        break;
                    }
                    let mut cx = Context::from_waker(Waker::noop());
                    match peer.receiver.poll_next(&mut cx) {
                        Poll::Ready(Some(envelope)) => {
                            peer.taken += 1;
                            (peer.id, envelope)
                        }
                        // Posted means in the channel; a channel that has none has closed
                        // (shutdown): nothing more will come.
                        _ => {
                            peer.taken = posted;
                            break;
                        }
                    }
                };
                self.ctx.serve_envelope(peer, envelope);
                served += 1;
            }
        }
        self.overflow_waiting.set(mesh.retry_overflow());
        served
    }

    /// A peer has sent an envelope this driver has not read.
    pub(super) fn mesh_waiting(&self) -> bool {
        let bell = self.doorbell();
        self.peers
            .borrow()
            .iter()
            .any(|peer| peer.taken < bell.posted(peer.id))
    }

    /// Hands finished batches' replies to their connections and pumps what arrived since.
    pub(super) fn collect_finished(self: &Rc<Self>) -> usize {
        if self.finished.borrow().is_empty() {
            return 0;
        }
        let mut finished = self.finished.replace(self.spare_finished.take());
        let count = finished.len();
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        for (index, generation, mut out) in finished.drain(..) {
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                self.ctx.spares.keep_output(out);
                continue;
            };
            conn.busy = false;
            conn.holding = false;
            // Replies the batch sent early (`dispatch::send_early`) and pushes that came
            // meanwhile go before the batch's last replies.
            let early = std::mem::take(&mut conn.session.state.borrow_mut().pushes);
            conn.out.append(early);
            conn.out.take_from(&mut out);
            self.ctx.spares.keep_output(out);
            self.pump(index, conn);
            self.maybe_free(inner, index, generation);
        }
        self.spare_finished.set(finished);
        count
    }

    /// Writes the answers of commands that waited parked with no task (`Reply::Direct`)
    /// into their connections' output, and runs what those connections sent meanwhile.
    pub(super) fn collect_direct(self: &Rc<Self>) -> usize {
        let mut answers = self.answered.take();
        self.ctx.swap_direct_answers(&mut answers);
        let count = answers.len();
        if count == 0 {
            self.answered.set(answers);
            return 0;
        }
        let now = self.ctx.shard.borrow().now_ms();
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        for (client, frame) in answers.drain(..) {
            let Some(state) = self.ctx.clients.borrow().get(client) else {
                continue;
            };
            let Ok(mut state) = state.try_borrow_mut() else {
                // Borrowed right now (never seen): deliver it next turn.
                self.ctx.requeue_direct_answer(client, frame);
                continue;
            };
            let (index, generation) = state.slot;
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            conn.busy = false;
            state.in_batch = false;
            state.last_active_ms = now;
            state.encode_reply(&mut conn.out, &frame);
            drop(state);
            self.pump(index, conn);
            self.maybe_free(inner, index, generation);
        }
        self.answered.set(answers);
        count
    }

    /// Moves published messages into their subscribers' output and sends them; a subscriber
    /// whose output passes the pub/sub limit is disconnected (see `pubsub`).
    pub(super) fn collect_pushes(self: &Rc<Self>) -> usize {
        self.ctx.settle_deferred_pushes();
        if self.ctx.push_ready.borrow().is_empty() {
            return 0;
        }
        let ready = std::mem::take(&mut *self.ctx.push_ready.borrow_mut());
        if ready.is_empty() {
            return 0;
        }
        let mut inner = self.inner.borrow_mut();
        for &client in &ready {
            let Some(state) = self.ctx.clients.borrow().get(client) else {
                continue;
            };
            let Ok(mut state) = state.try_borrow_mut() else {
                // Busy right now: look again next turn.
                self.ctx.push_ready.borrow_mut().push(client);
                continue;
            };
            let (index, generation) = state.slot;
            let Some(conn) = live_conn(&mut inner.conns, index, generation) else {
                continue;
            };
            let pushes = std::mem::take(&mut state.pushes);
            if pushes.is_empty() {
                continue;
            }
            conn.out.append(pushes);
            let pending = conn.out.len() + state.unsent;
            let now = self.ctx.shard.borrow().now_ms();
            if self
                .ctx
                .globals
                .output_limits
                .exceeded(&mut state, pending, now)
            {
                tracing::warn!(client, "pubsub output buffer limit reached; closing");
                conn.out.clear();
                crate::clients::shut_down(&mut state);
                drop(state);
                self.begin_close(conn);
                continue;
            }
            drop(state);
            self.flush(index, conn);
        }
        ready.len()
    }
}
