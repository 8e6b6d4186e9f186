//! Success points written after acknowledgements, off the sessions' path: coalesced per record and
//! written by a few background workers (never inside a sender: API server latency must not stall
//! delivery).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use beehive::Message;
use kubeedge_api::names;

use crate::classify::{Delivery, classify, is_delete, object_info};
use crate::store::{ObjectSyncStore, SyncKey, SyncSpec};

/// What to record for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PersistOp {
    /// The edge acknowledged this resource version.
    Acked { spec: SyncSpec, rv: String },
    /// The edge acknowledged a delete: remove the record.
    Delete,
    /// An object was sent while its node had no session here: make sure a record exists
    /// (created with status `"0"`, an existing one left alone) so the sync loop delivers the
    /// object once the node is back. Without it an object created while the node is away would
    /// never reach the edge (found by the edgecore interop suite).
    Ensure { spec: SyncSpec },
    /// An object written to its edge at first sight, with no record (the record cache says
    /// so): create it with status `"0"`, as [`PersistOp::Ensure`] does.
    Create { spec: SyncSpec },
    /// The acknowledgement of an object whose [`PersistOp::Create`] was still queued: the
    /// record is created and given this version, two requests instead of the three of a
    /// create followed by an acknowledgement.
    CreateAcked { spec: SyncSpec, rv: String },
}

impl PersistOp {
    /// What `self`, queued, becomes when `op` is submitted for the same key: the newer
    /// version or a delete wins; a record to ensure never replaces anything but another one.
    fn merge(&self, op: PersistOp) -> Option<PersistOp> {
        use PersistOp::*;
        let ensures = |o: &PersistOp| matches!(o, Ensure { .. } | Create { .. });
        // A queued ensure is replaced by any op; a queued create by no other ensure.
        match (self, op) {
            (Acked { rv: old, .. } | CreateAcked { rv: old, .. }, Acked { rv: new, .. })
                if !kubeedge_api::version::is_newer(&new, old) =>
            {
                None
            }
            (Create { .. } | CreateAcked { .. }, Acked { spec, rv }) => {
                Some(CreateAcked { spec, rv })
            }
            (existing, op) if ensures(&op) && !matches!(existing, Ensure { .. }) => None,
            (_, op) => Some(op),
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    ops: HashMap<SyncKey, PersistOp>,
    order: VecDeque<SyncKey>,
}

/// The coalescing write queue.
#[derive(Debug)]
pub(crate) struct Persister {
    store: Arc<dyn ObjectSyncStore>,
    pending: Mutex<Pending>,
    notify: Notify,
    idle: Notify,
    in_progress: AtomicU64,
    written: Counter,
    failed: Counter,
}

const BATCH: usize = 32;
/// How long the writer waits after the first submit of a burst before taking batches.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(1);

impl Persister {
    /// A writer to `store`, counting its writes in `written` and `failed`.
    pub(crate) fn new(
        store: Arc<dyn ObjectSyncStore>,
        written: Counter,
        failed: Counter,
    ) -> Arc<Self> {
        Arc::new(Persister {
            store,
            pending: Mutex::new(Pending::default()),
            notify: Notify::new(),
            idle: Notify::new(),
            in_progress: AtomicU64::new(0),
            written,
            failed,
        })
    }

    pub(crate) fn store(&self) -> &Arc<dyn ObjectSyncStore> {
        &self.store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `op` for `key`, replacing a queued op for the same key (the newer version or a
    /// delete wins).
    pub(crate) fn submit(&self, key: SyncKey, op: PersistOp) {
        let mut p = self.lock();
        match p.ops.get_mut(&key) {
            Some(existing) => {
                if let Some(merged) = existing.merge(op) {
                    *existing = merged;
                }
            }
            None => {
                p.ops.insert(key.clone(), op);
                p.order.push_back(key);
            }
        }
        drop(p);
        self.notify.notify_one();
    }

    fn take_batch(&self) -> Vec<(SyncKey, PersistOp)> {
        let mut p = self.lock();
        let mut batch = Vec::new();
        while batch.len() < BATCH {
            let Some(key) = p.order.pop_front() else {
                break;
            };
            if let Some(op) = p.ops.remove(&key) {
                batch.push((key, op));
            }
        }
        self.in_progress
            .fetch_add(batch.len() as u64, Ordering::AcqRel);
        batch
    }

    async fn write(&self, key: SyncKey, op: PersistOp) {
        let result = match &op {
            PersistOp::Acked { spec, rv } => self.store.set_acked(&key, spec, rv).await,
            PersistOp::Delete => self.store.delete(&key).await,
            PersistOp::Ensure { spec } | PersistOp::Create { spec } => {
                self.store.create(&key, spec).await.map(|_| ())
            }
            PersistOp::CreateAcked { spec, rv } => self.store.create_acked(&key, spec, rv).await,
        };
        match result {
            Ok(()) => {
                self.written.inc();
                debug!(record = %key.name(), ?op, "objectsync recorded");
            }
            Err(e) => {
                // The sync loop resends what the record does not show, so this self-heals.
                self.failed.inc();
                warn!(record = %key.name(), error = %e, "objectsync write failed");
            }
        }
    }

    /// Writes queued ops, up to `BATCH` at a time concurrently, until `done` is cancelled
    /// while nothing is queued.
    pub(crate) async fn run(self: Arc<Self>, done: CancellationToken) {
        loop {
            let batch = self.take_batch();
            if batch.is_empty() {
                self.idle.notify_waiters();
                tokio::select! {
                    () = self.notify.notified() => {}
                    () = done.cancelled() => return,
                }
                // Let a burst of acknowledgements gather: while this waits, a submit only
                // stores a permit, instead of waking this task across threads each time.
                tokio::time::sleep(COALESCE).await;
                continue;
            }
            let n = batch.len() as u64;
            futures::future::join_all(batch.into_iter().map(|(k, op)| self.write(k, op))).await;
            self.in_progress.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// For a message its node did not take (away, queue full, session ended): the record a
    /// first-seen object gets (status `"0"`; an existing record is left alone) is what makes
    /// the sync loop send it once the node can take it. True when the message is one the sync
    /// loop redelivers (an ACK-class object with a UID).
    pub(crate) fn record_undelivered(&self, node: &str, msg: &Message) -> bool {
        match offline_record(node, msg) {
            Some((key, spec)) => {
                self.submit(key, PersistOp::Ensure { spec });
                true
            }
            None => false,
        }
    }

    /// Waits until nothing is queued or being written (for shutdown and tests).
    pub(crate) async fn flushed(&self) {
        loop {
            let idle = self.idle.notified();
            let empty =
                self.lock().order.is_empty() && self.in_progress.load(Ordering::Acquire) == 0;
            if empty {
                return;
            }
            self.notify.notify_one();
            let _ = tokio::time::timeout(std::time::Duration::from_millis(50), idle).await;
        }
    }
}

/// The record to ensure for a downstream message its node could not take, so the sync loop delivers
/// it later: an ACK-class `resource` message with a resource version about an object with a UID,
/// that is neither a delete (the sync loop finds the object gone by itself) nor an answer to a
/// query.
fn offline_record(node: &str, msg: &Message) -> Option<(SyncKey, SyncSpec)> {
    if classify(msg) != Delivery::Ack
        || msg.route.group != names::GROUP_RESOURCE
        || msg.route.operation == beehive::constants::operation::RESPONSE
        || msg.header.resource_version.is_empty()
    {
        return None;
    }
    let info = object_info(msg)?;
    if is_delete(msg, Some(&info)) {
        return None;
    }
    let r = kubeedge_api::NodeResource::parse(&msg.route.resource).ok()?;
    if r.namespace.is_empty() {
        return None;
    }
    let name = if r.name.is_empty() { info.name } else { r.name };
    Some((
        SyncKey {
            node: node.to_owned(),
            namespace: r.namespace,
            uid: info.uid,
        },
        SyncSpec {
            api_version: info.api_version,
            kind: info.kind,
            name,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use beehive::Content;

    fn msg(resource: &str, op: &str, rv: &str, content: serde_json::Value) -> Message {
        Message::new()
            .with_route("edgecontroller", "resource", resource, op)
            .with_resource_version(rv)
            .with_content(Content::json(&content).unwrap())
    }

    fn cm(uid: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": uid}})
    }

    fn spec() -> SyncSpec {
        SyncSpec {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into(),
        }
    }

    fn acked(rv: &str) -> PersistOp {
        PersistOp::Acked {
            spec: spec(),
            rv: rv.into(),
        }
    }

    #[test]
    fn queued_ops_merge_to_the_newest_version_and_a_queued_create_takes_the_ack() {
        use PersistOp::*;
        let create = Create { spec: spec() };
        let ensure = Ensure { spec: spec() };
        let create_acked = |rv: &str| CreateAcked {
            spec: spec(),
            rv: rv.into(),
        };
        let cases = [
            (create.clone(), acked("7"), Some(create_acked("7"))),
            (create_acked("7"), acked("8"), Some(create_acked("8"))),
            (create_acked("8"), acked("7"), None),
            (create_acked("7"), create.clone(), None),
            (acked("8"), acked("7"), None),
            (acked("7"), acked("8"), Some(acked("8"))),
            (acked("7"), ensure.clone(), None),
            (acked("7"), Delete, Some(Delete)),
            (create_acked("7"), Delete, Some(Delete)),
            (Delete, ensure.clone(), None),
            (Delete, acked("7"), Some(acked("7"))),
            // An offline record's ensure says nothing about whether the record exists.
            (ensure.clone(), acked("7"), Some(acked("7"))),
            (ensure.clone(), create.clone(), Some(create.clone())),
            (create.clone(), ensure.clone(), None),
        ];
        for (queued, submitted, want) in cases {
            assert_eq!(
                queued.merge(submitted.clone()),
                want,
                "{queued:?} + {submitted:?}"
            );
        }
    }

    #[test]
    fn an_insert_for_an_absent_node_gets_a_record() {
        let (key, spec) = offline_record(
            "e1",
            &msg("node/e1/ns/configmap/c", "insert", "7", cm("u1")),
        )
        .unwrap();
        assert_eq!(
            (key.node.as_str(), key.namespace.as_str(), key.uid.as_str()),
            ("e1", "ns", "u1")
        );
        assert_eq!(
            (
                spec.api_version.as_str(),
                spec.kind.as_str(),
                spec.name.as_str()
            ),
            ("v1", "ConfigMap", "c")
        );
    }

    #[test]
    fn deletes_responses_no_ack_and_unversioned_messages_get_none() {
        let none = [
            msg("node/e1/ns/configmap/c", "delete", "7", cm("u1")),
            msg("node/e1/ns/configmap/c", "response", "7", cm("u1")),
            msg("node/e1/ns/configmap/c", "update", "", cm("u1")),
            msg(
                "node/e1/ns/configmap/c",
                "update",
                "7",
                serde_json::json!({"metadata": {}}),
            ),
            msg("node/e1/kube-node-lease/lease/e1", "update", "7", cm("u1")),
            msg(
                "node/e1/ns/configmap/c",
                "update",
                "7",
                serde_json::json!({"metadata": {"uid": "u", "deletionTimestamp": "2020-01-01T00:00:00Z"}}),
            ),
        ];
        for m in none {
            assert_eq!(offline_record("e1", &m), None, "{m}");
        }
    }
}
