//! Where edgecontroller's messages go: module `router` for router resources
//! (`rule/<name>`, `ruleendpoint/<name>`), module `cloudhub` for everything else.

use beehive::{Endpoint, Message};
use kubeedge_api::names::{CLOUDHUB, ROUTER};
use tracing::warn;

use crate::metrics::EdgeControllerMetrics;

/// Sends as `edgecontroller`, waiting for room in the target mailbox (back-pressure), and
/// counts the outcome.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    endpoint: Endpoint,
    metrics: EdgeControllerMetrics,
}

/// The module a message with this resource is for.
pub(crate) fn target_module(resource: &str) -> &'static str {
    let mut parts = resource.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("rule" | "ruleendpoint"), Some(_), None) => ROUTER,
        _ => CLOUDHUB,
    }
}

impl Outbox {
    pub(crate) fn new(endpoint: Endpoint, metrics: EdgeControllerMetrics) -> Self {
        Outbox { endpoint, metrics }
    }

    /// Delivers `msg`; a failure (module missing or stopped) is logged and counted, never
    /// retried: reliable delivery is cloudhub's and synccontroller's job.
    pub(crate) async fn send(&self, msg: Message) -> bool {
        let module = target_module(&msg.route.resource);
        let (resource, op) = (msg.route.resource.clone(), msg.route.operation.clone());
        match self.endpoint.send(module, msg).await {
            Ok(()) => {
                self.metrics.sent(true);
                true
            }
            Err(error) => {
                self.metrics.sent(false);
                warn!(module, %resource, operation = %op, %error, "cannot deliver message");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_resources_have_exactly_two_segments() {
        assert_eq!(target_module("rule/r1"), "router");
        assert_eq!(target_module("ruleendpoint/e1"), "router");
        assert_eq!(target_module("rule/r1/x"), "cloudhub");
        assert_eq!(target_module("node/e1/default/rule/r1"), "cloudhub");
        assert_eq!(target_module("node/e1/default/pod/p"), "cloudhub");
    }
}
