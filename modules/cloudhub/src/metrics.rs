//! What the hub counts: hub-wide counters, per-node counters, drops per reason, the
//! certificate server's refusals; and the snapshots the handle reads them back as.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// Hub-wide counters.
#[derive(Debug, Default)]
pub(crate) struct HubCounters {
    pub(crate) dropped_no_node: AtomicU64,
    pub(crate) dropped_offline: AtomicU64,
    pub(crate) held_elsewhere: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) upstream_unroutable: AtomicU64,
    pub(crate) token_refused_connected: AtomicU64,
    pub(crate) revocation_writes_failed: AtomicU64,
    /// Connection tasks (one per upgraded WebSocket) running now.
    pub(crate) connection_tasks: AtomicU64,
    /// Every drop, per reason, whether or not a node's counters saw it.
    pub(crate) drops: DropCounters,
}

/// A snapshot of the hub's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Live sessions (the `KubeEdge_CloudHub_connected_nodes` gauge).
    pub connected_nodes: usize,
    /// Connection tasks running now: one per upgraded WebSocket, from the upgrade until its
    /// socket is closed. Equal to `connected_nodes` at rest; a higher figure that does not come
    /// back down means connections outlive their sessions.
    pub connection_tasks: u64,
    /// Downstream messages whose resource names no node.
    pub dropped_no_node: u64,
    /// Downstream messages for nodes without a session here (the sync loop redelivers
    /// ACK-class state once the node is back).
    pub dropped_offline: u64,
    /// Downstream messages for nodes another replica holds: left to that replica (not drops;
    /// with several replicas, most messages are someone else's).
    pub held_elsewhere: u64,
    /// Downstream messages refused because the node's session mailbox was full (the
    /// ACK-class ones keep an ObjectSync record, so the sync loop redelivers them).
    pub dropped_full: u64,
    /// Every drop in the hub (downstream and upstream), per reason: the per-node counts
    /// together plus those for nodes without counters (no node id, never connected here).
    pub drops: DropCounts,
    /// Upstream messages no module could take.
    pub upstream_unroutable: u64,
    /// ObjectSync writes done after acknowledgements.
    pub records_written: u64,
    /// ObjectSync writes that failed (the sync loop repairs them).
    pub records_failed: u64,
    /// Token-authenticated certificate requests refused because the node had a live session.
    pub token_refused_connected: u64,
    /// Handshakes and certificate-server requests refused because the certificate is revoked.
    pub revoked_refused: u64,
    /// Nodes whose certificates are revoked (deleted within one certificate lifetime).
    pub revoked_nodes: usize,
    /// Revocations not yet written to the API server (retried every minute).
    pub revocation_writes_failed: u64,
}

impl HubCounters {
    /// Counts `n` drops of `reason`: hub-wide, and for the node when it has counters.
    pub(crate) fn count_drop(&self, node: Option<&NodeCounters>, reason: DropReason, n: u64) {
        if n == 0 {
            return;
        }
        self.drops.add(reason, n);
        if let Some(c) = node {
            c.drop_n(reason, n);
        }
    }
}

/// Counters of the certificate server beyond its listener's admission counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CertServerStats {
    /// Requests refused from their head alone (no or invalid token or client certificate:
    /// 401/403), their body never read.
    pub unauthorized: u64,
    /// Requests whose body did not arrive within `https.requestTimeoutSeconds`: answered
    /// 408 and their connection closed.
    pub request_timeouts: u64,
    /// Requests refused because their declared or actual body exceeded the route's limit
    /// (413).
    pub too_large: u64,
    /// `/node/{name}` checks refused by their source address's rate limit (429).
    pub rate_limited: u64,
}

/// The live counters behind [`CertServerStats`].
#[derive(Debug, Default)]
pub(crate) struct CertServerCounters {
    pub(crate) unauthorized: AtomicU64,
    pub(crate) request_timeouts: AtomicU64,
    pub(crate) too_large: AtomicU64,
    pub(crate) rate_limited: AtomicU64,
}

impl CertServerCounters {
    pub(crate) fn snapshot(&self) -> CertServerStats {
        CertServerStats {
            unauthorized: self.unauthorized.load(Ordering::Relaxed),
            request_timeouts: self.request_timeouts.load(Ordering::Relaxed),
            too_large: self.too_large.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
        }
    }
}
