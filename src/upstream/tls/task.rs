//! The task of one connection: TCP connect and TLS handshake, then writing queued queries,
//! reading replies and watching the clock concurrently until one of them ends the connection;
//! it then records how the connection ended (idle, closed by the peer, failed) and returns.
//! The task exists only while the connection does.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_rustls::client::TlsStream;
use tokio_util::codec::FramedRead;

use super::TlsError;
use super::connection::{Frame, Review, Shared};
use crate::wire;

/// How long a failed write waits for the read side to say why (a TLS alert) before the write
/// error stands as the cause.
const ALERT_GRACE: Duration = Duration::from_millis(500);

/// How long an idle close may spend sending close_notify.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How a connection ended.
pub(super) enum Ending {
    /// Closed by us for idleness (or no longer the endpoint's connection).
    Idle,
    /// The peer closed it in an orderly way between replies.
    PeerClosed,
    Failed(TlsError),
}

/// The connection task: opens the connection, serves it until it ends, records the ending.
pub(super) async fn run(shared: Arc<Shared>, serial: u64, queue: mpsc::UnboundedReceiver<Frame>) {
    shared.handshakes.fetch_add(1, Ordering::Relaxed);
    if let Some(metric) = &shared.settings.handshake_metric {
        metric.inc();
    }
    let ending = serve(&shared, serial, queue).await;
    shared.finish(serial, ending);
}

async fn serve(shared: &Shared, serial: u64, mut queue: mpsc::UnboundedReceiver<Frame>) -> Ending {
    let limit = shared.settings.handshake_timeout;
    let stream = match timeout(limit, connect(shared)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(cause)) => return Ending::Failed(cause),
        Err(_) => return Ending::Failed(TlsError::HandshakeTimeout(limit)),
    };
    tracing::debug!(endpoint = %shared.addr, "TLS connection open");
    let (mut reader, mut writer) = tokio::io::split(stream);
    let ending = {
        let replies = read_replies(shared, serial, &mut reader);
        tokio::pin!(replies);
        tokio::select! {
            ending = &mut replies => ending,
            ending = write_queries(&mut writer, &mut queue) => {
                // A write fails when the peer has gone; what it said last is on the read side:
                // a TLS alert (such as CertificateRequired) says why, and an orderly close means
                // our write merely crossed it.
                match timeout(ALERT_GRACE, &mut replies).await {
                    Ok(said @ (Ending::Failed(TlsError::Tls(_)) | Ending::PeerClosed)) => said,
                    _ => ending,
                }
            }
            ending = watch_clock(shared, serial) => ending,
        }
    };
    if matches!(ending, Ending::Idle) {
        // close_notify, so the peer sees an orderly close; a peer that does not read it
        // cannot hold the task.
        let _ = timeout(CLOSE_GRACE, writer.shutdown()).await;
    }
    ending
}

/// TCP connect and TLS handshake; the certificate is checked here (name and CA bundle).
async fn connect(shared: &Shared) -> Result<TlsStream<TcpStream>, TlsError> {
    let tcp = TcpStream::connect(shared.addr)
        .await
        .map_err(|e| TlsError::Network(format!("connect: {e}")))?;
    tcp.set_nodelay(true)
        .map_err(|e| TlsError::Network(format!("connect: {e}")))?;
    shared
        .connector
        .connect(shared.server_name.clone(), tcp)
        .await
        .map_err(classify)
}

/// Writes queued frames, as many as are queued per flush (pipelining without a write per query).
async fn write_queries(
    writer: &mut (impl AsyncWrite + Unpin),
    queue: &mut mpsc::UnboundedReceiver<Frame>,
) -> Ending {
    while let Some(frame) = queue.recv().await {
        let mut written = writer.write_all(&frame).await;
        while written.is_ok()
            && let Ok(more) = queue.try_recv()
        {
            written = writer.write_all(&more).await;
        }
        if let Err(e) = written.and(writer.flush().await) {
            return Ending::Failed(classify(e));
        }
    }
    // The endpoint let go of this connection (idle close or drop): nothing more to write.
    Ending::Idle
}

async fn read_replies(
    shared: &Shared,
    serial: u64,
    reader: &mut (impl AsyncRead + Unpin),
) -> Ending {
    // Length-prefixed messages (RFC 7858 §3.3); the buffer grows as a reply's bytes arrive.
    let mut frames = FramedRead::new(reader, wire::tcp_codec(wire::MAX_MESSAGE));
    loop {
        match frames.next().await {
            Some(Ok(frame)) => shared.dispatch(serial, frame.to_vec()),
            // Closed between messages, with or without close_notify: nothing was cut.
            None => return Ending::PeerClosed,
            Some(Err(e)) if is_cut_short(&e) => {
                return Ending::Failed(TlsError::Network(
                    "the server closed the connection in the middle of a reply".into(),
                ));
            }
            Some(Err(e)) => return Ending::Failed(classify(e)),
        }
    }
}

/// A connection that ended inside a frame: the codec says bytes remain, TLS says EOF.
fn is_cut_short(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::UnexpectedEof
        || error.to_string().contains("bytes remaining on stream")
}

/// Ends the connection when it is idle or stalled; see [`Shared::review`].
async fn watch_clock(shared: &Shared, serial: u64) -> Ending {
    let mut check_at = Instant::now() + shared.settings.idle_timeout;
    loop {
        sleep_until(check_at).await;
        match shared.review(serial) {
            Review::Again(next) => check_at = next,
            Review::Closed => return Ending::Idle,
            Review::Stalled(cause) => return Ending::Failed(cause),
        }
    }
}

/// A rustls error (tokio-rustls carries it inside the `io::Error`) is a TLS failure with
/// rustls's words; anything else is a network error.
fn classify(error: io::Error) -> TlsError {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => TlsError::Tls(tls.to_string()),
        None => TlsError::Network(error.to_string()),
    }
}
