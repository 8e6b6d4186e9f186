//! Each node's watch listeners kept in a ConfigMap, so a restarted cloudcore pushes changes to
//! open edge watches as soon as the edge reconnects (the edge re-sends its watches only when
//! one of them ends, which can take an hour).
//!
//! ConfigMap `<namespace>/dynamiccontroller.<node>`, key `watches`: the node's watch
//! Applications as the edge sent them, by id; key `delivered`: what those watches delivered,
//! by object uid (see `delivered`), so a restarted cloudcore still sends the deletes the edge
//! missed. Written when either changes (changes within two seconds of a write together), and
//! deleted when the node has neither left.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kubeedge_api::application::Application;
use kubeedge_api::lifecycle::CancellationToken;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, warn};

use crate::delivered::{Delivered, Entry};
use crate::listeners::Registry;

const DATA_KEY: &str = "watches";
const DELIVERED_KEY: &str = "delivered";
/// Annotation naming the Node incarnation (UID) a record belongs to: a Node deleted and
/// created again under the same name does not inherit the old one's watches.
const NODE_UID: &str = "dynamiccontroller.kubeedge.io/node-uid";
const FIELD_MANAGER: &str = "cloudcore-dynamiccontroller";
/// Changes of one node within this time are written once.
const DEBOUNCE: Duration = Duration::from_secs(2);
/// Records read at once (each read is up to two GETs and, for a stale record, a DELETE).
pub(crate) const READ_CONCURRENCY: usize = 16;

/// The ConfigMap name of `node`'s listeners; `None` when it would be too long.
fn name(node: &str) -> Option<String> {
    let n = format!("dynamiccontroller.{node}");
    (n.len() <= kubeedge_api::validation::SUBDOMAIN_MAX).then_some(n)
}

/// One node's persisted record.
#[derive(Debug, Default)]
pub(crate) struct Record {
    /// The watch Applications.
    pub apps: Vec<Application>,
    /// What they delivered, by object uid.
    pub delivered: BTreeMap<String, Entry>,
}

/// Reads and writes the listener records.
pub(crate) struct Persist {
    api: Api<ConfigMap>,
    nodes: Api<Node>,
    dirty: Mutex<HashSet<String>>,
    wake: Notify,
    reads: Semaphore,
}

impl std::fmt::Debug for Persist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persist").finish_non_exhaustive()
    }
}

impl Persist {
    /// Records in `namespace`, written with `client`.
    pub(crate) fn new(client: kube::Client, namespace: &str) -> Self {
        Persist {
            api: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client),
            dirty: Mutex::new(HashSet::new()),
            wake: Notify::new(),
            reads: Semaphore::new(READ_CONCURRENCY),
        }
    }

    /// `node`'s listeners changed: write them soon.
    pub(crate) fn mark(&self, node: &str) {
        self.dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.to_owned());
        self.wake.notify_one();
    }

    /// The watch Applications recorded for `node` and what they delivered (none when there is
    /// no record or it cannot be read; the edge's next watch sync then restores the watches).
    /// Waits its turn among [`READ_CONCURRENCY`] reads.
    pub(crate) async fn load(&self, node: &str) -> Record {
        let Some(name) = name(node) else {
            return Record::default();
        };
        // Never closed.
        let Ok(_turn) = self.reads.acquire().await else {
            return Record::default();
        };
        let cm = match self.api.get_opt(&name).await {
            Ok(Some(cm)) => cm,
            Ok(None) => return Record::default(),
            Err(e) => {
                warn!(node, error = %e, "cannot read the node's recorded watches");
                return Record::default();
            }
        };
        let recorded_uid = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_UID))
            .cloned();
        if recorded_uid.is_none() || recorded_uid != self.node_uid(node).await {
            debug!(
                node,
                "watch record of another incarnation of the node dropped"
            );
            self.delete(node).await;
            return Record::default();
        }
        let text = |key: &str| {
            cm.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(String::as_str)
                .unwrap_or("{}")
        };
        let apps = match serde_json::from_str::<BTreeMap<String, Application>>(text(DATA_KEY)) {
            Ok(apps) => apps.into_values().collect(),
            Err(e) => {
                warn!(node, error = %e, "the node's recorded watches cannot be read; ignored");
                Vec::new()
            }
        };
        let delivered = serde_json::from_str(text(DELIVERED_KEY)).unwrap_or_else(|e| {
            warn!(node, error = %e, "the record of what the node's watches delivered cannot be read; ignored");
            BTreeMap::new()
        });
        Record { apps, delivered }
    }

    /// The UID of Node `node` as the API server has it now.
    async fn node_uid(&self, node: &str) -> Option<String> {
        match self.nodes.get_metadata_opt(node).await {
            Ok(meta) => meta.and_then(|m| m.metadata.uid),
            Err(e) => {
                warn!(node, error = %e, "cannot read the node");
                None
            }
        }
    }

    /// Forgets `node`'s record (the Node was deleted).
    pub(crate) async fn delete(&self, node: &str) {
        let Some(name) = name(node) else { return };
        match self.api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => warn!(node, error = %e, "cannot delete the node's recorded watches"),
        }
    }

    async fn write(&self, node: &str, registry: &Registry, delivered: &Delivered) {
        let Some(name) = name(node) else {
            debug!(node, "node name too long for a watch record; not recorded");
            return;
        };
        let listeners = registry.of_node(node);
        let objects = delivered.snapshot(node);
        if listeners.is_empty() && objects.is_empty() {
            self.delete(node).await;
            return;
        }
        let apps: BTreeMap<&str, &Application> =
            listeners.iter().map(|l| (l.id.as_str(), &l.app)).collect();
        let (text, objects) = match (
            serde_json::to_string(&apps),
            serde_json::to_string(&objects),
        ) {
            (Ok(t), Ok(o)) => (t, o),
            (Err(e), _) | (_, Err(e)) => {
                warn!(node, error = %e, "cannot encode the node's watches");
                return;
            }
        };
        let Some(uid) = self.node_uid(node).await else {
            debug!(node, "node unknown; its watches are not recorded");
            return;
        };
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                annotations: Some([(NODE_UID.to_owned(), uid)].into()),
                labels: Some(
                    [
                        ("k8s-app".to_owned(), "kubeedge".to_owned()),
                        (
                            "kubeedge.io/dynamiccontroller-node".to_owned(),
                            node.to_owned(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    (DATA_KEY.to_owned(), text),
                    (DELIVERED_KEY.to_owned(), objects),
                ]
                .into(),
            ),
            ..ConfigMap::default()
        };
        let mut cm_value = serde_json::to_value(&cm).unwrap_or_default();
        cm_value["apiVersion"] = "v1".into();
        cm_value["kind"] = "ConfigMap".into();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(e) = self
            .api
            .patch(&name, &params, &Patch::Apply(cm_value))
            .await
        {
            warn!(node, error = %e, "cannot record the node's watches");
        }
    }

    /// Writes changed records until `stop`: a change is written at once, later changes of
    /// the next two seconds together after them (a re-watch is a removal and an addition);
    /// what is pending at `stop` is written before returning.
    pub(crate) async fn run(
        self: Arc<Self>,
        registry: Arc<Registry>,
        delivered: Arc<Delivered>,
        stop: CancellationToken,
    ) {
        loop {
            let stopping = tokio::select! {
                _ = self.wake.notified() => false,
                _ = stop.cancelled() => true,
            };
            self.write_dirty(&registry, &delivered).await;
            if stopping {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(DEBOUNCE) => {}
                _ = stop.cancelled() => {
                    self.write_dirty(&registry, &delivered).await;
                    return;
                }
            }
        }
    }

    async fn write_dirty(&self, registry: &Registry, delivered: &Delivered) {
        let nodes: Vec<String> = self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        for node in nodes {
            self.write(&node, registry, delivered).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A client whose API server answers every request with 404 after `delay`, counting the
    /// requests in flight (the most at once) and in all.
    fn counting_client(
        delay: Duration,
    ) -> (kube::Client, Arc<(AtomicUsize, AtomicUsize, AtomicUsize)>) {
        let counts: Arc<(AtomicUsize, AtomicUsize, AtomicUsize)> = Arc::default();
        let c = counts.clone();
        let service = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            let c = c.clone();
            async move {
                let now = c.0.fetch_add(1, Ordering::SeqCst) + 1;
                c.1.fetch_max(now, Ordering::SeqCst);
                c.2.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                c.0.fetch_sub(1, Ordering::SeqCst);
                let body = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found"
                });
                http::Response::builder()
                    .status(404)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
            }
        });
        (kube::Client::new(service, "default"), counts)
    }

    #[tokio::test]
    async fn many_nodes_connecting_at_once_read_their_records_a_few_at_a_time() {
        let (client, counts) = counting_client(Duration::from_millis(20));
        let persist = Persist::new(client, "kubeedge");
        let nodes: Vec<String> = (0..200).map(|i| format!("edge-{i}")).collect();
        let loaded = futures::future::join_all(nodes.iter().map(|n| persist.load(n))).await;
        assert!(
            loaded
                .iter()
                .all(|r| r.apps.is_empty() && r.delivered.is_empty()),
            "no record anywhere"
        );
        assert_eq!(counts.2.load(Ordering::SeqCst), 200, "one read per node");
        let most = counts.1.load(Ordering::SeqCst);
        assert!(
            most <= READ_CONCURRENCY,
            "{most} reads in flight at once (at most {READ_CONCURRENCY})"
        );
        assert!(most > 1, "reads still overlap: {most}");
    }
}
