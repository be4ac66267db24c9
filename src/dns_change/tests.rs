//! One test per rule of `dns-change`: the zones come from the configuration, each platform's
//! artifact forwards them to the resolver, a second run changes nothing, a conflict is refused.

use super::*;
use crate::config::tests::config_from;

const RESOLVER: &str = "10.96.0.53";

fn config() -> Config {
    config_from(&[
        ("MESHDNS_CLUSTERS", "a=10.8.0.1; b=10.9.0.1"),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
    ])
    .unwrap()
}

fn run(platform: Platform, current: Option<&str>) -> Result<String, ChangeError> {
    generate(&config(), platform, RESOLVER.parse().unwrap(), current)
}

#[test]
fn the_zones_are_every_cluster_zone_the_distributed_zones_and_the_clusterset_zone() {
    assert_eq!(
        owned_zones(&config()),
        [
            "cluster.a",
            "cluster.b",
            "distributed.local",
            "clusterset.local"
        ]
    );
}

#[test]
fn platform_names_parse_and_an_unknown_one_lists_them() {
    assert_eq!(Platform::parse("rke2"), Ok(Platform::Rke2));
    let error = Platform::parse("minikube").unwrap_err();
    assert!(error.contains("kubeadm, k3s, rke2, eks, aks, gke, gke-autopilot, openshift"));
}

#[test]
fn the_cluster_dns_itself_is_refused_as_the_resolver() {
    let error = generate(&config(), Platform::K3s, "127.0.0.1".parse().unwrap(), None);
    assert!(matches!(error, Err(ChangeError::ResolverIsClusterDns(_))));
}

#[test]
fn merging_platforms_need_the_current_configuration() {
    assert_eq!(
        run(Platform::Kubeadm, None),
        Err(ChangeError::NeedsCurrent("kubeadm"))
    );
    assert_eq!(
        run(Platform::Eks, None),
        Err(ChangeError::NeedsCurrent("eks"))
    );
}

#[test]
fn eks_configuration_values_carry_the_merged_corefile_as_one_json_string() {
    let stock = ".:53 {\n    forward . /etc/resolv.conf\n}\n";
    let out = run(Platform::Eks, Some(stock)).unwrap();
    let value: Value = serde_json::from_str(&out).unwrap();
    let Some(Value::String(corefile)) = value.get("corefile") else {
        panic!("{out}")
    };
    assert!(corefile.starts_with(stock));
    assert!(
        corefile.contains("cluster.b:53 {\n    errors\n    cache 30\n    forward . 10.96.0.53\n}")
    );
    assert_eq!(run(Platform::Eks, Some(corefile.as_str())).unwrap(), out);
}

#[test]
fn k3s_and_aks_get_the_blocks_as_a_coredns_custom_server_key() {
    for platform in [Platform::K3s, Platform::Aks] {
        let out = run(platform, Some(".:53 {\n}\nimport custom/*.server\n")).unwrap();
        assert!(out.contains("  name: coredns-custom\n  namespace: kube-system\n"));
        assert!(out.contains("  meshdns.server: |\n    # meshdns: begin"));
        assert!(out.contains("    clusterset.local:53 {\n        errors\n"));
    }
}

#[test]
fn an_import_platform_whose_corefile_imports_nothing_is_refused() {
    assert_eq!(
        run(Platform::K3s, Some(".:53 {\n}\n")),
        Err(ChangeError::NoImport)
    );
}

#[test]
fn rke2_adds_a_file_and_its_import_through_the_charts_values() {
    let out = run(Platform::Rke2, None).unwrap();
    assert!(out.contains("kind: HelmChartConfig\nmetadata:\n  name: rke2-coredns\n"));
    assert!(out.contains("          cluster.a:53 {\n"));
    assert!(out.contains(
        "    extraConfig:\n      import:\n        parameters: /etc/coredns/meshdns.server\n"
    ));
    let conflict = run(Platform::Rke2, Some("cluster.a {\n}\n"));
    assert!(matches!(conflict, Err(ChangeError::Conflict { .. })));
}

#[test]
fn gke_stub_domains_keep_the_operators_and_replace_meshdns_own() {
    let stock = r#"{"corp.example": ["10.20.0.2"]}"#;
    let once = run(Platform::Gke, Some(stock)).unwrap();
    assert!(once.contains("      \"corp.example\": [\"10.20.0.2\"],\n"));
    assert!(once.contains("      \"cluster.a\": [\"10.96.0.53\"],\n"));
    let json = once.split_once("stubDomains: |\n").unwrap().1;
    assert_eq!(run(Platform::Gke, Some(json)).unwrap(), once);
}

#[test]
fn a_gke_stub_domain_of_an_owned_zone_elsewhere_is_refused() {
    let error = run(Platform::Gke, Some(r#"{"cluster.b": ["10.9.0.9"]}"#)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains(r#"stubDomains "cluster.b" (["10.9.0.9"]) serves cluster.b"#)
    );
}

#[test]
fn gke_autopilot_is_refused_saying_the_sidecar_is_the_way() {
    let error = run(Platform::GkeAutopilot, None).unwrap_err();
    assert!(error.to_string().contains("sidecar"));
}

#[test]
fn openshift_servers_keep_the_operators_and_hold_one_meshdns_entry() {
    let stock = r#"[{"name": "corp", "zones": ["corp.example"], "forwardPlugin": {"upstreams": ["10.20.0.2"]}}]"#;
    let once = run(Platform::OpenShift, Some(stock)).unwrap();
    let servers: Value = serde_json::from_str(&once).unwrap();
    let servers = servers.get("spec").and_then(|s| s.get("servers")).unwrap();
    let Value::Array(items) = servers else {
        panic!("{once}")
    };
    assert_eq!(items.len(), 2);
    assert_eq!(strings(items[1].get("zones").unwrap()).len(), 4);
    let again = run(Platform::OpenShift, Some(&servers.to_string())).unwrap();
    assert_eq!(again, once);
}

#[test]
fn an_openshift_server_for_an_owned_zone_is_refused_by_name() {
    let stock = r#"[{"name": "old", "zones": ["distributed.local"]}]"#;
    let error = run(Platform::OpenShift, Some(stock)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains(r#"spec.servers "old" serves distributed.local"#)
    );
}
