//! The admin HTTP server on `MESHDNS_ADMIN_LISTEN`: `GET /metrics` (Prometheus text format),
//! `/livez` (the runtime answers), `/readyz` (every DNS listener is served). Anything else: 404.
//!
//! It runs on the DNS runtime, its connections on tasks under its own owner in the instance's
//! tree (they end with it, at the end of `run`), and cannot slow the DNS path: connections
//! are capped (further ones are closed at once), a request's headers must arrive within
//! [`HEADER_READ_TIMEOUT`], a connection lives at most [`CONNECTION_LIFETIME`], and a scrape
//! only reads atomics under the registry's short read locks, which the DNS path never holds
//! for long. Readiness never depends on upstream health: a kube-dns outage must not unready
//! every pod of the workload.
//!
//! It owns the HTTP side only: what the metrics say is the metrics module's, and readiness is
//! what its starter sets ([`Readiness`]). `meshdns webhook` serves the same admin server, ready
//! when its HTTPS listener is.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::background::Tasks;
use crate::metrics::{self, Metrics};

/// Open admin connections at once. Prometheus and the kubelet need one or two each.
pub const MAX_CONNECTIONS: usize = 16;

/// How long a client may take to send a request's headers.
pub(super) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection (keep-alive included) may stay open.
pub(super) const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Whether every DNS listener is being served: what `/readyz` reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub(crate) fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Serves the admin endpoints until its owner ends it (the root, at the end of `run`): it
/// keeps answering `/livez` and `/metrics` while in-flight queries drain. Each connection runs
/// on a task of `connections` (the admin server's node in the instance's tree), so they end
/// with it.
pub(crate) async fn serve_admin(
    listener: TcpListener,
    readiness: Readiness,
    metrics: Arc<Metrics>,
    connections: Tasks,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = next_connection(&listener, "admin").await;
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "admin connection limit reached; connection closed");
            continue;
        };
        let (readiness, metrics) = (readiness.clone(), Arc::clone(&metrics));
        connections.spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request| {
                let response = respond(&request, &readiness, &metrics);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            // A connection past its lifetime is simply closed.
            if let Ok(Err(error)) = tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                tracing::debug!(%peer, %error, "admin connection error");
            }
        });
    }
}

/// The next connection on `listener`: an accept error (descriptors short, a connection aborted
/// before it was taken) is logged as `what`'s and retried after a short pause. The accept loop
/// of the admin server and of the webhook.
pub(crate) async fn next_connection(
    listener: &TcpListener,
    what: &'static str,
) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(%error, "{what} accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn respond(
    request: &Request<Incoming>,
    readiness: &Readiness,
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    match request.uri().path() {
        "/metrics" => {
            let body = Bytes::from(metrics.encode());
            response(StatusCode::OK, body, metrics::CONTENT_TYPE)
        }
        "/livez" => text(StatusCode::OK, "ok\n"),
        "/readyz" if readiness.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: DNS listeners not served\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let body = Bytes::from_static(body.as_bytes());
    response(status, body, "text/plain; charset=utf-8")
}

/// A response of `status` with `body` of `content_type`: every response the admin server and
/// the webhook send.
pub(crate) fn response(
    status: StatusCode,
    body: Bytes,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    (response.headers_mut()).insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
