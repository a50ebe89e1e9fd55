//! A connection's pub/sub subscriptions, by namespace: what the connection itself knows
//! (the shard-wide registry of who subscribes to what is the pub/sub service's).

use bytes::Bytes;

/// The three subscription namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    pub fn subscribe_reply(self) -> &'static str {
        match self {
            Kind::Channel => "subscribe",
            Kind::Pattern => "psubscribe",
            Kind::Shard => "ssubscribe",
        }
    }

    pub fn unsubscribe_reply(self) -> &'static str {
        match self {
            Kind::Channel => "unsubscribe",
            Kind::Pattern => "punsubscribe",
            Kind::Shard => "sunsubscribe",
        }
    }
}

/// A connection's subscriptions.
#[derive(Default)]
pub struct Subscriptions {
    pub channels: indexmap::IndexSet<Bytes>,
    pub patterns: indexmap::IndexSet<Bytes>,
    pub shard_channels: indexmap::IndexSet<Bytes>,
}

impl Subscriptions {
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty() && self.shard_channels.is_empty()
    }
}

impl Subscriptions {
    /// Every subscription of every kind (any makes a RESP2 connection "subscribed").
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard_channels.len()
    }

    /// The count a (un)subscribe confirmation reports: channels and patterns together, shard
    /// channels on their own (Redis 7).
    pub fn reported(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.shard_channels.len(),
            _ => self.channels.len() + self.patterns.len(),
        }
    }

    pub fn set(&mut self, kind: Kind) -> &mut indexmap::IndexSet<Bytes> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard_channels,
        }
    }
}
