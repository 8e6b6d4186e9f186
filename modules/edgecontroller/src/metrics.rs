//! Counters for metrics: per upstream queue, and for downstream sends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kubeedge_api::queue::{QueueSnapshot, QueueStats};

use crate::upstream::Kind;

#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) queues: Vec<Arc<QueueStats>>,
    pub(crate) downstream_sent: AtomicU64,
    pub(crate) downstream_failed: AtomicU64,
    pub(crate) ignored: AtomicU64,
    pub(crate) pod_status_lists_refused: AtomicU64,
    /// Requests refused by node authorization, one counter per entry of [`Kind::ALL`].
    pub(crate) denied: [AtomicU64; Kind::ALL.len()],
}

/// A handle on the edgecontroller's counters; cheap to clone, readable from any thread.
#[derive(Debug, Clone, Default)]
pub struct EdgeControllerMetrics(pub(crate) Arc<Inner>);

impl EdgeControllerMetrics {
    /// A point-in-time copy of every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            queues: self.0.queues.iter().map(|q| q.snapshot()).collect(),
            downstream_sent: self.0.downstream_sent.load(Ordering::Relaxed),
            downstream_failed: self.0.downstream_failed.load(Ordering::Relaxed),
            ignored: self.0.ignored.load(Ordering::Relaxed),
            pod_status_lists_refused: self.0.pod_status_lists_refused.load(Ordering::Relaxed),
            denied: Kind::ALL
                .iter()
                .zip(&self.0.denied)
                .map(|(k, c)| (k.name(), c.load(Ordering::Relaxed)))
                .collect(),
        }
    }

    pub(crate) fn denied(&self, kind: Kind) {
        if let Some(i) = Kind::ALL.iter().position(|k| *k == kind) {
            self.0.denied[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn pod_status_list_refused(&self) {
        self.0
            .pod_status_lists_refused
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sent(&self, ok: bool) {
        let c = if ok {
            &self.0.downstream_sent
        } else {
            &self.0.downstream_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counters of the edgecontroller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// One entry per upstream request kind. Refusals at enqueueing are split by reason:
    /// `rejected` (the queue was full) and `rejected_over_share` (the request's node already
    /// held its share of the queue).
    pub queues: Vec<QueueSnapshot>,
    /// Messages delivered to cloudhub/router (downstream pushes and responses).
    pub downstream_sent: u64,
    /// Messages that could not be delivered (module missing or stopped).
    pub downstream_failed: u64,
    /// Upstream messages dropped because their type or operation is not handled.
    pub ignored: u64,
    /// Legacy `podstatus` lists refused whole, before any API call, for holding more statuses
    /// than the node can run pods (answered `413`).
    pub pod_status_lists_refused: u64,
    /// Requests refused by node authorization, per request kind (the `buffer.*` key name,
    /// e.g. `patchPod`), every kind listed.
    pub denied: Vec<(&'static str, u64)>,
}

impl MetricsSnapshot {
    /// The entry of one queue, by the name of its `buffer.*` key (e.g. `patchNode`).
    pub fn queue(&self, kind: &str) -> Option<&QueueSnapshot> {
        self.queues.iter().find(|q| q.kind == kind)
    }
}
