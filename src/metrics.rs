//! Every metric of meshdns, defined once: the families (name, type, labels, help) as constants,
//! one [`Metrics`] handle that owns a registry and every series, and the series each layer
//! below records into.
//!
//! The modules form a tree. The layers below (wire, route, cache, upstream, gather) never
//! import this one: each owns its label types (`Proto`, `RouteKind`, `AttemptResult`) and a
//! small struct of prometheus handles (`CacheMetrics`, `UpstreamMetrics`) that this module
//! builds; the layers above (query, server, the reload loop) record through [`Metrics`].
//!
//! One registry per [`Metrics`], made by `run`: tests make their own and read exact values
//! without serialising on a process-wide registry. One series is process-wide and shown by
//! every registry: `meshdns_log_lines_dropped_total`, counted by the one log writer of the
//! process, which is installed before any `Metrics` exists (a test process running several
//! instances sees their drops summed in each).
//!
//! Labels come only from closed sets — enums, or names bounded by the configuration (cluster
//! names, endpoint addresses) — never from a query. Series of the closed sets are created up
//! front, so the DNS path only touches atomics (no label hashing, no lock) and a first scrape
//! already shows every series at 0 (`rate()` works from the start).
//!
//! It owns the families and the registry, and decides no value: what is counted, and when, is
//! the recording layer's; serving the text it encodes is the admin server's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::background::{BackgroundMetrics, Counted};
use crate::cache::CacheMetrics;
use crate::gather::GatherMetrics;
use crate::route::RouteKind;
use crate::upstream::UpstreamMetrics;
use crate::wire::{self, Proto};

/// The type of a family, as the text exposition format spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    #[cfg(any(test, feature = "testing"))]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family: what the registry, the README table and the dashboard check agree on.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    /// Read by the README table's and the scrape's checks (the registry knows a family's kind
    /// by its type).
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    pub kind: Kind,
    pub(crate) labels: &'static [&'static str],
    pub(crate) help: &'static str,
}

pub(crate) const REQUESTS_TOTAL: Family = Family {
    name: "meshdns_requests_total",
    kind: Kind::Counter,
    labels: &["proto", "route", "rcode"],
    help: "Client queries answered, by transport, route and response code.",
};
pub(crate) const REQUEST_DURATION_SECONDS: Family = Family {
    name: "meshdns_request_duration_seconds",
    kind: Kind::Histogram,
    labels: &["route"],
    help: "Time from a query's arrival to its reply being ready, by route.",
};
pub(crate) const CACHE_HITS_TOTAL: Family = Family {
    name: "meshdns_cache_hits_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Queries answered from a fresh cache entry.",
};
pub(crate) const CACHE_MISSES_TOTAL: Family = Family {
    name: "meshdns_cache_misses_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Cache lookups that found no fresh entry and went upstream.",
};
pub(crate) const CACHE_STALE_SERVED_TOTAL: Family = Family {
    name: "meshdns_cache_stale_served_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Expired answers served because the upstream failed (RFC 8767).",
};
pub(crate) const CACHE_ENTRIES: Family = Family {
    name: "meshdns_cache_entries",
    kind: Kind::Gauge,
    labels: &[],
    help: "Entries in the cache.",
};
pub(crate) const CACHE_EVICTIONS_TOTAL: Family = Family {
    name: "meshdns_cache_evictions_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Cache entries evicted to stay within MESHDNS_CACHE_SIZE.",
};
pub(crate) const UPSTREAM_REQUESTS_TOTAL: Family = Family {
    name: "meshdns_upstream_requests_total",
    kind: Kind::Counter,
    labels: &["peer", "result"],
    help: "Attempts at an upstream endpoint, by peer (cluster name) and result.",
};
pub(crate) const UPSTREAM_DURATION_SECONDS: Family = Family {
    name: "meshdns_upstream_duration_seconds",
    kind: Kind::Histogram,
    labels: &["peer"],
    help: "Duration of one attempt at an upstream endpoint, by peer.",
};
pub(crate) const UPSTREAM_HEALTHY: Family = Family {
    name: "meshdns_upstream_healthy",
    kind: Kind::Gauge,
    labels: &["peer", "endpoint"],
    help: "1 while an endpoint is considered up, 0 while it is skipped until a probe succeeds.",
};
pub(crate) const UPSTREAM_TLS_HANDSHAKES_TOTAL: Family = Family {
    name: "meshdns_upstream_tls_handshakes_total",
    kind: Kind::Counter,
    labels: &["peer"],
    help: "DNS-over-TLS connections opened (TCP connect and TLS handshake, failed ones included), by peer.",
};
pub(crate) const UPSTREAM_CONNECTIONS_TOTAL: Family = Family {
    name: "meshdns_upstream_connections_total",
    kind: Kind::Counter,
    labels: &["peer", "transport"],
    help: "TCP and DNS-over-TLS connections opened to a peer's endpoints (failed connects included; a UDP peer's are its retries after truncation), by peer and transport (tcp, tls).",
};
pub(crate) const UPSTREAM_RETRANSMITS_TOTAL: Family = Family {
    name: "meshdns_upstream_retransmits_total",
    kind: Kind::Counter,
    labels: &["peer"],
    help: "UDP queries sent again because no reply came within the endpoint's retransmission timeout (to the same endpoint, or a hedge to the next), by peer.",
};
pub(crate) const ENDPOINT_RESOLUTIONS_TOTAL: Family = Family {
    name: "meshdns_endpoint_resolutions_total",
    kind: Kind::Counter,
    labels: &["peer", "result"],
    help: "Resolutions of endpoints given by host name, by peer and result (ok, failed: the last good addresses stay in use).",
};
pub(crate) const GATHER_PARTIAL_TOTAL: Family = Family {
    name: "meshdns_gather_partial_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Gathered answers sent without some cluster (its leg failed or straggled).",
};
pub(crate) const GATHER_TXT_DISAGREEMENTS_TOTAL: Family = Family {
    name: "meshdns_gather_txt_disagreements_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Gathered TXT answers whose clusters gave different records: one was kept (the local cluster's, else the first configured).",
};
pub(crate) const INFLIGHT: Family = Family {
    name: "meshdns_inflight",
    kind: Kind::Gauge,
    labels: &[],
    help: "Client queries being answered now.",
};
pub(crate) const DROPPED_TOTAL: Family = Family {
    name: "meshdns_dropped_total",
    kind: Kind::Counter,
    labels: &["reason"],
    help: "Client queries or connections not served, by reason.",
};
pub(crate) const BUILD_INFO: Family = Family {
    name: "meshdns_build_info",
    kind: Kind::Gauge,
    labels: &["version"],
    help: "Always 1; the version label says which meshdns runs.",
};
pub(crate) const CONFIG_RELOADS_TOTAL: Family = Family {
    name: "meshdns_config_reloads_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Reloads of MESHDNS_CONFIG_DIR, by result: applied, rejected (the running configuration stays), or restart_required (a restart-only variable changed; not applied).",
};
pub(crate) const CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS: Family = Family {
    name: "meshdns_config_last_reload_success_timestamp_seconds",
    kind: Kind::Gauge,
    labels: &[],
    help: "Unix time of the last configuration applied (the start, or the last applied reload).",
};
pub(crate) const CONFIG_LAST_RELOAD_SUCCESSFUL: Family = Family {
    name: "meshdns_config_last_reload_successful",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 while the configuration as read is valid (applied, unchanged, or waiting for a restart); 0 from a rejected reload until the directory holds a valid configuration again.",
};
pub(crate) const CONFIG_RESTART_PENDING: Family = Family {
    name: "meshdns_config_restart_pending",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 while the configuration directory holds a restart-only variable whose value differs from the one in force (only a restart applies it); 0 otherwise, back to 0 when the change is reverted. A rejected read leaves it as it was.",
};
pub(crate) const BACKGROUND_TASKS: Family = Family {
    name: "meshdns_background_tasks",
    kind: Kind::Gauge,
    labels: &[],
    help: "Background tasks running (refreshes, straggling legs), at most 256; probes run under their endpoint.",
};
pub(crate) const BACKGROUND_REFUSED_TOTAL: Family = Family {
    name: "meshdns_background_refused_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Background work refused because 256 tasks were running (a refresh skipped, a cut straggler dropped).",
};
pub(crate) const LOG_LINES_DROPPED_TOTAL: Family = Family {
    name: "meshdns_log_lines_dropped_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Log lines dropped because stderr did not keep up (logging never stalls DNS).",
};

pub(crate) const CONFIG_WATCH_ERRORS_TOTAL: Family = Family {
    name: "meshdns_config_watch_errors_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Failures to watch a directory of the configuration (it is retried; until then its changes are applied on SIGHUP).",
};

pub(crate) const LOOPS_TOTAL: Family = Family {
    name: "meshdns_loops_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Queries that came back to this meshdns (a forwarding loop through kube-dns, or an endpoint that is meshdns itself), answered SERVFAIL.",
};

pub(crate) const PEER_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS: Family = Family {
    name: "meshdns_peer_certificate_expiry_timestamp_seconds",
    kind: Kind::Gauge,
    labels: &["peer"],
    help: "Unix time at which the certificate a peer presented in its last DNS-over-TLS handshake expires (its notAfter), by peer; shown from the first handshake on.",
};
pub(crate) const CLIENT_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS: Family = Family {
    name: "meshdns_client_certificate_expiry_timestamp_seconds",
    kind: Kind::Gauge,
    labels: &[],
    help: "Unix time at which our client certificate (MESHDNS_TLS_CERT_FILE, as loaded) expires; absent without one.",
};
pub(crate) const SERVER_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS: Family = Family {
    name: "meshdns_server_certificate_expiry_timestamp_seconds",
    kind: Kind::Gauge,
    labels: &["listener"],
    help: "Unix time at which the certificate a TLS listener serves (dot: MESHDNS_DOT_CERT_FILE; webhook: MESHDNS_WEBHOOK_CERT_FILE; as in force) expires; absent without the listener.",
};
pub(crate) const SERVER_CERTIFICATE_RELOADS_TOTAL: Family = Family {
    name: "meshdns_server_certificate_reloads_total",
    kind: Kind::Counter,
    labels: &["listener", "result"],
    help: "Changes of a TLS listener's certificate files, by result: applied (new connections get the new certificate) or rejected (the files do not load; the certificate in force stays).",
};
pub(crate) const WEBHOOK_REVIEWS_TOTAL: Family = Family {
    name: "meshdns_webhook_reviews_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "AdmissionReviews answered by `meshdns webhook` (0 in the DNS server): injected, skipped (opted out, excluded, injected already), not_injected (could not be; a warning was returned), denied (not a Pod), invalid (not an AdmissionReview; HTTP 4xx).",
};

#[cfg(any(test, feature = "testing"))]
/// Every family, in the order of the README's table.
pub const FAMILIES: [&Family; 33] = [
    &REQUESTS_TOTAL,
    &REQUEST_DURATION_SECONDS,
    &CACHE_HITS_TOTAL,
    &CACHE_MISSES_TOTAL,
    &CACHE_STALE_SERVED_TOTAL,
    &CACHE_ENTRIES,
    &CACHE_EVICTIONS_TOTAL,
    &UPSTREAM_REQUESTS_TOTAL,
    &UPSTREAM_DURATION_SECONDS,
    &UPSTREAM_HEALTHY,
    &UPSTREAM_TLS_HANDSHAKES_TOTAL,
    &UPSTREAM_CONNECTIONS_TOTAL,
    &UPSTREAM_RETRANSMITS_TOTAL,
    &ENDPOINT_RESOLUTIONS_TOTAL,
    &GATHER_PARTIAL_TOTAL,
    &GATHER_TXT_DISAGREEMENTS_TOTAL,
    &INFLIGHT,
    &DROPPED_TOTAL,
    &BUILD_INFO,
    &CONFIG_RELOADS_TOTAL,
    &CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS,
    &CONFIG_LAST_RELOAD_SUCCESSFUL,
    &CONFIG_RESTART_PENDING,
    &CONFIG_WATCH_ERRORS_TOTAL,
    &BACKGROUND_TASKS,
    &BACKGROUND_REFUSED_TOTAL,
    &LOG_LINES_DROPPED_TOTAL,
    &LOOPS_TOTAL,
    &PEER_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS,
    &CLIENT_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS,
    &SERVER_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS,
    &SERVER_CERTIFICATE_RELOADS_TOTAL,
    &WEBHOOK_REVIEWS_TOTAL,
];

/// Buckets of `request_duration_seconds`: a cache hit over loopback takes tens of µs, a
/// pass-through to kube-dns about a millisecond, a cross-cluster query a few to tens of ms, and
/// a failing one runs into `MESHDNS_ATTEMPT_TIMEOUT` (500 ms) or `MESHDNS_TIMEOUT` (2 s).
pub(crate) const REQUEST_BUCKETS: [f64; 17] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.0, 5.0,
];

/// Buckets of `upstream_duration_seconds`: one network round trip, from a node-local kube-dns
/// (~100 µs) to a peer cluster far away, up to the attempt and query timeouts.
pub(crate) const UPSTREAM_BUCKETS: [f64; 15] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
    5.0,
];

/// The `rcode` label values; any other code (BADVERS, YXDOMAIN, …) counts as `other`.
pub(crate) const RCODES: [&str; 7] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other",
];

fn rcode_index(reply: &[u8]) -> usize {
    // The header's RCODE is the index into RCODES for codes 0..=5.
    wire::rcode(reply).map_or(6, |code| usize::from(code).min(6))
}

/// Why a client's query (or connection) was not served: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// UDP query dropped because `MESHDNS_MAX_INFLIGHT` queries were being answered.
    InflightLimit,
    /// TCP connection closed at once because the connection cap was reached.
    TcpConnectionLimit,
    /// Not a standard query: dropped (no full header, or a response), or answered at once with
    /// FORMERR, NOTIMP or BADVERS.
    Malformed,
    /// Client outside `MESHDNS_ALLOW_FROM`: answered REFUSED.
    NotAllowed,
    /// A TCP client that stopped reading its replies: its connection was closed.
    TcpStalled,
    /// A DNS-over-TLS connection whose handshake failed or did not finish within the idle
    /// timeout (no client certificate, one the client CA did not sign, not TLS at all).
    TlsHandshake,
}

impl DropReason {
    pub(crate) const ALL: [DropReason; 6] = [
        DropReason::InflightLimit,
        DropReason::TcpConnectionLimit,
        DropReason::Malformed,
        DropReason::NotAllowed,
        DropReason::TcpStalled,
        DropReason::TlsHandshake,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            DropReason::InflightLimit => "inflight_limit",
            DropReason::TcpConnectionLimit => "tcp_connection_limit",
            DropReason::Malformed => "malformed",
            DropReason::NotAllowed => "not_allowed",
            DropReason::TcpStalled => "tcp_stalled",
            DropReason::TlsHandshake => "tls_handshake",
        }
    }
}

/// How a reload of the configuration directory ended: the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReloadResult {
    Applied,
    Rejected,
    /// A restart-only variable changed: logged, not applied, the success time not moved.
    RestartRequired,
}

impl ReloadResult {
    pub(crate) const ALL: [ReloadResult; 3] = [
        ReloadResult::Applied,
        ReloadResult::Rejected,
        ReloadResult::RestartRequired,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Rejected => "rejected",
            ReloadResult::RestartRequired => "restart_required",
        }
    }
}

/// A TLS listener serving a certificate of its own: the `listener` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TlsListener {
    /// `MESHDNS_DOT_LISTEN`.
    Dot,
    /// `MESHDNS_WEBHOOK_LISTEN` (`meshdns webhook`).
    Webhook,
}

impl TlsListener {
    pub(crate) fn label(self) -> &'static str {
        match self {
            TlsListener::Dot => "dot",
            TlsListener::Webhook => "webhook",
        }
    }
}

/// How the webhook answered one review: the `result` label of `meshdns_webhook_reviews_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WebhookResult {
    Injected,
    Skipped,
    NotInjected,
    Denied,
    Invalid,
}

impl WebhookResult {
    pub(crate) const ALL: [WebhookResult; 5] = [
        WebhookResult::Injected,
        WebhookResult::Skipped,
        WebhookResult::NotInjected,
        WebhookResult::Denied,
        WebhookResult::Invalid,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            WebhookResult::Injected => "injected",
            WebhookResult::Skipped => "skipped",
            WebhookResult::NotInjected => "not_injected",
            WebhookResult::Denied => "denied",
            WebhookResult::Invalid => "invalid",
        }
    }
}

/// The registry and every series of one meshdns instance.
pub(crate) struct Metrics {
    registry: Registry,
    /// Indexed by `(proto * RouteKind::ALL.len() + route) * RCODES.len() + rcode`.
    requests: Vec<IntCounter>,
    /// Indexed by route kind.
    request_duration: Vec<Histogram>,
    inflight: IntGauge,
    /// Indexed like [`DropReason::ALL`].
    dropped: Vec<IntCounter>,
    /// Indexed like [`ReloadResult::ALL`].
    reloads: Vec<IntCounter>,
    last_reload_success: Gauge,
    last_reload_successful: IntGauge,
    restart_pending: IntGauge,
    watch_errors: IntCounter,
    cache: CacheMetrics,
    upstream: UpstreamMetrics,
    gather: GatherMetrics,
    background: BackgroundMetrics,
    loops: IntCounter,
    /// Labelless, so that it can be absent (no client certificate).
    client_certificate_expiry: IntGaugeVec,
    server_certificate_expiry: IntGaugeVec,
    server_certificate_reloads: IntCounterVec,
    /// Indexed like [`WebhookResult::ALL`].
    webhook_reviews: Vec<IntCounter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Registers `collector`. The names and labels are constants checked by the unit tests, so a
/// failure here is a programming error that every test run would show at once.
fn register<C: Collector + Clone + 'static>(
    registry: &Registry,
    collector: prometheus::Result<C>,
) -> C {
    let collector = collector.expect("metric definitions are valid constants");
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names are unique");
    collector
}

fn opts(family: &Family) -> Opts {
    Opts::new(family.name, family.help)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered and every closed-set series created.
    pub(crate) fn new() -> Self {
        let registry = Registry::new();
        let counter = |family: &Family| register(&registry, IntCounter::with_opts(opts(family)));
        let gauge = |family: &Family| register(&registry, IntGauge::with_opts(opts(family)));
        let counter_vec =
            |family: &Family| register(&registry, IntCounterVec::new(opts(family), family.labels));
        let gauge_vec =
            |family: &Family| register(&registry, IntGaugeVec::new(opts(family), family.labels));
        let histogram_vec = |family: &Family, buckets: &[f64]| {
            let opts = HistogramOpts::new(family.name, family.help).buckets(buckets.to_vec());
            register(&registry, HistogramVec::new(opts, family.labels))
        };
        let requests = counter_vec(&REQUESTS_TOTAL);
        let request_duration = histogram_vec(&REQUEST_DURATION_SECONDS, &REQUEST_BUCKETS);
        let dropped = counter_vec(&DROPPED_TOTAL);
        let reloads = counter_vec(&CONFIG_RELOADS_TOTAL);
        let webhook_reviews = counter_vec(&WEBHOOK_REVIEWS_TOTAL);
        // The process's one log writer counts into one counter, shown by every registry.
        register(&registry, Ok(LOG_LINES_DROPPED.clone()));
        (gauge_vec(&BUILD_INFO))
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let mut request_series =
            Vec::with_capacity(Proto::ALL.len() * RouteKind::ALL.len() * RCODES.len());
        for proto in Proto::ALL {
            for route in RouteKind::ALL {
                for rcode in RCODES {
                    request_series.push(requests.with_label_values(&[
                        proto.label(),
                        route.label(),
                        rcode,
                    ]));
                }
            }
        }
        let metrics = Self {
            requests: request_series,
            request_duration: RouteKind::ALL
                .iter()
                .map(|route| request_duration.with_label_values(&[route.label()]))
                .collect(),
            inflight: gauge(&INFLIGHT),
            dropped: DropReason::ALL
                .iter()
                .map(|reason| dropped.with_label_values(&[reason.label()]))
                .collect(),
            reloads: ReloadResult::ALL
                .iter()
                .map(|result| reloads.with_label_values(&[result.label()]))
                .collect(),
            last_reload_success: register(
                &registry,
                Gauge::with_opts(opts(&CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS)),
            ),
            last_reload_successful: gauge(&CONFIG_LAST_RELOAD_SUCCESSFUL),
            restart_pending: gauge(&CONFIG_RESTART_PENDING),
            watch_errors: counter(&CONFIG_WATCH_ERRORS_TOTAL),
            cache: CacheMetrics {
                hits: counter(&CACHE_HITS_TOTAL),
                misses: counter(&CACHE_MISSES_TOTAL),
                stale_served: counter(&CACHE_STALE_SERVED_TOTAL),
                entries: gauge(&CACHE_ENTRIES),
                evictions: counter(&CACHE_EVICTIONS_TOTAL),
            },
            upstream: UpstreamMetrics {
                requests: counter_vec(&UPSTREAM_REQUESTS_TOTAL),
                duration: histogram_vec(&UPSTREAM_DURATION_SECONDS, &UPSTREAM_BUCKETS),
                healthy: gauge_vec(&UPSTREAM_HEALTHY),
                resolutions: counter_vec(&ENDPOINT_RESOLUTIONS_TOTAL),
                tls_handshakes: counter_vec(&UPSTREAM_TLS_HANDSHAKES_TOTAL),
                connections: counter_vec(&UPSTREAM_CONNECTIONS_TOTAL),
                retransmits: counter_vec(&UPSTREAM_RETRANSMITS_TOTAL),
                peer_certificate_expiry: gauge_vec(&PEER_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS),
                held: Default::default(),
            },
            gather: GatherMetrics {
                partial: counter(&GATHER_PARTIAL_TOTAL),
                txt_disagreements: counter(&GATHER_TXT_DISAGREEMENTS_TOTAL),
            },
            background: BackgroundMetrics {
                tasks: gauge(&BACKGROUND_TASKS),
                refused: counter(&BACKGROUND_REFUSED_TOTAL),
            },
            loops: counter(&LOOPS_TOTAL),
            client_certificate_expiry: gauge_vec(&CLIENT_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS),
            server_certificate_expiry: gauge_vec(&SERVER_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS),
            server_certificate_reloads: counter_vec(&SERVER_CERTIFICATE_RELOADS_TOTAL),
            webhook_reviews: WebhookResult::ALL
                .iter()
                .map(|result| webhook_reviews.with_label_values(&[result.label()]))
                .collect(),
            registry,
        };
        metrics.set_last_reload_success_now();
        metrics.last_reload_successful.set(1);
        metrics
    }

    /// The whole registry in the text exposition format. Reading the metrics takes only the
    /// registry's short read locks; the DNS path never waits on a scrape.
    pub(crate) fn encode(&self) -> String {
        let families = self.registry.gather();
        TextEncoder::new()
            .encode_to_string(&families)
            .unwrap_or_else(|error| format!("# encoding failed: {error}\n"))
    }

    /// One client query answered with `reply`, `elapsed` after it arrived.
    pub(crate) fn record_request(
        &self,
        proto: Proto,
        route: RouteKind,
        reply: &[u8],
        elapsed: Duration,
    ) {
        let index = (proto as usize * RouteKind::ALL.len() + route as usize) * RCODES.len()
            + rcode_index(reply);
        if let Some(counter) = self.requests.get(index) {
            counter.inc();
        }
        if let Some(histogram) = self.request_duration.get(route as usize) {
            histogram.observe(elapsed.as_secs_f64());
        }
    }

    /// One review answered by the webhook.
    pub(crate) fn webhook_review(&self, result: WebhookResult) {
        if let Some(counter) = self.webhook_reviews.get(result as usize) {
            counter.inc();
        }
    }

    /// A client query or connection not served.
    pub(crate) fn dropped(&self, reason: DropReason) {
        if let Some(counter) = self.dropped.get(reason as usize) {
            counter.inc();
        }
    }

    /// Counts a query as in flight until the guard is dropped.
    pub(crate) fn inflight(&self) -> Counted {
        Counted::new(&self.inflight)
    }

    /// A reload of the configuration directory ended. A rejected one sets
    /// `config_last_reload_successful` to 0 until a valid read (this, or
    /// [`Metrics::config_valid`] for one with nothing to apply): the alert on it stays while the
    /// rejected file is in the directory.
    pub(crate) fn config_reload(&self, result: ReloadResult) {
        if let Some(counter) = self.reloads.get(result as usize) {
            counter.inc();
        }
        match result {
            ReloadResult::Applied => {
                self.set_last_reload_success_now();
                self.config_valid();
            }
            ReloadResult::Rejected => self.last_reload_successful.set(0),
            ReloadResult::RestartRequired => self.config_valid(),
        }
    }

    /// The configuration directory was read and is valid — applied, unchanged (a rejected file
    /// removed, back to the configuration in force), or only waiting for a restart: nothing
    /// rejected is left in it.
    pub(crate) fn config_valid(&self) {
        self.last_reload_successful.set(1);
    }

    /// A valid read of the configuration directory holds (`true`) or no longer holds a
    /// restart-only value that differs from the one in force: `config_restart_pending`, the
    /// state the alert on it follows (a counter's increase would end while the change waits).
    pub(crate) fn config_restart_pending(&self, pending: bool) {
        self.restart_pending.set(i64::from(pending));
    }

    /// A directory of the configuration could not be watched.
    pub(crate) fn config_watch_error(&self) {
        self.watch_errors.inc();
    }

    fn set_last_reload_success_now(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_reload_success.set(now.as_secs_f64());
    }

    /// The cache's series.
    pub(crate) fn cache(&self) -> CacheMetrics {
        self.cache.clone()
    }

    /// The families every upstream group records into.
    pub(crate) fn upstream(&self) -> UpstreamMetrics {
        self.upstream.clone()
    }

    /// What the gathered answers are counted into.
    pub(crate) fn gather(&self) -> GatherMetrics {
        self.gather.clone()
    }

    /// The background set's series.
    pub(crate) fn background(&self) -> BackgroundMetrics {
        self.background.clone()
    }

    /// Shows when our client certificate expires (`None`: there is none, the series goes).
    pub(crate) fn client_certificate(&self, not_after: Option<i64>) {
        show_expiry(&self.client_certificate_expiry, &[], not_after);
    }

    /// Shows when the certificate `listener` serves expires.
    pub(crate) fn server_certificate(&self, listener: TlsListener, not_after: Option<i64>) {
        show_expiry(
            &self.server_certificate_expiry,
            &[listener.label()],
            not_after,
        );
    }

    /// A change of `listener`'s certificate files was applied (`true`) or rejected.
    pub(crate) fn server_certificate_reload(&self, listener: TlsListener, applied: bool) {
        let result = if applied {
            ReloadResult::Applied
        } else {
            ReloadResult::Rejected
        };
        self.server_certificate_reloads
            .with_label_values(&[listener.label(), result.label()])
            .inc();
    }

    /// Counts queries that came back to meshdns (see `loops`).
    pub(crate) fn loops(&self) -> IntCounter {
        self.loops.clone()
    }
}

/// An expiry series set to `not_after`, or removed when there is nothing to expire (an alert
/// on "expires soon" must not see a 0).
fn show_expiry(family: &IntGaugeVec, labels: &[&str], not_after: Option<i64>) {
    match not_after {
        Some(not_after) => family.with_label_values(labels).set(not_after),
        None => {
            let _ = family.remove_label_values(labels);
        }
    }
}

/// `meshdns_log_lines_dropped_total`: one per process, like the log writer that counts its
/// dropped lines into it (`process::init_logging`), and registered in every [`Metrics`].
pub(crate) static LOG_LINES_DROPPED: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::with_opts(opts(&LOG_LINES_DROPPED_TOTAL))
        .expect("metric definitions are valid constants")
});

/// The text exposition format's content type, as Prometheus expects it.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeSet;

    const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    const DASHBOARD: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/k8s/grafana/meshdns.json"
    ));

    /// `(name, type, labels)` of every row of the table under `## Metrics`.
    fn readme_rows() -> Vec<(String, String, Vec<String>)> {
        let section = README
            .split("\n## Metrics\n")
            .nth(1)
            .expect("README has a `## Metrics` section");
        let section = section.split("\n## ").next().unwrap_or(section);
        section
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| {
                let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
                assert!(cells.len() >= 3, "a short row: {line}");
                let unquote = |s: &str| s.trim().trim_matches('`').to_string();
                let labels = cells[2]
                    .split(',')
                    .map(unquote)
                    .filter(|l| !l.is_empty())
                    .collect();
                (unquote(cells[0]), cells[1].to_string(), labels)
            })
            .collect()
    }

    #[test]
    fn the_readme_metrics_table_lists_every_family_with_its_type_and_labels() {
        let documented = readme_rows();
        let registered: Vec<(String, String, Vec<String>)> = FAMILIES
            .iter()
            .map(|f| {
                (
                    f.name.to_string(),
                    f.kind.as_str().to_string(),
                    f.labels.iter().map(|l| l.to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(documented, registered);
    }

    #[test]
    fn every_metric_the_dashboard_queries_exists() {
        let mut known: BTreeSet<String> = BTreeSet::new();
        for family in FAMILIES {
            known.insert(family.name.to_string());
            if family.kind == Kind::Histogram {
                for suffix in ["_bucket", "_sum", "_count"] {
                    known.insert(format!("{}{suffix}", family.name));
                }
            }
        }
        let queried: BTreeSet<String> = DASHBOARD
            .match_indices("meshdns_")
            .map(|(at, _)| {
                DASHBOARD[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect();
        assert!(!queried.is_empty(), "the dashboard queries meshdns metrics");
        let unknown: Vec<&String> = queried.difference(&known).collect();
        assert!(
            unknown.is_empty(),
            "the dashboard queries unknown metrics: {unknown:?}"
        );
    }

    #[test]
    fn every_family_is_registered_with_its_type_and_labels() {
        let metrics = Metrics::new();
        // Vectors without series are not gathered; give the configuration-bounded ones one.
        let upstream = metrics.upstream();
        for counters in [
            &upstream.requests,
            &upstream.resolutions,
            &upstream.connections,
        ] {
            counters.with_label_values(&["unit-test", "ok"]).inc();
        }
        for counters in [&upstream.tls_handshakes, &upstream.retransmits] {
            counters.with_label_values(&["unit-test"]).inc();
        }
        upstream
            .duration
            .with_label_values(&["unit-test"])
            .observe(0.1);
        upstream
            .healthy
            .with_label_values(&["unit-test", "1"])
            .set(1);
        upstream
            .peer_certificate_expiry
            .with_label_values(&["unit-test"])
            .set(1);
        metrics.client_certificate(Some(1));
        for listener in [TlsListener::Dot, TlsListener::Webhook] {
            metrics.server_certificate(listener, Some(1));
            metrics.server_certificate_reload(listener, true);
        }
        let gathered = metrics.registry.gather();
        assert_eq!(gathered.len(), FAMILIES.len());
        for family in FAMILIES {
            let found = gathered
                .iter()
                .find(|g| g.name() == family.name)
                .unwrap_or_else(|| panic!("{} is not registered", family.name));
            assert_eq!(
                format!("{:?}", found.get_field_type()).to_lowercase(),
                family.kind.as_str()
            );
            for metric in found.get_metric() {
                let mut labels: Vec<&str> = metric.get_label().iter().map(|l| l.name()).collect();
                let mut expected = family.labels.to_vec();
                labels.sort_unstable();
                expected.sort_unstable();
                assert_eq!(labels, expected, "labels of {}", family.name);
            }
        }
    }

    #[test]
    fn a_rejected_reload_holds_last_reload_successful_at_zero_until_the_directory_is_valid() {
        let metrics = Metrics::new();
        let successful = || metrics.last_reload_successful.get();
        assert_eq!(
            successful(),
            1,
            "the configuration read at the start is valid"
        );
        for valid in [
            |m: &Metrics| m.config_valid(),
            |m: &Metrics| m.config_reload(ReloadResult::Applied),
            |m: &Metrics| m.config_reload(ReloadResult::RestartRequired),
        ] {
            metrics.config_reload(ReloadResult::Rejected);
            assert_eq!(successful(), 0);
            valid(&metrics);
            assert_eq!(successful(), 1);
        }
    }

    #[test]
    fn rcodes_map_onto_their_labels() {
        let reply = |code: u8| [0, 0, 0x81, code, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(RCODES[rcode_index(&reply(0))], "NOERROR");
        assert_eq!(RCODES[rcode_index(&reply(2))], "SERVFAIL");
        assert_eq!(RCODES[rcode_index(&reply(3))], "NXDOMAIN");
        assert_eq!(RCODES[rcode_index(&reply(5))], "REFUSED");
        assert_eq!(RCODES[rcode_index(&reply(9))], "other");
        assert_eq!(RCODES[rcode_index(&[])], "other");
    }

    #[test]
    fn label_enums_index_in_the_order_of_all() {
        for (i, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
        for (i, result) in ReloadResult::ALL.iter().enumerate() {
            assert_eq!(*result as usize, i);
        }
        for (i, proto) in Proto::ALL.iter().enumerate() {
            assert_eq!(*proto as usize, i);
        }
        for (i, route) in RouteKind::ALL.iter().enumerate() {
            assert_eq!(*route as usize, i);
        }
        for (i, result) in crate::upstream::AttemptResult::ALL.iter().enumerate() {
            assert_eq!(*result as usize, i);
        }
    }

    #[test]
    fn every_request_series_exists_from_the_start() {
        let text = Metrics::new().encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("meshdns_requests_total{"))
            .count();
        assert_eq!(
            series,
            Proto::ALL.len() * RouteKind::ALL.len() * RCODES.len()
        );
        assert!(text.contains("meshdns_config_reloads_total{result=\"rejected\"} 0"));
    }

    #[test]
    fn buckets_resolve_cache_hits_and_timeouts() {
        const { assert!(REQUEST_BUCKETS[0] <= 0.000_05) };
        assert!(REQUEST_BUCKETS.contains(&0.5) && REQUEST_BUCKETS.contains(&2.0));
        assert!(UPSTREAM_BUCKETS.contains(&0.5) && UPSTREAM_BUCKETS.contains(&2.0));
        assert!(REQUEST_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        assert!(UPSTREAM_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}
