//! Routing: which way a query name goes. The pod's own names (exact names, any letter case)
//! come first: they are answered locally, whatever zone they lie in. Then zones, matched on
//! label boundaries ignoring case; the longest matching zone wins; a name under none of them
//! passes through to kube-dns.
//!
//! Besides zones, two kinds of claims route names to one peer: the namespaces a cluster claims
//! (`namespaces=`, zones `<ns>.svc.<local domain>` in the same table) and the reverse names of
//! the addresses in its networks (`cidr=`, see [`reverse`](crate::reverse)); a claim of the local
//! cluster routes nowhere new (kube-dns has its names).
//!
//! Routing works on the wire form of the question name, so the cache-hit path can route a
//! query (for its metric label) without parsing the message.
//!
//! A route holds its target (a [`Peer`], a gathered zone's [`Naming`]), as a CoreDNS server
//! block does: nothing looks a target up by position. The router is generic over the peer so
//! that what only routes (tests) needs no upstream.
//!
//! It owns the table and the order of its checks, and answers nothing: each route's resolver
//! does, called by `query`. `--check` shows the same table.

use std::borrow::Cow;
use std::sync::Arc;

use hickory_proto::rr::Name;
use hickory_proto::serialize::binary::BinDecodable;
use ipnet::IpNet;

use crate::config::{Cluster, Config, OwnName};
use crate::gather::{Naming, Scheme};
use crate::own_names::OwnNames;
use crate::reverse::Networks;
use crate::rewrite::Peer;
use crate::search::SearchList;
use crate::wire;

/// Where a query goes, with its target.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Route<P = Arc<Peer>> {
    /// Not one of ours: forwarded verbatim to the local cluster DNS.
    Passthrough,
    /// Under the peer's zone: rewritten and asked of that cluster.
    Cluster(P),
    /// Under a distributed zone: gathered from every cluster (gathersrv naming).
    Distributed(Arc<Naming>),
    /// Under the clusterset zone (Kubernetes MCS naming).
    Clusterset(Arc<Naming>),
    /// The reverse name of an address in the peer's networks: asked of that cluster as is,
    /// the names of the reply mapped back under its zone.
    Reverse(P),
    /// Under a namespace that the peer claims: asked of that cluster verbatim.
    Namespace(P),
    /// One of the pod's own names: answered locally.
    SelfName(Arc<OwnName>),
    /// A search-list expansion of a meshdns name (`….cluster.b.svc.cluster.local`), which
    /// cannot exist: NXDOMAIN with the SOA of this cluster domain.
    Search(Arc<Name>),
}

impl<P> Route<P> {
    /// What kind of route this is: the metric label.
    pub(crate) fn kind(&self) -> RouteKind {
        match self {
            Route::Passthrough => RouteKind::Passthrough,
            Route::Cluster(_) => RouteKind::Cluster,
            Route::Distributed(_) => RouteKind::Distributed,
            Route::Clusterset(_) => RouteKind::Clusterset,
            Route::Reverse(_) => RouteKind::Reverse,
            Route::Namespace(_) => RouteKind::Namespace,
            Route::SelfName(_) => RouteKind::SelfName,
            Route::Search(_) => RouteKind::Search,
        }
    }
}

/// A [`Route`] without its target: the `route` label of the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteKind {
    Passthrough,
    Cluster,
    Distributed,
    Clusterset,
    Reverse,
    Namespace,
    /// Label `self`.
    SelfName,
    Search,
}

impl RouteKind {
    pub(crate) const ALL: [RouteKind; 8] = [
        RouteKind::Passthrough,
        RouteKind::Cluster,
        RouteKind::Distributed,
        RouteKind::Clusterset,
        RouteKind::Reverse,
        RouteKind::Namespace,
        RouteKind::SelfName,
        RouteKind::Search,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            RouteKind::Passthrough => "passthrough",
            RouteKind::Cluster => "cluster",
            RouteKind::Distributed => "distributed",
            RouteKind::Clusterset => "clusterset",
            RouteKind::Reverse => "reverse",
            RouteKind::Namespace => "namespace",
            RouteKind::SelfName => "self",
            RouteKind::Search => "search",
        }
    }
}

/// One row of the routing table, as [`Router::route`] reads it: what `meshdns --check` prints,
/// so that what it shows is what routes.
#[derive(Debug)]
pub(crate) enum Row<'a, P> {
    /// One of the pod's own names: answered locally.
    Own(&'a Arc<OwnName>),
    /// A zone (a name ending on a label boundary under it matches) and its route.
    Zone(Name, &'a Route<P>),
    /// A peer's network: the reverse names of its addresses take the route.
    Network(IpNet, &'a Route<P>),
}

/// The routing table: the pod's own names, then each zone's lowercase wire form and its route,
/// then the peers' networks with theirs; and the search-list expansions of the zones.
#[derive(Debug, Clone)]
pub(crate) struct Router<P = Arc<Peer>> {
    own: OwnNames,
    zones: Vec<(Vec<u8>, Route<P>)>,
    networks: Networks<Route<P>>,
    search: SearchList,
}

impl<P: AsRef<Cluster> + Clone> Router<P> {
    /// The router of `config`, whose clusters are `peers` (each knows its own configuration).
    pub(crate) fn new(config: &Config, peers: &[P]) -> Self {
        let gathered = |zone: &Name, scheme| {
            Arc::new(Naming {
                zone: zone.clone(),
                scheme,
            })
        };
        let named = (peers.iter())
            .map(|peer| (&peer.as_ref().zone, Route::Cluster(peer.clone())))
            .chain(
                config
                    .distributed_zones
                    .iter()
                    .map(|z| (z, Route::Distributed(gathered(z, Scheme::Prefix)))),
            )
            .chain(
                config
                    .clusterset_zone
                    .iter()
                    .map(|z| (z, Route::Clusterset(gathered(z, Scheme::Clusterset)))),
            );
        let named: Vec<(&Name, Route<P>)> = named.collect();
        // A claim of the local cluster routes nowhere new: kube-dns has its names.
        let claims = || (peers.iter()).filter(|peer| !peer.as_ref().is_local);
        // Namespaces claimed by peers route like zones, but they are no meshdns zone names:
        // a search expansion of one is kube-dns's to answer.
        let namespaces = claims().flat_map(|peer| {
            (peer.as_ref().namespaces.iter()).map(|z| (z, Route::Namespace(peer.clone())))
        });
        let networks = claims().flat_map(|peer| {
            (peer.as_ref().networks.iter()).map(|net| (*net, Route::Reverse(peer.clone())))
        });
        Self {
            own: OwnNames::new(config),
            search: SearchList::new(config, named.iter().map(|(zone, _)| *zone)),
            zones: (named.into_iter().chain(namespaces))
                .map(|(zone, route)| (wire::lowercase_name(zone.iter()), route))
                .collect(),
            networks: Networks::new(networks),
        }
    }

    /// The table's rows in order of precedence: own names, then zones (of those that match a
    /// name, the longest wins), then networks; a name under none of them is a search-list
    /// expansion or passes through.
    pub(crate) fn rows(&self) -> impl Iterator<Item = Row<'_, P>> {
        let zones = self.zones.iter().map(|(wire, route)| {
            Row::Zone(Name::from_bytes(wire).expect("made from a name"), route)
        });
        (self.own.iter().map(Row::Own)).chain(zones).chain(
            self.networks
                .iter()
                .map(|(net, route)| Row::Network(*net, route)),
        )
    }

    /// The route of a question name in wire form (uncompressed labels ending in the root):
    /// the longest zone it lies under; a name under no zone may still be the reverse name of a
    /// peer's address, or a search-list expansion of a zone name. A zone's or a reverse name's
    /// route is borrowed from the table, so the cache-hit path, which wants only its kind,
    /// copies nothing.
    pub(crate) fn route(&self, name: &[u8]) -> Cow<'_, Route<P>> {
        if let Some(own) = self.own.find(name) {
            return Cow::Owned(Route::SelfName(Arc::clone(own)));
        }
        self.zone_of(name)
            .or_else(|| self.networks.find(name))
            .map(Cow::Borrowed)
            .unwrap_or_else(|| {
                Cow::Owned(match self.search.expansion(name) {
                    Some(domain) => Route::Search(Arc::clone(domain)),
                    None => Route::Passthrough,
                })
            })
    }

    /// The route of the longest zone `name` lies under (of equal ones, the first in the
    /// table). Each zone is compared with the name's tail of its length, and the name's labels
    /// are walked only for a tail that matches, to see that it starts a label: a name under no
    /// zone, the cache-hit path's usual case, is not walked at all.
    fn zone_of(&self, name: &[u8]) -> Option<&Route<P>> {
        let mut longest: Option<(usize, &Route<P>)> = None;
        for (zone, route) in &self.zones {
            let Some(at) = name.len().checked_sub(zone.len()) else {
                continue;
            };
            if longest.is_none_or(|(len, _)| zone.len() > len)
                && name
                    .get(at..)
                    .is_some_and(|tail| tail.eq_ignore_ascii_case(zone))
                && wire::is_label_start(name, at)
            {
                longest = Some((zone.len(), route));
            }
        }
        longest.map(|(_, route)| route)
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::RecordType;
    use hickory_proto::serialize::binary::BinEncodable;
    use proptest::prelude::*;

    use super::*;
    use crate::config::tests::{config_from, name, property, with_local};
    use crate::gather::{ClientHost, Plan};

    /// A router whose peers are the clusters' configurations: it routes without upstreams.
    fn unconnected(config: &Config) -> Router<Cluster> {
        Router::new(config, &config.clusters)
    }

    fn gathered(zone: &str, scheme: Scheme) -> Route<Cluster> {
        let zone = name(zone);
        let naming = Arc::new(Naming { zone, scheme });
        match scheme {
            Scheme::Prefix => Route::Distributed(naming),
            Scheme::Clusterset => Route::Clusterset(naming),
        }
    }

    fn config() -> Config {
        let clusters = "a= cidr=10.8.0.0/16 namespaces=crdb-us; b=10.9.0.1 cidr=10.9.0.0/16 namespaces=crdb-eu,crdb-eu-2";
        let zones = [
            (
                "MESHDNS_DISTRIBUTED_ZONES",
                "distributed.local,mesh.example",
            ),
            ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
        ];
        with_local("a", clusters, &zones).unwrap()
    }

    fn router() -> Router<Cluster> {
        unconnected(&config())
    }

    /// The cluster named `name` of `config`.
    fn named(config: &Config, name: &str) -> Cluster {
        (config.clusters.iter())
            .find(|c| c.name == name)
            .unwrap()
            .clone()
    }

    /// The cluster named `name` of [`config`].
    fn peer(name: &str) -> Cluster {
        named(&config(), name)
    }

    /// The route `router` gives the name `text`.
    fn route_in(router: &Router<Cluster>, text: &str) -> Route<Cluster> {
        router.route(&name(text).to_bytes().unwrap()).into_owned()
    }

    fn route(name: &str) -> Route<Cluster> {
        route_in(&router(), name)
    }

    #[test]
    fn the_rows_are_the_table_in_the_order_routing_tries_it() {
        let rows: Vec<String> = (router().rows())
            .map(|row| match row {
                Row::Own(own) => format!("{} self", own.name),
                Row::Zone(zone, route) => format!("{zone} {}", route.kind().label()),
                Row::Network(network, route) => format!("{network} {}", route.kind().label()),
            })
            .collect();
        // The local cluster's claims (crdb-us, 10.8.0.0/16) route nowhere new: no rows.
        assert_eq!(
            rows,
            [
                "cluster.a. cluster",
                "cluster.b. cluster",
                "distributed.local. distributed",
                "mesh.example. distributed",
                "clusterset.local. clusterset",
                "crdb-eu.svc.cluster.local. namespace",
                "crdb-eu-2.svc.cluster.local. namespace",
                "10.9.0.0/16 reverse",
            ]
        );
    }

    #[test]
    fn cluster_zones_match_on_label_boundaries_ignoring_case() {
        let b = Route::Cluster(peer("b"));
        assert_eq!(route("member-4.foo.ns.cluster.b."), b);
        assert_eq!(route("MEMBER-4.Foo.NS.Cluster.B."), b);
        assert_eq!(route("cluster.b."), b);
        assert_eq!(route("x.notcluster.b."), Route::Passthrough);
        assert_eq!(route("x.cluster.bb."), Route::Passthrough);
        assert_eq!(route("x.cluster.c."), Route::Passthrough);
    }

    #[test]
    fn the_local_cluster_has_a_zone_too() {
        assert_eq!(
            route("mongo-0.mongo.db.cluster.a."),
            Route::Cluster(peer("a"))
        );
    }

    #[test]
    fn every_zone_routes_its_own_names() {
        // Zones never nest (the configuration refuses it): a namespace `deep` of cluster b is
        // cluster b's, whatever zones exist.
        assert_eq!(route("x.deep.cluster.b."), Route::Cluster(peer("b")));
        assert_eq!(
            route("x.mesh.example."),
            gathered("mesh.example.", Scheme::Prefix)
        );
        assert_eq!(
            route("_mongodb._tcp.mongo.db.svc.Distributed.Local."),
            gathered("distributed.local.", Scheme::Prefix)
        );
        assert_eq!(
            route("x.clusterset.local."),
            gathered("clusterset.local.", Scheme::Clusterset)
        );
        assert_eq!(route("example.com."), Route::Passthrough);
        assert_eq!(route("."), Route::Passthrough);
    }

    #[test]
    fn a_peers_namespace_and_everything_under_it_go_to_that_peer() {
        let b = Route::Namespace(peer("b"));
        assert_eq!(
            route("cockroachdb-0.cockroachdb.crdb-eu.svc.cluster.local."),
            b
        );
        assert_eq!(route("CRDB-EU-2.svc.Cluster.Local."), b);
        assert_eq!(route("x.crdb-eu-3.svc.cluster.local."), Route::Passthrough);
        assert_eq!(route("x.crdb-us.svc.cluster.local."), Route::Passthrough);
        assert_eq!(route("crdb-eu.cluster.local."), Route::Passthrough);
    }

    #[test]
    fn reverse_names_of_a_peers_addresses_go_to_that_peer() {
        assert_eq!(route("4.1.9.10.in-addr.arpa."), Route::Reverse(peer("b")));
        assert_eq!(route("4.1.8.10.in-addr.arpa."), Route::Passthrough);
        assert_eq!(route("9.10.in-addr.arpa."), Route::Passthrough);
        assert_eq!(route("4.1.7.10.in-addr.arpa."), Route::Passthrough);
    }

    #[test]
    fn the_pods_own_names_win_over_their_zones_and_only_exact_names_match() {
        let config = config_from(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1"),
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_HOSTNAME", "mongo-0"),
            ("MESHDNS_POD_SUBDOMAIN", "mongo"),
            ("MESHDNS_POD_NAMESPACE", "db"),
        ])
        .unwrap();
        let router = unconnected(&config);
        let route = |name: &str| route_in(&router, name);
        let own = |i: usize| Route::SelfName(Arc::new(config.own_names()[i].clone()));
        assert_eq!(route("mongo-0.mongo.db.svc.cluster.local."), own(0));
        assert_eq!(route("MONGO-0.mongo.db.Cluster.A."), own(1));
        assert_eq!(route("a-mongo-0.mongo.db.svc.distributed.local."), own(2));
        assert_eq!(route("2.1.8.10.in-addr.arpa."), own(3));
        let a = || Route::Cluster(named(&config, "a"));
        assert_eq!(route("mongo-1.mongo.db.cluster.a."), a());
        assert_eq!(route("x.mongo-0.mongo.db.cluster.a."), a());
        assert_eq!(
            route("b-mongo-0.mongo.db.svc.distributed.local."),
            gathered("distributed.local.", Scheme::Prefix)
        );
        assert_eq!(
            route("mongo-1.mongo.db.svc.cluster.local."),
            Route::Passthrough
        );
        assert_eq!(route("3.1.8.10.in-addr.arpa."), Route::Passthrough);
    }

    #[test]
    fn search_expansions_of_zone_names_route_to_search_and_zones_keep_theirs() {
        let config = crate::search::tests::pod_config();
        let router = unconnected(&config);
        let route = |name: &str| route_in(&router, name);
        let search = Route::Search(Arc::new(name("cluster.local.")));
        assert_eq!(
            route("mongo-4.mongo.db.cluster.b.db.svc.cluster.local."),
            search
        );
        assert_eq!(
            route("a-mongo-0.mongo.db.svc.distributed.local.cluster.local."),
            search
        );
        assert_eq!(
            route("mongo-4.mongo.db.cluster.b."),
            Route::Cluster(named(&config, "b"))
        );
        assert_eq!(
            route("mongo-4.mongo.db.cluster.b.example.com."),
            Route::Passthrough
        );
        assert_eq!(
            route("mongo-0.mongo.db.svc.cluster.local."),
            Route::Passthrough
        );
        assert_eq!(RouteKind::Search.label(), "search");
    }

    #[test]
    fn of_nested_zones_the_longest_wins_wherever_it_is_in_the_table() {
        // The configuration keeps meshdns's zones side by side; the table itself does not
        // rely on it. Here b's zone (first in the table) holds its namespace's (last).
        let config = config();
        let mut b = named(&config, "b");
        b.zone = Name::from_ascii("svc.cluster.local.").unwrap();
        let router = Router::new(&config, std::slice::from_ref(&b));
        assert_eq!(
            route_in(&router, "db.CRDB-EU.svc.cluster.local."),
            Route::Namespace(b.clone())
        );
        assert_eq!(
            route_in(&router, "db.crdb-eu-3.svc.cluster.local."),
            Route::Cluster(b)
        );
    }

    #[test]
    fn a_label_that_contains_the_zone_bytes_does_not_match() {
        // The label "\x07cluster\x01b" inside another label must not be taken for the zone.
        let mut tricky = vec![11u8];
        tricky.extend_from_slice(b"\x07cluster\x01b\x00");
        tricky.push(0);
        assert_eq!(*router().route(&tricky), Route::Passthrough);
    }

    /// One cluster of a generated mesh: its name, an explicit `prefix=` or none, and its domain.
    #[derive(Debug, Clone)]
    struct Member {
        name: String,
        prefix: Option<String>,
        domain: &'static str,
    }

    /// Names and prefixes from a small alphabet, so that generated meshes often nest (`b` and
    /// `b-b`, `prefix=a-` and a cluster `a-b`) and zones often collide with domains or each
    /// other: what validation must refuse, next to what it accepts.
    fn member() -> impl Strategy<Value = Member> {
        (
            "[ab](-[ab]){0,2}",
            proptest::option::of("[ab]{1,2}-"),
            prop_oneof![
                Just("cluster.local"),
                Just("west.example"),
                Just("b.west.example")
            ],
        )
            .prop_map(|(name, prefix, domain)| Member {
                name,
                prefix,
                domain,
            })
    }

    /// A host of a member as its cluster names it, relative to the domain: a pod of a headless
    /// Service, or the Service itself (the SRV target of a ClusterIP Service); some begin like
    /// a prefix.
    fn relative_host() -> impl Strategy<Value = String> {
        (
            prop_oneof![Just(""), Just("a-"), Just("b-"), Just("b-b-"), Just("a-b-")],
            "[a-z0-9]{1,4}",
            prop_oneof![Just(".db.db.svc"), Just(".db.svc")],
        )
            .prop_map(|(start, rest, under)| format!("{start}{rest}{under}"))
    }

    /// The configuration of `members` (the first is local) with the zone settings, when
    /// validation accepts it.
    fn accepted(
        members: &[Member],
        template: &str,
        distributed: &str,
        clusterset: Option<&str>,
    ) -> Option<Config> {
        let entries: Vec<String> = (members.iter().enumerate())
            .map(|(index, m)| {
                let endpoint = if index == 0 { "" } else { "127.0.0.1:9" };
                let prefix = m
                    .prefix
                    .as_ref()
                    .map_or(String::new(), |p| format!(" prefix={p}"));
                format!("{}={endpoint} domain={}{prefix}", m.name, m.domain)
            })
            .collect();
        let mut vars = vec![
            ("MESHDNS_UPSTREAMS".to_string(), "127.0.0.1:9".to_string()),
            ("MESHDNS_LOCAL_CLUSTER".into(), members[0].name.clone()),
            ("MESHDNS_CLUSTERS".into(), entries.join("; ")),
            ("MESHDNS_CLUSTER_ZONE".into(), template.into()),
            ("MESHDNS_DISTRIBUTED_ZONES".into(), distributed.into()),
            ("MESHDNS_ADMIN_LISTEN".into(), String::new()),
        ];
        if let Some(zone) = clusterset {
            vars.push(("MESHDNS_CLUSTERSET_ZONE".into(), zone.into()));
        }
        Config::from_vars(vars).ok()
    }

    proptest! {
        #![proptest_config(property(512))]

        /// docs/design.md: "every SRV target meshdns writes resolves back through meshdns to
        /// the addresses it came from". For every mesh that validation accepts, each target
        /// written for a member of any cluster routes to its distributed zone, and that zone
        /// sends it to the cluster it came from, as the name it has there: prefix routing is
        /// unambiguous.
        #[test]
        fn in_every_accepted_mesh_each_written_target_routes_back_to_its_cluster(
            members in proptest::collection::vec(member(), 1..5),
            template in prop_oneof![Just("cluster.{name}"), Just("{name}.west.example"), Just("{name}")],
            distributed in prop_oneof![
                Just("distributed.local"),
                Just("distributed.local,mesh.example"),
                Just("local"),
                Just("cluster.a"),
                Just("example"),
                Just("a.b"),
            ],
            clusterset in proptest::option::of(prop_oneof![Just("clusterset.local"), Just("west.example"), Just("b")]),
            hosts in proptest::collection::vec(relative_host(), 1..4),
        ) {
            let Some(config) = accepted(&members, template, distributed, clusterset) else {
                return Ok(()); // refused: not a configuration meshdns runs with
            };
            let router = unconnected(&config);
            for zone in &config.distributed_zones {
                let naming = Naming { zone: zone.clone(), scheme: Scheme::Prefix };
                for cluster in &config.clusters {
                    for relative in &hosts {
                        let there = Name::from_ascii(relative)
                            .and_then(|name| name.append_domain(&cluster.domain))
                            .unwrap();
                        let target = match naming.client_host(&there, cluster) {
                            ClientHost::InZone(target) => target,
                            // A prefixed label longer than DNS allows is never written.
                            ClientHost::TooLong => continue,
                            ClientHost::Elsewhere => {
                                return Err(TestCaseError::fail(format!("{there} is under {}", cluster.domain)));
                            }
                        };
                        let wire = target.to_bytes().unwrap();
                        prop_assert_eq!(
                            router.route(&wire).into_owned(),
                            Route::Distributed(Arc::new(naming.clone())),
                            "{} of cluster {}", target, cluster.name
                        );
                        let plan = naming.plan(&target, RecordType::A, &config.clusters);
                        let Plan::Ask { legs, .. } = plan else {
                            return Err(TestCaseError::fail(format!("{target}: {plan:?}")));
                        };
                        prop_assert_eq!(legs.len(), 1, "{} of cluster {}", target, cluster.name);
                        prop_assert_eq!(
                            &legs[0].0, cluster,
                            "{} of cluster {} goes to {}", target, cluster.name, legs[0].0.name
                        );
                        prop_assert!(legs[0].1.eq_ignore_root(&there), "{} asked as {}", target, legs[0].1);
                    }
                }
            }
        }
    }
}
