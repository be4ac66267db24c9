//! The zone table's rules: meshdns's zones (each cluster zone the template makes, each
//! distributed zone, the clusterset zone) must each have one meaning, and must leave the
//! cluster domains to kube-dns.
//!
//! Refused, each naming the variable, the zone and what it collides with:
//! - one zone with two routes (routing would depend on the table's order);
//! - a zone equal to, under or above a cluster domain (`MESHDNS_CLUSTER_DOMAIN` or any
//!   cluster's `domain=`), and so `svc.<domain>` too: a distributed zone `local` would swallow
//!   `kubernetes.default.svc.cluster.local`, a cluster zone `b.cluster.local` the names of a
//!   namespace `b`;
//! - two zones of which one contains the other. The routing table's longest match decides
//!   which route a name takes, but never what the name meant: under a cluster zone every name
//!   is a Kubernetes name (`deep.cluster.b` is namespace `deep` of cluster b), and under a
//!   gathered zone every name is asked of the clusters as it is, so an inner zone always hides
//!   names the outer one serves. No nesting is unambiguous, so none is accepted.
//!
//! Every check walks each name's ancestors against a set, so validation stays linear in the
//! number of clusters.
//!
//! It only refuses: it parses no zone (the kinds and the parent's parse do) and builds no route
//! (the routing table is `route`'s, built from the zones that passed here).

use std::collections::HashMap;

use hickory_proto::rr::Name;

use super::variables::{CLUSTER_DOMAIN, CLUSTER_ZONE, CLUSTERSET_ZONE, DISTRIBUTED_ZONES};
use super::{Cluster, ConfigError};

/// Where a zone or a domain comes from, for the messages.
#[derive(Debug, Clone)]
struct Origin {
    variable: &'static str,
    /// How an operator finds it: `the zone of cluster b`, `domain= of cluster b`.
    what: String,
}

/// Refuses a zone table that cannot be meant (see the module's list).
pub(super) fn check_zones(
    cluster_domain: &Name,
    clusters: &[Cluster],
    distributed: &[Name],
    clusterset: Option<&Name>,
) -> Result<(), ConfigError> {
    // In order, for a deterministic message; the maps find a name in constant time.
    let mut domains: Vec<(&Name, String)> = vec![(cluster_domain, CLUSTER_DOMAIN.to_string())];
    let mut domain_of: HashMap<&Name, usize> = HashMap::from([(cluster_domain, 0)]);
    for cluster in clusters {
        if !domain_of.contains_key(&cluster.domain) {
            domain_of.insert(&cluster.domain, domains.len());
            domains.push((
                &cluster.domain,
                format!("domain= of cluster {}", cluster.name),
            ));
        }
    }
    let origin = |variable, what| Origin { variable, what };
    let named = (clusters.iter())
        .map(|c| {
            let what = format!("the zone of cluster {}", c.name);
            (&c.zone, origin(CLUSTER_ZONE, what))
        })
        .chain(distributed.iter().map(|z| {
            let what = format!("a distributed zone ({DISTRIBUTED_ZONES})");
            (z, origin(DISTRIBUTED_ZONES, what))
        }))
        .chain(clusterset.map(|z| {
            let what = format!("the clusterset zone ({CLUSTERSET_ZONE})");
            (z, origin(CLUSTERSET_ZONE, what))
        }));
    let mut zones: Vec<(&Name, Origin)> = Vec::new();
    let mut zone_of: HashMap<&Name, usize> = HashMap::new();
    for (zone, origin) in named {
        if let Some(&other) = zone_of.get(zone) {
            return Err(refusal(
                zone,
                &origin,
                format!("is also {}", zones[other].1.what),
            ));
        }
        for ancestor in ancestors(zone) {
            if let Some(&domain) = domain_of.get(&ancestor) {
                let source = &domains[domain].1;
                let how = if ancestor == *zone { "is" } else { "lies in" };
                return Err(refusal(
                    zone,
                    &origin,
                    format!(
                        "{how} the cluster domain {} ({source}): in-cluster names would be routed here instead of to kube-dns; choose a zone outside every cluster domain",
                        ancestor.to_ascii()
                    ),
                ));
            }
        }
        zone_of.insert(zone, zones.len());
        zones.push((zone, origin));
    }
    for (domain, source) in &domains {
        for ancestor in ancestors(domain).skip(1) {
            if let Some(&outer) = zone_of.get(&ancestor) {
                let (zone, origin) = &zones[outer];
                return Err(refusal(
                    zone,
                    origin,
                    format!(
                        "contains the cluster domain {} ({source}): every in-cluster name (kubernetes.default.svc.{}) would be routed here instead of to kube-dns; choose a zone outside every cluster domain",
                        domain.to_ascii(),
                        domain.to_ascii()
                    ),
                ));
            }
        }
    }
    for (zone, origin) in &zones {
        for ancestor in ancestors(zone).skip(1) {
            if let Some(&outer) = zone_of.get(&ancestor) {
                return Err(refusal(
                    zone,
                    origin,
                    format!(
                        "lies in {} ({}): its names would never reach the outer zone's route, which serves them too; give meshdns's zones names side by side (e.g. cluster.{{name}}, distributed.local, clusterset.local)",
                        zones[outer].1.what,
                        ancestor.to_ascii()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn refusal(zone: &Name, origin: &Origin, reason: String) -> ConfigError {
    ConfigError::new(
        origin.variable,
        &zone.to_ascii(),
        format!("({}) {reason}", origin.what),
    )
}

/// `name` itself, then each zone above it up to the top-level domain.
fn ancestors(name: &Name) -> impl Iterator<Item = Name> {
    std::iter::successors(Some(name.clone()), |n| Some(n.base_name())).take_while(|n| !n.is_root())
}
