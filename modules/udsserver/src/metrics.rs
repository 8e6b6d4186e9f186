//! The server's counters (prometheus-client types).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The edge's answer was written back.
    Answered,
    /// The edge answered without a result (`null`): written back as an error.
    EdgeFailed,
    /// No answer within the time allowed, or the node could not be reached.
    NotAnswered,
    /// Not a volume operation for a node's volume, not a message, empty or too large.
    Refused,
    /// More requests in progress than allowed.
    Busy,
}

impl Outcome {
    const ALL: [Outcome; 5] = [
        Outcome::Answered,
        Outcome::EdgeFailed,
        Outcome::NotAnswered,
        Outcome::Refused,
        Outcome::Busy,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::EdgeFailed => "edge_failed",
            Outcome::NotAnswered => "not_answered",
            Outcome::Refused => "refused",
            Outcome::Busy => "busy",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Requests by outcome. Cheap to clone; clones share the values.
#[derive(Debug, Clone, Default)]
pub struct UdsMetrics {
    requests: Family<OutcomeLabels, Counter>,
}

impl UdsMetrics {
    /// Every outcome's series at zero.
    pub fn new() -> Self {
        let m = UdsMetrics::default();
        for o in Outcome::ALL {
            drop(m.requests.get_or_create(&OutcomeLabels {
                outcome: o.as_str(),
            }));
        }
        m
    }

    pub(crate) fn count(&self, o: Outcome) {
        self.requests
            .get_or_create(&OutcomeLabels {
                outcome: o.as_str(),
            })
            .inc();
    }

    /// Requests that ended with `o` so far.
    pub fn requests(&self, o: Outcome) -> u64 {
        self.requests
            .get(&OutcomeLabels {
                outcome: o.as_str(),
            })
            .map_or(0, |c| c.get())
    }

    /// Registers `udsserver_requests_total{outcome}`.
    pub fn register(&self, registry: &mut Registry) {
        registry.sub_registry_with_prefix("udsserver").register(
            "requests",
            "Volume requests on the Unix socket, by outcome",
            self.requests.clone(),
        );
    }
}
