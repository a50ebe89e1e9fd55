//! `--metrics-port`: Prometheus metrics over HTTP, on a thread of its own (`tiny_http`
//! parses the HTTP; `prometheus-client` writes the format). `GET /metrics` runs one scrape
//! ([`gather`]): a loopback RESP connection to the server's own port with a deadline, so a
//! scrape costs the shards what any client's INFO and TASK.STATS cost, and never stalls one.
//! Off by default.

mod families;
mod gather;

use std::sync::Arc;

use prometheus_client::registry::Registry;

use crate::globals::Globals;

/// The content type of the OpenMetrics text `prometheus-client` writes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Starts the metrics thread on `bind:port`; the address it listens on is logged.
pub fn spawn(globals: Arc<Globals>, bind: &str, port: u16) -> Result<(), String> {
    let server = tiny_http::Server::http((bind, port))
        .map_err(|e| format!("cannot serve metrics on {bind}:{port}: {e}"))?;
    if let Some(addr) = server.server_addr().to_ip() {
        tracing::info!("metrics on http://{addr}/metrics");
    }
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(&globals, &server))
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(())
}

fn serve(globals: &Globals, server: &tiny_http::Server) {
    for request in server.incoming_requests() {
        if globals.shutting_down() {
            break;
        }
        let path = request.url().split('?').next().unwrap_or("");
        let response = match (request.method(), path) {
            (tiny_http::Method::Get, "/metrics") => match render(globals) {
                Ok(body) => tiny_http::Response::from_string(body).with_header(
                    tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE).expect("valid"),
                ),
                Err(err) => {
                    tracing::warn!("metrics scrape failed: {err}");
                    tiny_http::Response::from_string(format!("scrape failed: {err}\n"))
                        .with_status_code(503)
                }
            },
            (tiny_http::Method::Get, "/") => {
                tiny_http::Response::from_string("WeTask metrics: GET /metrics\n")
            }
            _ => tiny_http::Response::from_string("not found\n").with_status_code(404),
        };
        let _ = request.respond(response);
    }
}

/// One scrape, written in the text format.
fn render(globals: &Globals) -> Result<String, String> {
    let scrape = gather::scrape(globals)?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(families::Families(scrape)));
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, &registry)
        .map_err(|e| format!("cannot encode the metrics: {e}"))?;
    Ok(body)
}
