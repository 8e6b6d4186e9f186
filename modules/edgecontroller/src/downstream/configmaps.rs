//! ConfigMaps and Secrets, sent to the nodes whose pods use them.

use beehive::constants::{operation, resource_type};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use kube::runtime::watcher::Event;
use kubeedge_api::NodeResource;
use kubeedge_api::watch::Change;
use serde::Serialize;

use super::Downstream;
use super::locations::{ObjectRef, RefKind};
use crate::reply;

impl Downstream {
    pub(super) async fn on_configmap_event(&mut self, event: Event<ConfigMap>) {
        for change in self.configmaps.apply(event) {
            self.object_changed(RefKind::ConfigMap, change).await;
        }
    }

    pub(super) async fn on_secret_event(&mut self, event: Event<Secret>) {
        for change in self.secrets.apply(event) {
            self.object_changed(RefKind::Secret, change).await;
        }
    }

    /// One message per node running a pod that uses the object; none when no pod does.
    async fn object_changed<K: Resource + Serialize>(&self, kind: RefKind, change: Change<K>) {
        let obj = change.object();
        let (ns, name) = (
            obj.meta().namespace.as_deref().unwrap_or_default(),
            obj.meta().name.as_deref().unwrap_or_default(),
        );
        let nodes = self
            .locations
            .read()
            .nodes_for(&ObjectRef::new(kind, ns, name));
        if nodes.is_empty() {
            return;
        }
        let (resource_type, op) = match (kind, &change) {
            (RefKind::ConfigMap, Change::Added(_)) => (resource_type::CONFIGMAP, operation::INSERT),
            // Secrets are always `update`, even when added: old edges expect it.
            (RefKind::Secret, Change::Added(_)) => (resource_type::SECRET, operation::UPDATE),
            (RefKind::ConfigMap, Change::Modified { .. }) => {
                (resource_type::CONFIGMAP, operation::UPDATE)
            }
            (RefKind::Secret, Change::Modified { .. }) => {
                (resource_type::SECRET, operation::UPDATE)
            }
            (RefKind::ConfigMap, Change::Deleted(_)) => {
                (resource_type::CONFIGMAP, operation::DELETE)
            }
            (RefKind::Secret, Change::Deleted(_)) => (resource_type::SECRET, operation::DELETE),
            (RefKind::PersistentVolumeClaim, _) => return,
        };
        let content = reply::json(&**obj);
        let rv = obj.meta().resource_version.as_deref().unwrap_or_default();
        for node in nodes {
            let Ok(resource) = NodeResource::new(&node, ns, resource_type, name).build() else {
                continue;
            };
            self.out
                .send(reply::push(resource, op, content.clone(), rv))
                .await;
        }
    }
}
