//! Requests kept for reuse by the batches of one shard. A window's command that needs
//! another shard leaves the connection's window for a batch task; without a spare in its
//! place the window's next command decodes into an empty vector (a malloc), and the batch
//! frees the request's vectors when it ends. Under pipelined GETs on two shards those
//! allocations were some 7% of the server's CPU (docs/perf-notes.md, "The pipelined hop").
//! The vectors a pipeline segment keeps its own replies in are kept the same way. A shard's
//! spares stay on its thread: nothing here crosses to a peer.

use std::cell::RefCell;

use wetask_protocol::{Frame, Output};
use wetask_shards::request::Request;

/// The most requests kept: a few windows' worth.
const REQUESTS_MAX: usize = 1024;
/// The most batch vectors kept.
const BATCHES_MAX: usize = 64;
/// A request with room for more arguments than this is not kept (one huge MSET must not pin
/// its vector for ever).
const ARGS_CAPACITY_MAX: usize = 64;

#[derive(Default)]
pub struct Spares {
    requests: RefCell<Vec<Request>>,
    batches: RefCell<Vec<Vec<Request>>>,
    /// Vectors for a pipeline segment's replies from this shard (`routing::run_segment`).
    frames: RefCell<Vec<Vec<Frame>>>,
    /// Reply buffers for batches (`session::run_batch`), given back by the transport.
    outputs: RefCell<Vec<Output>>,
}

/// The room a new batch reply buffer starts with: a blocked FETCH's reply (id, queue,
/// payload, attempt) would otherwise grow it through four reallocations.
const OUTPUT_BYTES: usize = 256;
/// A reply buffer with more room than this is not kept.
const OUTPUT_BYTES_MAX: usize = 64 * 1024;

impl Spares {
    /// A cleared request, with its vectors' room if one was kept.
    pub fn request(&self) -> Request {
        self.requests.borrow_mut().pop().unwrap_or_default()
    }

    /// An empty vector for a batch's requests.
    pub fn batch(&self) -> Vec<Request> {
        self.batches.borrow_mut().pop().unwrap_or_default()
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
        if kept.len() < BATCHES_MAX && output.capacity() <= OUTPUT_BYTES_MAX {
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
        if kept.len() < BATCHES_MAX && frames.capacity() <= REQUESTS_MAX {
            kept.push(frames);
        }
    }

    /// Takes one request back (cleared here: it lets go of the read buffer).
    pub fn keep(&self, mut request: Request) {
        let mut requests = self.requests.borrow_mut();
        if requests.len() < REQUESTS_MAX && request.args.capacity() <= ARGS_CAPACITY_MAX {
            request.clear();
            requests.push(request);
        }
    }

    /// Takes a finished batch back: its requests and its vector.
    pub fn keep_batch(&self, mut batch: Vec<Request>) {
        for request in batch.drain(..) {
            self.keep(request);
        }
        let mut batches = self.batches.borrow_mut();
        if batches.len() < BATCHES_MAX && batch.capacity() <= REQUESTS_MAX {
            batches.push(batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_kept_request_comes_back_cleared_with_its_room() {
        let spares = Spares::default();
        let request = Request::new(vec![Bytes::from_static(b"GET"), Bytes::from("k")], 2);
        let room = request.args.capacity();
        spares.keep_batch(vec![request]);
        let again = spares.request();
        assert!(again.args.is_empty(), "no argument is kept");
        assert_eq!(again.args.capacity(), room);
        assert!(
            spares.batch().capacity() >= 1,
            "the batch's vector is kept too"
        );
        assert!(spares.request().args.capacity() == 0, "then a fresh one");
    }

    #[test]
    fn a_request_with_a_huge_vector_is_not_kept() {
        let spares = Spares::default();
        let args = vec![Bytes::from_static(b"x"); ARGS_CAPACITY_MAX + 1];
        spares.keep(Request::new(args, 1));
        assert_eq!(spares.request().args.capacity(), 0);
    }
}
