//! Live configuration: `MESHDNS_CONFIG_DIR` and the directories of the TLS files watched with
//! inotify (the kubelet swaps a mounted ConfigMap or Secret atomically by renaming its `..data`
//! symlink, an event in the directory itself), and SIGHUP, which forces a reload where no event
//! comes (a file or directory bind-mounted over another).
//!
//! A change is read and validated as a whole, off the thread that answers queries: one task on
//! tokio's blocking pool waits for the burst of events to settle, arms the watches, reads the
//! files, parses the keys and builds the new snapshot (a hung mount delays the reload, never a
//! query), and the serving thread only swaps the snapshot in — it is woken twice a reload, by the
//! burst's first event and by the finished task. An invalid one is rejected whole: the running
//! configuration stays, every error is logged naming its variable,
//! `meshdns_config_reloads_total{result="rejected"}` counts it once, and
//! `meshdns_config_last_reload_successful` is 0 until a read of the directory is valid again (a
//! good configuration applied, or the rejected file removed).
//! A valid one is applied without dropping or delaying a query: a new immutable snapshot is swapped
//! in (queries in flight finish on theirs), upstream groups that did not change are carried over
//! with their health, the cache keeps the entries of every target that did not change (without
//! looking at one: see [`TargetId`](crate::cache::TargetId)), and the log filter and cache limits
//! follow. A change of a restart-only variable (see [`variables::restart_only`]; its descriptor
//! says how the running value is kept) is logged with the value in force and the pending one,
//! counted as `restart_required` and not applied; one back to the value in force is logged too.
//! `meshdns_config_restart_pending` is 1 after every valid read that finds such a change waiting,
//! and 0 after one that does not (the change reverted, or none made).
//!
//! The watch never goes blind. A directory that is a symlink, or missing, is watched together
//! with its parent, so that a symlink renamed over it (`mv -T`) or its creation is an event
//! too; a real directory reports its own deletion (and its parent, which may be busy with
//! other files' writes, is not watched: each of those writes would wake the watcher); every reload
//! re-arms the watches before it reads when anything may have moved them — an event about a
//! watched directory itself, an error, a path that now names another directory (inode) or
//! device — so a directory replaced in any way is then watched anew, and SIGHUP re-arms them
//! all (the way out after a mount over the directory with no reload since, which no inotify
//! event reports). A watch that cannot be armed is logged, counted in
//! `meshdns_config_watch_errors_total`, and retried with a backoff from [`RETRY_FIRST`] to
//! [`RETRY_MAX`].
//!
//! Nothing runs while nothing changes: inotify wakes the task only on an event, the short
//! settling delay (the kubelet writes several entries per update) starts only after one (see
//! `Burst`), and the retry timer exists only while a watch is failing.
//!
//! It owns the watches and when a reload happens; what is valid is the configuration's parse,
//! what a new snapshot holds the snapshot's, and the swap the resolver's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use notify::Watcher;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::background::Background;
use crate::config::Config;
use crate::config::variables::{self, Applies, Variable};
use crate::metrics::{Metrics, ReloadResult};
use crate::process;
use crate::query::Resolver;
use crate::snapshot::Snapshot;

/// How long a burst of events must be quiet before the directory is read.
pub const SETTLE: Duration = Duration::from_millis(200);

/// The first retry of a watch that could not be armed, doubled after every failure ...
pub(crate) const RETRY_FIRST: Duration = Duration::from_secs(1);

/// ... up to this.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a reload works on: the configuration in force and what it configures.
#[derive(Debug, Clone)]
pub(crate) struct Reloader {
    /// Shared with the reload's work on the blocking pool, which compares against it.
    config: Arc<Config>,
    /// The configuration read at startup: its restart-only values are in force for the
    /// process's life (`config` keeps them, but its settings are those of the last read).
    started: Arc<Config>,
    resolver: Arc<Resolver>,
    metrics: Arc<Metrics>,
    background: Arc<Background>,
}

/// A change worked out off the serving thread: the configuration that is in force once it is
/// applied (restart-only variables at their running values) and, when a live variable changed,
/// the snapshot that applies it, built on the running one.
struct Prepared {
    applied: Config,
    snapshot: Option<Snapshot>,
    live: Vec<&'static str>,
    restart_required: bool,
}

impl Reloader {
    pub(crate) fn new(
        config: Config,
        resolver: Arc<Resolver>,
        metrics: Arc<Metrics>,
        background: Arc<Background>,
    ) -> Self {
        let config = Arc::new(config);
        Self {
            started: Arc::clone(&config),
            config,
            resolver,
            metrics,
            background,
        }
    }

    /// Reads the environment captured at startup and the directory again, and applies the
    /// result or rejects it whole. Everything but the swap runs on tokio's blocking pool, in one
    /// task: `before` (the watches armed, so that a change after it is an event), the read,
    /// the comparison and the new snapshot — its upstream groups, TLS settings and routing
    /// table; the serving thread only swaps it in. `before` returning `false` skips the read.
    pub(crate) async fn reload(&mut self, before: impl FnOnce() -> bool + Send + 'static) {
        let this = self.clone();
        let prepared =
            tokio::task::spawn_blocking(move || before().then(|| this.prepare()).flatten()).await;
        let prepared = match prepared {
            Ok(Some(prepared)) => prepared,
            Ok(None) => return,
            Err(failed) => {
                tracing::error!(variable = variables::CONFIG_DIR, error = %failed, "configuration change rejected: it could not be read; the running configuration stays");
                self.metrics.config_reload(ReloadResult::Rejected);
                return;
            }
        };
        if let Some(snapshot) = prepared.snapshot {
            self.apply(&prepared.applied, snapshot);
            tracing::info!(changed = %prepared.live.join(","), "configuration applied");
            self.metrics.config_reload(ReloadResult::Applied);
        }
        if prepared.restart_required {
            self.metrics.config_reload(ReloadResult::RestartRequired);
        }
        self.config = Arc::new(prepared.applied);
    }

    /// The directories whose changes may change the configuration: the configuration directory,
    /// and those holding the TLS files (a mounted Secret is swapped in its own directory).
    pub(crate) fn watched_dirs(&self) -> BTreeSet<PathBuf> {
        let tls_files = self.config.tls.iter().flat_map(|tls| {
            std::iter::once(&tls.ca).chain(tls.client.iter().flat_map(|(c, k)| [c, k]))
        });
        self.config
            .config_dir
            .iter()
            .cloned()
            .chain(tls_files.filter_map(|file| file.parent().map(Path::to_path_buf)))
            .collect()
    }

    /// The reload's work on the blocking pool: reads the configuration again
    /// ([`Config::from_environment`]: the directory and the PEM files are read, and the keys
    /// parsed), compares it with the running one, and builds the snapshot of a live change on
    /// the one in force. `None` when there is nothing to apply: the change was rejected (logged
    /// and counted here) or nothing changed.
    fn prepare(&self) -> Option<Prepared> {
        let running = &self.config;
        let read = match Config::from_environment(&running.environment) {
            Ok(read) => {
                self.metrics.config_valid();
                read
            }
            Err(errors) => {
                for error in &errors {
                    tracing::error!(variable = %error.variable, %error, "configuration change rejected; the running configuration stays");
                }
                self.metrics.config_reload(ReloadResult::Rejected);
                return None;
            }
        };
        let mut changed = running.settings.changed(&read.settings);
        // The TLS files may change under the same paths (cert-manager rotating a Secret): name
        // the variable of each file whose content changed.
        if let (Some(old), Some(new)) = (&running.tls, &read.tls) {
            for variable in old.rotated(new) {
                if !changed.iter().any(|v| v.name == variable.name) {
                    changed.push(variable);
                }
            }
        }
        let (restart, live): (Vec<&Variable>, Vec<&Variable>) = changed
            .iter()
            .partition(|variable| variable.is_restart_only());
        let mut restart_required = false;
        for variable in restart {
            let (running, pending) = (variable.in_force(running), variable.in_force(&read));
            let variable = variable.name;
            if running == pending {
                tracing::info!(%variable, value = %running, "back to the value in force; no restart needed");
            } else {
                tracing::warn!(%variable, %running, %pending, "changed, but only a restart applies it; the running value stays");
                restart_required = true;
            }
        }
        let live: Vec<&'static str> = live.iter().map(|variable| variable.name).collect();
        // Every valid read says whether a restart-only change waits, against the values in
        // force since the start (a change already reported is no longer in `changed`), so the
        // gauge (and the alert on it) stays while the directory holds one and goes when it is
        // reverted.
        self.metrics
            .config_restart_pending(restart_pending(&self.started, &read));
        if changed.is_empty() {
            tracing::debug!("configuration directory read; nothing changed");
            return None;
        }
        let mut applied = read;
        keep_running(&mut applied, running);
        // Only the reload task replaces the snapshot, and it waits for this: the one in force now
        // is still the one in force when the new one is swapped in.
        let snapshot = (!live.is_empty()).then(|| {
            let previous = self.resolver.snapshot();
            Snapshot::new(
                &applied,
                self.resolver.cache(),
                &self.metrics,
                &self.background,
                Some(&previous),
            )
        });
        Some(Prepared {
            applied,
            snapshot,
            live,
            restart_required,
        })
    }

    /// Makes `new`, whose snapshot is `snapshot`, the running configuration: the next
    /// generation. The cache moves on to it first — from then on it refuses what work of the
    /// previous generations writes (a slow answer, a straggling leg, a refresh, a failure) —
    /// and only then do queries start on it, looking up under the new snapshot's targets, so
    /// none of them can meet an answer of a changed target. A query that starts in between
    /// runs on the previous configuration, as if it had come a moment earlier, and caches
    /// nothing.
    fn apply(&self, new: &Config, snapshot: Snapshot) {
        let old = &self.config;
        if new.log != old.log {
            process::set_log_filter(&new.log);
        }
        if new.tls != old.tls {
            let not_after = new.tls.as_ref().and_then(|tls| tls.loaded.not_after);
            self.metrics.client_certificate(not_after);
        }
        let cache = self.resolver.cache();
        if new.cache != old.cache {
            cache.reconfigure(&new.cache);
        }
        cache.advance(snapshot.generation);
        self.resolver.replace(snapshot);
    }
}

/// Whether `read` holds a value of a restart-only variable that differs from the one in force
/// since the start (`started`): only a restart would apply it.
fn restart_pending(started: &Config, read: &Config) -> bool {
    variables::restart_only().any(|variable| variable.in_force(started) != variable.in_force(read))
}

/// Puts the running value of every restart-only variable (its descriptor's
/// [`Applies::Restart`] says how) back into `applied`. `MESHDNS_CONFIG_DIR` needs no keeping:
/// it is read from the environment captured at startup.
fn keep_running(applied: &mut Config, running: &Config) {
    for variable in variables::restart_only() {
        if let Applies::Restart { keep } = variable.applies {
            keep(applied, running);
        }
    }
}

/// Reloads on every change of the watched directories (see [`Reloader::watched_dirs`]) and on
/// SIGHUP until `shutdown` is signalled. With nothing to watch it only waits for SIGHUP (which
/// then never ends the process, as its default action would).
pub(crate) async fn watch_and_reload(mut reloader: Reloader, shutdown: CancellationToken) {
    let (wake, mut changed) = mpsc::channel::<()>(1);
    let burst = Arc::new(Burst::default());
    let watches = Arc::new(Mutex::new(Watches::new(
        wake,
        Arc::clone(&burst),
        Arc::clone(&reloader.metrics),
    )));
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP");
            None
        }
    };
    let mut first = true;
    loop {
        let (mut retrying, mut settle) = (false, false);
        if !first {
            let retry = lock(&watches).retry;
            tokio::select! {
                Some(()) = changed.recv() => settle = true,
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    tracing::info!("SIGHUP: re-reading the configuration and re-arming its watches");
                }
                () = async { match retry { Some(after) => tokio::time::sleep(after).await, None => std::future::pending().await } } => {
                    tracing::debug!("retrying the watches that could not be armed");
                    retrying = true;
                }
                () = shutdown.cancelled() => return,
            }
        }
        first = false;
        // In the reload's task on the blocking pool: after an event, the burst settles there
        // (see [`Burst`]). Then the watches are armed before the read: a change after this
        // point is an event, one before it is read. A retry that fails again has nothing new
        // to read (what cannot be watched is not there to be read either); one that succeeds
        // reads what appeared unseen.
        let (burst, arming, wanted) = (
            Arc::clone(&burst),
            Arc::clone(&watches),
            reloader.watched_dirs(),
        );
        let before = move || {
            let armed = if settle {
                burst.settle();
                lock(&arming).rearm_if_moved(wanted)
            } else {
                lock(&arming).arm(wanted)
            };
            armed || !retrying
        };
        tokio::select! {
            () = reloader.reload(before) => {}
            () = shutdown.cancelled() => return,
        }
        // A reload may move the TLS files to other directories: armed on the blocking pool,
        // like every arming (it touches the file system and waits for the watcher's thread).
        let wanted = reloader.watched_dirs();
        if wanted != lock(&watches).dirs() {
            let watches = Arc::clone(&watches);
            let _ = tokio::task::spawn_blocking(move || lock(&watches).arm(wanted)).await;
        }
    }
}

/// A burst of events (the kubelet writes several entries per update), shared by the watcher's
/// thread and the reload. Its first event wakes the reload task; the others only move the time
/// of the last one, and the reload waits on the blocking pool until none has come for
/// [`SETTLE`] — so the thread that answers queries is woken once a burst, not once an event.
#[derive(Debug)]
struct Burst {
    since: Instant,
    /// Nanoseconds from `since` to the last event.
    last: AtomicU64,
    /// An event came that the reload has not settled yet: the next ones do not wake it.
    pending: AtomicBool,
}

impl Default for Burst {
    fn default() -> Self {
        Self {
            since: Instant::now(),
            last: AtomicU64::new(0),
            pending: AtomicBool::new(false),
        }
    }
}

impl Burst {
    /// Records an event; whether it is the first of a burst (the reload task is to be woken).
    fn event(&self) -> bool {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(nanos, Ordering::Release);
        !self.pending.swap(true, Ordering::AcqRel)
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_nanos(self.last.load(Ordering::Acquire))
    }

    /// Blocks until no event has come for [`SETTLE`], then ends the burst: the next event
    /// wakes the reload task again (and what it changed is read now, or by the next reload).
    fn settle(&self) {
        loop {
            let quiet = self.last() + SETTLE;
            let now = Instant::now();
            if now >= quiet {
                break;
            }
            std::thread::sleep(quiet - now);
        }
        self.pending.store(false, Ordering::Release);
    }
}

/// The watches, taken without an unwrap: a panic aborts the process, nothing poisons the lock.
/// The reload task is their one user and awaits every arming, so the lock is never contended.
fn lock(watches: &Mutex<Watches>) -> MutexGuard<'_, Watches> {
    watches.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The inotify watches: made only while there is something to watch (no watcher thread
/// otherwise). A directory that is a symlink or missing is watched with its parent; events in
/// a parent count only when they concern a watched directory itself.
struct Watches {
    /// Wakes the reload task: the first event of a burst.
    wake: mpsc::Sender<()>,
    burst: Arc<Burst>,
    metrics: Arc<Metrics>,
    watcher: Option<notify::RecommendedWatcher>,
    /// The directories wanted, shared with the watcher's callback to filter the parents' events.
    dirs: Arc<RwLock<BTreeSet<PathBuf>>>,
    /// The paths watched now (directories and their parents).
    armed: BTreeSet<PathBuf>,
    /// What each path to watch was (device and inode, `None` when missing) when it was armed.
    identities: BTreeMap<PathBuf, Option<(u64, u64)>>,
    /// Set by the watcher's callback when an event may have moved a watch: one about a watched
    /// directory itself (deleted, renamed, replaced), or an error (the kernel's queue
    /// overflowed).
    moved: Arc<AtomicBool>,
    /// While a watch is failing: when to try again.
    retry: Option<Duration>,
}

impl Watches {
    fn new(wake: mpsc::Sender<()>, burst: Arc<Burst>, metrics: Arc<Metrics>) -> Self {
        Self {
            wake,
            burst,
            metrics,
            watcher: None,
            dirs: Arc::default(),
            armed: BTreeSet::new(),
            identities: BTreeMap::new(),
            moved: Arc::default(),
            retry: None,
        }
    }

    fn dirs(&self) -> BTreeSet<PathBuf> {
        self.dirs.read().map(|d| d.clone()).unwrap_or_default()
    }

    /// [`arm`](Self::arm) for a reload an event started, unless nothing can have moved the
    /// watches since they were armed: the same directories wanted and every one armed, no event
    /// about a watched directory itself and no error since, and each path still the directory
    /// (device and inode) it was then — a directory replaced has another inode, a mount over it
    /// another device. The events of a kubelet update are inside the directory and move
    /// nothing: re-arming for each of them cost two round trips to the watcher's thread and an
    /// event (IN_IGNORED) a reload. SIGHUP and retries call `arm` itself. Whether every watch
    /// is armed.
    fn rearm_if_moved(&mut self, wanted: BTreeSet<PathBuf>) -> bool {
        let moved = self.moved.swap(false, Ordering::AcqRel);
        let unmoved = !moved
            && self.retry.is_none()
            && self.watcher.is_some()
            && self.dirs() == wanted
            && to_watch(&wanted) == self.armed
            && (self.identities.iter()).all(|(path, was)| identity(path) == *was);
        unmoved || self.arm(wanted)
    }

    /// Watches exactly `wanted` and the parents [`needs_parent`] names, each watch made anew: a directory that was
    /// deleted, replaced or mounted over since the last call is watched where it is now.
    /// Whether every watch could be armed.
    fn arm(&mut self, wanted: BTreeSet<PathBuf>) -> bool {
        if let Ok(mut dirs) = self.dirs.write() {
            dirs.clone_from(&wanted);
        }
        if wanted.is_empty() {
            self.watcher = None;
            self.armed.clear();
            self.retry = None;
            return true;
        }
        let armed = std::mem::take(&mut self.armed);
        let paths = to_watch(&wanted);
        // Taken before the watches: a directory replaced in between is then armed again by the
        // next reload (its identity no longer matches), never missed.
        self.identities = paths.iter().map(|p| (p.clone(), identity(p))).collect();
        let Some(watcher) = self.watcher() else {
            self.metrics.config_watch_error();
            self.back_off();
            return false;
        };
        for path in &armed {
            let _ = watcher.unwatch(path);
        }
        let mut armed = BTreeSet::new();
        let mut failures = Vec::new();
        for path in paths {
            match watcher.watch(&path, notify::RecursiveMode::NonRecursive) {
                Ok(()) => {
                    armed.insert(path);
                }
                Err(error) => failures.push((path, error)),
            }
        }
        self.armed = armed;
        if failures.is_empty() {
            if self.retry.take().is_some() {
                tracing::info!("every configuration directory is watched again");
            }
            return true;
        }
        let first = self.retry.is_none();
        self.back_off();
        for (path, error) in &failures {
            self.metrics.config_watch_error();
            // The first failure of a streak is a warning; its retries are not news.
            if first {
                tracing::warn!(dir = %path.display(), %error, "cannot watch; retrying, and its changes are applied on SIGHUP until then");
            } else {
                tracing::debug!(dir = %path.display(), %error, "still cannot watch");
            }
        }
        false
    }

    /// Sets the next retry: [`RETRY_FIRST`] after a success, twice the last one after a failure,
    /// at most [`RETRY_MAX`].
    fn back_off(&mut self) {
        self.retry = Some(self.retry.map_or(RETRY_FIRST, |r| (r * 2).min(RETRY_MAX)));
    }

    fn watcher(&mut self) -> Option<&mut notify::RecommendedWatcher> {
        if self.watcher.is_none() {
            let (wake, burst) = (self.wake.clone(), Arc::clone(&self.burst));
            let (dirs, moved) = (Arc::clone(&self.dirs), Arc::clone(&self.moved));
            let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Reading the directory opens it, and an open is an event too: only changes
                // count, or every reload would announce the next one. An error (the kernel's
                // queue overflowed) may hide a change: reload.
                let (relevant, moves) = match event {
                    Ok(event) => {
                        let (ours, itself) = concerns(&dirs, &event.paths);
                        let relevant = ours && !matches!(event.kind, notify::EventKind::Access(_));
                        (relevant, relevant && (event.need_rescan() || itself))
                    }
                    Err(_) => (true, true),
                };
                if moves {
                    moved.store(true, Ordering::Release);
                }
                if relevant && burst.event() {
                    // A reload is already due when the channel is full.
                    let _ = wake.try_send(());
                }
            });
            match made {
                Ok(watcher) => self.watcher = Some(watcher),
                Err(error) => {
                    tracing::warn!(%error, "cannot watch for configuration changes; retrying, and they are applied on SIGHUP until then");
                }
            }
        }
        self.watcher.as_mut()
    }
}

/// Whether `dir` must be watched from its parent too: when it is a symlink (swapped by renaming
/// another symlink over it, which only the parent sees) or missing (its creation is an event
/// in the parent only). A real directory reports its own deletion or replacement, so its
/// parent, which may be busy with writes that are none of ours, is left alone.
fn needs_parent(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).map_or(true, |meta| meta.file_type().is_symlink())
}

/// The paths that watch `wanted`: each directory, and its parent where [`needs_parent`] says.
fn to_watch(wanted: &BTreeSet<PathBuf>) -> BTreeSet<PathBuf> {
    wanted
        .iter()
        .flat_map(|dir| {
            let parent = needs_parent(dir).then(|| dir.parent()).flatten();
            std::iter::once(dir.clone()).chain(parent.map(Path::to_path_buf))
        })
        .collect()
}

/// The directory `path` names now (symlinks followed, as the watch follows them): its device
/// and inode, `None` when there is none.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

/// Whether an event on `paths` concerns a watched directory — something in it, or the
/// directory itself (deleted, created, renamed, seen from its parent; other entries of a parent
/// are not ours) — and whether it is about a directory itself, what may have moved its watch.
/// No path at all (a rescan) may be anything.
fn concerns(dirs: &RwLock<BTreeSet<PathBuf>>, paths: &[PathBuf]) -> (bool, bool) {
    let Ok(dirs) = dirs.read() else {
        return (true, true);
    };
    let itself = paths.is_empty() || paths.iter().any(|path| dirs.contains(path));
    let inside = (paths.iter()).any(|path| path.parent().is_some_and(|dir| dirs.contains(dir)));
    (itself || inside, itself)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload changes nothing a restart-only variable decides: the running value of each
    /// stays, whatever the directory now says (every variable of the list is tried).
    #[test]
    fn every_restart_only_variable_keeps_its_running_value() {
        use variables::*;
        // A DoT certificate, and copies of its files under other names.
        let scratch = crate::certificates::tests::Scratch::new("reload-restart-only");
        let (ca, issuer) = crate::certificates::tests::ca();
        let (cert, key) = crate::certificates::tests::client(&issuer);
        let file = |name: &str, content: &str| scratch.file(name, content).display().to_string();
        let (cert_file, cert_copy) = (file("tls.crt", &cert), file("copy.crt", &cert));
        let (key_file, key_copy) = (
            file("tls.key", &key.serialize_pem()),
            file("copy.key", &key.serialize_pem()),
        );
        let ca_file = file("ca.crt", &ca.pem());
        let base = [
            (UPSTREAMS, "127.0.0.2:53"),
            (POD_IP, "10.0.0.1"),
            (POD_HOSTNAME, "db-0"),
            (POD_SUBDOMAIN, "db"),
            (POD_NAMESPACE, "prod"),
            (DOT_LISTEN, "127.0.0.1"),
            (DOT_CERT_FILE, cert_file.as_str()),
            (DOT_KEY_FILE, key_file.as_str()),
        ];
        let changes = [
            (DOT_LISTEN, "127.0.0.1:8853"),
            (DOT_CERT_FILE, cert_copy.as_str()),
            (DOT_KEY_FILE, key_copy.as_str()),
            (DOT_CLIENT_CA_FILE, ca_file.as_str()),
            (LISTEN, "127.0.0.1:5353"),
            (ADMIN_LISTEN, "127.0.0.1:9999"),
            (THREADS, "3"),
            (MAX_INFLIGHT, "7"),
            (LOG_FORMAT, "json"),
            (POD_IP, "10.0.0.2"),
            (POD_IPS, "10.0.0.1,10.0.0.3"),
            (POD_HOSTNAME, "db-1"),
            (POD_SUBDOMAIN, "other"),
            (POD_NAMESPACE, "test"),
            (HOSTS_FILE, "/nonexistent/hosts"),
        ];
        let mut tried: Vec<&str> = changes.iter().map(|(name, _)| *name).collect();
        tried.sort_unstable();
        let mut listed: Vec<&str> = restart_only().map(|v| v.name).collect();
        listed.sort_unstable();
        assert_eq!(tried, listed, "a change for every restart-only variable");
        let build = |pairs: &[(&str, &str)]| {
            Config::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
        };
        let running = build(&base);
        for (variable, value) in changes {
            let mut pairs = base.to_vec();
            pairs.retain(|(name, _)| *name != variable);
            pairs.push((variable, value));
            let mut applied = build(&pairs);
            assert_ne!(applied, running, "{variable} changes the configuration");
            keep_running(&mut applied, &running);
            // The raw values differ by design: they are what the next reload compares.
            applied.settings = running.settings.clone();
            applied.environment = running.environment.clone();
            assert_eq!(applied, running, "{variable} kept its running value");
        }
    }

    /// The bench's idle meshdns had its directory in a busy work directory: watching that
    /// parent woke the watcher for every write there (432,860 context switches in 92 s).
    #[test]
    fn only_a_symlinked_or_missing_directory_is_watched_from_its_parent() {
        let base =
            std::env::temp_dir().join(format!("meshdns-needs-parent-{}", std::process::id()));
        let real = base.join("real");
        let link = base.join("link");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(
            !needs_parent(&real),
            "a real directory reports its own deletion"
        );
        assert!(
            needs_parent(&link),
            "a symlink swapped by a rename is seen from the parent"
        );
        assert!(
            needs_parent(&base.join("missing")),
            "a creation is seen from the parent"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// The first event of a burst wakes the reload task and the others do not; the reload
    /// reads SETTLE after the last one (the thread that answers queries was woken once per
    /// event before: 10.7 context switches of it per reload in the bench's swaps, 4.7 after).
    #[test]
    fn a_burst_wakes_the_reload_once_and_settles_after_its_last_event() {
        let burst = Arc::new(Burst::default());
        assert!(burst.event(), "the first event of a burst wakes the reload");
        let later = {
            let burst = Arc::clone(&burst);
            std::thread::spawn(move || {
                (0..3).fold(false, |woke, _| {
                    std::thread::sleep(Duration::from_millis(20));
                    woke | burst.event()
                })
            })
        };
        let start = Instant::now();
        burst.settle();
        let settled = Instant::now();
        assert!(
            !later.join().unwrap(),
            "the burst's later events wake nothing"
        );
        assert!(
            settled >= burst.last() + SETTLE,
            "read SETTLE after its last event"
        );
        assert!(settled - start >= Duration::from_millis(60) + SETTLE);
        assert!(
            burst.event(),
            "once settled, the next event wakes the reload again"
        );
    }

    /// What a reload and its snapshot are built from, in a configuration directory.
    struct Running {
        dir: crate::certificates::tests::Scratch,
        resolver: Arc<Resolver>,
        reloader: Reloader,
    }

    fn running(name: &str, upstream: &str) -> Running {
        let dir = crate::certificates::tests::Scratch::new(name);
        std::fs::write(dir.0.join(variables::UPSTREAMS), upstream).unwrap();
        let config = Config::from_vars([(
            variables::CONFIG_DIR.to_string(),
            dir.0.display().to_string(),
        )])
        .unwrap();
        let metrics = Arc::new(Metrics::new());
        let background = Arc::new(Background::new(4));
        let resolver = Arc::new(Resolver::for_config(
            &config,
            Arc::clone(&metrics),
            &background,
        ));
        let reloader = Reloader::new(config, Arc::clone(&resolver), metrics, background);
        Running {
            dir,
            resolver,
            reloader,
        }
    }

    fn kube_dns(resolver: &Resolver) -> Vec<crate::config::Endpoint> {
        resolver.snapshot().local.spec().endpoints.clone()
    }

    fn addr(text: &str) -> crate::config::Endpoint {
        crate::config::Endpoint::Addr(text.parse().unwrap())
    }

    /// The watches armed, the directory read and the new snapshot built on the blocking pool;
    /// the thread that answers queries only swaps the snapshot in.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reload_works_off_the_serving_thread_and_swaps_the_snapshot_on_it() {
        let mut running = running("reload-off-thread", "127.0.0.2:53");
        let generation = running.resolver.snapshot().generation;
        std::fs::write(running.dir.0.join(variables::UPSTREAMS), "127.0.0.3:53").unwrap();
        let serving = std::thread::current().id();
        let (worked_on, thread) = std::sync::mpsc::channel();
        running
            .reloader
            .reload(move || worked_on.send(std::thread::current().id()).is_ok())
            .await;
        assert_ne!(thread.recv().unwrap(), serving);
        assert!(running.resolver.snapshot().generation > generation);
        assert_eq!(kube_dns(&running.resolver), [addr("127.0.0.3:53")]);
    }

    /// A retry whose watches still cannot be armed reads nothing (what cannot be watched is not
    /// there to be read either): its `before` says so, and the running snapshot stays.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reload_whose_arming_says_skip_reads_nothing() {
        let mut running = running("reload-skip", "127.0.0.2:53");
        let generation = running.resolver.snapshot().generation;
        std::fs::write(running.dir.0.join(variables::UPSTREAMS), "127.0.0.3:53").unwrap();
        running.reloader.reload(|| false).await;
        assert_eq!(running.resolver.snapshot().generation, generation);
        assert_eq!(kube_dns(&running.resolver), [addr("127.0.0.2:53")]);
    }

    /// Waits (5 s at most) for the watcher to wake the reload task.
    fn woken(wake: &mut mpsc::Receiver<()>) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if wake.try_recv().is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// A kubelet update writes inside the directory: nothing that moves a watch, so the
    /// reload's check leaves the watches as they are (re-arming cost two round trips to the
    /// watcher's thread a reload). The directory deleted and made again is another directory:
    /// the check arms it again, and a write in it wakes the reload.
    #[test]
    fn a_write_inside_the_directory_moves_no_watch_and_a_replaced_one_is_armed_again() {
        let scratch = crate::certificates::tests::Scratch::new("reload-rearm");
        let dir = scratch.0.join("config");
        std::fs::create_dir(&dir).unwrap();
        let (wake, mut woke) = mpsc::channel(1);
        let burst = Arc::new(Burst::default());
        let mut watches = Watches::new(wake, Arc::clone(&burst), Arc::new(Metrics::new()));
        let wanted = BTreeSet::from([dir.clone()]);
        assert!(watches.arm(wanted.clone()));
        let armed = watches.identities.clone();

        std::fs::write(dir.join("MESHDNS_LOG"), "info").unwrap();
        assert!(woken(&mut woke), "a write inside is an event");
        burst.settle();
        assert!(!watches.moved.load(Ordering::Acquire), "and moves no watch");
        assert!(watches.rearm_if_moved(wanted.clone()));
        assert_eq!(watches.identities, armed, "left as armed");

        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("MESHDNS_LOG"), "debug").unwrap();
        assert!(woken(&mut woke), "the deletion is an event");
        burst.settle();
        // The new directory may even have the old one's inode number (ext4 reuses it at
        // once): the deletion's event, not the identity, is what says the watch is gone.
        assert!(
            watches.moved.load(Ordering::Acquire),
            "which moves the watch"
        );
        assert!(watches.rearm_if_moved(wanted));
        std::fs::write(dir.join("MESHDNS_LOG"), "info").unwrap();
        assert!(woken(&mut woke), "a write in the new directory is an event");
    }
}
