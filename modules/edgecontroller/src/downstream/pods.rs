//! Pods bound to edge nodes.

use beehive::constants::{operation, resource_type};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher::Event;
use kubeedge_api::NodeResource;
use kubeedge_api::watch::{Change, key_of};
use tracing::{debug, warn};

use super::Downstream;
use super::locations::{bound_node, granted};
use crate::reply;

/// Whether an update is worth sending: metadata or spec changed, ignoring
/// `resourceVersion`, `generation` and `managedFields` (nearly every status write
/// changes managedFields, so comparing them leaks status-only churn).
pub(crate) fn meta_or_spec_changed(old: &Pod, new: &Pod) -> bool {
    fn strip(m: &ObjectMeta) -> ObjectMeta {
        ObjectMeta {
            resource_version: None,
            generation: None,
            managed_fields: None,
            ..m.clone()
        }
    }
    old.spec != new.spec || strip(&old.metadata) != strip(&new.metadata)
}

fn node_of(pod: &Pod) -> &str {
    bound_node(pod).unwrap_or_default()
}

impl Downstream {
    fn is_edge_pod(&self, pod: &Pod) -> bool {
        let node = node_of(pod);
        !node.is_empty() && self.nodes.reader().contains(node)
    }

    pub(super) async fn on_pod_event(&mut self, event: Event<Pod>) {
        let changes = match event {
            Event::Apply(ref p) | Event::InitApply(ref p) if !self.is_edge_pod(p) => {
                // Not (or no longer) ours: keep nothing about it, send nothing.
                let key = key_of(p);
                if self.pods.remove(&key).is_some() {
                    self.locations.write().remove_pod(&key);
                }
                return;
            }
            other => self.pods.apply(other),
        };
        for change in changes {
            self.pod_changed(change).await;
        }
    }

    async fn pod_changed(&mut self, change: Change<Pod>) {
        let pod = change.object().clone();
        let key = key_of(&*pod);
        let op = match &change {
            Change::Added(p) => {
                self.locations.write().set_pod(&key, node_of(p), granted(p));
                // A pod that is already being deleted is announced as a modification.
                if p.metadata.deletion_timestamp.is_some() {
                    operation::UPDATE
                } else {
                    operation::INSERT
                }
            }
            Change::Modified { old, new } => {
                self.locations
                    .write()
                    .set_pod(&key, node_of(new), granted(new));
                if !meta_or_spec_changed(old, new) {
                    return;
                }
                operation::UPDATE
            }
            Change::Deleted(_) => {
                self.locations.write().remove_pod(&key);
                operation::DELETE
            }
        };
        self.send_pod(&pod, op).await;
    }

    async fn send_pod(&self, pod: &Pod, op: &str) {
        let meta = &pod.metadata;
        let built = NodeResource::new(
            node_of(pod),
            meta.namespace.as_deref().unwrap_or_default(),
            resource_type::POD,
            meta.name.as_deref().unwrap_or_default(),
        )
        .build();
        let Ok(resource) = built else {
            warn!(pod = %key_of(pod), "pod without namespace or node, not sent");
            return;
        };
        let rv = meta.resource_version.as_deref().unwrap_or_default();
        self.out
            .send(reply::push(resource, op, reply::json(pod), rv))
            .await;
    }

    /// A node joined the edge set after the pods were listed: send its existing pods.
    pub(super) async fn add_pods_of(&mut self, node: &str) {
        let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let pods = match Api::<Pod>::all(self.client.clone()).list(&lp).await {
            Ok(list) => list.items,
            Err(error) => {
                warn!(node, %error, "cannot list the pods of a new edge node; they follow on their next change");
                return;
            }
        };
        debug!(node, pods = pods.len(), "new edge node");
        for pod in pods {
            if let Some(change) = self.pods.upsert(pod) {
                self.pod_changed(change).await;
            }
        }
    }

    /// A node left the edge set: forget its pods (its session is closed, nothing is sent).
    pub(super) fn forget_pods_of(&mut self, node: &str) {
        let gone = self.pods.remove_where(|p| node_of(p) == node);
        self.locations.write().remove_node(node);
        debug!(node, pods = gone.len(), "edge node gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn status_and_bookkeeping_changes_are_not_updates() {
        let old = pod(
            json!({"metadata": {"name": "p", "resourceVersion": "1", "generation": 1,
            "managedFields": [{"manager": "a"}]}, "spec": {"containers": []}, "status": {"phase": "Pending"}}),
        );
        let new = pod(
            json!({"metadata": {"name": "p", "resourceVersion": "2", "generation": 2,
            "managedFields": [{"manager": "a"}, {"manager": "kubelet", "subresource": "status"}]},
            "spec": {"containers": []}, "status": {"phase": "Running"}}),
        );
        assert!(!meta_or_spec_changed(&old, &new));
    }

    #[test]
    fn label_spec_and_deletion_changes_are_updates() {
        let base = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let old = pod(base.clone());
        let mut labelled = base.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(meta_or_spec_changed(&old, &pod(labelled)));
        let mut deleting = base.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(meta_or_spec_changed(&old, &pod(deleting)));
        let mut spec = base;
        spec["spec"]["activeDeadlineSeconds"] = json!(5);
        assert!(meta_or_spec_changed(&old, &pod(spec)));
    }
}
