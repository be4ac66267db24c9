//! What the binary needs around [`run`](crate::run): logging set up from the configuration,
//! the tokio runtime, and the signals that end a sidecar (SIGTERM from the kubelet, SIGINT
//! from a terminal).

use std::io::IsTerminal;

use crate::config::{Config, LogFormat};

/// Installs the global tracing subscriber: `MESHDNS_LOG` as the filter, text or JSON lines on
/// stderr, colours only when stderr is a terminal (not in `kubectl logs`).
pub fn init_logging(config: &Config) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&config.log))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The runtime meshdns runs on: one thread (`MESHDNS_THREADS=1`, the default) or a pool.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut pool = tokio::runtime::Builder::new_multi_thread();
        pool.worker_threads(threads);
        pool
    };
    builder.enable_all().build()
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
