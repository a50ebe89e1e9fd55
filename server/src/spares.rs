//! Windows of requests kept for reuse by one shard's connections. When a window's command
//! needs another shard, the connection's whole window goes to the batch task, its requests
//! parsed as they are, and a spare window takes its place; the batch gives it back when it
//! is done. Without that, the window's next commands decoded into fresh vectors and the
//! batch freed the old ones: some 7% of a 2-shard server's CPU under pipelined GETs; moving
//! requests one by one instead still cost a copy of each (docs/perf-notes.md, "The pipelined
//! hop"). The reply buffers of batches and the vectors a pipeline segment keeps its own
//! replies in are kept the same way. A shard's spares stay on its thread: nothing here
//! crosses to a peer.

use std::cell::RefCell;

use wetask_protocol::{Frame, Output};
use wetask_shards::request::Request;

/// The most windows kept.
const WINDOWS_MAX: usize = 64;
/// The most requests a kept window keeps (a batch of a long pipeline has many more).
const WINDOW_REQUESTS_MAX: usize = 1024;
/// A request with room for more arguments than this is replaced by a new one (one huge MSET
/// must not pin its vector for ever).
const ARGS_CAPACITY_MAX: usize = 64;
/// The most reply vectors and reply buffers kept.
const BUFFERS_MAX: usize = 64;
/// The room a new batch reply buffer starts with: a blocked FETCH's reply (id, queue,
/// payload, attempt) would otherwise grow it through four reallocations.
const OUTPUT_BYTES: usize = 256;
/// A reply buffer with more room than this is not kept.
const OUTPUT_BYTES_MAX: usize = 64 * 1024;

#[derive(Default)]
pub struct Spares {
    windows: RefCell<Vec<Vec<Request>>>,
    /// Vectors for a pipeline segment's replies from this shard (`routing::run_segment`).
    frames: RefCell<Vec<Vec<Frame>>>,
    /// Reply buffers for batches (`session::run_batch`), given back by the transport.
    outputs: RefCell<Vec<Output>>,
}

impl Spares {
    /// A window for a connection whose window went to a batch: cleared requests, with their
    /// vectors' room (empty when none is kept).
    pub fn window(&self) -> Vec<Request> {
        self.windows.borrow_mut().pop().unwrap_or_default()
    }

    /// Takes a batch's window back; every request in it is already cleared (it lets go of
    /// the connection's read buffer).
    pub fn keep_window(&self, mut window: Vec<Request>) {
        let mut windows = self.windows.borrow_mut();
        if windows.len() >= WINDOWS_MAX {
            return;
        }
        window.truncate(WINDOW_REQUESTS_MAX);
        for request in &mut window {
            debug_assert!(request.args.is_empty(), "a kept request holds no argument");
            if request.args.capacity() > ARGS_CAPACITY_MAX {
                *request = Request::default();
            }
        }
        windows.push(window);
    }

    /// An empty reply buffer for a batch.
    pub fn output(&self) -> Output {
        self.outputs
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Output::with_capacity(OUTPUT_BYTES))
    }

    /// Takes a batch's reply buffer back (emptied first).
    pub fn keep_output(&self, mut output: Output) {
        output.clear();
        let mut kept = self.outputs.borrow_mut();
        if kept.len() < BUFFERS_MAX && output.capacity() <= OUTPUT_BYTES_MAX {
            kept.push(output);
        }
    }

    /// An empty vector for replies.
    pub fn frames(&self) -> Vec<Frame> {
        self.frames.borrow_mut().pop().unwrap_or_default()
    }

    /// Takes a replies vector back (emptied first).
    pub fn keep_frames(&self, mut frames: Vec<Frame>) {
        frames.clear();
        let mut kept = self.frames.borrow_mut();
        if kept.len() < BUFFERS_MAX && frames.capacity() <= WINDOW_REQUESTS_MAX {
            kept.push(frames);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_kept_window_comes_back_with_its_requests_room() {
        let spares = Spares::default();
        let mut request = Request::new(vec![Bytes::from_static(b"GET"), Bytes::from("k")], 2);
        let room = request.args.capacity();
        request.clear();
        spares.keep_window(vec![request]);
        let window = spares.window();
        assert_eq!(window.len(), 1);
        assert!(window[0].args.is_empty(), "no argument is kept");
        assert_eq!(window[0].args.capacity(), room);
        assert!(spares.window().is_empty(), "then a new one");
    }

    #[test]
    fn a_request_with_a_huge_vector_is_replaced_and_a_long_window_cut() {
        let spares = Spares::default();
        let mut huge = Request::new(vec![Bytes::from_static(b"x"); ARGS_CAPACITY_MAX + 1], 1);
        huge.clear();
        let mut window = vec![huge];
        window.resize_with(WINDOW_REQUESTS_MAX + 10, Request::default);
        spares.keep_window(window);
        let window = spares.window();
        assert_eq!(window.len(), WINDOW_REQUESTS_MAX);
        assert_eq!(window[0].args.capacity(), 0);
    }
}
