//! Node requests: registration, label/annotation update, status patch, legacy status, and
//! the `cloudcore` annotation on connect (merge patches of only what changes, where KubeEdge
//! sends whole objects that conflict).

use std::collections::BTreeMap;
use std::time::Duration;

use beehive::constants::{SUCCESS_CONTENT, operation, resource_type};
use beehive::{Content, Message};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{GetParams, Patch, PatchParams, PostParams};
use kubeedge_api::NodeResource;
use kubeedge_api::replicas::CLOUDCORE_ANNOTATION;
use kubeedge_api::status::StatusError;
use serde::Deserialize;
use serde_json::json;
use tracing::{debug, info, warn};

use super::{Kind, Outcome, Upstream, api, body, content, parts};
use crate::authz::KUBEEDGE_ROLE_LABELS;
use crate::reply;

/// Annotation listing healthy GPUs, written from legacy node status.
const GPU_STATUS_ANNOTATION: &str = "huawei.com/gpu-status";
/// The extended resource whose entries become [`GPU_STATUS_ANNOTATION`].
const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// Retries of conflicting writes (409) before giving up.
const CONFLICT_RETRIES: usize = 3;

/// The legacy node status request (`edgeapi.NodeStatusRequest`, keys without JSON tags).
#[derive(Debug, Deserialize)]
struct NodeStatusRequest {
    #[serde(rename = "UID", alias = "uid", alias = "Uid", default)]
    _uid: String,
    #[serde(rename = "Status", alias = "status", default)]
    status: NodeStatus,
    #[serde(
        rename = "ExtendResources",
        alias = "extendResources",
        alias = "extendresources",
        default
    )]
    extend_resources: BTreeMap<String, Vec<serde_json::Value>>,
}

/// Splits off KubeEdge's role labels, which an edge sets on its own Node at registration but
/// NodeRestriction does not let a kubelet set: cloudcore writes them with its own identity.
/// Every other label has already passed the node authorizer's label rule.
pub(crate) fn take_reserved_labels(
    labels: &mut Option<BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let Some(labels) = labels.as_mut() else {
        return BTreeMap::new();
    };
    KUBEEDGE_ROLE_LABELS
        .iter()
        .filter_map(|k| labels.remove_entry(*k))
        .collect()
}

/// Refreshes condition heartbeats older than `max_age` (edge stores may hold stale status).
fn refresh_heartbeats(status: &mut NodeStatus, max_age: Duration, now: Timestamp) {
    for c in status.conditions.iter_mut().flatten() {
        let stale = match &c.last_heartbeat_time {
            Some(t) => now.duration_since(t.0).as_secs_f64() > max_age.as_secs_f64(),
            None => true,
        };
        if stale {
            c.last_heartbeat_time = Some(Time(now));
        }
    }
}

fn now() -> Timestamp {
    // Whole seconds: the API stores RFC 3339 without fractions.
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

impl Upstream {
    /// `node`/`insert`: creates the Node (name from the resource), sets the reserved labels
    /// afterwards as cloudcore; answers ObjectResp.
    pub(crate) async fn register_node(&self, msg: &Message) -> Outcome {
        self.answer(Kind::CreateNode, msg, async {
            let r = parts(msg, false, true)?;
            let node = content(msg, "a Node")?;
            let created = self
                .create_node(Kind::CreateNode, msg, &r.node, &r.name, node)
                .await?;
            Ok(reply::object_resp(msg, Ok(created), None))
        })
        .await
    }

    /// Go's `createNode`: reserved labels (`kubernetes.io/…`, `*.kubernetes.io/…`) removed before
    /// the create as the node, then patched back as cloudcore (NodeRestriction forbids a kubelet
    /// to set them).
    async fn create_node(
        &self,
        kind: Kind,
        msg: &Message,
        node_id: &str,
        name: &str,
        mut node: Node,
    ) -> Result<Node, StatusError> {
        let reserved = take_reserved_labels(&mut node.metadata.labels);
        node.metadata.name = Some(name.to_owned());
        // A client-supplied resourceVersion or uid would make the create fail.
        node.metadata.resource_version = None;
        node.metadata.uid = None;
        let annotations = node.metadata.annotations.get_or_insert_default();
        annotations.remove(CLOUDCORE_ANNOTATION);
        if let Some(ip) = &self.settings.cloudcore_ip {
            annotations.insert(CLOUDCORE_ANNOTATION.to_owned(), ip.clone());
        }
        let create = api::<Node>(None).create(&PostParams::default(), body(&node)?);
        let created: Node = self.call(kind, msg, node_id, create).await?;
        if reserved.is_empty() {
            return Ok(created);
        }
        // The policy sends only this patch (role labels, added) as cloudcore.
        let patch = json!({"metadata": {"labels": reserved}});
        let request = api::<Node>(None).patch(name, &PatchParams::default(), &Patch::Merge(&patch));
        self.call(kind, msg, node_id, request).await
    }

    /// `node`/`update`: merges the request's labels and annotations into the Node with a merge
    /// patch of only those two maps (KubeEdge patches the whole object, which conflicts); answers
    /// `"OK"` with the new RV.
    pub(crate) async fn update_node(&self, msg: &Message) -> Outcome {
        self.answer(Kind::UpdateNode, msg, async {
            let r = parts(msg, true, true)?;
            let wanted: Node = content(msg, "a Node")?;
            // Which replica holds the node is the replicas' to say: an edge echoing its Node
            // back carries the annotation as it was when it read it.
            let mut annotations = wanted.metadata.annotations.unwrap_or_default();
            annotations.remove(CLOUDCORE_ANNOTATION);
            let patch = json!({"metadata": {
                "labels": wanted.metadata.labels.unwrap_or_default(),
                "annotations": annotations,
            }});
            let request =
                api::<Node>(None).patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch));
            let node: Node = self.call(Kind::UpdateNode, msg, &r.node, request).await?;
            let resource = rebuilt(&r, resource_type::NODE);
            Ok(reply::ok_at(msg, resource, node.metadata.resource_version))
        })
        .await
    }

    /// `nodepatch`: the content is a strategic merge patch of the Node's status, applied as
    /// sent; answers ObjectResp with the patched Node.
    pub(crate) async fn patch_node_status(&self, msg: &Message) -> Outcome {
        self.patch_status::<Node>(Kind::PatchNode, msg, false, None)
            .await
    }

    /// `nodestatus` (deprecated): `insert` registers the node unless it exists; `update`
    /// replaces the status, keeping the live `volumesAttached` and kubelet port.
    pub(crate) async fn legacy_node_status(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, true, true) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::UpdateNodeStatus, msg, e).await,
        };
        let resource = rebuilt(&r, resource_type::NODE);
        if msg.route.operation == operation::INSERT {
            let (text, outcome) = match self.register_if_missing(msg, &r).await {
                Ok(()) => (SUCCESS_CONTENT.to_owned(), Outcome::Ok),
                Err(e) => (e, Outcome::Failed),
            };
            let resp = reply::response(msg, resource, Content::string(text));
            return self.send(resp, outcome).await;
        }
        self.answer(Kind::UpdateNodeStatus, msg, async {
            let request = content(msg, "a NodeStatusRequest")?;
            let node = self.replace_node_status(msg, &r, request).await?;
            Ok(reply::ok_at(msg, resource, node.metadata.resource_version))
        })
        .await
    }

    /// Legacy `insert`: Go answers errors with a plain string here.
    async fn register_if_missing(&self, msg: &Message, r: &NodeResource) -> Result<(), String> {
        let get = api::<Node>(None).get(&r.name, &GetParams::default());
        match self
            .call::<Node>(Kind::UpdateNodeStatus, msg, &r.node, get)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == 404 => {}
            Err(e) => {
                return Err(format!(
                    "get node {} info error: {e}, register node failed",
                    r.name
                ));
            }
        }
        let node: Node = msg.content.parse_bytes().map_err(|e| {
            format!(
                "message: {} process failure, content is not a Node: {e}",
                msg.header.id
            )
        })?;
        self.create_node(Kind::UpdateNodeStatus, msg, &r.node, &r.name, node)
            .await
            .map(|_| ())
            .map_err(|e| format!("create node {} error: {e}, register node failed", r.name))
    }

    /// GET, merge, PUT status; a `409 Conflict` (someone wrote in between) starts over.
    async fn replace_node_status(
        &self,
        msg: &Message,
        r: &NodeResource,
        request: NodeStatusRequest,
    ) -> Result<Node, StatusError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let get = api::<Node>(None).get(&r.name, &GetParams::default());
            let mut node: Node = self.call(Kind::UpdateNodeStatus, msg, &r.node, get).await?;
            let mut status = request.status.clone();
            refresh_heartbeats(&mut status, self.settings.node_update_frequency, now());
            let annotations = node.metadata.annotations.get_or_insert_default();
            // Extended resources become annotations; never the replicas' own.
            let resources = request
                .extend_resources
                .iter()
                .filter(|(name, _)| name.as_str() != CLOUDCORE_ANNOTATION);
            for (name, entries) in resources {
                if name == NVIDIA_GPU && !entries.is_empty() {
                    let gpus: Vec<_> = entries
                        .iter()
                        .map(|e| json!({"id": e.get("name").cloned().unwrap_or_default(), "healthy": true}))
                        .collect();
                    annotations.insert(
                        GPU_STATUS_ANNOTATION.to_owned(),
                        serde_json::Value::from(gpus).to_string(),
                    );
                }
                annotations.insert(
                    name.clone(),
                    serde_json::Value::from(entries.clone()).to_string(),
                );
            }
            let live = node.status.take().unwrap_or_default();
            status.volumes_attached = live.volumes_attached;
            let live_port = live
                .daemon_endpoints
                .and_then(|d| d.kubelet_endpoint)
                .map(|e| e.port)
                .unwrap_or(0);
            if live_port != 0 {
                // cloudstream sets the tunnel port here; the edge does not know it.
                status
                    .daemon_endpoints
                    .get_or_insert_default()
                    .kubelet_endpoint
                    .get_or_insert_default()
                    .port = live_port;
            }
            node.status = Some(status);
            let put = api::<Node>(None).replace_subresource(
                "status",
                &r.name,
                &PostParams::default(),
                body(&node)?,
            );
            match self
                .call::<Node>(Kind::UpdateNodeStatus, msg, &r.node, put)
                .await
            {
                Err(e) if e.code() == 409 && attempt < CONFLICT_RETRIES => {
                    debug!(node = %r.name, attempt, "node status conflict, retrying");
                }
                other => return other,
            }
        }
    }

    /// cloudhub's `connected` event: make sure the Node's `cloudcore` annotation names this
    /// cloudcore, with a merge patch of that annotation only (KubeEdge's cloudhub
    /// does a GET and PUT of the whole Node, racing with status writes). Retried 3 times, 1 s
    /// apart; never answered.
    pub(crate) async fn connected(&self, msg: &Message) -> Outcome {
        let Some(ip) = self.settings.cloudcore_ip.clone() else {
            return Outcome::Ok;
        };
        let Ok(r) = NodeResource::parse(&msg.route.resource) else {
            return Outcome::Failed;
        };
        let current = self.nodes.get(&r.node).and_then(|n| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CLOUDCORE_ANNOTATION).cloned())
        });
        if current.as_deref() == Some(ip.as_str()) {
            return Outcome::Ok;
        }
        let patch = json!({"metadata": {"annotations": {CLOUDCORE_ANNOTATION: ip}}});
        for attempt in 1..=3 {
            let request =
                api::<Node>(None).patch(&r.node, &PatchParams::default(), &Patch::Merge(&patch));
            match self.own_request::<Node>(request).await {
                Ok(_) => {
                    info!(node = %r.node, %ip, "cloudcore annotation set");
                    return Outcome::Ok;
                }
                Err(e) if e.code() == 404 => {
                    debug!(node = %r.node, "connected node is not registered yet");
                    return Outcome::Ok;
                }
                Err(e) => {
                    warn!(node = %r.node, attempt, error = %e, "cannot set the cloudcore annotation");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        Outcome::Failed
    }
}

/// `node/<id>/<ns>/<type>/<name>` with another type (Go rebuilds node answers this way).
pub(crate) fn rebuilt(r: &NodeResource, resource_type: &str) -> String {
    NodeResource::new(&r.node, &r.namespace, resource_type, &r.name)
        .build()
        .unwrap_or_else(|_| format!("node/{}", r.node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_labels_are_kubeedges_role_labels() {
        let mut labels = Some(BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), "e9".to_string()),
            ("node-role.kubernetes.io/edge".to_string(), String::new()),
            (
                "node.kubernetes.io/instance-type".to_string(),
                "x".to_string(),
            ),
            ("team".to_string(), "a".to_string()),
            ("example.com/kubernetes.io".to_string(), "b".to_string()),
            ("a/kubernetes.io/c".to_string(), "d".to_string()),
            ("notkubernetes.io/x".to_string(), "e".to_string()),
        ]));
        let reserved = take_reserved_labels(&mut labels);
        assert_eq!(
            reserved.keys().collect::<Vec<_>>(),
            ["node-role.kubernetes.io/edge"]
        );
        assert_eq!(labels.unwrap().len(), 6);
    }

    #[test]
    fn stale_heartbeats_are_refreshed() {
        let mut status: NodeStatus = serde_json::from_value(json!({"conditions": [
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2020-01-01T00:00:00Z"},
            {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-01-01T00:00:05Z"},
            {"type": "DiskPressure", "status": "False"},
        ]}))
        .unwrap();
        let now: Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        refresh_heartbeats(&mut status, Duration::from_secs(10), now);
        let times: Vec<_> = status
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| c.last_heartbeat_time.unwrap().0.to_string())
            .collect();
        assert_eq!(
            times,
            [
                "2026-01-01T00:00:10Z",
                "2026-01-01T00:00:05Z",
                "2026-01-01T00:00:10Z"
            ]
        );
    }

    #[test]
    fn node_status_requests_accept_any_key_case() {
        let a: NodeStatusRequest = serde_json::from_str(
            r#"{"UID":"u","Status":{"phase":"Running"},"ExtendResources":{"x":[{"name":"g"}]}}"#,
        )
        .unwrap();
        let b: NodeStatusRequest = serde_json::from_str(
            r#"{"uid":"u","status":{"phase":"Running"},"extendresources":{}}"#,
        )
        .unwrap();
        assert_eq!(a.status.phase.as_deref(), Some("Running"));
        assert_eq!(b.status.phase.as_deref(), Some("Running"));
        assert_eq!(a.extend_resources["x"].len(), 1);
    }
}
