//! Routing: which way a query name goes. Zones match on label boundaries and ignore case;
//! the longest matching zone wins; a name under none of them passes through to kube-dns.
//!
//! Routing works on the wire form of the question name, so the cache-hit path can route a
//! query (for its metric label) without parsing the message.

use hickory_proto::rr::Name;

use crate::config::Config;
use crate::search::SearchList;
use crate::wire;

/// Where a query goes. Indexes point into `Config::clusters` / `Config::distributed_zones`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Not one of ours: forwarded verbatim to the local cluster DNS.
    Passthrough,
    /// Under cluster `clusters[i]`'s zone: rewritten and asked of that cluster.
    Cluster(usize),
    /// Under `distributed_zones[i]`: gathered from every cluster (gathersrv naming).
    Distributed(usize),
    /// Under the clusterset zone (Kubernetes MCS naming).
    Clusterset,
    /// A search-list expansion of a meshdns name (`….cluster.b.svc.cluster.local`), which
    /// cannot exist: NXDOMAIN with the SOA of cluster domain `i` of the [`SearchList`].
    Search(usize),
}

impl Route {
    /// What kind of route this is: the metric label.
    pub fn kind(self) -> RouteKind {
        match self {
            Route::Passthrough => RouteKind::Passthrough,
            Route::Cluster(_) => RouteKind::Cluster,
            Route::Distributed(_) => RouteKind::Distributed,
            Route::Clusterset => RouteKind::Clusterset,
            Route::Search(_) => RouteKind::Search,
        }
    }
}

/// A [`Route`] without its index: the `route` label of the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    Passthrough,
    Cluster,
    Distributed,
    Clusterset,
    Search,
}

impl RouteKind {
    pub const ALL: [RouteKind; 5] = [
        RouteKind::Passthrough,
        RouteKind::Cluster,
        RouteKind::Distributed,
        RouteKind::Clusterset,
        RouteKind::Search,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RouteKind::Passthrough => "passthrough",
            RouteKind::Cluster => "cluster",
            RouteKind::Distributed => "distributed",
            RouteKind::Clusterset => "clusterset",
            RouteKind::Search => "search",
        }
    }
}

/// The zone table: each zone's lowercase wire form and its route; and the search-list
/// expansions of those zones.
#[derive(Debug, Clone)]
pub struct Router {
    zones: Vec<(Vec<u8>, Route)>,
    search: SearchList,
}

impl Router {
    pub fn new(config: &Config) -> Self {
        let named = config
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (&c.zone, Route::Cluster(i)))
            .chain(
                config
                    .distributed_zones
                    .iter()
                    .enumerate()
                    .map(|(i, z)| (z, Route::Distributed(i))),
            )
            .chain(
                config
                    .clusterset_zone
                    .iter()
                    .map(|z| (z, Route::Clusterset)),
            );
        let named: Vec<(&Name, Route)> = named.collect();
        Self {
            zones: (named.iter())
                .map(|(zone, route)| (wire::lowercase_name(zone.iter()), *route))
                .collect(),
            search: SearchList::new(config, named.iter().map(|(zone, _)| *zone)),
        }
    }

    /// The route of a question name in wire form (uncompressed labels ending in the root).
    /// Label starts are tried left to right, so the first zone found is the longest match; a
    /// name under no zone may still be a search-list expansion of one.
    pub fn route(&self, name: &[u8]) -> Route {
        let mut expansion = None;
        let mut may_expand = self.search.may_expand(name);
        wire::find_suffix(name, |suffix| {
            let zone = (self.zones.iter())
                .find(|(zone, _)| zone.eq_ignore_ascii_case(suffix))
                .map(|(_, route)| *route);
            if zone.is_none() && may_expand {
                expansion = self.search.expansion(name, name.len() - suffix.len());
                may_expand = expansion.is_none();
            }
            zone
        })
        .or(expansion.map(Route::Search))
        .unwrap_or(Route::Passthrough)
    }

    /// The search-list expansions this router answers ([`Route::Search`]).
    pub fn search(&self) -> &SearchList {
        &self.search
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::serialize::binary::BinEncodable;

    use super::*;
    use crate::config::tests::config_from;

    fn router() -> Router {
        let config = config_from(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1"),
            (
                "MESHDNS_DISTRIBUTED_ZONES",
                "distributed.local,deep.cluster.b",
            ),
            ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
        ])
        .unwrap();
        Router::new(&config)
    }

    fn route(name: &str) -> Route {
        router().route(&Name::from_ascii(name).unwrap().to_bytes().unwrap())
    }

    #[test]
    fn cluster_zones_match_on_label_boundaries_ignoring_case() {
        assert_eq!(route("member-4.foo.ns.cluster.b."), Route::Cluster(1));
        assert_eq!(route("MEMBER-4.Foo.NS.Cluster.B."), Route::Cluster(1));
        assert_eq!(route("cluster.b."), Route::Cluster(1));
        assert_eq!(route("x.notcluster.b."), Route::Passthrough);
        assert_eq!(route("x.cluster.bb."), Route::Passthrough);
        assert_eq!(route("x.cluster.c."), Route::Passthrough);
    }

    #[test]
    fn the_local_cluster_has_a_zone_too() {
        assert_eq!(route("mongo-0.mongo.db.cluster.a."), Route::Cluster(0));
    }

    #[test]
    fn the_longest_zone_wins() {
        assert_eq!(route("x.deep.cluster.b."), Route::Distributed(1));
        assert_eq!(
            route("_mongodb._tcp.mongo.db.svc.Distributed.Local."),
            Route::Distributed(0)
        );
        assert_eq!(route("x.clusterset.local."), Route::Clusterset);
        assert_eq!(route("example.com."), Route::Passthrough);
        assert_eq!(route("."), Route::Passthrough);
    }

    #[test]
    fn search_expansions_of_zone_names_route_to_search_and_zones_keep_theirs() {
        let router = Router::new(&crate::search::tests::pod_config());
        let route = |name: &str| router.route(&Name::from_ascii(name).unwrap().to_bytes().unwrap());
        assert_eq!(
            route("mongo-4.mongo.db.cluster.b.db.svc.cluster.local."),
            Route::Search(0)
        );
        assert_eq!(
            route("a-mongo-0.mongo.db.svc.distributed.local.cluster.local."),
            Route::Search(0)
        );
        assert_eq!(route("mongo-4.mongo.db.cluster.b."), Route::Cluster(1));
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
    fn a_label_that_contains_the_zone_bytes_does_not_match() {
        // The label "\x07cluster\x01b" inside another label must not be taken for the zone.
        let mut tricky = vec![11u8];
        tricky.extend_from_slice(b"\x07cluster\x01b\x00");
        tricky.push(0);
        assert_eq!(router().route(&tricky), Route::Passthrough);
    }
}
