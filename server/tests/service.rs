//! Running as a systemd service (`deploy/wetask.service`, `Type=notify`): the server says
//! READY=1 on `NOTIFY_SOCKET` once every shard has loaded its journal, not before, and
//! STOPPING=1 when it shuts down. The test plays the service manager's part with a datagram
//! socket of its own.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::*;

fn next_message(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the deadline");
    String::from_utf8_lossy(&buf[..n]).to_string()
}

#[test]
fn ready_comes_after_the_journal_is_loaded_and_stopping_at_shutdown() {
    let dir = temp_dir("notify");
    let path = dir.join("notify.sock");
    let manager = UnixDatagram::bind(&path).expect("notify socket");
    manager
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let data = temp_dir("notify-data");
    let data_arg = data.to_str().unwrap();
    let env = [("NOTIFY_SOCKET", path.to_str().unwrap())];

    // A first run writes some keys into the journal.
    let server = Server::start_with_env(&["--shards", "2", "--dir", data_arg], &env);
    assert!(next_message(&manager).contains("READY=1"));
    let mut c = server.client();
    for i in 0..200 {
        assert_eq!(c.cmd(&format!("SET key{i} {i}")), ok());
    }
    assert!(server.terminate().success());
    assert!(next_message(&manager).contains("STOPPING=1"));

    // The second says READY only with its journal loaded: every key answers at once.
    let server = Server::start_with_env(&["--shards", "2", "--dir", data_arg], &env);
    assert!(next_message(&manager).contains("READY=1"));
    server.wait_log("ready to accept connections");
    let log = server.log.lock().unwrap().clone();
    let ready = log
        .iter()
        .position(|l| l.contains("ready to accept connections"));
    let loaded: Vec<usize> = (0..log.len())
        .filter(|&i| log[i].contains("journal loaded"))
        .collect();
    assert_eq!(loaded.len(), 2, "both shards loaded: {log:?}");
    assert!(
        loaded.iter().all(|&i| Some(i) < ready),
        "READY after every load: {log:?}"
    );
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), int(200));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&data);
}
