//! Configuration: the environment (and `MESHDNS_CONFIG_DIR`) → one validated [`Config`].
//!
//! [`variables`] is the one table of what meshdns reads, a descriptor per variable; `source`
//! is the loader ([`Sources::load`]): it reads the raw values, where each came from, and every
//! file they name, once. This module owns the parse ([`parse`]): it turns those values into a
//! `Config` and cross-checks them, and may not touch a file, the environment or the clock —
//! what it needs of the world is in its [`Sources`]. Every failure is a [`ConfigError`] naming
//! the variable and the offending token, which `main` prints as one line before exiting 64
//! (and a reload logs before keeping the running configuration). Tests build a `Config` from
//! pairs with [`Config::from_vars`], never by touching the process environment.

mod clusters;
mod dot;
mod hint;
mod own;
mod pod;
mod source;
mod values;
pub(crate) mod variables;
mod webhook;
mod zones;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hickory_proto::rr::Name;

use crate::certificates::{self, ClientTls, PemFile};

pub use clusters::{Endpoint, Transport};
pub(crate) use dot::DotConfig;
pub(crate) use own::is_own_address;
pub(crate) use pod::{OwnData, OwnName, PodIdentity};
pub use source::read_env_file;
pub(crate) use source::{Settings, Source, Sources};
pub(crate) use values::{IpNet, show_duration};
pub use webhook::WebhookConfig;

use clusters::parse_clusters;
use values::{DNS_PORT, parse_duration, parse_socket_addr, parse_zone};
use variables::*;

/// The placeholder of `MESHDNS_CLUSTER_ZONE` that stands for the cluster name.
const NAME_PLACEHOLDER: &str = "{name}";

/// More threads than this is never useful for a per-pod resolver.
const MAX_THREADS: usize = 64;

/// The in-flight cap's range: at least one query, at most what no pod needs.
const MAX_INFLIGHT_RANGE: std::ops::RangeInclusive<usize> = 1..=65_536;

/// The longest a query (or one attempt) may be given: beyond a minute a client has long given
/// up, and no peer is that far away.
const MAX_QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a positive answer, or a stale one, may be kept (RFC 8767 §5 suggests 1–3 days
/// for stale data; a week bounds both).
const MAX_CACHE_TTL: Duration = Duration::from_secs(7 * 86_400);

/// The longest a negative answer may be kept (RFC 2308 §5 suggests 1–3 hours at most).
const MAX_NEGATIVE_TTL: Duration = Duration::from_secs(3 * 3600);

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
            variable: variable.to_string(),
            token: token.to_string(),
            reason: reason.into(),
        }
    }
}

/// Where the local cluster's DNS endpoints came from (shown by `--check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpstreamSource {
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
    pub(crate) zone: Name,
    /// Its Kubernetes cluster domain: `cluster.local` by default.
    pub domain: Name,
    /// The host prefix of its targets in distributed zones: `NAME-` by default.
    pub(crate) prefix: String,
    /// Where its DNS is asked (the local cluster: `MESHDNS_UPSTREAMS`).
    pub(crate) endpoints: Vec<Endpoint>,
    pub(crate) transport: Transport,
    /// `transport=tls`: the name the peer's certificate must carry (`tls_name=`, or the host
    /// name of the endpoint when it has one).
    pub(crate) tls_name: Option<Name>,
    /// `cidr=`: its pod and service networks; reverse names of their addresses are its own.
    pub(crate) networks: Vec<ipnet::IpNet>,
    /// `namespaces=`: the zones `<ns>.svc.<local domain>.` of the namespaces that live in this
    /// cluster only, asked of it verbatim.
    pub(crate) namespaces: Vec<Name>,
    pub(crate) is_local: bool,
}

/// So that what takes clusters (the gathered naming) also takes what holds them (peers).
impl AsRef<Cluster> for Cluster {
    fn as_ref(&self) -> &Cluster {
        self
    }
}

/// The files of DNS over TLS to peers: what `transport=tls` clusters are verified against,
/// and the client certificate they may ask for — and the client configuration read from them
/// (read at validation, so a bad file is refused like any bad value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) ca: PathBuf,
    /// Certificate chain and key, for peers that require client certificates.
    pub(crate) client: Option<(PathBuf, PathBuf)>,
    pub(crate) loaded: ClientTls,
}

impl TlsFiles {
    /// The variables whose file's content differs between `self` and `other`: what a
    /// rotation changed, for the log.
    pub(crate) fn rotated(&self, other: &TlsFiles) -> Vec<&'static str> {
        [TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE]
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.loaded.files.get(*i) != other.loaded.files.get(*i))
            .map(|(_, variable)| variable)
            .collect()
    }
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
    pub(crate) allow_from: Vec<IpNet>,
    /// The local cluster's DNS (kube-dns): pass-through and the local cluster's names.
    pub(crate) upstreams: Vec<SocketAddr>,
    pub(crate) upstream_source: UpstreamSource,
    /// Local cluster first, then `MESHDNS_CLUSTERS` order: the merge order of gathered answers.
    pub clusters: Vec<Cluster>,
    pub distributed_zones: Vec<Name>,
    pub(crate) clusterset_zone: Option<Name>,
    /// The pod's search list: the last `search` (or `domain`) line of `MESHDNS_RESOLV_CONF`,
    /// read even when `MESHDNS_UPSTREAMS` is set, for answering search-list expansions of
    /// meshdns's names. `Err` says why there is none (the file cannot be read): the feature is
    /// then off, and the startup log says so once.
    pub(crate) search: Result<Vec<Name>, String>,
    pub(crate) timeout: Duration,
    pub(crate) attempt_timeout: Duration,
    pub cache: CacheConfig,
    /// Client queries answered at once (`MESHDNS_MAX_INFLIGHT`).
    pub(crate) max_inflight: usize,
    pub admin_listen: Option<SocketAddr>,
    pub log: String,
    pub log_format: LogFormat,
    /// Runtime worker threads: 1 runs everything on one thread.
    pub threads: usize,
    /// `MESHDNS_TLS_*`, when set.
    pub(crate) tls: Option<TlsFiles>,
    /// `MESHDNS_DOT_*`: DNS over TLS served to the peers, when `MESHDNS_DOT_LISTEN` is set.
    pub dot: Option<DotConfig>,
    /// `MESHDNS_CONFIG_DIR`, watched for changes when set.
    pub(crate) config_dir: Option<PathBuf>,
    /// The local cluster domain (the local cluster's `domain=`, or `MESHDNS_CLUSTER_DOMAIN`):
    /// the pod's `svc` name lies under it, and follows it when a reload changes it.
    pub(crate) domain: Name,
    /// `MESHDNS_POD_*` and the hosts file: who this pod is (read once; restart-only).
    pub(crate) pod: PodIdentity,
    /// The raw values this configuration was built from, and their sources.
    pub(crate) settings: Settings,
    /// The environment's part of `settings`: what a reload lays the directory over again.
    pub(crate) environment: Settings,
}

impl Config {
    /// The cluster this pod runs in (`MESHDNS_LOCAL_CLUSTER`), when one is named.
    pub(crate) fn local_cluster(&self) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.is_local)
    }

    /// meshdns's own addresses: the listen addresses, and the pod's addresses (of the same
    /// family) on the port of a wildcard one. An endpoint among them, in any spelling
    /// ([`is_own_address`]), is a loop.
    pub(crate) fn own_addresses(&self) -> Vec<SocketAddr> {
        own::own_addresses(&self.listen, self.pod.ips())
    }

    /// The clusters in plain words, for the startup line: `a=10.96.0.10:53 (local);
    /// b=127.0.1.1:30053,dns-c.example.net:53` — addresses and host names as written.
    pub(crate) fn clusters_in_words(&self) -> String {
        let words: Vec<String> = self
            .clusters
            .iter()
            .map(|cluster| {
                let endpoints: Vec<String> =
                    cluster.endpoints.iter().map(ToString::to_string).collect();
                let local = if cluster.is_local { " (local)" } else { "" };
                format!("{}={}{local}", cluster.name, endpoints.join(","))
            })
            .collect();
        if words.is_empty() {
            "none".to_string()
        } else {
            words.join("; ")
        }
    }

    /// Builds the configuration from `(name, value)` pairs as if they were the environment:
    /// names without the `MESHDNS_` prefix are ignored, unknown `MESHDNS_*` names are an error
    /// (a typo must not be silent), and `MESHDNS_CONFIG_DIR`'s files are laid over the rest.
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(
        vars: I,
    ) -> Result<Self, ConfigError> {
        let environment = Settings::from_vars(vars)?;
        Self::from_environment(&environment)
    }

    /// The configuration from environment settings plus the configuration directory they
    /// name (read now): what a reload calls with the environment captured at startup.
    pub(crate) fn from_environment(environment: &Settings) -> Result<Self, ConfigError> {
        Sources::load(environment).and_then(parse)
    }
}

/// The value of `name`, or its default (an unset variable without a default is "").
pub(crate) fn value<'a>(settings: &'a Settings, name: &str) -> &'a str {
    settings
        .get(name)
        .or_else(|| find(name).and_then(|v| v.default))
        .unwrap_or("")
        .trim()
}

/// The value of `name` when it is set to something other than whitespace.
fn set<'a>(settings: &'a Settings, name: &str) -> Option<&'a str> {
    settings.get(name).map(str::trim).filter(|v| !v.is_empty())
}

/// Refuses an empty (or whitespace-only) value of a variable whose descriptor says so
/// ([`variables::Variable::refuses_empty`]). Unset one by deleting its file, or leaving it out
/// of the environment.
fn check_not_empty(settings: &Settings) -> Result<(), ConfigError> {
    match variables::refusing_empty()
        .find(|name| settings.get(name).is_some_and(|v| v.trim().is_empty()))
    {
        Some(name) => Err(ConfigError::new(
            name,
            settings.get(name).unwrap_or_default(),
            "is set but empty; to unset it, delete its file in the configuration directory (or leave it out of the environment)",
        )),
        None => Ok(()),
    }
}

/// Refuses a value in quotes: no variable takes one (see [`hint::copied_quotes`]).
fn check_no_quotes(settings: &Settings) -> Result<(), ConfigError> {
    for variable in VARIABLES {
        if let Some(raw) = settings.get(variable.name)
            && let Some(reason) = hint::copied_quotes(raw)
        {
            return Err(ConfigError::new(variable.name, raw, reason));
        }
    }
    Ok(())
}

/// The configuration `sources` hold, or the first value that is wrong. Pure: every file it
/// needs was read by the loader ([`Sources::load`]), so it touches nothing and can be tested
/// from values alone.
pub(crate) fn parse(sources: Sources) -> Result<Config, ConfigError> {
    let Sources {
        settings,
        environment,
        resolv_conf,
        hosts_file,
        tls,
        dot_tls,
    } = sources;
    check_not_empty(&settings)?;
    check_no_quotes(&settings)?;
    let listen = list(&settings, LISTEN, |t| parse_socket_addr(t, DNS_PORT))?;
    if listen.is_empty() {
        return Err(ConfigError::new(LISTEN, "", "names no address"));
    }
    let allow_from = list(&settings, ALLOW_FROM, IpNet::parse)?;
    let (upstreams, upstream_source, search) = upstreams(&settings, &resolv_conf)?;
    let cluster_domain = zone(CLUSTER_DOMAIN, value(&settings, CLUSTER_DOMAIN))?;
    let clusters = all_clusters(&settings, &cluster_domain, &upstreams)?;
    let distributed_zones = list(&settings, DISTRIBUTED_ZONES, parse_zone)?;
    let clusterset_zone = set(&settings, CLUSTERSET_ZONE)
        .map(|z| zone(CLUSTERSET_ZONE, z))
        .transpose()?;
    zones::check_zones(
        &cluster_domain,
        &clusters,
        &distributed_zones,
        clusterset_zone.as_ref(),
    )?;
    let domain = (clusters.iter())
        .find(|c| c.is_local)
        .map_or(&cluster_domain, |c| &c.domain)
        .clone();
    let pod = pod::pod_identity(&settings, hosts_file.as_ref(), &domain)?;
    pod::check_peer_claims(&settings, &pod, &clusters)?;
    let (timeout, attempt_timeout) = timeouts(&settings)?;
    let cache = cache_config(&settings)?;
    let max_inflight = number(
        &settings,
        MAX_INFLIGHT,
        MAX_INFLIGHT_RANGE,
        "is not a number of queries from 1 to 65536",
    )?;
    let (admin_listen, log, log_format) = process_settings(&settings)?;
    let threads = number(
        &settings,
        THREADS,
        1..=MAX_THREADS,
        "is not a thread count from 1 to 64",
    )?;
    let own = own::own_addresses(&listen, pod.ips());
    own::check_no_own_endpoint(&own, &upstreams, &upstream_source, &clusters)?;
    let config_dir = set(&settings, CONFIG_DIR).map(PathBuf::from);
    let tls = tls_files(tls, &clusters)?;
    let dot = dot::parse(&settings, dot_tls)?;
    Ok(Config {
        listen,
        allow_from,
        upstreams,
        upstream_source,
        clusters,
        distributed_zones,
        clusterset_zone,
        search,
        timeout,
        attempt_timeout,
        cache,
        max_inflight,
        admin_listen,
        log,
        log_format,
        threads,
        tls,
        dot,
        config_dir,
        domain,
        pod,
        settings,
        environment,
    })
}

/// The local cluster's DNS (`MESHDNS_UPSTREAMS`, or the nameservers of the resolv.conf read
/// as `resolv_conf`), where it came from, and the pod's search list.
#[allow(clippy::type_complexity)]
fn upstreams(
    settings: &Settings,
    (path, bytes): &(PathBuf, std::io::Result<Vec<u8>>),
) -> Result<(Vec<SocketAddr>, UpstreamSource, Result<Vec<Name>, String>), ConfigError> {
    let resolv = bytes
        .as_ref()
        .map(|bytes| resolv_conf::Config::parse_with_errors(bytes).0);
    let (upstreams, upstream_source) = match settings.get(UPSTREAMS) {
        Some(_) => (
            list(settings, UPSTREAMS, |t| parse_socket_addr(t, DNS_PORT))?,
            UpstreamSource::Environment,
        ),
        None => (
            resolv_conf_nameservers(&resolv, path)?,
            UpstreamSource::ResolvConf(path.clone()),
        ),
    };
    let search = resolv
        .as_ref()
        .map(search_list)
        .map_err(|error| format!("{RESOLV_CONF} {} cannot be read ({error})", path.display()));
    if upstreams.is_empty() {
        return Err(ConfigError::new(
            UPSTREAMS,
            settings.get(UPSTREAMS).unwrap_or(""),
            "names no endpoint: meshdns needs the local cluster DNS (kube-dns), e.g. 10.96.0.10:53",
        ));
    }
    Ok((upstreams, upstream_source, search))
}

/// The clusters, each zone made from `MESHDNS_CLUSTER_ZONE`'s template.
fn all_clusters(
    settings: &Settings,
    cluster_domain: &Name,
    upstreams: &[SocketAddr],
) -> Result<Vec<Cluster>, ConfigError> {
    let zone_template = value(settings, CLUSTER_ZONE).to_string();
    if !zone_template.contains(NAME_PLACEHOLDER) {
        return Err(ConfigError::new(
            CLUSTER_ZONE,
            &zone_template,
            "must contain {name}, e.g. cluster.{name}",
        ));
    }
    clusters(settings, cluster_domain, &zone_template, upstreams)
}

/// `MESHDNS_TIMEOUT` and `MESHDNS_ATTEMPT_TIMEOUT`, the second within the first.
fn timeouts(settings: &Settings) -> Result<(Duration, Duration), ConfigError> {
    let timeout = duration(settings, TIMEOUT, MAX_QUERY_TIMEOUT)?;
    let attempt_timeout = duration(settings, ATTEMPT_TIMEOUT, MAX_QUERY_TIMEOUT)?;
    if timeout.is_zero() {
        return Err(ConfigError::new(
            TIMEOUT,
            value(settings, TIMEOUT),
            "must be longer than 0",
        ));
    }
    if attempt_timeout.is_zero() || attempt_timeout > timeout {
        return Err(ConfigError::new(
            ATTEMPT_TIMEOUT,
            value(settings, ATTEMPT_TIMEOUT),
            format!(
                "must be longer than 0 and at most MESHDNS_TIMEOUT ({})",
                show_duration(timeout)
            ),
        ));
    }
    Ok((timeout, attempt_timeout))
}

/// `MESHDNS_CACHE_*` and `MESHDNS_SERVE_STALE`.
fn cache_config(settings: &Settings) -> Result<CacheConfig, ConfigError> {
    Ok(CacheConfig {
        size: number(
            settings,
            CACHE_SIZE,
            0..=usize::MAX,
            "is not a whole number of entries (0 disables the cache)",
        )?,
        max_ttl: duration(settings, CACHE_MAX_TTL, MAX_CACHE_TTL)?,
        negative_ttl: duration(settings, CACHE_NEGATIVE_TTL, MAX_NEGATIVE_TTL)?,
        serve_stale: duration(settings, SERVE_STALE, MAX_CACHE_TTL)?,
    })
}

/// `MESHDNS_TLS_*`: a CA bundle whenever a cluster uses `transport=tls`, and a client
/// certificate and key together or not at all.
fn tls_files(
    [ca, cert, key]: [Option<PemFile>; 3],
    clusters: &[Cluster],
) -> Result<Option<TlsFiles>, ConfigError> {
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(cert), None) => {
            return Err(ConfigError::new(
                TLS_KEY_FILE,
                "",
                format!(
                    "is needed with MESHDNS_TLS_CERT_FILE ({})",
                    cert.path.display()
                ),
            ));
        }
        (None, Some(key)) => {
            return Err(ConfigError::new(
                TLS_CERT_FILE,
                "",
                format!(
                    "is needed with MESHDNS_TLS_KEY_FILE ({})",
                    key.path.display()
                ),
            ));
        }
    };
    match ca {
        Some(ca) => {
            let (ca_path, client_paths) = (
                ca.path.clone(),
                (client.as_ref()).map(|(cert, key)| (cert.path.clone(), key.path.clone())),
            );
            let at_fault = [
                (TLS_CA_FILE, Some(ca_path.clone())),
                (
                    TLS_CERT_FILE,
                    client_paths.as_ref().map(|(cert, _)| cert.clone()),
                ),
                (
                    TLS_KEY_FILE,
                    client_paths.as_ref().map(|(_, key)| key.clone()),
                ),
            ];
            let loaded = certificates::build(ca, client)
                .map_err(|error| file_error(&error, &at_fault, TLS_KEY_FILE))?;
            Ok(Some(TlsFiles {
                ca: ca_path,
                client: client_paths,
                loaded,
            }))
        }
        None => match clusters.iter().find(|c| c.transport == Transport::Tls) {
            Some(cluster) => Err(ConfigError::new(
                TLS_CA_FILE,
                "",
                format!(
                    "is required: cluster {} uses transport=tls (a PEM bundle of the CAs that sign the peers' certificates)",
                    cluster.name
                ),
            )),
            None if client.is_some() => Err(ConfigError::new(
                TLS_CA_FILE,
                "",
                "is required with a client certificate",
            )),
            None => Ok(None),
        },
    }
}

/// The error of a TLS file that does not load, naming the variable of the file at fault: the
/// first of `files` (variable and path) whose path it is, the key's variable (`key`) when the
/// key is at fault (the certificate and key given as one file, a key missing from it), the
/// last when none is.
fn file_error(
    error: &certificates::TlsConfigError,
    files: &[(&str, Option<PathBuf>)],
    key: &str,
) -> ConfigError {
    let at_fault = error.path();
    let variable = if error.is_about_the_key() {
        key
    } else {
        files
            .iter()
            .find(|(_, path)| path.as_deref() == at_fault)
            .or(files.last())
            .map_or("", |(variable, _)| variable)
    };
    let token = at_fault.map_or(String::new(), |p| p.display().to_string());
    ConfigError::new(variable, &token, tls_reason(error, &token))
}

/// Why a TLS file is refused, without its path (the token already shows it); a file that does
/// not exist is most often a Secret that is not mounted, and the message says so.
fn tls_reason(error: &certificates::TlsConfigError, path: &str) -> String {
    if let certificates::TlsConfigError::Read { source, .. } = error
        && source.kind() == std::io::ErrorKind::NotFound
    {
        return "does not exist: usually the Secret that holds it is not mounted (check the sidecar's volumeMounts and the Secret's name and keys)".into();
    }
    let text = error.to_string();
    text.strip_prefix(&format!("{path}: "))
        .map_or(text.clone(), str::to_string)
}

/// The comma list of `variable`, with whitespace around items ignored and empty items skipped.
fn list<T>(
    settings: &Settings,
    variable: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, ConfigError> {
    value(settings, variable)
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let reason = |reason| hint::spaces_in_list(t).unwrap_or(reason);
            parse(t).map_err(|why| ConfigError::new(variable, t, reason(why)))
        })
        .collect()
}

fn duration(settings: &Settings, variable: &str, max: Duration) -> Result<Duration, ConfigError> {
    let raw = value(settings, variable);
    parse_duration(raw, max).map_err(|reason| ConfigError::new(variable, raw, reason))
}

fn number(
    settings: &Settings,
    variable: &str,
    range: std::ops::RangeInclusive<usize>,
    reason: &str,
) -> Result<usize, ConfigError> {
    let raw = value(settings, variable);
    raw.parse()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| ConfigError::new(variable, raw, reason))
}

fn zone(variable: &str, value: &str) -> Result<Name, ConfigError> {
    parse_zone(value.trim()).map_err(|reason| ConfigError::new(variable, value, reason))
}

/// Levels `MESHDNS_LOG` may name on their own.
const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// A tracing filter whose every directive says something: a level, or `target=level`. A bare
/// word is a target for tracing, so `MESHDNS_LOG=verbose` would quietly turn every log line
/// off (the startup line included).
fn check_log_filter(filter: &str) -> Result<(), ConfigError> {
    if let Err(error) = filter.parse::<tracing_subscriber::filter::Targets>() {
        return Err(ConfigError::new(
            LOG,
            filter,
            format!("is not a log filter: {error}"),
        ));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let is_level = LOG_LEVELS.contains(&directive.to_ascii_lowercase().as_str());
        let is_target = directive.contains('=') || directive.starts_with("meshdns");
        if !is_level && !is_target {
            return Err(ConfigError::new(
                LOG,
                directive,
                "is neither a level (off, error, warn, info, debug, trace) nor target=level",
            ));
        }
    }
    Ok(())
}

/// The non-loopback nameservers of a resolv.conf (`resolv`, as read from `path`): a loopback
/// one is meshdns itself in a pod.
fn resolv_conf_nameservers(
    resolv: &Result<resolv_conf::Config, &std::io::Error>,
    path: &std::path::Path,
) -> Result<Vec<SocketAddr>, ConfigError> {
    let shown = path.display().to_string();
    let parsed = resolv.as_ref().map_err(|e| {
        ConfigError::new(
            RESOLV_CONF,
            &shown,
            format!("cannot be read ({e}); set MESHDNS_UPSTREAMS to the cluster DNS instead"),
        )
    })?;
    let upstreams: Vec<SocketAddr> = parsed
        .nameservers
        .iter()
        .map(std::net::IpAddr::from)
        .filter(|ip| !ip.is_loopback())
        .map(|ip| SocketAddr::new(ip, DNS_PORT))
        .collect();
    if upstreams.is_empty() {
        return Err(ConfigError::new(
            RESOLV_CONF,
            &shown,
            "lists no non-loopback nameserver; set MESHDNS_UPSTREAMS to the cluster DNS (e.g. 10.96.0.10)",
        ));
    }
    Ok(upstreams)
}

/// The search suffixes of a resolv.conf, as glibc takes them (the last `search` or `domain`
/// line), lowercased and fully qualified. A suffix that is no valid name is left out: the
/// resolver of the pod skips it too, and nothing of meshdns depends on it.
fn search_list(parsed: &resolv_conf::Config) -> Vec<Name> {
    parsed
        .get_last_search_or_domain()
        .filter_map(|suffix| Name::from_ascii(suffix).ok())
        .map(|mut suffix| {
            suffix.set_fqdn(true);
            suffix.to_lowercase()
        })
        .filter(|suffix| !suffix.is_root())
        .collect()
}

fn clusters(
    settings: &Settings,
    default_domain: &Name,
    zone_template: &str,
    upstreams: &[SocketAddr],
) -> Result<Vec<Cluster>, ConfigError> {
    let mut entries = parse_clusters(value(settings, CLUSTERS))?;
    let local = local_cluster(settings, &entries)?;
    // A local cluster named without a list is an entry without endpoints (it is asked through
    // the upstreams).
    if let Some(local) = &local
        && !entries.iter().any(|e| &e.name == local)
    {
        entries.push(clusters::ClusterEntry {
            name: local.clone(),
            ..clusters::ClusterEntry::default()
        });
    }
    // The domain names of this pod's cluster live in: namespace routes are zones under it.
    let local_domain = entries
        .iter()
        .find(|e| local.as_ref() == Some(&e.name))
        .and_then(|e| e.domain.as_ref())
        .unwrap_or(default_domain);
    let mut clusters: Vec<Cluster> = Vec::with_capacity(entries.len());
    let mut names = std::collections::HashSet::with_capacity(entries.len());
    for entry in &entries {
        if !names.insert(entry.name.as_str()) {
            return Err(ConfigError::new(
                CLUSTERS,
                &entry.name,
                "names this cluster twice",
            ));
        }
        let is_local = local.as_deref() == Some(&entry.name);
        if entry.endpoints.is_empty() && !is_local {
            return Err(ConfigError::new(
                CLUSTERS,
                &entry.name,
                "has no endpoints (only the local cluster, MESHDNS_LOCAL_CLUSTER, may omit them)",
            ));
        }
        clusters.push(cluster_from(
            entry,
            (default_domain, local_domain),
            zone_template,
            upstreams,
            is_local,
        )?);
    }
    // The local cluster answers first in every merge.
    clusters.sort_by_key(|c| !c.is_local);
    clusters::check_claims(&clusters)?;
    clusters::check_prefixes(&clusters)?;
    Ok(clusters)
}

/// The most cluster names a message lists.
const NAMES_SHOWN: usize = 10;

/// `MESHDNS_LOCAL_CLUSTER`, which must name one of the clusters `MESHDNS_CLUSTERS` lists when
/// it lists any: unset, the pod's own cluster would be asked through its exposed endpoint; not
/// in the list (a typo), it would be a cluster of its own, and the local kube-dns would be
/// gathered twice under two prefixes. Without `MESHDNS_CLUSTERS` it may name the cluster alone.
fn local_cluster(
    settings: &Settings,
    entries: &[clusters::ClusterEntry],
) -> Result<Option<String>, ConfigError> {
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    let mut listed = names[..names.len().min(NAMES_SHOWN)].join(", ");
    if names.len() > NAMES_SHOWN {
        listed.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
    }
    match set(settings, LOCAL_CLUSTER) {
        None if names.is_empty() => Ok(None),
        None => Err(ConfigError::new(
            LOCAL_CLUSTER,
            "",
            format!(
                "must be set when {CLUSTERS} lists clusters ({listed}): name the cluster this pod runs in, whose names go to kube-dns directly instead of through its exposed endpoint"
            ),
        )),
        Some(name) => {
            values::check_cluster_name(name)
                .map_err(|reason| ConfigError::new(LOCAL_CLUSTER, name, reason))?;
            if names.is_empty() || names.contains(&name) {
                return Ok(Some(name.to_string()));
            }
            let meant = hint::closest(name, names.iter().copied())
                .map_or(String::new(), |meant| format!("did you mean {meant}? "));
            Err(ConfigError::new(
                LOCAL_CLUSTER,
                name,
                format!(
                    "is not one of the clusters of {CLUSTERS} ({listed}): {meant}A name not in the list would be a cluster of its own, and this cluster's kube-dns would be gathered twice"
                ),
            ))
        }
    }
}

/// The cluster of `entry`; `domains` are the default cluster domain and the local one.
fn cluster_from(
    entry: &clusters::ClusterEntry,
    (default_domain, local_domain): (&Name, &Name),
    zone_template: &str,
    upstreams: &[SocketAddr],
    is_local: bool,
) -> Result<Cluster, ConfigError> {
    let zone_text = zone_template.replace(NAME_PLACEHOLDER, &entry.name);
    let zone = parse_zone(&zone_text)
        .map_err(|reason| ConfigError::new(CLUSTER_ZONE, &zone_text, reason))?;
    // The local cluster is asked through MESHDNS_UPSTREAMS, over UDP.
    let transport = match entry.transport {
        Some(transport) if !is_local => transport,
        _ => Transport::Udp,
    };
    let endpoints: Vec<Endpoint> = if is_local {
        upstreams.iter().copied().map(Endpoint::Addr).collect()
    } else {
        entry
            .endpoints
            .iter()
            .map(|e| e.with_default_port(transport.default_port()))
            .collect()
    };
    let tls_name = match (transport, &entry.tls_name) {
        (Transport::Tls, Some(name)) => Some(name.clone()),
        (Transport::Tls, None) => {
            let mut hosts = endpoints.iter().map(|e| match e {
                Endpoint::Name { host, .. } => Some(host.clone()),
                Endpoint::Addr(_) => None,
            });
            match hosts.next().flatten() {
                Some(host) if hosts.all(|h| h.as_ref() == Some(&host)) => Some(host),
                _ => {
                    return Err(ConfigError::new(
                        CLUSTERS,
                        &entry.name,
                        "uses transport=tls without tls_name=: the name the peers' certificate carries is needed (it defaults to the endpoint's host name only when every endpoint is that one host name)",
                    ));
                }
            }
        }
        // The local cluster is asked through MESHDNS_UPSTREAMS: the options by which the other
        // clusters reach it (one clusters file serves every cluster) do not apply to it.
        (_, Some(_)) if is_local => None,
        (_, Some(name)) => {
            return Err(ConfigError::new(
                CLUSTERS,
                &format!("tls_name={}", name.to_ascii().trim_end_matches('.')),
                format!("is only for transport=tls (cluster {})", entry.name),
            ));
        }
        (_, None) => None,
    };
    let domain = entry
        .domain
        .clone()
        .unwrap_or_else(|| default_domain.clone());
    let namespaces = clusters::namespace_zones(entry, &domain, local_domain)?;
    Ok(Cluster {
        name: entry.name.clone(),
        zone,
        domain,
        prefix: entry
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}-", entry.name)),
        endpoints,
        transport,
        tls_name,
        networks: entry.networks.clone(),
        namespaces,
        is_local,
    })
}

/// What every mode of the binary reads around its own work: the admin listener
/// (`MESHDNS_ADMIN_LISTEN`, `None` when empty), the log filter and the log format.
pub(crate) fn process_settings(
    settings: &Settings,
) -> Result<(Option<SocketAddr>, String, LogFormat), ConfigError> {
    let admin_listen = match value(settings, ADMIN_LISTEN) {
        "" => None,
        addr => Some(
            parse_socket_addr(addr, 9153)
                .map_err(|reason| ConfigError::new(ADMIN_LISTEN, addr, reason))?,
        ),
    };
    let log = value(settings, LOG).to_string();
    check_log_filter(&log)?;
    let log_format = match value(settings, LOG_FORMAT) {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => return Err(ConfigError::new(LOG_FORMAT, other, "must be text or json")),
    };
    Ok((admin_listen, log, log_format))
}

#[cfg(test)]
pub(crate) mod tests;
