//! The controller's counters (prometheus-client types).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

/// Reconciles by result and messages sent by operation. Cheap to clone; clones share.
#[derive(Debug, Clone, Default)]
pub struct PolicyControllerMetrics {
    reconciles: Family<ResultLabels, Counter>,
    sent: Family<OperationLabels, Counter>,
}

impl PolicyControllerMetrics {
    /// Every series at zero.
    pub fn new() -> Self {
        let m = PolicyControllerMetrics::default();
        for result in ["ok", "error"] {
            drop(m.reconciles.get_or_create(&ResultLabels { result }));
        }
        for operation in ["insert", "update", "delete"] {
            drop(m.sent.get_or_create(&OperationLabels { operation }));
        }
        m
    }

    pub(crate) fn reconciled(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    pub(crate) fn sent(&self, operation: &'static str) {
        self.sent
            .get_or_create(&OperationLabels { operation })
            .inc();
    }

    /// Messages of `operation` (`insert`, `update`, `delete`) sent to edges so far.
    pub fn sent_total(&self, operation: &'static str) -> u64 {
        self.sent
            .get(&OperationLabels { operation })
            .map_or(0, |c| c.get())
    }

    /// Registers `policycontroller_reconciles_total{result}` and
    /// `policycontroller_sent_total{operation}`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("policycontroller");
        r.register(
            "reconciles",
            "ServiceAccountAccess reconciles, by result",
            self.reconciles.clone(),
        );
        r.register(
            "sent",
            "ServiceAccountAccess messages sent to edge nodes, by operation",
            self.sent.clone(),
        );
    }
}
