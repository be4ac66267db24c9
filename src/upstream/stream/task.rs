//! The task of one connection: TCP connect (and TLS handshake), then writing queued queries,
//! reading replies and watching the clock concurrently until one of them ends the connection;
//! it then records how the connection ended (idle, closed by the peer, hanging, failed) and
//! returns. The task exists only while the connection does.
//!
//! It owns the I/O and nothing of the connection's state: queries, backoff and the verdict on
//! a reply are the `connection` module's, which it reports to.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_util::codec::FramedRead;

use super::connection::{Frame, Review, Shared};
use super::{Dial, StreamError};
use crate::wire;

/// How long a failed write waits for the read side to say why (a TLS alert) before the write
/// error stands as the cause.
const ALERT_GRACE: Duration = Duration::from_millis(500);

/// How long an idle close may spend sending close_notify and FIN.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How a connection ended.
pub(super) enum Ending {
    /// Closed by us for idleness (or no longer the endpoint's connection).
    Idle,
    /// The peer closed or reset it (in good order or not, between replies or inside one):
    /// normal life, the waiting queries go to a new connection.
    Closed(StreamError),
    /// Nothing came back for the idle timeout while a query waited.
    Hanging(StreamError),
    /// The TCP connect failed (refused, unreachable): a failure, unless the peer closed a
    /// connection a moment ago (it may be restarting).
    Refused(StreamError),
    /// The connect, the TLS handshake, or the TLS session failed.
    Failed(StreamError),
}

/// The connection task: opens the connection, serves it until it ends, records the ending.
pub(super) async fn run(
    shared: Arc<Shared>,
    serial: u64,
    mut queue: mpsc::UnboundedReceiver<Frame>,
    delay: Duration,
) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    shared.connects.fetch_add(1, Ordering::Relaxed);
    for metric in &shared.settings.connect_metrics {
        metric.inc();
    }
    let ending = connect_and_serve(&shared, serial, &mut queue).await;
    // The queue lives until the ending is recorded: a query registered meanwhile (on another
    // thread) is on this connection's table, and so moved or failed with the others.
    shared.finish(serial, ending);
}

async fn connect_and_serve(
    shared: &Shared,
    serial: u64,
    queue: &mut mpsc::UnboundedReceiver<Frame>,
) -> Ending {
    // One limit for the connect and the TLS handshake together.
    let limit = shared.settings.connect_timeout;
    let until = Instant::now() + limit;
    let tcp = match timeout_at(until, connect_tcp(shared.addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Ending::Refused(StreamError::Network(format!("connect: {e}"))),
        Err(_) => return Ending::Failed(StreamError::ConnectTimeout(limit)),
    };
    match &shared.dial {
        Dial::Tcp => serve(shared, serial, queue, tcp).await,
        Dial::Tls {
            config,
            server_name,
        } => {
            let handshake = TlsConnector::from(config.load()).connect(server_name.clone(), tcp);
            match timeout_at(until, handshake).await {
                Ok(Ok(tls)) => {
                    record_peer_certificate(shared, tls.get_ref().1);
                    serve(shared, serial, queue, tls).await
                }
                Ok(Err(e)) => Ending::Failed(classify(e)),
                Err(_) => Ending::Failed(StreamError::ConnectTimeout(limit)),
            }
        }
    }
}

/// Shows when the certificate the peer just presented expires.
fn record_peer_certificate(shared: &Shared, session: &rustls::ClientConnection) {
    let leaf = session.peer_certificates().and_then(|chain| chain.first());
    if let (Some(series), Some(not_after)) = (
        &shared.settings.peer_certificate,
        leaf.and_then(|leaf| crate::certificates::not_after(leaf)),
    ) {
        series.presented(not_after);
    }
}

/// The TCP connect, without Nagle's delay (each flush is a whole batch of queries).
async fn connect_tcp(addr: SocketAddr) -> io::Result<TcpStream> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// Serves an open connection until it ends.
async fn serve<S>(
    shared: &Shared,
    serial: u64,
    queue: &mut mpsc::UnboundedReceiver<Frame>,
    stream: S,
) -> Ending
where
    S: AsyncRead + AsyncWrite,
{
    tracing::debug!(endpoint = %shared.addr, "connection open");
    let (mut reader, mut writer) = tokio::io::split(stream);
    let ending = {
        let replies = read_replies(shared, serial, &mut reader);
        tokio::pin!(replies);
        tokio::select! {
            ending = &mut replies => ending,
            ending = write_queries(&mut writer, queue) => {
                // A write fails when the peer has gone; what it said last is on the read side:
                // a TLS alert (such as CertificateRequired) says why; anything else means the
                // peer closed or reset the connection, which our write merely crossed.
                match timeout(ALERT_GRACE, &mut replies).await {
                    Ok(said @ Ending::Failed(StreamError::Tls(_))) => said,
                    _ => ending,
                }
            }
            ending = watch_clock(shared, serial) => ending,
        }
    };
    if matches!(ending, Ending::Idle) {
        // close_notify (over TLS) and FIN, so the peer sees an orderly close; a peer that does
        // not read it cannot hold the task.
        let _ = timeout(CLOSE_GRACE, writer.shutdown()).await;
    }
    ending
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
            return lost(e, "writing");
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
    // Length-prefixed messages (RFC 7766 §8, RFC 7858 §3.3); the buffer grows as a reply's
    // bytes arrive.
    let mut frames = FramedRead::new(reader, wire::tcp_codec(wire::MAX_MESSAGE));
    while let Some(frame) = frames.next().await {
        match frame {
            Ok(frame) => shared.dispatch(serial, frame.to_vec()),
            Err(e) => return lost(e, "reading"),
        }
    }
    Ending::Closed(StreamError::Network(
        "the server closed the connection".into(),
    ))
}

/// An I/O error on an open connection: a TLS error (an alert, a protocol violation) fails it;
/// anything else (reset, broken pipe, a frame cut short) is the peer going away.
fn lost(error: io::Error, doing: &str) -> Ending {
    match classify(error) {
        tls @ StreamError::Tls(_) => Ending::Failed(tls),
        StreamError::Network(cause) => {
            Ending::Closed(StreamError::Network(format!("{doing}: {cause}")))
        }
        other => Ending::Closed(other),
    }
}

/// Ends the connection when it is idle or hanging; see [`Shared::review`].
async fn watch_clock(shared: &Shared, serial: u64) -> Ending {
    let mut check_at = Instant::now() + shared.settings.idle_timeout;
    loop {
        sleep_until(check_at).await;
        match shared.review(serial) {
            Review::Again(next) => check_at = next,
            Review::Closed => return Ending::Idle,
            Review::Hanging(cause) => return Ending::Hanging(cause),
        }
    }
}

/// A rustls error (tokio-rustls carries it inside the `io::Error`) is a TLS failure with
/// rustls's words; anything else is a network error.
fn classify(error: io::Error) -> StreamError {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => StreamError::Tls(tls.to_string()),
        None => StreamError::Network(error.to_string()),
    }
}
