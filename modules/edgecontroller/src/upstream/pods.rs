//! Pod requests: status patch, legacy status, delete and create.

use beehive::Message;
use beehive::constants::{operation, resource_type};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, GetParams, PostParams, Preconditions};
use kubeedge_api::NodeResource;
use kubeedge_api::status::StatusError;
use serde::Deserialize;
use serde::de::{Deserializer as _, Error as _, IgnoredAny, SeqAccess, Visitor};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{Kind, Outcome, Upstream, api, body, content, parts};
use crate::reply;

/// The phrase of a `409` for a UID precondition mismatch: the pod to delete is already gone.
const RECREATED: &str = "The object might have been deleted and then recreated";
/// Retries of conflicting status writes (409) before giving up.
const CONFLICT_RETRIES: usize = 3;
/// The fewest statuses a legacy list may always hold: the kubelet's default `maxPods`.
pub(crate) const MIN_POD_STATUS_LIST: usize = 110;
/// The most statuses a legacy list may hold whatever the node's pod capacity says: each
/// costs a GET and a PUT, and a 32 MiB message could otherwise carry ~10^5 of them.
pub(crate) const MAX_POD_STATUS_LIST: usize = 1000;

/// The legacy pod status request (`edgeapi.PodStatusRequest`, keys without JSON tags).
#[derive(Debug, Clone, Deserialize)]
struct PodStatusRequest {
    #[serde(rename = "UID", alias = "uid", alias = "Uid", default)]
    uid: String,
    #[serde(rename = "Name", alias = "name", default)]
    name: String,
    #[serde(rename = "Status", alias = "status", default)]
    status: PodStatus,
}

fn seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn truncate(t: &mut Option<Time>) {
    if let Some(t) = t {
        t.0 = seconds(t.0);
    }
}

fn truncate_state(s: &mut Option<ContainerState>) {
    let Some(s) = s else { return };
    if let Some(r) = &mut s.running {
        truncate(&mut r.started_at);
    }
    if let Some(t) = &mut s.terminated {
        truncate(&mut t.started_at);
        truncate(&mut t.finished_at);
    }
}

fn condition<'a>(status: &'a PodStatus, kind: &str) -> Option<&'a PodCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == kind)
}

/// Go's legacy status merge: keep transition times of unchanged Ready/Initialized
/// conditions, keep the start time, truncate times to seconds, order container statuses.
pub(crate) fn merge_pod_status(
    pod: &Pod,
    live: &PodStatus,
    mut status: PodStatus,
    now: Timestamp,
) -> PodStatus {
    let now = seconds(now);
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ != "Ready" && c.type_ != "Initialized" {
            continue;
        }
        c.last_transition_time = match condition(live, &c.type_) {
            Some(old) if old.status == c.status => old.last_transition_time.clone(),
            _ => Some(Time(now)),
        };
    }
    status.start_time = match (&live.start_time, &status.start_time) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(t)) => Some(t.clone()),
        (None, None) => Some(Time(now)),
    };
    truncate(&mut status.start_time);
    for c in status.conditions.iter_mut().flatten() {
        truncate(&mut c.last_probe_time);
        truncate(&mut c.last_transition_time);
    }
    let normalize = |list: &mut Option<Vec<ContainerStatus>>| {
        for c in list.iter_mut().flatten() {
            truncate_state(&mut c.state);
            truncate_state(&mut c.last_state);
        }
    };
    normalize(&mut status.container_statuses);
    normalize(&mut status.init_container_statuses);
    if let Some(list) = &mut status.container_statuses {
        list.sort_by(|a, b| a.name.cmp(&b.name));
    }
    if let Some(list) = &mut status.init_container_statuses {
        let order: Vec<&str> = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .map(|c| c.name.as_str())
            .collect();
        list.sort_by_key(|c| {
            order
                .iter()
                .position(|n| *n == c.name)
                .unwrap_or(usize::MAX)
        });
    }
    status
}

/// Whether `bytes` is a JSON array of more than `limit` elements. Stops reading at element
/// `limit + 1`, so a huge list costs no more than a legal one; anything that is not an array
/// is `false` (the handler answers it `400`).
fn list_longer_than(bytes: &[u8], limit: usize) -> bool {
    struct Longer<'a> {
        limit: usize,
        over: &'a std::cell::Cell<bool>,
    }
    impl<'de> Visitor<'de> for Longer<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
                if n > self.limit {
                    self.over.set(true);
                    return Err(A::Error::custom("list too long"));
                }
            }
            Ok(())
        }
    }
    let over = std::cell::Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let _ = de.deserialize_seq(Longer { limit, over: &over });
    over.get()
}

/// The node's pod capacity (`status.capacity.pods`) if the Node cache knows it.
fn pod_capacity(node: &k8s_openapi::api::core::v1::Node) -> Option<usize> {
    let q = node.status.as_ref()?.capacity.as_ref()?.get("pods")?;
    q.0.parse().ok()
}

/// True when no container is running (each is terminated or waiting).
fn none_running(status: &PodStatus) -> bool {
    status.container_statuses.iter().flatten().all(|c| {
        c.state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some() || s.waiting.is_some())
    })
}

impl Upstream {
    /// `podpatch`: strategic merge patch of `pods/<name>/status` as the node; ObjectResp. The
    /// patch carries a uid as `metadata.uid` (edged's own, else that of the pod it was decided
    /// on, the cache's): the API server refuses to apply it to another pod of the same name (a
    /// uid cannot change), so a pod deleted and created again elsewhere meanwhile is never
    /// patched by this node.
    pub(crate) async fn patch_pod_status(&self, msg: &Message) -> Outcome {
        let uid = match super::parts(msg, true, true) {
            Ok(r) => self.pod_uid(&r.namespace, &r.name).await,
            Err(_) => None,
        };
        self.patch_status::<Pod>(Kind::PatchPod, msg, true, uid)
            .await
    }

    /// `pod`/`insert` (mirror pods): creates the pod in the resource's namespace; ObjectResp.
    pub(crate) async fn create_pod(&self, msg: &Message) -> Outcome {
        self.answer(Kind::CreatePod, msg, async {
            let r = parts(msg, true, false)?;
            let mut pod: Pod = content(msg, "a Pod")?;
            pod.metadata.resource_version = None;
            let request =
                api::<Pod>(Some(&r.namespace)).create(&PostParams::default(), body(&pod)?);
            let created: Pod = self.call(Kind::CreatePod, msg, &r.node, request).await?;
            let rv = created.metadata.resource_version.clone();
            Ok(reply::object_resp(msg, Ok(created), rv))
        })
        .await
    }

    /// `pod`/`delete` from the edge's status manager: a string content is the pod UID (old
    /// edges), an object is DeleteOptions. Every delete carries the pod's uid as a
    /// precondition (the edge's, else the one of the pod the decision was taken on), so a pod
    /// re-created under the same name on another node is never the one deleted. Gone or
    /// recreated pods count as deleted: `"OK"`.
    pub(crate) async fn delete_pod(&self, msg: &Message) -> Outcome {
        self.answer(Kind::DeletePod, msg, async {
            let r = parts(msg, true, true)?;
            let params = match msg.content.as_string() {
                Some(uid) => DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                },
                None => delete_params(content(msg, "DeleteOptions")?),
            };
            let mut params = params;
            let preconditions = params.preconditions.get_or_insert(Preconditions {
                uid: None,
                resource_version: None,
            });
            if preconditions.uid.is_none() {
                preconditions.uid = self.pod_uid(&r.namespace, &r.name).await;
            }
            let request = api::<Pod>(Some(&r.namespace)).delete(&r.name, &params);
            match self
                .call::<serde_json::Value>(Kind::DeletePod, msg, &r.node, request)
                .await
            {
                Ok(_) => {}
                Err(e)
                    if e.code() == 404
                        || (e.code() == 409 && e.err_status.message.contains(RECREATED)) =>
                {
                    debug!(pod = %r.name, namespace = %r.namespace, error = %e, "pod already gone");
                }
                Err(e) => return Err(e),
            }
            Ok(reply::ok(msg))
        })
        .await
    }

    /// The uid of pod `namespace/name`: the cache's, else read once (`None`: not found).
    async fn pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        if let Some(p) = self.pods.get_by(Some(namespace), name) {
            return p.metadata.uid.clone();
        }
        super::own_get::<Pod>(&self.own, Some(namespace), name)
            .await
            .ok()
            .flatten()
            .and_then(|p| p.metadata.uid)
    }

    /// The most statuses one legacy list of `node` may hold: its pod capacity as the Node
    /// cache knows it, kept within [`MIN_POD_STATUS_LIST`]..=[`MAX_POD_STATUS_LIST`] (the
    /// floor when the capacity is unknown). A node cannot run more pods than that, so a longer
    /// list is not a status report.
    pub(crate) fn pod_status_list_limit(&self, node: &str) -> usize {
        self.nodes
            .get_by(None, node)
            .and_then(|n| pod_capacity(&n))
            .unwrap_or(MIN_POD_STATUS_LIST)
            .clamp(MIN_POD_STATUS_LIST, MAX_POD_STATUS_LIST)
    }

    /// Refuses a legacy status list longer than [`Upstream::pod_status_list_limit`] before
    /// anything else reads it (authorization included): `413`, a warning and a count. One
    /// message would otherwise fan out into two API calls per entry.
    pub(crate) fn check_pod_status_list(&self, msg: &Message) -> Result<(), StatusError> {
        let Ok(r) = kubeedge_api::NodeResourceRef::parse(&msg.route.resource) else {
            return Ok(());
        };
        if !r.name.is_empty() {
            return Ok(());
        }
        let limit = self.pod_status_list_limit(r.node);
        if !list_longer_than(&msg.content.bytes(), limit) {
            return Ok(());
        }
        warn!(
            node = r.node,
            namespace = r.namespace,
            limit,
            msg_id = %msg.header.id,
            "legacy pod status list refused: more statuses than the node can run pods"
        );
        self.metrics.pod_status_list_refused();
        Err(StatusError::new(
            413,
            "RequestEntityTooLarge",
            format!(
                "edgecontroller: a pod status list of node {:?} may hold at most {limit} statuses",
                r.node
            ),
        ))
    }

    /// `podstatus`/`update` (deprecated): one status or, without a name, a list (refused
    /// whole past [`Upstream::pod_status_list_limit`]). Exactly one answer per request (KubeEdge
    /// sends one per status, all with the same parent):
    /// `"OK"`, or the first error.
    pub(crate) async fn legacy_pod_status(&self, msg: &Message) -> Outcome {
        self.answer(Kind::UpdatePodStatus, msg, async {
            let r = parts(msg, true, false)?;
            let what = "a PodStatusRequest";
            let requests: Vec<PodStatusRequest> = if r.name.is_empty() {
                content(msg, what)?
            } else {
                vec![content(msg, what)?]
            };
            let mut first_error = None;
            for request in requests {
                if let Err(e) = self.write_pod_status(msg, &r, request).await {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or_else(|| Ok(reply::ok(msg)), Err)
        })
        .await
    }

    async fn write_pod_status(
        &self,
        msg: &Message,
        r: &NodeResource,
        request: PodStatusRequest,
    ) -> Result<(), StatusError> {
        if request.name.is_empty() {
            return Err(StatusError::bad_request("pod status without a pod name"));
        }
        kubeedge_api::validation::object_name("pod name", &request.name)
            .map_err(|e| StatusError::bad_request(e.to_string()))?;
        let mut attempt = 0;
        let updated = loop {
            attempt += 1;
            let get = api::<Pod>(Some(&r.namespace)).get(&request.name, &GetParams::default());
            let got = self.call(Kind::UpdatePodStatus, msg, &r.node, get).await;
            let mut pod: Pod = match got {
                Ok(p) => p,
                Err(e) if e.code() == 404 => return self.delete_at_edge(r, &request).await,
                Err(e) => return Err(e),
            };
            if pod.metadata.uid.as_deref() != Some(request.uid.as_str()) {
                return self.delete_at_edge(r, &request).await;
            }
            if let Err(refusal) = self.authz.pod_status(&r.node, &pod) {
                self.refused(Kind::UpdatePodStatus, msg, &refusal);
                return Err(refusal.status(&r.node));
            }
            let live = pod.status.take().unwrap_or_default();
            pod.status = Some(merge_pod_status(
                &pod,
                &live,
                request.status.clone(),
                Timestamp::now(),
            ));
            let put = api::<Pod>(Some(&r.namespace)).replace_subresource(
                "status",
                &request.name,
                &PostParams::default(),
                body(&pod)?,
            );
            match self
                .call::<Pod>(Kind::UpdatePodStatus, msg, &r.node, put)
                .await
            {
                Ok(p) => break p,
                Err(e) if e.code() == 409 && attempt < CONFLICT_RETRIES => {
                    debug!(pod = %request.name, attempt, "pod status conflict, retrying");
                }
                Err(e) => return Err(e),
            }
        };
        let status = updated.status.clone().unwrap_or_default();
        let finished = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
        if updated.metadata.deletion_timestamp.is_some() && finished && none_running(&status) {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: updated.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let delete = api::<Pod>(Some(&r.namespace)).delete(&request.name, &params);
            match self
                .call::<serde_json::Value>(Kind::UpdatePodStatus, msg, &r.node, delete)
                .await
            {
                Ok(_) => {
                    info!(pod = %request.name, namespace = %r.namespace, "terminated pod deleted")
                }
                Err(e) => {
                    warn!(pod = %request.name, namespace = %r.namespace, error = %e, "cannot delete terminated pod")
                }
            }
        }
        Ok(())
    }

    /// The pod is gone or was recreated: tell the edge to delete its copy, by UID (the
    /// edge matches pod deletes by UID; KubeEdge leaves it out).
    async fn delete_at_edge(
        &self,
        r: &NodeResource,
        request: &PodStatusRequest,
    ) -> Result<(), StatusError> {
        let resource = NodeResource::new(&r.node, &r.namespace, resource_type::POD, &request.name)
            .build()
            .map_err(|e| StatusError::bad_request(e.to_string()))?;
        let content = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": request.name, "namespace": r.namespace, "uid": request.uid},
        });
        self.out
            .send(reply::push(
                resource,
                operation::DELETE,
                reply::json(&content),
                "",
            ))
            .await;
        Ok(())
    }
}

fn delete_params(o: DeleteOptions) -> DeleteParams {
    DeleteParams {
        dry_run: o.dry_run.is_some_and(|d| !d.is_empty()),
        grace_period_seconds: o.grace_period_seconds.and_then(|g| u32::try_from(g).ok()),
        propagation_policy: match o.propagation_policy.as_deref() {
            Some("Orphan") => Some(kube::api::PropagationPolicy::Orphan),
            Some("Background") => Some(kube::api::PropagationPolicy::Background),
            Some("Foreground") => Some(kube::api::PropagationPolicy::Foreground),
            _ => None,
        },
        preconditions: o.preconditions.map(|p| Preconditions {
            uid: p.uid,
            resource_version: p.resource_version,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_unchanged_transition_times_and_orders_containers() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "initContainers": [{"name": "z"}, {"name": "a"}]}}))
        .unwrap();
        let live: PodStatus = serde_json::from_value(json!({
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Initialized", "status": "False", "lastTransitionTime": "2026-01-01T00:00:02Z"},
            ]}))
        .unwrap();
        let reported: PodStatus = serde_json::from_value(json!({
            "startTime": "2026-02-01T00:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-01T00:00:00Z"},
                {"type": "Initialized", "status": "True"},
            ],
            "containerStatuses": [{"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 0},
                                  {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 0}],
            "initContainerStatuses": [{"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 0},
                                      {"name": "z", "image": "", "imageID": "", "ready": true, "restartCount": 0}],
        }))
        .unwrap();
        let now: Timestamp = "2026-04-01T00:00:00.75Z".parse().unwrap();
        let merged = merge_pod_status(&pod, &live, reported, now);
        let v = serde_json::to_value(&merged).unwrap();
        assert_eq!(
            v["startTime"], "2026-01-01T00:00:00Z",
            "live start time kept"
        );
        assert_eq!(
            v["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:01Z",
            "unchanged Ready keeps its time"
        );
        assert_eq!(
            v["conditions"][1]["lastTransitionTime"], "2026-04-01T00:00:00Z",
            "changed Initialized gets now"
        );
        assert_eq!(v["containerStatuses"][0]["name"], "a");
        assert_eq!(
            v["initContainerStatuses"][0]["name"], "z",
            "init statuses follow the spec order"
        );
    }

    #[test]
    fn list_length_is_read_only_as_far_as_the_limit() {
        assert!(!list_longer_than(b"[1,2,3]", 3));
        assert!(list_longer_than(b"[1,2,3,4]", 3));
        assert!(!list_longer_than(b"[]", 0));
        assert!(!list_longer_than(b"{\"a\":1}", 0), "not a list");
        // Past the limit the rest is never parsed: trailing garbage does not matter.
        assert!(list_longer_than(b"[{},{},{}, this is not JSON", 2));
        let huge = format!("[{}{{}}]", "{},".repeat(100_000));
        assert!(list_longer_than(huge.as_bytes(), MAX_POD_STATUS_LIST));
    }

    #[test]
    fn pod_capacity_comes_from_the_node_status() {
        let n: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(json!({"status": {"capacity": {"pods": "250"}}})).unwrap();
        assert_eq!(pod_capacity(&n), Some(250));
        let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({})).unwrap();
        assert_eq!(pod_capacity(&n), None);
    }

    #[test]
    fn pod_status_requests_accept_any_key_case() {
        let a: PodStatusRequest =
            serde_json::from_str(r#"{"UID":"u","Name":"n","Status":{"phase":"Running"}}"#).unwrap();
        let b: PodStatusRequest =
            serde_json::from_str(r#"{"uid":"u","name":"n","status":{"phase":"Running"}}"#).unwrap();
        assert_eq!((a.uid.as_str(), a.name.as_str()), ("u", "n"));
        assert_eq!(b.status.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn a_pod_with_a_running_container_is_running() {
        let s: PodStatus = serde_json::from_value(json!({"containerStatuses": [
            {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
            {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}))
        .unwrap();
        assert!(!none_running(&s));
        let s: PodStatus = serde_json::from_value(json!({"containerStatuses": [
            {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {}}}]}))
        .unwrap();
        assert!(none_running(&s));
    }
}
