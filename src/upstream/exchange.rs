//! One attempt at one endpoint: UDP with a fresh random ID from a fresh random source port
//! (a connected socket, so the kernel drops datagrams from other sources), or a query over the
//! endpoint's pipelined stream (the `stream` module: TCP or TLS) — either because the cluster
//! is configured for it or because the UDP reply was truncated.
//!
//! A reply is accepted only as the `accept` module says (our ID, opcode and question, and a
//! message that walks fully). Anything else on the socket is ignored, and the attempt keeps
//! listening until its deadline: a spoofed datagram, or a malformed reply (a
//! compression-pointer loop in an owner name), cannot cut the real answer short, and is never
//! relayed or cached. Over TCP and TLS the stream holds each query until a frame passes the
//! same check.
//!
//! Memory per attempt is what its messages need: a UDP reply is received, once readiness says
//! it is there, into its thread's receive buffer, at most the size the query advertised (512
//! without EDNS), and copied out at its exact length (a waiting attempt holds no buffer, and
//! a reply none with slack); a reply over a stream
//! grows as its bytes arrive, up to what its length prefix announces. A UDP reply larger than
//! the query allowed (a peer that ignores the advertised size) is taken as truncated and asked
//! again over TCP, not dropped as unreadable.
//!
//! An attempt's future is kept small: every miss in flight holds one inline in its exchange,
//! and a miss whose endpoint is silent a second in the box of its retry (flood (b) of the
//! bench keeps a thousand such misses waiting). So the exchange over a stream — the TCP fetch
//! after a truncated reply, an attempt over TCP or TLS — is boxed when it is made instead of
//! being room in every UDP attempt, a send's time is kept as an offset from the first, and
//! the UDP attempt and its TCP fetch are one future, not one nested in the other (each level
//! keeps its own copy of the arguments). From 912 to 584 bytes (release build).
//!
//! A UDP query not answered within the endpoint's retransmission timeout (its health record's
//! `rto`) is sent again on the same socket, each send with an ID of its own, up to the sends
//! the exchange allows it: a late reply to an earlier send is still accepted (the first valid
//! reply wins), and the reply is timed from the send whose ID it carries, so every answer is
//! an unambiguous round-trip sample. Each timeout backs the endpoint's timer off. A blind
//! spoofer then has as many IDs to hit as there were sends (at most four) instead of one,
//! still behind the random source port of a connected socket.
//!
//! System calls per UDP attempt are few: the socket is made non-blocking in one call,
//! connected (which also binds the random port) in one, registered for readability only (a
//! send wakes nothing), and read only once readiness says a datagram is there. An attempt keeps
//! no timer of its own (each timer registered costs the runtime a wake-up): it says when it
//! wants to resend in its [`ResendAt`], and the exchange that polls it wakes it then with the
//! one timer the exchange has anyway.
//!
//! It owns one attempt: its socket, its sends and the reply it takes. Which endpoint is asked
//! and when the exchange gives up are the `failover` module's; the endpoint's health record is
//! lent to it, to read the retransmission timeout from and to back it off.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use prometheus::IntCounter;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::MAX_RETRANSMITS;
use super::accept::{Refused, answers, check};
use super::health::Health;
use super::marker::Marked;
use super::stream::{StreamEndpoint, StreamError};
use crate::wire;

/// An accepted reply, still carrying the ID we chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answered {
    pub(crate) bytes: Vec<u8>,
    pub(crate) endpoint: SocketAddr,
    /// The round trip of the send it answers, when timed (UDP replies).
    pub(crate) rtt: Option<Duration>,
    /// The UDP reply came truncated and `bytes` are the whole answer, fetched again over TCP:
    /// the `truncated` module remembers the question.
    pub(crate) fetched_after_tc: bool,
}

/// How a UDP attempt sends its query again while no reply comes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resend<'a> {
    /// Sends in all, the first included (1: never sent again).
    pub(crate) sends: u32,
    /// The endpoint's record: the wait before each resend, told of each timeout.
    pub(crate) health: &'a Health,
    /// The longest wait (the attempt timeout).
    pub(crate) ceiling: Duration,
    /// Counts each resend (`meshdns_upstream_retransmits_total`).
    pub(crate) counter: &'a IntCounter,
    /// Where the attempt tells its exchange when it wants to be polled to resend.
    pub(crate) due: &'a ResendAt,
}

/// When a UDP attempt next wants to send its query again, if ever: written by the attempt, read
/// by the exchange that polls it, whose single timer then wakes both (see the module
/// documentation). An attempt polled by anything else must not be allowed to resend.
#[derive(Debug, Default)]
pub(super) struct ResendAt(Mutex<Option<Instant>>);

impl ResendAt {
    pub(super) fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn set(&self, at: Option<Instant>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

/// Ready once `at` has passed. It registers no timer and no waker: the exchange's timer, set
/// to the attempt's [`ResendAt`], wakes the task that polls it.
async fn reached(at: Instant) {
    poll_fn(|_| {
        if Instant::now() >= at {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AttemptError {
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

/// Asks `endpoint` over UDP, sending again as `resend` allows, and listens for the reply for
/// as long as the caller keeps the future: the exchange that runs it decides when to try
/// another endpoint and drops it at the query's deadline. A truncated reply is fetched again
/// over the endpoint's TCP connection `tcp`, for at most the resend ceiling (the attempt
/// timeout); if that fails the truncated reply is returned (it is still an answer, and the
/// cache never stores it).
pub(super) async fn udp_then_tcp(
    endpoint: SocketAddr,
    tcp: &StreamEndpoint,
    query: &Marked,
    resend: Resend<'_>,
) -> Result<Answered, AttemptError> {
    let limit = query.advertised();
    let query = query.bytes();
    wire::first_question(query).ok_or(AttemptError::BadQuery)?;
    let id = rand::random::<u16>();
    // The attempt's own copy of the query, stamped with each send's ID. Sending the client's
    // bytes from two pieces (the ID, the rest) instead saves this allocation, but was
    // measured to cost memory: with glibc, RSS with 10,000 cached names rose from 8.7–9.1 to
    // 12–20 MiB (the bench's `hits` group, 2026-12-02), the heap fragmenting around the
    // cache's answers; why this small block prevents that is not understood.
    let mut msg = query.to_vec();
    wire::set_id(&mut msg, id);
    let socket = connected_udp(endpoint)?;
    socket.send(&msg)?;
    // The ID and time of every send, the first included: the first `made` of room for as
    // many as the exchange may make (`resend.sends`, at most one per retransmission).
    let first_sent = Instant::now();
    let mut sent = [Sent { id, after_us: 0 }; 1 + MAX_RETRANSMITS as usize];
    let mut made = 1;
    let sends = sent.len().min(resend.sends as usize);
    // Registered for readability and errors only (an ICMP "port unreachable" is an error
    // event, and answers at once as connection refused); a send never wakes the task.
    let interest = Interest::READABLE | Interest::ERROR;
    #[allow(deprecated)] // Sound here: the AsyncFd owns the socket (see server::udp).
    let socket = AsyncFd::with_interest(socket, interest)?;
    let (reply, at) = loop {
        // No resend once the attempt timeout is reached: the exchange asks again then.
        let resend_at = (made < sends)
            .then(|| sent[made - 1].at(first_sent) + resend.health.rto(resend.ceiling))
            .filter(|at| *at < first_sent + resend.ceiling);
        resend.due.set(resend_at);
        let mut ready = tokio::select! {
            ready = socket.ready(interest) => ready?,
            () = reached(resend_at.unwrap_or_else(Instant::now)), if resend_at.is_some() => {
                resend.health.timed_out();
                resend.counter.inc();
                let id = fresh_id(&sent[..made]);
                wire::set_id(&mut msg, id);
                if let Err(error) = socket.get_ref().send(&msg) {
                    // A datagram that did not go out (a local firewall's EPERM, a full send
                    // buffer) is one more lost: the earlier sends may still be answered.
                    tracing::debug!(%endpoint, %error, "a retransmission could not be sent");
                }
                sent[made] = Sent::now(id, first_sent);
                made += 1;
                continue;
            }
        };
        let received = ready.try_io(|socket| {
            RECEIVED.with_borrow_mut(|buf| {
                let len = socket.get_ref().recv(receive_room(buf, limit))?;
                Ok(judge(&buf[..len], limit, &sent[..made], query, endpoint))
            })
        });
        let verdict = match received {
            Ok(verdict) => verdict?,
            Err(_would_block) => continue,
        };
        if let Some((reply, sent)) = verdict {
            break (reply, sent.at(first_sent));
        }
    };
    let rtt = at.elapsed();
    // The socket closes, and nothing is resent from here on (a TCP retry is not), whatever
    // the exchange waits for.
    drop((socket, msg));
    resend.due.set(None);
    if !wire::is_truncated(&reply) {
        return Ok(Answered {
            bytes: reply,
            endpoint,
            rtt: Some(rtt),
            fetched_after_tc: false,
        });
    }
    // Boxed, and only now: most attempts never fetch over TCP, and room for it in every
    // attempt's future would be carried by every miss in flight (see the module documentation).
    Box::pin(fetch_after_tc(
        endpoint,
        tcp,
        query,
        reply,
        rtt,
        resend.ceiling,
    ))
    .await
}

/// The whole answer to `query`, whose UDP reply `truncated` came cut (timed at `rtt`), asked
/// again over the endpoint's TCP connection for at most `ceiling`; the truncated reply if
/// that fails (it is still an answer, and the cache never stores it).
async fn fetch_after_tc(
    endpoint: SocketAddr,
    tcp: &StreamEndpoint,
    query: &[u8],
    truncated: Vec<u8>,
    rtt: Duration,
    ceiling: Duration,
) -> Result<Answered, AttemptError> {
    // A trickling TCP peer must not hold the truncated answer back until the deadline.
    let retry_deadline = Instant::now() + ceiling;
    match over_stream(tcp, query, retry_deadline).await {
        Ok(full) => Ok(Answered {
            rtt: Some(rtt),
            fetched_after_tc: true,
            ..full
        }),
        Err(error) => {
            tracing::debug!(%endpoint, %error, "TCP retry after truncation failed; keeping the truncated reply");
            Ok(Answered {
                bytes: truncated,
                endpoint,
                rtt: Some(rtt),
                fetched_after_tc: false,
            })
        }
    }
}

/// One query over the endpoint's pipelined stream (TCP or TLS): the connection picks the ID,
/// and hands over only a reply that passes the `accept` module's check for the query.
pub(super) async fn over_stream(
    stream: &StreamEndpoint,
    query: &[u8],
    deadline: Instant,
) -> Result<Answered, AttemptError> {
    wire::first_question(query).ok_or(AttemptError::BadQuery)?;
    let reply = stream
        .exchange(query, deadline)
        .await
        .map_err(|error| match error {
            StreamError::Tls(cause) => AttemptError::Tls(cause),
            StreamError::Timeout | StreamError::ConnectTimeout(_) => AttemptError::Timeout,
            StreamError::BadQuery => AttemptError::BadQuery,
            StreamError::Network(cause) => AttemptError::Network(cause),
        })?;
    Ok(Answered {
        bytes: reply,
        endpoint: stream.addr(),
        rtt: None,
        fetched_after_tc: false,
    })
}

/// One send of a UDP query: its ID, and when it went out, in microseconds after the attempt's
/// first send — 8 bytes where an `Instant` alone takes 16 (the attempt's future is carried by
/// every miss in flight; see the module documentation).
#[derive(Debug, Clone, Copy)]
struct Sent {
    id: u16,
    after_us: u32,
}

impl Sent {
    /// A send of `id` now, in an attempt whose first send went out at `first`.
    fn now(id: u16, first: Instant) -> Self {
        let after_us = u32::try_from(first.elapsed().as_micros()).unwrap_or(u32::MAX);
        Self { id, after_us }
    }

    /// When it went out.
    fn at(self, first: Instant) -> Instant {
        first + Duration::from_micros(self.after_us.into())
    }
}

thread_local! {
    /// Where this thread receives UDP replies, before one is copied out at its length. One
    /// buffer per thread instead of one per reply (a zeroed allocation of what the query
    /// advertised, and its free: about 600 instructions a miss), grown to the largest size a
    /// query advertised here; an attempt that waits holds none.
    static RECEIVED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The room to receive a reply to a query that advertised `limit` bytes: one byte more, so a
/// reply that breaks the limit shows it.
fn receive_room(buf: &mut Vec<u8>, limit: usize) -> &mut [u8] {
    if buf.len() <= limit {
        buf.resize(limit + 1, 0);
    }
    &mut buf[..=limit]
}

/// What a datagram received by an attempt is: the reply to keep and the send it answers, or
/// `None` when it is not ours (another ID, the wrong question) or does not walk fully, and the
/// attempt listens on. A reply larger than `limit` (the kernel cut the rest off) is taken as
/// truncated, so the caller asks over TCP.
fn judge(
    reply: &[u8],
    limit: usize,
    sent: &[Sent],
    query: &[u8],
    endpoint: SocketAddr,
) -> Option<(Vec<u8>, Sent)> {
    // The send this reply names; any other ID is not ours.
    let Some(send) = wire::id(reply).and_then(|got| sent.iter().copied().find(|s| s.id == got))
    else {
        tracing::debug!(%endpoint, "ignored a datagram with the wrong ID");
        return None;
    };
    let cut = reply.len() > limit;
    // Cut by the kernel, it cannot walk: only its header and question are judged.
    let verdict = if cut {
        (answers(reply, send.id, query).then_some(())).ok_or(Refused::NotAnAnswer)
    } else {
        check(reply, send.id, query)
    };
    if let Err(refused) = verdict {
        tracing::debug!(%endpoint, "ignored a datagram that {refused}");
        return None;
    }
    if cut {
        tracing::debug!(%endpoint, limit, "a UDP reply larger than the query allows");
        return Some((wire::cut_to_question(reply), send));
    }
    Some((reply.to_vec(), send))
}

/// A random ID none of `sent` carries: each send of a query has its own, so a reply names the
/// send it answers.
fn fresh_id(sent: &[Sent]) -> u16 {
    loop {
        let id = rand::random::<u16>();
        if sent.iter().all(|used| used.id != id) {
            return id;
        }
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures_util::{SinkExt, StreamExt};
    use hickory_proto::op::Message;
    use tokio_util::codec::Framed;

    use super::*;
    use crate::upstream::accept::tests::query;

    #[test]
    fn running_out_of_descriptors_or_buffers_is_a_local_error() {
        for errno in [24, 23, 105, 12] {
            let error = AttemptError::from(std::io::Error::from_raw_os_error(errno));
            assert!(matches!(error, AttemptError::Local(_)), "{errno}: {error}");
        }
        let refused = AttemptError::from(std::io::Error::from(ErrorKind::ConnectionRefused));
        assert!(matches!(refused, AttemptError::Network(_)));
    }

    /// A reply to `request` with `count` A records: 60 make it larger than 512 bytes.
    fn answer(request: &[u8], count: u8) -> Vec<u8> {
        use hickory_proto::rr::rdata::A;
        use hickory_proto::rr::{RData, Record};
        let request = Message::from_vec(request).unwrap();
        let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
        reply.queries = request.queries.clone();
        let name = reply.queries[0].name().clone();
        for i in 0..count {
            let address = RData::A(A::new(192, 0, 2, i));
            reply.add_answer(Record::from_rdata(name.clone(), 60, address));
        }
        reply.to_vec().unwrap()
    }

    /// Asks, over UDP, a peer on 127.0.0.1 that answers every query with 60 A records whatever
    /// size the query advertised, and, when `tcp` is set, a TCP peer on the same port that
    /// answers with 61 (so the test can tell which one answered): the attempt's reply.
    async fn ask_oversized_udp_peer(tcp: bool) -> Vec<u8> {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let peer = udp.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((len, from)) = udp.recv_from(&mut buf).await {
                let _ = udp.send_to(&answer(&buf[..len], 60), from).await;
            }
        });
        if tcp {
            let listener = tokio::net::TcpListener::bind(peer).await.unwrap();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let mut framed = Framed::new(stream, wire::tcp_codec(wire::MAX_MESSAGE));
                    if let Some(Ok(request)) = framed.next().await {
                        let reply = Bytes::from(answer(&request, 61));
                        let _ = framed.send(reply).await;
                    }
                }
            });
        }
        let timeout = Duration::from_secs(5);
        let tcp = StreamEndpoint::tcp(peer, Default::default(), Default::default());
        let (health, counter, due) = (
            Health::default(),
            IntCounter::new("resends", "test").unwrap(),
            ResendAt::default(),
        );
        let resend = Resend {
            sends: 1,
            health: &health,
            ceiling: timeout,
            counter: &counter,
            due: &due,
        };
        tokio::time::timeout(
            timeout,
            udp_then_tcp(peer, &tcp, &Marked::new(&query()), resend),
        )
        .await
        .expect("an answer, not silence until the deadline")
        .unwrap()
        .bytes
    }

    #[tokio::test]
    async fn a_udp_reply_larger_than_advertised_is_fetched_again_over_tcp() {
        let got = ask_oversized_udp_peer(true).await;
        let reply = Message::from_vec(&got).unwrap();
        assert_eq!(reply.answers.len(), 61, "the TCP peer's whole answer");
        assert!(!wire::is_truncated(&got));
    }

    #[tokio::test]
    async fn a_udp_reply_larger_than_advertised_without_tcp_is_a_truncated_answer() {
        let got = ask_oversized_udp_peer(false).await;
        let reply = Message::from_vec(&got).unwrap();
        assert!(
            wire::is_truncated(&got),
            "TC: the client asks again over TCP"
        );
        assert!(reply.answers.is_empty(), "nothing partial");
        assert_eq!(reply.queries, Message::from_vec(&query()).unwrap().queries);
    }
}
