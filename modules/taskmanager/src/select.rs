//! Which nodes a job runs on: `nodeNames` or `labelSelector` (exactly one), each node checked
//! to be an edge node that is Ready. The reasons are KubeEdge's words where it has them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams};
use kube::core::Selector;
use kubeedge_api::names::EDGE_NODE_LABEL;
use kubeedge_api::operations::phase;
use kubeedge_api::validation::is_dns1123_subdomain;

use crate::job::Targets;

/// A chosen node and its initial task phase (`Pending`, or `Failure` with the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The node name.
    pub node: String,
    /// `Pending` or `Failure`.
    pub phase: &'static str,
    /// Why it failed; empty when pending.
    pub reason: String,
}

impl Chosen {
    fn pending(node: &str) -> Self {
        Chosen {
            node: node.to_owned(),
            phase: phase::PENDING,
            reason: String::new(),
        }
    }

    fn failed(node: &str, reason: impl Into<String>) -> Self {
        Chosen {
            node: node.to_owned(),
            phase: phase::FAILURE,
            reason: reason.into(),
        }
    }
}

/// Why no node list could be made (the job fails with this reason), or why it should be
/// tried again later.
#[derive(Debug)]
pub(crate) enum SelectError {
    /// The spec is wrong: the job fails with this reason.
    Refused(String),
    /// The API server could not be asked: try again later.
    Unavailable(kube::Error),
}

/// The selector of a job, checked as the API server checks one, in its string form.
pub fn selector(ls: &LabelSelector) -> Result<String, String> {
    let invalid = |why: String| format!("nodeSelector is invalid, err: {why}");
    for (k, v) in ls.match_labels.iter().flatten() {
        label_key(k).map_err(invalid)?;
        label_value(v).map_err(invalid)?;
    }
    for r in ls.match_expressions.iter().flatten() {
        label_key(&r.key).map_err(invalid)?;
        let values = r.values.as_deref().unwrap_or_default();
        match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(invalid(format!(
                    "values: Required value: for 'in', 'notin' operators, values set can't be empty (key {:?})",
                    r.key
                )));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(invalid(format!(
                    "values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist' (key {:?})",
                    r.key
                )));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(invalid(format!(
                    "{other:?} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)"
                )));
            }
        }
        for v in values {
            label_value(v).map_err(invalid)?;
        }
    }
    let parsed = Selector::try_from(ls.clone()).map_err(|e| invalid(e.to_string()))?;
    Ok(parsed.to_string())
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters.
fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(is_dns1123_subdomain);
    if !prefix_ok || !qualified_name(name) {
        return Err(format!("{key:?} is not a valid label key"));
    }
    Ok(())
}

fn qualified_name(name: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(ok_char)
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || qualified_name(v) {
        Ok(())
    } else {
        Err(format!("{v:?} is not a valid label value"))
    }
}

/// The node entries of a job: `nodeNames` in order (each once), or every node the selector
/// matches; each checked with [`check_node`]. Nodes that match but are not edge nodes or not
/// Ready are included as failures (they count against the failure tolerance), as KubeEdge.
pub(crate) async fn choose(
    nodes: &Api<Node>,
    targets: Targets<'_>,
) -> Result<Vec<Chosen>, SelectError> {
    let names = targets.node_names;
    let chosen = match (names.is_empty(), targets.label_selector) {
        (false, Some(_)) => {
            return Err(SelectError::Refused(
                "nodeNames and nodeSelector cannot be specified at the same time".into(),
            ));
        }
        (true, None) => {
            return Err(SelectError::Refused(
                "nodeNames and nodeSelector cannot both be empty".into(),
            ));
        }
        (false, None) => {
            let mut seen = BTreeSet::new();
            let mut chosen = Vec::new();
            for name in names {
                // KubeEdge lists a repeated name twice; one entry per node keeps every
                // report and timeout unambiguous.
                if !seen.insert(name.as_str()) {
                    continue;
                }
                if !is_dns1123_subdomain(name) {
                    chosen.push(Chosen::failed(
                        name,
                        format!("failed to get node, err: {name:?} is not a valid node name"),
                    ));
                    continue;
                }
                match nodes.get_opt(name).await {
                    Ok(Some(node)) => chosen.push(check_node(name, &node)),
                    Ok(None) => chosen.push(Chosen::failed(
                        name,
                        format!("failed to get node, err: nodes {name:?} not found"),
                    )),
                    Err(e) => return Err(SelectError::Unavailable(e)),
                }
            }
            chosen
        }
        (true, Some(ls)) => {
            let selector = selector(ls).map_err(SelectError::Refused)?;
            let list = nodes
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(SelectError::Unavailable)?;
            let mut items = list.items;
            items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            items
                .iter()
                .map(|n| check_node(n.metadata.name.as_deref().unwrap_or_default(), n))
                .collect()
        }
    };
    if chosen.is_empty() {
        return Err(SelectError::Refused(
            "no nodes were matched with selector".into(),
        ));
    }
    Ok(chosen)
}

/// `Pending` for an edge node (label `node-role.kubernetes.io/edge` with the empty value)
/// whose `Ready` condition is `True`; otherwise `Failure` with KubeEdge's reason.
pub fn check_node(name: &str, node: &Node) -> Chosen {
    let edge = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EDGE_NODE_LABEL))
        .is_some_and(|v| v.is_empty());
    if !edge {
        return Chosen::failed(name, "the node is not an edge node");
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Chosen::failed(name, "the node is not ready");
    }
    Chosen::pending(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn node(labels: &[(&str, &str)], ready: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n.status = ready.map(|s| NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: s.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    }

    #[test]
    fn only_ready_edge_nodes_are_pending() {
        let edge = (EDGE_LABEL_FOR_TEST, "");
        assert_eq!(
            check_node("a", &node(&[edge], Some("True"))).phase,
            "Pending"
        );
        assert_eq!(
            check_node("a", &node(&[edge], Some("Unknown"))).reason,
            "the node is not ready"
        );
        assert_eq!(
            check_node("a", &node(&[edge], None)).reason,
            "the node is not ready"
        );
        assert_eq!(
            check_node("a", &node(&[(EDGE_LABEL_FOR_TEST, "yes")], Some("True"))).reason,
            "the node is not an edge node"
        );
        assert_eq!(
            check_node("a", &node(&[], Some("True"))).reason,
            "the node is not an edge node"
        );
    }

    const EDGE_LABEL_FOR_TEST: &str = "node-role.kubernetes.io/edge";

    fn req(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn selectors_are_checked_as_the_api_server_checks_them() {
        let ok = LabelSelector {
            match_labels: Some([("zone".to_string(), "a".to_string())].into()),
            match_expressions: Some(vec![req(EDGE_LABEL_FOR_TEST, "Exists", None)]),
        };
        let s = selector(&ok).unwrap();
        assert!(
            s.contains("zone=a") && s.contains(EDGE_LABEL_FOR_TEST),
            "{s}"
        );
        for (bad, want) in [
            (req("k", "In", Some(&[])), "can't be empty"),
            (req("k", "Exists", Some(&["x"])), "may not be specified"),
            (req("k", "Like", Some(&["x"])), "\"Like\" is not a valid"),
            (req("bad key!", "Exists", None), "not a valid label key"),
            (
                req("k", "In", Some(&["no spaces"])),
                "not a valid label value",
            ),
        ] {
            let ls = LabelSelector {
                match_expressions: Some(vec![bad]),
                ..Default::default()
            };
            let reason = selector(&ls).unwrap_err();
            assert!(
                reason.starts_with("nodeSelector is invalid, err: "),
                "{reason}"
            );
            assert!(reason.contains(want), "{reason}");
        }
        // The empty selector selects every node, as the API server reads it.
        assert_eq!(selector(&LabelSelector::default()).unwrap(), "");
    }
}
