//! Configuration: the environment (and `MESHDNS_CONFIG_DIR`) → one validated [`Config`].
//!
//! [`variables`] is the one table of what meshdns reads, a descriptor per variable; `source`
//! is the loader ([`Sources::load`]): it reads the raw values, where each came from, and every
//! file they name, once. This module owns the parse ([`parse`]): it reads every variable by
//! its kind (`kind`), turns the values into a `Config` and cross-checks them, and may not touch
//! a file, the environment or the clock — what it needs of the world is in its [`Sources`].
//! The one door here to the loader is [`Config::from_environment`] (startup, a reload), which
//! loads, then parses. What a `Config` is used for is not decided here: the snapshot builds the
//! routes and groups from it.
//! Every failure is a [`ConfigError`] naming the variable and the offending token; the parse
//! returns all it finds ([`Errors`]), which `main` prints one a line before exiting 64 (and a
//! reload logs before keeping the running configuration). A cross-check runs only on values
//! that parsed, so one mistake is one error. Tests build a `Config` from pairs with
//! [`Config::from_vars`], never by touching the process environment.

mod clusters;
mod dot;
mod hint;
mod in_force;
mod kind;
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

pub(crate) use clusters::{Endpoint, Transport};
pub(crate) use dot::DotConfig;
pub(crate) use in_force::{join, join_with};
pub(crate) use own::is_own_address;
pub(crate) use pod::{OwnData, OwnName, Pod, PodIdentity};
pub use source::read_env_file;
pub(crate) use source::{Settings, Source, Sources};
pub(crate) use values::{IpNet, show_duration};
pub use webhook::WebhookConfig;

use kind::{NAME_PLACEHOLDER, Values};
use values::{DNS_PORT, parse_zone};
use variables::*;

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

/// Every bad variable found, in the order found: what `main` prints, one line each, before
/// exiting 64, and what a reload logs before keeping the running configuration. Never empty
/// when a parse returns it: a value is missing from a configuration only when its error is here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Errors(Vec<ConfigError>);

impl Errors {
    /// The errors, in the order found.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn push(&mut self, error: ConfigError) {
        self.0.push(error);
    }

    /// `value` when no error was found; the errors otherwise.
    fn into_result<T>(self, value: T) -> Result<T, Errors> {
        if self.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

impl From<ConfigError> for Errors {
    fn from(error: ConfigError) -> Self {
        Self(vec![error])
    }
}

impl<'a> IntoIterator for &'a Errors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// One error a line.
impl std::fmt::Display for Errors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<String> = self.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for Errors {}

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

impl LogFormat {
    /// As `MESHDNS_LOG_FORMAT` spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
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
    pub(crate) fn rotated(&self, other: &TlsFiles) -> Vec<&'static Variable> {
        (CLIENT_TLS_FILES.iter().enumerate())
            .filter(|(i, _)| self.loaded.files.get(*i) != other.loaded.files.get(*i))
            .filter_map(|(_, name)| find(name))
            .collect()
    }
}

/// Cache bounds and TTL policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheConfig {
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
    pub(crate) cache: CacheConfig,
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
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Result<Self, Errors> {
        let environment = Settings::from_vars(vars)?;
        Self::from_environment(&environment)
    }

    /// The configuration from environment settings plus the configuration directory they
    /// name (read now): what a reload calls with the environment captured at startup.
    pub(crate) fn from_environment(environment: &Settings) -> Result<Self, Errors> {
        parse(Sources::load(environment)?)
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

/// The configuration `sources` hold, or every value that is wrong. Pure: every file it needs
/// was read by the loader ([`Sources::load`]), so it touches nothing and can be tested from
/// values alone. Each variable is parsed by its kind ([`variables::Variable::kind`]) whatever
/// the others hold; a cross-check (the clusters, the zone table, the pod's identity, the TLS
/// files) runs only on values that parsed, so one mistake is one error.
pub(crate) fn parse(sources: Sources) -> Result<Config, Errors> {
    let mut values = Values::read(&sources.settings, kind::every, kind::read_by_the_server);
    let config = build(&mut values, sources);
    values.finish(config)
}

/// The configuration from the values that parsed, each cross-check run on those it needs;
/// `None` when a value it needs was refused (the error is in `values`).
fn build(values: &mut Values, sources: Sources) -> Option<Config> {
    let Sources {
        settings,
        environment,
        resolv_conf,
        hosts_file,
        tls,
        dot_tls,
    } = sources;
    let listen =
        (values.addresses(LISTEN)).and_then(|listen| values.check(names_an_address(listen)));
    let upstreams = upstreams(values, &settings, &resolv_conf);
    let cluster_domain = values.zone(CLUSTER_DOMAIN).flatten();
    let clusters = match (&cluster_domain, &upstreams) {
        (Some(domain), Some((upstreams, ..))) => all_clusters(values, domain, upstreams),
        _ => None,
    };
    let distributed_zones = values.zones(DISTRIBUTED_ZONES);
    let clusterset_zone = values.zone(CLUSTERSET_ZONE);
    if let (Some(domain), Some(clusters), Some(distributed), Some(clusterset)) = (
        &cluster_domain,
        &clusters,
        &distributed_zones,
        &clusterset_zone,
    ) {
        values.check(zones::check_zones(
            domain,
            clusters,
            distributed,
            clusterset.as_ref(),
        ));
    }
    let domain = local_domain(cluster_domain.as_ref(), clusters.as_deref());
    let pod = (domain.as_ref())
        .and_then(|domain| pod::pod_identity(values, &settings, hosts_file.as_ref(), domain));
    if let (Some(pod), Some(clusters)) = (&pod, &clusters) {
        values.check(pod::check_peer_claims(&settings, pod, clusters));
    }
    if let (Some(listen), Some(pod), Some((upstreams, source, _)), Some(clusters)) =
        (&listen, &pod, &upstreams, &clusters)
    {
        let own = own::own_addresses(listen, pod.ips());
        values.check(own::check_no_own_endpoint(
            &own, upstreams, source, clusters,
        ));
    }
    let tls = values.check(tls_files(tls, clusters.as_deref().unwrap_or_default()));
    let dot = (values.addresses(DOT_LISTEN))
        .and_then(|listen| values.check(dot::parse(&settings, listen, dot_tls)));
    let timeouts = timeouts(values, &settings);
    let (upstreams, upstream_source, search) = upstreams?;
    let (timeout, attempt_timeout) = timeouts?;
    Some(Config {
        listen: listen?,
        allow_from: values.networks(ALLOW_FROM)?,
        upstreams,
        upstream_source,
        clusters: clusters?,
        distributed_zones: distributed_zones?,
        clusterset_zone: clusterset_zone?,
        search,
        timeout,
        attempt_timeout,
        cache: cache_config(values)?,
        max_inflight: values.count(MAX_INFLIGHT)?,
        admin_listen: values.address(ADMIN_LISTEN)?,
        log: values.text(LOG)?.unwrap_or_default(),
        log_format: values.log_format(LOG_FORMAT)?,
        threads: values.count(THREADS)?,
        tls: tls?,
        dot: dot?,
        config_dir: values.path(CONFIG_DIR)?,
        domain: domain?,
        pod: pod?,
        settings,
        environment,
    })
}

/// `MESHDNS_LISTEN`, which must name an address.
fn names_an_address(listen: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, ConfigError> {
    if listen.is_empty() {
        return Err(ConfigError::new(LISTEN, "", "names no address"));
    }
    Ok(listen)
}

/// The local cluster domain: the local cluster's `domain=`, or `MESHDNS_CLUSTER_DOMAIN`.
fn local_domain(cluster_domain: Option<&Name>, clusters: Option<&[Cluster]>) -> Option<Name> {
    let local = clusters?.iter().find(|c| c.is_local);
    local.map_or(cluster_domain, |c| Some(&c.domain)).cloned()
}

/// The local cluster's DNS (`MESHDNS_UPSTREAMS`, or the nameservers of the resolv.conf read
/// as `resolv_conf`), where it came from, and the pod's search list.
#[allow(clippy::type_complexity)]
fn upstreams(
    values: &mut Values,
    settings: &Settings,
    (path, bytes): &(PathBuf, std::io::Result<Vec<u8>>),
) -> Option<(Vec<SocketAddr>, UpstreamSource, Result<Vec<Name>, String>)> {
    let resolv = bytes
        .as_ref()
        .map(|bytes| resolv_conf::Config::parse_with_errors(bytes).0);
    let (upstreams, upstream_source) = match settings.get(UPSTREAMS) {
        Some(_) => (values.addresses(UPSTREAMS)?, UpstreamSource::Environment),
        None => (
            values.check(resolv_conf_nameservers(&resolv, path))?,
            UpstreamSource::ResolvConf(path.clone()),
        ),
    };
    let search = resolv
        .as_ref()
        .map(search_list)
        .map_err(|error| format!("{RESOLV_CONF} {} cannot be read ({error})", path.display()));
    if upstreams.is_empty() {
        values.check::<()>(Err(ConfigError::new(
            UPSTREAMS,
            settings.get(UPSTREAMS).unwrap_or(""),
            "names no endpoint: meshdns needs the local cluster DNS (kube-dns), e.g. 10.96.0.10:53",
        )));
        return None;
    }
    Some((upstreams, upstream_source, search))
}

/// The clusters, each zone made from `MESHDNS_CLUSTER_ZONE`'s template, when the values they
/// are made of parsed.
fn all_clusters(
    values: &mut Values,
    cluster_domain: &Name,
    upstreams: &[SocketAddr],
) -> Option<Vec<Cluster>> {
    let entries = values.clusters(CLUSTERS)?;
    let local = values.text(LOCAL_CLUSTER)?;
    let zone_template = values.text(CLUSTER_ZONE)?.unwrap_or_default();
    let clusters = clusters(entries, local, cluster_domain, &zone_template, upstreams);
    values.check(clusters)
}

/// `MESHDNS_TIMEOUT` and `MESHDNS_ATTEMPT_TIMEOUT`, the second within the first.
fn timeouts(values: &mut Values, settings: &Settings) -> Option<(Duration, Duration)> {
    let (timeout, attempt_timeout) = (values.duration(TIMEOUT), values.duration(ATTEMPT_TIMEOUT));
    let timeout = timeout.and_then(|timeout| {
        let zero = ConfigError::new(TIMEOUT, value(settings, TIMEOUT), "must be longer than 0");
        values.check((!timeout.is_zero()).then_some(timeout).ok_or(zero))
    })?;
    let attempt_timeout = attempt_timeout?;
    if attempt_timeout.is_zero() || attempt_timeout > timeout {
        values.check::<()>(Err(ConfigError::new(
            ATTEMPT_TIMEOUT,
            value(settings, ATTEMPT_TIMEOUT),
            format!(
                "must be longer than 0 and at most MESHDNS_TIMEOUT ({})",
                show_duration(timeout)
            ),
        )));
        return None;
    }
    Some((timeout, attempt_timeout))
}

/// `MESHDNS_CACHE_*` and `MESHDNS_SERVE_STALE`.
fn cache_config(values: &Values) -> Option<CacheConfig> {
    Some(CacheConfig {
        size: values.count(CACHE_SIZE)?,
        max_ttl: values.duration(CACHE_MAX_TTL)?,
        negative_ttl: values.duration(CACHE_NEGATIVE_TTL)?,
        serve_stale: values.duration(SERVE_STALE)?,
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
            let ca_path = ca.path.clone();
            let client_paths =
                (client.as_ref()).map(|(cert, key)| (cert.path.clone(), key.path.clone()));
            let (cert_path, key_path) = client_paths.clone().unzip();
            let at_fault = [
                (TLS_CA_FILE, Some(ca_path.clone())),
                (TLS_CERT_FILE, cert_path),
                (TLS_KEY_FILE, key_path),
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

/// The clusters of `entries` (`MESHDNS_CLUSTERS`), `local` (`MESHDNS_LOCAL_CLUSTER`) among
/// them; `zone_template` makes each cluster's zone.
fn clusters(
    mut entries: Vec<clusters::ClusterEntry>,
    local: Option<String>,
    default_domain: &Name,
    zone_template: &str,
    upstreams: &[SocketAddr],
) -> Result<Vec<Cluster>, ConfigError> {
    let local = local_cluster(local.as_deref(), &entries)?;
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
    local: Option<&str>,
    entries: &[clusters::ClusterEntry],
) -> Result<Option<String>, ConfigError> {
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    let mut listed = names[..names.len().min(NAMES_SHOWN)].join(", ");
    if names.len() > NAMES_SHOWN {
        listed.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
    }
    match local {
        None if names.is_empty() => Ok(None),
        None => Err(ConfigError::new(
            LOCAL_CLUSTER,
            "",
            format!(
                "must be set when {CLUSTERS} lists clusters ({listed}): name the cluster this pod runs in, whose names go to kube-dns directly instead of through its exposed endpoint"
            ),
        )),
        Some(name) => {
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

#[cfg(test)]
pub(crate) mod tests;
