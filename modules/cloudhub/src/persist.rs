//! Success points written after acknowledgements, off the sessions' path: coalesced per record and
//! written by a few background workers (never inside a sender: API server latency must not stall
//! delivery).
//!
//! Two lanes: the records of nodes with a session here (acknowledgements, first sight) go
//! first; the records ensured for nodes that are away wait in a backlog per node, which a
//! node's connect moves to the front. A start-up sends every edge Node and pod to nodes that are
//! not connected yet; without the lanes the record of the first node to connect would wait
//! behind all of them, and the sync loop delivers from that record.

use std::collections::hash_map::Entry;
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

/// Which lane a queued key waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// Written first: the node has a session here (or the op came from one).
    Live,
    /// A record ensured for a node that is away: written after the live lane.
    Away,
}

#[derive(Debug, Default)]
struct Pending {
    ops: HashMap<SyncKey, (PersistOp, Lane)>,
    live: VecDeque<SyncKey>,
    /// Per node, the keys ensured while it was away. A key that moved to the live lane since
    /// stays here as a stale entry, skipped when reached (its op says `Live` or is gone).
    away: HashMap<String, VecDeque<SyncKey>>,
    /// The nodes of `away`, oldest first, each once.
    away_nodes: VecDeque<String>,
}

impl Pending {
    fn push_away(&mut self, key: SyncKey) {
        match self.away.get_mut(&key.node) {
            Some(keys) => keys.push_back(key),
            None => {
                self.away_nodes.push_back(key.node.clone());
                self.away.insert(key.node.clone(), VecDeque::from([key]));
            }
        }
    }

    /// The next live key with its op.
    fn pop_live(&mut self) -> Option<(SyncKey, PersistOp)> {
        while let Some(key) = self.live.pop_front() {
            if let Some((op, _)) = self.ops.remove(&key) {
                return Some((key, op));
            }
        }
        None
    }

    /// The next key of the backlog (the oldest node's first) with its op.
    fn pop_away(&mut self) -> Option<(SyncKey, PersistOp)> {
        while let Some(node) = self.away_nodes.front() {
            let Some(keys) = self.away.get_mut(node) else {
                self.away_nodes.pop_front();
                continue;
            };
            while let Some(key) = keys.pop_front() {
                if let Entry::Occupied(e) = self.ops.entry(key)
                    && e.get().1 == Lane::Away
                {
                    let (key, (op, _)) = e.remove_entry();
                    return Some((key, op));
                }
            }
            if let Some(node) = self.away_nodes.pop_front() {
                self.away.remove(&node);
            }
        }
        None
    }
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
/// Places of a batch kept for the backlog of nodes that are away while the live lane is busy,
/// so the backlog is written even under a steady stream of acknowledgements.
const AWAY_SHARE: usize = BATCH / 4;
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

    /// Queues `op` for `key` in the live lane, replacing a queued op for the same key (the
    /// newer version or a delete wins).
    pub(crate) fn submit(&self, key: SyncKey, op: PersistOp) {
        self.enqueue(key, op, Lane::Live);
    }

    fn enqueue(&self, key: SyncKey, op: PersistOp, lane: Lane) {
        let mut p = self.lock();
        match p.ops.get_mut(&key) {
            Some((existing, queued_in)) => {
                if let Some(merged) = existing.merge(op) {
                    *existing = merged;
                }
                // An op from a session moves a key of the backlog to the front (its entry
                // in the backlog is skipped when reached).
                if *queued_in == Lane::Away && lane == Lane::Live {
                    *queued_in = Lane::Live;
                    p.live.push_back(key);
                }
            }
            None => {
                p.ops.insert(key.clone(), (op, lane));
                match lane {
                    Lane::Live => p.live.push_back(key),
                    Lane::Away => p.push_away(key),
                }
            }
        }
        drop(p);
        self.notify.notify_one();
    }

    /// `node` has a session here now: the records ensured while it was away are written
    /// before the backlog of other nodes that are away.
    pub(crate) fn node_connected(&self, node: &str) {
        let mut p = self.lock();
        let Some(keys) = p.away.remove(node) else {
            return;
        };
        for key in keys {
            if let Some((_, lane)) = p.ops.get_mut(&key)
                && *lane == Lane::Away
            {
                *lane = Lane::Live;
                p.live.push_back(key);
            }
        }
        drop(p);
        self.notify.notify_one();
    }

    /// Up to [`BATCH`] keys: the live lane first, keeping [`AWAY_SHARE`] places for the
    /// backlog when it has any.
    fn take_batch(&self) -> Vec<(SyncKey, PersistOp)> {
        let mut p = self.lock();
        let mut batch = Vec::new();
        while batch.len() < BATCH - AWAY_SHARE {
            let Some(next) = p.pop_live() else { break };
            batch.push(next);
        }
        while batch.len() < BATCH {
            let Some(next) = p.pop_away().or_else(|| p.pop_live()) else {
                break;
            };
            batch.push(next);
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
    /// the sync loop send it once the node can take it. It waits in the backlog of nodes that
    /// are away until [`Persister::node_connected`] names its node. True when the message is
    /// one the sync loop redelivers (an ACK-class object with a UID).
    pub(crate) fn record_undelivered(&self, node: &str, msg: &Message) -> bool {
        match offline_record(node, msg) {
            Some((key, spec)) => {
                self.enqueue(key, PersistOp::Ensure { spec }, Lane::Away);
                true
            }
            None => false,
        }
    }

    /// Waits until nothing is queued or being written (for shutdown and tests).
    pub(crate) async fn flushed(&self) {
        loop {
            let idle = self.idle.notified();
            let empty = self.lock().ops.is_empty() && self.in_progress.load(Ordering::Acquire) == 0;
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

    fn persister() -> Arc<Persister> {
        Persister::new(
            Arc::new(crate::store::MemoryStore::new()),
            Counter::default(),
            Counter::default(),
        )
    }

    fn key(node: &str, uid: &str) -> SyncKey {
        SyncKey {
            node: node.into(),
            namespace: "ns".into(),
            uid: uid.into(),
        }
    }

    fn away(p: &Persister, node: &str, uid: &str) {
        p.enqueue(
            key(node, uid),
            PersistOp::Ensure { spec: spec() },
            Lane::Away,
        );
    }

    fn taken(p: &Persister) -> Vec<String> {
        p.take_batch().into_iter().map(|(k, _)| k.name()).collect()
    }

    #[test]
    fn a_connected_node_and_acknowledgements_go_before_the_backlog_of_nodes_away() {
        let p = persister();
        for i in 0..100 {
            away(&p, &format!("away-{i}"), "u");
        }
        away(&p, "late", "u1");
        away(&p, "late", "u2");
        away(&p, "away-3", "u3");
        p.node_connected("late");
        // An acknowledgement for a key in the backlog takes it to the front too.
        p.submit(key("away-5", "u"), acked("9"));
        let first = taken(&p);
        assert_eq!(first.len(), BATCH);
        assert_eq!(first[..3], ["late.u1", "late.u2", "away-5.u"]);
        // The rest of the batch is the backlog, oldest node first, each key once.
        let mut rest: Vec<String> = first[3..].to_vec();
        for _ in 0..10 {
            rest.extend(taken(&p));
        }
        let mut want: Vec<String> = (0..100)
            .filter(|&i| i != 5)
            .map(|i| format!("away-{i}.u"))
            .collect();
        want.insert(4, "away-3.u3".into());
        assert_eq!(rest, want);
        assert!(p.lock().ops.is_empty());
    }

    #[test]
    fn the_backlog_keeps_its_share_of_a_batch_under_a_stream_of_live_writes() {
        let p = persister();
        away(&p, "away", "u");
        for i in 0..2 * BATCH {
            p.submit(key("live", &format!("u{i}")), acked("1"));
        }
        let first = taken(&p);
        assert_eq!(first.len(), BATCH);
        assert!(first.contains(&"away.u".to_owned()), "{first:?}");
    }

    #[test]
    fn a_connect_moves_only_what_was_queued_before_it() {
        let p = persister();
        away(&p, "other", "u");
        p.node_connected("late");
        away(&p, "late", "u");
        assert_eq!(taken(&p), ["other.u", "late.u"]);
        away(&p, "other", "u");
        away(&p, "late", "u");
        p.node_connected("late");
        assert_eq!(taken(&p), ["late.u", "other.u"]);
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
