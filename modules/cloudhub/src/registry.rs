//! The node id → session table, with generations so a replaced session can never remove or
//! speak for its successor (spec §2.2, §9.2–§9.3).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::Addr;

use crate::session::Session;

/// Per-node delivery counters, shared by the session and the metrics reader.
#[derive(Debug, Default)]
pub struct NodeCounters {
    /// Messages written for the first time.
    pub sent: AtomicU64,
    /// ACK-class messages acknowledged by the edge.
    pub acked: AtomicU64,
    /// Re-sends of unacknowledged messages.
    pub retried: AtomicU64,
    /// Downstream messages dropped (queue full, stale, malformed).
    pub dropped: AtomicU64,
    /// Messages received from the edge (keepalives included).
    pub received: AtomicU64,
}

/// A point-in-time copy of [`NodeCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// See [`NodeCounters::sent`].
    pub sent: u64,
    /// See [`NodeCounters::acked`].
    pub acked: u64,
    /// See [`NodeCounters::retried`].
    pub retried: u64,
    /// See [`NodeCounters::dropped`].
    pub dropped: u64,
    /// See [`NodeCounters::received`].
    pub received: u64,
}

impl NodeCounters {
    /// A snapshot.
    pub fn snapshot(&self) -> NodeStats {
        NodeStats {
            sent: self.sent.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) generation: u64,
    pub(crate) addr: Addr<Session>,
    pub(crate) counters: Arc<NodeCounters>,
}

/// Why a registration was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `nodeLimit` sessions of other nodes exist.
    NodeLimit(usize),
    /// The hub is shutting down.
    ShuttingDown,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    sessions: Mutex<HashMap<Arc<str>, Entry>>,
    next_generation: AtomicU64,
    closed: std::sync::atomic::AtomicBool,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Atomically checks the node limit (counting only *other* nodes, so a reconnect is
    /// never refused because of its own stale session), creates the session with `make` and
    /// stores it. Returns the new entry and the replaced one, if any.
    pub(crate) fn register(
        &self,
        node: &Arc<str>,
        limit: usize,
        make: impl FnOnce(u64) -> (Addr<Session>, Arc<NodeCounters>),
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
        let (addr, counters) = make(generation);
        let entry = Entry {
            generation,
            addr,
            counters,
        };
        let old = sessions.insert(node.clone(), entry.clone());
        Ok((entry, old))
    }

    /// Removes `node`'s session only if it is still generation `generation`; true if removed.
    pub(crate) fn remove(&self, node: &str, generation: u64) -> bool {
        let mut sessions = self.lock();
        match sessions.get(node) {
            Some(e) if e.generation == generation => {
                sessions.remove(node);
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

    /// Refuses new registrations from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}
