//! What the hub counts, as prometheus-client metrics: connected nodes, connection tasks,
//! per-node delivery counters and backlog, drops per reason, record writes, the certificate
//! server's refusals, revocations. [`HubMetrics::register`] exposes them; the snapshots
//! ([`HubStats`], [`NodeStats`], [`CertServerStats`]) read the same values back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

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

/// Series of one drop reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The counters of every node the hub knows (connected now or not), exposed at scrape time:
/// one series per node and counter costs nothing between scrapes, where a metric family
/// would hold a label set and a shared counter per node and counter.
#[derive(Debug, Default)]
pub(crate) struct NodeTable {
    nodes: Mutex<HashMap<Arc<str>, Arc<NodeCounters>>>,
    /// What forgotten nodes had counted, so the hub-wide sums never go down.
    retired: Mutex<NodeStats>,
}

impl NodeTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<NodeCounters>>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node's counters, created on first use.
    pub(crate) fn get_or_create(&self, node: &Arc<str>) -> Arc<NodeCounters> {
        self.lock().entry(node.clone()).or_default().clone()
    }

    /// The node's counters if it has any.
    pub(crate) fn get(&self, node: &str) -> Option<Arc<NodeCounters>> {
        self.lock().get(node).cloned()
    }

    /// Every node's counters.
    pub(crate) fn all(&self) -> Vec<(String, Arc<NodeCounters>)> {
        self.lock()
            .iter()
            .map(|(k, c)| (k.to_string(), c.clone()))
            .collect()
    }

    /// Forgets a node's counters (a deleted node: the table holds one entry per node seen);
    /// the hub-wide sums keep what it counted.
    pub(crate) fn forget(&self, node: &str) {
        let Some(gone) = self.lock().remove(node) else {
            return;
        };
        let gone = gone.snapshot();
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        retired.sent += gone.sent;
        retired.acked += gone.acked;
        retired.retried += gone.retried;
        retired.received += gone.received;
    }

    /// The counters of every node, forgotten ones included, summed; backlogs are those of the
    /// nodes known now (the peak is the highest of them).
    fn sums(&self, nodes: &[(String, NodeStats)]) -> NodeStats {
        let mut sum = *self.retired.lock().unwrap_or_else(|e| e.into_inner());
        for (_, n) in nodes {
            sum.sent += n.sent;
            sum.acked += n.acked;
            sum.retried += n.retried;
            sum.received += n.received;
            sum.backlog += n.backlog;
            sum.backlog_peak = sum.backlog_peak.max(n.backlog_peak);
        }
        sum
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

/// Everything the hub counts. Cheap to share (`Arc`); [`HubMetrics::register`] adds it to a
/// Prometheus registry.
#[derive(Debug)]
pub struct HubMetrics {
    /// Live sessions (set by the session registry).
    pub(crate) connected_nodes: Gauge,
    /// Connection tasks (one per upgraded WebSocket) running now.
    pub(crate) connection_tasks: Gauge,
    /// Every node's counters.
    pub(crate) nodes: Arc<NodeTable>,
    /// Every drop, per reason, whether or not a node's counters saw it.
    drops: Family<ReasonLabels, Counter>,
    /// The series of `drops`, one per reason (all exposed from the start).
    drop_counters: [Counter; DropReason::COUNT],
    pub(crate) records_written: Counter,
    pub(crate) records_failed: Counter,
    pub(crate) held_elsewhere: Counter,
    pub(crate) token_refused_connected: Counter,
    pub(crate) cert_unauthorized: Counter,
    pub(crate) cert_request_timeouts: Counter,
    pub(crate) cert_too_large: Counter,
    pub(crate) cert_rate_limited: Counter,
    // Read through `HubStats` only (each is also counted under a drop reason).
    pub(crate) dropped_no_node: Counter,
    pub(crate) dropped_offline: Counter,
    pub(crate) dropped_full: Counter,
    pub(crate) upstream_unroutable: Counter,
    pub(crate) revocation_writes_failed: Counter,
    /// The revocation table counts its own refusals; exposed at scrape time.
    revocations: pki::Revocations,
    /// Whether each node's counters are exported as series of their own
    /// (`modules.cloudHub.perNodeMetrics`).
    per_node: bool,
}

impl HubMetrics {
    /// Metrics of a hub whose revocation table is `revocations`; `per_node` exports each
    /// node's counters as series of their own.
    pub(crate) fn new(revocations: pki::Revocations, per_node: bool) -> Self {
        let drops = Family::<ReasonLabels, Counter>::default();
        let drop_counters = DropReason::ALL
            .map(|r| drops.get_or_create_owned(&ReasonLabels { reason: r.as_str() }));
        HubMetrics {
            connected_nodes: Gauge::default(),
            connection_tasks: Gauge::default(),
            nodes: Arc::default(),
            drops,
            drop_counters,
            records_written: Counter::default(),
            records_failed: Counter::default(),
            held_elsewhere: Counter::default(),
            token_refused_connected: Counter::default(),
            cert_unauthorized: Counter::default(),
            cert_request_timeouts: Counter::default(),
            cert_too_large: Counter::default(),
            cert_rate_limited: Counter::default(),
            dropped_no_node: Counter::default(),
            dropped_offline: Counter::default(),
            dropped_full: Counter::default(),
            upstream_unroutable: Counter::default(),
            revocation_writes_failed: Counter::default(),
            revocations,
            per_node,
        }
    }

    /// Counts `n` drops of `reason`: hub-wide, and for the node when it has counters.
    pub(crate) fn count_drop(&self, node: Option<&NodeCounters>, reason: DropReason, n: u64) {
        if n == 0 {
            return;
        }
        self.drop_counters[reason.index()].inc_by(n);
        if let Some(c) = node {
            c.drop_n(reason, n);
        }
    }

    /// Hub-wide drops per reason.
    pub(crate) fn drop_counts(&self) -> DropCounts {
        DropCounts(std::array::from_fn(|i| self.drop_counters[i].get()))
    }

    /// The hub-wide snapshot.
    pub(crate) fn stats(&self) -> HubStats {
        HubStats {
            connected_nodes: usize::try_from(self.connected_nodes.get()).unwrap_or(0),
            connection_tasks: u64::try_from(self.connection_tasks.get()).unwrap_or(0),
            dropped_no_node: self.dropped_no_node.get(),
            dropped_offline: self.dropped_offline.get(),
            held_elsewhere: self.held_elsewhere.get(),
            dropped_full: self.dropped_full.get(),
            drops: self.drop_counts(),
            upstream_unroutable: self.upstream_unroutable.get(),
            records_written: self.records_written.get(),
            records_failed: self.records_failed.get(),
            token_refused_connected: self.token_refused_connected.get(),
            revoked_refused: self.revocations.refused(),
            revoked_nodes: self.revocations.len(),
            revocation_writes_failed: self.revocation_writes_failed.get(),
        }
    }

    /// The certificate server's counters.
    pub(crate) fn cert_server_stats(&self) -> CertServerStats {
        CertServerStats {
            unauthorized: self.cert_unauthorized.get(),
            request_timeouts: self.cert_request_timeouts.get(),
            too_large: self.cert_too_large.get(),
            rate_limited: self.cert_rate_limited.get(),
        }
    }

    /// Adds every metric of the hub to `registry` (counters get the `_total` suffix there):
    /// `KubeEdge_CloudHub_connected_nodes`, `cloudhub_connection_tasks`,
    /// `cloudhub_messages_{sent,acked,retried,received}_total` and
    /// `cloudhub_backlog{,_peak}_bytes` over all nodes (with per-node metrics on, also
    /// `cloudhub_node_messages_{sent,acked,retried,received,dropped}_total` and
    /// `cloudhub_node_backlog{,_peak}_bytes` per node), `cloudhub_messages_dropped_total` per
    /// reason, `cloudhub_records_{written,failed}_total`,
    /// `cloudhub_messages_held_elsewhere_total`, `cloudhub_token_refused_connected_total`,
    /// `cloudhub_certserver_{unauthorized,request_timeouts,too_large,rate_limited}_total`,
    /// `cloudhub_revocation_writes_failed_total`, `cloudhub_revoked_certificates_refused_total`
    /// and `cloudhub_revoked_nodes`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "KubeEdge_CloudHub_connected_nodes",
            "Edge nodes with a session on this cloudhub.",
            self.connected_nodes.clone(),
        );
        registry.register(
            "cloudhub_connection_tasks",
            "Connection tasks running: one per upgraded WebSocket, until its socket closes.",
            self.connection_tasks.clone(),
        );
        registry.register_collector(Box::new(NodeMetrics {
            table: self.nodes.clone(),
            per_node: self.per_node,
        }));
        registry.register(
            "cloudhub_messages_dropped",
            "Messages dropped by the hub, by reason (all nodes, and messages that name no node).",
            self.drops.clone(),
        );
        for (name, help, counter) in [
            (
                "cloudhub_records_written",
                "ObjectSync records written on acknowledgement.",
                &self.records_written,
            ),
            (
                "cloudhub_records_failed",
                "ObjectSync writes that failed.",
                &self.records_failed,
            ),
            (
                "cloudhub_messages_held_elsewhere",
                "Messages for nodes another replica holds, left to that replica.",
                &self.held_elsewhere,
            ),
            (
                "cloudhub_token_refused_connected",
                "Bootstrap-token certificate requests refused because the node was connected.",
                &self.token_refused_connected,
            ),
            (
                "cloudhub_certserver_unauthorized",
                "Certificate-server requests refused from their head alone (401/403), body unread.",
                &self.cert_unauthorized,
            ),
            (
                "cloudhub_certserver_request_timeouts",
                "Certificate-server requests whose body did not arrive within https.requestTimeoutSeconds (408).",
                &self.cert_request_timeouts,
            ),
            (
                "cloudhub_certserver_too_large",
                "Certificate-server requests refused for their body size (413).",
                &self.cert_too_large,
            ),
            (
                "cloudhub_certserver_rate_limited",
                "/node/{name} checks refused by their source address's rate limit (429).",
                &self.cert_rate_limited,
            ),
            (
                "cloudhub_revocation_writes_failed",
                "Writes of kubeedge/revokedcerts or kubeedge/edgenodes that failed (retried at the next resync).",
                &self.revocation_writes_failed,
            ),
        ] {
            registry.register(name, help, counter.clone());
        }
        registry.register_collector(Box::new(RevocationMetrics(self.revocations.clone())));
    }
}

/// Every node's counters, read at each scrape: summed over all nodes always, and per node
/// when enabled. Per-node drops get a series only for reasons that happened: ten zero series
/// per node would dwarf the rest.
#[derive(Debug)]
struct NodeMetrics {
    table: Arc<NodeTable>,
    per_node: bool,
}

/// One counter of [`NODE_SERIES`]: the sum's family name, the per-node family's, their type,
/// help and value.
type NodeSeries = (
    &'static str,
    &'static str,
    MetricType,
    &'static str,
    fn(&NodeStats) -> u64,
);

/// The counters both the sums and the per-node families carry.
const NODE_SERIES: [NodeSeries; 6] = [
    (
        "cloudhub_messages_sent",
        "cloudhub_node_messages_sent",
        MetricType::Counter,
        "Messages written to the node.",
        |s| s.sent,
    ),
    (
        "cloudhub_messages_acked",
        "cloudhub_node_messages_acked",
        MetricType::Counter,
        "Messages the node acknowledged.",
        |s| s.acked,
    ),
    (
        "cloudhub_messages_retried",
        "cloudhub_node_messages_retried",
        MetricType::Counter,
        "Re-sends of unacknowledged messages.",
        |s| s.retried,
    ),
    (
        "cloudhub_messages_received",
        "cloudhub_node_messages_received",
        MetricType::Counter,
        "Messages received from the node.",
        |s| s.received,
    ),
    (
        "cloudhub_backlog_bytes",
        "cloudhub_node_backlog_bytes",
        MetricType::Gauge,
        "Bytes queued toward the node and not yet written (replies included).",
        |s| s.backlog,
    ),
    (
        "cloudhub_backlog_peak_bytes",
        "cloudhub_node_backlog_peak_bytes",
        MetricType::Gauge,
        "Highest backlog of any one connection of the node.",
        |s| s.backlog_peak,
    ),
];

fn encode_value(
    kind: MetricType,
    value: u64,
    series: prometheus_client::encoding::MetricEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    match kind {
        MetricType::Counter => ConstCounter::new(value).encode(series),
        _ => ConstGauge::new(value as i64).encode(series),
    }
}

impl Collector for NodeMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let nodes: Vec<(String, NodeStats)> = self
            .table
            .all()
            .into_iter()
            .map(|(node, c)| (node, c.snapshot()))
            .collect();
        let sums = self.table.sums(&nodes);
        for (name, _, kind, help, value) in NODE_SERIES {
            let help = help.replace("the node", "edge nodes");
            let family = encoder.encode_descriptor(name, &help, None, kind)?;
            encode_value(kind, value(&sums), family)?;
        }
        if !self.per_node {
            return Ok(());
        }
        for (_, name, kind, help, value) in NODE_SERIES {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (node, stats) in &nodes {
                let labels = [("node", node.as_str())];
                encode_value(kind, value(stats), family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "cloudhub_node_messages_dropped",
            "Messages dropped for the node, by reason (stale and stale_node_delete lose nothing; queue_full and offline keep an ObjectSync record for the sync loop).",
            None,
            MetricType::Counter,
        )?;
        for (node, stats) in &nodes {
            for (reason, n) in stats.drops.iter().filter(|(_, n)| *n > 0) {
                let labels = [("node", node.as_str()), ("reason", reason.as_str())];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The revocation table's own counts, read at each scrape.
#[derive(Debug)]
struct RevocationMetrics(pki::Revocations);

impl Collector for RevocationMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let refused = ConstCounter::new(self.0.refused());
        refused.encode(encoder.encode_descriptor(
            "cloudhub_revoked_certificates_refused",
            "Handshakes and renewals refused because the certificate is revoked.",
            None,
            refused.metric_type(),
        )?)?;
        let nodes = ConstGauge::new(self.0.len() as i64);
        nodes.encode(encoder.encode_descriptor(
            "cloudhub_revoked_nodes",
            "Deleted nodes whose earlier certificates are revoked.",
            None,
            nodes.metric_type(),
        )?)?;
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exposed(metrics: &HubMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn every_metric_is_exposed_under_its_name_and_reads_back_in_the_snapshots() {
        let revocations = pki::Revocations::new();
        revocations.revoke("gone", 1);
        let m = HubMetrics::new(revocations, true);
        let node = m.nodes.get_or_create(&Arc::from("edge-1"));
        NodeCounters::add(&node.sent, 3);
        NodeCounters::add(&node.acked, 2);
        NodeCounters::add(&node.backlog, 100);
        m.count_drop(Some(&node), DropReason::Stale, 4);
        m.count_drop(None, DropReason::Malformed, 1);
        m.connected_nodes.set(1);
        m.records_written.inc();
        m.cert_rate_limited.inc();
        let text = exposed(&m);
        for line in [
            "KubeEdge_CloudHub_connected_nodes 1",
            "cloudhub_connection_tasks 0",
            "cloudhub_node_messages_sent_total{node=\"edge-1\"} 3",
            "cloudhub_node_messages_acked_total{node=\"edge-1\"} 2",
            "cloudhub_node_messages_retried_total{node=\"edge-1\"} 0",
            "cloudhub_node_messages_received_total{node=\"edge-1\"} 0",
            "cloudhub_node_backlog_bytes{node=\"edge-1\"} 100",
            "cloudhub_node_backlog_peak_bytes{node=\"edge-1\"} 0",
            "cloudhub_node_messages_dropped_total{node=\"edge-1\",reason=\"stale\"} 4",
            "cloudhub_messages_sent_total 3",
            "cloudhub_messages_acked_total 2",
            "cloudhub_backlog_bytes 100",
            "cloudhub_messages_dropped_total{reason=\"stale\"} 4",
            "cloudhub_messages_dropped_total{reason=\"malformed\"} 1",
            "cloudhub_messages_dropped_total{reason=\"unroutable\"} 0",
            "cloudhub_records_written_total 1",
            "cloudhub_records_failed_total 0",
            "cloudhub_messages_held_elsewhere_total 0",
            "cloudhub_token_refused_connected_total 0",
            "cloudhub_certserver_unauthorized_total 0",
            "cloudhub_certserver_request_timeouts_total 0",
            "cloudhub_certserver_too_large_total 0",
            "cloudhub_certserver_rate_limited_total 1",
            "cloudhub_revoked_certificates_refused_total 0",
            "cloudhub_revoked_nodes 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        assert!(
            !text.contains("node=\"edge-1\",reason=\"queue_full\""),
            "a node gets series only for reasons that happened"
        );
        let s = node.snapshot();
        assert_eq!((s.sent, s.acked, s.dropped, s.backlog), (3, 2, 4, 100));
        assert_eq!(s.drops.get(DropReason::Stale), 4);
        let h = m.stats();
        assert_eq!(
            (h.connected_nodes, h.records_written, h.revoked_nodes),
            (1, 1, 1)
        );
        assert_eq!(h.drops.total(), 5);
        assert_eq!(m.cert_server_stats().rate_limited, 1);
    }

    #[test]
    fn a_forgotten_node_leaves_the_exposition_but_not_the_sums() {
        let m = HubMetrics::new(pki::Revocations::new(), true);
        let node = m.nodes.get_or_create(&Arc::from("edge-1"));
        NodeCounters::add(&node.sent, 5);
        m.count_drop(Some(&node), DropReason::Offline, 1);
        assert!(exposed(&m).contains("node=\"edge-1\""));
        m.nodes.forget("edge-1");
        let text = exposed(&m);
        assert!(!text.contains("edge-1"), "{text}");
        assert!(text.contains("cloudhub_messages_dropped_total{reason=\"offline\"} 1"));
        assert!(
            text.lines().any(|l| l == "cloudhub_messages_sent_total 5"),
            "a counter never goes down when a node is forgotten:\n{text}"
        );
    }

    #[test]
    fn without_per_node_metrics_no_series_names_a_node_and_the_sums_stay() {
        let m = HubMetrics::new(pki::Revocations::new(), false);
        for (name, sent, backlog_peak) in [("edge-1", 3, 10), ("edge-2", 4, 30)] {
            let node = m.nodes.get_or_create(&Arc::from(name));
            NodeCounters::add(&node.sent, sent);
            NodeCounters::add(&node.received, 1);
            node.backlog_peak.fetch_max(backlog_peak, Ordering::Relaxed);
            m.count_drop(Some(&node), DropReason::Stale, 1);
        }
        let text = exposed(&m);
        assert!(!text.contains("node="), "{text}");
        assert!(!text.contains("cloudhub_node_"), "{text}");
        for line in [
            "cloudhub_messages_sent_total 7",
            "cloudhub_messages_received_total 2",
            "cloudhub_backlog_peak_bytes 30",
            "cloudhub_messages_dropped_total{reason=\"stale\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
    }
}
