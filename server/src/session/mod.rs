//! The transport-independent half of a connection: its read buffer, its decoder, its state,
//! and the pump that turns buffered bytes into replies. Both network paths (the io_uring
//! ring and the glommio fallback) drive a `Session` the same way:
//!
//! 1. append received bytes to `input`;
//! 2. `pump`: decode every complete command and run it inline while it needs only this
//!    shard, encoding replies straight into the output buffer;
//! 3. when a command needs another shard, `pump` hands it and every later complete command
//!    back as a batch, which the transport runs in a task with [`dispatch::run_batch`],
//!    then pumps again.

mod consensus_route;
pub mod dispatch;
#[cfg(test)]
mod parsed_once;
mod redirect;

use std::cell::RefCell;
use std::rc::Rc;

use bytes::BytesMut;
use wetask_protocol::{encode_error, CommandDecoder, Limits, Output, ProtocolError};
use wetask_shards::request::Request;

use crate::clients::ConnState;
use crate::shard::ShardCtx;
use dispatch::{reached_output_limit, Inline, WINDOW_COMMANDS_MAX};

/// The most bytes a client may have buffered but not yet executed (Redis's
/// `client-query-buffer-limit`).
pub const QUERY_BUFFER_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// The most reply bytes queued for a client that does not read them.
pub const OUTPUT_BUFFER_BYTES_MAX: usize = 1024 * 1024 * 1024;

pub enum Pump {
    /// Everything buffered ran; wait for more input.
    Idle,
    /// These commands need other shards: run them with [`run_batch`].
    Batch(Batch),
    /// Close once the output so far is sent.
    Close,
    /// The last command waits parked with no task (`dispatch::Inline::Parked`): run nothing
    /// more of this connection until the shard's answer for it is written.
    Parked,
}

pub struct Session {
    pub state: Rc<RefCell<ConnState>>,
    pub input: BytesMut,
    decoder: CommandDecoder,
    /// Commands decoded but not yet run, each looked up and parsed once
    /// (`wetask_shards::request`); the requests are reused so decoding allocates nothing
    /// per command.
    window: Vec<Request>,
    /// A protocol error met while collecting a batch, reported after the batch's replies.
    held_error: Option<ProtocolError>,
    /// The transport writes `Reply::Direct` answers (the io_uring driver), so a blocked
    /// command may park with no task.
    parks_direct: bool,
}

impl Session {
    pub fn new(state: Rc<RefCell<ConnState>>, bulk_bytes_max: usize) -> Self {
        let limits = Limits {
            bulk_bytes_max,
            ..Limits::default()
        };
        Session {
            state,
            input: BytesMut::new(),
            decoder: CommandDecoder::new(limits),
            window: Vec::new(),
            held_error: None,
            parks_direct: false,
        }
    }

    /// The transport answers directly parked commands (see `Pump::Parked`).
    pub fn park_directly(&mut self) {
        self.parks_direct = true;
    }

    pub fn input_overflowed(&self) -> bool {
        self.input.len() > QUERY_BUFFER_BYTES_MAX
    }

    fn protocol_error(&mut self, err: &ProtocolError, out: &mut Output) -> Pump {
        tracing::debug!(client = self.state.borrow().id, "protocol error: {err}");
        encode_error(out, err.reply_text().as_bytes());
        self.state.borrow_mut().close_requested = true;
        self.input.clear();
        Pump::Close
    }

    /// Decodes up to `WINDOW_COMMANDS_MAX` buffered commands into the window; returns how
    /// many, and the protocol error that stopped it, if one did.
    fn fill_window(&mut self, shard_count: usize) -> (usize, Option<ProtocolError>) {
        // A client that has not authenticated gets Redis's tight limits, and its commands are
        // decoded one at a time, so that those after a successful AUTH get the normal ones.
        let unauthenticated = !self.state.borrow().authenticated;
        self.decoder.set_unauthenticated(unauthenticated);
        let window = if unauthenticated {
            1
        } else {
            WINDOW_COMMANDS_MAX
        };
        let mut n = 0;
        while n < window {
            if self.window.len() == n {
                self.window.push(Request::default());
            }
            let request = &mut self.window[n];
            match self.decoder.decode_into(&mut self.input, &mut request.args) {
                Ok(true) => {
                    let spec = wetask_shards::lookup(&request.args[0]);
                    request.prepare(spec, shard_count);
                    n += 1;
                }
                Ok(false) => break,
                Err(err) => return (n, Some(err)),
            }
        }
        (n, None)
    }

    /// Lets go of the window's arguments: they share the read buffer, which can only be
    /// reused in place once nothing else holds it. (Inline: as a call it cost the job flow
    /// about 60 instructions per job in saved registers; callgrind, 2026-12-05.)
    #[inline(always)]
    fn clear_window(&mut self, n: usize) {
        for request in &mut self.window[..n] {
            request.clear();
        }
    }

    /// Runs every buffered command that can run inline; see the module docs.
    pub fn pump(&mut self, ctx: &Rc<ShardCtx>, out: &mut Output) -> Pump {
        self.state.borrow_mut().last_active_ms = ctx.shard.borrow().now_ms();
        crate::commands::workers::beat_if_due(ctx, &self.state);
        if let Some(err) = self.held_error.take() {
            return self.protocol_error(&err, out);
        }
        loop {
            if self.state.borrow().close_requested {
                return Pump::Close;
            }
            let (n, error) = self.fill_window(ctx.shard_count);
            if n > 1 {
                dispatch::prefetch_keys(ctx, self.state.borrow().db, &self.window[..n]);
            }
            // SLOWLOG: each command's time, chained (one counter read per command).
            let mut last = crate::slowlog::ticks();
            for i in 0..n {
                if self.state.borrow().close_requested {
                    self.clear_window(n);
                    return Pump::Close;
                }
                // Only the window's last command may wait with no task: nothing decoded
                // after it may run before its reply.
                let may_park = self.parks_direct && i + 1 == n && error.is_none();
                let request = &self.window[i];
                let inline = dispatch::try_inline(ctx, &self.state, request, out, may_park);
                if !matches!(inline, Inline::NeedsTask) {
                    let now = crate::slowlog::ticks();
                    let took = now.wrapping_sub(last);
                    dispatch::note_time(ctx, &self.state, request, took);
                    last = now;
                }
                match inline {
                    Inline::Parked => {
                        self.clear_window(n);
                        return Pump::Parked;
                    }
                    Inline::Ran(frame) => {
                        self.state.borrow_mut().encode_reply(out, &frame);
                        if reached_output_limit(ctx, &self.state, out) {
                            self.clear_window(n);
                            self.input.clear();
                            return Pump::Close;
                        }
                    }
                    Inline::NeedsTask => return self.hand_to_task(ctx, i, n, error),
                }
            }
            self.clear_window(n);
            if let Some(err) = error {
                return self.protocol_error(&err, out);
            }
            if n == 0 {
                return Pump::Idle;
            }
        }
    }

    /// The window's commands from `i` on, and every further complete one, as a batch for a
    /// task (the `error` that ended the window is reported after them). The window itself
    /// goes, its requests parsed as they are, and a spare window takes its place: no request
    /// is moved or allocated (docs/perf-notes.md, "The pipelined hop").
    fn hand_to_task(
        &mut self,
        ctx: &ShardCtx,
        i: usize,
        n: usize,
        error: Option<ProtocolError>,
    ) -> Pump {
        let mut requests = std::mem::replace(&mut self.window, ctx.spares.window());
        for request in &mut requests[..i] {
            request.clear();
        }
        let end = match error {
            Some(err) => {
                self.held_error = Some(err);
                n
            }
            None => self.collect_batch(ctx.shard_count, &mut requests, n),
        };
        let prompt = dispatch::runs_promptly(ctx, &self.state.borrow(), &requests[i..end]);
        Pump::Batch(Batch {
            requests,
            commands: i..end,
            prompt,
        })
    }

    /// Decodes every further complete command into `requests` from `n` on (into the
    /// requests already there first); returns where they end.
    fn collect_batch(
        &mut self,
        shard_count: usize,
        requests: &mut Vec<Request>,
        n: usize,
    ) -> usize {
        if !self.state.borrow().authenticated {
            // One command at a time until AUTH succeeds (see `fill_window`).
            return n;
        }
        let mut end = n;
        loop {
            if requests.len() == end {
                requests.push(Request::default());
            }
            let request = &mut requests[end];
            match self.decoder.decode_into(&mut self.input, &mut request.args) {
                Ok(true) => {
                    let spec = wetask_shards::lookup(&request.args[0]);
                    request.prepare(spec, shard_count);
                    end += 1;
                }
                Ok(false) => return end,
                Err(err) => {
                    self.held_error = Some(err);
                    return end;
                }
            }
        }
    }
}

/// Commands that need other shards: `requests[commands]`, in a connection's former window
/// (which goes back to the shard's spares when the batch is done).
pub struct Batch {
    requests: Vec<Request>,
    commands: std::ops::Range<usize>,
    prompt: bool,
}

impl Batch {
    /// None of its commands can wait for long (each is a simple keyed command, and no CLIENT
    /// PAUSE holds commands), so the transport may hold the replies written before them and
    /// send everything as one write once the batch is done.
    pub fn prompt(&self) -> bool {
        self.prompt
    }
}

/// Runs a batch that needs other shards; replies go to `out` in order.
pub async fn run_batch(ctx: Rc<ShardCtx>, state: Rc<RefCell<ConnState>>, batch: Batch) -> Output {
    // A kept buffer (the transport gives it back: `Spares::keep_output`).
    let mut out = ctx.spares.output();
    state.borrow_mut().in_batch = true;
    let Batch {
        mut requests,
        commands,
        prompt,
    } = batch;
    // Boxed: inline, this future and the batch's (512 bytes) made a spawned task of 1,344
    // bytes, past glibc's tcache (1,032): a slow malloc and a 1.3 KB copy for every batch.
    // Boxed, both allocations come from the tcache (docs/perf-notes.md).
    Box::pin(dispatch::run_batch(
        &ctx,
        &state,
        &mut requests[commands.clone()],
        prompt,
        &mut out,
    ))
    .await;
    for request in &mut requests[commands] {
        request.clear();
    }
    ctx.spares.keep_window(requests);
    let mut state = state.borrow_mut();
    state.in_batch = false;
    state.last_active_ms = ctx.shard.borrow().now_ms();
    out
}
