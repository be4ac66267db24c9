//! Work done off a client's path — refreshes of popular or stale cache entries, legs of a
//! gathered answer that straggle past the reply, health probes of endpoints marked down, the
//! re-resolution of endpoint host names — and who ends it.
//!
//! Nothing is spawned and forgotten. Work has one of two kinds of owner, and this module is
//! the one for work off a client's path:
//! - **Bounded work** lives in one tracked set ([`Background`]): every task is held in a
//!   [`JoinSet`] owned here, finished tasks are reaped on the next spawn, and
//!   [`Background::close`] stops what is left at shutdown. At most `limit`
//!   tasks run at once; beyond that [`Background::spawn`] refuses the work, counts it
//!   (`meshdns_background_refused_total`), and the caller carries on without it (a refresh is
//!   skipped and served stale, a cut straggler is dropped). A flood or an outage therefore
//!   cannot grow background memory past the bound; `meshdns_background_tasks` shows how full
//!   the set is.
//! - **Work started for something that can go away** (an upstream group, one of its
//!   endpoints) is tied to an [`Owner`]: the thing holds its owner, and dropping it — a
//!   reload that replaces the group, a host name re-resolved away from an address — ends the
//!   work at once, wherever it waits. Owners nest: an endpoint's owner is a child of its
//!   group's, so dropping a group ends its endpoints' work too. An owner is a cancellation
//!   token whose drop guard the thing holds (as mini-redis's `DbDropGuard` stops its purge
//!   task); the task holds only a `Weak` reference to what it works for, so it never keeps its
//!   owner alive. Owned work is bounded by what owns it (one re-resolution per configured host
//!   name, one probe per endpoint), not by the set, and is never refused: a refused probe
//!   would leave its endpoint down for good.
//!
//! Work on a client's path is owned by the code that waits for it, not here: a listener's
//! connections and a connection's queries are each held in a `JoinSet` of the function that
//! runs them (dropping it ends them), an exchange's attempts are futures it polls itself (no
//! task: returning ends them); a UDP miss is a task of
//! its own, bounded by the in-flight semaphore, which `run` drains at shutdown; and an
//! upstream stream connection's task is stopped by the endpoint that opened it (its
//! `AbortHandle`, on drop).

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use prometheus::{IntCounter, IntGauge};
use tokio::task::JoinSet;
use tokio_util::sync::{CancellationToken, DropGuard};

/// The default bound: a refresh, a leg or a probe each holds a few KiB at most.
pub const DEFAULT_LIMIT: usize = 256;

/// The series the background set records into, built by the metrics module.
#[derive(Debug, Clone)]
pub struct BackgroundMetrics {
    /// `meshdns_background_tasks`: tasks running now.
    pub tasks: IntGauge,
    /// `meshdns_background_refused_total`: work refused because the set was full.
    pub refused: IntCounter,
}

impl BackgroundMetrics {
    /// Series registered nowhere (a set whose figures nobody scrapes: `--check`, unit tests).
    pub fn unregistered() -> Self {
        Self {
            tasks: IntGauge::new("background_tasks", "unregistered").expect("a valid name"),
            refused: IntCounter::new("background_refused_total", "unregistered")
                .expect("a valid name"),
        }
    }
}

/// The set of background tasks of one meshdns instance.
#[derive(Debug)]
pub struct Background {
    tasks: Mutex<JoinSet<()>>,
    limit: usize,
    metrics: BackgroundMetrics,
}

/// Counts one thing in a gauge while it lives, however it ends: a task of the set (returned,
/// or aborted by `close`), a client query in flight (`Metrics::inflight`).
#[must_use = "it counts only while it lives"]
pub struct Counted(IntGauge);

impl Counted {
    pub fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Background {
    /// A set of at most `limit` tasks whose figures nobody scrapes.
    pub fn new(limit: usize) -> Self {
        Self::with_metrics(limit, BackgroundMetrics::unregistered())
    }

    /// A set of at most `limit` tasks, counted into `metrics`.
    pub fn with_metrics(limit: usize, metrics: BackgroundMetrics) -> Self {
        Self {
            tasks: Mutex::new(JoinSet::new()),
            limit,
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        // A panic aborts the process (docs/design.md, "Panics"): nothing poisons the lock, and
        // this takes it without an unwrap.
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work` in the background unless the set is full; `false` when it was refused.
    /// Must be called inside the runtime.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let mut tasks = self.lock();
        // Finished tasks are only reaped: one ends by returning or by `close`, never by a
        // panic (that aborts the process).
        while tasks.try_join_next().is_some() {}
        if tasks.len() >= self.limit {
            self.metrics.refused.inc();
            return false;
        }
        let running = Counted::new(&self.metrics.tasks);
        tasks.spawn(async move {
            let _running = running;
            work.await;
        });
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

/// What ends the work started for one thing (a group, an endpoint): held by that thing, it
/// ends the work when dropped. See the module's documentation.
#[derive(Debug)]
pub struct Owner {
    token: CancellationToken,
    /// Cancels `token` (and so every child's) when the owner is dropped.
    _ends_work: DropGuard,
}

impl Default for Owner {
    fn default() -> Self {
        Self::of(CancellationToken::new())
    }
}

impl Owner {
    fn of(token: CancellationToken) -> Self {
        Self {
            _ends_work: token.clone().drop_guard(),
            token,
        }
    }

    /// An owner whose work also ends when this one is dropped (an endpoint's, in its group).
    pub fn child(&self) -> Owner {
        Self::of(self.token.child_token())
    }

    /// Runs work bounded by its owner (a re-resolution per configured host name, a probe per
    /// endpoint: it must not take a slot of the bounded set, nor be refused one) on a task of
    /// its own until it returns or this owner is dropped.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let token = self.token.clone();
        drop(tokio::spawn(async move {
            token.run_until_cancelled_owned(work).await;
        }));
    }

    /// Whether a parent of this owner has been dropped (its work is ending).
    #[cfg(test)]
    fn is_ended(&self) -> bool {
        self.token.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_beyond_the_limit_is_refused_and_finished_work_makes_room() {
        let metrics = BackgroundMetrics::unregistered();
        let background = Background::with_metrics(2, metrics.clone());
        let long = || tokio::time::sleep(Duration::from_secs(10));
        assert!(background.spawn(long()));
        assert!(background.spawn(async {}));
        tokio::task::yield_now().await;
        assert_eq!(metrics.tasks.get(), 1, "the quick task has ended");
        // The quick task has finished and is reaped by this spawn.
        assert!(background.spawn(long()));
        assert!(!background.spawn(long()));
        assert_eq!(metrics.refused.get(), 1);
        assert_eq!(background.len(), 2);
        assert_eq!(metrics.tasks.get(), 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        tokio::task::yield_now().await;
        assert_eq!(metrics.tasks.get(), 0);
        assert!(background.spawn(long()));
        background.close();
        tokio::task::yield_now().await;
        assert_eq!(metrics.tasks.get(), 0, "an aborted task no longer counts");
    }

    /// A task that would run forever, and a flag it sets when its future is dropped.
    fn forever() -> (impl Future<Output = ()> + Send + 'static, Arc<()>) {
        let alive = Arc::new(());
        let held = Arc::clone(&alive);
        let work = async move {
            let _held = held;
            std::future::pending::<()>().await;
        };
        (work, alive)
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_an_owner_ends_its_work_and_its_childrens() {
        let group = Owner::default();
        let endpoint = group.child();
        let (probe, probe_alive) = forever();
        let (resolution, resolution_alive) = forever();
        endpoint.spawn(probe);
        group.spawn(resolution);
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&probe_alive), 2);
        assert_eq!(Arc::strong_count(&resolution_alive), 2);
        drop(group);
        assert!(endpoint.is_ended(), "a child ends with its parent");
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&probe_alive), 1, "the probe has ended");
        assert_eq!(
            Arc::strong_count(&resolution_alive),
            1,
            "so has the resolution"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn owned_work_runs_however_full_the_bounded_set_is() {
        let metrics = BackgroundMetrics::unregistered();
        let background = Background::with_metrics(1, metrics.clone());
        assert!(background.spawn(std::future::pending()));
        assert!(!background.spawn(async {}), "the set is full");
        let endpoint = Owner::default();
        let (probe, alive) = forever();
        endpoint.spawn(probe);
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&alive), 2, "the probe runs");
        assert_eq!(
            metrics.refused.get(),
            1,
            "only the unowned work was refused"
        );
        background.close();
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_child_leaves_its_parents_work_running() {
        let group = Owner::default();
        let endpoint = group.child();
        let (resolution, alive) = forever();
        group.spawn(resolution);
        drop(endpoint);
        tokio::task::yield_now().await;
        assert!(!group.is_ended());
        assert_eq!(Arc::strong_count(&alive), 2);
    }
}
