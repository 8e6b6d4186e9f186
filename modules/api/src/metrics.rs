//! Prometheus metrics the controllers and servers share (prometheus-client types): the
//! families of a controller's request queues, the edge-facing listeners' admission metrics,
//! and [`encode_family`] for collectors that render a read API at scrape time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::listener::ListenerStats;

/// The label of one request queue's series: its kind (the `buffer.*` key name, e.g.
/// `patchNode`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The queue's kind.
    pub kind: &'static str,
}

/// The labels of a refusal at enqueueing: the queue's kind and why (`queue_full`: the queue
/// was full; `node_share`: the request's node already held its share of the queue).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    /// The queue's kind.
    pub kind: &'static str,
    /// `queue_full` or `node_share`.
    pub reason: &'static str,
}

/// The families of one controller's upstream request queues. Cheap to clone; clones share
/// the series. A [`crate::queue::QueueStats`] counts into them once built with
/// [`crate::queue::QueueStats::counted_in`].
#[derive(Debug, Clone, Default)]
pub struct QueueMetrics {
    pub(crate) depth: Family<KindLabels, Gauge>,
    pub(crate) handled: Family<KindLabels, Counter>,
    pub(crate) failed: Family<KindLabels, Counter>,
    pub(crate) rejected: Family<RejectLabels, Counter>,
}

impl QueueMetrics {
    /// Registers `queue_depth` (gauge), `requests_handled`, `requests_failed` and
    /// `requests_rejected` (counters, exposed with `_total`); the caller gives the registry
    /// its module prefix (`registry.sub_registry_with_prefix("edgecontroller")`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "queue_depth",
            "Upstream requests waiting, by kind",
            self.depth.clone(),
        );
        registry.register(
            "requests_handled",
            "Upstream requests handled, by kind",
            self.handled.clone(),
        );
        registry.register(
            "requests_failed",
            "Upstream requests that failed, by kind",
            self.failed.clone(),
        );
        registry.register(
            "requests_rejected",
            "Upstream requests refused at enqueueing, by kind and reason (queue_full, node_share)",
            self.rejected.clone(),
        );
    }
}

/// Writes one metric family from values read at scrape time: `name` (without `_total` for a
/// counter), its help, and one sample per `(labels, metric)`.
pub fn encode_family<S, M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (S, M)>,
) -> Result<(), std::fmt::Error>
where
    S: EncodeLabelSet,
    M: EncodeMetric + TypedConst,
{
    let mut family = encoder.encode_descriptor(name, help, None, M::TYPE)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes one unlabelled metric read at scrape time (`name` without `_total` for a counter).
pub fn encode_one<M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: M,
) -> Result<(), std::fmt::Error>
where
    M: EncodeMetric + TypedConst,
{
    metric.encode(encoder.encode_descriptor(name, help, None, M::TYPE)?)
}

/// A value type [`encode_family`] writes, with its metric type known before any sample.
pub trait TypedConst {
    /// The metric type of the family.
    const TYPE: MetricType;
}

impl TypedConst for ConstCounter<u64> {
    const TYPE: MetricType = MetricType::Counter;
}

impl TypedConst for ConstGauge<i64> {
    const TYPE: MetricType = MetricType::Gauge;
}

/// A counter sample for [`encode_family`].
pub fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

/// A gauge sample for [`encode_family`] (saturating at `i64::MAX`).
pub fn gauge(v: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

/// Reads the admission stats of some listeners (one module's servers).
pub type ListenerSource = Box<dyn Fn() -> Vec<ListenerStats> + Send + Sync>;

/// The edge-facing listeners' admission metrics (`cloudcore_listener_*`, labelled by
/// listener), read from every source's gates at scrape time: one family per name however
/// many modules run listeners.
pub struct ListenerMetrics {
    sources: Vec<ListenerSource>,
}

impl std::fmt::Debug for ListenerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerMetrics")
            .field("sources", &self.sources.len())
            .finish()
    }
}

/// A listener family: name, help, and the value it reads.
type Field = (&'static str, &'static str, fn(&ListenerStats) -> u64);

/// The label of a listener's series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

/// The labels of a refusal on accept.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    listener: &'static str,
    reason: &'static str,
}

impl ListenerMetrics {
    /// Metrics of the listeners `sources` read.
    pub fn new(sources: Vec<ListenerSource>) -> Self {
        ListenerMetrics { sources }
    }

    /// Registers the listener families (nothing when there are no sources).
    pub fn register(self, registry: &mut Registry) {
        if !self.sources.is_empty() {
            registry.register_collector(Box::new(self));
        }
    }
}

impl Collector for ListenerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats: Vec<ListenerStats> = self.sources.iter().flat_map(|read| read()).collect();
        let each = |f: fn(&ListenerStats) -> u64| {
            stats
                .iter()
                .map(move |s| {
                    let labels = ListenerLabels {
                        listener: s.listener,
                    };
                    (labels, f(s))
                })
                .collect::<Vec<_>>()
        };
        let gauges: [Field; 2] = [
            (
                "cloudcore_listener_connections",
                "Connections open now, authenticated or not.",
                |s| s.open,
            ),
            (
                "cloudcore_listener_handshakes_in_progress",
                "Connections not yet authenticated (TLS handshake or request head in progress).",
                |s| s.handshaking,
            ),
        ];
        for (name, help, value) in gauges {
            let samples = each(value).into_iter().map(|(l, v)| (l, gauge(v)));
            encode_family(&mut encoder, name, help, samples)?;
        }
        let counters: [Field; 2] = [
            (
                "cloudcore_listener_accepted",
                "Connections admitted.",
                |s| s.accepted,
            ),
            (
                "cloudcore_listener_preauth_timeouts",
                "Connections closed for not authenticating within preAuthTimeoutSeconds.",
                |s| s.timed_out,
            ),
        ];
        for (name, help, value) in counters {
            let samples = each(value).into_iter().map(|(l, v)| (l, counter(v)));
            encode_family(&mut encoder, name, help, samples)?;
        }
        let refused = stats.iter().flat_map(|s| {
            [
                ("connections", s.refused_connections),
                ("handshakes", s.refused_handshakes),
                ("per_ip", s.refused_per_ip),
                ("per_network", s.refused_per_network),
                ("files", s.refused_files),
            ]
            .map(|(reason, n)| {
                let labels = RefusedLabels {
                    listener: s.listener,
                    reason,
                };
                (labels, counter(n))
            })
        });
        encode_family(
            &mut encoder,
            "cloudcore_listener_refused",
            "Connections refused on accept, by listener and limit (connections: maxConnections, handshakes: maxHandshakes, per_ip: maxUnauthenticatedPerIP, per_network: maxUnauthenticatedPerNetwork, files: the process's open-file limit less a reserve).",
            refused,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use prometheus_client::encoding::text::encode;

    use super::*;
    use crate::lifecycle::Lifecycle;
    use crate::queue::{Limit, Queue, QueueStats};

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out
    }

    #[tokio::test]
    async fn a_queue_counts_into_the_families_its_controller_registers() {
        let metrics = QueueMetrics::default();
        let mut registry = Registry::default();
        metrics.register(registry.sub_registry_with_prefix("ctl"));
        let stats = Arc::new(QueueStats::new("patchNode", 4, 1).counted_in(&metrics));
        let life = Lifecycle::new();
        let q = Queue::start(
            stats.clone(),
            Limit::new(1),
            &life,
            Duration::from_secs(1),
            |_m| async { true },
            |_m| async {},
        );
        q.try_enqueue(beehive::Message::new()).unwrap();
        while stats.snapshot().handled == 0 {
            tokio::task::yield_now().await;
        }
        life.stop();
        assert!(life.join(Duration::from_secs(5)).await);
        let out = text(&registry);
        for line in [
            "# TYPE ctl_queue_depth gauge",
            "ctl_queue_depth{kind=\"patchNode\"} 0",
            "# TYPE ctl_requests_handled counter",
            "ctl_requests_handled_total{kind=\"patchNode\"} 1",
            "ctl_requests_failed_total{kind=\"patchNode\"} 0",
            "ctl_requests_rejected_total{kind=\"patchNode\",reason=\"queue_full\"} 0",
            "ctl_requests_rejected_total{kind=\"patchNode\",reason=\"node_share\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
        assert_eq!(
            stats.snapshot().handled,
            1,
            "the read API sees the same counter"
        );
    }

    #[test]
    fn listener_families_appear_once_for_all_sources() {
        let one = |listener| ListenerStats {
            listener,
            open: 2,
            refused_per_ip: 3,
            ..Default::default()
        };
        let mut registry = Registry::default();
        ListenerMetrics::new(vec![
            Box::new(move || vec![one("a")]),
            Box::new(move || vec![one("b")]),
        ])
        .register(&mut registry);
        let out = text(&registry);
        assert_eq!(
            out.matches("# TYPE cloudcore_listener_refused counter")
                .count(),
            1,
            "{out}"
        );
        for line in [
            "cloudcore_listener_connections{listener=\"a\"} 2",
            "cloudcore_listener_connections{listener=\"b\"} 2",
            "cloudcore_listener_refused_total{listener=\"b\",reason=\"per_ip\"} 3",
            "cloudcore_listener_accepted_total{listener=\"a\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
    }
}
