//! The pub/sub service of a shard: who on this shard subscribes to what, delivery of a
//! published message to them (through the core's push outbox), and this shard's part of
//! PUBSUB's answers. The commands themselves (SUBSCRIBE, PUBLISH, PUBSUB …) are `pubsub`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use wetask_protocol::Frame;
use wetask_shards::glob::glob_match;

use super::core::ShardCore;
use super::ConnectionHooks;
use crate::clients::{ConnState, Kind};
use crate::mesh::{PubSubRequest, PubsubQuery, PubsubReport, Response};

/// This shard's subscriptions: channel (or pattern) -> subscribed client ids.
#[derive(Default)]
pub struct Registry {
    channels: HashMap<Bytes, Vec<u64>>,
    patterns: HashMap<Bytes, Vec<u64>>,
    /// Shard channels (SSUBSCRIBE / SPUBLISH): a namespace of their own, as in Redis 7.
    shard_channels: HashMap<Bytes, Vec<u64>>,
}

impl Registry {
    fn map(&mut self, kind: Kind) -> &mut HashMap<Bytes, Vec<u64>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard_channels,
        }
    }

    fn add(&mut self, kind: Kind, name: &Bytes, client: u64) {
        self.map(kind).entry(name.clone()).or_default().push(client);
    }

    fn remove(&mut self, kind: Kind, name: &Bytes, client: u64) {
        let map = self.map(kind);
        if let Some(clients) = map.get_mut(name) {
            clients.retain(|&c| c != client);
            if clients.is_empty() {
                map.remove(name);
            }
        }
    }

    pub fn channel_names(&self) -> Vec<Bytes> {
        self.channels.keys().cloned().collect()
    }

    pub fn pattern_names(&self) -> Vec<Bytes> {
        self.patterns.keys().cloned().collect()
    }

    fn size(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard_channels.len()
    }
}

/// This shard's pub/sub state.
#[derive(Default)]
pub struct PubSub {
    registry: RefCell<Registry>,
}

impl PubSub {
    /// Serves a pub/sub request from a peer.
    pub fn serve(&self, core: &ShardCore, request: PubSubRequest) -> Response {
        match request {
            PubSubRequest::Publish {
                channel,
                message,
                sharded,
            } => Response::Count(self.deliver(core, &channel, &message, sharded)),
            PubSubRequest::PublishMany(messages) => {
                for (channel, message) in &messages {
                    self.deliver(core, channel, message, false);
                }
                Response::Done
            }
            PubSubRequest::Query(query) => Response::Pubsub(self.report(&query)),
            PubSubRequest::Monitor { .. } => unreachable!("monitor lines go to `monitor`"),
        }
    }

    /// `client` subscribes to `name` (of `kind`).
    pub fn add(&self, core: &ShardCore, kind: Kind, name: &Bytes, client: u64) {
        self.registry.borrow_mut().add(kind, name, client);
        self.sync_count(core);
    }

    /// `client` no longer subscribes to `name` (of `kind`).
    pub fn remove(&self, core: &ShardCore, kind: Kind, name: &Bytes, client: u64) {
        self.registry.borrow_mut().remove(kind, name, client);
        self.sync_count(core);
    }

    pub fn channel_names(&self) -> Vec<Bytes> {
        self.registry.borrow().channel_names()
    }

    pub fn pattern_names(&self) -> Vec<Bytes> {
        self.registry.borrow().pattern_names()
    }

    fn sync_count(&self, core: &ShardCore) {
        let size = self.registry.borrow().size();
        core.globals.subscriptions[core.id].store(size, Ordering::Relaxed);
    }

    /// Delivers a message to this shard's subscribers of `channel` (and of matching
    /// patterns); returns how many received it.
    pub fn deliver(
        &self,
        core: &ShardCore,
        channel: &Bytes,
        message: &Bytes,
        sharded: bool,
    ) -> usize {
        let mut targets: Vec<(u64, Frame)> = Vec::new();
        if sharded {
            if let Some(clients) = self.registry.borrow().shard_channels.get(channel) {
                let frame = Frame::Push(vec![
                    Frame::Bulk(Bytes::from_static(b"smessage")),
                    Frame::Bulk(channel.clone()),
                    Frame::Bulk(message.clone()),
                ]);
                targets.extend(clients.iter().map(|&c| (c, frame.clone())));
            }
        } else {
            let registry = self.registry.borrow();
            if let Some(clients) = registry.channels.get(channel) {
                let frame = Frame::Push(vec![
                    Frame::Bulk(Bytes::from_static(b"message")),
                    Frame::Bulk(channel.clone()),
                    Frame::Bulk(message.clone()),
                ]);
                targets.extend(clients.iter().map(|&c| (c, frame.clone())));
            }
            for (pattern, clients) in &registry.patterns {
                if glob_match(pattern, channel) {
                    let frame = Frame::Push(vec![
                        Frame::Bulk(Bytes::from_static(b"pmessage")),
                        Frame::Bulk(pattern.clone()),
                        Frame::Bulk(channel.clone()),
                        Frame::Bulk(message.clone()),
                    ]);
                    targets.extend(clients.iter().map(|&c| (c, frame.clone())));
                }
            }
        }
        let count = targets.len();
        for (client, frame) in targets {
            core.push_to(client, &frame);
        }
        count
    }

    /// Publishes the keyspace events the shard recorded (`notify-keyspace-events`) to this
    /// shard's subscribers and to every peer that has subscriptions, in the order they
    /// happened. The caller holds them back while a script runs here: a run that must start
    /// again takes its events back with its writes (`UndoLog`).
    #[cold]
    pub fn publish_events(&self, core: &ShardCore) {
        let Ok(mut shard) = core.shard.try_borrow_mut() else {
            return;
        };
        let flags = shard.notes.flags();
        let events = shard.notes.take();
        drop(shard);
        let messages: Vec<(Bytes, Bytes)> = events.iter().flat_map(|e| e.messages(flags)).collect();
        self.deliver_everywhere(core, messages);
    }

    /// Delivers `messages` (channel, message), in order, to this shard's subscribers and to
    /// every peer shard that has some.
    pub fn deliver_everywhere(&self, core: &ShardCore, messages: Vec<(Bytes, Bytes)>) {
        if self.registry.borrow().size() > 0 {
            for (channel, message) in &messages {
                self.deliver(core, channel, message, false);
            }
        }
        for peer in (0..core.shard_count).filter(|&s| s != core.id) {
            if core.globals.subscriptions[peer].load(Ordering::Relaxed) > 0 {
                let request = PubSubRequest::PublishMany(messages.clone());
                drop(core.request(peer, crate::mesh::Request::PubSub(request)));
            }
        }
    }

    /// Forgets a closing connection's subscriptions.
    pub fn drop_subscriptions(&self, core: &ShardCore, state: &ConnState) {
        if state.subscriptions.count() == 0 {
            return;
        }
        let mut registry = self.registry.borrow_mut();
        for channel in &state.subscriptions.channels {
            registry.remove(Kind::Channel, channel, state.id);
        }
        for pattern in &state.subscriptions.patterns {
            registry.remove(Kind::Pattern, pattern, state.id);
        }
        for channel in &state.subscriptions.shard_channels {
            registry.remove(Kind::Shard, channel, state.id);
        }
        drop(registry);
        self.sync_count(core);
    }

    /// What one shard knows for PUBSUB: its channels (matching a pattern), subscriber counts of
    /// given channels, and its patterns.
    pub fn report(&self, query: &PubsubQuery) -> PubsubReport {
        let registry = self.registry.borrow();
        // A namespace's names matching an optional pattern, or its counts for given names.
        let names = |map: &HashMap<Bytes, Vec<u64>>, pattern: Option<&Bytes>| {
            let matches = |c: &&Bytes| pattern.is_none_or(|p| glob_match(p, c));
            PubsubReport::Names(map.keys().filter(matches).cloned().collect())
        };
        let counts = |map: &HashMap<Bytes, Vec<u64>>, channels: &[Bytes]| {
            PubsubReport::Counts(
                channels
                    .iter()
                    .map(|c| map.get(c).map_or(0, Vec::len))
                    .collect(),
            )
        };
        match query {
            PubsubQuery::Channels(pattern) => names(&registry.channels, pattern.as_ref()),
            PubsubQuery::NumSub(channels) => counts(&registry.channels, channels),
            PubsubQuery::Patterns => names(&registry.patterns, None),
            PubsubQuery::ShardChannels(pattern) => {
                names(&registry.shard_channels, pattern.as_ref())
            }
            PubsubQuery::ShardNumSub(channels) => counts(&registry.shard_channels, channels),
        }
    }
}

impl ConnectionHooks for PubSub {
    fn connection_closed(&self, core: &ShardCore, state: &ConnState) {
        self.drop_subscriptions(core, state);
    }
}
