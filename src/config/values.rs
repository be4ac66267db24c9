//! Parsers for the small value types that environment variables carry: durations, socket
//! addresses with a default port, networks in CIDR notation and DNS zone names.
//!
//! Each parser returns a plain `String` reason on failure; the caller (a
//! [`Kind`](super::kind::Kind)'s parse, the clusters grammar, the parent's cluster zones) wraps
//! it with the variable name and the offending token so the operator sees one precise line.
//! It owns the syntax of these types only and knows no variable: a duration's bound and an
//! address's default port are the caller's.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::rr::Name;

/// The DNS port, used when an endpoint or listen address names no port.
pub(super) const DNS_PORT: u16 = 53;

/// `500ms`, `1.5s`, `2s`, `5m`, `1h`, or `0`, at most `max` (a value beyond it cannot be meant,
/// and unbounded ones overflow the clock). Whole or decimal numbers; a bare number without a
/// unit is refused (`2` could be seconds or milliseconds).
pub(super) fn parse_duration(token: &str, max: Duration) -> Result<Duration, String> {
    if token == "0" {
        return Ok(Duration::ZERO);
    }
    let split = token
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| "needs a unit: ms, s, m or h (e.g. 500ms, 1.5s)".to_string())?;
    let (number, unit) = token.split_at(split);
    let well_formed = !number.is_empty()
        && !number.starts_with('.')
        && !number.ends_with('.')
        && number.matches('.').count() <= 1;
    let value: f64 = number
        .parse()
        .ok()
        .filter(|_| well_formed)
        .ok_or_else(|| "is not a duration (e.g. 500ms, 1.5s, 5m, 1h)".to_string())?;
    let seconds_per_unit = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("has unknown unit {unit:?}: use ms, s, m or h")),
    };
    let seconds = value * seconds_per_unit;
    if seconds > max.as_secs_f64() {
        return Err(format!(
            "is longer than the maximum, {}",
            show_duration(max)
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A duration as an operator writes it: `500ms`, `2s`, `1.5s`, `5m`, `1h`.
pub(crate) fn show_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        "0".to_string()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms >= 1000 {
        format!("{}s", duration.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}

/// `IP`, `IP:PORT`, `[IPv6]` or `[IPv6]:PORT`: the address, and its port when one is written.
pub(super) fn parse_ip_port(token: &str) -> Option<(IpAddr, Option<u16>)> {
    if let Ok(addr) = token.parse::<SocketAddr>() {
        return Some((addr.ip(), Some(addr.port())));
    }
    let bare = token
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(token);
    bare.parse().ok().map(|ip| (ip, None))
}

/// [`parse_ip_port`], the port defaulting to `default_port`.
pub(super) fn parse_socket_addr(token: &str, default_port: u16) -> Result<SocketAddr, String> {
    let (ip, port) = parse_ip_port(token).ok_or_else(|| {
        super::hint::missing_port(token)
            .unwrap_or_else(|| "is not an address (IP, IP:PORT or [IPv6]:PORT)".to_string())
    })?;
    Ok(SocketAddr::new(ip, port.unwrap_or(default_port)))
}

/// A network in CIDR notation, the only access-control unit of `MESHDNS_ALLOW_FROM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpNet {
    net: ipnet::IpNet,
    /// The network as [`contains`](Self::contains) compares it, the check every datagram
    /// pays: its family, its address bits and its mask (IPv4 in the low 32 bits), so a
    /// source takes one mask and one compare.
    v4: bool,
    bits: u128,
    mask: u128,
}

impl IpNet {
    /// `10.0.0.0/8`, `::1/128`; a bare address is a host network.
    pub(crate) fn parse(token: &str) -> Result<Self, String> {
        let error = || "is not a network (e.g. 10.0.0.0/8 or fd00::/8)".to_string();
        match token.parse::<ipnet::IpNet>() {
            Ok(net) => Ok(Self::new(net)),
            Err(_) if token.contains('/') => {
                let (addr, _) = token.split_once('/').unwrap_or_default();
                let max = if addr.contains(':') { 128 } else { 32 };
                Err(if addr.parse::<IpAddr>().is_ok() {
                    format!("has a prefix length outside 0..={max}")
                } else {
                    error()
                })
            }
            Err(_) => token
                .parse::<IpAddr>()
                .map(|ip| Self::new(ipnet::IpNet::from(ip)))
                .map_err(|_| error()),
        }
    }

    fn new(net: ipnet::IpNet) -> Self {
        let (v4, bits, mask) = match net {
            ipnet::IpNet::V4(v4) => (
                true,
                u32::from(v4.network()).into(),
                u32::from(v4.netmask()).into(),
            ),
            ipnet::IpNet::V6(v6) => (false, v6.network().into(), v6.netmask().into()),
        };
        Self {
            net,
            v4,
            bits,
            mask,
        }
    }

    /// Whether `ip` lies in this network. IPv4-mapped IPv6 sources (from a dual-stack socket)
    /// are compared as the IPv4 address they carry.
    pub(crate) fn contains(&self, ip: &IpAddr) -> bool {
        let (v4, bits) = match ip {
            IpAddr::V4(v4) => (true, u32::from(*v4).into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => (true, u32::from(v4).into()),
                None => (false, u128::from(*v6)),
            },
        };
        v4 == self.v4 && bits & self.mask == self.bits
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.net.fmt(f)
    }
}

/// A zone or domain name: made fully qualified, stored lowercased (zones are matched
/// case-insensitively anyway; lowercase keeps `--check` output and logs tidy).
pub(super) fn parse_zone(token: &str) -> Result<Name, String> {
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

/// A host name (an endpoint's, or the name a TLS certificate must carry): labels of letters,
/// digits and '-', fully qualified and lowercased.
pub(super) fn parse_host_name(token: &str) -> Result<Name, String> {
    let trimmed = token.trim_end_matches('.');
    let valid = !trimmed.is_empty()
        && trimmed.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !valid {
        return Err("is not a host name (letters, digits and '-' in dot-separated labels)".into());
    }
    // A numeric last label is a mistyped address (`10.0.0.300`), never a real top-level domain.
    if trimmed
        .rsplit('.')
        .next()
        .is_some_and(|label| label.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("looks like an address but is not one".into());
    }
    let mut name = Name::from_ascii(trimmed).map_err(|e| format!("is not a host name: {e}"))?;
    name.set_fqdn(true);
    Ok(name.to_lowercase())
}

/// One lowercase DNS label as Kubernetes names use them (RFC 1123): `[a-z0-9-]`, at most 63
/// characters, no '-' at either end.
pub(super) fn is_dns_label(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= 63
        && token
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !token.starts_with('-')
        && !token.ends_with('-')
}

/// A cluster name: one DNS label of `[a-z0-9-]`, at most 63 characters, so that it can stand
/// in a zone name (`cluster.NAME`), a prefix (`NAME-`) and a metric label.
pub(super) fn check_cluster_name(token: &str) -> Result<(), String> {
    if is_dns_label(token) {
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
    fn durations_take_the_documented_units_and_decimals() {
        let max = Duration::from_secs(86_400);
        assert_eq!(parse_duration("500ms", max), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s", max), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s", max), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m", max), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h", max), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0", max), Ok(Duration::ZERO));
        for bad in ["", "2", "2x", "s", ".5s", "5.s", "1.2.3s", "-1s", "1e3s"] {
            assert!(parse_duration(bad, max).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_beyond_their_maximum_are_refused() {
        let max = Duration::from_secs(60);
        assert!(parse_duration("60s", max).is_ok());
        let error = parse_duration("61s", max).unwrap_err();
        assert!(error.contains("1m"), "{error}");
        assert!(parse_duration("5124095576030431h", max).is_err());
        assert!(parse_duration("99999999999999999999h", max).is_err());
    }

    #[test]
    fn durations_are_shown_as_written() {
        for (ms, shown) in [
            (500, "500ms"),
            (2000, "2s"),
            (1500, "1.5s"),
            (300_000, "5m"),
            (3_600_000, "1h"),
        ] {
            assert_eq!(show_duration(Duration::from_millis(ms)), shown);
        }
    }

    #[test]
    fn socket_addresses_default_their_port() {
        for (text, shown) in [
            ("10.0.0.1", "10.0.0.1:53"),
            ("10.0.0.1:5353", "10.0.0.1:5353"),
            ("[fd00::1]", "[fd00::1]:53"),
            ("fd00::1", "[fd00::1]:53"),
            ("[fd00::1]:30053", "[fd00::1]:30053"),
        ] {
            assert_eq!(parse_socket_addr(text, 53).unwrap().to_string(), shown);
        }
        assert!(parse_socket_addr("kube-dns", 53).is_err());
        assert!(parse_socket_addr("10.0.0.1:99999", 53).is_err());
    }

    #[test]
    fn networks_contain_what_their_prefix_says() {
        let loopback = IpNet::parse("127.0.0.0/8").unwrap();
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert!(loopback.contains(&ip("127.9.9.9")));
        assert!(loopback.contains(&ip("::ffff:127.0.0.1")));
        assert!(!loopback.contains(&ip("10.0.0.1")));
        assert!(
            !loopback.contains(&ip("::7f00:1")),
            "an IPv6 address, not a mapped one"
        );
        let all_v6 = IpNet::parse("::/0").unwrap();
        assert!(all_v6.contains(&ip("fd00::1")) && !all_v6.contains(&ip("127.0.0.1")));
        assert!(
            !all_v6.contains(&ip("::ffff:127.0.0.1")),
            "compared as IPv4"
        );
        assert!(IpNet::parse("0.0.0.0/0").unwrap().contains(&ip("8.8.8.8")));
        assert!(IpNet::parse("::1").unwrap().contains(&ip("::1")));
        assert!(!IpNet::parse("::1/128").unwrap().contains(&ip("::2")));
        assert!(
            IpNet::parse("10.0.0.0/40")
                .unwrap_err()
                .contains("prefix length")
        );
        for bad in ["10.0.0.0/33", "fd00::/129", "nope", "10.0.0.0/x"] {
            assert!(IpNet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zones_are_fqdn_and_lowercase() {
        for (text, zone) in [
            ("Distributed.LOCAL", "distributed.local."),
            ("cluster.local.", "cluster.local."),
        ] {
            assert_eq!(parse_zone(text).unwrap().to_ascii(), zone);
        }
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
