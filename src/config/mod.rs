//! Configuration: the environment → one validated [`Config`], read once at startup.
//!
//! envy reads the raw strings (every variable of DESIGN.md's table, nothing else); this module
//! parses and cross-checks them. Every failure is a [`ConfigError`] naming the variable and the
//! offending token, which `main` prints as one line before exiting 64. Tests build a `Config`
//! from a map with [`Config::from_vars`], never by touching the process environment.

mod check;
mod clusters;
mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hickory_proto::rr::Name;
use serde::Deserialize;

pub use check::render_check;
pub use clusters::Transport;
pub use values::IpNet;

use clusters::parse_clusters;
use values::{DNS_PORT, parse_duration, parse_socket_addr, parse_zone};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:53";
pub const DEFAULT_ALLOW_FROM: &str = "127.0.0.0/8,::1/128";
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
pub const DEFAULT_CLUSTER_ZONE: &str = "cluster.{name}";
pub const DEFAULT_DISTRIBUTED_ZONES: &str = "distributed.local";
pub const DEFAULT_TIMEOUT: &str = "2s";
pub const DEFAULT_ATTEMPT_TIMEOUT: &str = "500ms";
pub const DEFAULT_CACHE_SIZE: usize = 10_000;
/// One thread: a sidecar's CPU limit is usually below one core, and one thread pays no
/// cross-thread wake-ups (measured with bench/run.sh; see bench/results).
pub const DEFAULT_THREADS: usize = 1;
/// More threads than this is never useful for a per-pod resolver.
const MAX_THREADS: usize = 64;
pub const DEFAULT_CACHE_MAX_TTL: &str = "3600s";
pub const DEFAULT_CACHE_NEGATIVE_TTL: &str = "5s";
pub const DEFAULT_SERVE_STALE: &str = "300s";
pub const DEFAULT_ADMIN_LISTEN: &str = "0.0.0.0:9153";
pub const DEFAULT_LOG: &str = "info";

/// The placeholder of `MESHDNS_CLUSTER_ZONE` that stands for the cluster name.
const NAME_PLACEHOLDER: &str = "{name}";

/// Every variable meshdns reads; any other `MESHDNS_*` name is a typo and an error.
const KNOWN_VARIABLES: &[&str] = &[
    "MESHDNS_LISTEN",
    "MESHDNS_ALLOW_FROM",
    "MESHDNS_UPSTREAMS",
    "MESHDNS_RESOLV_CONF",
    "MESHDNS_CLUSTER_DOMAIN",
    "MESHDNS_LOCAL_CLUSTER",
    "MESHDNS_CLUSTERS",
    "MESHDNS_CLUSTER_ZONE",
    "MESHDNS_DISTRIBUTED_ZONES",
    "MESHDNS_CLUSTERSET_ZONE",
    "MESHDNS_TIMEOUT",
    "MESHDNS_ATTEMPT_TIMEOUT",
    "MESHDNS_CACHE_SIZE",
    "MESHDNS_CACHE_MAX_TTL",
    "MESHDNS_CACHE_NEGATIVE_TTL",
    "MESHDNS_SERVE_STALE",
    "MESHDNS_ADMIN_LISTEN",
    "MESHDNS_LOG",
    "MESHDNS_LOG_FORMAT",
    "MESHDNS_THREADS",
];

/// `MESHDNS_SERVICE_HOST`, `MESHDNS_PORT`, `MESHDNS_PORT_53_UDP_PROTO`, …: what Kubernetes
/// sets for a Service named `meshdns` (enableServiceLinks, on by default).
fn is_service_link(name: &str) -> bool {
    name == "MESHDNS_PORT"
        || name.starts_with("MESHDNS_PORT_")
        || name.starts_with("MESHDNS_SERVICE_")
}

/// The raw variables, as envy finds them (names lowercased, `MESHDNS_` stripped).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    listen: Option<String>,
    allow_from: Option<String>,
    upstreams: Option<String>,
    resolv_conf: Option<String>,
    cluster_domain: Option<String>,
    local_cluster: Option<String>,
    clusters: Option<String>,
    cluster_zone: Option<String>,
    distributed_zones: Option<String>,
    clusterset_zone: Option<String>,
    timeout: Option<String>,
    attempt_timeout: Option<String>,
    cache_size: Option<String>,
    cache_max_ttl: Option<String>,
    cache_negative_ttl: Option<String>,
    serve_stale: Option<String>,
    admin_listen: Option<String>,
    log: Option<String>,
    log_format: Option<String>,
    threads: Option<String>,
}

/// One bad variable: what `main` prints before exiting 64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {token:?} {reason}")]
pub struct ConfigError {
    pub variable: String,
    pub token: String,
    pub reason: String,
}

impl ConfigError {
    fn new(variable: &str, token: &str, reason: impl Into<String>) -> Self {
        Self {
            variable: format!("MESHDNS_{}", variable.to_uppercase()),
            token: token.to_string(),
            reason: reason.into(),
        }
    }
}

/// Where the local cluster's DNS endpoints came from (shown by `--check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamSource {
    Environment,
    ResolvConf(PathBuf),
}

/// Log output format for tracing-subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// One cluster with every option defaulted. The local cluster's endpoints are the upstreams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub name: String,
    /// Where its names live for the client: `cluster.NAME` by default.
    pub zone: Name,
    /// Its Kubernetes cluster domain: `cluster.local` by default.
    pub domain: Name,
    /// The host prefix of its targets in distributed zones: `NAME-` by default.
    pub prefix: String,
    pub endpoints: Vec<SocketAddr>,
    pub transport: Transport,
    pub is_local: bool,
}

/// Cache bounds and TTL policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Maximum number of entries; 0 disables the cache.
    pub size: usize,
    pub max_ttl: Duration,
    pub negative_ttl: Duration,
    pub serve_stale: Duration,
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: Vec<SocketAddr>,
    pub allow_from: Vec<IpNet>,
    /// The local cluster's DNS (kube-dns): pass-through and the local cluster's names.
    pub upstreams: Vec<SocketAddr>,
    pub upstream_source: UpstreamSource,
    /// Local cluster first, then `MESHDNS_CLUSTERS` order: the merge order of gathered answers.
    pub clusters: Vec<Cluster>,
    pub distributed_zones: Vec<Name>,
    pub clusterset_zone: Option<Name>,
    pub timeout: Duration,
    pub attempt_timeout: Duration,
    pub cache: CacheConfig,
    pub admin_listen: Option<SocketAddr>,
    pub log: String,
    pub log_format: LogFormat,
    /// Runtime worker threads: 1 runs everything on one thread.
    pub threads: usize,
}

impl Config {
    /// Reads the process environment (only `MESHDNS_*` variables).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Builds the configuration from `(name, value)` pairs; names without the `MESHDNS_`
    /// prefix are ignored, unknown `MESHDNS_*` names are an error (a typo must not be silent).
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(
        vars: I,
    ) -> Result<Self, ConfigError> {
        let ours: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(k, _)| k.starts_with("MESHDNS_"))
            .collect();
        // Kubernetes injects service-link variables for a Service named `meshdns` into every
        // container of the namespace; they are not ours and must not stop the sidecar.
        let ours: Vec<(String, String)> = ours
            .into_iter()
            .filter(|(k, _)| !is_service_link(k))
            .collect();
        // Checked here rather than read from envy's error, whose text lists every known field.
        if let Some((unknown, _)) = ours
            .iter()
            .find(|(k, _)| !KNOWN_VARIABLES.contains(&k.as_str()))
        {
            return Err(ConfigError {
                variable: unknown.clone(),
                token: unknown.clone(),
                reason: "is not a meshdns variable".into(),
            });
        }
        let raw: RawEnv = envy::prefixed("MESHDNS_")
            .from_iter(ours)
            .map_err(|e| ConfigError {
                variable: "MESHDNS_*".into(),
                token: String::new(),
                reason: e.to_string(),
            })?;
        build(raw)
    }
}

fn build(raw: RawEnv) -> Result<Config, ConfigError> {
    let listen = list(
        "listen",
        raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN),
        |t| parse_socket_addr(t, DNS_PORT),
    )?;
    if listen.is_empty() {
        return Err(ConfigError::new("listen", "", "names no address"));
    }
    let allow_from = list(
        "allow_from",
        raw.allow_from.as_deref().unwrap_or(DEFAULT_ALLOW_FROM),
        IpNet::parse,
    )?;
    let resolv_conf = PathBuf::from(raw.resolv_conf.as_deref().unwrap_or(DEFAULT_RESOLV_CONF));
    let (upstreams, upstream_source) = match raw.upstreams.as_deref() {
        Some(value) => (
            list("upstreams", value, |t| parse_socket_addr(t, DNS_PORT))?,
            UpstreamSource::Environment,
        ),
        None => (
            read_resolv_conf(&resolv_conf)?,
            UpstreamSource::ResolvConf(resolv_conf),
        ),
    };
    if upstreams.is_empty() {
        return Err(ConfigError::new(
            "upstreams",
            raw.upstreams.as_deref().unwrap_or(""),
            "names no endpoint: meshdns needs the local cluster DNS (kube-dns), e.g. 10.96.0.10:53",
        ));
    }
    let cluster_domain = zone(
        "cluster_domain",
        raw.cluster_domain
            .as_deref()
            .unwrap_or(DEFAULT_CLUSTER_DOMAIN),
    )?;
    let zone_template = raw
        .cluster_zone
        .as_deref()
        .unwrap_or(DEFAULT_CLUSTER_ZONE)
        .trim()
        .to_string();
    if !zone_template.contains(NAME_PLACEHOLDER) {
        return Err(ConfigError::new(
            "cluster_zone",
            &zone_template,
            "must contain {name}, e.g. cluster.{name}",
        ));
    }
    let clusters = clusters(&raw, &cluster_domain, &zone_template, &upstreams)?;
    let distributed_zones = list(
        "distributed_zones",
        raw.distributed_zones
            .as_deref()
            .unwrap_or(DEFAULT_DISTRIBUTED_ZONES),
        parse_zone,
    )?;
    let clusterset_zone = match raw.clusterset_zone.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(value) => Some(zone("clusterset_zone", value)?),
    };
    check_zones_distinct(&clusters, &distributed_zones, clusterset_zone.as_ref())?;

    let timeout = duration("timeout", raw.timeout.as_deref().unwrap_or(DEFAULT_TIMEOUT))?;
    let attempt_timeout = duration(
        "attempt_timeout",
        raw.attempt_timeout
            .as_deref()
            .unwrap_or(DEFAULT_ATTEMPT_TIMEOUT),
    )?;
    if timeout.is_zero() {
        return Err(ConfigError::new(
            "timeout",
            raw.timeout.as_deref().unwrap_or(""),
            "must be longer than 0",
        ));
    }
    if attempt_timeout.is_zero() || attempt_timeout > timeout {
        return Err(ConfigError::new(
            "attempt_timeout",
            raw.attempt_timeout
                .as_deref()
                .unwrap_or(DEFAULT_ATTEMPT_TIMEOUT),
            format!("must be longer than 0 and at most MESHDNS_TIMEOUT ({timeout:?})"),
        ));
    }
    let cache = CacheConfig {
        size: match raw.cache_size.as_deref().map(str::trim) {
            None => DEFAULT_CACHE_SIZE,
            Some(value) => value.parse().map_err(|_| {
                ConfigError::new(
                    "cache_size",
                    value,
                    "is not a whole number of entries (0 disables the cache)",
                )
            })?,
        },
        max_ttl: duration(
            "cache_max_ttl",
            raw.cache_max_ttl
                .as_deref()
                .unwrap_or(DEFAULT_CACHE_MAX_TTL),
        )?,
        negative_ttl: duration(
            "cache_negative_ttl",
            raw.cache_negative_ttl
                .as_deref()
                .unwrap_or(DEFAULT_CACHE_NEGATIVE_TTL),
        )?,
        serve_stale: duration(
            "serve_stale",
            raw.serve_stale.as_deref().unwrap_or(DEFAULT_SERVE_STALE),
        )?,
    };
    let admin_listen = match raw
        .admin_listen
        .as_deref()
        .unwrap_or(DEFAULT_ADMIN_LISTEN)
        .trim()
    {
        "" => None,
        value => Some(
            parse_socket_addr(value, 9153)
                .map_err(|reason| ConfigError::new("admin_listen", value, reason))?,
        ),
    };
    let log = raw.log.unwrap_or_else(|| DEFAULT_LOG.to_string());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log) {
        return Err(ConfigError::new(
            "log",
            &log,
            format!("is not a tracing filter: {e}"),
        ));
    }
    let log_format = match raw.log_format.as_deref().map(str::trim) {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(ConfigError::new(
                "log_format",
                other,
                "must be text or json",
            ));
        }
    };
    let threads = match raw.threads.as_deref().map(str::trim) {
        None => DEFAULT_THREADS,
        Some(value) => value
            .parse()
            .ok()
            .filter(|n| (1..=MAX_THREADS).contains(n))
            .ok_or_else(|| {
                ConfigError::new(
                    "threads",
                    value,
                    format!("is not a thread count from 1 to {MAX_THREADS}"),
                )
            })?,
    };
    Ok(Config {
        listen,
        allow_from,
        upstreams,
        upstream_source,
        clusters,
        distributed_zones,
        clusterset_zone,
        timeout,
        attempt_timeout,
        cache,
        admin_listen,
        log,
        log_format,
        threads,
    })
}

/// A comma list with whitespace around items ignored and empty items skipped.
fn list<T>(
    variable: &str,
    value: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, ConfigError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| parse(t).map_err(|reason| ConfigError::new(variable, t, reason)))
        .collect()
}

fn duration(variable: &str, value: &str) -> Result<Duration, ConfigError> {
    parse_duration(value.trim()).map_err(|reason| ConfigError::new(variable, value, reason))
}

fn zone(variable: &str, value: &str) -> Result<Name, ConfigError> {
    parse_zone(value.trim()).map_err(|reason| ConfigError::new(variable, value, reason))
}

/// The non-loopback nameservers of a resolv.conf: a loopback one is meshdns itself in a pod.
fn read_resolv_conf(path: &std::path::Path) -> Result<Vec<SocketAddr>, ConfigError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        ConfigError::new(
            "resolv_conf",
            &shown,
            format!("cannot be read ({e}); set MESHDNS_UPSTREAMS to the cluster DNS instead"),
        )
    })?;
    let (parsed, _) = resolv_conf::Config::parse_with_errors(&bytes);
    let upstreams: Vec<SocketAddr> = parsed
        .nameservers
        .iter()
        .map(std::net::IpAddr::from)
        .filter(|ip| !ip.is_loopback())
        .map(|ip| SocketAddr::new(ip, DNS_PORT))
        .collect();
    if upstreams.is_empty() {
        return Err(ConfigError::new(
            "resolv_conf",
            &shown,
            "lists no non-loopback nameserver; set MESHDNS_UPSTREAMS to the cluster DNS (e.g. 10.96.0.10)",
        ));
    }
    Ok(upstreams)
}

fn clusters(
    raw: &RawEnv,
    default_domain: &Name,
    zone_template: &str,
    upstreams: &[SocketAddr],
) -> Result<Vec<Cluster>, ConfigError> {
    let entries = parse_clusters(raw.clusters.as_deref().unwrap_or(""))
        .map_err(|e| ConfigError::new("clusters", &e.token, e.reason))?;
    let local = match raw.local_cluster.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(name) => {
            values::check_cluster_name(name)
                .map_err(|reason| ConfigError::new("local_cluster", name, reason))?;
            Some(name.to_string())
        }
    };
    let mut clusters: Vec<Cluster> = Vec::with_capacity(entries.len() + 1);
    if let Some(local) = &local
        && !entries.iter().any(|e| &e.name == local)
    {
        let implicit = clusters::ClusterEntry {
            name: local.clone(),
            endpoints: Vec::new(),
            domain: None,
            prefix: None,
            transport: None,
        };
        clusters.push(cluster_from(
            &implicit,
            default_domain,
            zone_template,
            upstreams,
            true,
        )?);
    }
    for (i, entry) in entries.iter().enumerate() {
        if entries[..i].iter().any(|e| e.name == entry.name) {
            return Err(ConfigError::new(
                "clusters",
                &entry.name,
                "names this cluster twice",
            ));
        }
        let is_local = local.as_deref() == Some(&entry.name);
        if entry.endpoints.is_empty() && !is_local {
            return Err(ConfigError::new(
                "clusters",
                &entry.name,
                "has no endpoints (only the local cluster, MESHDNS_LOCAL_CLUSTER, may omit them)",
            ));
        }
        clusters.push(cluster_from(
            entry,
            default_domain,
            zone_template,
            upstreams,
            is_local,
        )?);
    }
    // The local cluster answers first in every merge.
    clusters.sort_by_key(|c| !c.is_local);
    for (i, a) in clusters.iter().enumerate() {
        if let Some(b) = clusters[..i].iter().find(|b| b.prefix == a.prefix) {
            return Err(ConfigError::new(
                "clusters",
                &format!("prefix={}", a.prefix),
                format!("is the prefix of both {} and {}", b.name, a.name),
            ));
        }
    }
    Ok(clusters)
}

fn cluster_from(
    entry: &clusters::ClusterEntry,
    default_domain: &Name,
    zone_template: &str,
    upstreams: &[SocketAddr],
    is_local: bool,
) -> Result<Cluster, ConfigError> {
    let zone_text = zone_template.replace(NAME_PLACEHOLDER, &entry.name);
    let zone = parse_zone(&zone_text)
        .map_err(|reason| ConfigError::new("cluster_zone", &zone_text, reason))?;
    Ok(Cluster {
        name: entry.name.clone(),
        zone,
        domain: entry
            .domain
            .clone()
            .unwrap_or_else(|| default_domain.clone()),
        prefix: entry
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}-", entry.name)),
        endpoints: if is_local {
            upstreams.to_vec()
        } else {
            entry.endpoints.clone()
        },
        transport: entry.transport.unwrap_or(Transport::Udp),
        is_local,
    })
}

/// Two routes for one zone would make routing depend on table order: refuse it.
fn check_zones_distinct(
    clusters: &[Cluster],
    distributed: &[Name],
    clusterset: Option<&Name>,
) -> Result<(), ConfigError> {
    let mut seen: Vec<(&Name, &str)> = Vec::new();
    let named = clusters
        .iter()
        .map(|c| (&c.zone, "cluster_zone"))
        .chain(distributed.iter().map(|z| (z, "distributed_zones")))
        .chain(clusterset.map(|z| (z, "clusterset_zone")));
    for (zone, variable) in named {
        if let Some((_, other)) = seen.iter().find(|(z, _)| *z == zone) {
            return Err(ConfigError::new(
                variable,
                &zone.to_ascii(),
                format!("is also a zone of MESHDNS_{}", other.to_uppercase()),
            ));
        }
        seen.push((zone, variable));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A configuration from pairs, with `MESHDNS_UPSTREAMS` set so no file is read.
    pub(crate) fn config_from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut vars: Vec<(String, String)> =
            vec![("MESHDNS_UPSTREAMS".into(), "127.0.0.1:5300".into())];
        vars.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Config::from_vars(vars)
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = config_from(&[]).unwrap();
        assert_eq!(config.listen, vec!["127.0.0.1:53".parse().unwrap()]);
        assert_eq!(config.allow_from.len(), 2);
        assert_eq!(config.timeout, Duration::from_secs(2));
        assert_eq!(config.attempt_timeout, Duration::from_millis(500));
        assert_eq!(config.cache.size, 10_000);
        assert_eq!(config.cache.negative_ttl, Duration::from_secs(5));
        assert_eq!(config.distributed_zones[0].to_ascii(), "distributed.local.");
        assert_eq!(config.admin_listen, Some("0.0.0.0:9153".parse().unwrap()));
        assert!(config.clusters.is_empty());
    }

    #[test]
    fn the_local_cluster_comes_first_and_uses_the_upstreams() {
        let config = config_from(&[
            ("MESHDNS_LOCAL_CLUSTER", "b"),
            (
                "MESHDNS_CLUSTERS",
                "a=10.8.0.1:30053; b=10.9.0.1 prefix=west- domain=b.example",
            ),
        ])
        .unwrap();
        let names: Vec<&str> = config.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(
            config.clusters[0].endpoints,
            vec!["127.0.0.1:5300".parse().unwrap()]
        );
        assert_eq!(config.clusters[0].zone.to_ascii(), "cluster.b.");
        assert_eq!(config.clusters[0].domain.to_ascii(), "b.example.");
        assert_eq!(config.clusters[1].prefix, "a-");
    }

    #[test]
    fn a_local_cluster_missing_from_the_list_is_added() {
        let config = config_from(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "b=10.9.0.1"),
        ])
        .unwrap();
        assert_eq!(config.clusters[0].name, "a");
        assert!(config.clusters[0].is_local);
    }

    #[test]
    fn the_resolv_conf_skips_loopback_nameservers() {
        let dir = std::env::temp_dir().join(format!("meshdns-resolv-{}", std::process::id()));
        std::fs::write(
            &dir,
            "search db.svc.cluster.local\nnameserver 127.0.0.1\nnameserver 10.96.0.10\n",
        )
        .unwrap();
        let config =
            Config::from_vars([("MESHDNS_RESOLV_CONF".to_string(), dir.display().to_string())])
                .unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(config.upstreams, vec!["10.96.0.10:53".parse().unwrap()]);
    }

    /// Every variable's error path: exit 64 in `main`, here the variable and token named.
    #[test]
    fn every_bad_variable_is_named_with_its_token() {
        let cases: &[(&str, &str, &str)] = &[
            ("MESHDNS_LISTEN", "127.0.0.1:99999", "127.0.0.1:99999"),
            ("MESHDNS_LISTEN", " , ", ""),
            ("MESHDNS_ALLOW_FROM", "10.0.0.0/40", "10.0.0.0/40"),
            ("MESHDNS_UPSTREAMS", "kube-dns", "kube-dns"),
            ("MESHDNS_UPSTREAMS", "", ""),
            ("MESHDNS_CLUSTER_DOMAIN", "a..b", "a..b"),
            ("MESHDNS_LOCAL_CLUSTER", "Bad", "Bad"),
            ("MESHDNS_CLUSTERS", "b=10.9.0.1 colour=red", "colour=red"),
            ("MESHDNS_CLUSTERS", "b=", "b"),
            ("MESHDNS_CLUSTERS", "b=10.9.0.1; b=10.9.0.2", "b"),
            (
                "MESHDNS_CLUSTERS",
                "b=10.9.0.1 prefix=x-; c=10.9.0.2 prefix=x-",
                "prefix=x-",
            ),
            ("MESHDNS_CLUSTER_ZONE", "cluster", "cluster"),
            (
                "MESHDNS_DISTRIBUTED_ZONES",
                "ok.local,bad..zone",
                "bad..zone",
            ),
            ("MESHDNS_CLUSTERSET_ZONE", "a b", "a b"),
            ("MESHDNS_TIMEOUT", "2", "2"),
            ("MESHDNS_TIMEOUT", "0", "0"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "3s", "3s"),
            ("MESHDNS_CACHE_SIZE", "many", "many"),
            ("MESHDNS_CACHE_MAX_TTL", "1d", "1d"),
            ("MESHDNS_CACHE_NEGATIVE_TTL", "5", "5"),
            ("MESHDNS_SERVE_STALE", "forever", "forever"),
            ("MESHDNS_ADMIN_LISTEN", "localhost:9153", "localhost:9153"),
            ("MESHDNS_LOG", "info,[", "info,["),
            ("MESHDNS_LOG_FORMAT", "xml", "xml"),
            ("MESHDNS_THREADS", "0", "0"),
            ("MESHDNS_THREADS", "many", "many"),
            (
                "MESHDNS_RESOLV_CONF",
                "/nonexistent/resolv.conf",
                "/nonexistent/resolv.conf",
            ),
            ("MESHDNS_TYPO", "1", "MESHDNS_TYPO"),
        ];
        for (variable, value, token) in cases {
            let mut vars = vec![(variable.to_string(), value.to_string())];
            if *variable != "MESHDNS_UPSTREAMS" && *variable != "MESHDNS_RESOLV_CONF" {
                vars.push(("MESHDNS_UPSTREAMS".into(), "127.0.0.1".into()));
            }
            let err = Config::from_vars(vars).expect_err(variable);
            assert_eq!(&err.variable, variable, "{value}: {err}");
            assert_eq!(&err.token, token, "{value}: {err}");
        }
    }

    #[test]
    fn kubernetes_service_link_variables_are_ignored() {
        let config = config_from(&[
            ("MESHDNS_SERVICE_HOST", "10.96.4.4"),
            ("MESHDNS_SERVICE_PORT", "53"),
            ("MESHDNS_PORT", "udp://10.96.4.4:53"),
            ("MESHDNS_PORT_53_UDP_PROTO", "udp"),
        ]);
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn a_typo_is_named_whatever_the_order_of_the_variables() {
        for order in [
            ["MESHDNS_UPSTREAMS", "MESHDNS_TYPO"],
            ["MESHDNS_TYPO", "MESHDNS_UPSTREAMS"],
        ] {
            let vars = order.map(|k| (k.to_string(), "127.0.0.1".to_string()));
            assert_eq!(
                Config::from_vars(vars).unwrap_err().variable,
                "MESHDNS_TYPO"
            );
        }
    }

    #[test]
    fn a_distributed_zone_cannot_also_be_a_cluster_zone() {
        let err = config_from(&[
            ("MESHDNS_CLUSTERS", "b=10.9.0.1"),
            ("MESHDNS_DISTRIBUTED_ZONES", "cluster.b"),
        ])
        .unwrap_err();
        assert_eq!(err.variable, "MESHDNS_DISTRIBUTED_ZONES");
    }
}
