//! Rules and RuleEndpoints for the router module: added → `insert`, deleted → `delete`, as
//! KubeEdge does; modified → `delete` of the old object then `insert` of the new one (KubeEdge
//! drops modifications, so a changed rule took effect only after delete and re-create; its
//! router understands the pair too).

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
        match &change {
            Change::Added(obj) => self.to_router(kind, operation::INSERT, &**obj).await,
            Change::Deleted(obj) => self.to_router(kind, operation::DELETE, &**obj).await,
            Change::Modified { old, new } => {
                debug!(kind, name = ?new.meta().name, "router object modified: replaced");
                self.to_router(kind, operation::DELETE, &**old).await;
                self.to_router(kind, operation::INSERT, &**new).await;
            }
        }
    }

    async fn to_router<K: Resource + Serialize>(&self, kind: &str, op: &str, obj: &K) {
        // Router resources carry no namespace: `rule/<name>` (it goes to module `router`).
        let resource = format!("{kind}/{}", obj.meta().name.as_deref().unwrap_or_default());
        let rv = obj.meta().resource_version.as_deref().unwrap_or_default();
        self.out
            .send(reply::push(resource, op, reply::json(obj), rv))
            .await;
    }
}
