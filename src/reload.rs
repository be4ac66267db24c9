//! Live configuration: `MESHDNS_CONFIG_DIR` and the directories of the TLS files watched with
//! inotify (the kubelet swaps a mounted ConfigMap or Secret atomically by renaming its `..data`
//! symlink, an event in the directory itself), and SIGHUP, which forces a reload where no event
//! comes (a file bind-mounted over another).
//!
//! A change is read and validated as a whole. An invalid one is rejected whole: the running
//! configuration stays, the error is logged naming the variable, and
//! `meshdns_config_reloads_total{result="rejected"}` counts it. A valid one is applied without
//! dropping or delaying a query: a new immutable snapshot is swapped in (queries in flight
//! finish on theirs), upstream groups that did not change are carried over with their health,
//! the cache keeps every entry but those of routes that changed, and the log filter and cache
//! limits follow. Settings that need a restart (sockets, threads, the in-flight cap, the log
//! format) are logged as such and not applied.
//!
//! Nothing runs while nothing changes: inotify wakes the task only on an event, and the short
//! settling delay (the kubelet writes several entries per update) starts only after one.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::{mpsc, watch};

use crate::background::Background;
use crate::cache::{CacheKey, LegScope};
use crate::config::{Config, variables};
use crate::metrics::{Metrics, ReloadResult};
use crate::process;
use crate::query::Resolver;
use crate::route::{Route, Router};
use crate::snapshot::Snapshot;

/// How long a burst of events must be quiet before the directory is read.
pub const SETTLE: Duration = Duration::from_millis(200);

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

    /// Reads the environment captured at startup and the directory again, and applies the
    /// result or rejects it whole.
    pub fn reload(&mut self) {
        let read = match Config::from_environment(&self.config.environment) {
            Ok(read) => read,
            Err(error) => {
                tracing::error!(variable = %error.variable, %error, "configuration change rejected; the running configuration stays");
                self.metrics.config_reload(ReloadResult::Rejected);
                return;
            }
        };
        let mut changed = self.config.settings.changed(&read.settings);
        // The TLS files may change under the same paths (cert-manager rotating a Secret).
        if self.config.tls != read.tls && !changed.contains(&variables::TLS_CA_FILE) {
            changed.push(variables::TLS_CA_FILE);
        }
        if changed.is_empty() {
            tracing::debug!("configuration directory read; nothing changed");
            return;
        }
        let (restart, live): (Vec<&str>, Vec<&str>) = changed
            .iter()
            .partition(|name| variables::find(name).is_some_and(|v| v.restart));
        for variable in &restart {
            tracing::warn!(%variable, "changed, but only a restart applies it; the running value stays");
        }
        let applied = Config {
            listen: self.config.listen.clone(),
            admin_listen: self.config.admin_listen,
            threads: self.config.threads,
            max_inflight: self.config.max_inflight,
            log_format: self.config.log_format,
            config_dir: self.config.config_dir.clone(),
            ..read
        };
        self.apply(&applied);
        tracing::info!(changed = ?live, "configuration applied");
        self.metrics.config_reload(ReloadResult::Applied);
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
    /// answer, a straggling leg, a refresh, a failure), and the entries of the routes that
    /// changed are gone — and only then do queries start on it, so none of them can meet an
    /// answer of a changed route. A query that starts in between runs on the previous
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
        cache.advance(
            snapshot.generation,
            unchanged_routes((old, &previous.router), (new, &snapshot.router)),
        );
        self.resolver.replace(snapshot);
    }
}

/// Whether a cache entry may outlive the change from `old` to `new` (each with its router): its
/// name routes the same way to a target that did not change. A gathered leg stays while its
/// cluster (by identity: name, endpoints, domain) is still configured, wherever in the list.
fn unchanged_routes<'a>(
    (old, old_router): (&'a Config, &'a Router),
    (new, new_router): (&'a Config, &'a Router),
) -> impl Fn(&CacheKey) -> bool + 'a {
    let clusters_same = old.clusters == new.clusters;
    let upstreams_same = old.upstreams == new.upstreams;
    let scopes: HashSet<LegScope> = new.clusters.iter().map(LegScope::of).collect();
    move |key| {
        if let Some(scope) = key.leg_scope() {
            return scopes.contains(&scope);
        }
        match (old_router.route(key.name()), new_router.route(key.name())) {
            (Route::Passthrough, Route::Passthrough) => upstreams_same,
            (Route::Cluster(a), Route::Cluster(b)) => old.clusters.get(a) == new.clusters.get(b),
            (Route::Distributed(a), Route::Distributed(b)) => {
                clusters_same && old.distributed_zones.get(a) == new.distributed_zones.get(b)
            }
            (Route::Clusterset, Route::Clusterset) => clusters_same,
            _ => false,
        }
    }
}

/// Reloads on every change of the watched directories (see [`Reloader::watched_dirs`]) and on
/// SIGHUP until `shutdown` is signalled. With nothing to watch it only waits for SIGHUP (which
/// then never ends the process, as its default action would).
pub async fn watch_and_reload(mut reloader: Reloader, mut shutdown: watch::Receiver<bool>) {
    let (events, mut changed) = mpsc::channel::<()>(1);
    let mut watches = Watches::new(events);
    watches.follow(reloader.watched_dirs());
    // Whatever changed between the start's read and the watch's start is read now.
    reloader.reload();
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP");
            None
        }
    };
    loop {
        tokio::select! {
            Some(()) = changed.recv() => {
                // Let the burst of a kubelet update settle, then read it once.
                while tokio::time::timeout(SETTLE, changed.recv()).await.is_ok_and(|e| e.is_some()) {}
            }
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                tracing::info!("SIGHUP: reloading the configuration");
            }
            () = crate::server::stopped(&mut shutdown) => return,
        }
        reloader.reload();
        watches.follow(reloader.watched_dirs());
    }
}

/// The inotify watches: made only while there is something to watch (no watcher thread
/// otherwise), following the set of directories as reloads change it.
struct Watches {
    events: mpsc::Sender<()>,
    watcher: Option<notify::RecommendedWatcher>,
    watched: BTreeSet<PathBuf>,
}

impl Watches {
    fn new(events: mpsc::Sender<()>) -> Self {
        Self {
            events,
            watcher: None,
            watched: BTreeSet::new(),
        }
    }

    /// Watches exactly `wanted`.
    fn follow(&mut self, wanted: BTreeSet<PathBuf>) {
        if wanted.is_empty() {
            self.watcher = None;
            self.watched.clear();
            return;
        }
        let watched = std::mem::take(&mut self.watched);
        let Some(watcher) = self.watcher() else {
            return;
        };
        for gone in watched.difference(&wanted) {
            let _ = watcher.unwatch(gone);
        }
        for new in wanted.difference(&watched) {
            if let Err(error) = watcher.watch(new, notify::RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %new.display(), %error, "cannot watch; its changes are applied on SIGHUP only");
            }
        }
        self.watched = wanted;
    }

    fn watcher(&mut self) -> Option<&mut notify::RecommendedWatcher> {
        if self.watcher.is_none() {
            let events = self.events.clone();
            let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Reading the directory opens it, and an open is an event too: only changes
                // count, or every reload would announce the next one.
                if event.is_ok_and(|event| !matches!(event.kind, notify::EventKind::Access(_))) {
                    // A reload is already due when the channel is full.
                    let _ = events.try_send(());
                }
            });
            match made {
                Ok(watcher) => self.watcher = Some(watcher),
                Err(error) => {
                    tracing::warn!(%error, "cannot watch for configuration changes; they are applied on SIGHUP only");
                }
            }
        }
        self.watcher.as_mut()
    }
}
