//! Upstreams: a named group of DNS endpoints (kube-dns, or one peer cluster's exposed CoreDNS)
//! and the one operation the rest of meshdns needs from them, [`Upstream::exchange`].
//!
//! An exchange sends a query to the group's endpoints one after another — healthy endpoints
//! first — until one gives an acceptable reply or the query's deadline passes. An attempt that
//! has not been answered within the attempt timeout does not stop listening: the next endpoint
//! is asked as well, and whichever answers first wins, so a reply that arrives just late is
//! still used. "Acceptable" is decided in the `exchange` module: from the endpoint we asked,
//! with the fresh random ID we chose, for the question we sent, with records that can be
//! walked. Endpoints that keep failing are skipped until a background probe sees them answer
//! again (the `health` module).
//!
//! Every attempt is counted in `meshdns_upstream_requests_total` and timed in
//! `meshdns_upstream_duration_seconds`; failures and health changes are logged at most once
//! per endpoint every 10 s (the `log_limit` module).

mod exchange;
mod health;
mod log_limit;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};

use crate::config::Transport;
use crate::metrics::{self, UpstreamMetrics, UpstreamResult};
use exchange::{AttemptError, attempt};
use health::Health;
use log_limit::LogLimit;

pub use exchange::Answered;

/// Why no acceptable reply came.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("no endpoint answered before the deadline (last: {0})")]
    Exhausted(AttemptError),
    #[error("the deadline had already passed")]
    NoTime,
}

/// One endpoint and what we know of its health.
#[derive(Debug)]
struct Endpoint {
    addr: SocketAddr,
    health: Health,
    /// `meshdns_upstream_healthy{cluster,endpoint}`.
    healthy: IntGauge,
    /// Warnings about failed attempts.
    failure_log: LogLimit,
    /// Lines about the endpoint going down or up (a flapping endpoint must not flood either).
    health_log: LogLimit,
}

impl Endpoint {
    /// Records that the endpoint answered; logs and sets the gauge when it was down.
    fn answered(&self, upstream: &str) {
        if self.health.record_success() {
            self.healthy.set(1);
            if let Some(suppressed) = self.health_log.check() {
                tracing::info!(%upstream, endpoint = %self.addr, suppressed, "endpoint answers again; marked up");
            }
        }
    }
}

/// A finished attempt: its number in this exchange, the endpoint, when it began, the outcome.
type AttemptDone = (
    usize,
    Arc<Endpoint>,
    Instant,
    Result<Answered, AttemptError>,
);

/// A group of interchangeable endpoints.
#[derive(Debug)]
pub struct Upstream {
    /// The cluster name, or `local` for kube-dns without a local cluster name: a metric label.
    name: String,
    endpoints: Vec<Arc<Endpoint>>,
    transport: Transport,
    attempt_timeout: Duration,
    metrics: UpstreamMetrics,
}

impl Upstream {
    pub fn new(
        name: &str,
        addrs: &[SocketAddr],
        transport: Transport,
        attempt_timeout: Duration,
    ) -> Self {
        Self {
            name: name.to_string(),
            endpoints: addrs
                .iter()
                .map(|&addr| {
                    Arc::new(Endpoint {
                        addr,
                        health: Health::default(),
                        healthy: metrics::endpoint_health(name, &addr.to_string()),
                        failure_log: LogLimit::default(),
                        health_log: LogLimit::default(),
                    })
                })
                .collect(),
            transport,
            attempt_timeout,
            metrics: UpstreamMetrics::new(name),
        }
    }

    /// The name used in logs and metric labels.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `query` (a complete message; its ID is replaced per attempt) until an endpoint
    /// answers it or `deadline` passes. The reply keeps the upstream's ID: the caller restores
    /// its client's.
    pub async fn exchange(
        &self,
        query: &[u8],
        deadline: Instant,
    ) -> Result<Answered, UpstreamError> {
        let mut order: Vec<&Arc<Endpoint>> = self.endpoints.iter().collect();
        // Healthy endpoints first, in configuration order; down ones stay as a last resort
        // so that a group whose every endpoint is marked down is still tried.
        order.sort_by_key(|e| !e.health.is_up());
        let mut next = order
            .into_iter()
            .cycle()
            .take(self.max_attempts(deadline))
            .enumerate();
        let query: Arc<[u8]> = Arc::from(query);
        // Attempts still listening; dropping the set (on return) stops them.
        let mut running: JoinSet<AttemptDone> = JoinSet::new();
        // Attempts already counted as timed out when the next endpoint was asked.
        let mut overdue: Vec<usize> = Vec::new();
        let mut last_error = None;
        while Instant::now() < deadline {
            let started = Instant::now();
            let launched = next.next().map(|(number, endpoint)| {
                let (asked, query, transport, attempt_timeout) = (
                    Arc::clone(endpoint),
                    Arc::clone(&query),
                    self.transport,
                    self.attempt_timeout,
                );
                running.spawn(async move {
                    let outcome =
                        attempt(asked.addr, &query, transport, attempt_timeout, deadline).await;
                    (number, asked, started, outcome)
                });
                (number, Arc::clone(endpoint))
            });
            if launched.is_none() && running.is_empty() {
                break;
            }
            let ask_next_at = match launched {
                Some(_) => deadline.min(started + self.attempt_timeout),
                None => deadline,
            };
            loop {
                tokio::select! {
                    Some(joined) = running.join_next() => {
                        let Ok((number, endpoint, began, outcome)) = joined else { continue };
                        match outcome {
                            Ok(answered) => {
                                self.metrics.record(UpstreamResult::of_reply(&answered.bytes), began.elapsed());
                                endpoint.answered(&self.name);
                                return Ok(answered);
                            }
                            Err(error) => {
                                if !overdue.contains(&number) {
                                    self.attempt_failed(&endpoint, &error, began);
                                }
                                last_error = Some(error);
                                // A quick failure (refused, unreachable): ask the next one now.
                                break;
                            }
                        }
                    }
                    () = sleep_until(ask_next_at) => {
                        if let Some((number, endpoint)) = &launched {
                            overdue.push(*number);
                            self.attempt_failed(endpoint, &AttemptError::Timeout, started);
                            last_error = Some(AttemptError::Timeout);
                        }
                        break;
                    }
                }
            }
        }
        Err(last_error.map_or(UpstreamError::NoTime, UpstreamError::Exhausted))
    }

    /// Counts a failed (or overdue) attempt, updates the endpoint's health and logs, rate
    /// limited.
    fn attempt_failed(&self, endpoint: &Arc<Endpoint>, error: &AttemptError, began: Instant) {
        let result = match error {
            AttemptError::Timeout => UpstreamResult::Timeout,
            AttemptError::Network(_) | AttemptError::BadQuery => UpstreamResult::Error,
        };
        self.metrics.record(result, began.elapsed());
        tracing::debug!(upstream = %self.name, endpoint = %endpoint.addr, %error, "attempt failed");
        if endpoint.health.record_failure() {
            endpoint.healthy.set(0);
            if let Some(suppressed) = endpoint.health_log.check() {
                tracing::warn!(upstream = %self.name, endpoint = %endpoint.addr, %error, suppressed, "endpoint marked down; probing it in the background");
            }
            health::spawn_probe(
                Arc::clone(endpoint),
                self.name.clone(),
                self.attempt_timeout,
            );
        } else if let Some(suppressed) = endpoint.failure_log.check() {
            tracing::warn!(upstream = %self.name, endpoint = %endpoint.addr, %error, suppressed, "upstream attempt failed");
        }
    }

    /// Enough attempts to fill the time left, going round the endpoints; failures that come
    /// back at once (connection refused) must not spin, so the count is bounded.
    fn max_attempts(&self, deadline: Instant) -> usize {
        let left = deadline.saturating_duration_since(Instant::now());
        let per_attempt = self.attempt_timeout.max(Duration::from_millis(1));
        let rounds = usize::try_from(left.as_millis() / per_attempt.as_millis())
            .unwrap_or(usize::MAX)
            .max(1);
        rounds
            .max(self.endpoints.len())
            .min(self.endpoints.len() * 4)
    }
}
