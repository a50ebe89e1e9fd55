//! RESP2 and RESP3 for WeTask: the wire format and nothing else.
//!
//! * [`CommandDecoder`] turns a client's request bytes (multibulk or inline) into argument
//!   lists. It is iterative, resumable across reads, and zero-copy.
//! * [`FrameDecoder`] decodes any RESP2/RESP3 frame (replies, pushes), for clients such as the
//!   bench load generator and the tests.
//! * [`Frame`] plus [`encode`] write every reply type, downgrading RESP3-only types when the
//!   connection speaks RESP2.
//! * [`Output`] queues a connection's replies, referencing large payloads instead of copying
//!   them, for a vectored send.
//!
//! No runtime and no engine types live here: the server and the shards depend on this
//! crate, never the other way round.

mod command;
mod encode;
mod error;
mod frame;
mod frame_decoder;
mod inline;
mod limits;
mod line;
mod output;

pub use command::CommandDecoder;
pub use encode::{
    encode, encode_bulk, encode_command, encode_error, encode_integer, encode_null, encode_simple,
    format_double,
};
pub use error::ProtocolError;
pub use frame::{Frame, Protocol};
pub use frame_decoder::FrameDecoder;
pub use inline::split_inline as split_args;
pub use limits::{
    Limits, ARRAY_LEN_MAX, BULK_BYTES_MAX_DEFAULT, INLINE_BYTES_MAX, LINE_BYTES_MAX,
    NESTING_DEPTH_MAX,
};
pub use line::parse_i64;
pub use output::{encode_bulk_shared, encode_output, Output, OutputMark, SPLICE_BYTES_MIN};
