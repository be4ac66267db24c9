//! Endpoint health: consecutive failures mark an endpoint down; a background probe marks it up
//! again when it answers. Down endpoints are tried last, never dropped, so a wrong verdict
//! cannot make a cluster unreachable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::time::Instant;

use super::Endpoint;
use super::exchange::attempt;
use crate::config::Transport;

/// Failures in a row after which an endpoint is considered down (CoreDNS forward uses 3 too).
const FAILURES_UNTIL_DOWN: u32 = 3;

/// How often a down endpoint is probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Health {
    consecutive_failures: AtomicU32,
    down: AtomicBool,
}

impl Health {
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// Returns true when this success brought a down endpoint back.
    pub fn record_success(&self) -> bool {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.down.swap(false, Ordering::Relaxed)
    }

    /// Returns true when this failure marked the endpoint down (exactly once per outage).
    pub fn record_failure(&self) -> bool {
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        failures >= FAILURES_UNTIL_DOWN && !self.down.swap(true, Ordering::Relaxed)
    }
}

/// Probes a down endpoint with `. NS` until it answers (any rcode counts: it is alive), then
/// marks it up. One probe task per outage, because only the failure that marks the endpoint
/// down spawns one.
pub fn spawn_probe(endpoint: Arc<Endpoint>, upstream: String, attempt_timeout: Duration) {
    let mut probe = Message::query();
    probe.add_query(Query::query(Name::root(), RecordType::NS));
    let Ok(probe) = probe.to_vec() else { return };
    tokio::spawn(async move {
        while !endpoint.health.is_up() {
            tokio::time::sleep(PROBE_INTERVAL).await;
            let deadline = Instant::now() + attempt_timeout;
            if attempt(
                endpoint.addr,
                &probe,
                Transport::Udp,
                attempt_timeout,
                deadline,
            )
            .await
            .is_ok()
            {
                endpoint.answered(&upstream);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_failures_mark_down_once_and_a_success_marks_up() {
        let health = Health::default();
        assert!(!health.record_failure());
        assert!(!health.record_failure());
        assert!(health.record_failure());
        assert!(!health.record_failure());
        assert!(!health.is_up());
        assert!(health.record_success());
        assert!(health.is_up());
        assert!(!health.record_success());
    }
}
