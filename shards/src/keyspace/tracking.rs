//! Client-side caching's server half (CLIENT TRACKING), on the shard that owns the keys: who
//! reads what, and the invalidations a write owes them. Every shard knows every tracking
//! client (the server tells them all at CLIENT TRACKING ON and OFF), so a read on any path
//! (inline, a peer's message, a transaction, a script, a cross-shard step) is remembered
//! where it runs, in the same synchronous step as the read: no write can slip between the
//! two. A write takes the key's readers out of the table and leaves an invalidation for each
//! in `pending`, which the server drains after the command and delivers to the readers' home
//! shards. As in Redis, keys are tracked by name whatever the database, a reader is told
//! once per read (the entry goes with the invalidation), and a departed client's entries are
//! dropped lazily: its home shard finds it gone and delivers nothing.

use std::collections::HashMap;

use bytes::Bytes;

/// How a client tracks (CLIENT TRACKING's modes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every key it reads.
    Default,
    /// Only keys read by the command after CLIENT CACHING yes.
    OptIn,
    /// Every key it reads except those of the command after CLIENT CACHING no.
    OptOut,
    /// No reads: every write to a key under one of these prefixes ("" is every key).
    Broadcast(Vec<Bytes>),
}

/// A tracking client as the shards know it.
#[derive(Clone, Debug)]
pub struct Reader {
    /// The shard its connection lives on (where invalidations go).
    pub home: usize,
    pub mode: Mode,
    /// Commands of its CLIENT CACHING exception still to come here (one per command of a
    /// MULTI that came after it).
    armed: u32,
}

impl Reader {
    pub fn new(home: usize, mode: Mode) -> Self {
        Reader {
            home,
            mode,
            armed: 0,
        }
    }
}

/// A key a tracking client must forget: sent to `home`, where the client's connection
/// decides (NOLOOP against `writer`, REDIRECT, its protocol) what it receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalidation {
    pub home: usize,
    pub client: u64,
    /// Who wrote (0: nobody; an expiry or an eviction).
    pub writer: u64,
    pub key: Bytes,
}

/// A key read here that belongs to another shard (lent to a cross-shard step): its owner
/// must remember the reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remember {
    pub owner: usize,
    pub client: u64,
    pub home: usize,
    pub key: Bytes,
}

/// `tracking-table-max-keys`' default (Redis's); the server divides it among its shards.
pub const TABLE_KEYS_MAX_DEFAULT: usize = 1_000_000;

pub struct Tracking {
    readers: HashMap<u64, Reader>,
    /// The readers in broadcast mode, by id (a write looks at their prefixes).
    broadcasters: Vec<u64>,
    /// Key name -> the (client, home) pairs that read it since its last change.
    keys: HashMap<Bytes, Vec<(u64, usize)>>,
    /// Entries over all keys (INFO's tracking_total_items).
    items: usize,
    keys_max: usize,
    pending: Vec<Invalidation>,
    remote: Vec<Remember>,
    /// A FLUSHALL or FLUSHDB ran: every tracking client here is told to forget everything.
    flushed: bool,
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking {
            readers: HashMap::new(),
            broadcasters: Vec::new(),
            keys: HashMap::new(),
            items: 0,
            keys_max: TABLE_KEYS_MAX_DEFAULT,
            pending: Vec::new(),
            remote: Vec::new(),
            flushed: false,
        }
    }
}

impl Tracking {
    /// Whether any client tracks, or any key is still tracked: the write path's one test.
    #[inline]
    pub fn active(&self) -> bool {
        !self.readers.is_empty() || !self.keys.is_empty()
    }

    /// Whether some client tracks (reads may have to be remembered).
    #[inline]
    pub fn has_readers(&self) -> bool {
        !self.readers.is_empty()
    }

    /// CLIENT TRACKING ON: `client` tracks from now on (a new mode replaces the old).
    pub fn register(&mut self, client: u64, reader: Reader) {
        let broadcast = matches!(reader.mode, Mode::Broadcast(_));
        self.broadcasters.retain(|&c| c != client);
        if broadcast {
            self.broadcasters.push(client);
        }
        self.readers.insert(client, reader);
    }

    /// CLIENT TRACKING OFF, or the connection closed. Its entries in the key table stay
    /// until their keys change (dropped lazily, as in Redis: a client may have read
    /// millions of keys).
    pub fn unregister(&mut self, client: u64) {
        if self.readers.remove(&client).is_some() {
            self.broadcasters.retain(|&c| c != client);
        }
    }

    /// CLIENT CACHING yes|no: `client`'s next command on this shard is the exception its
    /// mode allows.
    pub fn arm(&mut self, client: u64) {
        if let Some(reader) = self.readers.get_mut(&client) {
            reader.armed = reader.armed.saturating_add(1);
        }
    }

    /// Sets `tracking-table-max-keys` for this shard (0: no limit).
    pub fn set_keys_max(&mut self, max: usize) {
        self.keys_max = if max == 0 { usize::MAX } else { max };
    }

    /// A keyed command of `client` ran here; `reads` says it was read-only. Returns the
    /// client's home when its keys are to be remembered (consumes one CLIENT CACHING
    /// exception).
    pub(crate) fn should_remember(&mut self, client: u64, reads: bool) -> Option<usize> {
        let reader = self.readers.get_mut(&client)?;
        let armed = reader.armed > 0;
        reader.armed = reader.armed.saturating_sub(1);
        if !reads {
            return None;
        }
        let track = match reader.mode {
            Mode::Default => true,
            Mode::OptIn => armed,
            Mode::OptOut => !armed,
            Mode::Broadcast(_) => false,
        };
        track.then_some(reader.home)
    }

    /// Remembers that `client` (living on `home`) read `key`.
    pub fn remember(&mut self, client: u64, home: usize, key: &[u8]) {
        if let Some(readers) = self.keys.get_mut(key) {
            if !readers.iter().any(|&(c, _)| c == client) {
                readers.push((client, home));
                self.items += 1;
            }
            return;
        }
        self.keys
            .insert(Bytes::copy_from_slice(key), vec![(client, home)]);
        self.items += 1;
        if self.keys.len() > self.keys_max {
            self.evict_over_max(key);
        }
    }

    /// The table is over its size: forgets other keys, telling their readers (they would
    /// otherwise keep a cached value nobody invalidates), as Redis does.
    fn evict_over_max(&mut self, keep: &[u8]) {
        let excess = self.keys.len().saturating_sub(self.keys_max);
        let victims: Vec<Bytes> = self
            .keys
            .keys()
            .filter(|k| k.as_ref() != keep)
            .take(excess)
            .cloned()
            .collect();
        for key in victims {
            self.invalidate_readers(&key, 0);
        }
    }

    /// A key read here belongs to `owner` (it was lent for a cross-shard step).
    pub(crate) fn remember_remote(&mut self, owner: usize, client: u64, home: usize, key: &Bytes) {
        self.remote.push(Remember {
            owner,
            client,
            home,
            key: key.clone(),
        });
    }

    /// `key` changed (by `writer`; 0 for none): its readers and the matching broadcasters
    /// are owed an invalidation.
    pub fn key_changed(&mut self, key: &[u8], writer: u64) {
        self.invalidate_readers(key, writer);
        for &client in &self.broadcasters {
            let Some(reader) = self.readers.get(&client) else {
                continue;
            };
            let Mode::Broadcast(prefixes) = &reader.mode else {
                continue;
            };
            if prefixes.iter().any(|p| key.starts_with(p)) {
                self.pending.push(Invalidation {
                    home: reader.home,
                    client,
                    writer,
                    key: Bytes::copy_from_slice(key),
                });
            }
        }
    }

    fn invalidate_readers(&mut self, key: &[u8], writer: u64) {
        let Some((key, readers)) = self.keys.remove_entry(key) else {
            return;
        };
        self.items -= readers.len();
        for (client, home) in readers {
            self.pending.push(Invalidation {
                home,
                client,
                writer,
                key: key.clone(),
            });
        }
    }

    /// FLUSHALL or FLUSHDB: every key is forgotten and every tracking client told once.
    pub fn flushed(&mut self) {
        self.keys.clear();
        self.items = 0;
        self.flushed = true;
    }

    /// Whether there is anything for the server to deliver.
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.pending.is_empty() || self.flushed || !self.remote.is_empty()
    }

    /// What the server delivers: the invalidations, whether a flush ran, and the reads of
    /// other shards' keys to remember there.
    pub fn take_output(&mut self) -> (Vec<Invalidation>, bool, Vec<Remember>) {
        (
            std::mem::take(&mut self.pending),
            std::mem::take(&mut self.flushed),
            std::mem::take(&mut self.remote),
        )
    }

    /// INFO's tracking_total_keys, tracking_total_items and tracking_total_prefixes.
    pub fn totals(&self) -> (usize, usize, usize) {
        let prefixes = self
            .broadcasters
            .iter()
            .filter_map(|c| match &self.readers.get(c)?.mode {
                Mode::Broadcast(p) => Some(p.len()),
                _ => None,
            })
            .sum();
        (self.keys.len(), self.items, prefixes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    #[test]
    fn a_read_key_is_invalidated_once_on_write() {
        let mut t = Tracking::default();
        t.register(7, Reader::new(1, Mode::Default));
        assert_eq!(t.should_remember(7, true), Some(1));
        t.remember(7, 1, b"k");
        t.remember(7, 1, b"k");
        assert_eq!(t.totals(), (1, 1, 0));
        t.key_changed(b"k", 9);
        t.key_changed(b"k", 9);
        let (pending, flushed, _) = t.take_output();
        assert!(!flushed);
        assert_eq!(
            pending,
            vec![Invalidation {
                home: 1,
                client: 7,
                writer: 9,
                key: key("k")
            }]
        );
        assert_eq!(t.totals(), (0, 0, 0));
    }

    #[test]
    fn optin_tracks_only_the_armed_command_and_optout_skips_it() {
        let mut t = Tracking::default();
        t.register(1, Reader::new(0, Mode::OptIn));
        t.register(2, Reader::new(0, Mode::OptOut));
        assert_eq!(t.should_remember(1, true), None);
        t.arm(1);
        assert_eq!(t.should_remember(1, true), Some(0));
        assert_eq!(t.should_remember(1, true), None);
        assert_eq!(t.should_remember(2, true), Some(0));
        t.arm(2);
        assert_eq!(t.should_remember(2, true), None);
        assert_eq!(t.should_remember(2, true), Some(0));
        // A write consumes the exception too, and is never remembered.
        t.arm(1);
        assert_eq!(t.should_remember(1, false), None);
        assert_eq!(t.should_remember(1, true), None);
        assert_eq!(t.should_remember(3, true), None, "not tracking");
    }

    #[test]
    fn broadcast_prefixes_see_every_matching_write() {
        let mut t = Tracking::default();
        t.register(
            5,
            Reader::new(2, Mode::Broadcast(vec![key("user:"), key("cfg")])),
        );
        assert_eq!(t.should_remember(5, true), None);
        t.key_changed(b"user:1", 0);
        t.key_changed(b"order:1", 0);
        t.key_changed(b"cfg", 0);
        let keys: Vec<Bytes> = t.take_output().0.into_iter().map(|i| i.key).collect();
        assert_eq!(keys, vec![key("user:1"), key("cfg")]);
        assert_eq!(t.totals().2, 2);
        t.unregister(5);
        t.key_changed(b"user:2", 0);
        assert!(!t.has_output());
        assert!(!t.active());
    }

    #[test]
    fn a_flush_forgets_every_key() {
        let mut t = Tracking::default();
        t.register(1, Reader::new(0, Mode::Default));
        t.remember(1, 0, b"a");
        t.flushed();
        let (pending, flushed, _) = t.take_output();
        assert!(pending.is_empty() && flushed);
        t.key_changed(b"a", 0);
        assert!(!t.has_output());
    }

    #[test]
    fn the_table_stays_under_its_size_by_invalidating() {
        let mut t = Tracking::default();
        t.set_keys_max(2);
        t.register(1, Reader::new(0, Mode::Default));
        for k in ["a", "b", "c", "d"] {
            t.remember(1, 0, k.as_bytes());
        }
        assert_eq!(t.totals().0, 2);
        assert_eq!(t.take_output().0.len(), 2);
    }

    #[test]
    fn departed_clients_entries_go_with_the_next_write() {
        let mut t = Tracking::default();
        t.register(1, Reader::new(0, Mode::Default));
        t.remember(1, 0, b"a");
        t.unregister(1);
        assert!(t.active(), "the entry stays until its key changes");
        t.key_changed(b"a", 0);
        assert_eq!(t.take_output().0.len(), 1);
        assert!(!t.active());
    }
}
