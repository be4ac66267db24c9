//! Whether a pod gets the meshdns sidecar, and the RFC 6902 JSON patch that adds it: exactly
//! what the kustomize Component (k8s/components/sidecar) adds to a pod template. It reads the
//! pod as a `serde_json::Value` and returns operations; it owns no I/O and no review framing
//! (the `review` module's), and never fails on a pod it does not understand: such a pod is
//! left as it is, with the reason.

use serde_json::{Map, Value, json};

use super::sidecar::{self, CONTAINER, METRICS_PORT, METRICS_PORT_NAME, VOLUME};

/// Pod annotation `meshdns/inject: "false"`: never inject this pod.
pub(crate) const OPT_OUT_ANNOTATION: &str = "meshdns/inject";
/// Pod annotation set on every injected pod, its value the meshdns version.
pub(crate) const INJECTED_ANNOTATION: &str = "meshdns/injected";
/// The label of the webhook's own pods (never injected).
pub(crate) const OWN_POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "meshdns-webhook");
/// The sysctl that lets the non-root sidecar bind port 53.
pub(crate) const PORT_SYSCTL: &str = "net.ipv4.ip_unprivileged_port_start";
const DNS_PORT: u64 = 53;
const EXCLUDED_NAMESPACES: [&str; 1] = ["kube-system"];

/// What the sidecar needs from the webhook's configuration and the review.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) image: &'a str,
    pub(crate) cluster_domain: &'a str,
    /// The review's namespace (a pod's own may be empty at admission).
    pub(crate) namespace: &'a str,
}

/// Why a pod is admitted as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Skip {
    /// `meshdns/inject: "false"`.
    OptedOut,
    /// Injected before (`meshdns/injected`), e.g. a reinvocation.
    AlreadyInjected,
    /// A container named `meshdns` is there already (added by hand or by the Component).
    CarriesSidecar,
    /// kube-system (also excluded by the webhook's namespaceSelector).
    ExcludedNamespace,
    /// The webhook's own pod.
    OwnPod,
    /// `hostNetwork: true`: port 53 there is the node's.
    HostNetwork,
    /// A dnsPolicy other than ClusterFirst: the pod chose its resolver.
    DnsPolicy(String),
    /// Something in the pod would collide with the sidecar (port 53, its metrics port or
    /// port name, its volume name).
    Conflict(String),
}

impl Skip {
    /// The warning the API server shows the pod's creator; `None` when the pod was left as it
    /// is by choice (opted out, excluded, injected already).
    pub(crate) fn warning(&self) -> Option<String> {
        let why = match self {
            Skip::OptedOut
            | Skip::AlreadyInjected
            | Skip::CarriesSidecar
            | Skip::ExcludedNamespace
            | Skip::OwnPod => return None,
            Skip::HostNetwork => "hostNetwork pods use the node's port 53".to_string(),
            Skip::DnsPolicy(policy) => {
                format!("dnsPolicy {policy}: the pod chose its own resolver")
            }
            Skip::Conflict(what) => what.clone(),
        };
        Some(format!(
            "meshdns sidecar not injected: {why}; the pod resolves through its own DNS settings"
        ))
    }

    /// A short word for logs.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Skip::OptedOut => "opted_out",
            Skip::AlreadyInjected => "already_injected",
            Skip::CarriesSidecar => "carries_sidecar",
            Skip::ExcludedNamespace => "excluded_namespace",
            Skip::OwnPod => "own_pod",
            Skip::HostNetwork => "host_network",
            Skip::DnsPolicy(_) => "dns_policy",
            Skip::Conflict(_) => "conflict",
        }
    }
}

/// The JSON patch that injects `pod`, or why it is left as it is.
pub(crate) fn patch(pod: &Value, target: &Target) -> Result<Vec<Value>, Skip> {
    check(pod, target)?;
    let spec = &pod["spec"];
    let mut ops = Vec::new();
    let version = Value::from(env!("CARGO_PKG_VERSION"));
    add_to_map(
        &mut ops,
        pod,
        "/metadata",
        "annotations",
        INJECTED_ANNOTATION,
        version,
    );
    add_to_map(
        &mut ops,
        pod,
        "/metadata",
        "labels",
        sidecar::LABEL,
        "true".into(),
    );
    ops.push(add("/spec/dnsPolicy", "None".into()));
    ops.push(add("/spec/dnsConfig", dns_config(spec, target)));
    let sysctl_set = port_sysctl(spec);
    if sysctl_set.is_none() {
        let sysctl = json!({"name": PORT_SYSCTL, "value": DNS_PORT.to_string()});
        add_to_list(
            &mut ops,
            spec,
            "/spec",
            "securityContext",
            "sysctls",
            sysctl,
        );
    }
    // A pod whose own sysctl keeps port 53 privileged: the capability instead.
    let needs_capability = sysctl_set.is_some_and(|start| start > DNS_PORT);
    let container = sidecar::container(target.image, needs_capability);
    match spec.get("initContainers").and_then(Value::as_array) {
        Some(_) => ops.push(add("/spec/initContainers/0", container)),
        None => ops.push(add("/spec/initContainers", json!([container]))),
    }
    match spec.get("volumes").and_then(Value::as_array) {
        Some(_) => ops.push(add("/spec/volumes/-", sidecar::volume())),
        None => ops.push(add("/spec/volumes", json!([sidecar::volume()]))),
    }
    Ok(ops)
}

/// The rules, in the order that gives the most useful reason.
fn check(pod: &Value, target: &Target) -> Result<(), Skip> {
    let metadata = &pod["metadata"];
    let label = |key: &str| metadata["labels"][key].as_str();
    let annotation = |key: &str| metadata["annotations"][key].as_str();
    if EXCLUDED_NAMESPACES.contains(&target.namespace) {
        return Err(Skip::ExcludedNamespace);
    }
    if label(OWN_POD_LABEL.0) == Some(OWN_POD_LABEL.1) {
        return Err(Skip::OwnPod);
    }
    if annotation(OPT_OUT_ANNOTATION) == Some("false") {
        return Err(Skip::OptedOut);
    }
    if annotation(INJECTED_ANNOTATION).is_some() {
        return Err(Skip::AlreadyInjected);
    }
    let spec = &pod["spec"];
    if containers(spec).any(|c| c["name"] == CONTAINER) {
        return Err(Skip::CarriesSidecar);
    }
    if spec["hostNetwork"] == true {
        return Err(Skip::HostNetwork);
    }
    match spec["dnsPolicy"].as_str() {
        None | Some("ClusterFirst") => {}
        Some(policy) => return Err(Skip::DnsPolicy(policy.to_string())),
    }
    conflicts(spec)
}

/// Every container of the pod: init, regular and ephemeral.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(|key| spec[key].as_array())
        .flatten()
}

/// A port, port name or volume of the pod that the sidecar's would collide with.
fn conflicts(spec: &Value) -> Result<(), Skip> {
    for container in containers(spec) {
        let name = container["name"].as_str().unwrap_or("?");
        for port in container["ports"].as_array().into_iter().flatten() {
            let number = port["containerPort"].as_u64();
            let taken = if number == Some(DNS_PORT) || port["hostPort"] == DNS_PORT {
                Some("port 53".to_string())
            } else if number == Some(u64::from(METRICS_PORT)) {
                Some(format!("port {METRICS_PORT} (the sidecar's metrics)"))
            } else if port["name"] == METRICS_PORT_NAME {
                Some(format!("the port name {METRICS_PORT_NAME}"))
            } else {
                None
            };
            if let Some(taken) = taken {
                return Err(Skip::Conflict(format!("container {name} uses {taken}")));
            }
        }
    }
    let volumes = spec["volumes"].as_array().into_iter().flatten();
    if volumes.into_iter().any(|v| v["name"] == VOLUME) {
        return Err(Skip::Conflict(format!("a volume is named {VOLUME}")));
    }
    Ok(())
}

/// The value of the pod's own `net.ipv4.ip_unprivileged_port_start`, when it sets one (an
/// unreadable value counts as the kernel default, 1024).
fn port_sysctl(spec: &Value) -> Option<u64> {
    let sysctls = spec["securityContext"]["sysctls"].as_array()?;
    let own = sysctls.iter().find(|s| s["name"] == PORT_SYSCTL)?;
    Some(
        own["value"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024),
    )
}

/// The pod's DNS settings under the sidecar: 127.0.0.1 only, the namespace's search list then
/// the pod's own extra domains, and the pod's own options with the Component's defaults
/// (ndots 5, edns0) for those it does not set.
fn dns_config(spec: &Value, target: &Target) -> Value {
    let own = &spec["dnsConfig"];
    let domain = target.cluster_domain;
    let mut searches: Vec<Value> = vec![
        format!("{}.svc.{domain}", target.namespace).into(),
        format!("svc.{domain}").into(),
        domain.into(),
    ];
    for extra in own["searches"].as_array().into_iter().flatten() {
        if !searches.contains(extra) {
            searches.push(extra.clone());
        }
    }
    let mut options: Vec<Value> = own["options"].as_array().cloned().unwrap_or_default();
    for default in sidecar::dns_options() {
        if !options.iter().any(|o| o["name"] == default["name"]) {
            options.push(default);
        }
    }
    json!({"nameservers": ["127.0.0.1"], "searches": searches, "options": options})
}

/// An RFC 6902 `add`.
fn add(path: &str, value: Value) -> Value {
    json!({"op": "add", "path": path, "value": value})
}

/// A JSON-pointer token: `~` and `/` escaped (RFC 6901), as in `meshdns~1injected`.
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Sets `key: value` in the map `parent/field`, creating the map when the object has none.
fn add_to_map(
    ops: &mut Vec<Value>,
    object: &Value,
    parent: &str,
    field: &str,
    key: &str,
    value: Value,
) {
    let parent_value = object.pointer(parent).unwrap_or(&Value::Null);
    if parent_value[field].is_object() {
        ops.push(add(&format!("{parent}/{field}/{}", escape(key)), value));
    } else {
        let mut map = Map::new();
        map.insert(key.to_string(), value);
        ops.push(add(&format!("{parent}/{field}"), Value::Object(map)));
    }
}

/// Appends `item` to the list `parent/object/list` (`spec` is the value at `parent`),
/// creating the list, and the object holding it, when missing.
fn add_to_list(
    ops: &mut Vec<Value>,
    spec: &Value,
    parent: &str,
    object: &str,
    list: &str,
    item: Value,
) {
    let path = format!("{parent}/{object}");
    if !spec[object].is_object() {
        ops.push(add(&path, json!({ list: [item] })));
    } else if spec[object][list].is_array() {
        ops.push(add(&format!("{path}/{list}/-"), item));
    } else {
        ops.push(add(&format!("{path}/{list}"), json!([item])));
    }
}

#[cfg(test)]
mod tests;
