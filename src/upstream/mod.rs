//! Upstreams: a named group of DNS endpoints (kube-dns, or one peer cluster's exposed CoreDNS)
//! and the one operation the rest of meshdns needs from them, [`Upstream::exchange`].
//!
//! An exchange sends a query to the group's endpoints one after another — healthy endpoints
//! first — until one gives an acceptable reply or the query's deadline passes. An attempt that
//! has not been answered within the attempt timeout does not stop listening: the next endpoint
//! is asked as well, and whichever answers first wins, so a reply that arrives just late is
//! still used. At most [`MAX_LISTENING`] attempts listen at once, and an exchange makes at most
//! one attempt per endpoint plus one retry, so a query costs a bounded number of sockets and
//! packets however long its deadline. "Acceptable" is decided in the `accept` module, for every
//! transport: a reply that does not walk fully is no reply, and the attempt listens on.
//! Endpoints that keep failing are skipped until a background probe sees them answer again
//! (the `endpoint` module). The attempts run inside their exchange, not as tasks of their own
//! (the `listening` module), under one timer: a miss costs one task and one timer. The
//! `failover` module drives one exchange: where it stands between two events, and what it
//! does next (attempt, listen, or give up).
//!
//! A lost datagram costs a retransmission timeout, not an attempt. Each endpoint's health
//! record (the `health` module) keeps its round-trip estimate, from which its retransmission
//! timeout (RTO) comes. Over UDP, a query not answered within the RTO of the endpoint asked is
//! sent again: to the next endpoint when one that is up and not yet asked remains (a hedge: a
//! new attempt, while the first keeps listening), else to the same endpoint on the same socket
//! (the `exchange` module), the wait doubling each time. The first valid reply wins, late
//! replies to an earlier send included. An exchange makes at most [`MAX_RETRANSMITS`] of them;
//! the attempt timeout stays the ceiling of one wait and the time after which a silent attempt
//! counts as failed. An endpoint that is down, or whose last attempt failed, gets one datagram
//! per attempt (its next answer, or its probe, decides when it is back), and TCP and TLS are
//! never resent: the kernel retransmits their segments.
//!
//! A UDP group remembers the questions it last answered too big for UDP (the `truncated`
//! module): the next ask of one goes over the endpoint's TCP connection at once, one attempt
//! per endpoint without retransmissions (the kernel retransmits TCP segments), instead of a
//! UDP round trip for a truncated reply first.
//!
//! Every attempt is counted in `meshdns_upstream_requests_total` and timed in
//! `meshdns_upstream_duration_seconds`, every retransmission in
//! `meshdns_upstream_retransmits_total`; failures and health changes are logged at most once
//! per endpoint every 10 s (the `log_limit` module).
//!
//! A group owns everything started for it, and ends it when it is dropped (a reload that
//! replaced it, shutdown): its endpoints (their probes and TLS connections), the tasks keeping
//! its host names resolved, and its metric series (the `series` module) — through one
//! [`Owner`], of which each endpoint's is a child.
//!
//! Every query meshdns sends to another server leaves through this module (a group's
//! exchange, or an endpoint's probe). A group knows no route, zone or cache: its caller makes
//! the query and decides what the reply means.

mod accept;
mod endpoint;
mod exchange;
mod failover;
mod health;
mod listening;
pub(crate) mod log_limit;
pub(crate) mod marker;
pub(crate) mod names;
mod series;
pub(crate) mod stream;
mod truncated;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use hickory_proto::rr::Name;
use rustls::pki_types::ServerName;
use tokio::time::Instant;

use crate::background::{Owner, Tasks};
use crate::certificates::{ClientTls, CurrentTls};
use crate::config::{self, Transport};
use crate::wire;
use endpoint::{Dialer, Endpoint};
use marker::Marked;
use series::GroupSeries;
use stream::{StreamEndpoint, StreamSettings};
use truncated::Truncated;

#[cfg(any(test, feature = "testing"))]
pub use accept::acceptable;
pub(crate) use exchange::{Answered, AttemptError};
#[cfg(any(test, feature = "testing"))]
pub use health::{INITIAL_RTO, RTO_FLOOR};
pub(crate) use series::{PeerCertificateSeries, UpstreamMetrics};

/// Attempts of one exchange listening at once: the one just made and the one before it.
pub(crate) const MAX_LISTENING: usize = 2;

/// Retransmissions one exchange may make (a UDP query sent again to the same endpoint, or a
/// hedge to the next), besides its failover attempts. Four sends all go unanswered for 0.13 %
/// of queries when 10 % of packets are lost each way (19 % of round trips), 0.01 % at 5 %:
/// less than a client notices. And a dead endpoint costs a query at most three datagrams
/// more until it is marked down (three failed attempts), after which it gets one per attempt.
pub const MAX_RETRANSMITS: u32 = 3;

/// Why no acceptable reply came.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("no endpoint answered before the deadline (last: {0})")]
    Exhausted(AttemptError),
    #[error("the deadline had already passed")]
    NoTime,
    #[error("no endpoint address is known (its host names have not resolved)")]
    NoEndpoint,
}

impl UpstreamError {
    /// Why `who` (the cluster DNS, kube-dns) could not help, in words an operator can act on:
    /// the text of the Extended DNS Error the client gets. A TLS failure says TLS, not "did not
    /// answer" (which sends people looking at firewalls).
    pub(crate) fn client_reason(&self, who: &str) -> String {
        match self {
            UpstreamError::Exhausted(AttemptError::Tls(_)) => {
                format!("TLS to {who} failed: certificate rejected or handshake failed")
            }
            UpstreamError::Exhausted(AttemptError::Network(_)) => {
                format!("{who} unreachable: connection refused or reset")
            }
            UpstreamError::Exhausted(AttemptError::Local(_)) => {
                format!("meshdns is short of sockets or buffers; {who} not asked")
            }
            UpstreamError::Exhausted(AttemptError::Timeout | AttemptError::BadQuery)
            | UpstreamError::NoTime => format!("{who} did not answer"),
            UpstreamError::NoEndpoint => {
                format!("{who} has no address: its endpoint names have not resolved")
            }
        }
    }
}

/// How one attempt at an upstream endpoint ended: the `result` label of
/// `meshdns_upstream_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptResult {
    /// An answer: NOERROR or NXDOMAIN.
    Ok,
    Servfail,
    Refused,
    /// Another response code (FORMERR, NOTIMP, …): the endpoint answered but could not help.
    OtherRcode,
    Timeout,
    /// A network error (connection refused, reset, unreachable) or a query that could not be sent.
    Error,
    /// The TLS session could not be set up or the peer's certificate did not verify.
    TlsError,
    /// meshdns was short of a resource (sockets, buffers); the endpoint is not blamed.
    LocalError,
}

impl AttemptResult {
    pub(crate) const ALL: [AttemptResult; 8] = [
        AttemptResult::Ok,
        AttemptResult::Servfail,
        AttemptResult::Refused,
        AttemptResult::OtherRcode,
        AttemptResult::Timeout,
        AttemptResult::Error,
        AttemptResult::TlsError,
        AttemptResult::LocalError,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            AttemptResult::Ok => "ok",
            AttemptResult::Servfail => "servfail",
            AttemptResult::Refused => "refused",
            AttemptResult::OtherRcode => "other_rcode",
            AttemptResult::Timeout => "timeout",
            AttemptResult::Error => "error",
            AttemptResult::TlsError => "tls_error",
            AttemptResult::LocalError => "local_error",
        }
    }

    /// The result of a reply that was accepted, from its response code.
    pub(crate) fn of_reply(reply: &[u8]) -> Self {
        match wire::rcode(reply) {
            Some(0 | 3) => AttemptResult::Ok,
            Some(2) => AttemptResult::Servfail,
            Some(5) => AttemptResult::Refused,
            _ => AttemptResult::OtherRcode,
        }
    }

    fn of_error(error: &AttemptError) -> Self {
        match error {
            AttemptError::Timeout => AttemptResult::Timeout,
            AttemptError::Network(_) | AttemptError::BadQuery => AttemptResult::Error,
            AttemptError::Tls(_) => AttemptResult::TlsError,
            AttemptError::Local(_) => AttemptResult::LocalError,
        }
    }
}

/// What a group is made of. Equal specs make interchangeable groups, so a reload keeps a
/// group — and its endpoints' health, and its resolved names — when its spec did not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupSpec {
    /// The cluster name, or `local` for kube-dns without a local cluster name: a metric label.
    pub name: String,
    pub endpoints: Vec<config::Endpoint>,
    pub transport: Transport,
    pub tls_name: Option<Name>,
    /// For `transport=tls`: the client configuration its connections use (a rotation of the
    /// files changes its fingerprint, and so the group).
    pub tls: Option<ClientTls>,
    pub attempt_timeout: Duration,
    /// meshdns's own listen addresses: a host name that resolves to one is never asked.
    pub own: Vec<SocketAddr>,
}

/// Where an exchange stands, for a gathered answer that must decide how long a straggling leg
/// may still take (see `gather`). Updated at every attempt the exchange makes; read, it asks
/// the endpoints' health records as they are now.
#[derive(Debug, Default)]
pub(crate) struct Progress(Mutex<Option<Current>>);

/// The attempt an exchange is making now, and the endpoint it would ask next.
#[derive(Debug, Clone)]
struct Current {
    /// When the attempt, its retransmissions included, has been silent too long.
    silent_at: Instant,
    endpoint: Arc<Endpoint>,
    /// The endpoint of the exchange's next attempt, when it has one left: the next endpoint,
    /// or the same once more (the retry).
    next: Option<Arc<Endpoint>>,
}

/// The attempt an exchange is making now, as its endpoints' health records say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempting {
    /// When the attempt, its retransmissions included, has been silent for the attempt
    /// timeout: a leg still waiting then is a straggler.
    pub(crate) silent_at: Instant,
    /// The endpoint asked is considered up (a down one is a last resort, not worth waiting for).
    pub(crate) endpoint_up: bool,
    /// The exchange has another attempt left, at an endpoint considered up (the next one, or
    /// for a group of one the same once more).
    pub(crate) next_up: bool,
}

impl Progress {
    pub(crate) fn now(&self) -> Option<Attempting> {
        let current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().map(|current| Attempting {
            silent_at: current.silent_at,
            endpoint_up: current.endpoint.is_up(),
            next_up: current.next.as_ref().is_some_and(|next| next.is_up()),
        })
    }

    fn set(&self, current: Current) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(current);
    }
}

/// How every endpoint of a group is asked, worked out once when the group is made: a new
/// endpoint (a name resolved to a new address) only clones it. Every stream connection an
/// endpoint opens is counted into the group's `meshdns_upstream_connections_total` series.
#[derive(Debug)]
enum Dialing {
    /// UDP; when a reply is truncated, TCP over each endpoint's pipelined connection.
    Udp(StreamSettings),
    /// Each endpoint's pipelined TCP connection.
    Tcp(StreamSettings),
    /// DNS over TLS: each endpoint its own connection, all checking one server name against
    /// one client configuration (the group's, or the one a rotation handed it when it retired
    /// the group), and counting handshakes into the group's series.
    Tls {
        server_name: ServerName<'static>,
        config: CurrentTls,
        settings: StreamSettings,
    },
    /// A TLS group without its client configuration or a valid name. The configuration never
    /// makes one; if it did, its endpoints would fail every attempt with a TLS error rather
    /// than fall back to plain DNS.
    Unusable(String),
}

impl Dialing {
    /// How `spec`'s endpoints are asked, counting connections (and a TLS group's handshakes)
    /// into `series`.
    fn of(spec: &GroupSpec, series: &GroupSeries) -> Self {
        let mut settings = StreamSettings {
            connect_metrics: vec![series.connections.clone()],
            ..StreamSettings::default()
        };
        let tls_name = match spec.transport {
            Transport::Udp => return Dialing::Udp(settings),
            Transport::Tcp => return Dialing::Tcp(settings),
            Transport::Tls => spec
                .tls_name
                .as_ref()
                .map(|n| n.to_ascii().trim_end_matches('.').to_string())
                .unwrap_or_default(),
        };
        match (&spec.tls, crate::certificates::server_name(&tls_name)) {
            (Some(tls), Ok(server_name)) => {
                settings.connect_metrics.push(series.tls_handshakes.clone());
                settings.peer_certificate = Some(series.peer_certificate.clone());
                Dialing::Tls {
                    server_name,
                    config: CurrentTls::new(Arc::clone(&tls.config)),
                    settings,
                }
            }
            _ => Dialing::Unusable("no TLS client configuration or name for this cluster".into()),
        }
    }
}

/// The `transport` label of a group's stream connections: a UDP group's are its TCP retries.
fn stream_label(transport: Transport) -> &'static str {
    match transport {
        Transport::Udp | Transport::Tcp => "tcp",
        Transport::Tls => "tls",
    }
}

/// A group of interchangeable endpoints.
#[derive(Debug)]
pub(crate) struct Upstream {
    spec: GroupSpec,
    dialing: Dialing,
    /// The endpoints now: the configured addresses, then what the host names resolved to.
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    /// The addresses each host-name endpoint (in configuration order) resolved to last.
    resolved: Mutex<Vec<Vec<SocketAddr>>>,
    /// The families, for the series of endpoints to come.
    metrics: UpstreamMetrics,
    /// A UDP group's questions last answered too big for UDP: asked over TCP at once.
    truncated: Option<Truncated>,
    series: GroupSeries,
    /// Ends the work started for the group (its host names kept resolved, its endpoints'
    /// probes) when the group is dropped.
    owner: Owner,
}

impl Upstream {
    /// The group of `spec`. Host-name endpoints are resolved through `local` (the kube-dns
    /// group) by tasks the group owns, so it must be made inside the runtime when it has any.
    /// `owner` (a child of the instance's root) ends the group's work, and its endpoints'.
    pub(crate) fn new(
        spec: GroupSpec,
        local: Option<&Arc<Upstream>>,
        metrics: &UpstreamMetrics,
        owner: Owner,
    ) -> Arc<Self> {
        let series = metrics.group(&spec.name, stream_label(spec.transport));
        let dialing = Dialing::of(&spec, &series);
        let hosts: Vec<(Name, u16)> = spec
            .endpoints
            .iter()
            .filter_map(|e| match e {
                config::Endpoint::Name { host, port } => Some((host.clone(), *port)),
                config::Endpoint::Addr(_) => None,
            })
            .collect();
        let truncated = matches!(dialing, Dialing::Udp(_)).then(Truncated::default);
        let group = Arc::new(Self {
            dialing,
            truncated,
            endpoints: ArcSwap::from_pointee(Vec::new()),
            resolved: Mutex::new(vec![Vec::new(); hosts.len()]),
            metrics: metrics.clone(),
            series,
            owner,
            spec,
        });
        group.rebuild_endpoints();
        if let Some(local) = local {
            for (index, (host, port)) in hosts.into_iter().enumerate() {
                group.owner.spawn(names::keep_resolved(
                    Arc::downgrade(&group),
                    Arc::clone(local),
                    index,
                    host,
                    port,
                    group.series.resolutions.clone(),
                ));
            }
        }
        group
    }

    /// Whether every endpoint of the group is known down (skipped until a probe sees it
    /// answer): a gathered answer does not wait for it. A group without endpoints is not (its
    /// exchange fails at once).
    pub(crate) fn known_down(&self) -> bool {
        let endpoints = self.endpoints.load();
        !endpoints.is_empty() && endpoints.iter().all(|endpoint| !endpoint.is_up())
    }

    /// What this group is made of.
    pub(crate) fn spec(&self) -> &GroupSpec {
        &self.spec
    }

    /// For a DNS-over-TLS group that a rotation of the TLS files replaced: the connections it
    /// still opens (for queries that started on it) use the rotated `tls` from now on.
    pub(crate) fn retire_tls(&self, tls: &ClientTls) {
        if let Dialing::Tls { config, .. } = &self.dialing {
            config.replace(Arc::clone(&tls.config));
        }
    }

    /// Takes what host name number `index` resolved to now.
    fn set_resolved(&self, index: usize, addrs: Vec<SocketAddr>) {
        {
            let mut resolved = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
            match resolved.get_mut(index) {
                Some(slot) if *slot != addrs => *slot = addrs,
                _ => return,
            }
        }
        let now = self.rebuild_endpoints();
        tracing::info!(upstream = %self.spec.name, endpoints = ?now, "endpoint names resolved to new addresses");
    }

    /// How a new endpoint of this group at `addr` is asked; its connections run in `tasks`
    /// (the endpoint's owner's).
    fn dialer(&self, addr: SocketAddr, tasks: Tasks) -> Dialer {
        match &self.dialing {
            Dialing::Udp(settings) => Dialer::Udp {
                tcp: StreamEndpoint::tcp(addr, settings.clone(), tasks),
            },
            Dialing::Tcp(settings) => {
                Dialer::Stream(StreamEndpoint::tcp(addr, settings.clone(), tasks))
            }
            Dialing::Tls {
                server_name,
                config,
                settings,
            } => Dialer::Stream(StreamEndpoint::tls(
                addr,
                server_name.clone(),
                config.clone(),
                settings.clone(),
                tasks,
            )),
            Dialing::Unusable(why) => Dialer::Unusable(why.clone()),
        }
    }

    /// The endpoint list from the configured addresses and the resolved names, keeping the
    /// endpoints (and their health) of addresses that stay; returns the addresses.
    fn rebuild_endpoints(&self) -> Vec<SocketAddr> {
        let mut addrs: Vec<SocketAddr> = self
            .spec
            .endpoints
            .iter()
            .filter_map(|e| match e {
                config::Endpoint::Addr(addr) => Some(*addr),
                config::Endpoint::Name { .. } => None,
            })
            .collect();
        for resolved in self
            .resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            for addr in resolved {
                if config::is_own_address(&self.spec.own, *addr) {
                    tracing::warn!(upstream = %self.spec.name, endpoint = %addr, "an endpoint name resolved to meshdns's own address: not asked (it would be a loop)");
                } else if !addrs.contains(addr) {
                    addrs.push(*addr);
                }
            }
        }
        let old = self.endpoints.load_full();
        let endpoints: Vec<Arc<Endpoint>> = addrs
            .iter()
            .map(|addr| match old.iter().find(|e| e.addr == *addr) {
                Some(kept) => Arc::clone(kept),
                None => {
                    let owner = self.owner.child();
                    Arc::new(Endpoint::new(
                        *addr,
                        self.dialer(*addr, owner.tasks()),
                        self.metrics.endpoint(&self.spec.name, *addr),
                        self.series.retransmits.clone(),
                        owner,
                    ))
                }
            })
            .collect();
        // Endpoints left out end with their last holder (an attempt in flight may hold one):
        // their probe, their connection and their health series go with them.
        self.endpoints.store(Arc::new(endpoints));
        addrs
    }

    /// The name used in logs and metric labels.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether its endpoints' last attempts all failed (timed out or refused; with none
    /// answered since): stale answers of this upstream are then served at once (RFC 8767's
    /// failure recheck). Read from the endpoints' health records, so it turns with the first
    /// failed attempt, not when the exchange gives up at its deadline, and the clients that
    /// come in the meantime do not each wait the client timer.
    pub(crate) fn is_failing(&self) -> bool {
        self.endpoints.load().iter().all(|e| e.is_failing())
    }

    /// Sends `query` (a complete message; its ID is replaced per attempt) until an endpoint
    /// answers it or `deadline` passes. The reply keeps the upstream's ID: the caller restores
    /// its client's.
    pub(crate) async fn exchange(
        &self,
        query: &[u8],
        deadline: Instant,
    ) -> Result<Answered, UpstreamError> {
        self.exchange_reporting(query, deadline, None).await
    }

    /// [`exchange`](Self::exchange), telling `progress` about every attempt it makes.
    pub(crate) async fn exchange_reporting(
        &self,
        query: &[u8],
        deadline: Instant,
        progress: Option<&Progress>,
    ) -> Result<Answered, UpstreamError> {
        // Every query leaves marked, so one that comes back to this meshdns is known (`marker`).
        let marked = Marked::new(query);
        // Judged on the query and reply as they travel (the marker's OPT record included).
        let question = (self.truncated.as_ref()).and_then(|t| t.fingerprint(&marked));
        let tcp_first = question.as_ref().is_some_and(|q| q.remembered());
        let result = (self.failover(&marked, deadline, progress, tcp_first)).await;
        if let Some(question) = &question {
            question.learn(result.as_ref().ok());
        }
        result.map(|answered| Answered {
            bytes: marked.unmark(answered.bytes),
            ..answered
        })
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::RecordType;
    use tokio::net::UdpSocket;
    use tokio::runtime::Handle;

    use std::pin::pin;

    use super::failover::plan;
    use super::*;

    /// A UDP group of one endpoint, `addr`, with a 1 s attempt timeout.
    fn group(addr: SocketAddr) -> Arc<Upstream> {
        let spec = GroupSpec {
            name: "b".into(),
            endpoints: vec![config::Endpoint::Addr(addr)],
            transport: Transport::Udp,
            tls_name: None,
            tls: None,
            attempt_timeout: Duration::from_secs(1),
            own: Vec::new(),
        };
        Upstream::new(spec, None, &series::tests::metrics(), Owner::default())
    }

    #[tokio::test]
    async fn an_attempt_is_polled_by_its_exchange_not_spawned_as_a_task() {
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let group = group(silent.local_addr().unwrap());
        let mut query = Message::query();
        query.add_query(Query::query(Name::root(), RecordType::NS));
        let query = query.to_vec().unwrap();
        let tasks = Handle::current().metrics().num_alive_tasks();
        let exchange = group.exchange(&query, Instant::now() + Duration::from_secs(1));
        let mut exchange = pin!(exchange);
        let waited = tokio::time::timeout(Duration::from_millis(20), &mut exchange).await;
        assert!(waited.is_err(), "the endpoint is silent: still waiting");
        let mut buf = [0u8; 512];
        assert!(silent.try_recv(&mut buf).is_ok(), "the query was sent");
        assert_eq!(Handle::current().metrics().num_alive_tasks(), tasks);
    }

    #[tokio::test]
    async fn an_endpoint_whose_last_attempt_failed_is_not_sent_retransmissions() {
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let group = group(silent.local_addr().unwrap());
        let endpoints = group.endpoints.load();
        let order: Vec<&Arc<Endpoint>> = endpoints.iter().collect();
        let sends = |retransmits: &mut u32| plan(&order, 0, 2, true, retransmits).unwrap().sends;
        assert_eq!(sends(&mut MAX_RETRANSMITS.clone()), 1 + MAX_RETRANSMITS);
        let timeout = AttemptError::Timeout;
        order[0].failed("b", &timeout, Duration::from_secs(1));
        let mut retransmits = MAX_RETRANSMITS;
        assert_eq!(
            sends(&mut retransmits),
            1,
            "failing: one datagram per attempt"
        );
        assert_eq!(retransmits, MAX_RETRANSMITS, "none spent");
        order[0].answered("b", None);
        assert_eq!(
            sends(&mut retransmits),
            1 + MAX_RETRANSMITS,
            "answered again"
        );
    }
}
