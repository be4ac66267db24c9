//! The `MESHDNS_CLUSTERS` grammar: `NAME=ENDPOINT[,ENDPOINT…] [domain=…] [prefix=…]
//! [transport=udp|tcp]` entries separated by `;`.
//!
//! Whitespace around tokens, commas and `=` is ignored, so a ConfigMap may spread the list over
//! several lines. An entry may name no endpoints only when it is the local cluster (whose
//! queries go to `MESHDNS_UPSTREAMS`); that check belongs to the caller, which knows the local
//! cluster.

use std::net::SocketAddr;

use hickory_proto::rr::Name;

use super::values::{DNS_PORT, check_cluster_name, parse_socket_addr, parse_zone};

/// How a cluster's DNS is asked. `Udp` falls back to TCP when a reply is truncated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        })
    }
}

/// One entry of `MESHDNS_CLUSTERS`, options not yet defaulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEntry {
    pub name: String,
    pub endpoints: Vec<SocketAddr>,
    pub domain: Option<Name>,
    pub prefix: Option<String>,
    pub transport: Option<Transport>,
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

/// Parses the whole variable; empty entries (a trailing `;`) are skipped.
pub fn parse_clusters(value: &str) -> Result<Vec<ClusterEntry>, EntryError> {
    value
        .split(';')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(parse_entry)
        .collect()
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
    };
    for token in tokens(rest) {
        match token.split_once('=') {
            Some((key, value)) => apply_option(&mut parsed, &token, key, value)?,
            None => {
                for endpoint in token.split(',').filter(|e| !e.is_empty()) {
                    let addr = parse_socket_addr(endpoint, DNS_PORT)
                        .map_err(|reason| error(endpoint, reason))?;
                    parsed.endpoints.push(addr);
                }
            }
        }
    }
    Ok(parsed)
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
                _ => return Err(error(token, "transport must be udp or tcp")),
            })
        }
        _ => {
            return Err(error(
                token,
                "unknown option (known: domain, prefix, transport)",
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
        assert_eq!(entries[0].endpoints[0].to_string(), "10.8.0.1:53");
        assert_eq!(entries[0].endpoints[1].to_string(), "[fd00::1]:30053");
        assert_eq!(entries[0].domain.as_ref().unwrap().to_ascii(), "b.example.");
        assert_eq!(entries[1].name, "b");
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
            ("a=10.0.0.1 prefix=Bad_", "prefix=Bad_"),
            ("a=10.0.0.1 domain=a..b", "domain=a..b"),
        ];
        for (value, token) in cases {
            assert_eq!(parse_clusters(value).unwrap_err().token, token, "{value}");
        }
    }
}
