//! Work done off a client's path — refreshes of popular or stale cache entries, legs of a
//! gathered answer that straggle past the reply, health probes of endpoints marked down —
//! lives in one tracked, bounded set.
//!
//! Nothing is spawned and forgotten: every task is held in a [`JoinSet`] owned here, finished
//! tasks are reaped on the next spawn (a panic is logged, never lost), and [`Background::close`]
//! stops what is left at shutdown. At most `limit` tasks run at once; beyond that
//! [`Background::spawn`] refuses the work and says so, and the caller carries on without it
//! (a refresh is skipped and served stale, a straggler is cut, a probe is retried on the next
//! failure). A flood or an outage therefore cannot grow background memory past the bound.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::task::JoinSet;

/// The default bound: a refresh, a leg or a probe each holds a few KiB at most.
pub const DEFAULT_LIMIT: usize = 256;

/// The set of background tasks of one meshdns instance.
#[derive(Debug)]
pub struct Background {
    tasks: Mutex<JoinSet<()>>,
    limit: usize,
}

impl Background {
    pub fn new(limit: usize) -> Self {
        Self {
            tasks: Mutex::new(JoinSet::new()),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        // Nothing under the lock can panic; a poisoned set is still a set.
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work` in the background unless the set is full; `false` when it was refused.
    /// Must be called inside the runtime.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let mut tasks = self.lock();
        while let Some(finished) = tasks.try_join_next() {
            if let Err(error) = finished
                && error.is_panic()
            {
                tracing::error!(%error, "a background task panicked");
            }
        }
        if tasks.len() >= self.limit {
            return false;
        }
        tasks.spawn(work);
        true
    }

    /// Tasks running now (finished ones not yet reaped included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops every task still running (shutdown: refreshes and probes have no client waiting).
    pub fn close(&self) {
        self.lock().abort_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_beyond_the_limit_is_refused_and_finished_work_makes_room() {
        let background = Background::new(2);
        let long = || tokio::time::sleep(Duration::from_secs(10));
        assert!(background.spawn(long()));
        assert!(background.spawn(async {}));
        tokio::task::yield_now().await;
        // The quick task has finished and is reaped by this spawn.
        assert!(background.spawn(long()));
        assert!(!background.spawn(long()));
        assert_eq!(background.len(), 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        tokio::task::yield_now().await;
        assert!(background.spawn(long()));
        background.close();
    }
}
