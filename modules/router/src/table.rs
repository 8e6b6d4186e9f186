//! The rule table: endpoints and rules as edgecontroller announces them, the routes built from
//! them, and the MQTT subscriptions the edges must hold for them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kubeedge_api::rules::{Rule, RuleEndpoint};
use tokio::sync::Semaphore;

use crate::path::{Matched, topic_matches};
use crate::route::{Route, RouteError, RuleKey, Source, route};

/// A route in use, with the limit on its deliveries in progress.
#[derive(Debug)]
pub(crate) struct ActiveRule {
    pub(crate) route: Route,
    pub(crate) in_flight: Arc<Semaphore>,
}

/// A subscription an edge must hold: `<namespace>/<topic>` at `node`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Subscription {
    pub(crate) node: String,
    pub(crate) topic: String,
}

/// What a change of the table asks the edges to do.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Effects {
    /// New subscriptions to send.
    pub(crate) subscribe: Vec<Subscription>,
    /// Subscriptions no active rule needs any more.
    pub(crate) unsubscribe: Vec<Subscription>,
    /// Rules that cannot be used, with why (reported once, as a failure in their status).
    pub(crate) unusable: Vec<(RuleKey, RouteError)>,
}

/// Endpoints and rules, by `namespace/name`.
#[derive(Debug)]
pub(crate) struct Table {
    per_rule: usize,
    endpoints: HashMap<(String, String), RuleEndpoint>,
    rules: HashMap<RuleKey, Rule>,
    active: HashMap<RuleKey, Arc<ActiveRule>>,
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl Table {
    /// An empty table whose rules each allow `per_rule` deliveries at once.
    pub(crate) fn new(per_rule: usize) -> Self {
        Table {
            per_rule,
            endpoints: HashMap::new(),
            rules: HashMap::new(),
            active: HashMap::new(),
        }
    }

    /// Stores an endpoint; rules of its namespace that waited for it become active.
    pub(crate) fn insert_endpoint(&mut self, ep: RuleEndpoint) -> Effects {
        let (ns, name) = key_of(&ep.metadata);
        self.endpoints.insert((ns.clone(), name.clone()), ep);
        let waiting: Vec<RuleKey> = self
            .rules
            .iter()
            .filter(|(k, r)| {
                k.namespace == ns
                    && !self.active.contains_key(*k)
                    && (r.spec.source == name || r.spec.target == name)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut effects = Effects::default();
        for key in waiting {
            self.activate(&key, &mut effects);
        }
        effects
    }

    /// Forgets an endpoint. Rules built from it keep working (as KubeEdge), until they change.
    pub(crate) fn delete_endpoint(&mut self, ep: &RuleEndpoint) {
        self.endpoints.remove(&key_of(&ep.metadata));
    }

    /// Stores a rule and activates it when its endpoints are known (a rule that arrives before
    /// its endpoints becomes active when they arrive; KubeEdge retries for 50 s, then never).
    pub(crate) fn insert_rule(&mut self, rule: Rule) -> Effects {
        let (namespace, name) = key_of(&rule.metadata);
        let key = RuleKey { namespace, name };
        let mut effects = Effects::default();
        if self
            .rules
            .get(&key)
            .is_some_and(|r| r.spec == rule.spec && r.metadata.uid == rule.metadata.uid)
        {
            return effects;
        }
        if self.rules.contains_key(&key) {
            effects = self.delete_rule(&key);
        }
        self.rules.insert(key.clone(), rule);
        self.activate(&key, &mut effects);
        effects
    }

    /// Removes a rule; its subscription is cancelled unless another rule still needs it
    /// (whether or not its endpoints still exist).
    pub(crate) fn delete_rule(&mut self, key: &RuleKey) -> Effects {
        let mut effects = Effects::default();
        self.rules.remove(key);
        if let Some(gone) = self.active.remove(key)
            && let Some(sub) = subscription_of(&gone.route)
            && !self.needs(&sub)
        {
            effects.unsubscribe.push(sub);
        }
        effects
    }

    fn activate(&mut self, key: &RuleKey, effects: &mut Effects) {
        let Some(rule) = self.rules.get(key) else {
            return;
        };
        let ns = key.namespace.clone();
        let source = self.endpoints.get(&(ns.clone(), rule.spec.source.clone()));
        let target = self.endpoints.get(&(ns, rule.spec.target.clone()));
        match route(rule, source, target) {
            Ok(route) => {
                let sub = subscription_of(&route);
                if let Some(sub) = sub.filter(|s| !self.needs(s)) {
                    effects.subscribe.push(sub);
                }
                self.active.insert(
                    key.clone(),
                    Arc::new(ActiveRule {
                        route,
                        in_flight: Arc::new(Semaphore::new(self.per_rule)),
                    }),
                );
            }
            // Waits for its endpoints.
            Err(RouteError::MissingEndpoint(_)) => {}
            Err(e) => effects.unusable.push((key.clone(), e)),
        }
    }

    fn needs(&self, sub: &Subscription) -> bool {
        self.active
            .values()
            .any(|a| subscription_of(&a.route).as_ref() == Some(sub))
    }

    /// Every subscription `node` must hold (sent again when it connects).
    pub(crate) fn subscriptions_of(&self, node: &str) -> Vec<Subscription> {
        let mut subs: Vec<Subscription> = self
            .active
            .values()
            .filter_map(|a| subscription_of(&a.route))
            .filter(|s| s.node == node)
            .collect();
        subs.sort();
        subs.dedup();
        subs
    }

    /// The REST rule of `namespace` that the rest of a request URI (after
    /// `/<node>/<namespace>/`) reaches: the longest matching path, then the one with more
    /// literal segments, then the first by name.
    pub(crate) fn rest_rule(
        &self,
        namespace: &str,
        rest: &str,
    ) -> Option<(Arc<ActiveRule>, Matched)> {
        let mut best: Option<(Arc<ActiveRule>, Matched)> = None;
        let mut candidates: Vec<&Arc<ActiveRule>> = self
            .active
            .values()
            .filter(|a| a.route.key.namespace == namespace)
            .collect();
        candidates.sort_by(|a, b| a.route.key.cmp(&b.route.key));
        for a in candidates {
            let Source::Rest(path) = &a.route.source else {
                continue;
            };
            let Some(m) = path.matches(rest) else {
                continue;
            };
            let better = best
                .as_ref()
                .is_none_or(|(_, b)| (m.len, m.literals) > (b.len, b.literals));
            if better {
                best = Some((a.clone(), m));
            }
        }
        best
    }

    /// The eventbus rules an upload of `topic` from `node` belongs to: rules naming that node
    /// whose topic equals it (or, as an MQTT filter, matches it).
    pub(crate) fn eventbus_rules(&self, node: &str, topic: &str) -> Vec<Arc<ActiveRule>> {
        let mut rules: Vec<Arc<ActiveRule>> = self
            .active
            .values()
            .filter(|a| match &a.route.source {
                Source::EventBus { node: n, topic: t } => n == node && topic_matches(t, topic),
                Source::Rest(_) => false,
            })
            .cloned()
            .collect();
        rules.sort_by(|a, b| a.route.key.cmp(&b.route.key));
        rules
    }

    /// Rules known, active and waiting for endpoints (the latter counts unusable ones too).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.active.len(), self.rules.len() - self.active.len())
    }

    /// The active rules by key (for logs and tests).
    pub(crate) fn active_keys(&self) -> BTreeMap<String, String> {
        self.active
            .iter()
            .map(|(k, a)| (k.to_string(), format!("{:?}", a.route.source)))
            .collect()
    }
}

fn subscription_of(route: &Route) -> Option<Subscription> {
    match &route.source {
        Source::EventBus { node, topic } => Some(Subscription {
            node: node.clone(),
            topic: topic.clone(),
        }),
        Source::Rest(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn endpoint(ns: &str, name: &str, kind: &str) -> RuleEndpoint {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
            "spec": {"ruleEndpointType": kind, "properties": {"service_port": "8080"}}}))
        .unwrap()
    }

    fn rule(
        ns: &str,
        name: &str,
        src: &str,
        s: serde_json::Value,
        tgt: &str,
        t: serde_json::Value,
    ) -> Rule {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
            "spec": {"source": src, "sourceResource": s, "target": tgt, "targetResource": t}}))
        .unwrap()
    }

    fn eb_rule(name: &str, topic: &str) -> Rule {
        rule(
            "ns",
            name,
            "eb",
            json!({"topic": topic, "node_name": "e1"}),
            "sink",
            json!({"resource": "http://sink/x"}),
        )
    }

    fn key(name: &str) -> RuleKey {
        RuleKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_rule_waits_for_its_endpoints_then_subscribes_once() {
        let mut t = Table::new(4);
        assert_eq!(t.insert_rule(eb_rule("r1", "a")), Effects::default());
        assert_eq!(t.counts(), (0, 1));
        assert!(
            t.insert_endpoint(endpoint("ns", "eb", "eventbus"))
                .subscribe
                .is_empty()
        );
        let e = t.insert_endpoint(endpoint("ns", "sink", "rest"));
        let sub = Subscription {
            node: "e1".into(),
            topic: "ns/a".into(),
        };
        assert_eq!(e.subscribe, std::slice::from_ref(&sub));
        assert_eq!(t.counts(), (1, 0));
        // A second rule on the same topic needs no second subscription.
        assert!(t.insert_rule(eb_rule("r2", "a")).subscribe.is_empty());
        assert_eq!(t.eventbus_rules("e1", "ns/a").len(), 2);
        assert!(
            t.eventbus_rules("e2", "ns/a").is_empty(),
            "another node's upload"
        );
        assert!(
            t.delete_rule(&key("r1")).unsubscribe.is_empty(),
            "r2 still needs it"
        );
        assert_eq!(t.subscriptions_of("e1"), std::slice::from_ref(&sub));
        // Deleting the endpoint first does not keep the subscription alive (KubeEdge leaks it).
        t.delete_endpoint(&endpoint("ns", "eb", "eventbus"));
        assert_eq!(t.delete_rule(&key("r2")).unsubscribe, [sub]);
        assert!(t.subscriptions_of("e1").is_empty());
    }

    #[test]
    fn rest_rules_match_the_longest_path_of_their_namespace() {
        let mut t = Table::new(4);
        t.insert_endpoint(endpoint("ns", "rest", "rest"));
        t.insert_endpoint(endpoint("ns", "bus", "eventbus"));
        t.insert_endpoint(endpoint("other", "rest", "rest"));
        t.insert_endpoint(endpoint("other", "bus", "eventbus"));
        for (ns, name, path) in [
            ("ns", "a", "/a"),
            ("ns", "ab", "/a/b"),
            ("other", "x", "/a/b/c"),
        ] {
            t.insert_rule(rule(
                ns,
                name,
                "rest",
                json!({"path": path}),
                "bus",
                json!({"topic": name}),
            ));
        }
        let (r, m) = t.rest_rule("ns", "a/b/c").unwrap();
        assert_eq!((r.route.key.name.as_str(), m.param.as_str()), ("ab", "/c"));
        assert_eq!(t.rest_rule("ns", "a/x").unwrap().0.route.key.name, "a");
        assert!(t.rest_rule("ns", "ab").is_none());
        assert!(t.rest_rule("missing", "a").is_none());
    }

    #[test]
    fn a_changed_rule_replaces_the_old_one_and_unusable_rules_are_reported() {
        let mut t = Table::new(4);
        t.insert_endpoint(endpoint("ns", "eb", "eventbus"));
        t.insert_endpoint(endpoint("ns", "sink", "rest"));
        t.insert_rule(eb_rule("r", "a"));
        let e = t.insert_rule(eb_rule("r", "b"));
        assert_eq!(e.unsubscribe[0].topic, "ns/a");
        assert_eq!(e.subscribe[0].topic, "ns/b");
        assert_eq!(
            t.insert_rule(eb_rule("r", "b")),
            Effects::default(),
            "the same rule again"
        );
        let bad = rule(
            "ns",
            "bad",
            "eb",
            json!({"topic": "t"}),
            "sink",
            json!({"resource": "http://x/"}),
        );
        let e = t.insert_rule(bad);
        assert_eq!(e.unusable.len(), 1);
        assert_eq!(t.counts(), (1, 1));
    }
}
