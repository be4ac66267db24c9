//! The `MESHDNS_CLUSTERS` grammar: `NAME=ENDPOINT[,ENDPOINT…] [domain=…] [prefix=…]
//! [transport=udp|tcp|tls] [tls_name=…] [cidr=…] [namespaces=…]` entries separated by `;`. An
//! endpoint is an address (`10.9.0.1:30053`, `[fd00::1]:30053`) or a host name
//! (`dns-b.example.net:30053`) that meshdns resolves; the port defaults to 53, or 853 for
//! `transport=tls`.
//!
//! `cidr=` and `namespaces=` are claims: the cluster's pod and service networks (reverse
//! lookups of those addresses are its own) and namespaces that live in it only (their names are
//! asked of it). [`check_claims`] refuses two clusters claiming the same thing.
//!
//! Whitespace around tokens, commas and `=` is ignored, so a ConfigMap may spread the list over
//! several lines. An entry may name no endpoints only when it is the local cluster (whose
//! queries go to `MESHDNS_UPSTREAMS`); that check belongs to the caller, which knows the local
//! cluster.
//!
//! It owns the text of an entry and the claims check, nothing after: the parent's parse turns
//! an entry into a [`Cluster`] (its zone from the template, its transport), and the upstream
//! group resolves its host names (`upstream::names`); nothing here touches the network.

use std::net::{IpAddr, SocketAddr};

use hickory_proto::rr::Name;
use ipnet::IpNet;

use super::values::{check_cluster_name, parse_host_name, parse_ip_port, parse_zone};
use super::variables::CLUSTERS;
use super::{Cluster, ConfigError};

/// The most clusters `MESHDNS_CLUSTERS` may list. Every cluster is a leg of every gathered
/// query, so a mesh far beyond this could not answer within a query's deadline anyway; the
/// bound also keeps validation and the routing table small.
pub(super) const MAX_CLUSTERS: usize = 256;

/// The port of DNS over TLS (RFC 7858).
pub(super) const DOT_PORT: u16 = 853;

/// How a cluster's DNS is asked. `Udp` falls back to TCP when a reply is truncated; `Tls` is
/// DNS over TLS, with no fallback to plain DNS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Udp,
    Tcp,
    Tls,
}

impl Transport {
    /// The port an endpoint without one gets.
    pub(crate) fn default_port(self) -> u16 {
        match self {
            Transport::Udp | Transport::Tcp => super::values::DNS_PORT,
            Transport::Tls => DOT_PORT,
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        })
    }
}

/// Where one endpoint of a cluster is: an address, or a host name resolved through the local
/// upstreams (every address it has is an endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Addr(SocketAddr),
    Name { host: Name, port: u16 },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Addr(addr) => addr.fmt(f),
            Endpoint::Name { host, port } => {
                write!(f, "{}:{port}", host.to_ascii().trim_end_matches('.'))
            }
        }
    }
}

/// An endpoint as written, its port not yet defaulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum EndpointToken {
    Ip(IpAddr, Option<u16>),
    Host(Name, Option<u16>),
}

impl EndpointToken {
    /// The endpoint, with `default_port` when none was written.
    pub(super) fn with_default_port(&self, default_port: u16) -> Endpoint {
        match self {
            EndpointToken::Ip(ip, port) => {
                Endpoint::Addr(SocketAddr::new(*ip, port.unwrap_or(default_port)))
            }
            EndpointToken::Host(host, port) => Endpoint::Name {
                host: host.clone(),
                port: port.unwrap_or(default_port),
            },
        }
    }
}

/// One entry of `MESHDNS_CLUSTERS`, options not yet defaulted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ClusterEntry {
    pub(crate) name: String,
    pub(crate) endpoints: Vec<EndpointToken>,
    pub(crate) domain: Option<Name>,
    pub(crate) prefix: Option<String>,
    pub(crate) transport: Option<Transport>,
    /// The name the peer's certificate must carry (`transport=tls`).
    pub(crate) tls_name: Option<Name>,
    /// `cidr=`: its pod and service networks, for reverse lookups.
    pub(crate) networks: Vec<IpNet>,
    /// `namespaces=`: namespaces that live in this cluster only, each once.
    pub(crate) namespaces: Vec<String>,
}

/// Every error of this module is about `MESHDNS_CLUSTERS`: the offending token and why.
fn error(token: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(CLUSTERS, token, reason)
}

/// Parses the whole variable; empty entries (a trailing `;`) are skipped. More than
/// [`MAX_CLUSTERS`] entries are refused before any is parsed.
pub(super) fn parse_clusters(value: &str) -> Result<Vec<ClusterEntry>, ConfigError> {
    let entries = || {
        value
            .split(';')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
    };
    if let Some(extra) = entries().nth(MAX_CLUSTERS) {
        let name = extra.split_once('=').map_or(extra, |(name, _)| name.trim());
        return Err(error(
            name,
            format!(
                "is cluster number {}: at most {MAX_CLUSTERS} clusters may be listed",
                MAX_CLUSTERS + 1
            ),
        ));
    }
    entries().map(parse_entry).collect()
}

fn parse_entry(entry: &str) -> Result<ClusterEntry, ConfigError> {
    let (name, rest) = entry.split_once('=').ok_or_else(|| {
        error(
            entry,
            "needs the form NAME=ENDPOINT[,ENDPOINT…] [option=value…]",
        )
    })?;
    let name = name.trim();
    check_cluster_name(name).map_err(|reason| error(name, reason))?;
    let mut parsed = ClusterEntry {
        name: name.to_string(),
        ..ClusterEntry::default()
    };
    for token in tokens(rest) {
        match token.split_once('=') {
            Some((key, value)) => apply_option(&mut parsed, &token, key, value)?,
            None => {
                for endpoint in token.split(',').filter(|e| !e.is_empty()) {
                    let parsed_endpoint =
                        parse_endpoint(endpoint).map_err(|reason| error(endpoint, reason))?;
                    parsed.endpoints.push(parsed_endpoint);
                }
            }
        }
    }
    Ok(parsed)
}

/// `IP`, `IP:PORT`, `[IPv6]`, `[IPv6]:PORT`, `HOST` or `HOST:PORT`.
fn parse_endpoint(token: &str) -> Result<EndpointToken, String> {
    if let Some((ip, port)) = parse_ip_port(token) {
        return Ok(EndpointToken::Ip(ip, port));
    }
    if let Some(hint) = super::hint::missing_port(token) {
        return Err(hint);
    }
    let (host, port) = match token.rsplit_once(':') {
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| "has a port outside 1..=65535".to_string())?;
            (host, Some(port))
        }
        None => (token, None),
    };
    let host = parse_host_name(host).map_err(|reason| {
        format!(
            "is not an endpoint (IP, IP:PORT, [IPv6]:PORT, HOST or HOST:PORT): the host {reason}"
        )
    })?;
    Ok(EndpointToken::Host(host, port))
}

/// Splits on whitespace after gluing `a , b` and `key = value` back together.
fn tokens(rest: &str) -> Vec<String> {
    let mut glued = String::with_capacity(rest.len());
    for word in rest.split_whitespace() {
        let joins = glued.ends_with([',', '=']) || word.starts_with([',', '=']);
        if !glued.is_empty() && !joins {
            glued.push(' ');
        }
        glued.push_str(word);
    }
    glued
        .split(' ')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

fn apply_option(
    entry: &mut ClusterEntry,
    token: &str,
    key: &str,
    value: &str,
) -> Result<(), ConfigError> {
    match key {
        "domain" => {
            entry.domain =
                Some(parse_zone(value).map_err(|reason| error(token, format!("domain {reason}")))?)
        }
        "prefix" => {
            let valid = !value.is_empty()
                && value.len() < 63
                && value
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !valid {
                return Err(error(
                    token,
                    "prefix must be 1 to 62 characters of a-z, 0-9 and '-'",
                ));
            }
            entry.prefix = Some(value.to_string());
        }
        "transport" => {
            entry.transport = Some(match value {
                "udp" => Transport::Udp,
                "tcp" => Transport::Tcp,
                "tls" => Transport::Tls,
                _ => return Err(error(token, "transport must be udp, tcp or tls")),
            })
        }
        "tls_name" => {
            entry.tls_name = Some(
                parse_host_name(value)
                    .map_err(|reason| error(token, format!("tls_name {reason}")))?,
            )
        }
        "cidr" => {
            let networks = items(
                token,
                value,
                "names no network (e.g. cidr=10.9.0.0/16,fd00:9::/56)",
            )?;
            for network in networks {
                entry
                    .networks
                    .push(parse_network(network).map_err(|reason| error(network, reason))?);
            }
        }
        "namespaces" => {
            let namespaces = items(
                token,
                value,
                "names no namespace (e.g. namespaces=crdb-eu,crdb-eu-2)",
            )?;
            for namespace in namespaces {
                check_cluster_name(namespace).map_err(|_| {
                    error(
                        namespace,
                        "is not a namespace name (a DNS label: a-z, 0-9 and '-', at most 63 characters)",
                    )
                })?;
                if !entry.namespaces.iter().any(|n| n == namespace) {
                    entry.namespaces.push(namespace.to_string());
                }
            }
        }
        _ => return Err(unknown_option(entry, token, key, value)),
    }
    Ok(())
}

/// The options a cluster entry takes.
const OPTIONS: [&str; 6] = [
    "domain",
    "prefix",
    "transport",
    "tls_name",
    "cidr",
    "namespaces",
];

/// Why `key=value` is no option of `entry`: two clusters joined by `,` instead of `;`
/// (`a=10.8.0.1,b=10.9.0.1` reads as endpoint `10.8.0.1` and option `b`), or a typo of an
/// option, named with the option meant.
fn unknown_option(entry: &ClusterEntry, token: &str, key: &str, value: &str) -> ConfigError {
    if let Some((endpoints, next)) = key.rsplit_once(',')
        && check_cluster_name(next.trim()).is_ok()
    {
        return error(
            token,
            format!(
                "joins two clusters with ',': separate clusters with ';' ({}={endpoints}; {}={value})",
                entry.name,
                next.trim()
            ),
        );
    }
    let known = OPTIONS.join(", ");
    let reason = match super::hint::closest(key, OPTIONS) {
        Some(meant) => format!(
            "is no option of cluster {}: did you mean {meant}={value}? (options: {known})",
            entry.name
        ),
        None => format!("is no option of cluster {} (options: {known})", entry.name),
    };
    error(token, reason)
}

/// The items of a comma list option; an empty list is an error (`why`): an option written
/// without a value is a template whose variable was not filled, not a wish for nothing.
fn items<'a>(token: &str, value: &'a str, why: &str) -> Result<Vec<&'a str>, ConfigError> {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .collect();
    if items.is_empty() {
        return Err(error(token, why));
    }
    Ok(items)
}

/// A network in CIDR notation with its host part zero (`10.9.0.0/16`, `fd00:9::/56`): a bare
/// address, or one with host bits set, is refused with the network that was probably meant.
fn parse_network(token: &str) -> Result<IpNet, String> {
    let network = token.parse::<IpNet>().map_err(|_| {
        "is not a network in CIDR notation (e.g. 10.9.0.0/16 or fd00:9::/56)".to_string()
    })?;
    if network.prefix_len() == 0 {
        return Err("claims every address of its family; name the cluster's own networks".into());
    }
    if network.trunc() != network {
        return Err(format!(
            "has bits set after the prefix length: did you mean {}?",
            network.trunc()
        ));
    }
    Ok(network)
}

/// The zones `<ns>.svc.<local domain>.` of an entry's namespaces. Their names are asked of the
/// cluster verbatim, so it must share the local cluster domain: its DNS answers only its own.
pub(super) fn namespace_zones(
    entry: &ClusterEntry,
    domain: &Name,
    local_domain: &Name,
) -> Result<Vec<Name>, ConfigError> {
    let Some(first) = entry.namespaces.first() else {
        return Ok(Vec::new());
    };
    if domain != local_domain {
        return Err(error(
            &format!("namespaces={first}"),
            format!(
                "needs cluster {} to share the local cluster domain {} (its domain is {}): its names are asked verbatim",
                entry.name,
                local_domain.to_ascii(),
                domain.to_ascii()
            ),
        ));
    }
    entry
        .namespaces
        .iter()
        .map(|namespace| {
            Name::from_ascii(namespace)
                .and_then(|label| label.append_domain(&local_domain.prepend_label("svc")?))
                .map_err(|e| error(namespace, format!("makes no valid zone: {e}")))
        })
        .collect()
}

/// Refuses claims that two clusters share: a network overlapping another cluster's (a reverse
/// name would have two owners) and a namespace claimed twice (its names would have two homes).
/// The local cluster's claims count too: its addresses and namespaces stay with kube-dns, and
/// a peer claiming them would take them away.
pub(super) fn check_claims(clusters: &[Cluster]) -> Result<(), ConfigError> {
    for (i, a) in clusters.iter().enumerate() {
        for b in &clusters[..i] {
            for network in &a.networks {
                if let Some(other) = b
                    .networks
                    .iter()
                    .find(|o| o.contains(network) || network.contains(*o))
                {
                    return Err(error(
                        &format!("cidr={network}"),
                        format!(
                            "of cluster {} overlaps {other} of cluster {}: a reverse name would have two owners; give each cluster its own networks",
                            a.name, b.name
                        ),
                    ));
                }
            }
            if let Some(zone) = a.namespaces.iter().find(|z| b.namespaces.contains(z)) {
                let namespace = zone
                    .iter()
                    .next()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                return Err(error(
                    &format!("namespaces={namespace}"),
                    format!(
                        "is claimed by both {} and {}: a namespace lives in one cluster",
                        b.name, a.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses prefixes that nest: with `prod-` and `prod-db-`, the target `prod-db-0.db…` is
/// prod's `db-0` and prod-db's `0` alike, and routing would give it to prod-db whoever wrote
/// it (the longest prefix wins). Equal prefixes are the plainest case of it.
pub(super) fn check_prefixes(clusters: &[Cluster]) -> Result<(), ConfigError> {
    // Sorted, a prefix comes right before the prefixes that start with it.
    let mut sorted: Vec<&Cluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.prefix.cmp(&b.prefix));
    for pair in sorted.windows(2) {
        let [short, long] = pair else { continue };
        if short.prefix == long.prefix {
            return Err(error(
                &format!("prefix={}", long.prefix),
                format!(
                    "is the prefix of both {} and {}: give one of them its own prefix=",
                    short.name, long.name
                ),
            ));
        }
        if long.prefix.starts_with(&short.prefix) {
            return Err(error(
                &format!("prefix={}", long.prefix),
                format!(
                    "of cluster {} starts with prefix={} of cluster {}: a target {}0.… would be {}'s {}0 and {}'s 0 alike; give one of them a prefix= that does not start the other's (e.g. {}=… prefix={})",
                    long.name,
                    short.prefix,
                    short.name,
                    long.prefix,
                    short.name,
                    &long.prefix[short.prefix.len()..],
                    long.name,
                    long.name,
                    distinct_prefix(long, &sorted),
                ),
            ));
        }
    }
    Ok(())
}

/// A prefix for `cluster` that no other cluster's prefix nests with: its name without dashes
/// and a dash, or that with a number, for the suggestion of [`check_prefixes`].
fn distinct_prefix(cluster: &Cluster, clusters: &[&Cluster]) -> String {
    let base: String = cluster.name.chars().filter(|c| *c != '-').collect();
    let nests = |candidate: &str| {
        clusters.iter().any(|c| {
            c.name != cluster.name
                && (c.prefix.starts_with(candidate) || candidate.starts_with(c.prefix.as_str()))
        })
    };
    std::iter::once(format!("{base}-"))
        .chain((2..).map(|n| format!("{base}{n}-")))
        .find(|candidate| !nests(candidate))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_design_example_parses() {
        let entries = parse_clusters(
            "a=10.8.0.1:30053,10.8.0.2:30053; b=10.9.0.1:30053 prefix=west- transport=tcp",
        )
        .unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name, "a");
        assert_eq!(entries[0].endpoints.len(), 2);
        assert_eq!(entries[0].prefix, None);
        assert_eq!(entries[1].prefix.as_deref(), Some("west-"));
        assert_eq!(entries[1].transport, Some(Transport::Tcp));
    }

    #[test]
    fn whitespace_around_tokens_is_ignored() {
        let entries =
            parse_clusters("\n a = 10.8.0.1 , [fd00::1]:30053  domain = b.example ;\n b=10.9.0.1;")
                .unwrap();
        let shown = |e: &EndpointToken| e.with_default_port(53).to_string();
        assert_eq!(shown(&entries[0].endpoints[0]), "10.8.0.1:53");
        assert_eq!(shown(&entries[0].endpoints[1]), "[fd00::1]:30053");
        assert_eq!(entries[0].domain.as_ref().unwrap().to_ascii(), "b.example.");
        assert_eq!(entries[1].name, "b");
    }

    #[test]
    fn endpoints_may_be_host_names_and_tls_defaults_to_853() {
        let entries = parse_clusters(
            "b=dns-b.example.net:30053,10.9.0.2; c=DNS-C.example.net transport=tls tls_name=dns.c.example",
        )
        .unwrap();
        let b: Vec<String> = entries[0]
            .endpoints
            .iter()
            .map(|e| e.with_default_port(53).to_string())
            .collect();
        assert_eq!(b, ["dns-b.example.net:30053", "10.9.0.2:53"]);
        let c = entries[1].endpoints[0].with_default_port(Transport::Tls.default_port());
        assert_eq!(c.to_string(), "dns-c.example.net:853");
        assert_eq!(entries[1].transport, Some(Transport::Tls));
        assert_eq!(
            entries[1].tls_name.as_ref().unwrap().to_ascii(),
            "dns.c.example."
        );
    }

    #[test]
    fn an_entry_may_have_no_endpoints() {
        let entries = parse_clusters("a= prefix=x-").unwrap();
        assert!(entries[0].endpoints.is_empty());
    }

    #[test]
    fn bad_tokens_are_named() {
        let cases = [
            ("a", "a"),
            ("A=10.0.0.1", "A"),
            ("a=10.0.0.300", "10.0.0.300"),
            ("a=10.0.0.1 colour=red", "colour=red"),
            ("a=10.0.0.1 transport=quic", "transport=quic"),
            ("a=dns-b.example.net:99999", "dns-b.example.net:99999"),
            ("a=bad_host!:53", "bad_host!:53"),
            ("a=10.0.0.1 tls_name=a..b", "tls_name=a..b"),
            ("a=10.0.0.1 prefix=Bad_", "prefix=Bad_"),
            ("a=10.0.0.1 domain=a..b", "domain=a..b"),
            ("a=10.0.0.1 cidr=", "cidr="),
            ("a=10.0.0.1 cidr=10.9.0.0", "10.9.0.0"),
            ("a=10.0.0.1 cidr=10.9.0.0/16,nope/8", "nope/8"),
            ("a=10.0.0.1 cidr=10.9.0.0/33", "10.9.0.0/33"),
            ("a=10.0.0.1 cidr=10.9.1.0/16", "10.9.1.0/16"),
            ("a=10.0.0.1 cidr=0.0.0.0/0", "0.0.0.0/0"),
            ("a=10.0.0.1 namespaces=", "namespaces="),
            ("a=10.0.0.1 namespaces= , ", "namespaces=,"),
            ("a=10.0.0.1 namespaces=crdb-eu,CRDB_EU", "CRDB_EU"),
            ("a=10.0.0.1 namespaces=-eu", "-eu"),
        ];
        for (value, token) in cases {
            assert_eq!(parse_clusters(value).unwrap_err().token, token, "{value}");
        }
    }

    #[test]
    fn networks_and_namespaces_parse_as_lists() {
        let entries = parse_clusters(
            "b=10.9.0.1 cidr=10.9.0.0/16, fd00:9::/56 namespaces=crdb-eu,crdb-eu-2,crdb-eu",
        )
        .unwrap();
        let networks: Vec<String> = entries[0].networks.iter().map(|n| n.to_string()).collect();
        assert_eq!(networks, ["10.9.0.0/16", "fd00:9::/56"]);
        assert_eq!(entries[0].namespaces, ["crdb-eu", "crdb-eu-2"]);
    }

    #[test]
    fn a_network_with_host_bits_set_suggests_the_network_meant() {
        let error = parse_clusters("b=10.9.0.1 cidr=10.9.1.0/16").unwrap_err();
        assert!(
            error.reason.contains("did you mean 10.9.0.0/16?"),
            "{}",
            error.reason
        );
    }

    mod claims {
        use crate::config::tests::{refused, with_local};
        use crate::config::{Config, Errors};

        /// The configuration of `clusters`, with `a` the local cluster.
        fn with_local_a(clusters: &str) -> Result<Config, Errors> {
            with_local("a", clusters, &[])
        }

        #[test]
        fn overlapping_networks_of_two_clusters_are_refused_naming_both() {
            refused(
                with_local_a(
                    "a= cidr=10.8.0.0/16; b=10.9.0.1 cidr=10.9.0.0/16; c=10.10.0.1 cidr=10.9.128.0/17",
                ),
                ("MESHDNS_CLUSTERS", "cidr=10.9.128.0/17"),
                &["of cluster c overlaps 10.9.0.0/16 of cluster b"],
            );
            refused(
                with_local_a("a= cidr=fd00::/8; b=10.9.0.1 cidr=fd00:9::/56"),
                ("MESHDNS_CLUSTERS", "cidr=fd00:9::/56"),
                &["of cluster b overlaps fd00::/8 of cluster a"],
            );
        }

        #[test]
        fn nested_networks_of_one_cluster_are_its_own_business() {
            let config = with_local_a(
                "a=; b=10.9.0.1 cidr=10.9.0.0/16,10.9.1.0/24; c=10.10.0.1 cidr=10.10.0.0/16",
            )
            .unwrap();
            assert_eq!(config.clusters[1].networks.len(), 2);
        }

        #[test]
        fn a_namespace_claimed_by_two_clusters_is_refused() {
            refused(
                with_local_a(
                    "a=; b=10.9.0.1 namespaces=crdb-eu; c=10.10.0.1 namespaces=crdb-us,crdb-eu",
                ),
                ("MESHDNS_CLUSTERS", "namespaces=crdb-eu"),
                &["is claimed by both b and c"],
            );
            // The local cluster's claim counts: its namespaces stay with kube-dns.
            refused(
                with_local_a("a= namespaces=crdb-us; b=10.9.0.1 namespaces=crdb-us"),
                ("MESHDNS_CLUSTERS", "namespaces=crdb-us"),
                &["is claimed by both a and b"],
            );
        }

        #[test]
        fn namespace_zones_lie_under_the_local_cluster_domain() {
            let config = with_local_a(
                "a= domain=a.example namespaces=crdb-us; b=10.9.0.1 domain=a.example namespaces=crdb-eu",
            )
            .unwrap();
            let zones: Vec<String> = config
                .clusters
                .iter()
                .flat_map(|c| c.namespaces.iter().map(|z| z.to_ascii()))
                .collect();
            assert_eq!(zones, ["crdb-us.svc.a.example.", "crdb-eu.svc.a.example."]);
        }

        #[test]
        fn a_namespace_route_to_a_cluster_of_another_domain_is_refused() {
            refused(
                with_local_a("a=; b=10.9.0.1 domain=b.example namespaces=crdb-eu"),
                ("MESHDNS_CLUSTERS", "namespaces=crdb-eu"),
                &["needs cluster b to share the local cluster domain cluster.local."],
            );
        }
    }
}
