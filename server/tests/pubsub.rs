//! Pub/sub over the wire: RESP2 and RESP3 subscribers, patterns, PUBSUB introspection,
//! publishing across shards, and a slow subscriber cut off at its output limit while
//! everyone else goes on.

mod common;

use std::time::{Duration, Instant};

use common::*;
use wetask_protocol::Frame;

fn strs(items: &[&str]) -> Vec<Frame> {
    items.iter().map(|s| bulk(s)).collect()
}

fn event(kind: &str, name: &str, count: i64) -> Frame {
    array(vec![bulk(kind), bulk(name), int(count)])
}

#[test]
fn resp2_subscribers_get_messages_from_any_shard() {
    each_server(|server| {
        // Several subscribers, so that with two shards both hold some.
        let mut subs: Vec<Client> = (0..8).map(|_| server.client()).collect();
        for sub in subs.iter_mut() {
            sub.send(&[b"SUBSCRIBE", b"news", b"alerts"]);
            assert_eq!(sub.read().unwrap(), event("subscribe", "news", 1));
            assert_eq!(sub.read().unwrap(), event("subscribe", "alerts", 2));
        }
        let mut publisher = server.client();
        assert_eq!(publisher.cmd("PUBLISH news hello"), int(8));
        for sub in subs.iter_mut() {
            assert_eq!(
                sub.read().unwrap(),
                array(strs(&["message", "news", "hello"]))
            );
        }
        assert_eq!(publisher.cmd("PUBLISH nobody-listens x"), int(0));
        assert_eq!(
            publisher.cmd("PUBSUB NUMSUB news alerts other"),
            array(vec![
                bulk("news"),
                int(8),
                bulk("alerts"),
                int(8),
                bulk("other"),
                int(0)
            ])
        );
        assert_eq!(
            sorted_strings(publisher.cmd("PUBSUB CHANNELS")),
            ["alerts", "news"]
        );
        assert_eq!(
            sorted_strings(publisher.cmd("PUBSUB CHANNELS n*")),
            ["news"]
        );
        // Subscribed mode (RESP2) allows only the subscription commands.
        let sub = &mut subs[0];
        assert!(
            matches!(sub.cmd("GET k"), Frame::Error(e) if e.starts_with(b"ERR Can't execute 'get'"))
        );
        assert_eq!(sub.cmd("PING"), array(strs(&["pong", ""])));
        sub.send(&[b"PSUBSCRIBE", b"ale*"]);
        assert_eq!(sub.read().unwrap(), event("psubscribe", "ale*", 3));
        assert_eq!(publisher.cmd("PUBSUB NUMPAT"), int(1));
        assert_eq!(publisher.cmd("PUBLISH alerts fire"), int(9));
        let mut got = [sub.read().unwrap(), sub.read().unwrap()];
        got.sort_by_key(|f| format!("{f:?}"));
        assert!(got.contains(&array(strs(&["message", "alerts", "fire"]))));
        assert!(got.contains(&array(strs(&["pmessage", "ale*", "alerts", "fire"]))));
        sub.send(&[b"UNSUBSCRIBE"]);
        let mut left = [sub.read().unwrap(), sub.read().unwrap()];
        left.sort_by_key(|f| format!("{f:?}"));
        assert_eq!(left.len(), 2);
        sub.send(&[b"PUNSUBSCRIBE"]);
        assert_eq!(sub.read().unwrap(), event("punsubscribe", "ale*", 0));
        assert_eq!(
            sub.cmd("GET k"),
            Frame::Null,
            "back to normal once unsubscribed"
        );
        assert_eq!(publisher.cmd("PUBLISH news again"), int(7));
        // A closed subscriber is forgotten.
        drop(subs);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(publisher.cmd("PUBLISH news again"), int(0));
        assert_eq!(
            publisher.cmd("PUBSUB NUMSUB news"),
            array(vec![bulk("news"), int(0)])
        );
    });
}

#[test]
fn resp3_subscribers_get_push_frames_and_keep_every_command() {
    each_server(|server| {
        let mut c = server.client();
        c.protocol = wetask_protocol::Protocol::Resp3;
        assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
        c.send(&[b"SUBSCRIBE", b"ch"]);
        assert_eq!(
            c.read().unwrap(),
            Frame::Push(vec![bulk("subscribe"), bulk("ch"), int(1)])
        );
        assert_eq!(c.cmd("SET k v"), ok());
        assert_eq!(c.cmd("GET k"), bulk("v"));
        // Publishing to itself: the reply, and the message as a push.
        c.send(&[b"PUBLISH", b"ch", b"self"]);
        let mut frames = [c.read().unwrap(), c.read().unwrap()];
        frames.sort_by_key(|f| format!("{f:?}"));
        assert!(frames.contains(&int(1)));
        assert!(frames.contains(&Frame::Push(vec![
            bulk("message"),
            bulk("ch"),
            bulk("self")
        ])));
        let mut other = server.client();
        assert_eq!(other.cmd("PUBLISH ch fromother"), int(1));
        assert_eq!(
            c.read().unwrap(),
            Frame::Push(vec![bulk("message"), bulk("ch"), bulk("fromother")])
        );
    });
}

#[test]
fn a_slow_subscriber_is_cut_off_and_nothing_else_stalls() {
    each_server(|server| {
        let mut slow = server.client();
        slow.send(&[b"SUBSCRIBE", b"firehose"]);
        assert_eq!(slow.read().unwrap(), event("subscribe", "firehose", 1));
        let mut publisher = server.client();
        let mut bystander = server.client();
        let payload = vec![b'x'; 256 * 1024];
        let started = Instant::now();
        let mut cut_off = false;
        // 256 KiB a message, never read: past the 32 MiB limit within ~130 messages plus
        // what the socket buffers hold.
        for i in 0..2000 {
            let reply = publisher.cmd_args(&[b"PUBLISH", b"firehose", &payload]);
            if reply == int(0) {
                cut_off = true;
                println!("subscriber cut off after {i} messages");
                break;
            }
            if i % 50 == 0 {
                assert_eq!(bystander.cmd("PING"), Frame::Simple("PONG".into()));
            }
        }
        assert!(cut_off, "the slow subscriber was never disconnected");
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(bystander.cmd("PING"), Frame::Simple("PONG".into()));
        assert_eq!(
            publisher.cmd("PUBSUB NUMSUB firehose"),
            array(vec![bulk("firehose"), int(0)])
        );
    });
}

#[test]
fn shard_channels_are_a_namespace_of_their_own() {
    each_server(|server| {
        let mut subs: Vec<Client> = (0..4).map(|_| server.client()).collect();
        for sub in subs.iter_mut() {
            sub.send(&[b"SSUBSCRIBE", b"orders", b"audit"]);
            assert_eq!(sub.read().unwrap(), event("ssubscribe", "orders", 1));
            assert_eq!(sub.read().unwrap(), event("ssubscribe", "audit", 2));
            // A plain channel of the same name counts apart from the shard channels.
            sub.send(&[b"SUBSCRIBE", b"orders"]);
            assert_eq!(sub.read().unwrap(), event("subscribe", "orders", 1));
        }
        let mut publisher = server.client();
        assert_eq!(publisher.cmd("SPUBLISH orders o1"), int(4));
        for sub in subs.iter_mut() {
            assert_eq!(
                sub.read().unwrap(),
                array(strs(&["smessage", "orders", "o1"]))
            );
        }
        assert_eq!(publisher.cmd("PUBLISH orders p1"), int(4));
        for sub in subs.iter_mut() {
            assert_eq!(
                sub.read().unwrap(),
                array(strs(&["message", "orders", "p1"]))
            );
        }
        assert_eq!(
            sorted_strings(publisher.cmd("PUBSUB SHARDCHANNELS")),
            ["audit", "orders"]
        );
        assert_eq!(
            publisher.cmd("PUBSUB SHARDNUMSUB orders nope"),
            array(vec![bulk("orders"), int(4), bulk("nope"), int(0)])
        );
        let sub = &mut subs[0];
        sub.send(&[b"SUNSUBSCRIBE", b"orders"]);
        assert_eq!(sub.read().unwrap(), event("sunsubscribe", "orders", 1));
        assert_eq!(publisher.cmd("SPUBLISH orders o2"), int(3));
    });
}
