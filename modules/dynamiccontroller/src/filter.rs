//! What a node sees of the objects it reads: the `default/kubernetes` EndpointSlice points at
//! the edge's metaServer, and Endpoints/EndpointSlices of Services with node-group topology
//! keep only the addresses in the node's group.
//!
//! Applied to list and get answers and to watch events; write answers are not filtered.

use serde_json::Value;

/// The metaServer's address and port as in-cluster clients on the edge must reach it.
const METASERVER_ADDRESS: &str = "127.0.0.1";
const METASERVER_PORT: u64 = 10550;
/// Annotation of a Service whose endpoints are limited to the reader's node group.
pub(crate) const TOPOLOGY_ANNOTATION: &str = "apps.kubeedge.io/service-topology";
/// The annotation's value that turns the limit on.
pub(crate) const RANGE_NODEGROUP: &str = "range-nodegroup";
/// Label naming a node's group.
pub(crate) const GROUP_LABEL: &str = "apps.kubeedge.io/belonging-to";
/// EndpointSlice label naming the Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What the filters need to know about the cluster.
pub(crate) trait Lookup {
    /// Whether Service `namespace/name` limits its endpoints to node groups; `None` when
    /// the Service is unknown (the object then passes unfiltered).
    fn range_nodegroup(&self, namespace: &str, name: &str) -> Option<bool>;
    /// The group label of Node `name`: `None` when the Node is unknown, `Some(None)` when it
    /// has no group.
    fn node_group(&self, name: &str) -> Option<Option<String>>;
}

/// A [`Lookup`] that knows nothing: only the `default/kubernetes` rewrite applies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoLookup;

impl Lookup for NoLookup {
    fn range_nodegroup(&self, _: &str, _: &str) -> Option<bool> {
        None
    }
    fn node_group(&self, _: &str) -> Option<Option<String>> {
        None
    }
}

/// Filters `obj` (of `kind`, or a list of `kind` when `list`) for `node`, in place.
pub(crate) fn filter(obj: &mut Value, kind: &str, node: &str, lookup: &dyn Lookup) {
    if let Some(items) = obj.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            filter_one(item, kind, node, lookup);
        }
    } else {
        filter_one(obj, kind, node, lookup);
    }
}

/// True when objects of `kind` may change under [`filter`] (so they are filtered per node).
pub(crate) fn filters_kind(kind: &str) -> bool {
    matches!(kind, "Endpoints" | "EndpointSlice")
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn filter_one(obj: &mut Value, kind: &str, node: &str, lookup: &dyn Lookup) {
    let namespace = meta(obj, "namespace").to_owned();
    match kind {
        "EndpointSlice" => {
            if namespace == "default" && meta(obj, "name") == "kubernetes" {
                default_master(obj);
                return;
            }
            let service = obj
                .pointer(&format!(
                    "/metadata/labels/{}",
                    SERVICE_NAME_LABEL.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(service) = service
                && lookup.range_nodegroup(&namespace, &service) == Some(true)
                && let Some(endpoints) = obj.get_mut("endpoints").and_then(Value::as_array_mut)
            {
                endpoints.retain(|e| in_group(e.get("nodeName"), node, lookup));
            }
        }
        "Endpoints" => {
            let name = meta(obj, "name").to_owned();
            if lookup.range_nodegroup(&namespace, &name) != Some(true) {
                return;
            }
            if let Some(subsets) = obj.get_mut("subsets").and_then(Value::as_array_mut) {
                for subset in subsets {
                    for field in ["addresses", "notReadyAddresses"] {
                        if let Some(addrs) = subset.get_mut(field).and_then(Value::as_array_mut) {
                            addrs.retain(|a| in_group(a.get("nodeName"), node, lookup));
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// Same node, or both Nodes known with equal group labels (both without one is equal). An
/// address without a node is not in any group.
fn in_group(node_name: Option<&Value>, node: &str, lookup: &dyn Lookup) -> bool {
    let Some(other) = node_name.and_then(Value::as_str) else {
        return false;
    };
    if other == node {
        return true;
    }
    match (lookup.node_group(node), lookup.node_group(other)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The API server's own slice, rewritten so in-cluster clients on the edge reach the
/// metaServer: one endpoint, one address `127.0.0.1`, `https` ports on 10550.
fn default_master(obj: &mut Value) {
    if let Some(endpoints) = obj.get_mut("endpoints").and_then(Value::as_array_mut) {
        endpoints.truncate(1);
        if let Some(addrs) = endpoints
            .first_mut()
            .and_then(|e| e.get_mut("addresses"))
            .and_then(Value::as_array_mut)
            && !addrs.is_empty()
        {
            addrs.truncate(1);
            addrs[0] = Value::String(METASERVER_ADDRESS.into());
        }
    }
    if let Some(ports) = obj.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            if port.get("name").and_then(Value::as_str) == Some("https") {
                port["port"] = Value::from(METASERVER_PORT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    struct Cluster {
        topology: HashMap<(&'static str, &'static str), bool>,
        groups: HashMap<&'static str, Option<String>>,
    }

    impl Lookup for Cluster {
        fn range_nodegroup(&self, namespace: &str, name: &str) -> Option<bool> {
            self.topology
                .iter()
                .find(|((n, s), _)| *n == namespace && *s == name)
                .map(|(_, v)| *v)
        }
        fn node_group(&self, name: &str) -> Option<Option<String>> {
            self.groups.get(name).cloned()
        }
    }

    fn cluster() -> Cluster {
        Cluster {
            topology: [(("default", "web"), true), (("default", "plain"), false)].into(),
            groups: [
                ("edge-1", Some("g1".to_owned())),
                ("edge-2", Some("g1".to_owned())),
                ("edge-3", Some("g2".to_owned())),
            ]
            .into(),
        }
    }

    fn slice(ns: &str, name: &str, service: &str) -> Value {
        json!({"kind":"EndpointSlice","metadata":{"namespace":ns,"name":name,"labels":{"kubernetes.io/service-name":service}},
            "endpoints":[{"addresses":["10.0.0.1"],"nodeName":"edge-2"},{"addresses":["10.0.0.2"],"nodeName":"edge-3"},{"addresses":["10.0.0.3"]}],
            "ports":[{"name":"https","port":6443}]})
    }

    #[test]
    fn only_default_kubernetes_points_at_the_metaserver() {
        let c = cluster();
        let mut list = json!({"kind":"EndpointSliceList","items":[slice("default","kubernetes","kubernetes"), slice("default","other","plain")]});
        let before = list["items"][1].clone();
        filter(&mut list, "EndpointSlice", "edge-1", &c);
        let k = &list["items"][0];
        assert_eq!(
            k["endpoints"],
            json!([{"addresses":["127.0.0.1"],"nodeName":"edge-2"}])
        );
        assert_eq!(k["ports"][0]["port"], 10550);
        assert_eq!(list["items"][1], before, "other slices untouched");
    }

    #[test]
    fn nodegroup_topology_keeps_the_readers_group() {
        let c = cluster();
        let mut s = slice("default", "web-abc", "web");
        filter(&mut s, "EndpointSlice", "edge-1", &c);
        let addrs: Vec<&str> = s["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["addresses"][0].as_str().unwrap())
            .collect();
        assert_eq!(addrs, ["10.0.0.1"], "g1 only; no nodeName dropped");
        let mut e = json!({"kind":"Endpoints","metadata":{"namespace":"default","name":"web"},
            "subsets":[{"addresses":[{"ip":"10.0.0.1","nodeName":"edge-2"},{"ip":"10.0.0.2","nodeName":"edge-3"}],
                        "notReadyAddresses":[{"ip":"10.0.0.9"}]}]});
        filter(&mut e, "Endpoints", "edge-3", &c);
        assert_eq!(
            e["subsets"][0]["addresses"],
            json!([{"ip":"10.0.0.2","nodeName":"edge-3"}])
        );
        assert_eq!(e["subsets"][0]["notReadyAddresses"], json!([]));
        let mut p = slice("default", "plain-x", "plain");
        let before = p.clone();
        filter(&mut p, "EndpointSlice", "edge-1", &c);
        assert_eq!(p, before, "no annotation, no filtering");
    }
}
