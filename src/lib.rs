//! meshdns: a DNS stub resolver for workloads stretched over several Kubernetes clusters.
//!
//! A query walks one way through the modules:
//! [`server`] (sockets, framing, limits) → [`request`] (parse, FORMERR/NOTIMP) →
//! [`query`] (routing, over one [`snapshot`] of the configuration) → [`route`] (which zone, or a
//! [`search`]-list expansion answered at once) →
//! the route's resolver: [`passthrough`] (kube-dns), [`rewrite`] (a cluster's zone: names
//! there and back), [`gather`] (every cluster, merged), [`own_names`] (the pod's own names,
//! answered locally) → [`upstream`] (endpoints, one exchange, health) → [`reply`] (errors,
//! fitting to size).
//! [`cache`] keeps answers (keys, TTLs, stale, in-flight sharing) for every route: every miss goes
//! through one entry point, the gathered legs through one door. [`background`] is the one tree of
//! the instance's tasks: where each starts, what ends it.
//! [`config`] turns the environment (which the binary reads) and the files it names into one
//! configuration, and [`check`] shows it with the routing table
//! (`meshdns --check`); [`dns_change`] writes the platform's cluster-DNS change from it
//! (`meshdns dns-change`); [`wire`] reads raw bytes without a full parse;
//! [`metrics`] defines every metric, served by the admin server in [`server`];
//! [`process`] is what the binary needs around `run` (logging, runtime, signals).
//! [`webhook`] is the other mode of the binary (`meshdns webhook`): the admission webhook that
//! injects the sidecar into pods that operators create.
//!
//! [`run`] takes sockets that are already bound, so tests bind port 0 and the binary can turn
//! bind failures into their own exit code.
//!
//! The crate's surface is what `main.rs` needs: [`run`] and [`run_webhook`], the configuration
//! ([`Config`], [`WebhookConfig`], [`help`], [`render_check`], [`cluster_dns_change`]), the sockets
//! ([`bind`] and its kin), and [`process`]. Every other item is `pub(crate)` or private (a
//! `pub` field of a crate-private type aside), so the compiler finds what nothing uses. The
//! integration tests, the memory measurements and the fuzz targets reach what they drive
//! through `testing`, a module that exists only with the `testing` feature (the crate's
//! dev-dependency on itself turns it on): a few constants the tests' expectations are made
//! of, the upstream stream endpoint, and two modules built inside the crate, the fuzz targets
//! and the situations the memory measurements weigh.
//!
//! This file owns the instance: [`run`] makes the root of its task tree, starts the listeners,
//! the admin server, the reload watcher and the certificate renewal under it, and stops them
//! all; it answers no query and parses no value.

#![forbid(unsafe_code)]
// The documentation is for the next engineer: built with the private items (`.ci/run`), so
// the crate's paragraph may link to the modules it walks through.
#![allow(rustdoc::private_intra_doc_links)]
// Every `pub` item is reachable from outside (the surface below, or `testing`): the rest is
// `pub(crate)`, so the compiler finds what nothing uses.
#![cfg_attr(feature = "testing", warn(unreachable_pub))]

mod background;
mod cache;
mod certificates;
mod check;
mod config;
mod dns_change;
mod gather;
mod loops;
mod metrics;
mod own_names;
mod passthrough;
pub mod process;
mod query;
mod reload;
mod reply;
mod request;
mod reverse;
mod rewrite;
mod route;
mod search;
mod server;
mod snapshot;
#[cfg(feature = "testing")]
pub mod testing;
mod upstream;
mod webhook;
mod wire;

pub use certificates::server::{ServerTls, ServerTlsFiles};
pub use check::render_check;
pub use config::variables::help;
pub use config::{Config, ConfigError, Errors, WebhookConfig, read_env_file};
pub use dns_change::{Platform, generate as cluster_dns_change};
pub use server::{BindError, Listeners, bind, bind_admin, bind_dot, bind_spread, bind_webhook};
pub use webhook::run as run_webhook;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};

use background::{Background, Owner, Tasks};
use metrics::Metrics;
use query::Resolver;
use server::{Readiness, Shared};

/// How long in-flight queries may take to finish after shutdown is signalled.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Starts the loop of every DNS listener in `listeners`: each UDP socket (with MESHDNS_THREADS
/// above 1 there is one per thread on each address: `server::bind_spread`), each TCP listener,
/// and each DNS-over-TLS listener with the certificate of `dot`, each under an owner of its
/// own ([`start_listener`]). Returns the owners, which `run` holds until it returns.
fn serve_listeners(
    listeners: Listeners,
    dot: Option<&config::DotConfig>,
    shared: &Shared,
    background: &Background,
    ended: &mpsc::UnboundedSender<std::io::Error>,
) -> std::io::Result<Vec<Owner>> {
    let mut owners = Vec::new();
    for socket in listeners.udp {
        let shared = shared.clone();
        owners.push(start_listener(background, ended, |misses| {
            server::serve_udp(socket, shared, misses)
        }));
    }
    for listener in listeners.tcp {
        let (listener, shared) = (TcpListener::from_std(listener)?, shared.clone());
        owners.push(start_listener(background, ended, |connections| {
            server::serve_tcp(listener, shared, connections)
        }));
    }
    let Some(dot) = dot else {
        return Ok(owners);
    };
    for listener in listeners.dot {
        let (listener, shared) = (TcpListener::from_std(listener)?, shared.clone());
        let tls = Arc::clone(&dot.tls);
        owners.push(start_listener(background, ended, |connections| {
            server::serve_dot(listener, shared, tls, connections)
        }));
    }
    Ok(owners)
}

/// Starts one DNS listener's loop, `serve`, on an owner of its own on the client path of
/// `background` (so that shutdown waits for it and its work), handing it the owner's node for
/// its misses or connections. However the loop ends, it says why on `ended`.
fn start_listener<Served>(
    background: &Background,
    ended: &mpsc::UnboundedSender<std::io::Error>,
    serve: impl FnOnce(Tasks) -> Served,
) -> Owner
where
    Served: Future<Output = std::io::Result<()>> + Send + 'static,
{
    let owner = background.clients().child();
    let served = serve(owner.tasks());
    let ended = ended.clone();
    owner.spawn(async move {
        let mut end = ListenerEnd { ended, error: None };
        end.error = served.await.err();
    });
    owner
}

/// Tells `run` that a DNS listener's loop has ended, when dropped: with the loop's error, or
/// that it stopped (it returned, or panicked). Before shutdown a listener ends only with the
/// process; at shutdown nobody listens any more.
struct ListenerEnd {
    ended: mpsc::UnboundedSender<std::io::Error>,
    error: Option<std::io::Error>,
}

impl Drop for ListenerEnd {
    fn drop(&mut self) {
        let error =
            (self.error.take()).unwrap_or_else(|| std::io::Error::other("a DNS listener stopped"));
        let _ = self.ended.send(error);
    }
}

/// Keeps the certificate `listener` serves renewed from its files (see
/// [`certificates::server`]), checked every `every`, and its expiry and reloads shown in
/// `metrics`, until its owner ends it: the DNS-over-TLS listener and the webhook's alike.
pub(crate) fn renew_server_certificate(
    listener: metrics::TlsListener,
    tls: &Arc<certificates::server::ServerTls>,
    every: Duration,
    metrics: Arc<Metrics>,
) -> impl Future<Output = ()> + Send + 'static {
    use certificates::server::Refresh;
    metrics.server_certificate(listener, tls.not_after());
    certificates::server::keep_fresh(Arc::clone(tls), every, move |refresh| match refresh {
        Refresh::Unchanged => {}
        Refresh::Renewed { not_after } => {
            metrics.server_certificate(listener, *not_after);
            metrics.server_certificate_reload(listener, true);
        }
        Refresh::Rejected(_) => metrics.server_certificate_reload(listener, false),
    })
}

/// Starts the admin server on `listener` under an owner of its own below the root of
/// `background` (its connections are that owner's work): the owner, which `run` holds until it
/// returns, and the address it listens on. The webhook's admin server alike.
pub(crate) fn start_admin(
    listener: std::net::TcpListener,
    readiness: &Readiness,
    metrics: &Arc<Metrics>,
    background: &Background,
) -> std::io::Result<(Owner, Option<SocketAddr>)> {
    let listener = TcpListener::from_std(listener)?;
    let addr = listener.local_addr().ok();
    let admin = background.owner();
    let connections = admin.tasks();
    let (readiness, metrics) = (readiness.clone(), Arc::clone(metrics));
    admin.spawn(server::serve_admin(
        listener,
        readiness,
        metrics,
        connections,
    ));
    Ok((admin, addr))
}

/// The startup log: what meshdns serves, where, and whom it asks (`bound`: the DNS listeners'
/// addresses, `admin`: the admin listener's), with the warning of a search list it cannot
/// expand its own names under.
fn log_startup(config: &Config, bound: &[SocketAddr], admin: Option<SocketAddr>) {
    if let Err(why) = &config.search {
        tracing::warn!("search-list expansions of meshdns's names go to kube-dns: {why}");
    }
    tracing::info!(
        listen = %bound.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        admin = %admin.map_or("disabled".to_string(), |a| a.to_string()),
        upstreams = %config.upstreams.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        clusters = %config.clusters_in_words(),
        dot = %config.dot.as_ref().map_or("disabled".to_string(), |dot| dot.listen.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")),
        "meshdns {} serving DNS over UDP and TCP",
        env!("CARGO_PKG_VERSION"),
    );
    own_names::log_startup(config);
}

/// Serves DNS on `listeners` until `shutdown` resolves, then stops accepting, lets in-flight
/// queries finish (at most [`SHUTDOWN_GRACE`]) and returns. Must run inside a tokio runtime.
/// The admin listener, when given, is served on its own task from the start; `/readyz` turns
/// 200 once every DNS listener is served, and 503 again when shutdown begins.
///
/// Every task it starts is one of the tree rooted at its [`Background`]: the admin server and
/// each listener under an owner of their own that `run` holds, their connections below. It
/// returns once the root has stopped and every one of them has ended.
pub async fn run(
    config: Config,
    mut listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let metrics = Arc::new(Metrics::new());
    metrics.client_certificate(config.tls.as_ref().and_then(|tls| tls.loaded.not_after));
    let readiness = Readiness::default();
    // The root of every task of this instance: closed (and waited for) before `run` returns,
    // whichever way.
    let background = Arc::new(Background::with_metrics(
        background::DEFAULT_LIMIT,
        metrics.background(),
    ));
    let admin = (listeners.admin.take())
        .map(|listener| start_admin(listener, &readiness, &metrics, &background))
        .transpose()?;
    let root = background.tasks();
    let resolver = Arc::new(Resolver::for_config(
        &config,
        Arc::clone(&metrics),
        &background,
    ));
    let reloader = reload::Reloader::new(
        config.clone(),
        Arc::clone(&resolver),
        Arc::clone(&metrics),
        Arc::clone(&background),
    );
    root.spawn(reload::watch_and_reload(reloader, background.draining()));
    let shared = Shared {
        resolver,
        inflight: Arc::new(Semaphore::new(config.max_inflight)),
        tcp_inflight: Arc::new(Semaphore::new(server::tcp_share(config.max_inflight))),
        metrics,
        shutdown: background.draining(),
    };
    let bound = listeners.local_addrs();
    let (ended, mut listener_ended) = mpsc::unbounded_channel();
    let served = serve_listeners(listeners, config.dot.as_ref(), &shared, &background, &ended);
    drop(ended);
    // Held until `run` returns: the listeners' connections finish under them at shutdown.
    let _listening = match served {
        Ok(owners) => owners,
        Err(error) => {
            background.close();
            background.closed().await;
            return Err(error);
        }
    };
    if let Some(dot) = &config.dot {
        root.spawn(renew_server_certificate(
            metrics::TlsListener::Dot,
            &dot.tls,
            dot.check_every,
            Arc::clone(&shared.metrics),
        ));
    }
    readiness.set(true);
    log_startup(&config, &bound, admin.as_ref().and_then(|(_, addr)| *addr));

    tokio::select! {
        () = shutdown => tracing::info!("shutting down: draining in-flight queries"),
        Some(error) = listener_ended.recv() => {
            // A listener ends only with the process: serving half the sockets would leave the
            // pod's DNS broken while /readyz says otherwise. Exit, and let the kubelet restart.
            readiness.set(false);
            background.drain();
            tracing::error!(%error, "a listener failed; exiting");
            background.close();
            background.closed().await;
            return Err(error);
        }
    }
    readiness.set(false);
    // The listeners return, their connections finish the queries they have and write the
    // replies, then every task is stopped.
    let late = "shutdown grace time over with queries still in flight";
    background.shut_down(SHUTDOWN_GRACE, late).await;
    Ok(())
}
