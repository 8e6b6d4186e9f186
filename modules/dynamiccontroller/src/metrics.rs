//! Counters of the module, read by the composer for `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use kubeedge_api::application::verb;

use crate::informer::Informers;
use crate::listeners::Registry;

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

#[derive(Debug, Default)]
pub(crate) struct Inner {
    requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    events_sent: AtomicU64,
    events_failed: AtomicU64,
    pub(crate) registry: OnceLock<Arc<Registry>>,
    pub(crate) informers: OnceLock<Arc<Informers>>,
}

/// The module's counters. Cheap to clone.
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
}

impl DynamicControllerMetrics {
    pub(crate) fn answered(&self, verb: &str, approved: bool) {
        let outcome = if approved { "approved" } else { "rejected" };
        *self
            .0
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((verb_label(verb), outcome))
            .or_default() += 1;
    }

    pub(crate) fn event(&self, sent: bool) {
        let c = if sent {
            &self.0.events_sent
        } else {
            &self.0.events_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let requests = self
            .0
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((v, o), n)| ((*v).to_owned(), (*o).to_owned(), *n))
            .collect();
        let (listeners, listener_nodes) = self
            .0
            .registry
            .get()
            .map_or((0, 0), |r| (r.len(), r.nodes().len()));
        MetricsSnapshot {
            requests,
            listeners,
            listener_nodes,
            informers: self.0.informers.get().map_or(0, |i| i.count()),
            events_sent: self.0.events_sent.load(Ordering::Relaxed),
            events_failed: self.0.events_failed.load(Ordering::Relaxed),
        }
    }
}
