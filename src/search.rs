//! Search-list expansions of meshdns's names (docs/design.md, "Search-list expansions").
//!
//! With the pod's `ndots:5`, a lookup of `mongo-4.mongo.db.cluster.b` (4 dots) first tries the
//! name with every search suffix: `….db.svc.cluster.local`, `….svc.cluster.local`,
//! `….cluster.local`. Such a name — a name at or under a meshdns zone, followed by a search
//! suffix under a cluster domain — cannot exist in Kubernetes DNS, so meshdns answers it
//! NXDOMAIN itself, with the SOA of that cluster domain, instead of a round trip to kube-dns
//! per suffix and address family. The suffixes are the `search` line of the resolv.conf meshdns
//! reads (the pod's); one that is not under a cluster domain (`example.com`) is never answered
//! here.
//!
//! Two guards keep the answer right: a zone match stays with its zone (the router asks this
//! module only for names under none), and a name that Kubernetes DNS *could* hold — because a
//! zone is a single label or ends in `svc` or `pod`, say — still goes to kube-dns (see
//! `kubernetes_could_hold`). The check works on the question's wire bytes: a name not ending
//! in a suffix's cluster domain is turned away by one comparison, and the others by one bit
//! test per label against the lengths of every zone+suffix pair (the cache-hit path routes
//! every query for its metric label; docs/design.md gives the measured cost).

use std::ops::ControlFlow;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::Name;

use crate::config::Config;
use crate::reply;
use crate::wire;

/// One expansion a client's resolver makes of a meshdns zone: the zone followed by a search
/// suffix, in lowercase wire form.
#[derive(Debug, Clone)]
struct Expansion {
    wire: Vec<u8>,
    /// Index into [`SearchList::domains`]: the cluster domain the suffix lies under.
    domain: usize,
    /// The length of that domain's wire form, so its offset in a name is `len - domain_len`.
    domain_len: usize,
}

/// The expansions of every zone by every qualifying search suffix.
#[derive(Debug, Clone, Default)]
pub struct SearchList {
    /// The cluster domains some qualifying suffix lies under, lowercase wire form: a name
    /// ending in none of them is no expansion (one check per name, before any per-label work;
    /// usually one domain, whose first byte already turns most names away).
    suffix_domains: Vec<Vec<u8>>,
    /// Sorted by wire length, so a lookup compares only expansions of the right length.
    expansions: Vec<Expansion>,
    /// Bit `n` set: some expansion's wire form is `n` bytes long (wire names are ≤ 255).
    lengths: [u64; 4],
    /// The cluster domains the suffixes lie under: their SOA goes into the answer.
    domains: Vec<Name>,
}

impl SearchList {
    /// The expansions of `zones` by the search suffixes of `config` that lie under one of its
    /// clusters' domains (the longest such domain is the suffix's).
    pub fn new<'a>(config: &Config, zones: impl IntoIterator<Item = &'a Name>) -> Self {
        let mut list = SearchList::default();
        let Ok(suffixes) = &config.search else {
            return list;
        };
        let mut domains: Vec<&Name> = Vec::new();
        for cluster in &config.clusters {
            if !domains.contains(&&cluster.domain) {
                domains.push(&cluster.domain);
            }
        }
        let qualifying: Vec<(&Name, usize)> = suffixes
            .iter()
            .filter_map(|suffix| {
                let (index, _) = (domains.iter().enumerate())
                    .filter(|(_, domain)| domain.zone_of(suffix))
                    .max_by_key(|(_, domain)| domain.num_labels())?;
                Some((suffix, index))
            })
            .collect();
        let zones: Vec<&Name> = zones.into_iter().collect();
        for (suffix, domain) in qualifying {
            let domain_wire = wire::lowercase_name(domains[domain].iter());
            if !list.suffix_domains.contains(&domain_wire) {
                list.suffix_domains.push(domain_wire);
            }
            for zone in &zones {
                let wire = wire::lowercase_name(zone.iter().chain(suffix.iter()));
                if wire.len() > wire::MAX_NAME || list.expansions.iter().any(|e| e.wire == wire) {
                    continue;
                }
                list.lengths[wire.len() / 64] |= 1 << (wire.len() % 64);
                list.expansions.push(Expansion {
                    wire,
                    domain,
                    domain_len: wire::lowercase_name(domains[domain].iter()).len(),
                });
            }
        }
        list.expansions.sort_by_key(|e| e.wire.len());
        list.domains = domains.into_iter().cloned().collect();
        list
    }

    /// Whether `name` (a plain wire name) ends like the cluster domain of a qualifying search
    /// suffix: the one check every name pays, so that only those go through
    /// [`expansion`](Self::expansion) label by label.
    pub fn may_expand(&self, name: &[u8]) -> bool {
        self.suffix_domains.iter().any(|suffix| {
            (name.len().checked_sub(suffix.len()))
                .and_then(|at| name.get(at..))
                .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
        })
    }

    /// Whether `name` (a plain wire name) is a search expansion of a meshdns name that cannot
    /// exist: `name[at..]` (a label boundary) is a zone followed by a search suffix, and the
    /// whole name has no Kubernetes shape. Returns the index of the cluster domain.
    #[inline]
    pub fn expansion(&self, name: &[u8], at: usize) -> Option<usize> {
        let length = name.len().checked_sub(at)?;
        let bits = self.lengths.get(length / 64)?;
        if bits & (1 << (length % 64)) == 0 {
            return None;
        }
        self.expansion_of_length(name, at)
    }

    /// [`expansion`](Self::expansion) once the length of `name[at..]` is one of an expansion.
    fn expansion_of_length(&self, name: &[u8], at: usize) -> Option<usize> {
        let suffix = name.get(at..)?;
        let same_length = self
            .expansions
            .partition_point(|e| e.wire.len() < suffix.len());
        let found = (self.expansions[same_length..].iter())
            .take_while(|e| e.wire.len() == suffix.len())
            .find(|e| e.wire.eq_ignore_ascii_case(suffix))?;
        let domain_at = name.len().checked_sub(found.domain_len)?;
        let mut relative: Vec<&[u8]> = Vec::new();
        wire::walk_name(name, 0, |label| {
            if label >= domain_at {
                return ControlFlow::Break(());
            }
            let len = usize::from(name.get(label).copied().unwrap_or(0));
            relative.extend(name.get(label + 1..label + 1 + len));
            ControlFlow::Continue(())
        });
        (!kubernetes_could_hold(&relative)).then_some(found.domain)
    }

    /// NXDOMAIN for `request` with the SOA of cluster domain `domain` (as
    /// [`expansion`](Self::expansion) gave it), encoded.
    pub fn answer(&self, request: &Message, domain: usize, negative_ttl: Duration) -> Vec<u8> {
        match self.domains.get(domain) {
            Some(domain) => reply::encode_fitted(
                &reply::negative(request, ResponseCode::NXDomain, domain, negative_ttl),
                wire::MAX_MESSAGE,
            ),
            None => reply::servfail_bytes(
                request,
                reply::ExtendedError::NetworkError,
                "no such cluster domain",
            ),
        }
    }

    /// Whether any expansion is answered here (`--check`, logs).
    pub fn is_empty(&self) -> bool {
        self.expansions.is_empty()
    }
}

/// Whether a name with these labels before a cluster domain could be one of Kubernetes DNS
/// (the specification's records): the domain's own names (one label: `dns-version`, `svc`,
/// `pod`); under `svc`, a namespace, a service, a pod or endpoint of a service
/// (`HOST.SERVICE.NS.svc`) and a named port (`_PORT._PROTO.SERVICE.NS.svc`); under `pod`, a
/// namespace and a pod's dashed address. Anything else does not exist there.
fn kubernetes_could_hold(relative: &[&[u8]]) -> bool {
    let underscored = |label: &[u8]| label.first() == Some(&b'_');
    match relative {
        [] | [_] => true,
        [.., last] if last.eq_ignore_ascii_case(b"svc") => match relative {
            [_, _] | [_, _, _] | [_, _, _, _] => true,
            [port, proto, _, _, _] => underscored(port) && underscored(proto),
            _ => false,
        },
        [.., last] if last.eq_ignore_ascii_case(b"pod") => relative.len() <= 3,
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use hickory_proto::serialize::binary::BinEncodable;

    use super::*;
    use crate::config::tests::{config_from, resolv_conf_file};

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    /// A pod in namespace `db` of cluster a (b is a peer), with the usual search list and one
    /// suffix that is not under a cluster domain.
    pub(crate) fn pod_config() -> Config {
        let path = resolv_conf_file(
            "nameserver 127.0.0.1\nsearch db.svc.cluster.local svc.cluster.local cluster.local example.com\noptions ndots:5\n",
        );
        let config = config_from(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1"),
            ("MESHDNS_RESOLV_CONF", &path),
        ])
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        config
    }

    fn list(zones: &[&str]) -> SearchList {
        let zones: Vec<Name> = zones.iter().map(|z| name(z)).collect();
        SearchList::new(&pod_config(), &zones)
    }

    fn expansion(list: &SearchList, text: &str) -> Option<usize> {
        let wire = name(text).to_bytes().unwrap();
        let mut found = None;
        wire::walk_name(&wire, 0, |at| {
            found = found.or_else(|| list.expansion(&wire, at));
            ControlFlow::Continue(())
        });
        found
    }

    #[test]
    fn a_zone_name_followed_by_a_search_suffix_under_the_cluster_domain_is_an_expansion() {
        let list = list(&["cluster.b.", "distributed.local."]);
        for text in [
            "mongo-4.mongo.db.cluster.b.db.svc.cluster.local.",
            "Mongo-4.Mongo.DB.Cluster.B.svc.Cluster.Local.",
            "mongo-4.mongo.db.cluster.b.cluster.local.",
            "a-mongo-0.mongo.db.svc.distributed.local.cluster.local.",
        ] {
            assert_eq!(expansion(&list, text), Some(0), "{text}");
        }
    }

    #[test]
    fn other_suffixes_and_names_that_merely_end_like_a_zone_are_not() {
        let list = list(&["cluster.b."]);
        for text in [
            "mongo-4.mongo.db.cluster.b.example.com.",
            "mongo-4.mongo.db.notcluster.b.svc.cluster.local.",
            "mongo-4.mongo.db.cluster.bb.svc.cluster.local.",
            "mongo-0.mongo.db.svc.cluster.local.",
            "mongo-4.mongo.db.cluster.b.",
        ] {
            assert_eq!(expansion(&list, text), None, "{text}");
        }
    }

    #[test]
    fn a_name_kubernetes_could_hold_is_left_to_kube_dns() {
        // A one-label zone `b`: `x.b.db.svc.cluster.local` is pod x of service b in namespace db.
        let list = list(&["b.", "cluster.b."]);
        assert_eq!(expansion(&list, "x.b.db.svc.cluster.local."), None);
        // `cluster.b.svc.cluster.local` is service `cluster` of namespace `b`, and
        // `x.cluster.b.svc.cluster.local` its pod `x`; one label more is nothing.
        assert_eq!(expansion(&list, "cluster.b.svc.cluster.local."), None);
        assert_eq!(expansion(&list, "x.cluster.b.svc.cluster.local."), None);
        assert_eq!(
            expansion(&list, "y.x.cluster.b.svc.cluster.local."),
            Some(0)
        );
    }

    #[test]
    fn the_kubernetes_shapes_are_the_specifications() {
        let holds = |labels: &[&str]| {
            let labels: Vec<&[u8]> = labels.iter().map(|l| l.as_bytes()).collect();
            kubernetes_could_hold(&labels)
        };
        assert!(holds(&["dns-version"]));
        assert!(holds(&["mongo-0", "mongo", "db", "svc"]));
        assert!(holds(&["_mongodb", "_tcp", "mongo", "db", "svc"]));
        assert!(holds(&["10-8-1-2", "db", "pod"]));
        assert!(!holds(&["x", "_tcp", "mongo", "db", "svc"]));
        assert!(!holds(&["mongo-4", "mongo", "db", "cluster", "b", "svc"]));
        assert!(!holds(&["mongo-4", "mongo", "db", "cluster", "b"]));
        assert!(!holds(&["x", "10-8-1-2", "db", "pod"]));
    }

    #[test]
    fn without_a_search_list_nothing_is_an_expansion() {
        let config = config_from(&[
            ("MESHDNS_CLUSTERS", "b=10.9.0.1"),
            ("MESHDNS_RESOLV_CONF", "/nonexistent/resolv.conf"),
        ])
        .unwrap();
        assert!(config.search.is_err());
        let list = SearchList::new(&config, &[name("cluster.b.")]);
        assert!(list.is_empty());
        assert_eq!(expansion(&list, "y.x.cluster.b.svc.cluster.local."), None);
    }
}
