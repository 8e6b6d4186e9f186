//! The router's metrics (prometheus-client types).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How a REST call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestResult {
    /// The target answered 2xx (for eventbus: handed to the node's session).
    Delivered,
    /// The target answered, not 2xx (the edge service's own status, or the edge's error).
    TargetError,
    /// No rule of the namespace has the path (`404`).
    NoRule,
    /// The node in the URL is not an edge node (`404`).
    UnknownNode,
    /// The node is connected to no replica this one can reach (`503`).
    NotConnected,
    /// The rule (or the router) has as many deliveries in progress as allowed (`429`).
    Busy,
    /// The body is over `maxBodyBytes` (`413`).
    TooLarge,
    /// No answer within `restTimeout` (`504`).
    Timeout,
    /// Passed to the replica that holds the node's session.
    Proxied,
}

impl RestResult {
    const ALL: [RestResult; 9] = [
        RestResult::Delivered,
        RestResult::TargetError,
        RestResult::NoRule,
        RestResult::UnknownNode,
        RestResult::NotConnected,
        RestResult::Busy,
        RestResult::TooLarge,
        RestResult::Timeout,
        RestResult::Proxied,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RestResult::Delivered => "delivered",
            RestResult::TargetError => "target_error",
            RestResult::NoRule => "no_rule",
            RestResult::UnknownNode => "unknown_node",
            RestResult::NotConnected => "not_connected",
            RestResult::Busy => "busy",
            RestResult::TooLarge => "too_large",
            RestResult::Timeout => "timeout",
            RestResult::Proxied => "proxied",
        }
    }
}

/// What became of a message from an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeResult {
    /// An upload POSTed to its rule's target with a 2xx answer, or an answer handed to the
    /// REST call waiting for it.
    Delivered,
    /// An upload whose POST failed (transport error, non-2xx, timeout).
    Failed,
    /// An upload on a topic no rule naming this node has: dropped.
    NoRule,
    /// An upload over its rule's (or the router's) limit of deliveries in progress: dropped.
    Busy,
    /// An answer nobody waits for (late, or never asked): dropped.
    Unmatched,
    /// An answer to a request another node was sent: dropped.
    OtherNode,
    /// A message of another shape: dropped.
    Malformed,
}

impl EdgeResult {
    const ALL: [EdgeResult; 7] = [
        EdgeResult::Delivered,
        EdgeResult::Failed,
        EdgeResult::NoRule,
        EdgeResult::Busy,
        EdgeResult::Unmatched,
        EdgeResult::OtherNode,
        EdgeResult::Malformed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeResult::Delivered => "delivered",
            EdgeResult::Failed => "failed",
            EdgeResult::NoRule => "no_rule",
            EdgeResult::Busy => "busy",
            EdgeResult::Unmatched => "unmatched",
            EdgeResult::OtherNode => "other_node",
            EdgeResult::Malformed => "malformed",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleStateLabels {
    state: &'static str,
}

/// The router's counters and gauges. Cheap to clone; clones share the values.
#[derive(Debug, Clone, Default)]
pub struct RouterMetrics {
    rest: Family<ResultLabels, Counter>,
    edge: Family<ResultLabels, Counter>,
    rules: Family<RuleStateLabels, Gauge>,
    pub(crate) in_flight: Gauge,
}

impl RouterMetrics {
    /// Every series present at zero.
    pub fn new() -> Self {
        let m = RouterMetrics::default();
        for r in RestResult::ALL {
            drop(m.rest.get_or_create(&ResultLabels { result: r.as_str() }));
        }
        for r in EdgeResult::ALL {
            drop(m.edge.get_or_create(&ResultLabels { result: r.as_str() }));
        }
        m.set_rules(0, 0);
        m
    }

    pub(crate) fn rest(&self, r: RestResult) {
        self.rest
            .get_or_create(&ResultLabels { result: r.as_str() })
            .inc();
    }

    pub(crate) fn edge(&self, r: EdgeResult) {
        self.edge
            .get_or_create(&ResultLabels { result: r.as_str() })
            .inc();
    }

    pub(crate) fn set_rules(&self, active: usize, waiting: usize) {
        for (state, n) in [("active", active), ("waiting", waiting)] {
            self.rules
                .get_or_create(&RuleStateLabels { state })
                .set(n as i64);
        }
    }

    /// REST calls that ended with `r` so far.
    pub fn rest_calls(&self, r: RestResult) -> u64 {
        self.rest
            .get(&ResultLabels { result: r.as_str() })
            .map_or(0, |c| c.get())
    }

    /// Edge messages that ended with `r` so far.
    pub fn edge_messages(&self, r: EdgeResult) -> u64 {
        self.edge
            .get(&ResultLabels { result: r.as_str() })
            .map_or(0, |c| c.get())
    }

    /// Registers `router_rest_requests_total{result}`, `router_edge_messages_total{result}`,
    /// `router_rules{state}` (active, waiting for endpoints or unusable) and
    /// `router_deliveries_in_flight`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("router");
        r.register(
            "rest_requests",
            "REST calls to the router listener, by result",
            self.rest.clone(),
        );
        r.register(
            "edge_messages",
            "Eventbus uploads and servicebus answers from edges, by result",
            self.edge.clone(),
        );
        r.register("rules", "Rules known, by state", self.rules.clone());
        r.register(
            "deliveries_in_flight",
            "REST calls and edge uploads being delivered",
            self.in_flight.clone(),
        );
    }
}
