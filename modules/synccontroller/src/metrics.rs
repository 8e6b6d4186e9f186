//! The synccontroller's metrics (prometheus-client counters).

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// Counters of the synccontroller.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) updates: Counter,
    pub(crate) deletes: Counter,
    pub(crate) records_deleted: Counter,
    pub(crate) superseded_dropped: Counter,
    pub(crate) passes: Counter,
}

/// A handle on the synccontroller's counters; cheap to clone (clones share the values).
/// [`Self::register`] exposes them; [`Self::snapshot`] reads them back.
#[derive(Debug, Clone)]
pub struct SyncControllerMetrics(pub(crate) Arc<Counters>);

impl SyncControllerMetrics {
    /// Registers `synccontroller_{updates_sent,deletes_sent,records_deleted,passes,superseded_dropped}_total`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("synccontroller");
        let c = &self.0;
        r.register(
            "updates_sent",
            "Newer objects re-sent to edges",
            c.updates.clone(),
        );
        r.register(
            "deletes_sent",
            "Deletes sent for gone objects",
            c.deletes.clone(),
        );
        r.register(
            "records_deleted",
            "ObjectSync records deleted",
            c.records_deleted.clone(),
        );
        r.register("passes", "Full reconcile passes", c.passes.clone());
        r.register(
            "superseded_dropped",
            "Records of a previous incarnation of their object (deleted and recreated under the same name) dropped without sending the edge anything",
            c.superseded_dropped.clone(),
        );
    }

    /// A point-in-time copy.
    pub fn snapshot(&self) -> SyncMetricsSnapshot {
        let c = &self.0;
        SyncMetricsSnapshot {
            updates_sent: c.updates.get(),
            deletes_sent: c.deletes.get(),
            records_deleted: c.records_deleted.get(),
            superseded_dropped: c.superseded_dropped.get(),
            passes: c.passes.get(),
        }
    }
}

/// Counters of the synccontroller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncMetricsSnapshot {
    /// Newer objects sent.
    pub updates_sent: u64,
    /// Deletes sent for gone or recreated objects.
    pub deletes_sent: u64,
    /// Records deleted (of deleted nodes, of previous incarnations, or unusable).
    pub records_deleted: u64,
    /// Records of a previous incarnation of their object (deleted and recreated under the
    /// same name) dropped without sending the edge anything: the node's own Node, and other
    /// kinds the edge deletes by name once the new incarnation is recorded for the node.
    pub superseded_dropped: u64,
    /// Full reconcile passes.
    pub passes: u64,
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn counters_show_under_todays_names() {
        let m = SyncControllerMetrics(Arc::default());
        m.0.passes.inc();
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for line in [
            "# TYPE synccontroller_passes counter",
            "synccontroller_passes_total 1",
            "synccontroller_superseded_dropped_total 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
        assert_eq!(m.snapshot().passes, 1);
    }
}
