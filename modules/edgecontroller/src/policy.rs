//! The decision on every API request the upstream handlers make for an edge node, taken on the
//! request itself ([`kubeedge_api::authz`]): Kubernetes' Node authorizer and NodeRestriction
//! admission, with KubeEdge's stricter additions ([`restriction`]).
//!
//! The message check (`authz`) refuses early, before any API call, from what a message says;
//! this one decides the requests actually built from it, so what a handler sends is exactly
//! what was allowed. Decisions read the watch caches; an object the caches lack or may hold
//! stale (a pod, the node's own Node, a volume, a certificate request) is read once as
//! cloudcore, and what is read that way reaches the edge only through a request this policy
//! then allows.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{GetParams, ListParams};
use kubeedge_api::authz::restriction::{self, Denied, KUBEEDGE_ROLE_LABELS};
use kubeedge_api::authz::{Act, EdgeRequest, Policy, RequestInfo};
use kubeedge_api::replicas::CLOUDCORE_ANNOTATION;
use kubeedge_api::status::StatusError;
use kubeedge_api::validation;
use kubeedge_api::watch::Cache;
use serde_json::Value;

use crate::authz::{NODE_LEASE_NAMESPACE, Refusal, check_mirror_pod};
use crate::downstream::{ObjectRef, RefKind, SharedLocations, bound_node, granted};

/// Lookups one event patch may make to find the pod its name refers to.
const EVENT_LOOKUPS: usize = 2;

/// The node policy of the upstream handlers.
#[derive(Clone)]
pub(crate) struct EdgePolicy {
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    locations: SharedLocations,
    /// cloudcore's identity, for the lookups a decision needs (never sent for an edge).
    lookup: kube::Client,
    /// The `cloudcore` annotation value a registration may carry (this replica's address).
    cloudcore_ip: Option<String>,
    cache_wait: Duration,
}

impl std::fmt::Debug for EdgePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgePolicy")
            .field("cloudcore_ip", &self.cloudcore_ip)
            .finish_non_exhaustive()
    }
}

/// The verb of a request as the refusal words it.
fn verb(i: &RequestInfo) -> &'static str {
    match i.verb.as_str() {
        "get" => "get",
        "list" => "list",
        "watch" => "watch",
        "create" => "create",
        "update" => "update",
        "patch" => "patch",
        "delete" => "delete",
        "deletecollection" => "deletecollection",
        _ => "request",
    }
}

/// The resource of a request as the refusal words it.
fn plural(i: &RequestInfo) -> &'static str {
    match i.resource.as_str() {
        "nodes" => "nodes",
        "pods" => "pods",
        "configmaps" => "configmaps",
        "secrets" => "secrets",
        "persistentvolumeclaims" => "persistentvolumeclaims",
        "persistentvolumes" => "persistentvolumes",
        "volumeattachments" => "volumeattachments",
        "certificatesigningrequests" => "certificatesigningrequests",
        "serviceaccounts" => "serviceaccounts",
        "leases" => "leases",
        "events" => "events",
        _ => "",
    }
}

fn deny<T>(i: &RequestInfo, why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::Forbidden {
        plural: plural(i),
        name: i.name.clone(),
        verb: verb(i),
        why: why.into(),
    })
}

fn no_relationship<T>(i: &RequestInfo, node: &str) -> Result<T, Refusal> {
    deny(
        i,
        format!("no relationship found between node '{node}' and this object"),
    )
}

fn body<T: serde::de::DeserializeOwned>(r: &EdgeRequest<'_>, what: &str) -> Result<T, Refusal> {
    serde_json::from_slice(r.body())
        .map_err(|e| Refusal::Malformed(format!("the request body is not {what}: {e}")))
}

impl EdgePolicy {
    pub(crate) fn new(
        pods: Cache<Pod>,
        nodes: Cache<Node>,
        locations: SharedLocations,
        lookup: kube::Client,
        cloudcore_ip: Option<String>,
        cache_wait: Duration,
    ) -> Self {
        EdgePolicy {
            pods,
            nodes,
            locations,
            lookup,
            cloudcore_ip,
            cache_wait,
        }
    }

    async fn get<K>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, kube::Error>
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        let request = kubeedge_api::escaped::Request::of::<K>(namespace)
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        match self.lookup.request::<K>(request).await {
            Ok(o) => Ok(Some(o)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `check` on the node's own Node as the cache holds it, and when that fails, once more
    /// on the Node as it is now (the cache may lag what an administrator just changed).
    async fn on_own_node<T>(
        &self,
        i: &RequestInfo,
        node: &str,
        check: impl Fn(Option<&Node>) -> Result<T, Denied>,
    ) -> Result<T, Refusal> {
        let cached = self.nodes.get_by(None, node);
        match check(cached.as_deref()) {
            Ok(t) => Ok(t),
            Err(first) => match self.get::<Node>(None, node).await {
                Ok(now) => check(now.as_ref()).or_else(|d| deny(i, d.0)),
                Err(_) => deny(i, first.0),
            },
        }
    }

    /// The pod `namespace/name` when it is bound to `node`: from the cache, else read once.
    async fn bound_pod(
        &self,
        i: &RequestInfo,
        node: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Pod>, Refusal> {
        validation::namespace(namespace)?;
        validation::object_name("pod name", name)?;
        let pod = match self.pods.get_by(Some(namespace), name) {
            Some(p) => p,
            None => match self.get::<Pod>(Some(namespace), name).await {
                Ok(Some(p)) => Arc::new(p),
                Ok(None) => {
                    return Err(Refusal::PodNotFound {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                    });
                }
                Err(e) => return Err(Refusal::Unavailable(Box::new(StatusError::from_kube(&e)))),
            },
        };
        if bound_node(&pod) == Some(node) {
            Ok(pod)
        } else {
            deny(i, format!("the pod is not bound to node '{node}'"))
        }
    }

    /// A ConfigMap, Secret or claim a pod bound to the node uses. Before the pod cache has
    /// listed, the node's pods are listed once instead.
    async fn uses(&self, i: &RequestInfo, node: &str, kind: RefKind) -> Result<Act, Refusal> {
        if i.namespace.is_empty() || i.name.is_empty() {
            return deny(i, "a node reads single namespaced objects of this type");
        }
        let wanted = ObjectRef::new(kind, &i.namespace, &i.name);
        if self.pods.wait_ready_for(self.cache_wait).await {
            if self.locations.read().node_uses(node, &wanted) {
                return Ok(Act::Node);
            }
            return no_relationship(i, node);
        }
        let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let request = kubeedge_api::escaped::Request::of::<Pod>(None)
            .list(&lp)
            .map_err(|e| Refusal::Malformed(e.to_string()))?;
        let pods: k8s_openapi::List<Pod> = self
            .lookup
            .request(request)
            .await
            .map_err(|e| Refusal::Unavailable(Box::new(StatusError::from_kube(&e))))?;
        let used = pods
            .items
            .iter()
            .filter(|p| bound_node(p) == Some(node))
            .any(|p| granted(p).contains(&wanted));
        if used {
            Ok(Act::Node)
        } else {
            no_relationship(i, node)
        }
    }

    /// An object decided on itself (a volume, an attachment, a certificate request): read
    /// once; missing and unrelated get the same refusal, so a node cannot learn which names
    /// exist.
    async fn decided_on_object<K>(
        &self,
        i: &RequestInfo,
        node: &str,
        related: impl Fn(&Value) -> bool,
    ) -> Result<Act, Refusal>
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize,
    {
        if i.name.is_empty() {
            return deny(i, "a node reads single objects of this type");
        }
        validation::object_name("name", &i.name)?;
        let found = self
            .get::<K>(None, &i.name)
            .await
            .map_err(|e| Refusal::Unavailable(Box::new(StatusError::from_kube(&e))))?;
        match found.map(|o| serde_json::to_value(o).unwrap_or_default()) {
            Some(v) if related(&v) => Ok(Act::Node),
            _ => no_relationship(i, node),
        }
    }

    async fn node_patch(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        own_node(i, node)?;
        let patch: Value = body(r, "a JSON patch")?;
        if !patch.is_object() {
            return Err(Refusal::Malformed("a patch must be a JSON object".into()));
        }
        self.on_own_node(i, node, |current| {
            restriction::node_patch_metadata(&patch, current)
        })
        .await?;
        // KubeEdge's role labels at registration: cloudcore sets them (NodeRestriction keeps
        // them from a kubelet), and only ever adds them (the rule above refuses any change).
        let role_labels_only = i.subresource.is_empty()
            && patch.as_object().is_some_and(|p| p.len() == 1)
            && patch["metadata"].as_object().is_some_and(|m| m.len() == 1)
            && patch["metadata"]["labels"].as_object().is_some_and(|l| {
                !l.is_empty()
                    && l.iter()
                        .all(|(k, v)| KUBEEDGE_ROLE_LABELS.contains(&k.as_str()) && v.is_string())
            });
        Ok(if role_labels_only {
            Act::Cloudcore
        } else {
            Act::Node
        })
    }

    fn node_create(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        let wanted: Node = body(r, "a Node")?;
        if wanted.metadata.name.as_deref() != Some(node) {
            return deny(
                i,
                format!("node '{node}' may only create its own Node object"),
            );
        }
        if wanted
            .spec
            .as_ref()
            .is_some_and(|s| s.config_source.is_some())
        {
            return deny(i, "a node may not create its Node with a configSource");
        }
        let labels = wanted.metadata.labels.as_ref();
        let mut forbidden: Vec<&str> = labels
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .filter(|k| !restriction::node_may_set_label(k) || KUBEEDGE_ROLE_LABELS.contains(k))
            .collect();
        if !forbidden.is_empty() {
            forbidden.sort_unstable();
            return deny(
                i,
                format!(
                    "a node may not register with these labels: {}",
                    forbidden.join(", ")
                ),
            );
        }
        let annotation = wanted
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLOUDCORE_ANNOTATION));
        if annotation.is_some_and(|a| self.cloudcore_ip.as_ref() != Some(a)) {
            return deny(
                i,
                format!("a node may not set its \"{CLOUDCORE_ANNOTATION}\" annotation"),
            );
        }
        Ok(Act::Node)
    }

    async fn pod_rule(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        match (i.subresource.as_str(), i.verb.as_str()) {
            ("", "get") => {
                self.bound_pod(i, node, &i.namespace, &i.name).await?;
                Ok(Act::Node)
            }
            ("", "create") => {
                let pod: Pod = body(r, "a Pod")?;
                let node_uid = self.on_own_node(i, node, |n| {
                    n.and_then(|n| n.metadata.uid.clone())
                        .ok_or_else(|| Denied(format!("node {node} is not registered")))
                });
                check_mirror_pod(node, &i.namespace, &pod, node_uid.await.ok().as_deref())?;
                Ok(Act::Node)
            }
            ("", "delete") => {
                self.bound_pod(i, node, &i.namespace, &i.name).await?;
                // The uid precondition ties the delete to the pod it was decided on: a pod
                // re-created under the name since (on another node) is not deleted (409).
                let options: Value = body(r, "DeleteOptions")?;
                if options["preconditions"]["uid"]
                    .as_str()
                    .is_none_or(str::is_empty)
                {
                    return deny(i, "a node deletes a pod only with a uid precondition");
                }
                Ok(Act::Node)
            }
            ("status", "patch") => {
                let pod = self.bound_pod(i, node, &i.namespace, &i.name).await?;
                let patch: Value = body(r, "a JSON patch")?;
                restriction::pod_status_patch(&patch, &pod).or_else(|d| deny(i, d.0))?;
                Ok(Act::Node)
            }
            ("status", "update") => {
                let pod = self.bound_pod(i, node, &i.namespace, &i.name).await?;
                let new: Pod = body(r, "a Pod")?;
                if restriction::pod_status_update(&new, &pod).is_err() {
                    // The cache may lag the pod: decide on it as it is now.
                    let now = self
                        .get::<Pod>(Some(&i.namespace), &i.name)
                        .await
                        .ok()
                        .flatten();
                    let Some(now) = now.filter(|p| bound_node(p) == Some(node)) else {
                        return deny(i, format!("the pod is not bound to node '{node}'"));
                    };
                    restriction::pod_status_update(&new, &now).or_else(|d| deny(i, d.0))?;
                }
                Ok(Act::Node)
            }
            _ => deny(
                i,
                "a node may only read, create mirror pods, delete and write the status of its own pods",
            ),
        }
    }

    async fn token(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        let tr: Value = body(r, "a TokenRequest")?;
        let (pod, _) = restriction::token_bound_pod(&tr).or_else(|d| deny(i, d.0))?;
        let pod = self.bound_pod(i, node, &i.namespace, pod).await?;
        restriction::token_request(&tr, &i.name, &pod).or_else(|d| deny(i, d.0))?;
        Ok(Act::Node)
    }

    fn lease(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        let name = if i.verb == "create" {
            let lease: Value = body(r, "a Lease")?;
            let ns = lease["metadata"]["namespace"].as_str().unwrap_or_default();
            if !ns.is_empty() && ns != NODE_LEASE_NAMESPACE {
                return deny(i, "a node may only write its own lease");
            }
            lease["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        } else {
            i.name.clone()
        };
        if i.namespace == NODE_LEASE_NAMESPACE && name == node {
            return Ok(Act::Node);
        }
        deny(
            i,
            format!("node '{node}' may only use its own lease {NODE_LEASE_NAMESPACE}/{node}"),
        )
    }

    /// Events about itself and its own pods only (the Node authorizer lets a node write any
    /// event); one is changed only under a name the kubelet's recorder gives events about
    /// its own objects (`<object>.<suffix>`).
    async fn event(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        if i.namespace.is_empty() {
            return deny(i, "events are namespaced");
        }
        let own_pod = async |name: &str| self.bound_pod(i, node, &i.namespace, name).await.is_ok();
        if i.verb == "patch" {
            let patch: Value = body(r, "an event patch")?;
            let meta = &patch["metadata"];
            if patch.get("involvedObject").is_some()
                || patch.get("related").is_some()
                || meta.get("name").is_some()
                || meta.get("namespace").is_some()
            {
                return deny(i, "an event patch may not change what the event is about");
            }
            // `<object>.<suffix>`: the node, or a pod of it (pod names may hold dots).
            let mut candidates: Vec<&str> = i
                .name
                .match_indices('.')
                .map(|(at, _)| &i.name[..at])
                .collect();
            candidates.reverse();
            if candidates.contains(&node) {
                return Ok(Act::Node);
            }
            let mut lookups = 0;
            for c in candidates {
                let cached = self.pods.get_by(Some(&i.namespace), c);
                if cached.is_none() {
                    if lookups == EVENT_LOOKUPS {
                        continue;
                    }
                    lookups += 1;
                }
                if own_pod(c).await {
                    return Ok(Act::Node);
                }
            }
            return deny(
                i,
                "a node may only change events named after its own objects",
            );
        }
        let event: Value = body(r, "an event")?;
        let ns = event["metadata"]["namespace"].as_str().unwrap_or_default();
        if !ns.is_empty() && ns != i.namespace {
            return deny(i, "the event's namespace differs from the request's");
        }
        let about = &event["involvedObject"];
        let (kind, about_ns, about_name) = (
            about["kind"].as_str().unwrap_or_default(),
            about["namespace"].as_str().unwrap_or_default(),
            about["name"].as_str().unwrap_or_default(),
        );
        let own = match kind {
            "Node" => about_name == node,
            "Pod" if about_ns == i.namespace && !about_name.is_empty() => own_pod(about_name).await,
            _ => false,
        };
        if !own {
            return deny(
                i,
                format!("node '{node}' may only write events about itself and its own pods"),
            );
        }
        if i.verb == "update"
            && !i
                .name
                .strip_prefix(about_name)
                .is_some_and(|rest| rest.starts_with('.'))
        {
            return deny(
                i,
                "a node may only change events named after its own objects",
            );
        }
        Ok(Act::Node)
    }
}

fn own_node(i: &RequestInfo, node: &str) -> Result<(), Refusal> {
    if i.name == node {
        return Ok(());
    }
    deny(
        i,
        format!("node '{node}' may only {} its own Node object", verb(i)),
    )
}

impl Policy for EdgePolicy {
    type Error = Refusal;

    async fn decide(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let (i, node) = (r.info(), r.node());
        if !i.is_resource {
            return deny(i, format!("node '{node}' may not request {}", i.path));
        }
        match (
            i.group.as_str(),
            i.resource.as_str(),
            i.subresource.as_str(),
            i.verb.as_str(),
        ) {
            ("", "nodes", "", "get" | "list" | "watch") => own_node(i, node).map(|()| Act::Node),
            ("", "nodes", "", "create") => self.node_create(r),
            ("", "nodes", "" | "status", "patch") => self.node_patch(r).await,
            ("", "nodes", "status", "update") => {
                own_node(i, node)?;
                let new: Node = body(r, "a Node")?;
                self.on_own_node(i, node, |current| match current {
                    Some(c) => restriction::node_update(&new, c),
                    None => Err(Denied(format!("node {node} is not registered"))),
                })
                .await?;
                Ok(Act::Node)
            }
            ("", "pods", _, _) => self.pod_rule(r).await,
            ("", "configmaps", "", "get") => self.uses(i, node, RefKind::ConfigMap).await,
            ("", "secrets", "", "get") => self.uses(i, node, RefKind::Secret).await,
            ("", "persistentvolumeclaims", "", "get") => {
                self.uses(i, node, RefKind::PersistentVolumeClaim).await
            }
            ("", "persistentvolumes", "", "get") => {
                let locations = self.locations.clone();
                self.decided_on_object::<k8s_openapi::api::core::v1::PersistentVolume>(
                    i,
                    node,
                    move |pv| {
                        let claim = &pv["spec"]["claimRef"];
                        match (claim["namespace"].as_str(), claim["name"].as_str()) {
                            (Some(ns), Some(name)) => locations.read().node_uses(
                                node,
                                &ObjectRef::new(RefKind::PersistentVolumeClaim, ns, name),
                            ),
                            _ => false,
                        }
                    },
                )
                .await
            }
            ("storage.k8s.io", "volumeattachments", "", "get") => {
                self.decided_on_object::<k8s_openapi::api::storage::v1::VolumeAttachment>(
                    i,
                    node,
                    |va| va["spec"]["nodeName"].as_str() == Some(node),
                )
                .await
            }
            ("certificates.k8s.io", "certificatesigningrequests", "", "get") => self
                .decided_on_object::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>(
                    i,
                    node,
                    |csr| restriction::csr_for_node(node, csr).is_ok(),
                )
                .await,
            ("certificates.k8s.io", "certificatesigningrequests", "", "create") => {
                let csr: Value = body(r, "a CertificateSigningRequest")?;
                restriction::csr_for_node(node, &csr).or_else(|d| deny(i, d.0))?;
                Ok(Act::Node)
            }
            ("", "serviceaccounts", "token", "create") => self.token(r).await,
            ("coordination.k8s.io", "leases", "", "get" | "update" | "create") => self.lease(r),
            ("", "events", "", "create" | "update" | "patch") => self.event(r).await,
            _ => deny(i, format!("no rule lets node '{node}' {i}")),
        }
    }
}

/// Labels of a Node as a map, for tests.
#[cfg(test)]
fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeedge_api::authz::authorize;
    use serde_json::json;

    fn policy(pods: Vec<Pod>, nodes: Vec<Node>) -> EdgePolicy {
        let (mut pod_writer, pod_cache) = kubeedge_api::watch::cache();
        let (mut node_writer, node_cache) = kubeedge_api::watch::cache();
        let locations = SharedLocations::default();
        for pod in pods {
            let key = kubeedge_api::watch::key_of(&pod);
            let n = bound_node(&pod).unwrap_or_default().to_owned();
            locations.write().set_pod(&key, &n, granted(&pod));
            pod_writer.upsert(pod);
        }
        for n in nodes {
            node_writer.upsert(n);
        }
        pod_writer.mark_ready();
        node_writer.mark_ready();
        // Lookups fail: every decision here is taken from the caches.
        let client = kube::Client::new(
            tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no API server"))
            }),
            "default",
        );
        EdgePolicy::new(
            pod_cache,
            node_cache,
            locations,
            client,
            None,
            Duration::from_millis(1),
        )
    }

    fn node(name: &str, l: &[(&str, &str)]) -> Node {
        let mut n: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "uid": format!("uid-{name}")}}),
        )
        .unwrap();
        n.metadata.labels = Some(labels(l));
        n
    }

    fn pod(ns: &str, name: &str, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "labels": {"app": "a"}},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}]}]}
        }))
        .unwrap()
    }

    async fn decide(
        p: &EdgePolicy,
        node: &str,
        method: &str,
        uri: impl AsRef<str>,
        body: Value,
    ) -> Result<Act, Refusal> {
        let uri = uri.as_ref();
        let req = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(serde_json::to_vec(&body).unwrap());
        authorize(p, node, req.map_err(Into::into))
            .await
            .map(|a| a.act())
    }

    #[tokio::test]
    async fn a_list_whose_name_is_not_in_the_executed_request_is_a_list_of_everything() {
        let p = policy(vec![pod("ns", "mine", "e1")], vec![node("e1", &[])]);
        let get = |uri: &'static str| decide(&p, "e1", "GET", uri, Value::Null);
        assert_eq!(get("/api/v1/namespaces/ns/secrets/s1").await, Ok(Act::Node));
        assert!(get("/api/v1/namespaces/ns/secrets").await.is_err());
        assert!(get("/api/v1/namespaces/ns/secrets/other").await.is_err());
        assert_eq!(get("/api/v1/nodes/e1").await, Ok(Act::Node));
        assert!(get("/api/v1/nodes").await.is_err());
        assert!(get("/api/v1/nodes/e2").await.is_err());
    }

    #[tokio::test]
    async fn node_status_patches_follow_node_restriction() {
        let p = policy(
            vec![],
            vec![node("e1", &[("node-role.kubernetes.io/edge", "")])],
        );
        let patch = |b: Value| decide(&p, "e1", "PATCH", "/api/v1/nodes/e1/status", b);
        assert_eq!(
            patch(json!({"status": {"conditions": []}})).await,
            Ok(Act::Node)
        );
        for refused in [
            json!({"metadata": {"labels": {"node-restriction.kubernetes.io/secure": "true"}}}),
            json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
            json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": null}}}),
            json!({"metadata": {"finalizers": ["x/y"]}}),
        ] {
            assert!(patch(refused.clone()).await.is_err(), "{refused}");
        }
        assert!(
            decide(&p, "e1", "PATCH", "/api/v1/nodes/e2/status", json!({}))
                .await
                .is_err()
        );
        // cloudcore sets KubeEdge's role labels, never removes them.
        let roles = |b: Value| decide(&p, "e1", "PATCH", "/api/v1/nodes/e1", b);
        assert_eq!(
            roles(json!({"metadata": {"labels": {"node-role.kubernetes.io/agent": ""}}})).await,
            Ok(Act::Cloudcore)
        );
        assert!(
            roles(json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": "x"}}}))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn pod_status_patches_keep_the_pods_labels() {
        let p = policy(
            vec![pod("ns", "mine", "e1"), pod("ns", "theirs", "e2")],
            vec![],
        );
        let patch = |name: &str, b: Value| {
            decide(
                &p,
                "e1",
                "PATCH",
                format!("/api/v1/namespaces/ns/pods/{name}/status"),
                b,
            )
        };
        assert_eq!(
            patch(
                "mine",
                json!({"metadata": {"uid": "uid-mine"}, "status": {}})
            )
            .await,
            Ok(Act::Node)
        );
        assert!(
            patch("mine", json!({"metadata": {"labels": {"app": "payments"}}}))
                .await
                .is_err()
        );
        assert!(patch("theirs", json!({"status": {}})).await.is_err());
    }

    #[tokio::test]
    async fn pod_deletes_carry_the_pods_uid() {
        let p = policy(vec![pod("ns", "mine", "e1")], vec![]);
        let del = |b: Value| decide(&p, "e1", "DELETE", "/api/v1/namespaces/ns/pods/mine", b);
        assert_eq!(
            del(json!({"preconditions": {"uid": "uid-mine"}})).await,
            Ok(Act::Node)
        );
        assert!(del(json!({})).await.is_err());
        // Another uid is the API server's to refuse (409): the pod is not deleted.
        assert_eq!(
            del(json!({"preconditions": {"uid": "other"}})).await,
            Ok(Act::Node)
        );
    }
}
