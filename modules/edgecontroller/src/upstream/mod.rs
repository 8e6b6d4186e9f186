//! Edge → Kubernetes: requests from edge nodes, one bounded queue and concurrency limit per
//! kind (KubeEdge's blocking single dispatcher lets one slow kind stall lease renewals), each
//! answered in the shape the edge decodes.

mod csr;
mod events;
mod leases;
mod nodes;
mod pods;
mod queries;
mod queues;
mod rules;

use std::time::Duration;

use beehive::Message;
use beehive::constants::operation;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Resource;
use kube::api::{Patch, PatchParams};
use kubeedge_api::NodeResource;
use kubeedge_api::authz::{Authorized, authorize};
use kubeedge_api::client::NodeClient;
use kubeedge_api::status::StatusError;
use kubeedge_api::watch::Cache;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use crate::authz::{Fetched, NodeAuthorizer, Refusal, not_used};
use crate::downstream::{ObjectRef, RefKind, bound_node, granted};
use crate::metrics::EdgeControllerMetrics;
use crate::outbox::Outbox;
use crate::policy::EdgePolicy;
use crate::reply;
pub(crate) use crate::request_kind::Kind;

pub(crate) use queues::Queues;

/// Most objects one decision may read from the API server because the caches lack them.
const MAX_LOOKUPS: usize = 16;

/// How a request of this kind is answered (docs/controllers.md, "The four answer shapes").
fn shape(kind: Kind, op: &str) -> Shape {
    match kind {
        Kind::ProcessEvent | Kind::UpdateRuleStatus | Kind::Connection => Shape::None,
        Kind::CreateNode
        | Kind::PatchNode
        | Kind::PatchPod
        | Kind::CreatePod
        | Kind::CreateLease
        | Kind::QueryLease => Shape::ObjectResp,
        Kind::CertificateSigningRequest if op == operation::INSERT => Shape::ObjectResp,
        _ => Shape::Raw,
    }
}

/// The answer shape of a request kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `{"Object", "Err"}`.
    ObjectResp,
    /// `"OK"`, a raw object or a raw `{"ErrStatus"}`.
    Raw,
    /// Never answered (events, rule status, connection events).
    None,
}

/// Whether a handled request succeeded (for the counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Failed,
}

/// Settings the upstream handlers need besides the queue sizes.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Legacy node status heartbeat refresh threshold.
    pub(crate) node_update_frequency: Duration,
    /// Written to the `cloudcore` annotation; `None` leaves it alone.
    pub(crate) cloudcore_ip: Option<String>,
    /// How long a cache-backed request waits for the cache's first list before falling back
    /// to the API (KubeEdge answers from unsynced caches, so edges get NotFound for objects
    /// that exist right after cloudcore starts).
    pub(crate) cache_wait: Duration,
}

/// Everything the handlers share.
pub(crate) struct Upstream {
    /// Sends the requests [`Upstream::authorized`] allowed, and nothing else.
    pub(crate) kube: NodeClient,
    /// cloudcore's own calls: lookups a decision needs and cloudcore's record of which replica
    /// holds a node. Never an answer to an edge's request by itself.
    pub(crate) own: kube::Client,
    /// Decides the messages (before any API call).
    pub(crate) authz: NodeAuthorizer,
    /// Decides each API request built for a message.
    pub(crate) policy: EdgePolicy,
    pub(crate) metrics: EdgeControllerMetrics,
    pub(crate) out: Outbox,
    pub(crate) nodes: Cache<Node>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) configmaps: Cache<ConfigMap>,
    pub(crate) secrets: Cache<Secret>,
    pub(crate) settings: Settings,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("kube", &self.kube)
            .field("policy", &self.policy)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A request builder for a built-in resource type: every namespace and name it is given is
/// one percent-encoded path segment, so a name that escaped validation still cannot address
/// another object or add a query.
pub(crate) fn api<K: Resource<DynamicType = ()>>(
    namespace: Option<&str>,
) -> kubeedge_api::escaped::Request {
    kubeedge_api::escaped::Request::of::<K>(namespace)
}

/// The API request a kube-core builder made (a build error is a `400`).
pub(crate) type Built = Result<http::Request<Vec<u8>>, kube::core::request::Error>;

/// A GET of `name` as cloudcore (`Ok(None)`: 404), for lookups a decision needs.
pub(crate) async fn own_get<K>(
    own: &kube::Client,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<K>, StatusError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let request = api::<K>(namespace)
        .get(name, &Default::default())
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    match own.request::<K>(request).await {
        Ok(o) => Ok(Some(o)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(StatusError::from_kube(&e)),
    }
}

/// The parts of a request's resource, or a `400` naming what is missing.
pub(crate) fn parts(
    msg: &Message,
    need_namespace: bool,
    need_name: bool,
) -> Result<NodeResource, StatusError> {
    let r = NodeResource::parse(&msg.route.resource)
        .map_err(|e| StatusError::bad_request(e.to_string()))?;
    if need_namespace && r.namespace.is_empty() {
        return Err(StatusError::bad_request(format!(
            "resource {:?} has no namespace",
            msg.route.resource
        )));
    }
    if need_name && r.name.is_empty() {
        return Err(StatusError::bad_request(format!(
            "resource {:?} has no name",
            msg.route.resource
        )));
    }
    Ok(r)
}

/// The request's content as `T` (a string holding JSON text is read too, as Go's
/// `GetContentData` does), or a `400` saying what it should have been.
pub(crate) fn content<T: DeserializeOwned>(msg: &Message, what: &str) -> Result<T, StatusError> {
    msg.content
        .parse_bytes()
        .map_err(|e| StatusError::bad_request(format!("content is not {what}: {e}")))
}

/// `obj` as a request body; API objects always encode, but if one did not the edge would
/// still get an answer (a `500`).
pub(crate) fn body<T: Serialize>(obj: &T) -> Result<Vec<u8>, StatusError> {
    serde_json::to_vec(obj).map_err(|e| StatusError::internal(e.to_string()))
}

impl Upstream {
    /// Runs the handler of `kind` for `msg`; the handler sends its own answers.
    pub(crate) async fn handle(&self, kind: Kind, msg: Message) -> Outcome {
        debug!(kind = kind.name(), msg_id = %msg.header.id, resource = %msg.route.resource, operation = %msg.route.operation, "handling");
        if kind == Kind::UpdatePodStatus
            && let Err(too_long) = self.check_pod_status_list(&msg)
        {
            return self.fail(kind, &msg, too_long).await;
        }
        match self.check(kind, &msg).await {
            Ok(()) => {}
            // The pod to delete is gone: nothing left to authorize or do.
            Err(Refusal::PodNotFound { .. }) if kind == Kind::DeletePod => {
                return self.send(reply::ok(&msg), Outcome::Ok).await;
            }
            Err(gone @ Refusal::PodNotFound { .. }) => {
                let node = kubeedge_api::node_of(&msg.route.resource).unwrap_or_default();
                return self.fail(kind, &msg, gone.status(node)).await;
            }
            Err(refusal) => return self.deny(kind, &msg, refusal).await,
        }
        match kind {
            Kind::UpdateNodeStatus => self.legacy_node_status(&msg).await,
            Kind::UpdatePodStatus => self.legacy_pod_status(&msg).await,
            Kind::ProcessEvent => self.event(&msg).await,
            Kind::QueryConfigMap
            | Kind::QuerySecret
            | Kind::QueryPersistentVolume
            | Kind::QueryPersistentVolumeClaim
            | Kind::QueryVolumeAttachment
            | Kind::QueryNode => self.query(&msg).await,
            Kind::ServiceAccountToken => self.service_account_token(&msg).await,
            Kind::CreateNode => self.register_node(&msg).await,
            Kind::UpdateNode => self.update_node(&msg).await,
            Kind::PatchNode => self.patch_node_status(&msg).await,
            Kind::PatchPod => self.patch_pod_status(&msg).await,
            Kind::DeletePod => self.delete_pod(&msg).await,
            Kind::CreatePod => self.create_pod(&msg).await,
            Kind::CreateLease => self.write_lease(&msg).await,
            Kind::QueryLease => self.query_lease(&msg).await,
            Kind::UpdateRuleStatus => self.rule_status(&msg).await,
            Kind::CertificateSigningRequest if msg.route.operation == operation::INSERT => {
                self.create_csr(&msg).await
            }
            Kind::CertificateSigningRequest => self.query(&msg).await,
            Kind::Connection => self.connected(&msg).await,
        }
    }

    /// The node authorizer's decision on `msg`, resolving what the caches cannot answer yet:
    /// a pod not in the cache is looked up once (as cloudcore), and reads of objects a pod
    /// references wait for the pod cache's first list (then list the node's pods) so a
    /// restarted cloudcore does not refuse an edge that asks early.
    async fn check(&self, kind: Kind, msg: &Message) -> Result<(), Refusal> {
        if matches!(
            kind,
            Kind::QueryConfigMap | Kind::QuerySecret | Kind::QueryPersistentVolumeClaim
        ) && !self.pods.wait_ready_for(self.settings.cache_wait).await
        {
            return self.check_reads_by_listing(kind, msg).await;
        }
        let mut fetched = Fetched::default();
        for _ in 0..MAX_LOOKUPS {
            match self.authz.decide(kind, msg, &fetched) {
                Err(Refusal::UnknownPod { namespace, name }) => {
                    match own_get::<Pod>(&self.own, Some(&namespace), &name).await {
                        Ok(Some(pod)) => fetched.pods.push(pod),
                        Ok(None) => return Err(Refusal::PodNotFound { namespace, name }),
                        Err(_) => return Err(Refusal::UnknownPod { namespace, name }),
                    }
                }
                Err(Refusal::UnconfirmedNode { name }) => {
                    let node = own_get::<Node>(&self.own, None, &name).await;
                    fetched.node = Some(node.ok().flatten());
                }
                decision => return decision,
            }
        }
        Err(Refusal::Malformed(format!(
            "the request names more than {MAX_LOOKUPS} pods cloudcore has not seen yet"
        )))
    }

    /// The read rule before the pod cache has listed: the node's pods, listed once.
    async fn check_reads_by_listing(&self, kind: Kind, msg: &Message) -> Result<(), Refusal> {
        // Names are checked first, as on the cached path.
        let r = NodeResource::parse(&msg.route.resource)
            .map_err(|e| Refusal::Malformed(e.to_string()))?;
        kubeedge_api::validation::namespace(&r.namespace)?;
        kubeedge_api::validation::object_name("name", &r.name)?;
        let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={}", r.node));
        let list = api::<Pod>(None)
            .list(&lp)
            .map_err(|e| Refusal::Malformed(e.to_string()))?;
        let pods: k8s_openapi::List<Pod> = self
            .own
            .request(list)
            .await
            .map_err(|e| Refusal::Malformed(format!("cannot list the node's pods: {e}")))?;
        let kind = match kind {
            Kind::QueryConfigMap => RefKind::ConfigMap,
            Kind::QuerySecret => RefKind::Secret,
            _ => RefKind::PersistentVolumeClaim,
        };
        let wanted = ObjectRef::new(kind, &r.namespace, &r.name);
        let used = pods
            .items
            .iter()
            .filter(|p| bound_node(p) == Some(r.node.as_str()))
            .any(|p| granted(p).contains(&wanted));
        if used {
            return Ok(());
        }
        Err(not_used(&r.as_ref(), kind))
    }

    /// `request`, built for `msg` of `kind` from node `node`, as the policy decides it
    /// ([`EdgePolicy`]): a refusal is logged and counted like any other and comes back as the
    /// status the edge gets.
    pub(crate) async fn authorized(
        &self,
        kind: Kind,
        msg: &Message,
        node: &str,
        request: Built,
    ) -> Result<Authorized, StatusError> {
        match authorize(&self.policy, node, request.map_err(Into::into)).await {
            Ok(a) => Ok(a),
            Err(gone @ (Refusal::PodNotFound { .. } | Refusal::Unavailable(_))) => {
                Err(gone.status(node))
            }
            Err(refusal) => {
                self.refused(kind, msg, &refusal);
                Err(refusal.status(node))
            }
        }
    }

    /// A request of cloudcore's own (not made for an edge), as cloudcore.
    pub(crate) async fn own_request<T: DeserializeOwned>(
        &self,
        request: Built,
    ) -> Result<T, StatusError> {
        let request = request.map_err(|e| StatusError::bad_request(e.to_string()))?;
        self.own
            .request::<T>(request)
            .await
            .map_err(|e| StatusError::from_kube(&e))
    }

    /// [`Upstream::authorized`], then sent as decided; the answer decoded as `T`.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        kind: Kind,
        msg: &Message,
        node: &str,
        request: Built,
    ) -> Result<T, StatusError> {
        let authorized = self.authorized(kind, msg, node, request).await?;
        let t = std::time::Instant::now();
        let answer = self.kube.send(authorized).await;
        debug!(kind = kind.name(), msg_id = %msg.header.id, ok = answer.is_ok(), api_us = t.elapsed().as_micros() as u64, "API request answered");
        answer
    }

    /// Refuses `req`: a warning naming the node and the request, the denial counter, and the
    /// answer in the shape of `kind` (kinds never answered get none).
    pub(crate) async fn deny(&self, kind: Kind, req: &Message, refusal: Refusal) -> Outcome {
        self.refused(kind, req, &refusal);
        let node = kubeedge_api::node_of(&req.route.resource).unwrap_or_default();
        let status = refusal.status(node);
        if let Some(resp) = Self::error_reply(kind, req, &status) {
            self.out.send(resp).await;
        }
        Outcome::Failed
    }

    /// Logs and counts a refusal (the caller answers).
    pub(crate) fn refused(&self, kind: Kind, req: &Message, refusal: &Refusal) {
        let node = kubeedge_api::node_of(&req.route.resource).unwrap_or_default();
        warn!(
            node,
            kind = kind.name(),
            resource = %truncate(&req.route.resource, 256),
            operation = %truncate(&req.route.operation, 64),
            source = %truncate(&req.route.source, 64),
            class = refusal.class(),
            reason = %refusal,
            "edge request refused by node authorization"
        );
        self.metrics.denied(kind);
    }

    /// Runs a handler's `body` and sends the answer it builds, or its error in the shape of
    /// `kind` (see [`Upstream::fail`]): the one place where a handler's `?` becomes an answer.
    pub(crate) async fn answer(
        &self,
        kind: Kind,
        req: &Message,
        body: impl Future<Output = Result<Message, StatusError>>,
    ) -> Outcome {
        match body.await {
            Ok(resp) => self.send(resp, Outcome::Ok).await,
            Err(e) => self.fail(kind, req, e).await,
        }
    }

    /// `nodepatch`/`podpatch`: the content is a strategic merge patch of the object's
    /// `status`, applied as sent once the policy allowed it (what a node may change through
    /// status is NodeRestriction's rule), with `uid` (when given) as its `metadata.uid`, a
    /// precondition the API server enforces; answers ObjectResp with the patched object
    /// (header RV = its RV).
    pub(crate) async fn patch_status<K>(
        &self,
        kind: Kind,
        msg: &Message,
        namespaced: bool,
        uid: Option<String>,
    ) -> Outcome
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        self.answer(kind, msg, async {
            let r = parts(msg, namespaced, true)?;
            let mut patch: serde_json::Value = content(msg, "a JSON patch")?;
            if let Some(uid) = uid {
                with_uid(&mut patch, uid);
            }
            let ns = namespaced.then_some(r.namespace.as_str());
            let request = api::<K>(ns).patch_subresource(
                "status",
                &r.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            );
            let patched: K = self.call(kind, msg, &r.node, request).await?;
            let rv = patched.meta().resource_version.clone();
            Ok(reply::object_resp(msg, Ok(patched), rv))
        })
        .await
    }

    /// Sends an answer (or a push) and reports `outcome`.
    pub(crate) async fn send(&self, msg: Message, outcome: Outcome) -> Outcome {
        self.out.send(msg).await;
        outcome
    }

    /// The error answer to a request of `kind` in its shape, `None` for kinds never answered.
    pub(crate) fn error_reply(kind: Kind, req: &Message, err: &StatusError) -> Option<Message> {
        match shape(kind, &req.route.operation) {
            Shape::ObjectResp => Some(reply::object_resp::<()>(req, Err(err.clone()), None)),
            Shape::Raw => Some(reply::raw_error(req, req.route.resource.clone(), err)),
            Shape::None => None,
        }
    }

    /// Answers `req` with `err` in the shape of `kind` (logged); always [`Outcome::Failed`].
    pub(crate) async fn fail(&self, kind: Kind, req: &Message, err: StatusError) -> Outcome {
        debug!(kind = kind.name(), msg_id = %req.header.id, resource = %req.route.resource, error = %err, "request failed");
        if let Some(resp) = Self::error_reply(kind, req, &err) {
            self.out.send(resp).await;
        }
        Outcome::Failed
    }
}

/// Gives the patch object `patch` `uid` as its `metadata.uid` unless it names one already
/// (edged sends the uid of the pod it reports on: the API server then holds the patch to that
/// one, which is either the pod decided on or no pod at all). A patch that is not an object
/// is left alone: the API server refuses it anyway.
fn with_uid(patch: &mut serde_json::Value, uid: String) {
    let Some(obj) = patch.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}));
    match meta.as_object_mut() {
        Some(meta) => {
            meta.entry("uid").or_insert_with(|| uid.into());
        }
        None => *meta = serde_json::json!({"uid": uid}),
    }
}

/// At most `max` bytes of `s` (on a character boundary): edge-chosen strings in logs stay small.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_replies_take_the_shape_of_the_kind() {
        let req = Message::new().with_route("edged", "meta", "node/e/null/nodepatch/e", "patch");
        let err = StatusError::too_many_requests("full");
        let r = Upstream::error_reply(Kind::PatchNode, &req, &err).unwrap();
        let v: serde_json::Value = r.content.parse().unwrap();
        assert!(v.get("Object").is_some() && v["Err"]["ErrStatus"]["code"] == 429);
        let r = Upstream::error_reply(Kind::QuerySecret, &req, &err).unwrap();
        let v: serde_json::Value = r.content.parse().unwrap();
        assert_eq!(v["ErrStatus"]["reason"], "TooManyRequests");
        assert!(Upstream::error_reply(Kind::ProcessEvent, &req, &err).is_none());
    }

    #[test]
    fn a_status_patch_carries_the_decided_pods_uid() {
        let mut p = serde_json::json!({"status": {"phase": "Running"}});
        with_uid(&mut p, "u1".into());
        assert_eq!(p["metadata"]["uid"], "u1");
        // The edge's own precondition stays (the API server holds the patch to it).
        let mut p = serde_json::json!({"metadata": {"uid": "other", "labels": {}}, "status": {}});
        with_uid(&mut p, "u1".into());
        assert_eq!(
            p["metadata"],
            serde_json::json!({"uid": "other", "labels": {}})
        );
    }

    #[test]
    fn a_name_that_escaped_validation_stays_one_path_segment() {
        use k8s_openapi::api::core::v1::{Node, Pod};
        use kube::api::GetParams;
        let get = api::<Node>(None)
            .get("victim?x=1", &GetParams::default())
            .unwrap();
        assert_eq!(get.uri(), "/api/v1/nodes/victim%3Fx%3D1");
        let patch = api::<Pod>(Some("ns/../kube-system"))
            .patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({})),
            )
            .unwrap();
        assert_eq!(
            patch.uri().path(),
            "/api/v1/namespaces/ns%2F..%2Fkube-system/pods/p"
        );
        assert!(api::<Node>(None).delete("..", &Default::default()).is_err());
        // A valid name is unchanged.
        let get = api::<Node>(None)
            .get("edge-1", &GetParams::default())
            .unwrap();
        assert_eq!(get.uri(), "/api/v1/nodes/edge-1");
    }
}
