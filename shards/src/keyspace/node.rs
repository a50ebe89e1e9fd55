//! `Node`: one stored key together with its value, in a single heap allocation.
//!
//! The keyspace's memory and its pipelined speed are both decided here (docs/perf-notes.md,
//! "Keyspace layout"). A short string value sits right after its key name in the same
//! allocation, so a SET allocates once and a GET that compared the key finds the value in the
//! next bytes, usually the same cache line. Any other value (a long string, and later lists,
//! hashes ...) is stored as a [`Value`] inside the node, in place of the inline bytes.
//!
//! Layout (one allocation, aligned to 8):
//!
//! ```text
//! inline string: [key_len u32 | stamp:21 value_len:11][key bytes][value bytes]
//! typed value:   [key_len u32 | stamp:21 TYPED:11    ][Value (40 bytes)][key bytes]
//! ```
//!
//! The high 21 bits of the value word are the key's access stamp for `maxmemory` eviction
//! (an LRU clock in seconds, or an LFU counter and its last decay minute): kept in bits the
//! length does not use, so tracking access costs no memory.
//!
//! The top bit of `key_len` says the key has a TTL (kept in the database's side table), so a
//! key without one never touches that table. A node is 8 bytes in the tables that hold it.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

use bytes::Bytes;

use crate::values::value::Value;

/// Longest string value stored inline in its node; longer ones are a shared `Bytes`, which a
/// reply can reference without copying.
pub const INLINE_VALUE_MAX: usize = 1024;

/// Longest key name a node can hold (its length shares a word with the TTL flag).
pub const KEY_BYTES_MAX: usize = (1 << 31) - 1;

const TTL_FLAG: u32 = 1 << 31;
/// The length bits of the value word: an inline length (0..=1024), or `TYPED`.
const LEN_MASK: u32 = 0x7FF;
const TYPED: u32 = LEN_MASK;
/// Bits of the access stamp (the value word's high bits).
pub const STAMP_BITS: u32 = 21;
pub const STAMP_MASK: u32 = (1 << STAMP_BITS) - 1;
const HEADER_BYTES: usize = 8;
const ALIGN: usize = 8;
const VALUE_BYTES: usize = std::mem::size_of::<Value>();

const _: () = assert!(std::mem::align_of::<Value>() <= ALIGN);
const _: () = assert!(INLINE_VALUE_MAX < TYPED as usize);
const _: () = assert!(32 - STAMP_BITS == LEN_MASK.count_ones());

/// A key and its value. Owns its allocation; 8 bytes.
pub struct Node(NonNull<u8>);

// A node owns plain bytes and a `Value`, which is `Send`; nothing is shared.
unsafe impl Send for Node {}

/// A borrowed view of a node's value.
pub enum ValueRef<'a> {
    /// A string stored inline.
    Inline(&'a [u8]),
    /// Any value stored as a `Value`.
    Typed(&'a Value),
}

impl Node {
    /// A node for `key` holding `value`, inline when it is a short string.
    pub fn new(key: &[u8], value: Value) -> Node {
        match value {
            Value::Str(bytes) if bytes.len() <= INLINE_VALUE_MAX => Node::new_str(key, &bytes),
            value => Node::new_typed(key, value),
        }
    }

    /// A node for `key` holding the string `value`, copied.
    pub fn new_str(key: &[u8], value: &[u8]) -> Node {
        if value.len() > INLINE_VALUE_MAX {
            return Node::new_typed(key, Value::Str(Bytes::copy_from_slice(value)));
        }
        let node = Node::allocate(key.len(), value.len() as u32);
        // SAFETY: the allocation holds the header, then `key.len()` then `value.len()` bytes.
        unsafe {
            let base = node.0.as_ptr();
            std::ptr::copy_nonoverlapping(key.as_ptr(), base.add(HEADER_BYTES), key.len());
            std::ptr::copy_nonoverlapping(
                value.as_ptr(),
                base.add(HEADER_BYTES + key.len()),
                value.len(),
            );
        }
        node
    }

    fn new_typed(key: &[u8], value: Value) -> Node {
        let node = Node::allocate(key.len(), TYPED);
        // SAFETY: a typed node holds the header, an aligned `Value` slot, then the key.
        unsafe {
            let base = node.0.as_ptr();
            std::ptr::write(base.add(HEADER_BYTES) as *mut Value, value);
            std::ptr::copy_nonoverlapping(
                key.as_ptr(),
                base.add(HEADER_BYTES + VALUE_BYTES),
                key.len(),
            );
        }
        node
    }

    fn layout_for(key_len: usize, value_word: u32) -> Layout {
        let body = if value_word & LEN_MASK == TYPED {
            VALUE_BYTES
        } else {
            (value_word & LEN_MASK) as usize
        };
        Layout::from_size_align(HEADER_BYTES + key_len + body, ALIGN).expect("node size")
    }

    fn allocate(key_len: usize, value_word: u32) -> Node {
        assert!(key_len <= KEY_BYTES_MAX, "key longer than a node can hold");
        let layout = Node::layout_for(key_len, value_word);
        // SAFETY: the layout is never zero-sized (it includes the header).
        let ptr = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            handle_alloc_error(layout)
        };
        // SAFETY: the allocation starts with two aligned u32 header words.
        unsafe {
            (ptr.as_ptr() as *mut u32).write(key_len as u32);
            (ptr.as_ptr() as *mut u32).add(1).write(value_word);
        }
        Node(ptr)
    }

    /// The start of the node's allocation (for a cache prefetch).
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }

    fn key_word(&self) -> u32 {
        // SAFETY: every node starts with its header.
        unsafe { *(self.0.as_ptr() as *const u32) }
    }

    fn value_word(&self) -> u32 {
        // SAFETY: as above.
        unsafe { *(self.0.as_ptr() as *const u32).add(1) }
    }

    fn key_len(&self) -> usize {
        (self.key_word() & !TTL_FLAG) as usize
    }

    fn is_typed(&self) -> bool {
        self.value_word() & LEN_MASK == TYPED
    }

    fn inline_len(&self) -> usize {
        (self.value_word() & LEN_MASK) as usize
    }

    /// The access stamp (`maxmemory` eviction's LRU clock or LFU counter).
    pub fn stamp(&self) -> u32 {
        self.value_word() >> (32 - STAMP_BITS)
    }

    pub fn set_stamp(&mut self, stamp: u32) {
        let word = (self.value_word() & LEN_MASK) | ((stamp & STAMP_MASK) << (32 - STAMP_BITS));
        // SAFETY: the header is ours to write through `&mut self`.
        unsafe { (self.0.as_ptr() as *mut u32).add(1).write(word) }
    }

    fn layout(&self) -> Layout {
        Node::layout_for(self.key_len(), self.value_word())
    }

    pub fn key(&self) -> &[u8] {
        let offset = if self.is_typed() {
            HEADER_BYTES + VALUE_BYTES
        } else {
            HEADER_BYTES
        };
        // SAFETY: the key bytes sit at `offset` and are `key_len` long.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(offset), self.key_len()) }
    }

    pub fn value(&self) -> ValueRef<'_> {
        if self.is_typed() {
            // SAFETY: a typed node holds an initialised `Value` right after the header.
            ValueRef::Typed(unsafe { &*(self.0.as_ptr().add(HEADER_BYTES) as *const Value) })
        } else {
            let start = HEADER_BYTES + self.key_len();
            let len = self.inline_len();
            // SAFETY: an inline node's value bytes follow its key.
            ValueRef::Inline(unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(start), len) })
        }
    }

    /// The value as a `Value` to change in place; `None` for an inline string.
    pub fn typed_mut(&mut self) -> Option<&mut Value> {
        if !self.is_typed() {
            return None;
        }
        // SAFETY: as in `value`, and `&mut self` makes the borrow unique.
        Some(unsafe { &mut *(self.0.as_ptr().add(HEADER_BYTES) as *mut Value) })
    }

    /// The bytes of a string value, however it is stored; `None` for other types.
    pub fn str_bytes(&self) -> Option<&[u8]> {
        match self.value() {
            ValueRef::Inline(bytes) => Some(bytes),
            ValueRef::Typed(Value::Str(bytes)) => Some(bytes),
            ValueRef::Typed(_) => None,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self.value() {
            ValueRef::Inline(_) => "string",
            ValueRef::Typed(value) => value.type_name(),
        }
    }

    /// A detached copy of the value (a long string shares its bytes).
    pub fn to_value(&self) -> Value {
        match self.value() {
            ValueRef::Inline(bytes) => Value::Str(Bytes::copy_from_slice(bytes)),
            ValueRef::Typed(value) => value.clone(),
        }
    }

    /// The value, moved out (a collection is not copied); the node is freed.
    pub fn into_value(mut self) -> Value {
        match self.typed_mut() {
            Some(slot) => std::mem::replace(slot, Value::Str(Bytes::new())),
            None => self.to_value(),
        }
    }

    pub fn has_ttl(&self) -> bool {
        self.key_word() & TTL_FLAG != 0
    }

    pub fn set_ttl_flag(&mut self, on: bool) {
        let word = if on {
            self.key_word() | TTL_FLAG
        } else {
            self.key_word() & !TTL_FLAG
        };
        // SAFETY: the header is ours to write through `&mut self`.
        unsafe { (self.0.as_ptr() as *mut u32).write(word) }
    }

    /// Replaces the value with the string `value`, in place when an inline string of the same
    /// length was there (a SET that overwrites a counter or a fixed-size record allocates
    /// nothing). The TTL flag is kept; the caller owns the TTL.
    pub fn set_str(&mut self, value: &[u8]) {
        if !self.is_typed() && self.inline_len() == value.len() {
            let start = HEADER_BYTES + self.key_len();
            // SAFETY: the inline value slot is exactly `value.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    value.as_ptr(),
                    self.0.as_ptr().add(start),
                    value.len(),
                )
            }
            return;
        }
        let mut fresh = Node::new_str(self.key(), value);
        fresh.set_ttl_flag(self.has_ttl());
        fresh.set_stamp(self.stamp());
        *self = fresh;
    }

    /// Replaces the value, keeping the key and the TTL flag.
    pub fn set_value(&mut self, value: Value) {
        let inline = matches!(&value, Value::Str(b) if b.len() <= INLINE_VALUE_MAX);
        if !inline {
            if let Some(slot) = self.typed_mut() {
                *slot = value;
                return;
            }
        }
        let mut fresh = Node::new(self.key(), value);
        fresh.set_ttl_flag(self.has_ttl());
        fresh.set_stamp(self.stamp());
        *self = fresh;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let layout = self.layout();
        if let Some(value) = self.typed_mut() {
            // SAFETY: the value is initialised and dropped exactly once, here.
            unsafe { std::ptr::drop_in_place(value as *mut Value) };
        }
        // SAFETY: allocated in `allocate` with this same layout.
        unsafe { dealloc(self.0.as_ptr(), layout) };
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("value", &self.to_value())
            .field("ttl", &self.has_ttl())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_are_inline_and_long_ones_typed() {
        let node = Node::new_str(b"key:000000000042", &[7u8; 64]);
        assert_eq!(node.key(), b"key:000000000042");
        assert!(matches!(node.value(), ValueRef::Inline(v) if v == [7u8; 64]));
        assert_eq!(node.layout().size(), 8 + 16 + 64);

        let long = vec![1u8; INLINE_VALUE_MAX + 1];
        let node = Node::new_str(b"k", &long);
        assert!(matches!(node.value(), ValueRef::Typed(Value::Str(b)) if b[..] == long[..]));
        assert_eq!(node.key(), b"k");
        assert_eq!(node.str_bytes(), Some(&long[..]));
    }

    #[test]
    fn set_str_overwrites_in_place_or_rebuilds_keeping_the_ttl_flag() {
        let mut node = Node::new_str(b"k", b"abc");
        let before = node.0;
        node.set_str(b"xyz");
        assert_eq!(node.0, before, "same length overwrites in place");
        assert_eq!(node.str_bytes(), Some(&b"xyz"[..]));
        node.set_ttl_flag(true);
        node.set_str(b"a much longer value");
        assert_eq!(node.str_bytes(), Some(&b"a much longer value"[..]));
        assert!(node.has_ttl());
        node.set_str(&vec![9u8; 5000]);
        assert_eq!(node.str_bytes().map(<[u8]>::len), Some(5000));
        assert_eq!(node.key(), b"k");
        assert!(node.has_ttl());
        node.set_str(b"short again");
        assert!(matches!(node.value(), ValueRef::Inline(_)));
        node.set_ttl_flag(false);
        assert!(!node.has_ttl());
        assert_eq!(node.key(), b"k");
    }

    #[test]
    fn set_value_and_to_value_round_trip() {
        let mut node = Node::new(b"some key", Value::Str(Bytes::from_static(b"v")));
        assert_eq!(node.to_value(), Value::Str(Bytes::from_static(b"v")));
        let big = Bytes::from(vec![3u8; 4096]);
        node.set_value(Value::Str(big.clone()));
        assert_eq!(node.to_value(), Value::Str(big.clone()));
        node.set_value(Value::Str(big.slice(..2000)));
        assert_eq!(node.str_bytes(), Some(&big[..2000]));
        node.set_value(Value::Str(Bytes::from_static(b"tiny")));
        assert!(matches!(node.value(), ValueRef::Inline(b"tiny")));
        assert_eq!(node.key(), b"some key");
        assert_eq!(node.type_name(), "string");
    }

    #[test]
    fn empty_key_and_value() {
        let node = Node::new_str(b"", b"");
        assert_eq!(node.key(), b"");
        assert_eq!(node.str_bytes(), Some(&b""[..]));
    }
}
