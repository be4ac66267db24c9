//! Endpoints that are meshdns itself. Asked, such an endpoint answers a peer's names from this
//! cluster's kube-dns (cluster a's pods under cluster b's names) or passes the query back to
//! itself: the configuration refuses one that is an own address in any spelling, and an
//! upstream group never asks a host name that resolves to one. The loop marker (the `loops`
//! module) catches what cannot be known here, such as a node address behind a wildcard listen
//! address.
//!
//! meshdns's own addresses are its listen addresses and, for a wildcard one (`0.0.0.0:53`),
//! every address of the pod on that port: loopback and the pod's IPs (`MESHDNS_POD_IP`,
//! `MESHDNS_POD_IPS`). An address is compared in its canonical form, so the IPv4-mapped
//! spelling `[::ffff:10.1.1.10]:53` is the pod's `10.1.1.10:53`.
//!
//! It owns that set and the one test of an address against it ([`is_own_address`]), which the
//! upstream group also applies to what a host name resolves to; it resolves no name itself.

use std::net::{IpAddr, SocketAddr};

use super::clusters::Endpoint;
use super::variables::{CLUSTERS, LISTEN, RESOLV_CONF, UPSTREAMS};
use super::{Cluster, ConfigError, UpstreamSource};

/// The listen addresses, and each of `pod_ips` (of the same family) on the port of a wildcard
/// listen address.
pub(super) fn own_addresses(listen: &[SocketAddr], pod_ips: &[IpAddr]) -> Vec<SocketAddr> {
    let mut own = listen.to_vec();
    for wildcard in listen.iter().filter(|l| l.ip().is_unspecified()) {
        own.extend(
            (pod_ips.iter())
                .map(|ip| ip.to_canonical())
                .filter(|ip| ip.is_ipv4() == wildcard.is_ipv4())
                .map(|ip| SocketAddr::new(ip, wildcard.port())),
        );
    }
    own
}

/// Whether `endpoint` is meshdns itself, given its own addresses (`own`, from
/// [`Config::own_addresses`](super::Config::own_addresses)): one of them in any spelling, or a loopback address on the port of a
/// wildcard one (`0.0.0.0:53` answers `127.0.0.1:53`; `[::]:53` answers `[::1]:53`, IPv6 only
/// as meshdns binds it).
pub(crate) fn is_own_address(own: &[SocketAddr], endpoint: SocketAddr) -> bool {
    let canonical = |addr: SocketAddr| SocketAddr::new(addr.ip().to_canonical(), addr.port());
    let endpoint = canonical(endpoint);
    own.iter().map(|own| canonical(*own)).any(|own| {
        own == endpoint
            || (own.port() == endpoint.port()
                && own.ip().is_unspecified()
                && own.is_ipv4() == endpoint.is_ipv4()
                && endpoint.ip().is_loopback())
    })
}

/// Refuses an upstream (`MESHDNS_UPSTREAMS`, or the resolv.conf it came from) or a peer
/// cluster's endpoint that is one of meshdns's own addresses (`own`). The local cluster's
/// entry in `MESHDNS_CLUSTERS` is not asked by this pod, so it is not looked at.
pub(super) fn check_no_own_endpoint(
    own: &[SocketAddr],
    upstreams: &[SocketAddr],
    upstream_source: &UpstreamSource,
    clusters: &[Cluster],
) -> Result<(), ConfigError> {
    let why = |addr: &SocketAddr| {
        let listen = (own.iter())
            .find(|o| is_own_address(std::slice::from_ref(o), *addr))
            .map_or(String::new(), ToString::to_string);
        format!(
            "is meshdns's own address ({listen}, from {LISTEN} and the pod's addresses) in another spelling or the same: meshdns would ask itself (a loop)"
        )
    };
    if let Some(addr) = upstreams.iter().find(|a| is_own_address(own, **a)) {
        let variable = match upstream_source {
            UpstreamSource::Environment => UPSTREAMS,
            UpstreamSource::ResolvConf(_) => RESOLV_CONF,
        };
        return Err(ConfigError::new(variable, &addr.to_string(), why(addr)));
    }
    for cluster in clusters.iter().filter(|c| !c.is_local) {
        for endpoint in &cluster.endpoints {
            if let Endpoint::Addr(addr) = endpoint
                && is_own_address(own, *addr)
            {
                return Err(ConfigError::new(
                    CLUSTERS,
                    &format!("{}={addr}", cluster.name),
                    format!(
                        "{}; cluster {}'s names would be answered from this cluster",
                        why(addr),
                        cluster.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_addresses_are_the_listen_addresses_and_loopback_on_a_wildcard_port() {
        let listen: Vec<SocketAddr> = vec![
            "0.0.0.0:53".parse().unwrap(),
            "10.0.0.5:5353".parse().unwrap(),
        ];
        let own = |a: &str| is_own_address(&listen, a.parse().unwrap());
        assert!(own("127.0.0.1:53"));
        assert!(own("127.0.3.4:53"));
        assert!(own("10.0.0.5:5353"));
        assert!(
            !own("127.0.0.1:5353"),
            "another port of loopback is another server"
        );
        assert!(!own("10.96.0.10:53"), "kube-dns's service address");
        assert!(!own("[::1]:53"), "an IPv4 wildcard does not answer IPv6");
        let v6: Vec<SocketAddr> = vec!["[::]:53".parse().unwrap()];
        assert!(is_own_address(&v6, "[::1]:53".parse().unwrap()));
        assert!(!is_own_address(&v6, "127.0.0.1:53".parse().unwrap()));
    }

    #[test]
    fn every_spelling_of_an_own_address_is_own() {
        let pod: Vec<IpAddr> = vec!["10.1.1.10".parse().unwrap(), "fd00::10".parse().unwrap()];
        let own = own_addresses(&["0.0.0.0:53".parse().unwrap()], &pod);
        let is_own = |a: &str| is_own_address(&own, a.parse().unwrap());
        assert!(
            is_own("10.1.1.10:53"),
            "the pod's IP on the wildcard's port"
        );
        assert!(is_own("[::ffff:10.1.1.10]:53"), "IPv4-mapped");
        assert!(is_own("[::ffff:127.0.0.1]:53"), "IPv4-mapped loopback");
        assert!(
            !is_own("[fd00::10]:53"),
            "an IPv4 wildcard does not answer IPv6"
        );
        assert!(!is_own("10.1.1.10:5353"));
        let listen: Vec<SocketAddr> = vec!["127.0.0.1:53".parse().unwrap()];
        assert!(is_own_address(
            &listen,
            "[::ffff:127.0.0.1]:53".parse().unwrap()
        ));
        assert_eq!(
            own_addresses(&listen, &pod),
            listen,
            "no wildcard, no pod address"
        );
    }
}
