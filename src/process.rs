//! What the binary needs around [`run`](crate::run): logging set up from the configuration
//! (its filter replaceable while running, its lines written off the serving thread by the
//! `log_writer` module), the tokio runtime, and the signals that end a sidecar (SIGTERM from
//! the kubelet, SIGINT from a terminal); and, for `--check`, the host-name endpoints resolved
//! once on a runtime of its own.
//!
//! It reads no variable (the configuration hands it the log filter and format) and serves
//! nothing: `run` does, on the runtime made here.

mod log_writer;

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Registry, reload};

use crate::check::Resolved;
use crate::config::{Config, Endpoint, LogFormat};
use crate::metrics::{self, Metrics};
use crate::snapshot;
use crate::upstream::{Upstream, names};

/// The handle that swaps the log filter when `MESHDNS_LOG` changes live.
static LOG_FILTER: OnceLock<reload::Handle<Targets, Registry>> = OnceLock::new();

pub use log_writer::Flush;

/// Installs the global tracing subscriber: `MESHDNS_LOG` as the filter, text or JSON lines on
/// stderr, colours only when stderr is a terminal (not in `kubectl logs`). Lines are written by
/// a thread of their own (dropped and counted when stderr does not keep up); keep the returned
/// guard until the end of `main` so that the last lines are written. Should that thread not
/// start, lines are written directly, as they come, and there is nothing to wait for.
pub fn init_logging(log: &str, format: LogFormat) -> Option<Flush> {
    let (filter, handle) = reload::Layer::new(log_filter(log));
    let _ = LOG_FILTER.set(handle);
    let (writer, flush) = match log_writer::NonBlocking::new(
        std::io::stderr(),
        log_writer::QUEUED_LINES,
        metrics::LOG_LINES_DROPPED.clone(),
    ) {
        Ok((writer, flush)) => (BoxMakeWriter::new(writer), Some(flush)),
        Err(error) => {
            eprintln!("meshdns: cannot start the log thread ({error}); writing logs directly");
            (BoxMakeWriter::new(std::io::stderr), None)
        }
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry.with(layer).init(),
        LogFormat::Json => registry.with(layer.json()).init(),
    }
    flush
}

/// `MESHDNS_LOG` as a filter of levels per target (validated with the configuration; a
/// filter that does not parse leaves logging at `info`).
fn log_filter(filter: &str) -> Targets {
    filter
        .parse()
        .unwrap_or_else(|_| Targets::new().with_default(tracing::Level::INFO))
}

/// Replaces the log filter (a validated `MESHDNS_LOG`); nothing when logging was not set up
/// by [`init_logging`] (tests running `run` in-process).
pub(crate) fn set_log_filter(filter: &str) {
    if let Some(handle) = LOG_FILTER.get()
        && let Err(error) = handle.reload(log_filter(filter))
    {
        tracing::warn!(%error, "the new log filter could not be applied");
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

/// What each host-name endpoint of `config` resolves to now, asked of its upstreams (for
/// `--check`, which shows them): the addresses, or why there are none.
pub fn resolve_endpoint_names(config: &Config) -> Resolved {
    let names: Vec<Endpoint> = config
        .clusters
        .iter()
        .flat_map(|c| c.endpoints.iter())
        .filter(|e| matches!(e, Endpoint::Name { .. }))
        .cloned()
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let runtime = match runtime(1) {
        Ok(runtime) => runtime,
        Err(error) => {
            return names
                .into_iter()
                .map(|e| (e, Err(format!("cannot start a runtime: {error}"))))
                .collect();
        }
    };
    runtime.block_on(async {
        let local = Upstream::new(
            snapshot::local_group(config),
            None,
            &Metrics::new().upstream(),
            crate::background::Owner::default(),
        );
        let mut resolved = Vec::with_capacity(names.len());
        for endpoint in names {
            let Endpoint::Name { host, port } = &endpoint else {
                continue;
            };
            let result = names::resolve(&local, host, *port, &[])
                .await
                .map(|(addrs, _)| addrs)
                .map_err(|e| e.to_string());
            resolved.push((endpoint, result));
        }
        resolved
    })
}
