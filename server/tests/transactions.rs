//! MULTI/EXEC/DISCARD/WATCH over the wire, with keys on both shards: queueing and its
//! errors, WATCH aborts, and two writers hammering one transaction while a reader checks it
//! never sees one half applied.

mod common;

use std::time::Duration;

use common::*;
use wetask_protocol::Frame;

fn queued() -> Frame {
    Frame::Simple("QUEUED".into())
}

#[test]
fn queue_and_exec_across_shards() {
    each_server(|server| {
        let mut c = server.client();
        let (a, b) = (key_on("tx:a", 0), key_on("tx:b", 1));
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd(&format!("SET {a} 1")), queued());
        assert_eq!(c.cmd(&format!("INCRBY {b} 5")), queued());
        assert_eq!(c.cmd(&format!("RPUSH {a}:list x y")), queued());
        assert_eq!(
            c.cmd(&format!("LMOVE {a}:list {b}:list LEFT LEFT")),
            queued()
        );
        assert_eq!(c.cmd(&format!("MGET {a} {b}")), queued());
        assert_eq!(c.cmd("PING"), queued());
        assert_eq!(c.cmd(&format!("LPOP {a}")), queued());
        assert_eq!(
            c.cmd("EXEC"),
            array(vec![
                ok(),
                int(5),
                int(2),
                bulk("x"),
                array(vec![bulk("1"), bulk("5")]),
                Frame::Simple("PONG".into()),
                err("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ])
        );
        assert_eq!(
            c.cmd(&format!("LRANGE {b}:list 0 -1")),
            array(vec![bulk("x")])
        );
        // DISCARD drops the queue.
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd(&format!("SET {a} gone")), queued());
        assert_eq!(c.cmd("DISCARD"), ok());
        assert_eq!(c.cmd(&format!("GET {a}")), bulk("1"));
        // SELECT inside a transaction moves the rest of it to another database.
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd("SELECT 3"), queued());
        assert_eq!(c.cmd(&format!("SET {b} in3")), queued());
        assert_eq!(c.cmd("EXEC"), array(vec![ok(), ok()]));
        assert_eq!(c.cmd(&format!("GET {b}")), bulk("in3"));
        assert_eq!(c.cmd("SELECT 0"), ok());
        assert_eq!(c.cmd(&format!("GET {b}")), bulk("5"));
        // FLUSHDB inside a transaction reaches every shard.
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd("FLUSHDB"), queued());
        assert_eq!(c.cmd("DBSIZE"), queued());
        assert_eq!(c.cmd("EXEC"), array(vec![ok(), int(0)]));
    });
}

#[test]
fn transaction_errors() {
    each_server(|server| {
        let mut c = server.client();
        assert_eq!(c.cmd("EXEC"), err("ERR EXEC without MULTI"));
        assert_eq!(c.cmd("DISCARD"), err("ERR DISCARD without MULTI"));
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd("MULTI"), err("ERR MULTI calls can not be nested"));
        assert_eq!(
            c.cmd("WATCH k"),
            err("ERR WATCH inside MULTI is not allowed")
        );
        assert_eq!(c.cmd("SET k v"), queued());
        assert_eq!(
            c.cmd("NOSUCHCMD x"),
            err("ERR unknown command 'NOSUCHCMD', with args beginning with: 'x' ")
        );
        assert_eq!(
            c.cmd("EXEC"),
            err("EXECABORT Transaction discarded because of previous errors.")
        );
        assert_eq!(c.cmd("EXISTS k"), int(0), "nothing ran");
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(
            c.cmd("GET"),
            err("ERR wrong number of arguments for 'get' command")
        );
        assert_eq!(
            c.cmd("EXEC"),
            err("EXECABORT Transaction discarded because of previous errors.")
        );
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(
            c.cmd("SUBSCRIBE ch"),
            err("ERR Command not allowed inside a transaction")
        );
        assert_eq!(c.cmd("DISCARD"), ok());
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(
            c.cmd("TASK.FETCH q"),
            err("ERR Command not allowed inside a transaction")
        );
        assert_eq!(c.cmd("RESET"), Frame::Simple("RESET".into()));
        assert_eq!(
            c.cmd("EXEC"),
            err("ERR EXEC without MULTI"),
            "RESET ends MULTI"
        );
    });
}

#[test]
fn watch_aborts_when_a_watched_key_changes() {
    each_server(|server| {
        let mut c = server.client();
        let mut other = server.client();
        for shard in [0, 1] {
            let key = key_on("watched:", shard);
            c.cmd(&format!("SET {key} 1"));
            // Unchanged: EXEC runs.
            assert_eq!(c.cmd(&format!("WATCH {key}")), ok());
            assert_eq!(c.cmd("MULTI"), ok());
            assert_eq!(c.cmd(&format!("INCR {key}")), queued());
            assert_eq!(c.cmd("EXEC"), array(vec![int(2)]));
            // Changed by another client after WATCH: EXEC replies nil and runs nothing.
            assert_eq!(c.cmd(&format!("WATCH {key} unrelated")), ok());
            assert_eq!(other.cmd(&format!("SET {key} 100")), ok());
            assert_eq!(c.cmd("MULTI"), ok());
            assert_eq!(c.cmd(&format!("INCR {key}")), queued());
            assert_eq!(c.cmd("EXEC"), Frame::NullArray);
            assert_eq!(c.cmd(&format!("GET {key}")), bulk("100"));
            // EXEC forgets the watch: the next transaction runs.
            other.cmd(&format!("SET {key} 7"));
            assert_eq!(c.cmd("MULTI"), ok());
            assert_eq!(c.cmd(&format!("INCR {key}")), queued());
            assert_eq!(c.cmd("EXEC"), array(vec![int(8)]));
            // UNWATCH forgets it too.
            assert_eq!(c.cmd(&format!("WATCH {key}")), ok());
            assert_eq!(c.cmd("UNWATCH"), ok());
            other.cmd(&format!("DEL {key}"));
            assert_eq!(c.cmd("MULTI"), ok());
            assert_eq!(c.cmd(&format!("INCR {key}")), queued());
            assert_eq!(c.cmd("EXEC"), array(vec![int(1)]));
            // A deleted or flushed key counts as changed.
            assert_eq!(c.cmd(&format!("WATCH {key}")), ok());
            other.cmd("FLUSHALL");
            assert_eq!(c.cmd("MULTI"), ok());
            assert_eq!(c.cmd(&format!("SET {key} x")), queued());
            assert_eq!(c.cmd("EXEC"), Frame::NullArray);
        }
    });
}

#[test]
fn a_cross_shard_read_of_a_watched_key_does_not_abort_exec() {
    each_server(|server| {
        let (watched, other) = (key_on("ws:", 1), key_on("os:", 0));
        let mut c = server.client();
        let mut reader = server.client();
        c.cmd(&format!("SADD {watched} a b"));
        c.cmd(&format!("SADD {other} b c"));
        assert_eq!(c.cmd(&format!("WATCH {watched}")), ok());
        // Reads that borrow the key for a moment leave it unchanged.
        assert_eq!(
            sorted_strings(reader.cmd(&format!("SINTER {watched} {other}"))),
            ["b"]
        );
        assert_eq!(
            reader.cmd(&format!("SINTERCARD 2 {other} {watched}")),
            int(1)
        );
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd(&format!("SCARD {watched}")), queued());
        assert_eq!(c.cmd("EXEC"), array(vec![int(2)]));
        // A cross-shard write does change it.
        assert_eq!(c.cmd(&format!("WATCH {watched}")), ok());
        assert_eq!(reader.cmd(&format!("SMOVE {other} {watched} c")), int(1));
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd(&format!("SCARD {watched}")), queued());
        assert_eq!(c.cmd("EXEC"), Frame::NullArray);
    });
}

#[test]
fn concurrent_transactions_are_exact_and_never_seen_half_applied() {
    each_server(|server| {
        let (a, b) = (key_on("count:a", 0), key_on("count:b", 1));
        const ROUNDS: i64 = 300;
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (a, b, port) = (a.clone(), b.clone(), server.port);
                std::thread::spawn(move || {
                    let mut c = Client::connect(port);
                    for _ in 0..ROUNDS {
                        assert_eq!(c.cmd("MULTI"), ok());
                        c.cmd(&format!("INCR {a}"));
                        c.cmd(&format!("INCR {b}"));
                        let Frame::Array(replies) = c.cmd("EXEC") else {
                            panic!("EXEC failed")
                        };
                        assert_eq!(replies.len(), 2);
                    }
                })
            })
            .collect();
        let mut reader = server.client();
        let mut checks = 0;
        while writers.iter().any(|w| !w.is_finished()) || checks == 0 {
            reader.cmd("MULTI");
            reader.cmd(&format!("GET {a}"));
            reader.cmd(&format!("GET {b}"));
            let Frame::Array(values) = reader.cmd("EXEC") else {
                panic!("EXEC failed")
            };
            assert_eq!(values[0], values[1], "a transaction was seen half applied");
            // A plain MGET over both shards is atomic too.
            let Frame::Array(values) = reader.cmd(&format!("MGET {a} {b}")) else {
                panic!("MGET failed")
            };
            assert_eq!(values[0], values[1], "MGET saw a transaction half applied");
            checks += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        for w in writers {
            w.join().unwrap();
        }
        let total = bulk(&(2 * ROUNDS).to_string());
        assert_eq!(
            reader.cmd(&format!("MGET {a} {b}")),
            array(vec![total.clone(), total])
        );
        println!("{checks} consistent reads");
    });
}
