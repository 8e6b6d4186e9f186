//! Kubernetes' NodeRestriction admission rules on what a node writes (its Node, its pods'
//! status, its tokens and certificate requests), with KubeEdge's stricter additions, for the
//! policies that decide node writes in process. Each rule reads the request's body and, where
//! NodeRestriction compares with the stored object, the object as it is now.
//!
//! KubeEdge additions, each because an edge is less trusted than a kubelet: a node never
//! removes or changes KubeEdge's role labels once set (revocation and the tunnel-port rules
//! find edge nodes by them), never writes the `cloudcore` annotation (which replica holds it),
//! never adds finalizers or owners to its Node or pods, and asks for tokens only for audiences
//! its pod declares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

use crate::replicas::CLOUDCORE_ANNOTATION;

/// A write NodeRestriction (or a KubeEdge addition) refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

fn denied<T>(why: impl Into<String>) -> Result<T, Denied> {
    Err(Denied(why.into()))
}

/// Labels KubeEdge's edge sets on its own Node at registration that NodeRestriction does not
/// let a kubelet set; cloudcore writes them with its own identity.
pub const KUBEEDGE_ROLE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/edge",
    "node-role.kubernetes.io/agent",
];

/// Kubernetes labels a kubelet may set on its own Node (`kubeletapis.IsKubeletLabel`).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];
/// Label namespaces (and their subdomains) a kubelet may use freely.
const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The namespace part of a label key (`a.b/c` → `a.b`), empty without one.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or_default()
}

fn in_namespace(ns: &str, parent: &str) -> bool {
    ns == parent
        || ns
            .strip_suffix(parent)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Whether a kubelet may add, change or remove label `key` on its own Node
/// (NodeRestriction's `getForbiddenLabels`), or it is one of KubeEdge's role labels.
pub fn node_may_set_label(key: &str) -> bool {
    let ns = label_namespace(key);
    if in_namespace(ns, "node-restriction.kubernetes.io") {
        return false;
    }
    let kubernetes = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
    !kubernetes
        || KUBELET_LABELS.contains(&key)
        || KUBEEDGE_ROLE_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|allowed| in_namespace(ns, allowed))
}

/// The labels a node's write changes, each with its new value (`None`: removed).
pub type LabelChanges<'a> = Vec<(&'a str, Option<&'a str>)>;

/// The labels a change from `old` to `new` adds, changes or removes (`getModifiedLabels`).
pub fn modified_labels<'a>(
    new: Option<&'a BTreeMap<String, String>>,
    old: Option<&'a BTreeMap<String, String>>,
) -> LabelChanges<'a> {
    let mut out: LabelChanges<'a> = Vec::new();
    for (k, v) in new.into_iter().flatten() {
        if old.and_then(|o| o.get(k)) != Some(v) {
            out.push((k, Some(v)));
        }
    }
    for k in old.into_iter().flatten().map(|(k, _)| k) {
        if !new.is_some_and(|n| n.contains_key(k)) {
            out.push((k, None));
        }
    }
    out
}

/// The labels a (merge or strategic merge) patch of `metadata.labels` changes against
/// `current`: `null` removes a present label. Directives (`$patch`, `$retainKeys`) and values
/// that are not strings or `null` are refused: they could change labels the patch does not
/// name.
pub fn patched_labels<'a>(
    patch: &'a Value,
    current: Option<&'a BTreeMap<String, String>>,
) -> Result<LabelChanges<'a>, Denied> {
    let labels = match patch {
        Value::Null => return Ok(Vec::new()),
        Value::Object(m) => m,
        _ => return denied("metadata.labels must be an object"),
    };
    let mut out = Vec::new();
    for (k, v) in labels {
        if k.starts_with('$') {
            return denied("a node may not send patch directives on its labels");
        }
        let now = current.and_then(|c| c.get(k)).map(String::as_str);
        match v {
            Value::Null if now.is_some() => out.push((k.as_str(), None)),
            Value::Null => {}
            Value::String(s) if now != Some(s.as_str()) => out.push((k.as_str(), Some(s.as_str()))),
            Value::String(_) => {}
            _ => return denied("label values must be strings"),
        }
    }
    Ok(out)
}

/// Refuses label changes a node may not make on its own Node: NodeRestriction's rule, and
/// KubeEdge's role labels may be added but never removed or changed.
pub fn check_node_label_changes(
    changes: &LabelChanges<'_>,
    current: Option<&BTreeMap<String, String>>,
) -> Result<(), Denied> {
    let mut forbidden: Vec<&str> = changes
        .iter()
        .filter(|(k, _)| {
            !node_may_set_label(k)
                || (KUBEEDGE_ROLE_LABELS.contains(k) && current.is_some_and(|c| c.contains_key(*k)))
        })
        .map(|(k, _)| *k)
        .collect();
    if forbidden.is_empty() {
        return Ok(());
    }
    forbidden.sort_unstable();
    forbidden.dedup();
    denied(format!(
        "a node may not modify these labels: {}",
        forbidden.join(", ")
    ))
}

/// Whether a JSON object has a patch directive key (`$patch`, `$retainKeys`, …).
fn has_directive(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.keys().any(|k| k.starts_with('$')))
}

/// The `metadata` of a patch a node sends for its own Node (`nodes/<self>` or
/// `nodes/<self>/status`): only `labels` and `annotations` (plus `uid` and `resourceVersion`
/// as preconditions); labels by [`check_node_label_changes`]; never the `cloudcore`
/// annotation; no directives.
pub fn node_patch_metadata(patch: &Value, current: Option<&Node>) -> Result<(), Denied> {
    let Some(meta) = patch.get("metadata") else {
        return Ok(());
    };
    let Some(fields) = meta.as_object() else {
        return denied("metadata must be an object");
    };
    if has_directive(meta) {
        return denied("a node may not send patch directives on its Node's metadata");
    }
    for (k, v) in fields {
        match k.as_str() {
            "labels" => {
                let now = current.and_then(|n| n.metadata.labels.as_ref());
                check_node_label_changes(&patched_labels(v, now)?, now)?
            }
            "annotations" => match v {
                Value::Null => return denied("a node may not remove every annotation of its Node"),
                Value::Object(a) if has_directive(v) || a.contains_key(CLOUDCORE_ANNOTATION) => {
                    return denied(format!(
                        "a node may not send directives on its annotations or set its \"{CLOUDCORE_ANNOTATION}\" annotation"
                    ));
                }
                Value::Object(_) => {}
                _ => return denied("metadata.annotations must be an object"),
            },
            "uid" if current.is_none_or(|n| n.metadata.uid.as_deref() == v.as_str()) => {}
            "resourceVersion" => {}
            other => {
                return denied(format!(
                    "a node may change only the labels and annotations of its Node's metadata, not {other:?}"
                ));
            }
        }
    }
    Ok(())
}

/// A whole Node a node writes back (`PUT nodes/<self>/status`) against `current`: labels by
/// [`check_node_label_changes`]; the `cloudcore` annotation, finalizers, owners and taints
/// unchanged.
pub fn node_update(new: &Node, current: &Node) -> Result<(), Denied> {
    let (n, c) = (&new.metadata, &current.metadata);
    check_node_label_changes(
        &modified_labels(n.labels.as_ref(), c.labels.as_ref()),
        c.labels.as_ref(),
    )?;
    let annotation = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.annotations
            .as_ref()
            .and_then(|a| a.get(CLOUDCORE_ANNOTATION))
            .cloned()
    };
    if annotation(n) != annotation(c) {
        return denied(format!(
            "a node may not change its \"{CLOUDCORE_ANNOTATION}\" annotation"
        ));
    }
    let none_if_empty = |v: Option<&Vec<String>>| v.filter(|v| !v.is_empty()).cloned();
    if none_if_empty(n.finalizers.as_ref()) != none_if_empty(c.finalizers.as_ref()) {
        return denied("a node may not change its Node's finalizers");
    }
    let owners = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.owner_references.clone().unwrap_or_default()
    };
    if owners(n) != owners(c) {
        return denied("a node may not change its Node's owners");
    }
    let taints = |node: &Node| node.spec.as_ref().and_then(|s| s.taints.clone());
    if new.spec.is_some() && taints(new).unwrap_or_default() != taints(current).unwrap_or_default()
    {
        return denied("a node may not modify its taints");
    }
    Ok(())
}

/// A patch of `pods/<name>/status` by the node the pod is bound to: `metadata` may carry only
/// `uid` (equal to the pod's: a precondition) and `resourceVersion`, and `labels` only as they
/// are (NodeRestriction: "node cannot update labels through pod status"); the resource claim
/// statuses are not the node's to write.
pub fn pod_status_patch(patch: &Value, pod: &Pod) -> Result<(), Denied> {
    if let Some(meta) = patch.get("metadata") {
        let Some(fields) = meta.as_object() else {
            return denied("metadata must be an object");
        };
        for (k, v) in fields {
            match k.as_str() {
                "uid" if v.as_str() == pod.metadata.uid.as_deref() => {}
                "uid" => return denied("the patch's uid is not the pod's"),
                "resourceVersion" => {}
                "labels" => {
                    if !patched_labels(v, pod.metadata.labels.as_ref())?.is_empty() {
                        return denied("a node cannot update labels through pod status");
                    }
                }
                other => {
                    return denied(format!(
                        "a pod status patch may not change metadata {other:?}"
                    ));
                }
            }
        }
    }
    if patch
        .get("status")
        .and_then(Value::as_object)
        .is_some_and(|s| s.keys().any(|k| k.contains("resourceClaimStatuses")))
    {
        return denied("a node cannot update resource claim statuses");
    }
    Ok(())
}

/// A whole pod a node writes back (`PUT pods/<name>/status`) against `current`: labels and
/// resource claim statuses unchanged (NodeRestriction's `admitPodStatus`).
pub fn pod_status_update(new: &Pod, current: &Pod) -> Result<(), Denied> {
    let labels = |p: &Pod| p.metadata.labels.clone().unwrap_or_default();
    if labels(new) != labels(current) {
        return denied("a node cannot update labels through pod status");
    }
    let claims = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
            .unwrap_or_default()
    };
    if claims(new) != claims(current) {
        return denied("a node cannot update resource claim statuses");
    }
    Ok(())
}

/// The service account pod `pod` runs as (`default` when it names none).
pub fn pod_service_account(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| {
            s.service_account_name
                .as_deref()
                .or(s.service_account.as_deref())
        })
        .filter(|a| !a.is_empty())
        .unwrap_or("default")
}

/// The pod a TokenRequest is bound to: `spec.boundObjectRef` of kind `Pod`, `apiVersion`
/// `v1`, with a name and a uid (NodeRestriction's `admitServiceAccount`).
pub fn token_bound_pod(token_request: &Value) -> Result<(&str, &str), Denied> {
    let r = &token_request["spec"]["boundObjectRef"];
    let field = |k: &str| r[k].as_str().unwrap_or_default();
    if field("kind") != "Pod" || field("apiVersion") != "v1" || field("name").is_empty() {
        return denied("node requested token not bound to a pod");
    }
    if field("uid").is_empty() {
        return denied("node requested token with a pod binding without a uid");
    }
    Ok((field("name"), field("uid")))
}

/// A TokenRequest for service account `account`, bound ([`token_bound_pod`]) to `pod` (which
/// the caller found bound to the node): the uid matches, the pod runs as `account`, and every
/// audience asked is one the pod's projected token volumes declare (none asked: the API
/// server's own, which the default token volume uses).
pub fn token_request(token_request: &Value, account: &str, pod: &Pod) -> Result<(), Denied> {
    let (name, uid) = token_bound_pod(token_request)?;
    if pod.metadata.uid.as_deref() != Some(uid) {
        return denied(format!(
            "the UID in the bound object reference ({uid}) does not match pod {name}: it might have been deleted and then recreated"
        ));
    }
    let runs_as = pod_service_account(pod);
    if runs_as != account {
        return denied(format!(
            "pod {name} runs as service account \"{runs_as}\", not \"{account}\""
        ));
    }
    let declared = |audience: &str| {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
            .filter_map(|s| s.service_account_token.as_ref())
            .any(|t| t.audience.as_deref().unwrap_or_default() == audience)
    };
    let asked: Vec<&str> = match token_request["spec"]["audiences"].as_array() {
        None => vec![""],
        Some(a) if a.is_empty() => vec![""],
        Some(a) => a.iter().map(|v| v.as_str().unwrap_or("\u{0}")).collect(),
    };
    if let Some(a) = asked.iter().find(|a| !declared(a)) {
        return denied(format!("pod {name} does not use tokens for audience {a:?}"));
    }
    Ok(())
}

/// A CertificateSigningRequest (as JSON) whose PEM request asks for the node's own identity:
/// exactly one subject common name, `system:node:<node>`.
pub fn csr_for_node(node: &str, csr: &Value) -> Result<(), Denied> {
    let Some(request) = csr["spec"]["request"].as_str() else {
        return denied("content is not a CertificateSigningRequest with spec.request");
    };
    use base64::Engine as _;
    let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(request) else {
        return denied("spec.request is not base64");
    };
    match csr_common_name(&pem) {
        Some(cn) if cn == format!("system:node:{node}") => Ok(()),
        Some(cn) => denied(format!(
            "node '{node}' may only request certificates for \"system:node:{node}\", not {cn:?}"
        )),
        None => denied("spec.request is not a PEM certificate request with one common name"),
    }
}

/// The subject common name of a PEM certificate request; `None` unless it has exactly one.
fn csr_common_name(pem: &[u8]) -> Option<String> {
    use x509_parser::prelude::FromDer;
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    if pem.label != "CERTIFICATE REQUEST" && pem.label != "NEW CERTIFICATE REQUEST" {
        return None;
    }
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .ok()?;
    let mut names = csr.certification_request_info.subject.iter_common_name();
    let cn = names.next()?.as_str().ok()?.to_owned();
    // Two common names would let a signer pick the other one.
    names.next().is_none().then_some(cn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "e1", "uid": "u1", "labels": labels,
            "annotations": {"cloudcore": "10.0.0.1"}}}),
        )
        .unwrap()
    }

    #[test]
    fn node_labels_follow_node_restriction_and_role_labels_stay() {
        for ok in [
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/edge",
            "node.kubernetes.io/exclude-from-external-load-balancers",
            "foo.kubelet.kubernetes.io/x",
            "example.com/rack",
            "plain",
        ] {
            assert!(node_may_set_label(ok), "{ok}");
        }
        for bad in [
            "node-restriction.kubernetes.io/trusted",
            "x.node-restriction.kubernetes.io/a",
            "node-role.kubernetes.io/master",
            "node-role.kubernetes.io/control-plane",
            "kubernetes.io/role",
            "k8s.io/x",
        ] {
            assert!(!node_may_set_label(bad), "{bad}");
        }
        let current = node(json!({"node-role.kubernetes.io/edge": "", "team": "a"}));
        let patch = |p: Value| node_patch_metadata(&p, Some(&current));
        assert!(patch(json!({"metadata": {"labels": {"team": "b", "rack": "1"}}})).is_ok());
        assert!(patch(json!({"metadata": {"labels": {"team": null}}})).is_ok());
        for refused in [
            json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": null}}}),
            json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": "x"}}}),
            json!({"metadata": {"labels": {"node-restriction.kubernetes.io/secure": "true"}}}),
            json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
            json!({"metadata": {"labels": {"$patch": "replace"}}}),
            json!({"metadata": {"labels": {"team": 1}}}),
            json!({"metadata": {"finalizers": ["x/y"]}}),
            json!({"metadata": {"ownerReferences": []}}),
            json!({"metadata": {"$patch": "replace"}}),
            json!({"metadata": {"annotations": {"cloudcore": "10.9.9.9"}}}),
            json!({"metadata": {"annotations": {"$patch": "replace"}}}),
            json!({"metadata": {"uid": "other"}}),
        ] {
            assert!(patch(refused.clone()).is_err(), "{refused}");
        }
        assert!(patch(json!({"metadata": {"uid": "u1", "annotations": {"a": "b"}}})).is_ok());
        assert!(patch(json!({"status": {"phase": "Running"}})).is_ok());
    }

    #[test]
    fn a_node_written_back_keeps_what_the_node_may_not_change() {
        let current = node(json!({"node-role.kubernetes.io/edge": ""}));
        assert!(node_update(&current, &current).is_ok());
        let mut n = current.clone();
        n.metadata.labels = None;
        assert!(node_update(&n, &current).is_err(), "edge label removed");
        let mut n = current.clone();
        n.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("cloudcore".into(), "x".into());
        assert!(node_update(&n, &current).is_err());
        let mut n = current.clone();
        n.metadata.finalizers = Some(vec!["a/b".into()]);
        assert!(node_update(&n, &current).is_err());
    }

    #[test]
    fn pod_status_patches_keep_labels() {
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p", "uid": "u", "labels": {"app": "a"}}}),
        )
        .unwrap();
        let ok = |p: Value| pod_status_patch(&p, &pod).is_ok();
        assert!(ok(
            json!({"metadata": {"uid": "u"}, "status": {"phase": "Running"}})
        ));
        assert!(ok(json!({"metadata": {"labels": {"app": "a"}}})));
        assert!(!ok(json!({"metadata": {"labels": {"app": "payments"}}})));
        assert!(!ok(json!({"metadata": {"labels": {"app": null}}})));
        assert!(!ok(json!({"metadata": {"uid": "other"}})));
        assert!(!ok(json!({"metadata": {"finalizers": ["x"]}})));
        assert!(!ok(json!({"status": {"resourceClaimStatuses": []}})));
    }

    #[test]
    fn tokens_need_a_full_pod_binding() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"},
            "spec": {"serviceAccountName": "sa", "containers": [],
                "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}}))
        .unwrap();
        let tr = |r: Value, aud: Value| json!({"spec": {"boundObjectRef": r, "audiences": aud}});
        let full = json!({"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"});
        assert!(token_request(&tr(full.clone(), json!([])), "sa", &pod).is_ok());
        // edged's request for the default token volume: Go marshals the unset list as null.
        assert!(token_request(&tr(full.clone(), Value::Null), "sa", &pod).is_ok());
        assert!(token_request(&tr(full.clone(), json!(["vault"])), "sa", &pod).is_err());
        assert!(token_request(&tr(full.clone(), json!([])), "admin", &pod).is_err());
        for partial in [
            json!({"kind": "Pod", "name": "p", "uid": "u"}),
            json!({"kind": "Pod", "apiVersion": "v1", "name": "p"}),
            json!({"kind": "Secret", "apiVersion": "v1", "name": "p", "uid": "u"}),
        ] {
            assert!(
                token_request(&tr(partial.clone(), json!([])), "sa", &pod).is_err(),
                "{partial}"
            );
        }
    }
}
