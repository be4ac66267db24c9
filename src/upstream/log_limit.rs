//! Rate limiting of log lines about one endpoint: a dead peer fails every query sent to it, and
//! one warning per failure would flood the log shipper. At most one line per
//! [`LOG_INTERVAL`] passes; the lines held back in between are counted and reported with the
//! next one. The metrics still count every failure. Other rare but repeating events (a
//! forwarding loop, a gathered target with no name in its zone) take a limit of their own
//! interval.
//!
//! It owns only the counting of held-back lines: what is logged, and at which level, is the
//! caller's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// At most one line per endpoint and kind of event in this interval.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct LogLimit {
    since: Instant,
    interval: Duration,
    /// Milliseconds after `since` from which the next line may pass.
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Default for LogLimit {
    fn default() -> Self {
        Self::every(LOG_INTERVAL)
    }
}

impl LogLimit {
    /// At most one line per `interval`.
    pub(crate) fn every(interval: Duration) -> Self {
        Self {
            since: Instant::now(),
            interval,
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be logged now; `None` when
    /// this one is held back (and counted).
    pub(crate) fn check(&self) -> Option<u64> {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        let interval = u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(interval),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_interval_with_the_count_of_held_back_ones() {
        let limit = LogLimit::default();
        assert_eq!(limit.check(), Some(0));
        assert_eq!(limit.check(), None);
        assert_eq!(limit.check(), None);
        tokio::time::advance(LOG_INTERVAL - Duration::from_millis(1)).await;
        assert_eq!(limit.check(), None);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(limit.check(), Some(3));
        assert_eq!(limit.check(), None);
    }
}
