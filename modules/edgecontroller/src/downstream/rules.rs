//! Rules and RuleEndpoints for the router module: added → `insert`, deleted →
//! `delete`, modified → ignored, as KubeEdge does.

use beehive::constants::{operation, resource_type};
use kube::Resource;
use kube::runtime::watcher::Event;
use kubeedge_api::rules::{Rule, RuleEndpoint};
use kubeedge_api::watch::Change;
use serde::Serialize;
use tracing::debug;

use super::Downstream;
use crate::reply;

impl Downstream {
    pub(super) async fn on_rule_event(&mut self, event: Event<Rule>) {
        for change in self.rules.apply(event) {
            self.router_change(resource_type::RULE, change).await;
        }
    }

    pub(super) async fn on_endpoint_event(&mut self, event: Event<RuleEndpoint>) {
        for change in self.endpoints.apply(event) {
            self.router_change(resource_type::RULE_ENDPOINT, change)
                .await;
        }
    }

    async fn router_change<K: Resource + Serialize>(&self, kind: &str, change: Change<K>) {
        let op = match &change {
            Change::Added(_) => operation::INSERT,
            Change::Deleted(_) => operation::DELETE,
            Change::Modified { new, .. } => {
                debug!(kind, name = ?new.meta().name, "router object modified: ignored, as upstream");
                return;
            }
        };
        let obj = change.object();
        // Router resources carry no namespace: `rule/<name>` (it goes to module `router`).
        let resource = format!("{kind}/{}", obj.meta().name.as_deref().unwrap_or_default());
        let rv = obj.meta().resource_version.as_deref().unwrap_or_default();
        self.out
            .send(reply::push(resource, op, reply::json(&**obj), rv))
            .await;
    }
}
