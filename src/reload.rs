//! Live configuration: `MESHDNS_CONFIG_DIR` and the directories of the TLS files watched with
//! inotify (the kubelet swaps a mounted ConfigMap or Secret atomically by renaming its `..data`
//! symlink, an event in the directory itself), and SIGHUP, which forces a reload where no event
//! comes (a file or directory bind-mounted over another).
//!
//! A change is read and validated as a whole, off the thread that answers queries (the files
//! are read, the keys parsed and the watches armed on tokio's blocking pool: a hung mount
//! delays the reload, never a query). An invalid one is rejected whole: the running configuration stays, the error is
//! logged naming the variable, and `meshdns_config_reloads_total{result="rejected"}` counts it.
//! A valid one is applied without dropping or delaying a query: a new immutable snapshot is
//! swapped in (queries in flight finish on theirs), upstream groups that did not change are
//! carried over with their health, the cache keeps the entries of every target that did
//! not change (without looking at one: see [`TargetId`](crate::cache::TargetId)), and the log
//! filter and cache limits follow. A change of a restart-only variable
//! (see [`variables::RESTART_ONLY`]) is logged with the value in force and the pending one,
//! counted as `restart_required` and not applied; one back to the value in force is logged too.
//!
//! The watch never goes blind. A directory that is a symlink, or missing, is watched together
//! with its parent, so that a symlink renamed over it (`mv -T`) or its creation is an event
//! too; a real directory reports its own deletion (and its parent, which may be busy with
//! other files' writes, is not watched: each of those writes would wake the watcher); every reload
//! re-arms every watch before it reads (a directory replaced in any way is then watched
//! anew), and SIGHUP reloads and so re-arms (the way out after a mount over the directory,
//! which no inotify event reports). A watch that cannot be armed is logged, counted in
//! `meshdns_config_watch_errors_total`, and retried with a backoff from [`RETRY_FIRST`] to
//! [`RETRY_MAX`].
//!
//! Nothing runs while nothing changes: inotify wakes the task only on an event, the short
//! settling delay (the kubelet writes several entries per update) starts only after one, and
//! the retry timer exists only while a watch is failing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use notify::Watcher;
use tokio::sync::{mpsc, watch};

use crate::background::Background;
use crate::config::{Config, ConfigError, Settings, effective, variables};
use crate::metrics::{Metrics, ReloadResult};
use crate::process;
use crate::query::Resolver;
use crate::snapshot::Snapshot;

/// How long a burst of events must be quiet before the directory is read.
pub const SETTLE: Duration = Duration::from_millis(200);

/// The first retry of a watch that could not be armed, doubled after every failure ...
pub const RETRY_FIRST: Duration = Duration::from_secs(1);

/// ... up to this.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a reload works on: the configuration in force and what it configures.
#[derive(Debug)]
pub struct Reloader {
    config: Config,
    resolver: Arc<Resolver>,
    metrics: Arc<Metrics>,
    background: Arc<Background>,
}

impl Reloader {
    pub fn new(
        config: Config,
        resolver: Arc<Resolver>,
        metrics: Arc<Metrics>,
        background: Arc<Background>,
    ) -> Self {
        Self {
            config,
            resolver,
            metrics,
            background,
        }
    }

    /// Reads the environment captured at startup and the directory again (off this thread),
    /// and applies the result or rejects it whole.
    pub async fn reload(&mut self) {
        let read = match read_off_thread(&self.config.environment).await {
            Ok(read) => read,
            Err(error) => {
                tracing::error!(variable = %error.variable, %error, "configuration change rejected; the running configuration stays");
                self.metrics.config_reload(ReloadResult::Rejected);
                return;
            }
        };
        let mut changed = self.config.settings.changed(&read.settings);
        // The TLS files may change under the same paths (cert-manager rotating a Secret): name
        // the variable of each file whose content changed.
        if let (Some(old), Some(new)) = (&self.config.tls, &read.tls) {
            for variable in old.rotated(new) {
                if !changed.contains(&variable) {
                    changed.push(variable);
                }
            }
        }
        if changed.is_empty() {
            tracing::debug!("configuration directory read; nothing changed");
            return;
        }
        let (restart, live): (Vec<&str>, Vec<&str>) = changed
            .iter()
            .partition(|name| variables::RESTART_ONLY.contains(name));
        let mut restart_required = false;
        for variable in restart {
            let (running, pending) = (
                effective(&self.config, variable),
                effective(&read, variable),
            );
            if running == pending {
                tracing::info!(%variable, value = %running, "back to the value in force; no restart needed");
            } else {
                tracing::warn!(%variable, %running, %pending, "changed, but only a restart applies it; the running value stays");
                restart_required = true;
            }
        }
        let mut applied = read;
        for variable in variables::RESTART_ONLY {
            keep_running(&mut applied, &self.config, variable);
        }
        if !live.is_empty() {
            self.apply(&applied);
            tracing::info!(changed = %live.join(","), "configuration applied");
            self.metrics.config_reload(ReloadResult::Applied);
        }
        if restart_required {
            self.metrics.config_reload(ReloadResult::RestartRequired);
        }
        self.config = applied;
    }

    /// The directories whose changes may change the configuration: the configuration directory,
    /// and those holding the TLS files (a mounted Secret is swapped in its own directory).
    pub fn watched_dirs(&self) -> BTreeSet<PathBuf> {
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

    /// Makes `new` the running configuration: the next generation. The cache moves on to it
    /// first — from then on it refuses what work of the previous generations writes (a slow
    /// answer, a straggling leg, a refresh, a failure) — and only then do queries start on it,
    /// looking up under the new snapshot's targets, so none of them can meet an answer of a
    /// changed target. A query that starts in between runs on the previous
    /// configuration, as if it had come a moment earlier, and caches nothing.
    fn apply(&self, new: &Config) {
        let old = &self.config;
        if new.log != old.log {
            process::set_log_filter(&new.log);
        }
        let cache = self.resolver.cache();
        if new.cache != old.cache {
            cache.reconfigure(&new.cache);
        }
        let previous = self.resolver.snapshot();
        let snapshot = Snapshot::new(new, cache, &self.metrics, &self.background, Some(&previous));
        cache.advance(snapshot.generation);
        self.resolver.replace(snapshot);
    }
}

/// Puts the running value of the restart-only `variable` (one of [`variables::RESTART_ONLY`],
/// the one list of them) back into `applied`. `MESHDNS_CONFIG_DIR` needs no keeping: it is
/// read from the environment captured at startup.
fn keep_running(applied: &mut Config, running: &Config, variable: &str) {
    use variables::*;
    match variable {
        LISTEN => applied.listen.clone_from(&running.listen),
        ADMIN_LISTEN => applied.admin_listen = running.admin_listen,
        THREADS => applied.threads = running.threads,
        MAX_INFLIGHT => applied.max_inflight = running.max_inflight,
        LOG_FORMAT => applied.log_format = running.log_format,
        // The pod's identity is fixed for its life: the one read at startup stays.
        POD_IP | POD_IPS | POD_HOSTNAME | POD_SUBDOMAIN | POD_NAMESPACE | HOSTS_FILE => {
            applied.pod.clone_from(&running.pod);
        }
        _ => {}
    }
}

/// [`Config::from_environment`] on tokio's blocking pool: the directory and the PEM files are
/// read, and the keys parsed, off the thread that answers queries.
async fn read_off_thread(environment: &Settings) -> Result<Config, ConfigError> {
    let environment = environment.clone();
    tokio::task::spawn_blocking(move || Config::from_environment(&environment))
        .await
        .unwrap_or_else(|failed| {
            Err(ConfigError {
                variable: variables::CONFIG_DIR.to_string(),
                token: String::new(),
                reason: format!("could not be read: {failed}"),
            })
        })
}

/// Reloads on every change of the watched directories (see [`Reloader::watched_dirs`]) and on
/// SIGHUP until `shutdown` is signalled. With nothing to watch it only waits for SIGHUP (which
/// then never ends the process, as its default action would).
pub async fn watch_and_reload(mut reloader: Reloader, mut shutdown: watch::Receiver<bool>) {
    let (events, mut changed) = mpsc::channel::<()>(1);
    let watches = Arc::new(Mutex::new(Watches::new(
        events,
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
        let mut retrying = false;
        if !first {
            let retry = lock(&watches).retry;
            tokio::select! {
                Some(()) = changed.recv() => {
                    // Let the burst of a kubelet update settle, then read it once.
                    while tokio::time::timeout(SETTLE, changed.recv()).await.is_ok_and(|e| e.is_some()) {}
                }
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    tracing::info!("SIGHUP: re-reading the configuration and re-arming its watches");
                }
                () = async { match retry { Some(after) => tokio::time::sleep(after).await, None => std::future::pending().await } } => {
                    tracing::debug!("retrying the watches that could not be armed");
                    retrying = true;
                }
                () = crate::server::stopped(&mut shutdown) => return,
            }
        }
        first = false;
        // Armed before the read: a change after this point is an event, one before it is read.
        // A retry that fails again has nothing new to read (what cannot be watched is not there
        // to be read either); one that succeeds reads what appeared unseen.
        if !arm_off_thread(&watches, reloader.watched_dirs()).await && retrying {
            continue;
        }
        tokio::select! {
            () = reloader.reload() => {}
            () = crate::server::stopped(&mut shutdown) => return,
        }
        // A reload may move the TLS files to other directories.
        let wanted = reloader.watched_dirs();
        if wanted != lock(&watches).dirs() {
            arm_off_thread(&watches, wanted).await;
        }
    }
}

/// [`Watches::arm`] on tokio's blocking pool: it looks at each directory (`symlink_metadata`)
/// and adds and removes inotify watches, path lookups that a hung mount stalls; the runtime's
/// threads (one, with `MESHDNS_THREADS=1`) keep answering queries meanwhile. Whether every
/// watch could be armed.
async fn arm_off_thread(watches: &Arc<Mutex<Watches>>, wanted: BTreeSet<PathBuf>) -> bool {
    let watches = Arc::clone(watches);
    tokio::task::spawn_blocking(move || lock(&watches).arm(wanted))
        .await
        .unwrap_or(false)
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
    events: mpsc::Sender<()>,
    metrics: Arc<Metrics>,
    watcher: Option<notify::RecommendedWatcher>,
    /// The directories wanted, shared with the watcher's callback to filter the parents' events.
    dirs: Arc<RwLock<BTreeSet<PathBuf>>>,
    /// The paths watched now (directories and their parents).
    armed: BTreeSet<PathBuf>,
    /// While a watch is failing: when to try again.
    retry: Option<Duration>,
}

impl Watches {
    fn new(events: mpsc::Sender<()>, metrics: Arc<Metrics>) -> Self {
        Self {
            events,
            metrics,
            watcher: None,
            dirs: Arc::default(),
            armed: BTreeSet::new(),
            retry: None,
        }
    }

    fn dirs(&self) -> BTreeSet<PathBuf> {
        self.dirs.read().map(|d| d.clone()).unwrap_or_default()
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
        let Some(watcher) = self.watcher() else {
            self.metrics.config_watch_error();
            self.back_off();
            return false;
        };
        for path in &armed {
            let _ = watcher.unwatch(path);
        }
        let paths: BTreeSet<PathBuf> = wanted
            .iter()
            .flat_map(|dir| {
                let parent = needs_parent(dir).then(|| dir.parent()).flatten();
                std::iter::once(dir.clone()).chain(parent.map(Path::to_path_buf))
            })
            .collect();
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
            let events = self.events.clone();
            let dirs = Arc::clone(&self.dirs);
            let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Reading the directory opens it, and an open is an event too: only changes
                // count, or every reload would announce the next one. An error (the kernel's
                // queue overflowed) may hide a change: reload.
                let relevant = match event {
                    Ok(event) => {
                        !matches!(event.kind, notify::EventKind::Access(_))
                            && concerns(&dirs, &event.paths)
                    }
                    Err(_) => true,
                };
                if relevant {
                    // A reload is already due when the channel is full.
                    let _ = events.try_send(());
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

/// Whether an event on `paths` concerns a watched directory: something in it, or the
/// directory itself (deleted, created, renamed, seen from its parent). Other entries of a
/// parent are not ours.
fn concerns(dirs: &RwLock<BTreeSet<PathBuf>>, paths: &[PathBuf]) -> bool {
    let Ok(dirs) = dirs.read() else {
        return true;
    };
    paths.is_empty()
        || paths.iter().any(|path| {
            dirs.contains(path) || path.parent().is_some_and(|parent| dirs.contains(parent))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload changes nothing a restart-only variable decides: the running value of each
    /// stays, whatever the directory now says (every variable of the list is tried).
    #[test]
    fn every_restart_only_variable_keeps_its_running_value() {
        use variables::*;
        let base = [
            (UPSTREAMS, "127.0.0.2:53"),
            (POD_IP, "10.0.0.1"),
            (POD_HOSTNAME, "db-0"),
            (POD_SUBDOMAIN, "db"),
            (POD_NAMESPACE, "prod"),
        ];
        let changes = [
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
        let mut listed = RESTART_ONLY.to_vec();
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
            for kept in RESTART_ONLY {
                keep_running(&mut applied, &running, kept);
            }
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
}
