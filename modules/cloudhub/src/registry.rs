//! The node id → session table, with generations so a replaced session can never remove or
//! speak for its successor (KubeEdge's old socket can close the new session and publish a stale
//! `disconnected`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::Addr;

use crate::session::Session;

/// Why a message was not delivered. A small closed set, so a metric labelled by reason has a
/// bounded number of series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// The node's intake (session mailbox or ACK-class queue, `nodeQueueSize`) was full. An
    /// ACK-class object keeps an ObjectSync record, so the sync loop redelivers it.
    QueueFull,
    /// The node's no-ACK queue (`nodeQueueSize`) was full; the message is lost.
    NoAckOverflow,
    /// Superseded: not newer than a version already pending, acknowledged or recorded. Nothing
    /// is lost (the edge gets, or has, that version or a newer one).
    Stale,
    /// The node had no session here. ACK-class objects get a record for the sync loop.
    Offline,
    /// Queued or in flight when a newer connection of the node replaced the session.
    Replaced,
    /// Queued or in flight when the session ended for another reason (disconnect, keepalive
    /// or write timeout, node deletion, shutdown).
    SessionEnded,
    /// A node `delete` for a node that is not known to be deleted (a record of an earlier
    /// incarnation of the node): not written, and the session stays up.
    StaleNodeDelete,
    /// Unusable: no node id in the resource, an ACK-class message without resource version,
    /// or an edge frame that ended its connection (bad JSON, oversized, protocol violation).
    Malformed,
    /// Refused by a routing rule: the legacy `edgemgr` filter, or an edge message claiming a
    /// cloud module as its source.
    Refused,
    /// An upstream message no cloud module could take.
    Unroutable,
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 10;

    /// Every reason, in a fixed order (the order of [`DropCounts::iter`]).
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::QueueFull,
        DropReason::NoAckOverflow,
        DropReason::Stale,
        DropReason::Offline,
        DropReason::Replaced,
        DropReason::SessionEnded,
        DropReason::StaleNodeDelete,
        DropReason::Malformed,
        DropReason::Refused,
        DropReason::Unroutable,
    ];

    /// The label value (`snake_case`, stable).
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::NoAckOverflow => "no_ack_overflow",
            DropReason::Stale => "stale",
            DropReason::Offline => "offline",
            DropReason::Replaced => "replaced",
            DropReason::SessionEnded => "session_ended",
            DropReason::StaleNodeDelete => "stale_node_delete",
            DropReason::Malformed => "malformed",
            DropReason::Refused => "refused",
            DropReason::Unroutable => "unroutable",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Drops per [`DropReason`], a point-in-time copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounts([u64; DropReason::COUNT]);

impl DropCounts {
    /// Drops for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    /// Drops for every reason together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Every reason with its count (zeros included), in [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|r| (*r, self.get(*r)))
    }
}

/// Live drop counters, one per reason.
#[derive(Debug, Default)]
pub(crate) struct DropCounters([AtomicU64; DropReason::COUNT]);

impl DropCounters {
    pub(crate) fn add(&self, reason: DropReason, n: u64) {
        self.0[reason.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DropCounts {
        DropCounts(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}

/// Per-node counters, shared by the node's sessions and the metrics reader. They live as long
/// as the hub knows the node (from its first connection until the node is deleted), so they
/// add up over reconnections and also see what a replaced session leaves behind.
#[derive(Debug, Default)]
pub struct NodeCounters {
    pub(crate) sent: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) drops: DropCounters,
    pub(crate) received: AtomicU64,
    pub(crate) backlog: AtomicU64,
    pub(crate) backlog_peak: AtomicU64,
}

/// A point-in-time copy of a node's [`NodeCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Messages written for the first time.
    pub sent: u64,
    /// ACK-class messages acknowledged by the edge.
    pub acked: u64,
    /// Re-sends of unacknowledged messages.
    pub retried: u64,
    /// Messages dropped for the node, every reason together (`drops.total()`).
    pub dropped: u64,
    /// Messages dropped for the node, per reason.
    pub drops: DropCounts,
    /// Messages received from the edge (keepalives included).
    pub received: u64,
    /// Bytes queued for the node's socket and not yet written (replies included), summed over
    /// its open connections. While this is at or above the limit (1 MiB) the hub reads nothing
    /// more from the edge and writes no further downstream messages.
    pub backlog: u64,
    /// The highest `backlog` seen for one connection. Replies to the edge stop at the limit
    /// plus one reply; downstream writes at the limit plus one round of writes (at most
    /// `noAckBurst` + `ackWindow` messages).
    pub backlog_peak: u64,
}

impl NodeCounters {
    /// A snapshot.
    pub fn snapshot(&self) -> NodeStats {
        let drops = self.drops.snapshot();
        NodeStats {
            sent: self.sent.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dropped: drops.total(),
            drops,
            received: self.received.load(Ordering::Relaxed),
            backlog: self.backlog.load(Ordering::Relaxed),
            backlog_peak: self.backlog_peak.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` drops of `reason` for this node (the hub-wide count is the caller's).
    pub(crate) fn drop_n(&self, reason: DropReason, n: u64) {
        self.drops.add(reason, n);
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) generation: u64,
    pub(crate) addr: Addr<Session>,
    pub(crate) counters: Arc<NodeCounters>,
    /// When this session registered.
    pub(crate) since: std::time::Instant,
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
    /// Counters of every node seen since start (connected or not). A separate lock, always
    /// taken after `sessions` when both are held.
    counters: Mutex<HashMap<Arc<str>, Arc<NodeCounters>>>,
    next_generation: AtomicU64,
    closed: std::sync::atomic::AtomicBool,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node's counters, created on first use.
    pub(crate) fn node_counters(&self, node: &Arc<str>) -> Arc<NodeCounters> {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters.entry(node.clone()).or_default().clone()
    }

    /// The node's counters if it has connected since start (a node never seen gets none, so
    /// messages for arbitrary node names cannot grow the table).
    pub(crate) fn known_counters(&self, node: &str) -> Option<Arc<NodeCounters>> {
        let counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters.get(node).cloned()
    }

    /// Counters of every node seen since start.
    pub(crate) fn all_counters(&self) -> Vec<(String, Arc<NodeCounters>)> {
        let counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters
            .iter()
            .map(|(k, c)| (k.to_string(), c.clone()))
            .collect()
    }

    /// Forgets a deleted node's counters (the table holds one entry per node ever seen).
    pub(crate) fn forget_counters(&self, node: &str) {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters.remove(node);
    }

    /// Atomically checks the node limit (counting only *other* nodes, so a reconnect is
    /// never refused because of its own stale session), creates the session with `make` and
    /// stores it. Returns the new entry and the replaced one, if any. The entry carries the
    /// node's long-lived counters ([`Registry::node_counters`]), not the ones `make` returns.
    pub(crate) fn register(
        &self,
        node: &Arc<str>,
        limit: usize,
        make: impl FnOnce(u64) -> Addr<Session>,
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
        let addr = make(generation);
        let counters = self.node_counters(node);
        let entry = Entry {
            generation,
            addr,
            counters,
            since: std::time::Instant::now(),
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
