//! The node id → session table, with generations so a replaced session can never remove or
//! speak for its successor (KubeEdge's old socket can close the new session and publish a stale
//! `disconnected`); and the per-node counters, which outlive sessions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::messages::SessionAddr;
use crate::metrics::{HubMetrics, NodeCounters};

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) generation: u64,
    pub(crate) session: Arc<SessionAddr>,
    pub(crate) counters: Arc<NodeCounters>,
    /// When this session registered.
    pub(crate) since: std::time::Instant,
    /// The notBefore (unix seconds) of the certificate the node connected with, when known:
    /// a revocation covering it ends the session.
    pub(crate) issued: Option<i64>,
}

/// Why a registration was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `nodeLimit` sessions of other nodes exist.
    NodeLimit(usize),
    /// The hub is shutting down.
    ShuttingDown,
}

#[derive(Debug)]
pub(crate) struct Registry {
    sessions: Mutex<HashMap<Arc<str>, Entry>>,
    next_generation: AtomicU64,
    closed: std::sync::atomic::AtomicBool,
    /// Holds the counters of every node seen since start (connected or not), under a lock
    /// of its own that is always taken after `sessions` when both are held.
    metrics: Arc<HubMetrics>,
}

impl Registry {
    /// An empty registry whose node counters are series of `metrics`.
    pub(crate) fn new(metrics: Arc<HubMetrics>) -> Self {
        Registry {
            sessions: Mutex::default(),
            next_generation: AtomicU64::new(0),
            closed: std::sync::atomic::AtomicBool::new(false),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node's counters, created on first use.
    pub(crate) fn node_counters(&self, node: &Arc<str>) -> Arc<NodeCounters> {
        self.metrics.nodes.get_or_create(node)
    }

    /// The node's counters if it has connected since start (a node never seen gets none, so
    /// messages for arbitrary node names cannot grow the table).
    pub(crate) fn known_counters(&self, node: &str) -> Option<Arc<NodeCounters>> {
        self.metrics.nodes.get(node)
    }

    /// Counters of every node seen since start.
    pub(crate) fn all_counters(&self) -> Vec<(String, Arc<NodeCounters>)> {
        self.metrics.nodes.all()
    }

    /// Forgets a deleted node's counters (the table holds one entry per node ever seen).
    pub(crate) fn forget_counters(&self, node: &str) {
        self.metrics.nodes.forget(node);
    }

    /// Atomically checks the node limit (counting only *other* nodes, so a reconnect is
    /// never refused because of its own stale session), creates the session with `make` and
    /// stores it with the notBefore of its certificate (`issued`). Returns the new entry and the replaced one, if any. The entry carries the
    /// node's long-lived counters ([`Registry::node_counters`]), not the ones `make` returns.
    pub(crate) fn register(
        &self,
        node: &Arc<str>,
        limit: usize,
        issued: Option<i64>,
        make: impl FnOnce(u64) -> SessionAddr,
    ) -> Result<(Entry, Option<Entry>), Refused> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::ShuttingDown);
        }
        let mut sessions = self.lock();
        let others = sessions.len() - usize::from(sessions.contains_key(node));
        if others >= limit {
            return Err(Refused::NodeLimit(others));
        }
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed) + 1;
        let session = Arc::new(make(generation));
        let counters = self.node_counters(node);
        let entry = Entry {
            generation,
            session,
            counters,
            since: std::time::Instant::now(),
            issued,
        };
        let old = sessions.insert(node.clone(), entry.clone());
        self.metrics.connected_nodes.set(sessions.len() as i64);
        Ok((entry, old))
    }

    /// Removes `node`'s session only if it is still generation `generation`; true if removed.
    pub(crate) fn remove(&self, node: &str, generation: u64) -> bool {
        let mut sessions = self.lock();
        match sessions.get(node) {
            Some(e) if e.generation == generation => {
                sessions.remove(node);
                self.metrics.connected_nodes.set(sessions.len() as i64);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn get(&self, node: &str) -> Option<Entry> {
        self.lock().get(node).cloned()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn nodes(&self) -> Vec<String> {
        self.lock().keys().map(|k| k.to_string()).collect()
    }

    pub(crate) fn all(&self) -> Vec<(String, Entry)> {
        self.lock()
            .iter()
            .map(|(k, e)| (k.to_string(), e.clone()))
            .collect()
    }

    /// Refuses new registrations from now on; false when it already did.
    pub(crate) fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }
}
