//! `meshdns dns-change`: the change that makes a platform's cluster DNS send meshdns's zones to
//! the cluster-level resolver, built from the same [`Config`] that serves queries.
//!
//! The zones are exactly those meshdns owns (every cluster zone, the distributed zones, the
//! clusterset zone), each forwarded to the resolver's Service IP. Each [`Platform`] takes the
//! change its own way (a merged Corefile, a `coredns-custom` ConfigMap, a HelmChartConfig, the
//! EKS add-on's `configurationValues`, kube-dns `stubDomains`, the OpenShift DNS operator's
//! `spec.servers`), and each merge with what the platform holds now is idempotent: what meshdns
//! wrote before is replaced, never duplicated; a zone that the operator already serves, or one
//! overlapping it, is refused with its place named; every other line is kept. Everything here is
//! text in, text out: `main` reads the files and prints the result.
//!
//! It owns each platform's way of taking the change; which zones are meshdns's is the
//! configuration's, and the Corefile's structure is the `corefile` module's.

pub(crate) mod corefile;

use std::net::IpAddr;

use crate::config::Config;
use serde_json::{Value, json};

/// Why no change was generated; `main` prints it and exits 64, like a configuration error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("--current: line {line}: {reason}")]
    Syntax { line: usize, reason: String },
    #[error("--current: {0}")]
    Json(String),
    #[error(
        "--current: {place} serves {zone}, which overlaps {owned}, a zone meshdns owns: remove it \
         (or that zone from meshdns's configuration) first"
    )]
    Conflict {
        place: String,
        zone: String,
        owned: String,
    },
    #[error(
        "--current imports no `*.server` file at its top level, so coredns-custom would be \
         ignored: use --platform kubeadm to merge into the Corefile itself"
    )]
    NoImport,
    #[error("--platform {0} merges into what the platform holds now: give it with --current FILE")]
    NeedsCurrent(&'static str),
    #[error(
        "--resolver {0} is the cluster's DNS (MESHDNS_UPSTREAMS): it would forward meshdns's zones \
         to itself; give the Service IP of the cluster-level resolver"
    )]
    ResolverIsClusterDns(IpAddr),
    #[error(
        "gke-autopilot: Autopilot takes no change to kube-dns or Cloud DNS from the cluster \
         (\"For Autopilot clusters, you cannot modify the default kube-dns configuration\"): run \
         meshdns as a sidecar in the pods that need its names (docs/platforms.md, GKE Autopilot)"
    )]
    NoClusterDnsChange,
}

/// The platforms whose cluster DNS `dns-change` knows, by the name `--platform` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Kubeadm,
    K3s,
    Rke2,
    Eks,
    Aks,
    Gke,
    GkeAutopilot,
    OpenShift,
}

impl Platform {
    pub(crate) const ALL: [(&'static str, Platform); 8] = [
        ("kubeadm", Platform::Kubeadm),
        ("k3s", Platform::K3s),
        ("rke2", Platform::Rke2),
        ("eks", Platform::Eks),
        ("aks", Platform::Aks),
        ("gke", Platform::Gke),
        ("gke-autopilot", Platform::GkeAutopilot),
        ("openshift", Platform::OpenShift),
    ];

    /// `Err` lists the names there are.
    pub fn parse(name: &str) -> Result<Platform, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown platform {name:?}: one of {}", names.join(", "))
            })
    }

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("", |(n, _)| n)
    }
}

/// The zones meshdns owns, as CoreDNS and the platforms write them (lowercase, no trailing
/// dot): every cluster zone in `MESHDNS_CLUSTERS` order, the distributed zones, the clusterset
/// zone. The namespace zones of `namespaces=` are not among them: they lie under the cluster
/// domain, which kube-dns serves itself.
pub(crate) fn owned_zones(config: &Config) -> Vec<String> {
    let clusters = config.clusters.iter().map(|c| &c.zone);
    clusters
        .chain(&config.distributed_zones)
        .chain(&config.clusterset_zone)
        .map(|zone| zone.to_ascii().trim_end_matches('.').to_ascii_lowercase())
        .collect()
}

/// The platform's change for `config`'s zones, forwarded to `resolver`, merged into `current`
/// (what the platform holds now: a Corefile, or the JSON of GKE's `stubDomains` or OpenShift's
/// `spec.servers`).
pub fn generate(
    config: &Config,
    platform: Platform,
    resolver: IpAddr,
    current: Option<&str>,
) -> Result<String, ChangeError> {
    if config.upstreams.iter().any(|u| u.ip() == resolver) {
        return Err(ChangeError::ResolverIsClusterDns(resolver));
    }
    let owned = owned_zones(config);
    let resolver = resolver.to_string();
    let region = corefile::region(&owned, &resolver);
    let merged = |p: Platform| {
        let current = current.ok_or(ChangeError::NeedsCurrent(p.name()))?;
        corefile::merge(current, &region, &owned)
    };
    match platform {
        Platform::Kubeadm => merged(platform),
        Platform::Eks => Ok(format!(
            "{{\"corefile\": {}}}\n",
            Value::from(merged(platform)?)
        )),
        Platform::K3s | Platform::Aks => {
            check_imported(current, &owned)?;
            Ok(coredns_custom(platform, &region))
        }
        Platform::Rke2 => {
            if let Some(text) = current {
                corefile::check_conflicts(&corefile::parse(text)?, &owned)?;
            }
            Ok(helm_chart_config(&region))
        }
        Platform::Gke => stub_domains(current, &owned, &resolver),
        Platform::GkeAutopilot => Err(ChangeError::NoClusterDnsChange),
        Platform::OpenShift => dns_operator_servers(current, &owned, &resolver),
    }
}

/// With the current Corefile given: it imports `*.server` files, and serves none of `owned`.
fn check_imported(current: Option<&str>, owned: &[String]) -> Result<(), ChangeError> {
    let Some(text) = current else { return Ok(()) };
    let parsed = corefile::parse(text)?;
    corefile::check_conflicts(&parsed, owned)?;
    if !parsed.imports.iter().any(|i| i.ends_with("*.server")) {
        return Err(ChangeError::NoImport);
    }
    Ok(())
}

/// `text` as a YAML literal block, each line indented by `indent` spaces.
fn literal_block(text: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    text.lines().map(|line| format!("{pad}{line}\n")).collect()
}

/// k3s and AKS: the key `meshdns.server` of the ConfigMap `coredns-custom`, which their
/// Corefiles import with `import …/custom/*.server`.
fn coredns_custom(platform: Platform, region: &str) -> String {
    format!(
        "# meshdns's zones for the `import custom/*.server` of {} CoreDNS. Generated by\n\
         # `meshdns dns-change --platform {}`; apply with server-side apply, which keeps the\n\
         # ConfigMap's other keys: kubectl apply --server-side --field-manager=meshdns -f FILE\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns-custom\n  namespace: kube-system\n  \
         labels:\n    app.kubernetes.io/part-of: meshdns\ndata:\n  meshdns.server: |\n{}",
        platform.name(),
        platform.name(),
        literal_block(region, 4)
    )
}

/// RKE2: the rke2-coredns chart's own values, so that a chart upgrade keeps the change: the
/// blocks as a file of the chart's ConfigMap (`zoneFiles`, mounted in /etc/coredns) and a
/// top-level `import` of it (`extraConfig`); the chart's `servers` stay as they are.
fn helm_chart_config(region: &str) -> String {
    format!(
        "# meshdns's zones for RKE2's CoreDNS, through the rke2-coredns chart's values. Generated by\n\
         # `meshdns dns-change --platform rke2`. If a HelmChartConfig rke2-coredns exists, add these\n\
         # values to its valuesContent instead of replacing it.\n\
         apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\nmetadata:\n  name: rke2-coredns\n  \
         namespace: kube-system\nspec:\n  valuesContent: |-\n    zoneFiles:\n      \
         - filename: meshdns.server\n        domain: meshdns\n        contents: |\n{}    \
         extraConfig:\n      import:\n        parameters: /etc/coredns/meshdns.server\n",
        literal_block(region, 10)
    )
}

/// A JSON setting given by `--current`; blank text is a setting not present yet.
fn parse_json(current: Option<&str>) -> Result<Option<Value>, ChangeError> {
    match current.filter(|text| !text.trim().is_empty()) {
        None => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|error| ChangeError::Json(error.to_string())),
    }
}

/// The strings of a JSON array (none when it is not one).
fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The entries of a JSON object setting (none when absent).
fn object_entries(current: Option<&str>) -> Result<Vec<(String, Value)>, ChangeError> {
    match parse_json(current)? {
        None => Ok(Vec::new()),
        Some(Value::Object(entries)) => Ok(entries.into_iter().collect()),
        Some(_) => Err(ChangeError::Json(
            "stubDomains is not a JSON object".to_string(),
        )),
    }
}

/// GKE Standard: kube-dns's `stubDomains`, each of meshdns's zones to the resolver. An entry
/// for one of them that already names exactly the resolver is meshdns's own, and replaced.
fn stub_domains(
    current: Option<&str>,
    owned: &[String],
    resolver: &str,
) -> Result<String, ChangeError> {
    let mut kept = Vec::new();
    for (domain, servers) in object_entries(current)? {
        let zone = corefile::zone_of_key(&domain);
        if owned.contains(&zone) && strings(&servers) == [resolver] {
            continue;
        }
        let place = || format!("stubDomains {domain:?} ({servers})");
        corefile::check_zones(place, &[zone], owned)?;
        kept.push((domain, servers));
    }
    kept.extend(owned.iter().map(|zone| (zone.clone(), json!([resolver]))));
    let entries: Vec<String> = kept
        .iter()
        .map(|(domain, servers)| format!("      {}: {servers}", Value::from(domain.as_str())))
        .collect();
    Ok(format!(
        "# meshdns's zones as kube-dns stub domains (GKE Standard). Generated by\n\
         # `meshdns dns-change --platform gke`, merged with the stubDomains given by --current.\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-dns\n  namespace: kube-system\n  \
         labels:\n    addonmanager.kubernetes.io/mode: EnsureExists\ndata:\n  stubDomains: |\n    \
         {{\n{}\n    }}\n",
        entries.join(",\n")
    ))
}

/// The name of meshdns's entry in OpenShift's `spec.servers`: replaced on every run.
const OPENSHIFT_SERVER: &str = "meshdns";

/// OpenShift: the DNS operator's `spec.servers`, as a merge patch (which replaces the list, so
/// it carries the operator's other servers too).
fn dns_operator_servers(
    current: Option<&str>,
    owned: &[String],
    resolver: &str,
) -> Result<String, ChangeError> {
    let servers = match parse_json(current)? {
        None => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ChangeError::Json(
                "spec.servers is not a JSON array".to_string(),
            ));
        }
    };
    let mut kept = Vec::new();
    for server in servers {
        let name = server
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name == OPENSHIFT_SERVER {
            continue;
        }
        let zones = server.get("zones").map(strings).unwrap_or_default();
        let zones: Vec<String> = zones.into_iter().map(corefile::zone_of_key).collect();
        corefile::check_zones(|| format!("spec.servers {name:?}"), &zones, owned)?;
        kept.push(server);
    }
    kept.push(json!({
        "name": OPENSHIFT_SERVER,
        "zones": owned,
        "forwardPlugin": {"upstreams": [resolver]},
    }));
    let lines: Vec<String> = kept.iter().map(|server| format!("  {server}")).collect();
    Ok(format!(
        "{{\"spec\": {{\"servers\": [\n{}\n]}}}}\n",
        lines.join(",\n")
    ))
}

#[cfg(test)]
mod tests;
