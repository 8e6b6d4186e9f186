//! The decision on every request made for an edge's metaServer, taken on the request itself
//! ([`kubeedge_api::authz`]): what the API server would let `system:node:<name>` do, with
//! KubeEdge's stricter rules on what a node writes.
//!
//! * **Reads and watches** are decided by a SubjectAccessReview on the attributes read from
//!   the request (a list's name is the one its field selector requires, so a list is never
//!   reviewed for one object and executed for all). With impersonation on, reads are left to
//!   the API server; watches are always reviewed (they are served from cloudcore's caches).
//! * **Writes** are left to the API server (always sent as the node, so the Node authorizer,
//!   RBAC and NodeRestriction decide them), after the rules the cluster does not have:
//!   events only about the node and its pods, certificate requests only for its own name,
//!   tokens only for audiences its pod declares, no `cloudcore` annotation, finalizers or
//!   owners on its Node or pods, and no writes to Devices (their status is the
//!   devicecontroller's, decided per Device).
//! * **Discovery** (`/api`, `/apis/<group>/<version>`, `/version`, …) is read as cloudcore,
//!   with impersonation on or off: the answers are the same for every node (Kubernetes gives
//!   them to every authenticated user), so they are shared among nodes for a short while.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::api::GetParams;
use kubeedge_api::access::Attributes;
use kubeedge_api::authz::restriction;
use kubeedge_api::authz::{Act, EdgeRequest, Policy, RequestInfo};
use kubeedge_api::status::StatusError;
use serde_json::Value;

use crate::shared::Shared;

/// Longest label or field selector reviewed; longer ones are refused `400`.
pub(crate) const SELECTOR_MAX: usize = 4 << 10;
/// Pods an event patch's name may be tried against.
const EVENT_CANDIDATES: usize = 3;

/// Discovery paths served as cloudcore (verb `get`), trailing `/` ignored.
pub(crate) fn is_discovery(i: &RequestInfo) -> bool {
    if i.is_resource || i.verb != "get" {
        return false;
    }
    let path = i.path.strip_suffix('/').unwrap_or(&i.path);
    if matches!(
        path,
        "/api"
            | "/apis"
            | "/version"
            | "/healthz"
            | "/livez"
            | "/readyz"
            | "/openapi/v2"
            | "/openapi/v3"
    ) {
        return true;
    }
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            && !s.starts_with('.')
    };
    match segs.as_slice() {
        ["api", v] => name_ok(v),
        ["apis", g] => name_ok(g),
        ["apis", g, v] => name_ok(g) && name_ok(v),
        _ => false,
    }
}

fn forbidden(node: &str, i: &RequestInfo, why: impl std::fmt::Display) -> StatusError {
    kubeedge_api::access::Decision::forbidden(node, &i.attributes(), &why.to_string())
}

/// The metaServer's policy over the module's shared state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetaPolicy<'a>(pub(crate) &'a Shared);

impl MetaPolicy<'_> {
    /// A GET of `name` as cloudcore, for what a rule must read (`None`: not found or not
    /// readable; rules then refuse).
    async fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        let request = kube::core::Request::new(K::url_path(&(), namespace))
            .get(name, &GetParams::default())
            .ok()?;
        self.0.client.request::<K>(request).await.ok()
    }

    /// Whether the cluster lets the node read pod `namespace/name` (the Node authorizer: the
    /// pod is bound to it).
    async fn own_pod(&self, node: &str, namespace: &str, name: &str) -> bool {
        let attrs = Attributes {
            verb: "get".into(),
            version: "v1".into(),
            resource: "pods".into(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ..Attributes::default()
        };
        self.0.authorize(node, &attrs).await.is_ok()
    }

    /// The rules on writes the cluster does not have.
    async fn write_rules(&self, r: &EdgeRequest<'_>) -> Result<(), StatusError> {
        let (i, node) = (r.info(), r.node());
        let deny = |why: &str| Err(forbidden(node, i, why));
        match (i.group.as_str(), i.resource.as_str()) {
            (kubeedge_api::devices::GROUP, _) => deny(
                "Devices and their status are written by cloudcore's devicecontroller, not through the metaServer",
            ),
            ("" | "events.k8s.io", "events") => self.event(r).await,
            ("certificates.k8s.io", "certificatesigningrequests") if i.verb == "create" => {
                let csr: Value = r.json().unwrap_or_default();
                restriction::csr_for_node(node, &csr).or_else(|d| deny(&d.0))
            }
            ("", "serviceaccounts") if i.subresource == "token" => {
                let tr: Value = r.json().unwrap_or_default();
                let (pod, _) =
                    restriction::token_bound_pod(&tr).map_err(|d| forbidden(node, i, d))?;
                let bound = self
                    .get::<Pod>(Some(&i.namespace), pod)
                    .await
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
                let Some(pod) = bound else {
                    return deny("the token's pod is not bound to the node");
                };
                restriction::token_request(&tr, &i.name, &pod).or_else(|d| deny(&d.0))
            }
            ("", "nodes") if matches!(i.verb.as_str(), "patch" | "update") => {
                if i.name != node {
                    return deny("a node may only write its own Node object");
                }
                let Some(current) = self.get::<Node>(None, node).await else {
                    return deny("the node's Node cannot be read");
                };
                if i.verb == "patch" {
                    let patch: Value = r.json().unwrap_or_default();
                    restriction::node_patch_metadata(&patch, Some(&current)).or_else(|d| deny(&d.0))
                } else {
                    let Some(new) = r.json::<Node>() else {
                        return deny("the body is not a Node");
                    };
                    restriction::node_update(&new, &current).or_else(|d| deny(&d.0))
                }
            }
            ("", "pods") if i.subresource == "status" && i.verb == "patch" => {
                let Some(pod) = self.get::<Pod>(Some(&i.namespace), &i.name).await else {
                    return deny("the pod cannot be read");
                };
                let patch: Value = r.json().unwrap_or_default();
                restriction::pod_status_patch(&patch, &pod).or_else(|d| deny(&d.0))
            }
            ("", "pods") if i.subresource.is_empty() && i.verb == "patch" => {
                deny("a node may not patch its pods' metadata or spec")
            }
            _ => Ok(()),
        }
    }

    /// Events about the node itself and its own pods only; one is changed only under a name
    /// given to events about its own objects (`<object>.<suffix>`).
    async fn event(&self, r: &EdgeRequest<'_>) -> Result<(), StatusError> {
        let (i, node) = (r.info(), r.node());
        let deny = |why: &str| Err(forbidden(node, i, why));
        if i.namespace.is_empty() {
            return deny("events are namespaced");
        }
        if i.verb == "patch" || i.verb == "delete" {
            let patch: Value = r.json().unwrap_or_default();
            for k in ["involvedObject", "regarding", "related"] {
                if patch.get(k).is_some() {
                    return deny("an event patch may not change what the event is about");
                }
            }
            if i.name
                .strip_prefix(node)
                .is_some_and(|r| r.starts_with('.'))
            {
                return Ok(());
            }
            let mut candidates: Vec<&str> = i
                .name
                .match_indices('.')
                .map(|(at, _)| &i.name[..at])
                .collect();
            candidates.reverse();
            for c in candidates.into_iter().take(EVENT_CANDIDATES) {
                if self.own_pod(node, &i.namespace, c).await {
                    return Ok(());
                }
            }
            return deny("a node may only change events named after its own objects");
        }
        let event: Value = r.json().unwrap_or_default();
        let about = if i.group.is_empty() {
            &event["involvedObject"]
        } else {
            &event["regarding"]
        };
        let field = |k: &str| about[k].as_str().unwrap_or_default();
        let own = match field("kind") {
            "Node" => field("name") == node,
            "Pod" if field("namespace") == i.namespace && !field("name").is_empty() => {
                self.own_pod(node, &i.namespace, field("name")).await
            }
            _ => false,
        };
        if !own {
            return deny("a node may only write events about itself and its own pods");
        }
        if i.verb == "update"
            && !i
                .name
                .strip_prefix(field("name"))
                .is_some_and(|rest| rest.starts_with('.'))
        {
            return deny("a node may only change events named after its own objects");
        }
        Ok(())
    }
}

impl Policy for MetaPolicy<'_> {
    type Error = StatusError;

    async fn decide(&self, r: &EdgeRequest<'_>) -> Result<Act, StatusError> {
        let (i, node) = (r.info(), r.node());
        if !i.is_resource {
            return if is_discovery(i) {
                Ok(Act::Cloudcore)
            } else {
                Err(forbidden(node, i, "not a discovery path"))
            };
        }
        if i.label_selector.len() > SELECTOR_MAX || i.field_selector.len() > SELECTOR_MAX {
            return Err(StatusError::bad_request(format!(
                "a selector may be at most {SELECTOR_MAX} bytes"
            )));
        }
        match i.verb.as_str() {
            "get" | "list" if self.0.reads.impersonates() => Ok(Act::Delegated),
            "get" | "list" => {
                self.0.authorize(node, &i.attributes()).await?;
                Ok(Act::Node)
            }
            // Served from cloudcore's own caches: always reviewed.
            "watch" => {
                self.0.authorize(node, &i.attributes()).await?;
                Ok(Act::Cloudcore)
            }
            "create" | "update" | "patch" | "delete" => {
                self.write_rules(r).await?;
                Ok(Act::Delegated)
            }
            _ => Err(forbidden(
                node,
                i,
                "the metaServer serves get, list, watch, create, update, patch and delete",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(path: &str) -> RequestInfo {
        RequestInfo::parse("GET", path, "").unwrap()
    }

    #[test]
    fn discovery_paths_and_nothing_else() {
        for p in [
            "/api",
            "/apis/",
            "/version",
            "/api/v1",
            "/apis/apps",
            "/apis/apps/v1",
            "/openapi/v2",
            "/readyz",
        ] {
            assert!(is_discovery(&info(p)), "{p}");
        }
        for p in [
            "/metrics",
            "/api/v1/pods",
            "/apis/apps/v1/deployments",
            "/logs",
        ] {
            assert!(!is_discovery(&info(p)), "{p}");
        }
        assert!(RequestInfo::parse("GET", "/apis/../metrics", "").is_err());
        assert!(!is_discovery(
            &RequestInfo::parse("POST", "/api", "").unwrap()
        ));
    }
}
