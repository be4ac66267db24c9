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
//! `kubernetes_could_hold`). The check works on the question's wire bytes, after the zone walk
//! found no zone, and reads no label: a name whose last byte is not a suffix's is turned away
//! by one bit test; the others by one bit test per suffix (a few) on the two bytes just before
//! where the suffix would start, against the last two bytes of every zone. Only a name passing
//! one is compared with the expansions (the cache-hit path routes every query for its metric
//! label; docs/design.md gives the measured cost).
//!
//! It decides only which names are such expansions, and under which cluster domain; the
//! NXDOMAIN itself is written by `query`.

use std::ops::{ControlFlow, Range};
use std::sync::Arc;

use hickory_proto::rr::Name;

use crate::config::Config;
use crate::wire;

/// One expansion a client's resolver makes of a meshdns zone: the zone followed by a search
/// suffix, in lowercase wire form.
#[derive(Debug, Clone, PartialEq)]
struct Expansion {
    wire: Vec<u8>,
    /// The cluster domain the suffix lies under: its SOA goes into the answer.
    domain: Arc<Name>,
    /// The length of that domain's wire form, so its offset in a name is `len - domain_len`.
    domain_len: usize,
}

/// A qualifying search suffix and the expansions that end in it.
#[derive(Debug, Clone, PartialEq)]
struct Suffix {
    /// The suffix's wire length (root included): in a name of `n` bytes it starts at
    /// `n - wire_len`.
    wire_len: usize,
    /// The range of [`SearchList::expansions`] ending in this suffix.
    expansions: Range<usize>,
}

/// The expansions of every zone by every qualifying search suffix.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SearchList {
    /// Bit `b` set: some qualifying suffix's last byte before the root is `b` (either case).
    suffix_last_bytes: [u64; 4],
    /// Bit [`tail_key`] of the last two bytes of some zone's wire form (without the root) set.
    zone_tails: [u64; 4],
    suffixes: Vec<Suffix>,
    /// Grouped by suffix.
    expansions: Vec<Expansion>,
}

/// Whether bit `byte` of a 256-bit set is set.
fn has_byte(set: &[u64; 4], byte: u8) -> bool {
    set[usize::from(byte / 64)] & (1 << (byte % 64)) != 0
}

fn add_byte(set: &mut [u64; 4], byte: u8) {
    set[usize::from(byte / 64)] |= 1 << (byte % 64);
}

/// The last two bytes of a zone, or of a name's labels before a suffix, folded into one byte
/// for a 256-bit set. `| 0x20` maps both cases of a letter to one value (and other bytes
/// consistently), so bytes equal ignoring case give the same key.
fn tail_key(before: u8, last: u8) -> u8 {
    (last | 0x20) ^ (before | 0x20).rotate_left(3)
}

impl SearchList {
    /// The expansions of `zones` by the search suffixes of `config` that lie under one of its
    /// clusters' domains (the longest such domain is the suffix's).
    pub(crate) fn new<'a>(config: &Config, zones: impl IntoIterator<Item = &'a Name>) -> Self {
        let mut list = SearchList::default();
        let Ok(suffixes) = &config.search else {
            return list;
        };
        let qualifying: Vec<(&Name, Arc<Name>)> = suffixes
            .iter()
            .filter_map(|suffix| {
                let domain = (config.clusters.iter().map(|c| &c.domain))
                    .filter(|domain| domain.zone_of(suffix))
                    .max_by_key(|domain| domain.num_labels())?;
                Some((suffix, Arc::new(domain.clone())))
            })
            .collect();
        let zones: Vec<&Name> = zones.into_iter().collect();
        for zone in &zones {
            // A zone is never the root (the configuration refuses it): two bytes and the root.
            if let [.., before, last, _root] = wire::lowercase_name(zone.iter())[..] {
                add_byte(&mut list.zone_tails, tail_key(before, last));
            }
        }
        for (suffix, domain) in qualifying {
            let suffix_wire = wire::lowercase_name(suffix.iter());
            match suffix_wire.len().checked_sub(2).map(|at| suffix_wire[at]) {
                Some(byte) => {
                    add_byte(&mut list.suffix_last_bytes, byte);
                    add_byte(&mut list.suffix_last_bytes, byte.to_ascii_uppercase());
                }
                None => list.suffix_last_bytes = [u64::MAX; 4],
            }
            let first = list.expansions.len();
            for zone in &zones {
                let wire = wire::lowercase_name(zone.iter().chain(suffix.iter()));
                if wire.len() > wire::MAX_NAME || list.expansions.iter().any(|e| e.wire == wire) {
                    continue;
                }
                list.expansions.push(Expansion {
                    wire,
                    domain_len: wire::lowercase_name(domain.iter()).len(),
                    domain: Arc::clone(&domain),
                });
            }
            if list.expansions.len() > first {
                list.suffixes.push(Suffix {
                    wire_len: suffix_wire.len(),
                    expansions: first..list.expansions.len(),
                });
            }
        }
        list
    }

    /// Whether `name` (a plain wire name under no zone) is a search expansion of a meshdns
    /// name that cannot exist: it ends in a zone followed by a search suffix (on label
    /// boundaries), and the whole name has no Kubernetes shape. Returns the cluster domain,
    /// whose SOA the NXDOMAIN carries. The bit tests of the module's documentation come
    /// first; an in-cluster name (`mongo-0.mongo.db.svc.cluster.local`) rarely passes one.
    pub(crate) fn expansion(&self, name: &[u8]) -> Option<&Arc<Name>> {
        let (&last, _) = name.split_last()?.1.split_last()?;
        if !has_byte(&self.suffix_last_bytes, last) {
            return None;
        }
        for suffix in &self.suffixes {
            let end = name.len().checked_sub(suffix.wire_len);
            let tail = end.and_then(|end| name.get(end.checked_sub(2)?..end));
            if let Some(&[before, last]) = tail
                && has_byte(&self.zone_tails, tail_key(before, last))
                && let Some(domain) = (self.expansions.get(suffix.expansions.clone()))
                    .and_then(|expansions| self.exact(name, expansions))
            {
                return Some(domain);
            }
        }
        None
    }

    /// [`expansion`](Self::expansion) among `expansions`, once the byte tests passed.
    #[cold]
    fn exact<'e>(&self, name: &[u8], expansions: &'e [Expansion]) -> Option<&'e Arc<Name>> {
        expansions.iter().find_map(|expansion| {
            let at = name.len().checked_sub(expansion.wire.len())?;
            if !name.get(at..)?.eq_ignore_ascii_case(&expansion.wire) {
                return None;
            }
            let domain_at = name.len().checked_sub(expansion.domain_len)?;
            let mut on_boundary = false;
            let mut relative: Vec<&[u8]> = Vec::new();
            wire::walk_name(name, 0, |label| {
                on_boundary |= label == at;
                if label >= domain_at {
                    return ControlFlow::Break(());
                }
                let len = usize::from(name.get(label).copied().unwrap_or(0));
                relative.extend(name.get(label + 1..label + 1 + len));
                ControlFlow::Continue(())
            });
            (on_boundary && !kubernetes_could_hold(&relative)).then_some(&expansion.domain)
        })
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
    use crate::config::tests::{name, resolv_conf_file, with_local_a};

    /// A pod in namespace `db` of cluster a (b is a peer), with the usual search list and one
    /// suffix that is not under a cluster domain.
    pub(crate) fn pod_config() -> Config {
        let path = resolv_conf_file(
            "nameserver 127.0.0.1\nsearch db.svc.cluster.local svc.cluster.local cluster.local example.com\noptions ndots:5\n",
        );
        let config = with_local_a("b=10.9.0.1", &[("MESHDNS_RESOLV_CONF", &path)]).unwrap();
        std::fs::remove_file(&path).unwrap();
        config
    }

    fn list(zones: &[&str]) -> SearchList {
        let zones: Vec<Name> = zones.iter().map(|z| name(z)).collect();
        SearchList::new(&pod_config(), &zones)
    }

    fn expansion(list: &SearchList, text: &str) -> Option<String> {
        let found = list.expansion(&name(text).to_bytes().unwrap());
        found.map(|domain| domain.to_ascii())
    }

    /// The cluster domain every suffix of [`pod_config`] lies under.
    fn local() -> Option<String> {
        Some("cluster.local.".to_string())
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
            assert_eq!(expansion(&list, text), local(), "{text}");
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
    fn an_expansions_bytes_inside_a_label_are_no_expansion() {
        // One label whose bytes are `\x07cluster\x01b`, then `svc.cluster.local`: the name
        // ends in the bytes of `cluster.b.svc.cluster.local`, but not on a label boundary.
        let list = list(&["cluster.b."]);
        let mut tricky = b"\x0a\x07cluster\x01b".to_vec();
        tricky.extend_from_slice(&name("svc.cluster.local.").to_bytes().unwrap());
        assert_eq!(list.expansion(&tricky), None);
        let mut plain = b"\x01y\x01x".to_vec();
        plain.extend_from_slice(&tricky[1..]);
        assert_eq!(list.expansion(&plain).map(|d| d.to_ascii()), local());
    }

    #[test]
    fn a_suffix_whose_byte_test_passes_in_vain_does_not_hide_a_later_one() {
        // `y.b.abcd.b.cluster.local`: the bytes before where `db.svc.cluster.local` would
        // start are `\x01b`, like zone `b`'s, but the expansion is `b.cluster.local`.
        let list = list(&["b.", "cluster.b."]);
        assert_eq!(expansion(&list, "y.b.abcd.b.cluster.local."), local());
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
            local()
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
        let missing = [("MESHDNS_RESOLV_CONF", "/nonexistent/resolv.conf")];
        let config = with_local_a("b=10.9.0.1", &missing).unwrap();
        assert!(config.search.is_err());
        let list = SearchList::new(&config, &[name("cluster.b.")]);
        assert_eq!(list, SearchList::default());
        assert_eq!(expansion(&list, "y.x.cluster.b.svc.cluster.local."), None);
    }
}
