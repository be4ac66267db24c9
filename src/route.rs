//! Routing: which way a query name goes. Zones match on label boundaries and ignore case;
//! the longest matching zone wins; a name under none of them passes through to kube-dns.

use hickory_proto::rr::Name;

use crate::config::Config;

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
}

impl Route {
    /// The metric label of the route.
    pub fn label(self) -> &'static str {
        match self {
            Route::Passthrough => "passthrough",
            Route::Cluster(_) => "cluster",
            Route::Distributed(_) => "distributed",
            Route::Clusterset => "clusterset",
        }
    }
}

/// The zone table, longest zone first so the first match is the longest.
#[derive(Debug, Clone)]
pub struct Router {
    zones: Vec<(Name, Route)>,
}

impl Router {
    pub fn new(config: &Config) -> Self {
        let mut zones: Vec<(Name, Route)> = config
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (c.zone.clone(), Route::Cluster(i)))
            .chain(
                config
                    .distributed_zones
                    .iter()
                    .enumerate()
                    .map(|(i, z)| (z.clone(), Route::Distributed(i))),
            )
            .chain(
                config
                    .clusterset_zone
                    .iter()
                    .map(|z| (z.clone(), Route::Clusterset)),
            )
            .collect();
        zones.sort_by_key(|(zone, _)| std::cmp::Reverse(zone.num_labels()));
        Self { zones }
    }

    /// The route of a (fully qualified) query name.
    pub fn route(&self, name: &Name) -> Route {
        self.zones
            .iter()
            .find(|(zone, _)| zone.zone_of(name))
            .map_or(Route::Passthrough, |(_, route)| *route)
    }
}

#[cfg(test)]
mod tests {
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
        router().route(&Name::from_ascii(name).unwrap())
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
    }
}
