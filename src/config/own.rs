//! Endpoints that are meshdns itself. Asked, such an endpoint answers a peer's names from this
//! cluster's kube-dns (cluster a's pods under cluster b's names) or passes the query back to
//! itself: the configuration refuses one equal to a listen address, and an upstream group never
//! asks a host name that resolves to one. The loop marker (the `loops` module) catches what
//! cannot be known here, such as this pod's own IP behind a wildcard listen address.

use std::net::SocketAddr;

use super::clusters::Endpoint;
use super::variables::{CLUSTERS, LISTEN, RESOLV_CONF, UPSTREAMS};
use super::{Cluster, ConfigError, UpstreamSource};

/// Whether `endpoint` is meshdns itself when it listens on `listen`: one of the addresses, or
/// a loopback address on the port of an unspecified one (`0.0.0.0:53` answers `127.0.0.1:53`;
/// `[::]:53` answers `[::1]:53`, IPv6 only as meshdns binds it).
pub fn is_own_address(listen: &[SocketAddr], endpoint: SocketAddr) -> bool {
    listen.iter().any(|own| {
        *own == endpoint
            || (own.port() == endpoint.port()
                && own.ip().is_unspecified()
                && own.is_ipv4() == endpoint.is_ipv4()
                && endpoint.ip().is_loopback())
    })
}

/// Refuses an upstream (`MESHDNS_UPSTREAMS`, or the resolv.conf it came from) or a peer
/// cluster's endpoint that is one of meshdns's own listen addresses. The local cluster's
/// entry in `MESHDNS_CLUSTERS` is not asked by this pod, so it is not looked at.
pub(super) fn check_no_own_endpoint(
    listen: &[SocketAddr],
    upstreams: &[SocketAddr],
    upstream_source: &UpstreamSource,
    clusters: &[Cluster],
) -> Result<(), ConfigError> {
    let own = listen
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let why =
        format!("is meshdns's own address ({LISTEN}={own}): meshdns would ask itself (a loop)");
    if let Some(addr) = upstreams.iter().find(|a| is_own_address(listen, **a)) {
        let variable = match upstream_source {
            UpstreamSource::Environment => UPSTREAMS,
            UpstreamSource::ResolvConf(_) => RESOLV_CONF,
        };
        return Err(ConfigError::new(variable, &addr.to_string(), why));
    }
    for cluster in clusters.iter().filter(|c| !c.is_local) {
        for endpoint in &cluster.endpoints {
            if let Endpoint::Addr(addr) = endpoint
                && is_own_address(listen, *addr)
            {
                return Err(ConfigError::new(
                    CLUSTERS,
                    &format!("{}={addr}", cluster.name),
                    format!(
                        "{why}; cluster {}'s names would be answered from this cluster",
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
}
