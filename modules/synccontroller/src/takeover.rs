//! What a node that moved here from another replica may have missed.
//!
//! While a node is held by a replica, only that replica records what the node is sent. When
//! that replica dies, the node is held by nobody until it reconnects elsewhere, and objects
//! created for it in between have no record anywhere: the other replicas left the node to
//! its holder. The replica it reconnects to therefore lists the pods bound to it and sends
//! those without a record (ConfigMaps and Secrets follow: the edge asks for the ones its pods
//! use). Changes to objects that do have a record are found by the ordinary reconcile.

use std::sync::Arc;

use beehive::constants::operation;
use beehive::{Content, Message};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kubeedge_api::NodeResource;
use kubeedge_api::names::{EDGECONTROLLER, GROUP_RESOURCE};
use tokio::sync::Semaphore;
use tracing::warn;

/// Pod lists running at once (a failover moves thousands of nodes in a burst).
const CONCURRENT_LISTS: usize = 4;

/// The pods bound to a node that moved here.
pub(crate) struct Found {
    pub(crate) node: String,
    pub(crate) pods: Vec<Pod>,
}

/// Running pod lists, at most [`CONCURRENT_LISTS`] at a time.
pub(crate) struct Takeovers {
    client: kube::Client,
    gate: Arc<Semaphore>,
    running: FuturesUnordered<BoxFuture<'static, Option<Found>>>,
}

impl Takeovers {
    pub(crate) fn new(client: kube::Client) -> Self {
        Takeovers {
            client,
            gate: Arc::new(Semaphore::new(CONCURRENT_LISTS)),
            running: FuturesUnordered::new(),
        }
    }

    /// Starts listing the pods of `node`.
    pub(crate) fn scan(&mut self, node: String) {
        let api = Api::<Pod>::all(self.client.clone());
        let gate = self.gate.clone();
        self.running.push(Box::pin(async move {
            let _permit = gate.acquire_owned().await.ok()?;
            let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
            match api.list(&params).await {
                Ok(list) => Some(Found {
                    node,
                    pods: list.items,
                }),
                Err(error) => {
                    warn!(node, %error, "cannot list the pods of a node that moved here; the next reconnect tries again");
                    None
                }
            }
        }));
    }

    /// The next finished list; pending while none is running.
    pub(crate) async fn next(&mut self) -> Option<Found> {
        loop {
            if self.running.is_empty() {
                std::future::pending::<()>().await;
            }
            if let Some(found) = self.running.next().await? {
                return Some(found);
            }
        }
    }
}

/// The message edgecontroller sends for `pod` of `node`.
pub(crate) fn pod_message(node: &str, pod: &Pod) -> Option<Message> {
    let ns = pod.metadata.namespace.as_deref()?;
    let name = pod.metadata.name.as_deref()?;
    let resource = NodeResource::new(node, ns, "pod", name).build().ok()?;
    let rv = pod.metadata.resource_version.clone().unwrap_or_default();
    Some(
        Message::new()
            .with_route(EDGECONTROLLER, GROUP_RESOURCE, resource, operation::UPDATE)
            .with_content(Content::json(pod).ok()?)
            .with_resource_version(rv),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_goes_out_as_edgecontroller_sends_it() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "42"},
            "spec": {"nodeName": "e1", "containers": []},
        }))
        .unwrap();
        let m = pod_message("e1", &pod).unwrap();
        assert_eq!(m.route.source, "edgecontroller");
        assert_eq!(m.route.resource, "node/e1/ns/pod/web");
        assert_eq!(m.route.operation, "update");
        assert_eq!(m.header.resource_version, "42");
        let body: serde_json::Value = m.content.parse().unwrap();
        assert_eq!(body["kind"], "Pod");
        assert_eq!(body["apiVersion"], "v1");
    }
}
