//! The injection rules, one test per rule of docs/injection.md's tables: what a pod gets, what
//! of its own is kept, which pods are left as they are (with or without a warning), and that no
//! shape of input panics. The HTTPS side and the comparison with the Component are
//! tests/webhook's.

use serde_json::{Value, json};

use super::*;

const TARGET: Target = Target {
    image: "example/meshdns:1",
    cluster_domain: "cluster.local",
    namespace: "db",
};

fn pod(spec: Value) -> Value {
    json!({"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": spec})
}

fn plain() -> Value {
    pod(json!({"containers": [{"name": "app", "image": "app"}]}))
}

fn op<'a>(ops: &'a [Value], path: &str) -> Option<&'a Value> {
    ops.iter().find(|o| o["path"] == path).map(|o| &o["value"])
}

#[test]
fn a_plain_pod_gets_the_sidecar_first_dns_none_the_sysctl_and_the_volume() {
    let ops = patch(&plain(), &TARGET).unwrap();
    assert!(ops.iter().all(|o| o["op"] == "add"));
    assert_eq!(op(&ops, "/spec/dnsPolicy"), Some(&json!("None")));
    let dns = op(&ops, "/spec/dnsConfig").unwrap();
    assert_eq!(dns["nameservers"], json!(["127.0.0.1"]));
    assert_eq!(
        dns["searches"],
        json!(["db.svc.cluster.local", "svc.cluster.local", "cluster.local"])
    );
    assert_eq!(
        dns["options"],
        json!([{"name": "ndots", "value": "5"}, {"name": "edns0"}])
    );
    let sysctls = &op(&ops, "/spec/securityContext").unwrap()["sysctls"];
    assert_eq!(sysctls, &json!([{"name": PORT_SYSCTL, "value": "53"}]));
    let init = &op(&ops, "/spec/initContainers").unwrap()[0];
    assert_eq!(init["name"], "meshdns");
    assert_eq!(init["image"], "example/meshdns:1");
    assert_eq!(init["restartPolicy"], "Always");
    assert_eq!(init["startupProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(
        init["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    assert_eq!(
        op(&ops, "/spec/volumes").unwrap()[0]["name"],
        "meshdns-config"
    );
    assert_eq!(
        op(&ops, "/metadata/annotations").unwrap()[INJECTED_ANNOTATION],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        op(&ops, "/metadata/labels/meshdns~1sidecar"),
        Some(&json!("true"))
    );
}

#[test]
fn existing_lists_and_maps_are_added_to_not_replaced() {
    let mut pod = plain();
    pod["metadata"]["annotations"] = json!({"a": "b"});
    pod["spec"]["initContainers"] = json!([{"name": "init", "image": "i"}]);
    pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    pod["spec"]["securityContext"] =
        json!({"runAsUser": 1000, "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]});
    let ops = patch(&pod, &TARGET).unwrap();
    assert!(op(&ops, "/metadata/annotations/meshdns~1injected").is_some());
    assert_eq!(
        op(&ops, "/spec/initContainers/0").unwrap()["name"],
        "meshdns"
    );
    assert_eq!(
        op(&ops, "/spec/volumes/-").unwrap()["name"],
        "meshdns-config"
    );
    let sysctl = op(&ops, "/spec/securityContext/sysctls/-").unwrap();
    assert_eq!(sysctl["name"], PORT_SYSCTL);
    assert!(op(&ops, "/spec/securityContext").is_none());
}

#[test]
fn a_security_context_without_sysctls_gets_the_list() {
    let mut pod = plain();
    pod["spec"]["securityContext"] = json!({"fsGroup": 999});
    let ops = patch(&pod, &TARGET).unwrap();
    let sysctls = op(&ops, "/spec/securityContext/sysctls").unwrap();
    assert_eq!(sysctls[0]["value"], "53");
}

#[test]
fn the_pods_own_dns_options_and_searches_are_kept() {
    let mut pod = plain();
    pod["spec"]["dnsConfig"] = json!({
        "options": [{"name": "ndots", "value": "2"}, {"name": "single-request-reopen"}],
        "searches": ["svc.cluster.local", "corp.example"],
        "nameservers": ["10.0.0.53"],
    });
    let dns = op(&patch(&pod, &TARGET).unwrap(), "/spec/dnsConfig")
        .cloned()
        .unwrap();
    assert_eq!(
        dns["options"],
        json!([{"name": "ndots", "value": "2"}, {"name": "single-request-reopen"}, {"name": "edns0"}])
    );
    assert_eq!(
        dns["searches"],
        json!([
            "db.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example"
        ])
    );
    assert_eq!(dns["nameservers"], json!(["127.0.0.1"]));
}

#[test]
fn a_pod_sysctl_keeping_port_53_privileged_gives_the_sidecar_net_bind_service() {
    let mut pod = plain();
    pod["spec"]["securityContext"] = json!({"sysctls": [{"name": PORT_SYSCTL, "value": "1024"}]});
    let ops = patch(&pod, &TARGET).unwrap();
    assert!(
        !ops.iter()
            .any(|o| o["path"].as_str().unwrap().contains("sysctls"))
    );
    let caps = &op(&ops, "/spec/initContainers").unwrap()[0]["securityContext"]["capabilities"];
    assert_eq!(caps, &json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}));
    pod["spec"]["securityContext"]["sysctls"][0]["value"] = "0".into();
    let ops = patch(&pod, &TARGET).unwrap();
    let caps = &op(&ops, "/spec/initContainers").unwrap()[0]["securityContext"]["capabilities"];
    assert_eq!(caps, &json!({"drop": ["ALL"]}));
}

#[test]
fn excluded_pods_are_skipped_without_a_warning() {
    let mut opted_out = plain();
    opted_out["metadata"]["annotations"] = json!({"meshdns/inject": "false"});
    let mut injected = plain();
    injected["metadata"]["annotations"] = json!({"meshdns/injected": "0.1.0"});
    let mut by_hand = plain();
    by_hand["spec"]["initContainers"] = json!([{"name": "meshdns", "image": "m"}]);
    let mut own = plain();
    own["metadata"]["labels"] = json!({"app.kubernetes.io/name": "meshdns-webhook"});
    for (pod, skip) in [
        (opted_out, Skip::OptedOut),
        (injected, Skip::AlreadyInjected),
        (by_hand, Skip::CarriesSidecar),
        (own, Skip::OwnPod),
    ] {
        assert_eq!(patch(&pod, &TARGET), Err(skip.clone()));
        assert_eq!(skip.warning(), None);
    }
    let system = Target {
        namespace: "kube-system",
        ..TARGET
    };
    assert_eq!(patch(&plain(), &system), Err(Skip::ExcludedNamespace));
}

#[test]
fn pods_that_cannot_be_injected_are_skipped_with_a_warning() {
    let mut host = plain();
    host["spec"]["hostNetwork"] = true.into();
    let mut with_host_net = plain();
    with_host_net["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet".into();
    let mut dns_server = plain();
    dns_server["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 53, "protocol": "UDP"}]);
    let mut metrics_name = plain();
    metrics_name["spec"]["containers"][0]["ports"] =
        json!([{"name": "meshdns-metrics", "containerPort": 9000}]);
    let mut volume = plain();
    volume["spec"]["volumes"] = json!([{"name": "meshdns-config", "emptyDir": {}}]);
    for (pod, label) in [
        (host, "host_network"),
        (with_host_net, "dns_policy"),
        (dns_server, "conflict"),
        (metrics_name, "conflict"),
        (volume, "conflict"),
    ] {
        let skip = patch(&pod, &TARGET).unwrap_err();
        assert_eq!(skip.label(), label);
        assert!(
            skip.warning()
                .unwrap()
                .starts_with("meshdns sidecar not injected: ")
        );
    }
}

#[test]
fn slashes_and_tildes_in_keys_are_escaped() {
    assert_eq!(escape("meshdns/injected"), "meshdns~1injected");
    assert_eq!(escape("a~b/c"), "a~0b~1c");
}

#[test]
fn odd_shapes_never_panic() {
    for spec in [
        json!({"containers": "nope", "volumes": 3, "securityContext": []}),
        json!({"containers": [1, null, {"ports": "x"}], "dnsConfig": "x"}),
        json!({"initContainers": [{"ports": [{"containerPort": "53"}]}]}),
    ] {
        let _ = patch(&pod(spec), &TARGET);
    }
    let _ = patch(&json!([]), &TARGET);
    let _ = patch(&json!({"metadata": 5, "spec": {}}), &TARGET);
}
