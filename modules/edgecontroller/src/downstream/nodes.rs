//! Edge nodes, selected by the label `node-role.kubernetes.io/edge=` exactly (`=true` is not an
//! edge node).

use beehive::Content;
use beehive::constants::{operation, resource_type};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::Event;
use kubeedge_api::NodeResource;
use kubeedge_api::watch::Change;

use super::Downstream;
use crate::reply;

fn node_resource(name: &str) -> Option<String> {
    NodeResource::cluster(name, resource_type::NODE, name)
        .build()
        .ok()
}

impl Downstream {
    pub(super) async fn on_node_event(&mut self, event: Event<Node>) {
        for change in self.nodes.apply(event) {
            match change {
                Change::Added(node) => {
                    self.send_node(&node).await;
                    if self.pods_started {
                        let name = node.metadata.name.clone().unwrap_or_default();
                        self.add_pods_of(&name).await;
                    }
                }
                Change::Modified { new, .. } => self.send_node(&new).await,
                // Deleted, or its edge label removed (the selector reports that as a delete).
                Change::Deleted(node) => {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    self.forget_pods_of(&name);
                    if let Some(resource) = node_resource(&name) {
                        let msg = reply::push(resource, operation::DELETE, Content::null(), "");
                        self.out.send(msg).await;
                    }
                }
            }
        }
    }

    /// Every change of an edge Node goes to that node only, as `update`.
    async fn send_node(&self, node: &Node) {
        let Some(resource) = node.metadata.name.as_deref().and_then(node_resource) else {
            return;
        };
        let rv = node
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        self.out
            .send(reply::push(
                resource,
                operation::UPDATE,
                reply::json(node),
                rv,
            ))
            .await;
    }
}
