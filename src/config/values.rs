//! Parsers for the small value types that environment variables carry: durations, socket
//! addresses with a default port, networks in CIDR notation and DNS zone names.
//!
//! Each parser returns a plain `String` reason on failure; the caller (`config::mod`) wraps it
//! with the variable name and the offending token so the operator sees one precise line.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::rr::Name;

/// The DNS port, used when an endpoint or listen address names no port.
pub const DNS_PORT: u16 = 53;

/// `500ms`, `2s`, `5m`, `1h`, or `0`. Fractions are not accepted: they are never needed here
/// and a typo like `1.5` should not silently become something else.
pub fn parse_duration(token: &str) -> Result<Duration, String> {
    if token == "0" {
        return Ok(Duration::ZERO);
    }
    let split = token
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| "needs a unit: ms, s, m or h (e.g. 500ms, 2s)".to_string())?;
    let (digits, unit) = token.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| "is not a duration (e.g. 500ms, 2s, 5m, 1h)".to_string())?;
    let seconds_per_unit = match unit {
        "ms" => return Ok(Duration::from_millis(value)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("has unknown unit {unit:?}: use ms, s, m or h")),
    };
    value
        .checked_mul(seconds_per_unit)
        .map(Duration::from_secs)
        .ok_or_else(|| "is too large".to_string())
}

/// `IP`, `IP:PORT`, `[IPv6]` or `[IPv6]:PORT`; the port defaults to `default_port`.
pub fn parse_socket_addr(token: &str, default_port: u16) -> Result<SocketAddr, String> {
    if let Ok(addr) = token.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bare = token
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(token);
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, default_port))
        .map_err(|_| "is not an address (IP, IP:PORT or [IPv6]:PORT)".to_string())
}

/// A network in CIDR notation, the only access-control unit of `MESHDNS_ALLOW_FROM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix_len: u8,
}

impl IpNet {
    /// `10.0.0.0/8`, `::1/128`; a bare address is a host network.
    pub fn parse(token: &str) -> Result<Self, String> {
        let (addr, len) = match token.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (token, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| "is not a network (e.g. 10.0.0.0/8 or fd00::/8)".to_string())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = match len {
            None => max,
            Some(len) => len
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("has a prefix length outside 0..={max}"))?,
        };
        Ok(Self { addr, prefix_len })
    }

    /// Whether `ip` lies in this network. IPv4-mapped IPv6 sources (from a dual-stack socket)
    /// are compared as the IPv4 address they carry.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// A zone or domain name: made fully qualified, stored lowercased (zones are matched
/// case-insensitively anyway; lowercase keeps `--check` output and logs tidy).
pub fn parse_zone(token: &str) -> Result<Name, String> {
    let trimmed = token.trim_end_matches('.');
    if trimmed.is_empty() {
        return Err("is empty or the root zone".to_string());
    }
    if !trimmed.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }) {
        return Err(
            "is not a domain name (letters, digits, '-' and '_' in dot-separated labels)"
                .to_string(),
        );
    }
    let mut name = Name::from_ascii(trimmed).map_err(|e| format!("is not a domain name: {e}"))?;
    name.set_fqdn(true);
    Ok(name.to_lowercase())
}

/// A cluster name: one DNS label of `[a-z0-9-]`, at most 63 characters, so that it can stand
/// in a zone name (`cluster.NAME`), a prefix (`NAME-`) and a metric label.
pub fn check_cluster_name(token: &str) -> Result<(), String> {
    let valid = !token.is_empty()
        && token.len() <= 63
        && token
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !token.starts_with('-')
        && !token.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(
            "is not a cluster name (a DNS label: a-z, 0-9 and '-', at most 63 characters)"
                .to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_documented_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "2", "2x", "s", "1.5s", "-1s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn socket_addresses_default_their_port() {
        assert_eq!(
            parse_socket_addr("10.0.0.1", 53).unwrap().to_string(),
            "10.0.0.1:53"
        );
        assert_eq!(parse_socket_addr("10.0.0.1:5353", 53).unwrap().port(), 5353);
        assert_eq!(
            parse_socket_addr("[fd00::1]", 53).unwrap().to_string(),
            "[fd00::1]:53"
        );
        assert_eq!(
            parse_socket_addr("fd00::1", 53).unwrap().to_string(),
            "[fd00::1]:53"
        );
        assert_eq!(
            parse_socket_addr("[fd00::1]:30053", 53).unwrap().port(),
            30053
        );
        assert!(parse_socket_addr("kube-dns", 53).is_err());
        assert!(parse_socket_addr("10.0.0.1:99999", 53).is_err());
    }

    #[test]
    fn networks_contain_what_their_prefix_says() {
        let loopback = IpNet::parse("127.0.0.0/8").unwrap();
        assert!(loopback.contains("127.9.9.9".parse().unwrap()));
        assert!(loopback.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!loopback.contains("10.0.0.1".parse().unwrap()));
        assert!(
            IpNet::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            IpNet::parse("::1")
                .unwrap()
                .contains("::1".parse().unwrap())
        );
        assert!(
            !IpNet::parse("::1/128")
                .unwrap()
                .contains("::2".parse().unwrap())
        );
        for bad in ["10.0.0.0/33", "fd00::/129", "nope", "10.0.0.0/x"] {
            assert!(IpNet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zones_are_fqdn_and_lowercase() {
        assert_eq!(
            parse_zone("Distributed.LOCAL").unwrap().to_ascii(),
            "distributed.local."
        );
        assert_eq!(
            parse_zone("cluster.local.").unwrap().to_ascii(),
            "cluster.local."
        );
        for bad in ["", ".", "a..b", "a b", "a/b"] {
            assert!(parse_zone(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_names_are_dns_labels() {
        assert!(check_cluster_name("eu-west-1").is_ok());
        for bad in ["", "A", "a.b", "-a", "a-", &"a".repeat(64)] {
            assert!(check_cluster_name(bad).is_err(), "{bad}");
        }
    }
}
