//! `meshdns webhook`: the mutating admission webhook that injects the meshdns sidecar into pods
//! that an operator or a chart creates (docs/injection.md). [`run`] serves `POST /mutate` over
//! HTTPS with a certificate that follows its files (`certificates::server`), the admin
//! endpoints on `MESHDNS_ADMIN_LISTEN` (the certificate's expiry and reloads among the metrics,
//! `listener="webhook"`), and shuts down like the DNS server: not ready first,
//! then open connections finish (at most [`SHUTDOWN_GRACE`](crate::SHUTDOWN_GRACE)).
//!
//! [`inject`] decides and writes the JSON patch, [`sidecar`] holds what is injected, [`review`]
//! frames the AdmissionReview; this module owns serving the sockets (`main.rs` binds them and
//! loads the certificate), the bounds on what a client may send, the logs and the counters. It
//! never touches the DNS server's state; the admin server it shares with it.

pub(crate) mod inject;
pub(crate) mod review;
pub(crate) mod sidecar;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_LENGTH;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::background::Background;
use crate::certificates::server::{CHECK_EVERY, ServerTls};
use crate::config::WebhookConfig;
use crate::metrics::{Metrics, TlsListener, WebhookResult};
use crate::server::{Readiness, next_connection, response};
use review::{Answered, Outcome};

/// The largest request body read. The API server sends a pod of at most about 1.5 MB (etcd's
/// object limit), twice in an AdmissionReview at most (object and oldObject); larger is not
/// from the API server and is refused with 413 before it is read.
pub(crate) const MAX_REVIEW_BYTES: usize = 3 * 1024 * 1024;

/// Open HTTPS connections at once; further ones are closed at once. The API servers keep a few
/// each.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// How long a client may take for the TLS handshake, and for a request's headers.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection (keep-alive included) may stay open.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// The path the MutatingWebhookConfiguration names.
pub(crate) const MUTATE_PATH: &str = "/mutate";

/// What every connection needs.
struct Context {
    config: WebhookConfig,
    metrics: Arc<Metrics>,
}

/// Serves the webhook on `listener` until `shutdown` resolves. `tls` is looked at every
/// [`CHECK_EVERY`], so a renewed Secret reaches new connections without a restart.
pub async fn run(
    config: WebhookConfig,
    listener: std::net::TcpListener,
    admin: Option<std::net::TcpListener>,
    tls: Arc<ServerTls>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::default();
    // The root of the webhook's tasks (the admin server, the certificate's watch, each
    // connection): closed and waited for before `run` returns, whichever way.
    let tree = Background::new(crate::background::DEFAULT_LIMIT);
    // The admin server's owner, held until `run` returns: its connections are its work.
    let _admin = (admin)
        .map(|admin| {
            admin.set_nonblocking(true)?;
            crate::start_admin(admin, &readiness, &metrics, &tree)
        })
        .transpose()?;
    (tree.tasks()).spawn(crate::renew_server_certificate(
        TlsListener::Webhook,
        &tls,
        CHECK_EVERY,
        Arc::clone(&metrics),
    ));
    tracing::info!(
        listen = %listener.local_addr()?,
        image = %config.image,
        cluster_domain = %config.cluster_domain,
        "meshdns {} serving the injection webhook on {MUTATE_PATH}",
        env!("CARGO_PKG_VERSION"),
    );
    let context = Arc::new(Context { config, metrics });
    readiness.set(true);
    tokio::select! {
        () = shutdown => tracing::info!("shutting down: finishing open reviews"),
        () = accept(&listener, &tls, &context, &tree) => {}
    }
    readiness.set(false);
    let late = "shutdown grace time over with reviews still open";
    tree.shut_down(crate::SHUTDOWN_GRACE, late).await;
    Ok(())
}

/// Accepts connections forever (an accept error is logged and retried: [`next_connection`]).
async fn accept(
    listener: &TcpListener,
    tls: &ServerTls,
    context: &Arc<Context>,
    tree: &Background,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let connections = tree.clients();
    loop {
        let (stream, peer) = next_connection(listener, "webhook").await;
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%peer, "webhook connection limit reached; connection closed");
            continue;
        };
        let acceptor = TlsAcceptor::from(tls.config());
        let (context, stopped) = (Arc::clone(context), tree.draining());
        connections.spawn(async move {
            let served = tokio::time::timeout(
                CONNECTION_LIFETIME,
                serve_connection(stream, acceptor, context, stopped),
            );
            if let Ok(Err(error)) = served.await {
                tracing::debug!(%peer, %error, "webhook connection ended with an error");
            }
            drop(slot);
        });
    }
}

/// One connection: the TLS handshake, then HTTP/1.1 requests until the client closes it or
/// shutdown asks it to finish its current request.
async fn serve_connection(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    context: Arc<Context>,
    stopped: CancellationToken,
) -> Result<(), String> {
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake failed: {e}"))?;
    let service = service_fn(move |request| {
        let context = Arc::clone(&context);
        async move { Ok::<_, Infallible>(handle(request, &context).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => return served.map_err(|e| e.to_string()),
        () = stopped.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    connection.await.map_err(|e| e.to_string())
}

/// One HTTP request: a review on [`MUTATE_PATH`], 404 or 405 elsewhere.
async fn handle(request: Request<Incoming>, context: &Context) -> Response<Full<Bytes>> {
    if request.uri().path() != MUTATE_PATH {
        return text(
            StatusCode::NOT_FOUND,
            "not found: reviews go to /mutate\n".into(),
        );
    }
    if request.method() != Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST an AdmissionReview\n".into(),
        );
    }
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(response) => {
            context.metrics.webhook_review(WebhookResult::Invalid);
            return *response;
        }
    };
    let config = &context.config;
    match review::answer(&body, &config.image, &config.cluster_domain) {
        Ok(answered) => {
            record(&answered, &context.metrics);
            let json = serde_json::to_vec(&answered.review).unwrap_or_default();
            response(StatusCode::OK, Bytes::from(json), "application/json")
        }
        Err(bad) => {
            context.metrics.webhook_review(WebhookResult::Invalid);
            tracing::warn!(reason = %bad, "webhook: bad request answered 400");
            text(StatusCode::BAD_REQUEST, format!("{bad}\n"))
        }
    }
}

/// The body, at most [`MAX_REVIEW_BYTES`]; a larger one is refused with 413 unread.
async fn read_body(request: Request<Incoming>) -> Result<Bytes, Box<Response<Full<Bytes>>>> {
    let too_large = || {
        let why = format!("request body larger than {MAX_REVIEW_BYTES} bytes\n");
        tracing::warn!("webhook: {}", why.trim_end());
        Box::new(text(StatusCode::PAYLOAD_TOO_LARGE, why))
    };
    let declared = request.headers().get(CONTENT_LENGTH);
    let declared = declared.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_REVIEW_BYTES as u64) {
        return Err(too_large());
    }
    match Limited::new(request.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(error) => Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            format!("cannot read the request body: {error}\n"),
        ))),
    }
}

/// The log line and the counter of one answered review. A pod that could not be injected is
/// logged at `warn`, with the reason the API server also shows its creator.
fn record(answered: &Answered, metrics: &Metrics) {
    let pod = answered.pod.as_str();
    let result = match &answered.outcome {
        Outcome::Injected => {
            tracing::info!(%pod, "webhook: meshdns sidecar injected");
            WebhookResult::Injected
        }
        Outcome::Skipped(skip) => match skip.warning() {
            Some(warning) => {
                tracing::warn!(%pod, reason = skip.label(), "webhook: {warning}");
                WebhookResult::NotInjected
            }
            None => {
                tracing::debug!(%pod, reason = skip.label(), "webhook: left as it is");
                WebhookResult::Skipped
            }
        },
        Outcome::NotCreate => WebhookResult::Skipped,
        Outcome::Denied(why) => {
            tracing::warn!(%pod, reason = %why, "webhook: review denied");
            WebhookResult::Denied
        }
    };
    metrics.webhook_review(result);
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    response(status, Bytes::from(body), "text/plain; charset=utf-8")
}
