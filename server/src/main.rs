//! The `wetask` binary: parse the options, set up logging, run the shards until SIGTERM,
//! SIGINT or SHUTDOWN drains them.

use tracing_subscriber::EnvFilter;
use wetask_server::config::Config;

/// The system allocator, counting what the server holds (`used_memory`, for `maxmemory`).
#[global_allocator]
static ALLOCATOR: wetask_server::memory::CountingAlloc = wetask_server::memory::CountingAlloc;

fn main() {
    let config = match Config::load() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let filter = EnvFilter::try_new(&config.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .init();
    wetask_server::runtime::install_panic_hook();
    if let Err(message) = wetask_server::runtime::run(config) {
        tracing::error!("{message}");
        std::process::exit(1);
    }
}
