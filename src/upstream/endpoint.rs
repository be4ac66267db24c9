//! One endpoint of an upstream group and what meshdns knows of it: its health, its
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
//! and its connection and its gauge go with it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::time::Instant;

use super::exchange::{Answered, AttemptError, over_stream, udp_then_tcp};
use super::log_limit::LogLimit;
use super::series::HealthSeries;
use super::stream::StreamEndpoint;
use crate::background::{Background, Owner};

/// Failures in a row after which an endpoint is considered down (CoreDNS forward uses 3 too).
const FAILURES_UNTIL_DOWN: u32 = 3;

/// How often a down endpoint is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How an endpoint is asked.
#[derive(Debug)]
pub enum Dialer {
    /// A fresh UDP socket per attempt; a truncated reply is asked again over the endpoint's
    /// one pipelined TCP connection.
    Udp { tcp: StreamEndpoint },
    /// Its one pipelined connection, over TCP or TLS.
    Stream(StreamEndpoint),
    /// Cannot be asked (a TLS endpoint without what TLS needs): every attempt fails, saying why.
    Unusable(String),
}

/// One endpoint of a group.
#[derive(Debug)]
pub struct Endpoint {
    pub addr: SocketAddr,
    dialer: Dialer,
    consecutive_failures: AtomicU32,
    down: AtomicBool,
    /// A probe task is running for this endpoint.
    probing: AtomicBool,
    /// `meshdns_upstream_healthy{cluster,endpoint}`, removed with the endpoint.
    healthy: HealthSeries,
    /// Warnings about failed attempts.
    failure_log: LogLimit,
    /// Lines about the endpoint going down or up (a flapping endpoint must not flood either).
    health_log: LogLimit,
    /// Ends the endpoint's probe when the endpoint is dropped (or its group is).
    owner: Owner,
}

impl Endpoint {
    /// An endpoint considered up, whose work ends with `owner`.
    pub fn new(addr: SocketAddr, dialer: Dialer, healthy: HealthSeries, owner: Owner) -> Self {
        Self {
            addr,
            dialer,
            consecutive_failures: AtomicU32::new(0),
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            healthy,
            failure_log: LogLimit::default(),
            health_log: LogLimit::default(),
            owner,
        }
    }

    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// One attempt at this endpoint over the group's transport, until it answers or fails, or
    /// the caller drops it (UDP attempts keep no timer; a stream exchange gives its query slot
    /// back at `deadline`).
    pub async fn attempt(
        &self,
        query: &[u8],
        attempt_timeout: Duration,
        deadline: Instant,
    ) -> Result<Answered, AttemptError> {
        match &self.dialer {
            Dialer::Udp { tcp } => udp_then_tcp(self.addr, tcp, query, attempt_timeout).await,
            Dialer::Stream(stream) => over_stream(stream, query, deadline).await,
            Dialer::Unusable(why) => Err(AttemptError::Tls(why.clone())),
        }
    }

    /// Records that the endpoint answered; logs and sets the gauge when it was down.
    pub fn answered(&self, upstream: &str) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if self.down.swap(false, Ordering::Relaxed) {
            self.healthy.set(true);
            if let Some(suppressed) = self.health_log.check() {
                tracing::info!(%upstream, endpoint = %self.addr, suppressed, "endpoint answers again; marked up");
            }
        }
    }

    /// Records a failed attempt (a local error is logged, not counted) and, once the endpoint
    /// is down, makes sure a probe is running for it.
    pub fn failed(
        self: &Arc<Self>,
        upstream: &str,
        error: &AttemptError,
        attempt_timeout: Duration,
        background: &Background,
    ) {
        if matches!(error, AttemptError::Local(_)) {
            if let Some(suppressed) = self.failure_log.check() {
                tracing::warn!(%upstream, endpoint = %self.addr, %error, suppressed, "attempt not made: meshdns is short of a resource; the endpoint's health is unchanged");
            }
            return;
        }
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let newly_down =
            failures >= FAILURES_UNTIL_DOWN && !self.down.swap(true, Ordering::Relaxed);
        if newly_down {
            self.healthy.set(false);
            if let Some(suppressed) = self.health_log.check() {
                tracing::warn!(%upstream, endpoint = %self.addr, %error, suppressed, "endpoint marked down; probing it in the background");
            }
        } else if let Some(suppressed) = self.failure_log.check() {
            tracing::warn!(%upstream, endpoint = %self.addr, %error, suppressed, "upstream attempt failed");
        }
        if !self.is_up() && !self.probing.swap(true, Ordering::Relaxed) {
            let probe = Self::probe(Arc::downgrade(self), upstream.to_string(), attempt_timeout);
            if !background.spawn_owned(&self.owner, probe) {
                // The set is full: the next failure tries again.
                self.probing.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Probes with `. NS` every [`PROBE_INTERVAL`] until the endpoint answers (any rcode: it
    /// is alive), then marks it up. Holds the endpoint only during an attempt: once the
    /// endpoint is gone, the probe ends (its owner also ends it at once).
    async fn probe(endpoint: Weak<Self>, upstream: String, attempt_timeout: Duration) {
        let mut probe = Message::query();
        probe.add_query(Query::query(Name::root(), RecordType::NS));
        let Ok(probe) = probe.to_vec() else { return };
        loop {
            tokio::time::sleep(PROBE_INTERVAL).await;
            let Some(endpoint) = endpoint.upgrade() else {
                return;
            };
            if !endpoint.is_up() {
                let deadline = Instant::now() + attempt_timeout;
                let attempt = endpoint.attempt(&probe, attempt_timeout, deadline);
                if tokio::time::timeout_at(deadline, attempt)
                    .await
                    .is_ok_and(|outcome| outcome.is_ok())
                {
                    endpoint.answered(&upstream);
                }
            }
            if endpoint.is_up() {
                endpoint.probing.store(false, Ordering::Relaxed);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::background::BackgroundMetrics;
    use crate::upstream::series;

    fn endpoint() -> Arc<Endpoint> {
        let addr = "127.0.0.1:9".parse().unwrap();
        Arc::new(Endpoint::new(
            addr,
            Dialer::Unusable("a unit test's endpoint".into()),
            series::tests::metrics().endpoint("a", addr),
            Owner::default(),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn the_probe_of_a_down_endpoint_ends_when_the_endpoint_is_dropped() {
        let endpoint = endpoint();
        let metrics = BackgroundMetrics::unregistered();
        let background = Background::with_metrics(4, metrics.clone());
        for _ in 0..FAILURES_UNTIL_DOWN {
            endpoint.failed(
                "a",
                &AttemptError::Timeout,
                Duration::from_millis(10),
                &background,
            );
        }
        assert!(!endpoint.is_up());
        assert_eq!(metrics.tasks.get(), 1, "a probe runs");
        // Probing an address where nothing answers (port 9, discard) for a while.
        tokio::time::sleep(PROBE_INTERVAL * 3).await;
        assert_eq!(metrics.tasks.get(), 1, "still probing");
        assert_eq!(
            Arc::strong_count(&endpoint),
            1,
            "the probe does not hold the endpoint"
        );
        drop(endpoint);
        tokio::task::yield_now().await;
        assert_eq!(metrics.tasks.get(), 0, "the probe ended with its endpoint");
    }

    #[tokio::test(start_paused = true)]
    async fn three_failures_mark_down_once_and_an_answer_marks_up() {
        let endpoint = endpoint();
        let background = Background::new(4);
        let timeout = AttemptError::Timeout;
        for _ in 0..2 {
            endpoint.failed("a", &timeout, Duration::from_millis(10), &background);
            assert!(endpoint.is_up());
        }
        endpoint.failed("a", &timeout, Duration::from_millis(10), &background);
        assert!(!endpoint.is_up());
        assert_eq!(endpoint.healthy.get(), 0);
        assert_eq!(background.len(), 1, "one probe");
        endpoint.failed("a", &timeout, Duration::from_millis(10), &background);
        assert_eq!(background.len(), 1, "still one probe");
        endpoint.answered("a");
        assert!(endpoint.is_up());
        assert_eq!(endpoint.healthy.get(), 1);
        background.close();
    }

    #[tokio::test(start_paused = true)]
    async fn local_errors_never_mark_an_endpoint_down() {
        let endpoint = endpoint();
        let background = Background::new(4);
        let local = AttemptError::Local("Too many open files".into());
        for _ in 0..10 {
            endpoint.failed("a", &local, Duration::from_millis(10), &background);
        }
        assert!(endpoint.is_up());
        assert!(background.is_empty());
    }
}
