//! The meshdns sidecar as the webhook injects it: the same container, volume, pod label and
//! DNS options as the kustomize Component's k8s/components/sidecar/sidecar.yaml (the comments
//! there say why each field is what it is; the webhook's tests compare the two). Data only: the
//! `inject` module decides where it goes.

use serde_json::{Value, json};

/// The sidecar container's name (a pod carrying one is left as it is).
pub(crate) const CONTAINER: &str = "meshdns";
/// The configuration volume (the two ConfigMaps of the Component, projected).
pub(crate) const VOLUME: &str = "meshdns-config";
/// The pod label the monitoring component's PodMonitor selects.
pub(crate) const LABEL: &str = "meshdns/sidecar";
pub(crate) const METRICS_PORT: u16 = 9153;
pub(crate) const METRICS_PORT_NAME: &str = "meshdns-metrics";

/// The Component's dnsConfig options, for those the pod does not set itself.
pub(crate) fn dns_options() -> [Value; 2] {
    [
        json!({"name": "ndots", "value": "5"}),
        json!({"name": "edns0"}),
    ]
}

/// The container without its image: the Component's, written once as JSON (read at each
/// injection: a template in the binary is far smaller than the code that would build it).
const CONTAINER_TEMPLATE: &str = r#"{
  "name": "meshdns",
  "image": "",
  "imagePullPolicy": "IfNotPresent",
  "restartPolicy": "Always",
  "env": [
    {"name": "MESHDNS_CONFIG_DIR", "value": "/etc/meshdns"},
    {"name": "MESHDNS_ADMIN_LISTEN", "value": "0.0.0.0:9153"},
    {"name": "MESHDNS_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "MESHDNS_POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
    {"name": "MESHDNS_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
  ],
  "ports": [{"name": "meshdns-metrics", "containerPort": 9153, "protocol": "TCP"}],
  "startupProbe": {"httpGet": {"path": "/readyz", "port": "meshdns-metrics"},
                   "periodSeconds": 1, "failureThreshold": 30, "timeoutSeconds": 1},
  "readinessProbe": {"httpGet": {"path": "/readyz", "port": "meshdns-metrics"},
                     "periodSeconds": 10, "timeoutSeconds": 1},
  "livenessProbe": {"httpGet": {"path": "/livez", "port": "meshdns-metrics"},
                    "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 2},
  "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
  "securityContext": {
    "runAsNonRoot": true,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "readOnlyRootFilesystem": true,
    "allowPrivilegeEscalation": false,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"}
  },
  "volumeMounts": [{"name": "meshdns-config", "mountPath": "/etc/meshdns", "readOnly": true}]
}"#;

/// The native sidecar container. `net_bind_service`: the pod keeps port 53 privileged with a
/// sysctl of its own, so the container gets the one capability restricted pods may add.
pub(crate) fn container(image: &str, net_bind_service: bool) -> Value {
    // The template is a constant that a unit test parses: it is always an object.
    let mut container: Value = serde_json::from_str(CONTAINER_TEMPLATE).unwrap_or_default();
    container["image"] = image.into();
    if net_bind_service {
        container["securityContext"]["capabilities"]["add"] = json!(["NET_BIND_SERVICE"]);
    }
    container
}

/// The configuration volume: the fixed-name ConfigMaps `meshdns-clusters` and `meshdns-local`.
pub(crate) fn volume() -> Value {
    json!({
        "name": VOLUME,
        "projected": {"sources": [
            {"configMap": {"name": "meshdns-clusters"}},
            {"configMap": {"name": "meshdns-local"}},
        ]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_template_is_an_object_with_the_names_the_rules_use() {
        let container = container("m:1", false);
        assert_eq!(container["name"], CONTAINER);
        assert_eq!(container["image"], "m:1");
        assert_eq!(container["ports"][0]["name"], METRICS_PORT_NAME);
        assert_eq!(container["ports"][0]["containerPort"], METRICS_PORT);
        assert_eq!(container["volumeMounts"][0]["name"], VOLUME);
    }
}
