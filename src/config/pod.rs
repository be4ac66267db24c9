//! The pod's identity (docs/design.md, "The pod's own names"): its addresses from the downward
//! API (`MESHDNS_POD_IP`, `MESHDNS_POD_IPS`), and its hostname, subdomain and namespace from the
//! line the kubelet writes for it in the pod's hosts file
//! (`10.8.1.2<TAB>mongo-0.mongo.db.svc.cluster.local<TAB>mongo-0`), each of them overridden by
//! `MESHDNS_POD_HOSTNAME`, `MESHDNS_POD_SUBDOMAIN` and `MESHDNS_POD_NAMESPACE` when set — and the
//! exact names that identity answers to ([`Config::own_names`]).
//!
//! A variable that is set but wrong is a configuration error like any other (exit 64). An
//! identity that cannot be completed is not: without an address, or without a hosts line for
//! the pod (a pod without `spec.subdomain`), the own names are just not answered locally, and
//! [`PodIdentity::Off`] says why (logged once at startup, shown by `--check`).
//!
//! Nothing here changes during a pod's life (its IPs, hostname, subdomain and namespace are
//! fixed until it is deleted), so the identity is read once, at startup. It reads no file: the
//! hosts file is read by the loader (`Sources::load`) and handed in. It owns the identity and
//! the list of own names; answering them is the `own_names` module's, routing to them `route`'s.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use hickory_proto::rr::Name;

use super::kind::Values;
use super::values::is_dns_label;
use super::variables::{
    CLUSTERS, HOSTS_FILE, POD_HOSTNAME, POD_IP, POD_IPS, POD_NAMES, POD_NAMESPACE, POD_SUBDOMAIN,
};
use super::{Cluster, Config, ConfigError, Settings, set, value};

/// Who this pod is, when meshdns knows enough to answer its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodIdentity {
    /// The own names are not answered locally (they go wherever their zone routes them): why,
    /// and the pod's addresses when they are known all the same (meshdns's own addresses).
    Off {
        why: String,
        ips: Vec<IpAddr>,
    },
    On(Pod),
}

impl PodIdentity {
    /// The pod's addresses (`MESHDNS_POD_IP`, `MESHDNS_POD_IPS`), empty when unset.
    pub(crate) fn ips(&self) -> &[IpAddr] {
        match self {
            PodIdentity::Off { ips, .. } => ips,
            PodIdentity::On(pod) => &pod.ips,
        }
    }
}

/// A pod that has DNS names: `HOSTNAME.SUBDOMAIN.NAMESPACE.svc.DOMAIN` and the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pod {
    pub(crate) hostname: String,
    pub(crate) subdomain: String,
    pub(crate) namespace: String,
    /// `MESHDNS_POD_IP` first, then the rest of `MESHDNS_POD_IPS`, without repeats.
    pub(crate) ips: Vec<IpAddr>,
    /// The hosts file, when some part of the identity came from it.
    pub(crate) hosts_file: Option<PathBuf>,
}

/// One name the pod answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnName {
    pub(crate) name: Name,
    /// The zone whose SOA goes with a negative answer (NODATA) for the name.
    pub(crate) zone: Name,
    pub(crate) data: OwnData,
}

/// What an own name holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnData {
    /// A forward name: the pod's addresses (A and AAAA).
    Addresses(Vec<IpAddr>),
    /// The reverse name of one of the pod's addresses: the pod's name (PTR).
    Pointer(Name),
}

/// What the hosts file says about the pod: the names on the lines of its addresses.
#[derive(Debug, Default, PartialEq, Eq)]
struct HostsLine {
    /// From the first `HOST.SUB.NS.svc.<domain>` name: hostname, subdomain, namespace.
    fqdn: Option<[String; 3]>,
    /// The first one-label name (what the kubelet writes for a pod without a subdomain).
    hostname: Option<String>,
    /// A `HOST.SUB.NS.svc.<other domain>` name, kept to say why it was not taken.
    other_domain: Option<String>,
}

/// The pod's identity from the values of `MESHDNS_POD_*` that parsed and the hosts file the
/// loader read (`hosts`), in the cluster domain `domain`; `None` when one of those values was
/// refused (its error is in `values`), so that nothing is cross-checked against it.
pub(super) fn pod_identity(
    values: &mut Values,
    settings: &Settings,
    hosts: Option<&std::io::Result<String>>,
    domain: &Name,
) -> Option<PodIdentity> {
    let [hostname, subdomain, namespace] = POD_NAMES.map(|variable| values.text(variable));
    let labels = [hostname?, subdomain?, namespace?];
    let ips = pod_ips(values, settings)?;
    Some(identity(settings, hosts, domain, ips, labels))
}

/// The pod's identity from its addresses (`ips`) and the labels set (`labels`: hostname,
/// subdomain, namespace), completed from the hosts file the loader read (`hosts`).
fn identity(
    settings: &Settings,
    hosts: Option<&std::io::Result<String>>,
    domain: &Name,
    ips: Vec<IpAddr>,
    [hostname, subdomain, namespace]: [Option<String>; 3],
) -> PodIdentity {
    if ips.is_empty() {
        return PodIdentity::Off {
            why: format!(
                "{POD_IP} and {POD_IPS} are unset (the sidecar component sets them from the downward API)"
            ),
            ips,
        };
    }
    let mut hosts_file = None;
    let path = Path::new(value(settings, HOSTS_FILE));
    // The loader reads the file only when one of the three variables is unset.
    let line = match hosts {
        None => HostsLine::default(),
        Some(Ok(text)) => {
            hosts_file = Some(path.to_path_buf());
            pod_line(text, &ips, domain)
        }
        Some(Err(error)) => {
            return PodIdentity::Off {
                why: format!(
                    "{} cannot be read ({error}), and {POD_HOSTNAME}, {POD_SUBDOMAIN} and {POD_NAMESPACE} are not all set",
                    path.display()
                ),
                ips,
            };
        }
    };
    let [from_host, from_sub, from_ns] = line
        .fqdn
        .clone()
        .map_or([None, None, None], |f| f.map(Some));
    let hostname = hostname.or(from_host).or_else(|| line.hostname.clone());
    let (subdomain, namespace) = (subdomain.or(from_sub), namespace.or(from_ns));
    match (hostname, subdomain, namespace) {
        (Some(hostname), Some(subdomain), Some(namespace)) => PodIdentity::On(Pod {
            hostname,
            subdomain,
            namespace,
            ips,
            // Read only when a variable was missing, so it supplied something.
            hosts_file,
        }),
        (hostname, subdomain, namespace) => {
            let missing: Vec<&str> = [
                (hostname.is_none(), POD_HOSTNAME),
                (subdomain.is_none(), POD_SUBDOMAIN),
                (namespace.is_none(), POD_NAMESPACE),
            ]
            .into_iter()
            .filter_map(|(missing, variable)| missing.then_some(variable))
            .collect();
            let shown: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
            let mut why = format!(
                "{} unset, and {} has no line for {} naming HOST.SUBDOMAIN.NAMESPACE.svc.{} (the kubelet writes one for a pod with spec.hostname and spec.subdomain, as every StatefulSet pod has)",
                missing.join(", "),
                value(settings, HOSTS_FILE),
                shown.join(" or "),
                domain.to_ascii().trim_end_matches('.'),
            );
            if let Some(other) = line.other_domain {
                why.push_str(&format!(
                    "; its name {other} is under another cluster domain: set MESHDNS_CLUSTER_DOMAIN (or the local cluster's domain=) to it"
                ));
            }
            PodIdentity::Off { why, ips }
        }
    }
}

/// Refuses a peer's `namespaces=` or `cidr=` that covers this pod's own namespace or one of
/// its addresses: the pod would answer its own name, but its siblings and its Services (same
/// namespace) or the reverse names of its network would be answered by the peer. The local
/// cluster's claims mean "stays with kube-dns" and may cover anything of the pod.
pub(super) fn check_peer_claims(
    settings: &Settings,
    identity: &PodIdentity,
    clusters: &[Cluster],
) -> Result<(), ConfigError> {
    let namespace = match identity {
        PodIdentity::On(pod) => Some(pod.namespace.as_str()),
        PodIdentity::Off { .. } => set(settings, POD_NAMESPACE),
    };
    for cluster in clusters.iter().filter(|c| !c.is_local) {
        let claimed = namespace.filter(|ns| {
            (cluster.namespaces.iter()).any(|zone| {
                zone.iter()
                    .next()
                    .is_some_and(|label| label == ns.as_bytes())
            })
        });
        if let Some(ns) = claimed {
            return Err(ConfigError::new(
                CLUSTERS,
                &format!("namespaces={ns}"),
                format!(
                    "of cluster {} is this pod's own namespace ({POD_NAMESPACE}): its siblings and Services would be answered by cluster {}; claim it on the local cluster's entry instead, or remove it from {}'s",
                    cluster.name, cluster.name, cluster.name
                ),
            ));
        }
        for ip in identity.ips() {
            let ip = ip.to_canonical();
            if let Some(network) = cluster.networks.iter().find(|n| n.contains(&ip)) {
                return Err(ConfigError::new(
                    CLUSTERS,
                    &format!("cidr={network}"),
                    format!(
                        "of cluster {} covers this pod's own address {ip} ({POD_IP}/{POD_IPS}): reverse names of this cluster's pods would be answered by cluster {}; give {} its own networks, and this cluster's to the local cluster's entry",
                        cluster.name, cluster.name, cluster.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `MESHDNS_POD_IP` and `MESHDNS_POD_IPS`: addresses of a pod, the first one among the others.
fn pod_ips(values: &mut Values, settings: &Settings) -> Option<Vec<IpAddr>> {
    let (first, all) = (values.ips(POD_IP)?, values.ips(POD_IPS)?);
    if let Some(first) = first.first()
        && !all.is_empty()
        && !all.contains(first)
    {
        values.check::<()>(Err(ConfigError::new(
            POD_IP,
            &first.to_string(),
            format!(
                "is not among {POD_IPS} ({}): status.podIP is always one of status.podIPs",
                value(settings, POD_IPS)
            ),
        )));
        return None;
    }
    let mut ips = first;
    for ip in all {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    Some(ips)
}

/// The names of the lines of `ips` in a hosts file (hosts(5): an address, then names, separated
/// by spaces or tabs; `#` starts a comment). The kubelet's line comes before any `hostAliases`
/// entry, so the first name of each shape wins.
fn pod_line(text: &str, ips: &[IpAddr], domain: &Name) -> HostsLine {
    let domain = domain.to_ascii().trim_end_matches('.').to_ascii_lowercase();
    let mut found = HostsLine::default();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut tokens = line.split_whitespace();
        let Some(ip) = tokens.next().and_then(|t| t.parse::<IpAddr>().ok()) else {
            continue;
        };
        if !ips.contains(&ip) {
            continue;
        }
        for name in tokens {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let labels: Vec<&str> = name.split('.').collect();
            match labels.as_slice() {
                [host] if found.hostname.is_none() && is_dns_label(host) => {
                    found.hostname = Some(host.to_string());
                }
                [host, sub, ns, "svc", rest @ ..]
                    if !rest.is_empty() && [host, sub, ns].iter().all(|l| is_dns_label(l)) =>
                {
                    if rest.join(".") != domain {
                        found.other_domain.get_or_insert(name.clone());
                    } else if found.fqdn.is_none() {
                        found.fqdn = Some([host, sub, ns].map(|l| l.to_string()));
                    }
                }
                _ => {}
            }
        }
    }
    found
}

impl Config {
    /// Every name the pod answers itself, in this order: `HOST.SUB.NS.svc.<domain>`; with a
    /// local cluster, `HOST.SUB.NS.<its zone>`, `<its prefix>HOST.SUB.NS.svc.<each distributed
    /// zone>` and `HOST.<its name>.SUB.NS.svc.<clusterset zone>`; then the reverse name of each
    /// address. Empty when the identity is off.
    ///
    /// The PTR of an own address is the cluster-zone name when there is a local cluster: the
    /// one name of the pod that resolves to it from every cluster (the `svc` name means another
    /// pod in another cluster), and the one a peer's reverse lookup of this pod gets. Without a
    /// local cluster it is the `svc` name.
    pub(crate) fn own_names(&self) -> Vec<OwnName> {
        let PodIdentity::On(pod) = &self.pod else {
            return Vec::new();
        };
        let (host, sub, ns) = (&pod.hostname, &pod.subdomain, &pod.namespace);
        let under = |relative: String, zone: &Name| {
            let name = Name::from_ascii(relative).ok()?.append_domain(zone).ok()?;
            Some(OwnName {
                name,
                zone: zone.clone(),
                data: OwnData::Addresses(pod.ips.clone()),
            })
        };
        let svc = under(format!("{host}.{sub}.{ns}.svc"), &self.domain);
        let local = self.local_cluster();
        let in_cluster = local.and_then(|local| under(format!("{host}.{sub}.{ns}"), &local.zone));
        let target = in_cluster
            .as_ref()
            .or(svc.as_ref())
            .map(|own| own.name.clone());
        let mut names: Vec<OwnName> = svc.into_iter().chain(in_cluster).collect();
        if let Some(local) = local {
            for zone in &self.distributed_zones {
                // A prefixed hostname longer than a label has no distributed name.
                names.extend(under(
                    format!("{}{host}.{sub}.{ns}.svc", local.prefix),
                    zone,
                ));
            }
            if let Some(zone) = &self.clusterset_zone {
                names.extend(under(format!("{host}.{}.{sub}.{ns}.svc", local.name), zone));
            }
        }
        if let Some(target) = target {
            for ip in &pod.ips {
                let zone = if ip.is_ipv4() {
                    "in-addr.arpa."
                } else {
                    "ip6.arpa."
                };
                names.extend(Name::from_ascii(zone).ok().map(|zone| OwnName {
                    name: Name::from(*ip),
                    zone,
                    data: OwnData::Pointer(target.clone()),
                }));
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::tests::Scratch;
    use crate::config::tests::{config_from, one_error, refused};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn cluster_local() -> Name {
        Name::from_ascii("cluster.local.").unwrap()
    }

    /// The hosts file the kubelet writes for a dual-stack pod with hostname and subdomain.
    const KUBELET_HOSTS: &str = "# Kubernetes-managed hosts file.\n\
        127.0.0.1\tlocalhost\n\
        ::1\tlocalhost ip6-localhost ip6-loopback\n\
        fe00::0\tip6-localnet\n\
        fe00::1\tip6-allnodes\n\
        10.8.1.2\tmongo-0.mongo.db.svc.cluster.local\tmongo-0\n\
        fd00::8:1:2\tmongo-0.mongo.db.svc.cluster.local\tmongo-0\n\
        \n\
        # Entries added by HostAliases.\n\
        10.8.1.2\tother.alias.db.svc.cluster.local\n";

    fn fqdn(host: &str, sub: &str, ns: &str) -> Option<[String; 3]> {
        Some([host, sub, ns].map(String::from))
    }

    #[test]
    fn the_kubelets_line_gives_hostname_subdomain_and_namespace() {
        let line = pod_line(KUBELET_HOSTS, &[ip("10.8.1.2")], &cluster_local());
        assert_eq!(line.fqdn, fqdn("mongo-0", "mongo", "db"));
        assert_eq!(line.hostname.as_deref(), Some("mongo-0"));
    }

    #[test]
    fn an_ipv6_line_is_found_by_its_address_however_it_is_written() {
        let line = pod_line(KUBELET_HOSTS, &[ip("fd00:0:0:0:0:8:1:2")], &cluster_local());
        assert_eq!(line.fqdn, fqdn("mongo-0", "mongo", "db"));
    }

    #[test]
    fn comments_blank_lines_and_other_addresses_are_skipped() {
        let text = "# 10.8.1.2 commented.out.db.svc.cluster.local\n\
            \n\
            not-an-address x.y.z.svc.cluster.local\n\
            10.8.1.3   sibling-1.mongo.db.svc.cluster.local sibling-1\n\
            \t 10.8.1.2  Mongo-0.Mongo.DB.svc.Cluster.Local.   mongo-0 # the pod\n";
        let line = pod_line(text, &[ip("10.8.1.2")], &cluster_local());
        assert_eq!(line.fqdn, fqdn("mongo-0", "mongo", "db"));
        assert_eq!(line.hostname.as_deref(), Some("mongo-0"));
    }

    #[test]
    fn several_names_on_a_line_the_first_fqdn_wins() {
        let text = "10.8.1.2 alias mongo-0.mongo.db.svc.cluster.local mongo-9.other.ns.svc.cluster.local\n";
        let line = pod_line(text, &[ip("10.8.1.2")], &cluster_local());
        assert_eq!(line.fqdn, fqdn("mongo-0", "mongo", "db"));
        assert_eq!(line.hostname.as_deref(), Some("alias"));
    }

    #[test]
    fn a_pod_without_subdomain_has_only_its_hostname_on_its_line() {
        let text = "127.0.0.1\tlocalhost\n10.8.1.2\tweb-7d9f\n";
        let line = pod_line(text, &[ip("10.8.1.2")], &cluster_local());
        assert_eq!(line.fqdn, None);
        assert_eq!(line.hostname.as_deref(), Some("web-7d9f"));
    }

    #[test]
    fn a_name_under_another_cluster_domain_is_not_taken() {
        let text = "10.8.1.2\tmongo-0.mongo.db.svc.k8s.example\tmongo-0\n";
        let line = pod_line(text, &[ip("10.8.1.2")], &cluster_local());
        assert_eq!(line.fqdn, None);
        assert_eq!(
            line.other_domain.as_deref(),
            Some("mongo-0.mongo.db.svc.k8s.example")
        );
    }

    /// A hosts file holding `text`, in a directory of `test`'s own (removed when dropped).
    fn hosts_file(test: &str, text: &str) -> (Scratch, String) {
        let dir = Scratch::new(test);
        let path = dir.file("hosts", text).display().to_string();
        (dir, path)
    }

    /// The identity `pairs` give, which must be complete.
    fn pod_on(pairs: &[(&str, &str)]) -> Pod {
        match config_from(pairs).unwrap().pod {
            PodIdentity::On(pod) => pod,
            PodIdentity::Off { why, .. } => panic!("the identity is off: {why}"),
        }
    }

    /// Why the identity `pairs` give is off.
    fn pod_off(pairs: &[(&str, &str)]) -> String {
        match config_from(pairs).unwrap().pod {
            PodIdentity::Off { why, .. } => why,
            PodIdentity::On(pod) => panic!("the identity is on: {pod:?}"),
        }
    }

    /// Hostname, subdomain and namespace.
    fn who(pod: &Pod) -> [&str; 3] {
        [&pod.hostname, &pod.subdomain, &pod.namespace].map(String::as_str)
    }

    #[test]
    fn the_identity_comes_from_the_hosts_file_and_the_pod_ips() {
        let (_dir, hosts) = hosts_file("pod-hosts", KUBELET_HOSTS);
        let pod = pod_on(&[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_IPS", "10.8.1.2,fd00::8:1:2"),
            ("MESHDNS_HOSTS_FILE", &hosts),
        ]);
        assert_eq!(who(&pod), ["mongo-0", "mongo", "db"]);
        assert_eq!(pod.ips, [ip("10.8.1.2"), ip("fd00::8:1:2")]);
        assert_eq!(pod.hosts_file, Some(PathBuf::from(&hosts)));
    }

    #[test]
    fn the_variables_override_what_the_hosts_file_says() {
        let (_dir, hosts) = hosts_file("pod-override", KUBELET_HOSTS);
        let pod = pod_on(&[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_NAMESPACE", "prod"),
            ("MESHDNS_POD_SUBDOMAIN", "rs0"),
            ("MESHDNS_HOSTS_FILE", &hosts),
        ]);
        assert_eq!(who(&pod), ["mongo-0", "rs0", "prod"]);
    }

    #[test]
    fn with_every_variable_set_no_hosts_file_is_needed() {
        let pod = pod_on(&[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_HOSTNAME", "mongo-0"),
            ("MESHDNS_POD_SUBDOMAIN", "mongo"),
            ("MESHDNS_POD_NAMESPACE", "db"),
            ("MESHDNS_HOSTS_FILE", "/nonexistent/hosts"),
        ]);
        assert_eq!(who(&pod), ["mongo-0", "mongo", "db"]);
        assert_eq!(pod.hosts_file, None);
    }

    #[test]
    fn without_a_line_for_the_pod_the_feature_is_off_and_says_why() {
        let (_dir, hosts) = hosts_file(
            "pod-no-line",
            "127.0.0.1\tlocalhost\n10.8.1.9\tsomeone-else\n",
        );
        let why = pod_off(&[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_HOSTS_FILE", &hosts),
        ]);
        assert!(
            why.contains(
                "MESHDNS_POD_HOSTNAME, MESHDNS_POD_SUBDOMAIN, MESHDNS_POD_NAMESPACE unset"
            ),
            "{why}"
        );
        assert!(why.contains(&hosts) && why.contains("10.8.1.2"), "{why}");
    }

    #[test]
    fn without_pod_ips_the_feature_is_off_and_nothing_is_read() {
        let why = pod_off(&[("MESHDNS_HOSTS_FILE", "/nonexistent/hosts")]);
        assert!(why.contains("MESHDNS_POD_IP"), "{why}");
    }

    #[test]
    fn an_unreadable_hosts_file_turns_the_feature_off() {
        let why = pod_off(&[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_HOSTS_FILE", "/nonexistent/hosts"),
        ]);
        assert!(why.contains("/nonexistent/hosts cannot be read"), "{why}");
    }

    #[test]
    fn a_pod_ip_that_is_not_an_ip_is_a_configuration_error() {
        for (variable, token) in [
            ("MESHDNS_POD_IP", "10.8.1"),
            ("MESHDNS_POD_IP", "mongo-0"),
            ("MESHDNS_POD_IP", "0.0.0.0"),
            ("MESHDNS_POD_IPS", "10.8.1.2,fd00::zz"),
        ] {
            let error = one_error(config_from(&[(variable, token)]));
            assert_eq!(error.variable, variable);
            assert!(
                token.contains(&error.token) && !error.token.is_empty(),
                "{error}"
            );
        }
        refused(
            config_from(&[("MESHDNS_POD_IPS", "10.8.1.2,fd00::zz")]),
            ("MESHDNS_POD_IPS", "fd00::zz"),
            &["status.podIPs"],
        );
    }

    #[test]
    fn a_pod_ip_outside_the_pod_ips_is_a_configuration_error() {
        refused(
            config_from(&[
                ("MESHDNS_POD_IP", "10.8.1.3"),
                ("MESHDNS_POD_IPS", "10.8.1.2,fd00::2"),
            ]),
            ("MESHDNS_POD_IP", "10.8.1.3"),
            &["is not among MESHDNS_POD_IPS"],
        );
    }

    #[test]
    fn an_invalid_hostname_subdomain_or_namespace_is_a_configuration_error() {
        for variable in [
            "MESHDNS_POD_HOSTNAME",
            "MESHDNS_POD_SUBDOMAIN",
            "MESHDNS_POD_NAMESPACE",
        ] {
            for bad in ["Mongo-0", "mongo.0", "-mongo", &"a".repeat(64)] {
                refused(
                    config_from(&[("MESHDNS_POD_IP", "10.8.1.2"), (variable, bad)]),
                    (variable, bad),
                    &["DNS label"],
                );
            }
        }
    }

    const IDENTITY: [(&str, &str); 4] = [
        ("MESHDNS_POD_IPS", "10.8.1.2,fd00::2"),
        ("MESHDNS_POD_HOSTNAME", "mongo-0"),
        ("MESHDNS_POD_SUBDOMAIN", "mongo"),
        ("MESHDNS_POD_NAMESPACE", "db"),
    ];

    /// The own names of the pod [`IDENTITY`] describes, with `more` variables set.
    fn names(more: &[(&str, &str)]) -> Vec<String> {
        let config = config_from(&[&IDENTITY[..], more].concat()).unwrap();
        config
            .own_names()
            .iter()
            .map(|own| match &own.data {
                OwnData::Addresses(_) => format!("{} ({})", own.name, own.zone),
                OwnData::Pointer(target) => format!("{} PTR {target} ({})", own.name, own.zone),
            })
            .collect()
    }

    #[test]
    fn the_own_names_are_one_per_zone_and_the_reverse_of_each_address() {
        let names = names(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1 domain=b.example"),
            (
                "MESHDNS_DISTRIBUTED_ZONES",
                "distributed.local,mesh.example",
            ),
            ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
        ]);
        assert_eq!(
            names,
            [
                "mongo-0.mongo.db.svc.cluster.local. (cluster.local.)",
                "mongo-0.mongo.db.cluster.a. (cluster.a.)",
                "a-mongo-0.mongo.db.svc.distributed.local. (distributed.local.)",
                "a-mongo-0.mongo.db.svc.mesh.example. (mesh.example.)",
                "mongo-0.a.mongo.db.svc.clusterset.local. (clusterset.local.)",
                "2.1.8.10.in-addr.arpa. PTR mongo-0.mongo.db.cluster.a. (in-addr.arpa.)",
                "2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. PTR mongo-0.mongo.db.cluster.a. (ip6.arpa.)",
            ]
        );
    }

    #[test]
    fn the_local_clusters_domain_and_prefix_are_the_pods() {
        let names = names(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a= domain=a.example prefix=east-"),
        ]);
        assert_eq!(names[0], "mongo-0.mongo.db.svc.a.example. (a.example.)");
        assert_eq!(
            names[2],
            "east-mongo-0.mongo.db.svc.distributed.local. (distributed.local.)"
        );
    }

    #[test]
    fn without_a_local_cluster_only_the_svc_name_and_its_reverse() {
        assert_eq!(
            names(&[])[..2],
            [
                "mongo-0.mongo.db.svc.cluster.local. (cluster.local.)",
                "2.1.8.10.in-addr.arpa. PTR mongo-0.mongo.db.svc.cluster.local. (in-addr.arpa.)",
            ]
        );
    }
}
