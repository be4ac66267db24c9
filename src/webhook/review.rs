//! One `admission.k8s.io/v1` AdmissionReview in, its response out: the framing around the
//! `inject` module's decision (uid, allowed, base64 JSON patch, warnings, a denial's status).
//! Owns no I/O; every input, however malformed, yields a response or a [`BadReview`], never a
//! panic.

use data_encoding::BASE64;
use serde_json::{Value, json};

use super::inject::{self, Skip, Target};

const API_VERSION: &str = "admission.k8s.io/v1";

/// A body that is not an AdmissionReview request: answered with HTTP 400 and this text (there
/// is no uid to answer in a review).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadReview(pub String);

/// How a review was answered: the `result` label of `meshdns_webhook_reviews_total`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Injected,
    /// Admitted as it is; a reason with a warning is a pod that could not be injected.
    Skipped(Skip),
    /// Not a pod creation (an update, a delete): admitted as it is.
    NotCreate,
    /// Answered `allowed: false` (not a Pod; no pod in it).
    Denied(String),
}

/// A review answered.
#[derive(Debug, Clone)]
pub(crate) struct Answered {
    /// The response AdmissionReview.
    pub(crate) review: Value,
    pub(crate) outcome: Outcome,
    /// `namespace/name` of the pod, for the log (a pod named by the API server later shows
    /// its `generateName` prefix).
    pub(crate) pod: String,
}

/// The response review to `body`, and how it was answered.
pub(crate) fn answer(
    body: &[u8],
    image: &str,
    cluster_domain: &str,
) -> Result<Answered, BadReview> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| BadReview(format!("the body is not JSON: {e}")))?;
    if review["apiVersion"] != API_VERSION || review["kind"] != "AdmissionReview" {
        return Err(BadReview(format!(
            "expected an {API_VERSION} AdmissionReview, got apiVersion {} kind {}",
            review["apiVersion"], review["kind"]
        )));
    }
    let request = &review["request"];
    let uid = match request["uid"].as_str() {
        Some(uid) if !uid.is_empty() => uid,
        _ => return Err(BadReview("the AdmissionReview has no request.uid".into())),
    };
    let kind = &request["kind"];
    let pod = pod_name(request);
    let v1_pod = kind["group"] == "" && kind["version"] == "v1" && kind["kind"] == "Pod";
    let (review, outcome) = if !v1_pod {
        let why = format!("meshdns injects into v1 Pods only, not {kind}");
        (denial(uid, &why), Outcome::Denied(why))
    } else if request["operation"] != "CREATE" {
        (response(uid, None, None), Outcome::NotCreate)
    } else if !request["object"]["spec"].is_object() {
        let why = "request.object is not a Pod (it has no spec)";
        (denial(uid, why), Outcome::Denied(why.into()))
    } else {
        let target = Target {
            image,
            cluster_domain,
            namespace: request["namespace"].as_str().unwrap_or_default(),
        };
        match inject::patch(&request["object"], &target) {
            Ok(ops) => (response(uid, Some(&ops), None), Outcome::Injected),
            Err(skip) => (response(uid, None, skip.warning()), Outcome::Skipped(skip)),
        }
    };
    Ok(Answered {
        review,
        outcome,
        pod,
    })
}

fn pod_name(request: &Value) -> String {
    let metadata = &request["object"]["metadata"];
    let name = [&request["name"], &metadata["name"]]
        .into_iter()
        .find_map(|n| n.as_str().filter(|n| !n.is_empty()))
        .map(str::to_string)
        .or_else(|| metadata["generateName"].as_str().map(|g| format!("{g}*")))
        .unwrap_or_else(|| "?".into());
    format!(
        "{}/{name}",
        request["namespace"].as_str().unwrap_or_default()
    )
}

/// An allowed response, with its patch and warning when there are.
fn response(uid: &str, patch: Option<&[Value]>, warning: Option<String>) -> Value {
    let mut response = json!({"uid": uid, "allowed": true});
    if let Some(ops) = patch {
        let bytes = serde_json::to_vec(ops).unwrap_or_default();
        response["patchType"] = "JSONPatch".into();
        response["patch"] = BASE64.encode(&bytes).into();
    }
    if let Some(warning) = warning {
        response["warnings"] = json!([warning]);
    }
    json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})
}

fn denial(uid: &str, why: &str) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": false,
            "status": {"code": 400, "message": format!("meshdns webhook: {why}")},
        },
    })
}
