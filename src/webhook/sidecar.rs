//! The meshdns sidecar as the webhook injects it: the same container, volume, pod label and
//! DNS options as the kustomize Component's k8s/components/sidecar/sidecar.yaml (the comments
//! there say why each field is what it is; the webhook's tests compare the two). Data only: the
//! `inject` module decides where it goes.

use serde_json::{Value, json};

/// The sidecar container's name (a pod carrying one is left as it is).
pub const CONTAINER: &str = "meshdns";
/// The configuration volume (the two ConfigMaps of the Component, projected).
pub const VOLUME: &str = "meshdns-config";
/// The pod label the monitoring component's PodMonitor selects.
pub const LABEL: &str = "meshdns/sidecar";
pub const METRICS_PORT: u16 = 9153;
pub const METRICS_PORT_NAME: &str = "meshdns-metrics";

/// The Component's dnsConfig options, for those the pod does not set itself.
pub fn dns_options() -> [Value; 2] {
    [
        json!({"name": "ndots", "value": "5"}),
        json!({"name": "edns0"}),
    ]
}

/// The native sidecar container. `net_bind_service`: the pod keeps port 53 privileged with a
/// sysctl of its own, so the container gets the one capability restricted pods may add.
pub fn container(image: &str, net_bind_service: bool) -> Value {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let probe = |path: &str, period: u32| json!({"httpGet": {"path": path, "port": METRICS_PORT_NAME}, "periodSeconds": period});
    let mut startup = probe("/readyz", 1);
    startup["failureThreshold"] = 30.into();
    startup["timeoutSeconds"] = 1.into();
    let mut readiness = probe("/readyz", 10);
    readiness["timeoutSeconds"] = 1.into();
    let mut liveness = probe("/livez", 10);
    liveness["failureThreshold"] = 3.into();
    liveness["timeoutSeconds"] = 2.into();
    let mut capabilities = json!({"drop": ["ALL"]});
    if net_bind_service {
        capabilities["add"] = json!(["NET_BIND_SERVICE"]);
    }
    json!({
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "env": [
            {"name": "MESHDNS_CONFIG_DIR", "value": "/etc/meshdns"},
            {"name": "MESHDNS_ADMIN_LISTEN", "value": format!("0.0.0.0:{METRICS_PORT}")},
            {"name": "MESHDNS_POD_IP", "valueFrom": field("status.podIP")},
            {"name": "MESHDNS_POD_IPS", "valueFrom": field("status.podIPs")},
            {"name": "MESHDNS_POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
        ],
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "startupProbe": startup,
        "readinessProbe": readiness,
        "livenessProbe": liveness,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false,
            "capabilities": capabilities,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": VOLUME, "mountPath": "/etc/meshdns", "readOnly": true}],
    })
}

/// The configuration volume: the fixed-name ConfigMaps `meshdns-clusters` and `meshdns-local`.
pub fn volume() -> Value {
    json!({
        "name": VOLUME,
        "projected": {"sources": [
            {"configMap": {"name": "meshdns-clusters"}},
            {"configMap": {"name": "meshdns-local"}},
        ]},
    })
}
