//! A Rule and its two RuleEndpoints read into a typed route: where messages come from and where
//! they go, checked once when the rule is learnt.

use kubeedge_api::rules::{Rule, RuleEndpoint, keys};

use crate::path::{RestPath, clean_topic};

/// A RuleEndpoint property (Rust extension) that turns certificate verification off towards
/// the REST target of a rule, for targets with self-signed certificates. KubeEdge never
/// verifies; here verification is on unless the target's endpoint says `"true"`.
pub const INSECURE_SKIP_TLS_VERIFY: &str = "insecure_skip_tls_verify";

/// `namespace/name` of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleKey {
    /// The rule's namespace (KubeEdge's `ProjectID`).
    pub namespace: String,
    /// The rule's name (KubeEdge's `RuleID`).
    pub name: String,
}

impl std::fmt::Display for RuleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a rule's messages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// REST calls to `/<node>/<namespace>/<path>…` on the listener.
    Rest(RestPath),
    /// MQTT messages on topic `<namespace>/<topic>` at one edge node.
    EventBus {
        /// The node whose messages count.
        node: String,
        /// `<namespace>/<topic>`, path-cleaned: what the edge subscribes and uploads.
        topic: String,
    },
}

/// Where a rule's messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Published on an MQTT topic at the node the REST call names.
    EventBus {
        /// The topic (the request's extra path segments are appended).
        topic: String,
    },
    /// An HTTP service on the node the REST call names, at `127.0.0.1:<port><path>`.
    ServiceBus {
        /// `service_port` of the target endpoint.
        port: u16,
        /// The target path (the request's extra path segments are appended).
        path: String,
    },
    /// POSTed to a URL.
    Rest {
        /// `http://` or `https://` URL.
        url: http::Uri,
        /// Certificate verification off ([`INSECURE_SKIP_TLS_VERIFY`]).
        insecure: bool,
    },
}

/// A rule ready to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) key: RuleKey,
    pub(crate) source: Source,
    pub(crate) target: Target,
}

/// Why a rule cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The rule names an endpoint not (yet) known in its namespace: it is kept and becomes
    /// active when the endpoint arrives.
    #[error("rule endpoint {0:?} does not exist in the rule's namespace")]
    MissingEndpoint(String),
    /// A required key of `sourceResource`, `targetResource` or the endpoint's `properties`.
    #[error("{place} has no {key:?}")]
    MissingKey {
        /// `sourceResource`, `targetResource` or `properties`.
        place: &'static str,
        /// The key.
        key: &'static str,
    },
    /// A value that cannot be used.
    #[error("{key:?}: {why}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// Why.
        why: String,
    },
    /// A source/target pair other than rest→eventbus, rest→servicebus and eventbus→rest (the
    /// pairs KubeEdge's admission webhook allows; servicebus→rest is not implemented here).
    #[error(
        "{0} → {1} rules are not supported (rest→eventbus, rest→servicebus, eventbus→rest are)"
    )]
    UnsupportedPair(String, String),
}

fn value(
    place: &'static str,
    map: &std::collections::BTreeMap<String, String>,
    key: &'static str,
) -> Result<String, RouteError> {
    map.get(key)
        .cloned()
        .ok_or(RouteError::MissingKey { place, key })
}

/// Reads `rule` with its source and target endpoints (`None`: not known).
pub(crate) fn route(
    rule: &Rule,
    source: Option<&RuleEndpoint>,
    target: Option<&RuleEndpoint>,
) -> Result<Route, RouteError> {
    let rule_key = RuleKey {
        namespace: rule.metadata.namespace.clone().unwrap_or_default(),
        name: rule.metadata.name.clone().unwrap_or_default(),
    };
    let source_ep = source.ok_or_else(|| RouteError::MissingEndpoint(rule.spec.source.clone()))?;
    let target_ep = target.ok_or_else(|| RouteError::MissingEndpoint(rule.spec.target.clone()))?;
    let (s, t) = (
        source_ep.spec.rule_endpoint_type.as_str(),
        target_ep.spec.rule_endpoint_type.as_str(),
    );
    let src = &rule.spec.source_resource;
    let tgt = &rule.spec.target_resource;
    let (source, target) = match (s, t) {
        ("rest", "eventbus") | ("rest", "servicebus") => {
            let path = RestPath::parse(&value("sourceResource", src, keys::PATH)?);
            let target = if t == "eventbus" {
                Target::EventBus {
                    topic: value("targetResource", tgt, keys::TOPIC)?,
                }
            } else {
                let port = value("properties", &target_ep.spec.properties, keys::SERVICE_PORT)?;
                let port = port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    RouteError::BadValue {
                        key: keys::SERVICE_PORT,
                        why: format!("{port:?} is not a port (1-65535)"),
                    }
                })?;
                Target::ServiceBus {
                    port,
                    path: value("targetResource", tgt, keys::PATH)?,
                }
            };
            (Source::Rest(path), target)
        }
        ("eventbus", "rest") => {
            let node = value("sourceResource", src, keys::NODE_NAME)?;
            kubeedge_api::validation::object_name("node", &node).map_err(|e| {
                RouteError::BadValue {
                    key: keys::NODE_NAME,
                    why: e.to_string(),
                }
            })?;
            let topic = value("sourceResource", src, keys::TOPIC)?;
            let topic = clean_topic(&format!("{}/{topic}", rule_key.namespace));
            let url = value("targetResource", tgt, keys::RESOURCE)?;
            let url: http::Uri = url.parse().map_err(|e| RouteError::BadValue {
                key: keys::RESOURCE,
                why: format!("{url:?} is not a URL: {e}"),
            })?;
            if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
                return Err(RouteError::BadValue {
                    key: keys::RESOURCE,
                    why: format!("{url} is not an http:// or https:// URL"),
                });
            }
            let insecure = target_ep
                .spec
                .properties
                .get(INSECURE_SKIP_TLS_VERIFY)
                .is_some_and(|v| v == "true");
            (
                Source::EventBus { node, topic },
                Target::Rest { url, insecure },
            )
        }
        (s, t) => return Err(RouteError::UnsupportedPair(s.into(), t.into())),
    };
    Ok(Route {
        key: rule_key,
        source,
        target,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn endpoint(name: &str, kind: &str, props: serde_json::Value) -> RuleEndpoint {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
            "spec": {"ruleEndpointType": kind, "properties": props}}))
        .unwrap()
    }

    fn rule(src: serde_json::Value, tgt: serde_json::Value) -> Rule {
        serde_json::from_value(json!({"metadata": {"name": "r", "namespace": "ns"},
            "spec": {"source": "s", "sourceResource": src, "target": "t", "targetResource": tgt}}))
        .unwrap()
    }

    #[test]
    fn the_three_pairs_read_their_keys() {
        let rest = endpoint("s", "rest", json!({}));
        let r = route(
            &rule(json!({"path": "/a/b/"}), json!({"topic": "t1"})),
            Some(&rest),
            Some(&endpoint("t", "eventbus", json!({}))),
        )
        .unwrap();
        assert_eq!(r.target, Target::EventBus { topic: "t1".into() });
        assert_eq!(r.key.to_string(), "ns/r");
        let r = route(
            &rule(json!({"path": "/a"}), json!({"path": "/svc"})),
            Some(&rest),
            Some(&endpoint(
                "t",
                "servicebus",
                json!({"service_port": "6666"}),
            )),
        )
        .unwrap();
        assert_eq!(
            r.target,
            Target::ServiceBus {
                port: 6666,
                path: "/svc".into()
            }
        );
        let r = route(
            &rule(
                json!({"topic": "/t//x", "node_name": "edge-1"}),
                json!({"resource": "https://sink.example/x"}),
            ),
            Some(&endpoint("s", "eventbus", json!({}))),
            Some(&endpoint(
                "t",
                "rest",
                json!({INSECURE_SKIP_TLS_VERIFY: "true"}),
            )),
        )
        .unwrap();
        assert_eq!(
            r.source,
            Source::EventBus {
                node: "edge-1".into(),
                topic: "ns/t/x".into()
            }
        );
        assert!(matches!(r.target, Target::Rest { insecure: true, .. }));
    }

    #[test]
    fn unusable_rules_say_why() {
        let rest = endpoint("s", "rest", json!({}));
        let eb = endpoint("t", "eventbus", json!({}));
        assert_eq!(
            route(&rule(json!({"path": "/a"}), json!({})), Some(&rest), None),
            Err(RouteError::MissingEndpoint("t".into()))
        );
        assert_eq!(
            route(
                &rule(json!({}), json!({"topic": "x"})),
                Some(&rest),
                Some(&eb)
            ),
            Err(RouteError::MissingKey {
                place: "sourceResource",
                key: "path"
            })
        );
        let sb = endpoint("t", "servicebus", json!({"service_port": "0"}));
        assert!(matches!(
            route(
                &rule(json!({"path": "/a"}), json!({"path": "/"})),
                Some(&rest),
                Some(&sb)
            ),
            Err(RouteError::BadValue {
                key: "service_port",
                ..
            })
        ));
        assert!(matches!(
            route(
                &rule(
                    json!({"topic": "t", "node_name": "Bad_Node"}),
                    json!({"resource": "http://x/"})
                ),
                Some(&endpoint("s", "eventbus", json!({}))),
                Some(&endpoint("t", "rest", json!({})))
            ),
            Err(RouteError::BadValue {
                key: "node_name",
                ..
            })
        ));
        assert!(matches!(
            route(
                &rule(
                    json!({"topic": "t", "node_name": "e"}),
                    json!({"resource": "file:///etc/passwd"})
                ),
                Some(&endpoint("s", "eventbus", json!({}))),
                Some(&endpoint("t", "rest", json!({})))
            ),
            Err(RouteError::BadValue {
                key: "resource",
                ..
            })
        ));
        assert!(matches!(
            route(
                &rule(
                    json!({"target_url": "u", "node_name": "e"}),
                    json!({"resource": "http://x/"})
                ),
                Some(&endpoint("s", "servicebus", json!({}))),
                Some(&endpoint("t", "rest", json!({})))
            ),
            Err(RouteError::UnsupportedPair(..))
        ));
    }
}
