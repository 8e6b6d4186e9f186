//! The module's metrics (prometheus-client types): requests answered and watch events by
//! outcome, and gauges of listeners and caches read when scraped.

use std::sync::{Arc, OnceLock};

use kubeedge_api::metrics::{encode_one, gauge};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use kubeedge_api::application::verb;

use crate::delivered::Delivered;
use crate::informer::Informers;
use crate::listeners::Registry as ListenerRegistry;

/// Verbs counted by name; anything else an edge sends is counted as `unknown`.
const VERBS: [&str; 9] = [
    verb::GET,
    verb::LIST,
    verb::WATCH,
    verb::CREATE,
    verb::UPDATE,
    verb::UPDATE_STATUS,
    verb::PATCH,
    verb::DELETE,
    "watchsync",
];

/// A request's verb as a metric label (bounded set).
pub(crate) fn verb_label(v: &str) -> &'static str {
    VERBS
        .iter()
        .find(|k| **k == v)
        .copied()
        .unwrap_or("unknown")
}

/// The labels of an answered request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    requests: Family<RequestLabels, Counter>,
    events_sent: Counter,
    events_failed: Counter,
    /// Objects delivered beyond the bound of the node's delivery record.
    untracked: Counter,
    /// Deletes sent for objects an edge missed while it or cloudcore was away.
    missed_deletes: Counter,
    /// Requests refused by authorization (`403`), by verb.
    denied: Family<DeniedLabels, Counter>,
    /// Discovery requests served from the shared cache or a fetch another request started.
    passthrough_hits: Counter,
    /// Discovery requests that fetched from the API server.
    passthrough_misses: Counter,
    /// Bytes of discovery answers kept.
    passthrough_bytes: Gauge,
    pub(crate) registry: OnceLock<Arc<ListenerRegistry>>,
    pub(crate) informers: OnceLock<Arc<Informers>>,
    pub(crate) delivered: OnceLock<Arc<Delivered>>,
    /// Reads (review answers, discovery entries) when scraped; `None` once the module is gone.
    /// A reader rather than the module's state, so this file depends on no other of the module.
    pub(crate) caches: OnceLock<CacheSizes>,
}

/// Reads the sizes of the answer and discovery caches.
pub(crate) struct CacheSizes(pub(crate) Box<dyn Fn() -> Option<(usize, usize)> + Send + Sync>);

impl std::fmt::Debug for CacheSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheSizes")
    }
}

/// The label of a refusal.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct DeniedLabels {
    verb: &'static str,
}

/// The module's metrics; cheap to clone (clones share the values). [`Self::register`]
/// exposes them; [`Self::snapshot`] reads them back.
#[derive(Debug, Clone, Default)]
pub struct DynamicControllerMetrics(pub(crate) Arc<Inner>);

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Requests answered, by (verb, outcome); outcome is `approved` or `rejected`. Watch
    /// syncs count as verb `watchsync`.
    pub requests: Vec<(String, String, u64)>,
    /// Watch listeners registered, all nodes.
    pub listeners: usize,
    /// Nodes holding at least one listener.
    pub listener_nodes: usize,
    /// Resource types cached for edge watches.
    pub informers: usize,
    /// Watch events handed to cloudhub.
    pub events_sent: u64,
    /// Watch events cloudhub did not take (module missing or stopped).
    pub events_failed: u64,
    /// Bytes the listeners cost, as counted against `maxListenerBytes`.
    pub listener_bytes: usize,
    /// SubjectAccessReview answers remembered.
    pub review_cache_entries: usize,
    /// Group/versions whose discovery is remembered.
    pub discovery_entries: usize,
    /// Requests refused by authorization (`403`), by verb: the module's share of
    /// `cloudcore_node_authorization_denied_total`.
    pub denied: Vec<(&'static str, u64)>,
    /// Objects recorded as delivered by watches, all nodes.
    pub delivered_objects: usize,
    /// Bytes of those records, as counted against `maxDeliveredBytes`.
    pub delivered_bytes: usize,
    /// Objects delivered beyond `maxDeliveredBytesPerNode` or `maxDeliveredBytes`, unrecorded.
    pub delivered_untracked: u64,
    /// Deletes sent for objects an edge missed while it or cloudcore was away.
    pub missed_deletes: u64,
    /// Discovery requests answered without an API request of their own (a kept answer, or
    /// the fetch another request started).
    pub passthrough_hits: u64,
    /// Discovery requests that fetched their answer from the API server.
    pub passthrough_misses: u64,
    /// Bytes of discovery answers kept, as counted against `maxPassThroughCacheBytes`.
    pub passthrough_bytes: u64,
}

impl DynamicControllerMetrics {
    pub(crate) fn answered(&self, verb: &str, approved: bool) {
        let outcome = if approved { "approved" } else { "rejected" };
        let labels = RequestLabels {
            verb: verb_label(verb),
            outcome,
        };
        self.0.requests.get_or_create(&labels).inc();
    }

    /// One request of `verb` refused by authorization.
    pub(crate) fn denied(&self, verb: &str) {
        let labels = DeniedLabels {
            verb: verb_label(verb),
        };
        self.0.denied.get_or_create(&labels).inc();
    }

    /// (listener bytes, review answers, discovery entries) now.
    fn cache_sizes(&self) -> (usize, usize, usize) {
        let bytes = self.0.registry.get().map_or(0, |r| r.bytes());
        match self.0.caches.get().and_then(|read| (read.0)()) {
            Some((answers, discovery)) => (bytes, answers, discovery),
            None => (bytes, 0, 0),
        }
    }

    /// One object delivered beyond the bound of its node's delivery record.
    pub(crate) fn untracked(&self) {
        self.0.untracked.inc();
    }

    /// One discovery request served: `hit` when it made no API request of its own.
    pub(crate) fn passthrough(&self, hit: bool) {
        let c = if hit {
            &self.0.passthrough_hits
        } else {
            &self.0.passthrough_misses
        };
        c.inc();
    }

    /// The bytes of discovery answers kept now.
    pub(crate) fn passthrough_bytes(&self, bytes: usize) {
        self.0
            .passthrough_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// One delete sent for an object the edge missed while away.
    pub(crate) fn missed_delete(&self) {
        self.0.missed_deletes.inc();
    }

    /// (objects, bytes) of the delivery records now.
    fn delivered_sizes(&self) -> (usize, usize) {
        self.0.delivered.get().map_or((0, 0), |d| d.sizes())
    }

    pub(crate) fn event(&self, sent: bool) {
        let c = if sent {
            &self.0.events_sent
        } else {
            &self.0.events_failed
        };
        c.inc();
    }

    /// (listeners, nodes holding one, informers) now.
    fn sizes(&self) -> (usize, usize, usize) {
        let (listeners, listener_nodes) = self
            .0
            .registry
            .get()
            .map_or((0, 0), |r| (r.len(), r.nodes().len()));
        let informers = self.0.informers.get().map_or(0, |i| i.count());
        (listeners, listener_nodes, informers)
    }

    /// Registers `dynamiccontroller_requests_total` (by verb and outcome),
    /// `dynamiccontroller_events_{sent,failed}_total`,
    /// `dynamiccontroller_{delivered_untracked,missed_deletes}_total`,
    /// `dynamiccontroller_passthrough_cache_{hits,misses}_total`, the gauge
    /// `dynamiccontroller_passthrough_cache_bytes`, and the gauges
    /// `dynamiccontroller_{listeners,listener_nodes,informers,delivered_objects,delivered_bytes}`
    /// (read when scraped).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("dynamiccontroller");
        r.register(
            "requests",
            "metaServer requests answered, by verb and outcome (approved, rejected)",
            self.0.requests.clone(),
        );
        r.register(
            "events_sent",
            "Watch events handed to cloudhub",
            self.0.events_sent.clone(),
        );
        r.register(
            "events_failed",
            "Watch events cloudhub did not take",
            self.0.events_failed.clone(),
        );
        r.register(
            "delivered_untracked",
            "Objects delivered by watches beyond maxDeliveredBytesPerNode or maxDeliveredBytes, so not recorded",
            self.0.untracked.clone(),
        );
        r.register(
            "missed_deletes",
            "Deletes sent on reconnect or restore for objects an edge missed while it or cloudcore was away",
            self.0.missed_deletes.clone(),
        );
        r.register(
            "passthrough_cache_hits",
            "Discovery requests (/api, /apis, /openapi/v2, ...) answered from the shared cache or from a fetch another request started",
            self.0.passthrough_hits.clone(),
        );
        r.register(
            "passthrough_cache_misses",
            "Discovery requests that fetched their answer from the API server",
            self.0.passthrough_misses.clone(),
        );
        r.register(
            "passthrough_cache_bytes",
            "Bytes of discovery answers kept, as counted against maxPassThroughCacheBytes",
            self.0.passthrough_bytes.clone(),
        );
        registry.register_collector(Box::new(Sizes(self.clone())));
    }

    /// The counters now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut requests: Vec<(String, String, u64)> = VERBS
            .iter()
            .chain(&["unknown"])
            .flat_map(|verb| ["approved", "rejected"].map(|outcome| (*verb, outcome)))
            .filter_map(|(verb, outcome)| {
                let n = self.0.requests.get(&RequestLabels { verb, outcome })?.get();
                Some((verb.to_owned(), outcome.to_owned(), n))
            })
            .collect();
        requests.sort();
        let (listeners, listener_nodes, informers) = self.sizes();
        let (listener_bytes, review_cache_entries, discovery_entries) = self.cache_sizes();
        let denied = VERBS
            .iter()
            .chain(&["unknown"])
            .filter_map(|verb| {
                let n = self.0.denied.get(&DeniedLabels { verb })?.get();
                Some((*verb, n))
            })
            .collect();
        let (delivered_objects, delivered_bytes) = self.delivered_sizes();
        MetricsSnapshot {
            delivered_objects,
            delivered_bytes,
            delivered_untracked: self.0.untracked.get(),
            missed_deletes: self.0.missed_deletes.get(),
            passthrough_hits: self.0.passthrough_hits.get(),
            passthrough_misses: self.0.passthrough_misses.get(),
            passthrough_bytes: u64::try_from(self.0.passthrough_bytes.get()).unwrap_or(0),
            listener_bytes,
            review_cache_entries,
            discovery_entries,
            denied,
            requests,
            listeners,
            listener_nodes,
            informers,
            events_sent: self.0.events_sent.get(),
            events_failed: self.0.events_failed.get(),
        }
    }
}

/// The listener and cache gauges, read from the registry and informers at scrape time.
#[derive(Debug)]
struct Sizes(DynamicControllerMetrics);

impl Collector for Sizes {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let (listeners, nodes, informers) = self.0.sizes();
        let (bytes, reviews, discovery) = self.0.cache_sizes();
        let (delivered, delivered_bytes) = self.0.delivered_sizes();
        for (name, help, v) in [
            (
                "dynamiccontroller_delivered_objects",
                "Objects recorded as delivered to edges by their watches.",
                delivered,
            ),
            (
                "dynamiccontroller_delivered_bytes",
                "Bytes of the records of what watches delivered, as counted against maxDeliveredBytes.",
                delivered_bytes,
            ),
            (
                "dynamiccontroller_listener_bytes",
                "Bytes edge watch listeners cost, as counted against maxListenerBytes.",
                bytes,
            ),
            (
                "dynamiccontroller_review_cache_entries",
                "SubjectAccessReview answers remembered for edge nodes.",
                reviews,
            ),
            (
                "dynamiccontroller_discovery_entries",
                "API group/versions whose discovery is remembered.",
                discovery,
            ),
            (
                "dynamiccontroller_listeners",
                "Edge watch listeners registered.",
                listeners,
            ),
            (
                "dynamiccontroller_listener_nodes",
                "Nodes holding at least one watch listener.",
                nodes,
            ),
            (
                "dynamiccontroller_informers",
                "Resource types cached for edge watches (one API server watch each).",
                informers,
            ),
        ] {
            encode_one(&mut encoder, name, help, gauge(v as u64))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn requests_count_by_verb_and_outcome_under_todays_names() {
        let m = DynamicControllerMetrics::default();
        m.answered(verb::LIST, true);
        m.answered("frobnicate", false);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        for line in [
            "# TYPE dynamiccontroller_requests counter",
            "dynamiccontroller_requests_total{verb=\"list\",outcome=\"approved\"} 1",
            "dynamiccontroller_requests_total{verb=\"unknown\",outcome=\"rejected\"} 1",
            "dynamiccontroller_events_sent_total 0",
            "# TYPE dynamiccontroller_listeners gauge",
            "dynamiccontroller_informers 0",
            "dynamiccontroller_passthrough_cache_hits_total 0",
            "# TYPE dynamiccontroller_passthrough_cache_bytes gauge",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing:\n{out}");
        }
        let requests = m.snapshot().requests;
        assert_eq!(
            requests,
            [
                ("list".to_owned(), "approved".to_owned(), 1),
                ("unknown".to_owned(), "rejected".to_owned(), 1)
            ]
        );
    }
}
