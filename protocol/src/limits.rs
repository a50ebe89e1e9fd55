//! Every size the decoders accept from the network is bounded here, by a named constant.

/// Largest bulk string accepted by default (Redis's `proto-max-bulk-len`).
pub const BULK_BYTES_MAX_DEFAULT: usize = 512 * 1024 * 1024;
/// Largest number of elements in one array, map, set or push frame.
pub const ARRAY_LEN_MAX: usize = 1024 * 1024;
/// Deepest nesting of aggregates the frame decoder follows.
pub const NESTING_DEPTH_MAX: usize = 32;
/// Longest inline command (a request not starting with a RESP type byte).
pub const INLINE_BYTES_MAX: usize = 64 * 1024;
/// Longest header line (`*123\r\n`, `$45\r\n`, `+OK\r\n` ...). Simple strings and errors in
/// replies may be long, so this also bounds them.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

const _: () = assert!(INLINE_BYTES_MAX <= LINE_BYTES_MAX);
const _: () = assert!(ARRAY_LEN_MAX <= i32::MAX as usize);
const _: () = assert!(BULK_BYTES_MAX_DEFAULT <= i64::MAX as usize);

/// Most arguments a client that has not authenticated may send in one command (Redis's).
pub const UNAUTHENTICATED_ARGS_MAX: usize = 10;
/// Longest argument (or inline line) a client that has not authenticated may send.
pub const UNAUTHENTICATED_BULK_BYTES_MAX: usize = 16 * 1024;

/// The limits one decoder enforces. Only the bulk length is configurable at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub bulk_bytes_max: usize,
    pub array_len_max: usize,
    pub nesting_depth_max: usize,
    pub inline_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            bulk_bytes_max: BULK_BYTES_MAX_DEFAULT,
            array_len_max: ARRAY_LEN_MAX,
            nesting_depth_max: NESTING_DEPTH_MAX,
            inline_bytes_max: INLINE_BYTES_MAX,
        }
    }
}
