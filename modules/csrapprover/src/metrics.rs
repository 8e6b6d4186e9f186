//! The approver's counters (prometheus-client types).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::rules::Refusal;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Requests approved, left pending (by reason) and approvals that failed. Cheap to clone;
/// clones share the values.
#[derive(Debug, Clone, Default)]
pub struct CsrApproverMetrics {
    pub(crate) approved: Counter,
    left_pending: Family<ReasonLabels, Counter>,
    pub(crate) errors: Counter,
}

impl CsrApproverMetrics {
    /// Counters at zero, every reason's series present.
    pub fn new() -> Self {
        let m = CsrApproverMetrics::default();
        for reason in Refusal::REASONS {
            drop(m.left_pending.get_or_create(&ReasonLabels { reason }));
        }
        m
    }

    pub(crate) fn left(&self, refusal: &Refusal) {
        self.left_pending
            .get_or_create(&ReasonLabels {
                reason: refusal.reason(),
            })
            .inc();
    }

    /// Registers `csrapprover_approved_total`, `csrapprover_left_pending_total{reason}` and
    /// `csrapprover_errors_total`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("csrapprover");
        r.register(
            "approved",
            "Kubelet-serving certificate requests of edge nodes approved",
            self.approved.clone(),
        );
        r.register(
            "left_pending",
            "Certificate requests seen and not approved, by reason",
            self.left_pending.clone(),
        );
        r.register(
            "errors",
            "Approvals that failed on an API error and were tried again",
            self.errors.clone(),
        );
    }

    /// Requests approved so far.
    pub fn approved(&self) -> u64 {
        self.approved.get()
    }

    /// Approvals that failed so far.
    pub fn errors(&self) -> u64 {
        self.errors.get()
    }

    /// Requests left pending for `reason` (a [`Refusal::reason`] label) so far.
    pub fn left_pending(&self, reason: &'static str) -> u64 {
        self.left_pending
            .get(&ReasonLabels { reason })
            .map_or(0, |c| c.get())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn every_reason_is_exposed_from_the_start() {
        let m = CsrApproverMetrics::new();
        m.left(&Refusal::NoAddress);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for line in [
            "csrapprover_approved_total 0",
            "csrapprover_left_pending_total{reason=\"requester\"} 0",
            "csrapprover_left_pending_total{reason=\"no_address\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
        assert_eq!(m.left_pending("no_address"), 1);
    }
}
