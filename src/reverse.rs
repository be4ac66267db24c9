//! Reverse lookups across clusters: which peer a reverse name (`4.1.9.10.in-addr.arpa`,
//! `….ip6.arpa`) belongs to, from the networks each cluster claims with `cidr=`.
//!
//! The router asks this module on every query it routes, the cache-hit path included, so it
//! reads the question name in wire form and costs nothing for other names: a table without
//! networks answers at once, and a name that does not end in `in-addr.arpa`/`ip6.arpa` is
//! refused after one comparison of its last bytes. Only the reverse name of one whole address
//! (four decimal labels, or 32 hex nibbles) is a peer's; a reverse name of a network
//! (`9.10.in-addr.arpa`, fewer labels) or of a classless delegation (`0/25.1.9.10…`) is no
//! address and passes through to kube-dns. The exchange itself is the cluster zone's, with the
//! question sent as asked ([`Peer::ask_verbatim`](crate::rewrite::Peer::ask_verbatim)).
//!
//! It owns the reading of reverse names and their match against the claimed networks
//! ([`Networks`]); the networks themselves are the clusters' `cidr=` claims, checked by the
//! configuration.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// `in-addr.arpa.` in wire form.
const IN_ADDR_ARPA: &[u8] = b"\x07in-addr\x04arpa\x00";

/// `ip6.arpa.` in wire form.
const IP6_ARPA: &[u8] = b"\x03ip6\x04arpa\x00";

/// Networks, longest prefix first, each with what the reverse names of its addresses go to
/// (the router's: the route to the cluster that claims it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Networks<T> {
    networks: Vec<(IpNet, T)>,
}

impl<T> Networks<T> {
    pub(crate) fn new(networks: impl IntoIterator<Item = (IpNet, T)>) -> Self {
        let mut networks: Vec<(IpNet, T)> = networks.into_iter().collect();
        // Validation keeps two clusters' networks apart, so only one cluster's nested networks
        // can both match; longest first keeps the rule exact all the same.
        networks.sort_by_key(|(net, _)| std::cmp::Reverse(net.prefix_len()));
        Self { networks }
    }

    /// Every network with what its reverse names go to, longest prefix first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(IpNet, T)> {
        self.networks.iter()
    }

    /// What the network holding the address that `name` (wire form) is the reverse name of
    /// goes to; `None` for every other name.
    pub(crate) fn find(&self, name: &[u8]) -> Option<&T> {
        if self.networks.is_empty() {
            return None;
        }
        let address = address_of(name)?;
        self.networks
            .iter()
            .find(|(net, _)| net.contains(&address))
            .map(|(_, target)| target)
    }
}

/// The address whose reverse name `name` (plain wire form, any case) is: `d.c.b.a.in-addr.arpa`
/// with canonical decimal labels, or 32 single-nibble labels under `ip6.arpa`.
pub(crate) fn address_of(name: &[u8]) -> Option<IpAddr> {
    let (labels, zone) = name.split_at_checked(name.len().checked_sub(IN_ADDR_ARPA.len())?)?;
    if zone.eq_ignore_ascii_case(IN_ADDR_ARPA) {
        return ipv4_of(labels).map(IpAddr::V4);
    }
    let (labels, zone) = name.split_at_checked(name.len().checked_sub(IP6_ARPA.len())?)?;
    if zone.eq_ignore_ascii_case(IP6_ARPA) {
        return ipv6_of(labels).map(IpAddr::V6);
    }
    None
}

/// Four labels of decimal 0..=255 without leading zeros, lowest octet first.
fn ipv4_of(mut labels: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    for octet in octets.iter_mut().rev() {
        let (&len, rest) = labels.split_first()?;
        let (digits, rest) = rest.split_at_checked(usize::from(len))?;
        let canonical = matches!(digits, [b'0'] | [b'1'..=b'9', ..]);
        if !canonical || digits.len() > 3 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *octet = std::str::from_utf8(digits).ok()?.parse().ok()?;
        labels = rest;
    }
    labels.is_empty().then(|| Ipv4Addr::from(octets))
}

/// 32 labels of one hex digit each, lowest nibble first.
fn ipv6_of(labels: &[u8]) -> Option<Ipv6Addr> {
    if labels.len() != 64 {
        return None;
    }
    let mut address = 0u128;
    for pair in labels.chunks_exact(2).rev() {
        let [1, digit] = pair else {
            return None;
        };
        let nibble = char::from(*digit).to_digit(16)?;
        address = (address << 4) | u128::from(nibble);
    }
    Some(Ipv6Addr::from(address))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `name` (dotted, ending in the root) in wire form, labels taken as they are written.
    fn wire(name: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for label in name.split('.').filter(|l| !l.is_empty()) {
            out.push(u8::try_from(label.len()).unwrap());
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
        out
    }

    fn address(name: &str) -> Option<IpAddr> {
        address_of(&wire(name))
    }

    #[test]
    fn reverse_names_of_whole_addresses_give_the_address() {
        assert_eq!(
            address("4.1.9.10.in-addr.arpa."),
            Some("10.9.1.4".parse().unwrap())
        );
        assert_eq!(
            address("0.255.9.10.IN-ADDR.Arpa."),
            Some("10.9.255.0".parse().unwrap())
        );
        let v6 = "fd00:9::1:4".parse::<Ipv6Addr>().unwrap();
        let nibbles: String = format!("{:032x}", u128::from(v6))
            .chars()
            .rev()
            .map(|c| format!("{c}."))
            .collect();
        assert_eq!(
            address(&format!("{nibbles}ip6.arpa.")),
            Some(IpAddr::V6(v6))
        );
        assert_eq!(
            address(&format!("{}IP6.ARPA.", nibbles.to_uppercase())),
            Some(IpAddr::V6(v6))
        );
    }

    #[test]
    fn reverse_names_of_networks_and_odd_spellings_are_no_address() {
        for name in [
            "9.10.in-addr.arpa.",
            "1.9.10.in-addr.arpa.",
            "5.4.1.9.10.in-addr.arpa.",
            "04.1.9.10.in-addr.arpa.",
            "256.1.9.10.in-addr.arpa.",
            "x.1.9.10.in-addr.arpa.",
            "0/25.1.9.10.in-addr.arpa.",
            "in-addr.arpa.",
            "4.1.9.10.in-addr.arpa.example.",
            "4.1.9.10.xin-addr.arpa.",
            "1.0.0.d.f.ip6.arpa.",
            "mongo-4.mongo.db.svc.cluster.local.",
            ".",
        ] {
            assert_eq!(address(name), None, "{name}");
        }
        let long_nibble = format!("{}10.ip6.arpa.", "0.".repeat(31));
        assert_eq!(address(&long_nibble), None);
        let not_hex = format!("{}g.ip6.arpa.", "0.".repeat(31));
        assert_eq!(address(&not_hex), None);
        // The zone's bytes inside a label are not the zone.
        let mut tricky = b"\x011\x011\x011\x011\x0d".to_vec();
        tricky.extend_from_slice(IN_ADDR_ARPA);
        assert_eq!(address_of(&tricky), None);
    }

    #[test]
    fn the_longest_prefix_wins() {
        let net = |text: &str| text.parse::<IpNet>().unwrap();
        let networks = Networks::new([
            (net("10.9.0.0/16"), "b"),
            (net("fd00:9::/56"), "b"),
            (net("10.10.0.0/16"), "c"),
            (net("10.10.7.0/25"), "c-nested"),
        ]);
        let cluster = |name: &str| networks.find(&wire(name)).copied();
        assert_eq!(cluster("4.1.9.10.in-addr.arpa."), Some("b"));
        assert_eq!(cluster("4.7.10.10.in-addr.arpa."), Some("c-nested"));
        assert_eq!(cluster("200.7.10.10.in-addr.arpa."), Some("c"));
        assert_eq!(cluster("4.1.1.10.in-addr.arpa."), None);
        let in_b = format!("{}0.0.0.0.0.0.9.0.0.0.0.0.d.f.ip6.arpa.", "1.".repeat(18));
        assert_eq!(cluster(&in_b), Some("b"));
        assert_eq!(
            networks.networks.first().map(|(n, _)| n.prefix_len()),
            Some(56)
        );
    }
}
