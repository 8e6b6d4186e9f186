//! The edgecontroller's metrics (prometheus-client types): per upstream queue, downstream
//! sends and refusals.

use std::sync::Arc;

use kubeedge_api::metrics::QueueMetrics;
use kubeedge_api::queue::{QueueSnapshot, QueueStats};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::config::EdgeControllerConfig;
use crate::request_kind::Kind;

#[derive(Debug, Default)]
pub(crate) struct Inner {
    /// One per entry of [`Kind::ALL`], in that order, counting into `queue_families`.
    pub(crate) queues: Vec<Arc<QueueStats>>,
    queue_families: QueueMetrics,
    downstream_sent: Counter,
    downstream_failed: Counter,
    ignored: Counter,
    pod_status_lists_refused: Counter,
    /// Requests refused by node authorization, one counter per entry of [`Kind::ALL`].
    denied: [Counter; Kind::ALL.len()],
}

/// The edgecontroller's metrics; cheap to clone (clones share the values), readable from
/// any thread. [`Self::register`] exposes them; [`Self::snapshot`] reads them back.
#[derive(Debug, Clone, Default)]
pub struct EdgeControllerMetrics(pub(crate) Arc<Inner>);

impl EdgeControllerMetrics {
    /// Metrics with one queue per request kind, sized from `config`.
    pub(crate) fn for_config(config: &EdgeControllerConfig) -> Self {
        let queue_families = QueueMetrics::default();
        let queues = Kind::ALL
            .iter()
            .map(|k| {
                let (capacity, workers) = k.sizes(config);
                Arc::new(
                    QueueStats::new(k.name(), capacity, workers)
                        .with_node_share(config.node_share(capacity))
                        .counted_in(&queue_families),
                )
            })
            .collect();
        EdgeControllerMetrics(Arc::new(Inner {
            queues,
            queue_families,
            ..Inner::default()
        }))
    }

    /// Registers `edgecontroller_queue_depth`, `edgecontroller_requests_{handled,failed,rejected}_total`
    /// (labelled by kind, and reason for refusals), `edgecontroller_downstream_sent_total` and
    /// `edgecontroller_pod_status_lists_refused_total`. Node-authorization refusals are read
    /// through [`Self::snapshot`] (the composition exposes every module's in one family).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("edgecontroller");
        self.0.queue_families.register(r);
        r.register(
            "downstream_sent",
            "Messages sent toward edges",
            self.0.downstream_sent.clone(),
        );
        r.register(
            "pod_status_lists_refused",
            "Legacy podstatus lists refused whole (413) for holding more statuses than the node can run pods",
            self.0.pod_status_lists_refused.clone(),
        );
    }

    /// A point-in-time copy of every value.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            queues: self.0.queues.iter().map(|q| q.snapshot()).collect(),
            downstream_sent: self.0.downstream_sent.get(),
            downstream_failed: self.0.downstream_failed.get(),
            ignored: self.0.ignored.get(),
            pod_status_lists_refused: self.0.pod_status_lists_refused.get(),
            denied: Kind::ALL
                .iter()
                .zip(&self.0.denied)
                .map(|(k, c)| (k.name(), c.get()))
                .collect(),
        }
    }

    pub(crate) fn denied(&self, kind: Kind) {
        if let Some(i) = Kind::ALL.iter().position(|k| *k == kind) {
            self.0.denied[i].inc();
        }
    }

    pub(crate) fn pod_status_list_refused(&self) {
        self.0.pod_status_lists_refused.inc();
    }

    pub(crate) fn ignored(&self) {
        self.0.ignored.inc();
    }

    pub(crate) fn sent(&self, ok: bool) {
        let c = if ok {
            &self.0.downstream_sent
        } else {
            &self.0.downstream_failed
        };
        c.inc();
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

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn registered_names_are_todays_with_one_type_line_each() {
        let m = EdgeControllerMetrics::for_config(&EdgeControllerConfig::default());
        m.sent(true);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for line in [
            "# TYPE edgecontroller_downstream_sent counter",
            "edgecontroller_downstream_sent_total 1",
            "edgecontroller_pod_status_lists_refused_total 0",
            "# TYPE edgecontroller_queue_depth gauge",
            "edgecontroller_queue_depth{kind=\"patchNode\"} 0",
            "edgecontroller_requests_rejected_total{kind=\"connection\",reason=\"node_share\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
        assert_eq!(m.snapshot().downstream_sent, 1);
    }
}
