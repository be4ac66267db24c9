//! How names of a gathered zone relate to the names each cluster knows, for the two naming
//! schemes: gathersrv's host prefixes (`a-mongo-0.mongo.db.svc.distributed.local`) and
//! Kubernetes MCS (`mongo-0.a.mongo.db.svc.clusterset.local`).
//!
//! Both directions live here: which cluster(s) a question goes to and as what name
//! ([`Naming::plan`]), and how a host name in a cluster's answer is shown to the client
//! ([`Naming::client_host`]). Prefix matching is label-aware and ignores case; the longest
//! prefix wins. A prefixed A/AAAA/TXT name goes to its cluster with the prefix removed whatever
//! its depth — a host (`b-mongo-2.mongo.db.svc`) or a service (`b-web.db.svc`, the SRV target
//! of a ClusterIP Service) — so every target the merge writes resolves back. A prefixed name
//! that its cluster does not know falls back to the name as it is, gathered from every cluster
//! (a service really named `a-cache`).
//!
//! It only maps names: it asks no cluster (the gatherer does, with the plan made here) and
//! decides no route (which zones are gathered is the routing table's).

use std::iter;

use hickory_proto::rr::{Name, RecordType};

use crate::config::Cluster;

/// The label every Kubernetes service name carries before the cluster domain.
const SVC_LABEL: &[u8] = b"svc";

/// The MCS schema version record (KEP-1645): `dns-version.<zone> TXT "1.0.0"`.
pub(super) const MCS_VERSION_LABEL: &[u8] = b"dns-version";
pub(super) const MCS_SCHEMA_VERSION: &str = "1.0.0";

/// A gathered zone and its naming scheme.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Naming {
    pub zone: Name,
    pub scheme: Scheme,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// gathersrv: targets get their cluster's prefix on the first label.
    Prefix,
    /// Kubernetes multi-cluster services: the cluster name is the second label of a host.
    Clusterset,
}

/// Where a question goes: each leg holds the cluster it asks (`P`, a peer), in cluster order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan<P> {
    /// Ask these clusters with the name in each one's domain; when that is one prefixed host
    /// and its cluster says NXDOMAIN, ask `fallback` instead (the name as it is, gathered from
    /// every cluster).
    Ask {
        legs: Vec<(P, Name)>,
        fallback: Option<Vec<(P, Name)>>,
    },
    /// The MCS schema version: answered locally.
    SchemaVersion,
    /// A type the zone does not serve, for a name some cluster can hold: NODATA.
    NoData,
    /// A name no cluster can hold (too long once mapped into each cluster's domain), whatever
    /// the type: NXDOMAIN.
    NxDomain,
}

impl Naming {
    /// The plan for `name` (under this zone) and `qtype`, over the clusters `peers`.
    pub(crate) fn plan<P: AsRef<Cluster> + Clone>(
        &self,
        name: &Name,
        qtype: RecordType,
        peers: &[P],
    ) -> Plan<P> {
        // Every label, a leading `*` included (`Name::num_labels` leaves it out).
        let keep = name.iter().count().saturating_sub(self.zone.iter().count());
        let labels: Vec<&[u8]> = name.iter().take(keep).collect();
        // The name as it is, in the domain of each cluster that can hold it: a cluster whose
        // domain is longer may not, and only a name that none can hold does not exist.
        let gathered: Vec<(P, Name)> = (peers.iter())
            .filter_map(|p| upstream_name(&labels, &p.as_ref().domain).map(|n| (p.clone(), n)))
            .collect();
        let gathered = (!gathered.is_empty()).then_some(gathered);
        if qtype == RecordType::SOA && labels.is_empty() {
            // The zone's own SOA: every cluster is asked for its domain's, whose serials make
            // the zone's (the merge).
            return gathered.map_or(Plan::NxDomain, |legs| Plan::Ask {
                legs,
                fallback: None,
            });
        }
        if !matches!(
            qtype,
            RecordType::SRV | RecordType::A | RecordType::AAAA | RecordType::TXT
        ) {
            return gathered.map_or(Plan::NxDomain, |_| Plan::NoData);
        }
        let one_host = matches!(qtype, RecordType::A | RecordType::AAAA | RecordType::TXT);
        let single = match self.scheme {
            Scheme::Prefix if one_host => prefixed_cluster(&labels, peers),
            Scheme::Clusterset if qtype == RecordType::TXT && labels == [MCS_VERSION_LABEL] => {
                return Plan::SchemaVersion;
            }
            Scheme::Clusterset if one_host => clusterset_cluster(&labels, peers),
            _ => None,
        };
        let host = single.and_then(|(peer, stripped)| {
            upstream_name(&stripped, &peer.as_ref().domain).map(|host| (peer.clone(), host))
        });
        match host {
            Some(host) => Plan::Ask {
                legs: vec![host],
                fallback: match self.scheme {
                    Scheme::Prefix => gathered,
                    Scheme::Clusterset => None,
                },
            },
            None => gathered.map_or(Plan::NxDomain, |legs| Plan::Ask {
                legs,
                fallback: None,
            }),
        }
    }

    /// A host name from cluster `cluster`'s answer as the client sees it.
    pub(crate) fn client_host(&self, host: &Name, cluster: &Cluster) -> ClientHost {
        if !cluster.domain.zone_of(host) {
            return ClientHost::Elsewhere;
        }
        // Every label, a leading `*` included (`Name::num_labels` leaves it out).
        let keep = host.iter().count() - cluster.domain.iter().count();
        let mut relative = host.iter().take(keep);
        let Some(first) = relative.next() else {
            return ClientHost::Elsewhere; // the cluster domain itself
        };
        // The zone's labels are valid already: appended as a name, they are only counted.
        let shown = match self.scheme {
            Scheme::Prefix => {
                let prefixed = [cluster.prefix.as_bytes(), first].concat();
                Name::from_labels(iter::once(prefixed.as_slice()).chain(relative))
            }
            // A service's own name (`web.db.svc`: the SRV target of a ClusterIP Service) is the
            // service of the zone, whose addresses are the union over the clusters (MCS's
            // clusterset IP); only a host's name carries its cluster.
            Scheme::Clusterset
                if keep == 3
                    && host
                        .iter()
                        .nth(2)
                        .is_some_and(|l| l.eq_ignore_ascii_case(SVC_LABEL)) =>
            {
                Name::from_labels(iter::once(first).chain(relative))
            }
            Scheme::Clusterset => {
                Name::from_labels([first, cluster.name.as_bytes()].into_iter().chain(relative))
            }
        };
        match shown.and_then(|name| name.append_domain(&self.zone)) {
            Ok(name) => ClientHost::InZone(name),
            Err(_) => ClientHost::TooLong,
        }
    }
}

/// How a host name from a cluster's answer is shown to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientHost {
    /// Its name in the zone, which resolves back to the cluster it came from.
    InZone(Name),
    /// Not under the cluster's domain (an external name): shown as it is.
    Elsewhere,
    /// Under the cluster's domain, but its name in the zone would break DNS's limits (the
    /// prefixed first label over 63 bytes, the name over 255). No name resolves back to it,
    /// and shown as it is it would name the local cluster's host of that name.
    TooLong,
}

/// `b-mongo-2.mongo.db.svc` → cluster b with `mongo-2.mongo.db.svc`, `b-web.db.svc` → cluster
/// b with `web.db.svc`: any depth; the longest matching prefix wins, and the prefix must leave
/// something of the label.
fn prefixed_cluster<'p, P: AsRef<Cluster>>(
    labels: &[&[u8]],
    peers: &'p [P],
) -> Option<(&'p P, Vec<Vec<u8>>)> {
    let first = labels.first()?;
    let peer = (peers.iter())
        .filter(|p| {
            let prefix = p.as_ref().prefix.as_bytes();
            first.len() > prefix.len() && first[..prefix.len()].eq_ignore_ascii_case(prefix)
        })
        .max_by_key(|p| p.as_ref().prefix.len())?;
    let mut stripped: Vec<Vec<u8>> = labels.iter().map(|l| l.to_vec()).collect();
    stripped[0].drain(..peer.as_ref().prefix.len());
    Some((peer, stripped))
}

/// `host.X.service.ns.svc` → cluster X with `host.service.ns.svc`.
fn clusterset_cluster<'p, P: AsRef<Cluster>>(
    labels: &[&[u8]],
    peers: &'p [P],
) -> Option<(&'p P, Vec<Vec<u8>>)> {
    let [host, cluster, service, namespace, svc] = labels else {
        return None;
    };
    if !svc.eq_ignore_ascii_case(SVC_LABEL) {
        return None;
    }
    let peer = (peers.iter()).find(|p| p.as_ref().name.as_bytes().eq_ignore_ascii_case(cluster))?;
    Some((
        peer,
        [host, service, namespace, svc]
            .iter()
            .map(|l| l.to_vec())
            .collect(),
    ))
}

fn upstream_name<L: AsRef<[u8]>>(labels: &[L], domain: &Name) -> Option<Name> {
    Name::from_labels(labels.iter().map(AsRef::as_ref).chain(domain.iter())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{name, with_local, with_local_a};

    fn clusters() -> Vec<Cluster> {
        let clusters = "b=10.9.0.1; bb=10.9.0.2 domain=bb.example";
        with_local_a(clusters, &[]).unwrap().clusters
    }

    fn prefix() -> Naming {
        Naming {
            zone: name("distributed.local."),
            scheme: Scheme::Prefix,
        }
    }

    fn mcs() -> Naming {
        Naming {
            zone: name("clusterset.local."),
            scheme: Scheme::Clusterset,
        }
    }

    /// Each leg as "cluster name-asked".
    fn shown(legs: Vec<(Cluster, Name)>) -> Vec<String> {
        (legs.into_iter())
            .map(|(cluster, name)| format!("{} {}", cluster.name, name.to_ascii()))
            .collect()
    }

    /// The prefix scheme's plan for a question of `qtype` about `qname`, over `clusters()`.
    fn prefixed(qname: &str, qtype: RecordType) -> Plan<Cluster> {
        prefix().plan(&name(qname), qtype, &clusters())
    }

    /// The clusterset scheme's plan for a question of `qtype` about `qname`, over `clusters()`.
    fn clusterset(qname: &str, qtype: RecordType) -> Plan<Cluster> {
        mcs().plan(&name(qname), qtype, &clusters())
    }

    /// The legs of a plan that asks, each as "cluster name-asked".
    fn asked(plan: Plan<Cluster>) -> Vec<String> {
        match plan {
            Plan::Ask { legs, .. } => shown(legs),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn srv_fans_out_to_every_cluster_in_its_domain() {
        let legs = asked(prefixed(
            "_mongodb._tcp.mongo.db.svc.distributed.local.",
            RecordType::SRV,
        ));
        assert_eq!(
            legs,
            [
                "a _mongodb._tcp.mongo.db.svc.cluster.local.",
                "b _mongodb._tcp.mongo.db.svc.cluster.local.",
                "bb _mongodb._tcp.mongo.db.svc.bb.example.",
            ]
        );
    }

    #[test]
    fn the_apex_soa_asks_every_cluster_for_its_domains_and_below_it_none() {
        for naming in [prefix(), mcs()] {
            let apex = naming.zone.clone();
            let legs = asked(naming.plan(&apex, RecordType::SOA, &clusters()));
            assert_eq!(
                legs,
                ["a cluster.local.", "b cluster.local.", "bb bb.example.",]
            );
            let below = apex.prepend_label("db").unwrap();
            assert_eq!(
                naming.plan(&below, RecordType::SOA, &clusters()),
                Plan::NoData
            );
        }
    }

    #[test]
    fn a_prefixed_host_goes_to_its_cluster_only_longest_prefix_first_ignoring_case() {
        let legs = asked(prefixed(
            "B-mongo-2.mongo.db.svc.distributed.local.",
            RecordType::A,
        ));
        assert_eq!(legs, ["b mongo-2.mongo.db.svc.cluster.local."]);
        let legs = asked(prefixed(
            "bb-mongo-2.mongo.db.svc.distributed.local.",
            RecordType::AAAA,
        ));
        assert_eq!(legs, ["bb mongo-2.mongo.db.svc.bb.example."]);
    }

    #[test]
    fn a_prefixed_name_of_any_depth_goes_to_its_cluster_then_falls_back_to_every_cluster() {
        // `b-web.db.svc` is the target meshdns writes for ClusterIP service `web` of cluster b;
        // a service really named `b-web` is found by the fallback.
        for (asked, stripped) in [
            (
                "b-web.db.svc.distributed.local.",
                "web.db.svc.cluster.local.",
            ),
            ("b-x.distributed.local.", "x.cluster.local."),
            (
                "b-0.a.b.c.mongo.db.svc.distributed.local.",
                "0.a.b.c.mongo.db.svc.cluster.local.",
            ),
        ] {
            let plan = prefixed(asked, RecordType::TXT);
            let Plan::Ask { legs, fallback } = plan else {
                panic!("{plan:?}")
            };
            assert_eq!(shown(legs), [format!("b {stripped}")], "{asked}");
            let fallback = fallback.expect("the name as it is, gathered");
            assert_eq!(fallback.len(), 3);
            assert_eq!(
                fallback[1].1.to_ascii(),
                asked.replace("distributed.local.", "cluster.local.")
            );
        }
    }

    #[test]
    fn a_label_that_is_only_a_prefix_is_no_prefixed_name() {
        let legs = asked(prefixed("b-.db.svc.distributed.local.", RecordType::A));
        assert_eq!(
            legs.len(),
            3,
            "gathered: nothing is left once the prefix is removed"
        );
    }

    #[test]
    fn a_prefixed_host_falls_back_to_the_gathered_name() {
        let plan = prefixed("b-side-0.b-side.db.svc.distributed.local.", RecordType::A);
        let Plan::Ask { legs, fallback } = plan else {
            panic!("{plan:?}")
        };
        assert_eq!(legs[0].1.to_ascii(), "side-0.b-side.db.svc.cluster.local.");
        let fallback = fallback.unwrap();
        assert_eq!(fallback.len(), 3);
        assert_eq!(
            fallback[0].1.to_ascii(),
            "b-side-0.b-side.db.svc.cluster.local."
        );
    }

    #[test]
    fn a_name_no_cluster_can_hold_is_nxdomain() {
        let long = long_name();
        for qtype in [RecordType::A, RecordType::SRV, RecordType::MX] {
            assert_eq!(
                prefix().plan(&name(&long), qtype, &clusters_with_long_domain()),
                Plan::NxDomain,
                "{qtype}"
            );
        }
    }

    #[test]
    fn a_long_name_is_asked_only_of_the_clusters_whose_domain_can_hold_it() {
        let long = long_name();
        let mut both = clusters();
        both.extend(clusters_with_long_domain());
        let legs = asked(prefix().plan(&name(&long), RecordType::A, &both));
        let clusters: Vec<&str> = legs.iter().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(clusters, ["a", "b", "bb"]);
        assert_eq!(
            prefix().plan(&name(&long), RecordType::MX, &both),
            Plan::NoData
        );
    }

    /// 252 bytes under `distributed.local`: too long for a cluster domain longer than it.
    fn long_name() -> String {
        let labels = [
            "x".repeat(63),
            "y".repeat(63),
            "z".repeat(63),
            "w".repeat(40),
        ];
        format!("{}.distributed.local.", labels.join("."))
    }

    fn clusters_with_long_domain() -> Vec<Cluster> {
        let clusters = "b= domain=a-rather-long-cluster-domain.example";
        with_local("b", clusters, &[]).unwrap().clusters
    }

    #[test]
    fn an_unprefixed_service_fans_out() {
        let legs = asked(prefixed("mongo.db.svc.distributed.local.", RecordType::A));
        assert_eq!(legs.len(), 3);
    }

    #[test]
    fn other_types_are_nodata() {
        assert_eq!(
            prefixed("mongo.db.svc.distributed.local.", RecordType::MX),
            Plan::NoData
        );
    }

    #[test]
    fn targets_get_their_cluster_prefix_or_label() {
        let b = &clusters()[1];
        let target = name("mongo-0.mongo.db.svc.cluster.local.");
        let shown = |naming: Naming, target: &Name| match naming.client_host(target, b) {
            ClientHost::InZone(name) => name.to_ascii(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            shown(prefix(), &target),
            "b-mongo-0.mongo.db.svc.distributed.local."
        );
        assert_eq!(
            shown(mcs(), &target),
            "mongo-0.b.mongo.db.svc.clusterset.local."
        );
        assert_eq!(
            prefix().client_host(&name("elsewhere.example."), b),
            ClientHost::Elsewhere
        );
        // A ClusterIP Service's target is its own name: the service of the clusterset zone.
        let service = name("web.db.svc.cluster.local.");
        assert_eq!(shown(mcs(), &service), "web.db.svc.clusterset.local.");
        assert_eq!(shown(prefix(), &service), "b-web.db.svc.distributed.local.");
    }

    #[test]
    fn a_target_that_cannot_be_shown_in_the_zone_is_too_long() {
        let b = &clusters()[1];
        // The prefix would make the first label longer than 63 bytes.
        let long_label = name(&format!("{}.mongo.db.svc.cluster.local.", "m".repeat(62)));
        assert_eq!(prefix().client_host(&long_label, b), ClientHost::TooLong);
        // The zone would make the name longer than 255 bytes on the wire: labels of 63, 63,
        // 63 and 45 bytes (the first with its prefix), `distributed` and `local`, their six
        // length bytes and the root: 257.
        let labels = [
            "a".repeat(61),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(45),
        ];
        let long_name = name(&format!("{}.cluster.local.", labels.join(".")));
        assert_eq!(prefix().client_host(&long_name, b), ClientHost::TooLong);
        assert_eq!(
            prefix().client_host(&name("cluster.local."), b),
            ClientHost::Elsewhere
        );
        let fits = name(&format!("{}.cluster.local.", labels[..3].join(".")));
        // 3 x 63 + 16 label bytes and 5 dots.
        let ClientHost::InZone(fits) = prefix().client_host(&fits, b) else {
            panic!("it fits");
        };
        assert_eq!(fits.len(), 210);
    }

    #[test]
    fn mcs_hosts_go_to_their_cluster_and_services_fan_out() {
        let legs = asked(clusterset(
            "mongo-0.b.mongo.db.svc.clusterset.local.",
            RecordType::A,
        ));
        assert_eq!(legs, ["b mongo-0.mongo.db.svc.cluster.local."]);
        let legs = asked(clusterset("mongo.db.svc.clusterset.local.", RecordType::A));
        assert_eq!(legs.len(), 3);
        assert_eq!(
            clusterset("dns-version.clusterset.local.", RecordType::TXT),
            Plan::SchemaVersion
        );
    }
}
