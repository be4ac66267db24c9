//! The `MESHDNS_CLUSTERS` grammar: `NAME=ENDPOINT[,ENDPOINT…] [domain=…] [prefix=…]
//! [transport=udp|tcp|tls] [tls_name=…]` entries separated by `;`. An endpoint is an address
//! (`10.9.0.1:30053`, `[fd00::1]:30053`) or a host name (`dns-b.example.net:30053`) that
//! meshdns resolves; the port defaults to 53, or 853 for `transport=tls`.
//!
//! Whitespace around tokens, commas and `=` is ignored, so a ConfigMap may spread the list over
//! several lines. An entry may name no endpoints only when it is the local cluster (whose
//! queries go to `MESHDNS_UPSTREAMS`); that check belongs to the caller, which knows the local
//! cluster.

use std::net::{IpAddr, SocketAddr};

use hickory_proto::rr::Name;

use super::values::{check_cluster_name, parse_host_name, parse_zone};

/// The most clusters `MESHDNS_CLUSTERS` may list. Every cluster is a leg of every gathered
/// query, so a mesh far beyond this could not answer within a query's deadline anyway; the
/// bound also keeps validation and the routing table small.
pub const MAX_CLUSTERS: usize = 256;

/// The port of DNS over TLS (RFC 7858).
pub const DOT_PORT: u16 = 853;

/// How a cluster's DNS is asked. `Udp` falls back to TCP when a reply is truncated; `Tls` is
/// DNS over TLS, with no fallback to plain DNS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    Tls,
}

impl Transport {
    /// The port an endpoint without one gets.
    pub fn default_port(self) -> u16 {
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
pub enum EndpointToken {
    Ip(IpAddr, Option<u16>),
    Host(Name, Option<u16>),
}

impl EndpointToken {
    /// The endpoint, with `default_port` when none was written.
    pub fn with_default_port(&self, default_port: u16) -> Endpoint {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEntry {
    pub name: String,
    pub endpoints: Vec<EndpointToken>,
    pub domain: Option<Name>,
    pub prefix: Option<String>,
    pub transport: Option<Transport>,
    /// The name the peer's certificate must carry (`transport=tls`).
    pub tls_name: Option<Name>,
}

/// A parse failure: the offending token and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    pub token: String,
    pub reason: String,
}

fn error(token: &str, reason: impl Into<String>) -> EntryError {
    EntryError {
        token: token.to_string(),
        reason: reason.into(),
    }
}

/// Parses the whole variable; empty entries (a trailing `;`) are skipped. More than
/// [`MAX_CLUSTERS`] entries are refused before any is parsed.
pub fn parse_clusters(value: &str) -> Result<Vec<ClusterEntry>, EntryError> {
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

fn parse_entry(entry: &str) -> Result<ClusterEntry, EntryError> {
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
        endpoints: Vec::new(),
        domain: None,
        prefix: None,
        transport: None,
        tls_name: None,
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
    if let Ok(addr) = token.parse::<SocketAddr>() {
        return Ok(EndpointToken::Ip(addr.ip(), Some(addr.port())));
    }
    let bare = token
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(token);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(EndpointToken::Ip(ip, None));
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
) -> Result<(), EntryError> {
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
        _ => {
            return Err(error(
                token,
                "unknown option (known: domain, prefix, transport, tls_name)",
            ));
        }
    }
    Ok(())
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
        ];
        for (value, token) in cases {
            assert_eq!(parse_clusters(value).unwrap_err().token, token, "{value}");
        }
    }
}
