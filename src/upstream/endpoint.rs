//! One endpoint of an upstream group and what meshdns knows of it: its health record (the
//! `health` module: answered or failed, down until probed, its round-trip estimate), its
//! `meshdns_upstream_healthy` gauge, its rate-limited log lines, and the probe that brings it
//! back once it is marked down.
//!
//! Consecutive failures mark an endpoint down; a background probe (`. NS`, over the group's
//! own transport) marks it up again when it answers, whatever the rcode. Down endpoints are
//! tried last, never dropped, so a wrong verdict cannot make a cluster unreachable. Local
//! resource errors never count against an endpoint: they are meshdns's own.
//!
//! The probe lives no longer than its endpoint: it holds only a `Weak` reference to it and
//! runs under the endpoint's [`Owner`], so an endpoint that leaves its group (a reload, a host
//! name re-resolved away, a TLS rotation that replaces the group) stops being probed at once,
//! and its connection and its gauge go with it. It is never refused: it runs on a task of its
//! own, not in the bounded background set (one probe per endpoint, so the configuration bounds
//! them), since a refused probe would leave its endpoint down for good.
//!
//! It owns what is known of one endpoint and acts on the health record's verdicts (the gauge,
//! the log line, the probe); which endpoint an exchange asks, and when, is the `failover`
//! module's, and the bytes on the wire are the `exchange` and `stream` modules'.

use std::future::{Future, ready};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::Either;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use prometheus::IntCounter;
use tokio::time::Instant;

use super::exchange::{Answered, AttemptError, Resend, ResendAt, over_stream, udp_then_tcp};
use super::health::{Health, Verdict};
use super::log_limit::LogLimit;
use super::marker::Marked;
use super::series::HealthSeries;
use super::stream::StreamEndpoint;
use crate::background::Owner;

/// How often a down endpoint is probed.
pub(super) const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How an endpoint is asked.
#[derive(Debug)]
pub(super) enum Dialer {
    /// A fresh UDP socket per attempt; a truncated reply is asked again over the endpoint's
    /// one pipelined TCP connection.
    Udp { tcp: StreamEndpoint },
    /// Its one pipelined connection, over TCP or TLS.
    Stream(StreamEndpoint),
    /// Cannot be asked (a TLS endpoint without what TLS needs): every attempt fails, saying why.
    Unusable(String),
}

/// An attempt over a stream (or one that fails at once), boxed.
type BoxedAttempt<'a> = Pin<Box<dyn Future<Output = Result<Answered, AttemptError>> + Send + 'a>>;

/// One endpoint of a group.
#[derive(Debug)]
pub(super) struct Endpoint {
    pub(crate) addr: SocketAddr,
    dialer: Dialer,
    health: Health,
    /// `meshdns_upstream_healthy{peer,endpoint}`, removed with the endpoint.
    healthy: HealthSeries,
    /// The group's `meshdns_upstream_retransmits_total` series.
    retransmits: IntCounter,
    /// Warnings about failed attempts.
    failure_log: LogLimit,
    /// Lines about the endpoint going down or up (a flapping endpoint must not flood either).
    health_log: LogLimit,
    /// Ends the endpoint's probe when the endpoint is dropped (or its group is).
    owner: Owner,
}

impl Endpoint {
    /// An endpoint considered up, whose work ends with `owner`, counting its resends into
    /// `retransmits`.
    pub(super) fn new(
        addr: SocketAddr,
        dialer: Dialer,
        healthy: HealthSeries,
        retransmits: IntCounter,
        owner: Owner,
    ) -> Self {
        Self {
            addr,
            dialer,
            health: Health::default(),
            healthy,
            retransmits,
            failure_log: LogLimit::default(),
            health_log: LogLimit::default(),
            owner,
        }
    }

    pub(super) fn is_up(&self) -> bool {
        self.health.is_up()
    }

    /// Whether its last attempt failed.
    pub(super) fn is_failing(&self) -> bool {
        self.health.is_failing()
    }

    /// Its retransmission timeout now, at most `ceiling`.
    pub(super) fn rto(&self, ceiling: Duration) -> Duration {
        self.health.rto(ceiling)
    }

    /// A send to it went unanswered for its retransmission timeout (a hedge was sent).
    pub(super) fn timed_out(&self) {
        self.health.timed_out();
    }

    /// One attempt at this endpoint over the group's transport, until it answers or fails, or
    /// the caller drops it. Over UDP the query is sent up to `sends` times, on the endpoint's
    /// retransmission timer (at most `ceiling` apart): the caller polls the attempt again at
    /// the time it leaves in `due`. A stream exchange sends once and gives its query slot
    /// back at `deadline`. `tcp_first`: a UDP endpoint is asked over its TCP connection at
    /// once (the question's last answer was too big for UDP).
    ///
    /// The future is a UDP attempt's size: an exchange over a stream is boxed when it is made,
    /// so the room for it is not carried by every attempt (see `exchange`'s memory note).
    pub(super) fn attempt<'a>(
        &'a self,
        query: &'a Marked,
        sends: u32,
        ceiling: Duration,
        deadline: Instant,
        due: &'a ResendAt,
        tcp_first: bool,
    ) -> impl Future<Output = Result<Answered, AttemptError>> + Send + 'a {
        match &self.dialer {
            Dialer::Udp { tcp } if !tcp_first => {
                let resend = Resend {
                    sends,
                    health: &self.health,
                    ceiling,
                    counter: &self.retransmits,
                    due,
                };
                Either::Left(udp_then_tcp(self.addr, tcp, query, resend))
            }
            Dialer::Udp { tcp } | Dialer::Stream(tcp) => {
                Either::Right(
                    Box::pin(over_stream(tcp, query.bytes(), deadline)) as BoxedAttempt<'a>
                )
            }
            Dialer::Unusable(why) => {
                let failed = AttemptError::Tls(why.clone());
                Either::Right(Box::pin(ready(Err(failed))) as BoxedAttempt<'a>)
            }
        }
    }

    /// Records that the endpoint answered (in `rtt`, when timed); logs and sets the gauge
    /// when it was down.
    pub(super) fn answered(&self, upstream: &str, rtt: Option<Duration>) {
        if self.health.answered(rtt) {
            self.healthy.set(true);
            if let Some(suppressed) = self.health_log.check() {
                tracing::info!(%upstream, endpoint = %self.addr, suppressed, "endpoint answers again; marked up");
            }
        }
    }

    /// Records a failed attempt (a local error is logged, not counted) and, once the endpoint
    /// is down, makes sure a probe is running for it.
    pub(super) fn failed(
        self: &Arc<Self>,
        upstream: &str,
        error: &AttemptError,
        attempt_timeout: Duration,
    ) {
        if matches!(error, AttemptError::Local(_)) {
            if let Some(suppressed) = self.failure_log.check() {
                tracing::warn!(%upstream, endpoint = %self.addr, %error, suppressed, "attempt not made: meshdns is short of a resource; the endpoint's health is unchanged");
            }
            return;
        }
        if self.health.failed() == Verdict::NowDown {
            self.healthy.set(false);
            if let Some(suppressed) = self.health_log.check() {
                tracing::warn!(%upstream, endpoint = %self.addr, %error, suppressed, "endpoint marked down; probing it in the background");
            }
        } else if let Some(suppressed) = self.failure_log.check() {
            tracing::warn!(%upstream, endpoint = %self.addr, %error, suppressed, "upstream attempt failed");
        }
        if self.health.claim_probe() {
            let probe = Self::probe(Arc::downgrade(self), upstream.to_string(), attempt_timeout);
            self.owner.spawn(probe);
        }
    }

    /// Probes with `. NS` every [`PROBE_INTERVAL`] until the endpoint answers (any rcode: it
    /// is alive), then marks it up. Holds the endpoint only during an attempt: once the
    /// endpoint is gone, the probe ends (its owner also ends it at once).
    async fn probe(endpoint: Weak<Self>, upstream: String, attempt_timeout: Duration) {
        let mut probe = Message::query();
        probe.add_query(Query::query(Name::root(), RecordType::NS));
        let Ok(probe) = probe.to_vec() else { return };
        let probe = Marked::new(&probe);
        loop {
            tokio::time::sleep(PROBE_INTERVAL).await;
            let Some(endpoint) = endpoint.upgrade() else {
                return;
            };
            if !endpoint.is_up() {
                let deadline = Instant::now() + attempt_timeout;
                // One datagram per probe: the interval is its retransmission.
                let never = ResendAt::default();
                let attempt = endpoint.attempt(&probe, 1, attempt_timeout, deadline, &never, false);
                if let Ok(Ok(answered)) = tokio::time::timeout_at(deadline, attempt).await {
                    endpoint.answered(&upstream, answered.rtt);
                }
            }
            if endpoint.is_up() {
                endpoint.health.probe_ended();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::ResponseCode;
    use tokio::net::UdpSocket;

    use super::*;
    use crate::upstream::health::FAILURES_UNTIL_DOWN;
    use crate::upstream::series;

    const ATTEMPT: Duration = Duration::from_millis(100);

    fn endpoint(addr: SocketAddr, dialer: Dialer) -> Arc<Endpoint> {
        let metrics = series::tests::metrics();
        Arc::new(Endpoint::new(
            addr,
            dialer,
            metrics.endpoint("a", addr),
            metrics.retransmits.with_label_values(&["a"]),
            Owner::default(),
        ))
    }

    /// An endpoint asked over UDP at a socket the test reads itself.
    async fn udp_endpoint() -> (Arc<Endpoint>, UdpSocket) {
        let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = peer.local_addr().unwrap();
        let tcp = StreamEndpoint::tcp(addr, Default::default(), Default::default());
        (endpoint(addr, Dialer::Udp { tcp }), peer)
    }

    fn mark_down(endpoint: &Arc<Endpoint>) {
        for _ in 0..FAILURES_UNTIL_DOWN {
            endpoint.failed("a", &AttemptError::Timeout, ATTEMPT);
        }
        assert!(!endpoint.is_up());
        assert_eq!(endpoint.healthy.get(), 0);
    }

    /// The next probe at `peer`, answered REFUSED when `answer` is set.
    async fn next_probe(peer: &UdpSocket, answer: bool) {
        let mut buf = [0u8; 512];
        let (len, from) = tokio::time::timeout(PROBE_INTERVAL * 2, peer.recv_from(&mut buf))
            .await
            .expect("a probe")
            .unwrap();
        let probe = Message::from_vec(&buf[..len]).unwrap();
        assert_eq!(probe.queries[0].query_type(), RecordType::NS);
        if answer {
            let (id, op_code) = (probe.metadata.id, probe.metadata.op_code);
            let mut reply = Message::error_msg(id, op_code, ResponseCode::Refused);
            reply.queries = probe.queries.clone();
            peer.send_to(&reply.to_vec().unwrap(), from).await.unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_down_endpoint_is_probed_until_it_answers_then_marked_up() {
        let (endpoint, peer) = udp_endpoint().await;
        mark_down(&endpoint);
        next_probe(&peer, false).await;
        next_probe(&peer, false).await;
        assert!(!endpoint.is_up(), "no answer yet");
        next_probe(&peer, true).await;
        tokio::time::sleep(ATTEMPT).await;
        assert!(endpoint.is_up());
        assert_eq!(endpoint.healthy.get(), 1);
        endpoint.failed("a", &AttemptError::Timeout, ATTEMPT);
        assert!(endpoint.is_up(), "its failures were forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn the_probe_of_a_down_endpoint_ends_when_the_endpoint_is_dropped() {
        let (endpoint, peer) = udp_endpoint().await;
        mark_down(&endpoint);
        // More failures start no second probe: one probe a second.
        mark_down(&endpoint);
        for _ in 0..3 {
            next_probe(&peer, false).await;
        }
        let before = tokio::time::Instant::now();
        next_probe(&peer, false).await;
        assert!(
            before.elapsed() >= PROBE_INTERVAL - ATTEMPT,
            "one probe at a time"
        );
        // Past the probe's attempt: it waits for the next.
        tokio::time::sleep(ATTEMPT * 2).await;
        assert_eq!(
            Arc::strong_count(&endpoint),
            1,
            "the probe does not hold the endpoint"
        );
        drop(endpoint);
        let mut buf = [0u8; 512];
        let after = tokio::time::timeout(PROBE_INTERVAL * 5, peer.recv_from(&mut buf)).await;
        assert!(after.is_err(), "the probe ended with its endpoint");
    }

    #[tokio::test(start_paused = true)]
    async fn local_errors_never_mark_an_endpoint_down() {
        let addr = "127.0.0.1:9".parse().unwrap();
        let endpoint = endpoint(addr, Dialer::Unusable("a unit test's endpoint".into()));
        let local = AttemptError::Local("Too many open files".into());
        for _ in 0..10 {
            endpoint.failed("a", &local, ATTEMPT);
        }
        assert!(endpoint.is_up());
        assert!(!endpoint.is_failing());
    }
}
