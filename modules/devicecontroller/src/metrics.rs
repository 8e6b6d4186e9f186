//! The devicecontroller's metrics (prometheus-client types): its three request queues and
//! the requests node authorization refused.

use std::sync::Arc;

use kubeedge_api::metrics::QueueMetrics;
use kubeedge_api::queue::{
    DEFAULT_NODE_SHARE_DIVISOR, DEFAULT_NODE_SHARE_MIN, QueueSnapshot, QueueStats, node_share,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::config::{DeviceControllerConfig, at_least_one};
use crate::request_kind::{Kind, UNKNOWN_KIND};

/// Refusal counters, one per request kind and one for unknown shapes.
#[derive(Debug, Default)]
pub(crate) struct Denials([Counter; 4]);

impl Denials {
    fn index(kind: Option<Kind>) -> usize {
        match kind {
            Some(Kind::Twin) => 0,
            Some(Kind::State) => 1,
            Some(Kind::MembershipDetail) => 2,
            None => 3,
        }
    }

    /// Counts one refusal of `kind` (`None`: unknown shape).
    pub(crate) fn add(&self, kind: Option<Kind>) {
        self.0[Self::index(kind)].inc();
    }

    /// `(kind label, refusals)` for every kind, unknown shapes last.
    pub(crate) fn snapshot(&self) -> Vec<(&'static str, u64)> {
        Kind::ALL
            .iter()
            .map(|&k| Some(k))
            .chain([None])
            .map(|k| {
                (
                    k.map_or(UNKNOWN_KIND, Kind::metric_name),
                    self.0[Self::index(k)].get(),
                )
            })
            .collect()
    }
}

/// The devicecontroller's metrics; cheap to clone (clones share the values), readable from
/// any thread. [`Self::register`] exposes them; [`Self::snapshot`] reads them back.
#[derive(Debug, Clone)]
pub struct DeviceControllerMetrics {
    /// One queue per entry of [`Kind::ALL`], counting into `queue_families`.
    pub(crate) queues: Vec<(Kind, Arc<QueueStats>)>,
    queue_families: QueueMetrics,
    pub(crate) denials: Arc<Denials>,
}

impl DeviceControllerMetrics {
    /// Metrics with the three queues sized from `config`, each node allowed its share.
    pub(crate) fn for_config(config: &DeviceControllerConfig) -> Self {
        let workers = at_least_one(config.load.update_device_status_workers);
        let queue_families = QueueMetrics::default();
        let queues = Kind::ALL
            .iter()
            .map(|&k| {
                let capacity = match k {
                    Kind::Twin => config.buffer.update_device_twins,
                    Kind::State | Kind::MembershipDetail => config.buffer.update_device_states,
                };
                let capacity = at_least_one(capacity);
                // One node's reports cannot fill a queue every node shares.
                let share =
                    node_share(capacity, DEFAULT_NODE_SHARE_DIVISOR, DEFAULT_NODE_SHARE_MIN);
                let stats = QueueStats::new(k.name(), capacity, workers)
                    .with_node_share(share)
                    .counted_in(&queue_families);
                (k, Arc::new(stats))
            })
            .collect();
        DeviceControllerMetrics {
            queues,
            queue_families,
            denials: Arc::default(),
        }
    }

    /// Registers `devicecontroller_queue_depth` and
    /// `devicecontroller_requests_{handled,failed,rejected}_total`. Node-authorization
    /// refusals are read through [`Self::snapshot`] (the composition exposes every module's in
    /// one family).
    pub fn register(&self, registry: &mut Registry) {
        self.queue_families
            .register(registry.sub_registry_with_prefix("devicecontroller"));
    }

    /// A point-in-time copy of every value.
    pub fn snapshot(&self) -> DeviceControllerSnapshot {
        DeviceControllerSnapshot {
            queues: self.queues.iter().map(|(_, s)| s.snapshot()).collect(),
            denied: self.denials.snapshot(),
        }
    }
}

/// Counters of the devicecontroller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceControllerSnapshot {
    /// One entry per queue (`updateDeviceTwins`, `updateDeviceStatus`, `membershipDetail`).
    /// Each node may hold an eighth of a queue (at least 16 entries); what is refused is
    /// counted in `rejected` (queue full) or `rejected_over_share` (node over its share).
    pub queues: Vec<QueueSnapshot>,
    /// Edge requests refused by node authorization, as `(kind, count)` for every kind
    /// (`twinUpdate`, `deviceStateUpdate`, `membershipDetail`, and `unknown` for resources that
    /// are none of them), zeros included: the samples of
    /// `cloudcore_node_authorization_denied_total{module="devicecontroller",kind=…}`.
    pub denied: Vec<(&'static str, u64)>,
}

impl DeviceControllerSnapshot {
    /// Refusals of one kind (0 for a kind that does not exist).
    pub fn denied(&self, kind: &str) -> u64 {
        self.denied
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn queues_show_under_todays_names() {
        let m = DeviceControllerMetrics::for_config(&DeviceControllerConfig::default());
        m.denials.add(None);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for line in [
            "# TYPE devicecontroller_queue_depth gauge",
            "devicecontroller_requests_rejected_total{kind=\"updateDeviceStatus\",reason=\"queue_full\"} 0",
            "devicecontroller_requests_handled_total{kind=\"membershipDetail\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
        assert_eq!(m.snapshot().denied("unknown"), 1);
    }

    #[test]
    fn denials_are_counted_per_kind() {
        let d = Denials::default();
        d.add(Some(Kind::Twin));
        d.add(Some(Kind::Twin));
        d.add(None);
        assert_eq!(
            d.snapshot(),
            [
                ("twinUpdate", 2),
                ("deviceStateUpdate", 0),
                ("membershipDetail", 0),
                ("unknown", 1)
            ]
        );
    }
}
