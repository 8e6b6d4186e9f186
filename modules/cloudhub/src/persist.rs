//! Success points written after acknowledgements, off the sessions' path: coalesced per record and
//! written by a few background workers (never inside a sender: API server latency must not stall
//! delivery).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tracing::{debug, warn};

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
    pub(crate) written: AtomicU64,
    pub(crate) failed: AtomicU64,
}

const BATCH: usize = 32;

impl Persister {
    pub(crate) fn new(store: Arc<dyn ObjectSyncStore>) -> Arc<Self> {
        Arc::new(Persister {
            store,
            pending: Mutex::new(Pending::default()),
            notify: Notify::new(),
            idle: Notify::new(),
            in_progress: AtomicU64::new(0),
            written: AtomicU64::new(0),
            failed: AtomicU64::new(0),
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
                let keep_existing = matches!(
                    (&*existing, &op),
                    (PersistOp::Acked { rv: old, .. }, PersistOp::Acked { rv: new, .. })
                        if !kubeedge_api::version::is_newer(new, old)
                ) || (matches!(op, PersistOp::Ensure { .. })
                    && !matches!(existing, PersistOp::Ensure { .. }));
                if !keep_existing {
                    *existing = op;
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
            PersistOp::Ensure { spec } => self.store.create(&key, spec).await.map(|_| ()),
        };
        match result {
            Ok(()) => {
                self.written.fetch_add(1, Ordering::Relaxed);
                debug!(record = %key.name(), ?op, "objectsync recorded");
            }
            Err(e) => {
                // The sync loop resends what the record does not show, so this self-heals.
                self.failed.fetch_add(1, Ordering::Relaxed);
                warn!(record = %key.name(), error = %e, "objectsync write failed");
            }
        }
    }

    /// Writes queued ops forever, up to `BATCH` at a time concurrently.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            let batch = self.take_batch();
            if batch.is_empty() {
                self.idle.notify_waiters();
                self.notify.notified().await;
                continue;
            }
            let n = batch.len() as u64;
            futures::future::join_all(batch.into_iter().map(|(k, op)| self.write(k, op))).await;
            self.in_progress.fetch_sub(n, Ordering::AcqRel);
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
