//! One attempt at one endpoint: UDP with a fresh random ID from a fresh random source port
//! (a connected socket, so the kernel drops datagrams from other sources), and TCP — either
//! because the cluster is configured for it or because the UDP reply was truncated.
//!
//! A reply is accepted only when it is a response, carries our ID and opcode, and echoes our
//! question (names compared ignoring case) — or when it is an error reply (FORMERR, SERVFAIL,
//! NOTIMP, REFUSED) with no question at all: servers that cannot parse a query omit it, and
//! that is still the endpoint's answer. Anything else on the socket is ignored, and the attempt
//! keeps listening until its deadline: a spoofed datagram cannot cut the real answer short.
//!
//! Memory per attempt is what its messages need: a UDP reply is received into a buffer of the
//! size the query advertised (512 without EDNS) and copied out at its exact length; a TCP reply
//! grows as its bytes arrive, up to what its length prefix announces.
//!
//! System calls per UDP attempt are few: the socket is made non-blocking in one call,
//! connected (which also binds the random port) in one, registered for readability only (a
//! send wakes nothing), and read only once readiness says a datagram is there.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::tls::{TlsEndpoint, TlsError};
use crate::wire;

/// An accepted reply, still carrying the ID we chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub bytes: Vec<u8>,
    pub endpoint: SocketAddr,
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    #[error("timed out")]
    Timeout,
    /// The endpoint or the path to it failed: refused, reset, unreachable, closed.
    #[error("{0}")]
    Network(String),
    /// meshdns itself is short of a resource (file descriptors, buffers, ports): not the
    /// endpoint's fault, never counted against its health.
    #[error("local resource error: {0}")]
    Local(String),
    /// The TLS session could not be set up or verified (DNS over TLS).
    #[error("TLS: {0}")]
    Tls(String),
    #[error("the query has no question")]
    BadQuery,
}

impl From<std::io::Error> for AttemptError {
    fn from(error: std::io::Error) -> Self {
        if is_local(&error) {
            AttemptError::Local(error.to_string())
        } else {
            AttemptError::Network(error.to_string())
        }
    }
}

/// Errors that say this process ran out of something (EMFILE, ENFILE, ENOBUFS, ENOMEM,
/// EADDRNOTAVAIL for exhausted source ports), whatever the endpoint.
fn is_local(error: &std::io::Error) -> bool {
    const ENOMEM: i32 = 12;
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    const EADDRNOTAVAIL: i32 = 99;
    const ENOBUFS: i32 = 105;
    matches!(
        error.kind(),
        ErrorKind::OutOfMemory | ErrorKind::AddrNotAvailable
    ) || matches!(
        error.raw_os_error(),
        Some(ENOMEM | ENFILE | EMFILE | EADDRNOTAVAIL | ENOBUFS)
    )
}

/// How to reach an endpoint for one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// UDP, and TCP when the UDP reply is truncated.
    Udp,
    Tcp,
}

/// Asks `endpoint` once and listens for the reply for as long as the caller keeps the future:
/// the exchange that runs it decides when to try another endpoint and drops it at the query's
/// deadline, so the attempt keeps no timer of its own (each timer costs the runtime a wake-up).
/// Over UDP, a truncated reply is fetched again over TCP from the same endpoint, for at most
/// `attempt_timeout`; if that fails the truncated reply is returned (it is still an answer, and
/// the cache never stores it).
pub async fn attempt(
    endpoint: SocketAddr,
    query: &[u8],
    via: Via,
    attempt_timeout: Duration,
) -> Result<Answered, AttemptError> {
    let answered = |bytes| Answered { bytes, endpoint };
    match via {
        Via::Tcp => tcp(endpoint, query).await.map(answered),
        Via::Udp => {
            let reply = udp(endpoint, query).await?;
            if !wire::is_truncated(&reply) {
                return Ok(answered(reply));
            }
            // A trickling TCP peer must not hold the truncated answer back until the deadline.
            let retry = tokio::time::timeout(attempt_timeout, tcp(endpoint, query)).await;
            match retry.unwrap_or(Err(AttemptError::Timeout)) {
                Ok(full) => Ok(answered(full)),
                Err(error) => {
                    tracing::debug!(%endpoint, %error, "TCP retry after truncation failed; keeping the truncated reply");
                    Ok(answered(reply))
                }
            }
        }
    }
}

/// One query over DNS over TLS: the endpoint's connection picks the ID and matches the reply
/// by it; the reply must still answer the query (a response, its opcode, its question).
pub async fn over_tls(
    tls: &TlsEndpoint,
    query: &[u8],
    deadline: Instant,
) -> Result<Answered, AttemptError> {
    wire::first_question(query).ok_or(AttemptError::BadQuery)?;
    let reply = tls
        .exchange(query, deadline)
        .await
        .map_err(|error| match error {
            TlsError::Tls(cause) => AttemptError::Tls(cause),
            TlsError::Timeout | TlsError::HandshakeTimeout(_) => AttemptError::Timeout,
            TlsError::BadQuery => AttemptError::BadQuery,
            TlsError::Network(cause) => AttemptError::Network(cause),
        })?;
    // The ID is used up either way: a reply that does not answer is a failed attempt.
    match wire::id(&reply) {
        Some(id) if acceptable(&reply, id, query) => Ok(Answered {
            bytes: reply,
            endpoint: tls.addr(),
        }),
        _ => Err(AttemptError::Network(
            "a reply over TLS that does not answer the query".into(),
        )),
    }
}

/// The query with a fresh random ID, and that ID.
pub fn stamped(query: &[u8]) -> Result<(Vec<u8>, u16), AttemptError> {
    wire::first_question(query).ok_or(AttemptError::BadQuery)?;
    let mut msg = query.to_vec();
    let id = rand::random::<u16>();
    wire::set_id(&mut msg, id);
    Ok((msg, id))
}

/// RCODEs a server sends without the question when it cannot parse a query.
const QUESTIONLESS_ERRORS: [u8; 4] = [1, 2, 4, 5];

/// Whether `reply` answers `sent` (see the module documentation): a response with our ID and
/// opcode, our question or none at all on an error, and records that can be walked — a reply
/// whose record framing is broken would reach the client verbatim on the pass-through route,
/// so it counts as no reply at all.
pub fn acceptable(reply: &[u8], id: u16, sent: &[u8]) -> bool {
    let Some(asked) = wire::first_question(sent) else {
        return false;
    };
    let question_ok = match wire::first_question(reply) {
        Some(got) => wire::same_question(got, asked),
        None => {
            wire::question_count(reply) == Some(0)
                && wire::rcode(reply).is_some_and(|rcode| QUESTIONLESS_ERRORS.contains(&rcode))
                && wire::with_question(reply, asked).is_some()
        }
    };
    wire::is_response(reply)
        && wire::id(reply) == Some(id)
        && wire::opcode(reply) == wire::opcode(sent)
        && question_ok
        && wire::for_each_record(reply, |_| {}).is_some()
}

/// The UDP payload size a query advertises: what its reply may use.
fn advertised_size(query: &[u8]) -> usize {
    let payload = wire::opt(query).flatten().map(|opt| opt.payload);
    wire::Proto::Udp.reply_limit(payload)
}

async fn udp(endpoint: SocketAddr, query: &[u8]) -> Result<Vec<u8>, AttemptError> {
    let (msg, id) = stamped(query)?;
    let socket = connected_udp(endpoint)?;
    socket.send(&msg)?;
    // Registered for readability and errors only (an ICMP "port unreachable" is an error
    // event, and answers at once as connection refused); a send never wakes the task.
    let interest = Interest::READABLE | Interest::ERROR;
    #[allow(deprecated)] // Sound here: the AsyncFd owns the socket (see server::udp).
    let socket = AsyncFd::with_interest(socket, interest)?;
    let mut buf = vec![0u8; advertised_size(&msg)];
    loop {
        let mut ready = socket.ready(interest).await?;
        let len = match ready.try_io(|socket| socket.get_ref().recv(&mut buf)) {
            Ok(received) => received?,
            Err(_would_block) => continue,
        };
        let reply = &buf[..len];
        if acceptable(reply, id, &msg) {
            return Ok(reply.to_vec());
        }
        tracing::debug!(%endpoint, "ignored a datagram with the wrong ID or question");
    }
}

/// A non-blocking UDP socket connected to `endpoint`, so the kernel drops datagrams from any
/// other source. Connecting an unbound socket binds it to a random ephemeral port (RFC 5452's
/// source port randomisation) in the same system call. Failing to make one is a local error.
fn connected_udp(endpoint: SocketAddr) -> Result<std::net::UdpSocket, AttemptError> {
    let socket = Socket::new(
        Domain::for_address(endpoint),
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )
    .map_err(|error| AttemptError::Local(error.to_string()))?;
    socket.connect(&endpoint.into())?;
    Ok(socket.into())
}

async fn tcp(endpoint: SocketAddr, query: &[u8]) -> Result<Vec<u8>, AttemptError> {
    let (msg, id) = stamped(query)?;
    let stream = TcpStream::connect(endpoint).await?;
    stream.set_nodelay(true)?;
    let mut framed = Framed::new(stream, wire::tcp_codec(wire::MAX_MESSAGE));
    framed.send(Bytes::copy_from_slice(&msg)).await?;
    while let Some(frame) = framed.next().await {
        let reply = frame?;
        if acceptable(&reply, id, &msg) {
            return Ok(reply.to_vec());
        }
        tracing::debug!(%endpoint, "ignored a TCP message with the wrong ID or question");
    }
    Err(AttemptError::Network(
        "connection closed before the reply".into(),
    ))
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, Query, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn query() -> Vec<u8> {
        let mut msg = Message::query();
        msg.add_query(Query::query(
            Name::from_ascii("www.example.org.").unwrap(),
            RecordType::A,
        ));
        msg.to_vec().unwrap()
    }

    fn error_without_question(sent: &[u8], rcode: ResponseCode) -> Vec<u8> {
        let mut reply = Message::error_msg(0, hickory_proto::op::OpCode::Query, rcode);
        reply.metadata.id = wire::id(sent).unwrap();
        reply.to_vec().unwrap()
    }

    #[test]
    fn an_error_reply_without_a_question_is_an_answer() {
        let sent = query();
        let id = wire::id(&sent).unwrap();
        for rcode in [ResponseCode::Refused, ResponseCode::FormErr] {
            assert!(acceptable(&error_without_question(&sent, rcode), id, &sent));
        }
        // A NOERROR reply must echo the question.
        assert!(!acceptable(
            &error_without_question(&sent, ResponseCode::NoError),
            id,
            &sent
        ));
        assert!(!acceptable(
            &error_without_question(&sent, ResponseCode::Refused),
            id.wrapping_add(1),
            &sent
        ));
    }

    #[test]
    fn running_out_of_descriptors_or_buffers_is_a_local_error() {
        for errno in [24, 23, 105, 12] {
            let error = AttemptError::from(std::io::Error::from_raw_os_error(errno));
            assert!(matches!(error, AttemptError::Local(_)), "{errno}: {error}");
        }
        let refused = AttemptError::from(std::io::Error::from(ErrorKind::ConnectionRefused));
        assert!(matches!(refused, AttemptError::Network(_)));
    }

    #[test]
    fn replies_are_received_into_what_the_query_advertised() {
        assert_eq!(advertised_size(&query()), 512);
        let mut msg = Message::from_vec(&query()).unwrap();
        let mut edns = hickory_proto::op::Edns::new();
        edns.set_max_payload(1232);
        msg.set_edns(edns);
        assert_eq!(advertised_size(&msg.to_vec().unwrap()), 1232);
    }
}
