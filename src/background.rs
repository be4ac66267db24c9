//! The one tree of an instance's tasks: work done off a client's path — refreshes of popular
//! or stale cache entries, legs of a gathered answer that straggle past the reply, health
//! probes of endpoints marked down, the re-resolution of endpoint host names — and who ends
//! it; and the owners under which the servers run their connections and queries. It owns no
//! work of its own and decides none: it only says where a task starts and what ends it.
//!
//! Nothing is spawned and forgotten. Every task meshdns starts on its runtime is a task of one
//! tree: a root ([`Background`]'s own [`Owner`], a cancellation token and a [`TaskTracker`]) of
//! which every other owner is a descendant; cancelling the root ends every task at its next
//! wait, and shutdown is the root stopping (below). (A blocking read handed to tokio's blocking
//! pool — a reload's, a certificate's look — is awaited by a task of the tree; the log writer's
//! thread is the process's, not an instance's.) The instance's own loops, the reload watcher
//! and the certificate renewal, run on the root itself ([`Background::tasks`]). Other work off
//! a client's path has one of two kinds of owner:
//! - **Bounded work** runs under the root itself ([`Background::spawn`]). At most `limit`
//!   tasks run at once; beyond that the work is refused, counted
//!   (`meshdns_background_refused_total`), and the caller carries on without it (a refresh is
//!   skipped and served stale, a cut straggler is dropped). A flood or an outage therefore
//!   cannot grow background memory past the bound; `meshdns_background_tasks` shows how full
//!   the set is.
//! - **Work started for something that can go away** (an upstream group, one of its
//!   endpoints) is tied to an [`Owner`] of its own: the thing holds its owner, and dropping
//!   it — a reload that replaces the group, a host name re-resolved away from an address —
//!   ends the work at once, wherever it waits. Owners nest: a group's owner is a child of the
//!   root ([`Background::owner`]), an endpoint's a child of its group's, so dropping a group
//!   ends its endpoints' work too. An owner is a cancellation token whose drop guard the
//!   thing holds (as mini-redis's `DbDropGuard` stops its purge task); the task holds only a
//!   `Weak` reference to what it works for, so it never keeps its owner alive. Owned work is
//!   bounded by what owns it (one re-resolution per configured host name, one probe per
//!   endpoint), not by the set, and is never refused: a refused probe would leave its
//!   endpoint down for good.
//!
//! Work on a client's path is owned the same way, on a tracker of its own under the root's
//! token ([`Background::clients`]), so that shutdown can wait for it alone: each DNS listener
//! runs under an owner of its own, which `run` holds; a stream listener's connections are
//! that owner's children, and each connection's task holds the owner of its queries, which
//! therefore end when the connection does (its writer is no task, but a future of the
//! connection's own task); a UDP listener's misses run under its owner directly. The admin
//! server's connections run under its owner, a child of the root. An exchange's attempts are
//! no tasks either, but futures it polls itself (returning ends them). An upstream stream
//! connection's task runs under its endpoint's owner ([`Owner::tasks`]) and ends with it; it
//! also ends on its own when its work does (idle, closed by the peer, or replaced: the
//! endpoint then drops the connection's queue, and the task's writer sees it close).
//!
//! Shutdown is the root stopping, in two steps: [`Background::drain`] tells the listeners to
//! stop accepting and the connections to stop reading, and [`Background::drained`] resolves
//! once every task on a client's path has ended (queries answered, replies written); then
//! [`Background::close`] ends whatever is left and [`Background::closed`] waits for it. `run`
//! gives the drain its grace time, no more.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

/// The default bound: a refresh, a leg or a probe each holds a few KiB at most.
pub const DEFAULT_LIMIT: usize = 256;

/// The series the background set records into, built by the metrics module.
#[derive(Debug, Clone)]
pub(crate) struct BackgroundMetrics {
    /// `meshdns_background_tasks`: tasks running now.
    pub(crate) tasks: IntGauge,
    /// `meshdns_background_refused_total`: work refused because the set was full.
    pub(crate) refused: IntCounter,
}

impl BackgroundMetrics {
    /// Series registered nowhere (a set whose figures nobody scrapes: `--check`, unit tests).
    pub(crate) fn unregistered() -> Self {
        Self {
            tasks: IntGauge::new("background_tasks", "unregistered").expect("a valid name"),
            refused: IntCounter::new("background_refused_total", "unregistered")
                .expect("a valid name"),
        }
    }
}

/// The background work of one meshdns instance: the root of its tree of owned work and the
/// bounded set of tasks off a client's path.
#[derive(Debug)]
pub(crate) struct Background {
    /// The bounded tasks running now (each lowers it when it ends, however it ends).
    running: Arc<AtomicUsize>,
    limit: usize,
    metrics: BackgroundMetrics,
    /// The root: every owner this instance hands out is its child, and every task, bounded or
    /// owned, is tracked by it. [`Background::close`] stops it.
    root: Owner,
    /// Tracks the tasks on a client's path (the listeners, their connections and queries)
    /// apart from the background's, so that shutdown can wait for them alone
    /// ([`Background::drained`]); they are ended by the root's token all the same.
    clients: TaskTracker,
    /// The signal that shutdown has begun ([`Background::draining`]).
    drain: CancellationToken,
}

/// Counts one thing in a gauge while it lives, however it ends: a task of the set (returned,
/// or ended by `close`), a client query in flight (`Metrics::inflight`).
#[must_use = "it counts only while it lives"]
pub(crate) struct Counted(IntGauge);

impl Counted {
    pub(crate) fn new(gauge: &IntGauge) -> Self {
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
    pub(crate) fn new(limit: usize) -> Self {
        Self::with_metrics(limit, BackgroundMetrics::unregistered())
    }

    /// A set of at most `limit` tasks, counted into `metrics`.
    pub(crate) fn with_metrics(limit: usize, metrics: BackgroundMetrics) -> Self {
        Self {
            running: Arc::new(AtomicUsize::new(0)),
            limit,
            metrics,
            root: Owner::default(),
            clients: TaskTracker::new(),
            drain: CancellationToken::new(),
        }
    }

    /// Runs `work` in the background unless the set is full; `false` when it was refused.
    /// Must be called inside the runtime.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let taken = self.running.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(Arc::clone(&self.running));
        if taken >= self.limit {
            drop(slot);
            self.metrics.refused.inc();
            return false;
        }
        let counted = Counted::new(&self.metrics.tasks);
        self.root.spawn(async move {
            let _running = (slot, counted);
            work.await;
        });
        true
    }

    #[cfg(test)]
    /// Bounded tasks running now.
    pub(crate) fn len(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An owner for work started for one thing of this instance (an upstream group, the admin
    /// server), a child of the root: it ends when the thing drops it, or at
    /// [`Background::close`].
    pub(crate) fn owner(&self) -> Owner {
        self.root.child()
    }

    /// The root itself, where the instance's own loops are started (the reload watcher, the
    /// certificate renewal): they end when the root is closed.
    pub(crate) fn tasks(&self) -> Tasks {
        self.root.tasks.clone()
    }

    /// Where tasks on a client's path are started (each listener under an owner of its own,
    /// [`Tasks::child`]): under the root's token (they end at [`Background::close`]), tracked
    /// apart from the background's.
    pub(crate) fn clients(&self) -> Tasks {
        Tasks {
            token: self.root.tasks.token.clone(),
            tracker: self.clients.clone(),
        }
    }

    /// The first step of shutdown, as the listeners, their connections and the reload watcher
    /// see it: cancelled by [`Background::drain`] (or [`Background::close`]), they stop taking
    /// new work and finish what they have.
    pub(crate) fn draining(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Begins shutdown: see [`Background::draining`].
    pub(crate) fn drain(&self) {
        self.drain.cancel();
    }

    /// Resolves once every task on a client's path has ended (shutdown's drain, begun by
    /// [`Background::drain`]). Tasks started after it is called are waited for too, as long as
    /// they are started by one it waits for (a connection's last queries): it cannot resolve
    /// while one of those runs.
    pub(crate) async fn drained(&self) {
        self.clients.close();
        self.clients.wait().await;
    }

    /// Stops every task of the tree, on a client's path, bounded or owned (shutdown, once
    /// the drain is over or its grace time is); [`Background::closed`] waits until they
    /// have all ended.
    pub(crate) fn close(&self) {
        self.drain.cancel();
        self.root.tasks.token.cancel();
        self.root.tasks.tracker.close();
        self.clients.close();
    }

    /// Resolves once [`Background::close`] was called and every task of the tree has ended.
    pub(crate) async fn closed(&self) {
        self.clients.wait().await;
        self.root.tasks.tracker.wait().await;
    }

    /// Shutdown whole, as `run` and the webhook end: the drain, at most `grace` for it (`late`
    /// is the warning logged when that is not enough), then every task stopped and waited for.
    pub(crate) async fn shut_down(&self, grace: Duration, late: &str) {
        self.drain();
        if tokio::time::timeout(grace, self.drained()).await.is_err() {
            tracing::warn!("{late}");
        }
        // Cancelled work ends at its next wait: this returns at once.
        self.close();
        self.closed().await;
    }

    /// Tasks of the tree still alive, of every kind (finished ones no longer count).
    #[cfg(test)]
    pub(crate) fn alive(&self) -> usize {
        self.root.tasks.tracker.len() + self.clients.len()
    }
}

/// One place in the bounded set, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A place in the tree where tasks are started: a node's token (ending them) and the
/// tracker that waits for them. Cheap to clone; holding one does not keep work alive, nor
/// end it when dropped (an [`Owner`] does that).
/// `Tasks::default()` is the root of a tree of its own that nothing ends: for tests and tools
/// that run one endpoint alone.
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    /// Runs `work` on a task of the tree until it returns or this node's token is cancelled.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let token = self.token.clone();
        // The handle is not needed: the tracker waits for the task, the token ends it.
        drop(self.tracker.spawn(async move {
            token.run_until_cancelled_owned(work).await;
        }));
    }

    /// An owner below this node (an upstream stream endpoint's, for its connections; a DNS
    /// listener's, for its connections; a connection's, for its queries).
    pub(crate) fn child(&self) -> Owner {
        Owner::of(self.token.child_token(), self.tracker.clone())
    }
}

/// What ends the work started for one thing (a group, an endpoint): held by that thing, it
/// ends the work when dropped. See the module's documentation.
#[derive(Debug)]
pub(crate) struct Owner {
    tasks: Tasks,
    /// Cancels the token (and so every child's) when the owner is dropped.
    _ends_work: DropGuard,
}

impl Default for Owner {
    /// The root of a tree of its own (`--check`'s resolutions, unit tests).
    fn default() -> Self {
        Self::of(CancellationToken::new(), TaskTracker::new())
    }
}

impl Owner {
    fn of(token: CancellationToken, tracker: TaskTracker) -> Self {
        Self {
            _ends_work: token.clone().drop_guard(),
            tasks: Tasks { token, tracker },
        }
    }

    /// An owner whose work also ends when this one is dropped (an endpoint's, in its group).
    pub(crate) fn child(&self) -> Owner {
        self.tasks.child()
    }

    /// Runs work bounded by its owner (a re-resolution per configured host name, a probe per
    /// endpoint: it must not take a slot of the bounded set, nor be refused one) on a task of
    /// the tree until it returns or this owner is dropped.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(work);
    }

    /// Where tasks that end with this owner are started (its endpoint's connections).
    pub(crate) fn tasks(&self) -> Tasks {
        self.tasks.clone()
    }

    /// Whether a parent of this owner has been dropped (its work is ending).
    #[cfg(test)]
    fn is_ended(&self) -> bool {
        self.tasks.token.is_cancelled()
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
        // The quick task has finished and given its slot back.
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
        assert_eq!(metrics.tasks.get(), 0, "an ended task no longer counts");
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

    #[tokio::test(start_paused = true)]
    async fn closing_the_root_ends_every_task_of_the_tree_and_waits_for_them() {
        let background = Background::new(4);
        let group = background.owner();
        let endpoint = group.child();
        let (probe, probe_alive) = forever();
        let (refresh, refresh_alive) = forever();
        endpoint.spawn(probe);
        assert!(background.spawn(refresh));
        tokio::task::yield_now().await;
        assert_eq!(background.alive(), 2, "an owned task and a bounded one");
        background.close();
        assert!(endpoint.is_ended(), "the root's children end with it");
        let waited = tokio::time::timeout(Duration::from_secs(1), background.closed()).await;
        assert!(waited.is_ok(), "every task ended at its next wait");
        assert_eq!(background.alive(), 0);
        assert_eq!(Arc::strong_count(&probe_alive), 1, "the probe has ended");
        assert_eq!(
            Arc::strong_count(&refresh_alive),
            1,
            "the refresh has ended"
        );
        assert!(background.is_empty(), "its slot is given back");
    }
}
