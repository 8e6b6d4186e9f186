//! What a node that moved here from another replica may have missed.
//!
//! While a node is held by a replica, only that replica records what the node is sent. When
//! that replica dies, the node is held by nobody until it reconnects elsewhere, and objects
//! created for it in between have no record anywhere: the other replicas left the node to
//! its holder. The replica it reconnects to therefore lists the pods bound to it and sends
//! those without a record (ConfigMaps and Secrets follow: the edge asks for the ones its pods
//! use). Changes to objects that do have a record are found by the ordinary reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::constants::operation;
use beehive::{Content, Message};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kubeedge_api::NodeResource;
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::{EDGECONTROLLER, GROUP_RESOURCE};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Up to this many moved nodes are looked up with one pod list each; a larger batch (a failed
/// replica's nodes arrive by the thousand) is served by one list of every bound pod, which
/// costs the API server about as much as a single per-node list (a field selector on
/// `spec.nodeName` still reads every pod).
const PER_NODE_LISTS: usize = 4;
/// Page size of the list of every bound pod.
const PAGE: u32 = 500;
/// Attempts of a failed list, 1 s apart, before the batch is given up (the node's next
/// reconnect tries again).
const ATTEMPTS: u32 = 3;

/// The pods bound to a node that moved here.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) node: String,
    pub(crate) pods: Vec<Pod>,
}

#[derive(Default)]
struct Queue {
    pending: HashSet<String>,
    /// A task is taking batches from `pending`.
    busy: bool,
}

/// Pod lookups for nodes that moved here, on a task of their own so they progress while the
/// reconciler is busy: one batch at a time, each batch every node queued since the last.
pub(crate) struct Takeovers {
    client: kube::Client,
    life: Lifecycle,
    queue: Arc<Mutex<Queue>>,
    found_tx: mpsc::UnboundedSender<Found>,
    found: mpsc::UnboundedReceiver<Found>,
}

impl Takeovers {
    /// Lookups run on `life`'s tracker and stop with it.
    pub(crate) fn new(client: kube::Client, life: Lifecycle) -> Self {
        let (found_tx, found) = mpsc::unbounded_channel();
        Takeovers {
            client,
            life,
            queue: Arc::default(),
            found_tx,
            found,
        }
    }

    /// Queues `node` for a lookup of its pods.
    pub(crate) fn scan(&mut self, node: String) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.pending.insert(node);
        if q.busy {
            return;
        }
        q.busy = true;
        drop(q);
        let (client, queue, tx) = (
            self.client.clone(),
            self.queue.clone(),
            self.found_tx.clone(),
        );
        self.life.spawn_cancellable(async move {
            loop {
                let batch: Vec<String> = {
                    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
                    if q.pending.is_empty() {
                        q.busy = false;
                        return;
                    }
                    q.pending.drain().collect()
                };
                for found in look_up(&client, batch).await {
                    if tx.send(found).is_err() {
                        return;
                    }
                }
            }
        });
    }

    /// The next node whose pods were found; pending while none is.
    pub(crate) async fn next(&mut self) -> Option<Found> {
        self.found.recv().await
    }
}

/// The pods of each node of `batch` (nodes whose lookup failed are left out, with a warning).
async fn look_up(client: &kube::Client, batch: Vec<String>) -> Vec<Found> {
    let api = Api::<Pod>::all(client.clone());
    if batch.len() <= PER_NODE_LISTS {
        let lists = batch.into_iter().map(|node| {
            let api = api.clone();
            async move {
                let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
                match with_retries(|| api.list(&params)).await {
                    Ok(list) => Some(Found {
                        node,
                        pods: list.items,
                    }),
                    Err(error) => {
                        warn!(node, %error, "cannot list the pods of a node that moved here; the next reconnect tries again");
                        None
                    }
                }
            }
        });
        return futures::future::join_all(lists)
            .await
            .into_iter()
            .flatten()
            .collect();
    }
    let mut by_node: HashMap<String, Vec<Pod>> =
        batch.iter().map(|n| (n.clone(), Vec::new())).collect();
    let mut params = ListParams::default().fields("spec.nodeName!=").limit(PAGE);
    loop {
        let page = match with_retries(|| api.list(&params)).await {
            Ok(page) => page,
            Err(error) => {
                warn!(nodes = batch.len(), %error, "cannot list the pods of nodes that moved here; their next reconnect tries again");
                return Vec::new();
            }
        };
        for pod in page.items {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if let Some(pods) = node.and_then(|n| by_node.get_mut(n)) {
                pods.push(pod);
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    debug!(
        nodes = by_node.len(),
        "pods of moved nodes listed in one pass"
    );
    by_node
        .into_iter()
        .map(|(node, pods)| Found { node, pods })
        .collect()
}

async fn with_retries<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt >= ATTEMPTS => return Err(e),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
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
