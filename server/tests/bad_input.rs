//! Hostile bytes on raw sockets. Each case gets Redis's error reply and Redis's choice of
//! closing or continuing; a bystander connection keeps working and the keyspace is intact.

mod common;

use std::io::Write;

use common::*;
use wetask_protocol::Frame;

fn protocol_error(text: &str) -> Frame {
    err(&format!("ERR Protocol error: {text}"))
}

/// Sends `bytes`, expects `reply`, then checks whether the connection stayed open.
fn case(server: &Server, bytes: &[u8], reply: Frame, stays_open: bool) {
    let mut c = server.client();
    c.raw(bytes);
    assert_eq!(
        c.read(),
        Some(reply),
        "reply to {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
    );
    if stays_open {
        assert_eq!(c.cmd("PING"), Frame::simple("PONG"));
    } else {
        assert!(c.closed(), "connection should close after a protocol error");
    }
}

#[test]
fn bad_input_gets_errors_and_harms_nobody() {
    for shards in ["1", "2"] {
        let server = Server::start(&["--shards", shards]);
        let mut bystander = server.client();
        for i in 0..20 {
            assert_eq!(bystander.cmd(&format!("SET safe:{i} {i}")), ok());
        }
        case(
            &server,
            b"*1\r\n$-5\r\n",
            protocol_error("invalid bulk length"),
            false,
        );
        case(
            &server,
            b"*1\r\n$99999999999999\r\n",
            protocol_error("invalid bulk length"),
            false,
        );
        case(
            &server,
            b"*1\r\n$9999999999999999999999\r\n",
            protocol_error("invalid bulk length"),
            false,
        );
        case(
            &server,
            b"*99999999999\r\n",
            protocol_error("invalid multibulk length"),
            false,
        );
        case(
            &server,
            b"*abc\r\n",
            protocol_error("invalid multibulk length"),
            false,
        );
        case(
            &server,
            b"*2\r\n$3\r\nGETT\r\n",
            protocol_error("bulk string not terminated"),
            false,
        );
        // Negative and zero counts are empty requests in Redis: skipped, not errors.
        case(
            &server,
            b"*-5\r\n*0\r\nPING\r\n",
            Frame::simple("PONG"),
            true,
        );
        // Garbage without a type byte is an inline command: unknown, and the connection lives.
        case(
            &server,
            b"\x01\x02garbage bytes\r\n",
            err("ERR unknown command '\u{1}\u{2}garbage', with args beginning with: 'bytes' "),
            true,
        );
        case(
            &server,
            b"GET \"unbalanced\r\n",
            protocol_error("unbalanced quotes in request"),
            false,
        );
        let deep = b"*1\r\n".repeat(10_000);
        case(
            &server,
            &deep,
            protocol_error("expected '$', got '*'"),
            false,
        );
        let mut unterminated = vec![b'a'; 1024 * 1024];
        unterminated.extend_from_slice(b" more");
        case(
            &server,
            &unterminated,
            protocol_error("too big inline request"),
            false,
        );
        let mut header = b"*1\r\n$".to_vec();
        header.extend(std::iter::repeat_n(b'1', 70_000));
        case(
            &server,
            &header,
            protocol_error("too big count string"),
            false,
        );

        // Half a frame, then a hang-up.
        let mut half = server.client();
        half.raw(b"*3\r\n$3\r\nSET\r\n$6\r\nsafe:0\r\n$10\r\nover");
        half.stream.flush().unwrap();
        drop(half);

        // Many frames split at every byte still work.
        let mut slow = server.client();
        for byte in b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$2\r\nok\r\n" {
            slow.raw(&[*byte]);
        }
        assert_eq!(slow.read(), Some(ok()));

        for i in 0..20 {
            assert_eq!(
                bystander.cmd(&format!("GET safe:{i}")),
                bulk(&i.to_string())
            );
        }
        assert_eq!(bystander.cmd("DBSIZE"), int(21));
    }
}

#[test]
fn oversized_values_are_refused_by_the_configured_limit() {
    let server = Server::start(&["--shards", "1", "--proto-max-bulk-len", "1024"]);
    case(
        &server,
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2048\r\n",
        protocol_error("invalid bulk length"),
        false,
    );
    let mut c = server.client();
    let value = vec![b'x'; 1000];
    assert_eq!(c.cmd_args(&[b"SET", b"k", &value]), ok());
    assert_eq!(c.cmd("STRLEN k"), int(1000));
}

/// Commands before a protocol error or a QUIT in the same read all run and answer, in order;
/// nothing after them runs. Pipelines are decoded ahead in windows (for key prefetch), so this
/// pins down that decoding ahead never runs, drops or reorders a command. With two shards the
/// keys `{a}…` and `{b}…` live on different shards, so the cross-shard batch path is covered.
#[test]
fn commands_before_an_error_or_quit_run_in_order_and_nothing_after() {
    for shards in ["1", "2"] {
        let server = Server::start(&["--shards", shards]);
        let mut wire = Vec::new();
        for i in 0..40 {
            let key = if i % 2 == 0 { "{a}k" } else { "{b}k" };
            wire.extend_from_slice(format!("INCR {key}\r\n").as_bytes());
        }
        let mut quitter = server.client();
        let mut with_quit = wire.clone();
        with_quit.extend_from_slice(b"QUIT\r\nSET {a}after 1\r\nSET {b}after 1\r\n");
        quitter.raw(&with_quit);
        for i in 0..40 {
            assert_eq!(
                quitter.read(),
                Some(Frame::Integer(i / 2 + 1)),
                "shards {shards}, reply {i}"
            );
        }
        assert_eq!(quitter.read(), Some(ok()));
        assert!(quitter.closed());

        let mut broken = server.client();
        let mut with_error = wire.clone();
        with_error.extend_from_slice(b"*1\r\n$-5\r\nSET {a}after 1\r\n");
        broken.raw(&with_error);
        for i in 0..40 {
            assert_eq!(
                broken.read(),
                Some(Frame::Integer(20 + i / 2 + 1)),
                "shards {shards}, reply {i}"
            );
        }
        assert_eq!(broken.read(), Some(protocol_error("invalid bulk length")));
        assert!(broken.closed());

        let mut check = server.client();
        assert_eq!(
            check.cmd("MGET {a}k {b}k {a}after {b}after"),
            Frame::Array(vec![bulk("40"), bulk("40"), Frame::Null, Frame::Null])
        );
    }
}
