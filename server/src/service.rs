//! Running under a service manager: systemd's readiness protocol (`Type=notify`). The last
//! shard to load its data says READY=1, so `systemctl start` returns, and units ordered after
//! WeTask start, only once the journal is loaded and every shard serves; shutdown says
//! STOPPING=1. Outside systemd (`NOTIFY_SOCKET` unset) both do nothing. The unit file is
//! `deploy/wetask.service`.

/// Tells the service manager the server is ready (once every shard has loaded its data).
pub fn notify_ready() {
    notify(sd_notify::NotifyState::Ready);
}

/// Tells the service manager the server is stopping.
pub fn notify_stopping() {
    notify(sd_notify::NotifyState::Stopping);
}

fn notify(state: sd_notify::NotifyState) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, &[state]) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}
