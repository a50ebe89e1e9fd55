//! `Key`: a stored key name. Up to `KEY_INLINE_BYTES_MAX` bytes live inside the table entry
//! itself, so looking a short key up compares bytes already in the cache line that holds the
//! entry, with no separate allocation to chase (docs/perf-notes.md: the key's heap bytes were
//! 14% of pipelined GET time). Longer keys fall back to one boxed slice.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Longest key kept inline; the type stays 24 bytes.
pub const KEY_INLINE_BYTES_MAX: usize = 22;

#[derive(Clone)]
pub enum Key {
    Inline {
        len: u8,
        bytes: [u8; KEY_INLINE_BYTES_MAX],
    },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<Key>() == 24);
const _: () = assert!(KEY_INLINE_BYTES_MAX < u8::MAX as usize);

impl Key {
    pub fn new(name: &[u8]) -> Key {
        if name.len() <= KEY_INLINE_BYTES_MAX {
            let mut bytes = [0u8; KEY_INLINE_BYTES_MAX];
            bytes[..name.len()].copy_from_slice(name);
            Key::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(name.into())
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }

    pub fn to_bytes(&self) -> bytes::Bytes {
        bytes::Bytes::copy_from_slice(self.as_slice())
    }
}

// Hash and equality are those of the byte slice, so a table of `Key`s can be searched with
// a plain `&[u8]` (through `Borrow`), as `String` is searched with `&str`.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash + ?Sized>(value: &T) -> u64 {
        let mut hasher = DefaultHasher::new();
        value.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn inline_and_heap_keys_behave_as_their_bytes() {
        for name in [
            &b""[..],
            b"k",
            b"exactly-22-bytes-long!",
            b"a key longer than twenty-two bytes",
        ] {
            let key = Key::new(name);
            assert_eq!(key.as_slice(), name);
            assert_eq!(hash_of(&key), hash_of(name));
            assert_eq!(key.clone(), key);
            assert_eq!(
                matches!(key, Key::Inline { .. }),
                name.len() <= KEY_INLINE_BYTES_MAX
            );
        }
        assert_ne!(Key::new(b"a"), Key::new(b"b"));
    }
}
