//! The resource path grammar: `node/<nodeID>/<namespace>/<resourceType>[/<name>]`.
//!
//! cloudhub adds the `node/<id>/` prefix to everything an edge sends and strips it from
//! everything it sends to an edge; controllers build and parse the cloud-internal form.

use crate::names::NULL_NAMESPACE;

/// A resource path could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// A part that must not be empty was empty.
    #[error("resource path needs a non-empty {0}")]
    Missing(&'static str),
    /// The path does not start with `node/<id>/`.
    #[error("resource {0:?} does not start with node/<id>/")]
    NoNode(String),
    /// The node part is not a Node name (a DNS-1123 subdomain).
    #[error("resource path: {0}")]
    InvalidNode(#[from] crate::validation::InvalidName),
}

/// A cloud-internal resource path split into its segments (index convention of the Go
/// helpers: `[0]="node"`, `[1]` node, `[2]` namespace, `[3]` type, `[4]` name; missing
/// segments are empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeResource {
    /// The edge node.
    pub node: String,
    /// Namespace, or `null` for cluster-scoped objects.
    pub namespace: String,
    /// Resource type (`pod`, `configmap`, …).
    pub resource_type: String,
    /// Object name (may be empty, e.g. a list of pod statuses).
    pub name: String,
}

impl NodeResource {
    /// A path for a namespaced object (or `null` namespace).
    pub fn new(node: &str, namespace: &str, resource_type: &str, name: &str) -> Self {
        NodeResource {
            node: node.to_owned(),
            namespace: namespace.to_owned(),
            resource_type: resource_type.to_owned(),
            name: name.to_owned(),
        }
    }

    /// A path for a cluster-scoped object (namespace `null`).
    pub fn cluster(node: &str, resource_type: &str, name: &str) -> Self {
        NodeResource::new(node, NULL_NAMESPACE, resource_type, name)
    }

    /// Builds `node/<node>/<ns>/<type>[/<name>]`; refuses an empty node, namespace or type.
    pub fn build(&self) -> Result<String, ResourceError> {
        if self.node.is_empty() {
            return Err(ResourceError::Missing("node"));
        }
        if self.namespace.is_empty() {
            return Err(ResourceError::Missing("namespace"));
        }
        if self.resource_type.is_empty() {
            return Err(ResourceError::Missing("resource type"));
        }
        let mut s = format!(
            "node/{}/{}/{}",
            self.node, self.namespace, self.resource_type
        );
        if !self.name.is_empty() {
            s.push('/');
            s.push_str(&self.name);
        }
        Ok(s)
    }

    /// Splits a cloud-internal path. Only `node/<id>` is required; other parts may be empty.
    /// A name containing `/` keeps its slashes. The node must be a valid Node name
    /// ([`crate::validation::node_name`]).
    pub fn parse(resource: &str) -> Result<Self, ResourceError> {
        let r = NodeResourceRef::parse(resource)?;
        Ok(NodeResource {
            node: r.node.to_owned(),
            namespace: r.namespace.to_owned(),
            resource_type: r.resource_type.to_owned(),
            name: r.name.to_owned(),
        })
    }

    /// The same path, borrowed.
    pub fn as_ref(&self) -> NodeResourceRef<'_> {
        NodeResourceRef {
            node: &self.node,
            namespace: &self.namespace,
            resource_type: &self.resource_type,
            name: &self.name,
        }
    }

    /// True when the namespace token is `null` (a cluster-scoped object).
    pub fn is_cluster_scoped(&self) -> bool {
        self.namespace == NULL_NAMESPACE
    }
}

/// A [`NodeResource`] borrowed from the path it was split from: the same parts, no copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeResourceRef<'a> {
    /// The edge node.
    pub node: &'a str,
    /// Namespace, or `null` for cluster-scoped objects.
    pub namespace: &'a str,
    /// Resource type (`pod`, `configmap`, …).
    pub resource_type: &'a str,
    /// Object name (may be empty; keeps any `/` it contains).
    pub name: &'a str,
}

impl<'a> NodeResourceRef<'a> {
    /// Splits a cloud-internal path as [`NodeResource::parse`] does (the node validated).
    pub fn parse(resource: &'a str) -> Result<Self, ResourceError> {
        let mut parts = resource.splitn(5, '/');
        if parts.next() != Some("node") {
            return Err(ResourceError::NoNode(resource.to_owned()));
        }
        let node = parts.next().unwrap_or_default();
        if node.is_empty() {
            return Err(ResourceError::NoNode(resource.to_owned()));
        }
        crate::validation::node_name(node)?;
        Ok(NodeResourceRef {
            node,
            namespace: parts.next().unwrap_or_default(),
            resource_type: parts.next().unwrap_or_default(),
            name: parts.next().unwrap_or_default(),
        })
    }

    /// True when the namespace token is `null` (a cluster-scoped object).
    pub fn is_cluster_scoped(&self) -> bool {
        self.namespace == NULL_NAMESPACE
    }
}

/// The node a cloud-internal resource is for: the token after the first `node` token that
/// has a non-empty successor (`node/e1/…` and `/node/e1/…` both give `e1`).
pub fn node_of(resource: &str) -> Option<&str> {
    let mut parts = resource.split('/');
    while let Some(p) = parts.next() {
        if p == "node" {
            match parts.clone().next() {
                Some(next) if !next.is_empty() => return Some(next),
                _ => {}
            }
        }
    }
    None
}

/// The edge's view of a cloud-internal resource: `node/<id>/rest` becomes `rest` when the path
/// starts with `node` and has at least three segments; anything else is unchanged.
pub fn trim_node(resource: &str) -> &str {
    if !resource.starts_with("node/") {
        return resource;
    }
    let mut idx = resource.match_indices('/');
    match (idx.next(), idx.next()) {
        (Some(_), Some((second, _))) => &resource[second + 1..],
        _ => resource,
    }
}

/// The cloud-internal form of an edge resource: `node/<node>/<resource>`.
pub fn with_node(node: &str, resource: &str) -> String {
    format!("node/{node}/{resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_parses_namespaced_and_cluster_paths() {
        let r = NodeResource::new("edge-1", "default", "pod", "web");
        assert_eq!(r.build().unwrap(), "node/edge-1/default/pod/web");
        assert_eq!(
            NodeResource::parse("node/edge-1/default/pod/web").unwrap(),
            r
        );
        let c = NodeResource::cluster("e", "node", "e");
        assert_eq!(c.build().unwrap(), "node/e/null/node/e");
        assert!(
            NodeResource::parse("node/e/null/node/e")
                .unwrap()
                .is_cluster_scoped()
        );
        assert_eq!(
            NodeResource::new("e", "ns", "podstatus", "")
                .build()
                .unwrap(),
            "node/e/ns/podstatus"
        );
    }

    #[test]
    fn refuses_empty_required_parts() {
        assert_eq!(
            NodeResource::new("", "a", "b", "c").build(),
            Err(ResourceError::Missing("node"))
        );
        assert_eq!(
            NodeResource::new("n", "", "b", "c").build(),
            Err(ResourceError::Missing("namespace"))
        );
        assert_eq!(
            NodeResource::new("n", "a", "", "c").build(),
            Err(ResourceError::Missing("resource type"))
        );
        assert!(NodeResource::parse("default/pod/web").is_err());
        assert!(NodeResource::parse("node//x").is_err());
    }

    #[test]
    fn a_node_that_is_not_a_node_name_should_be_refused() {
        for bad in [
            "node/victim?x=1/ns/pod/p",
            "node/Edge/ns/pod/p",
            "node/a%2fb/ns",
        ] {
            assert!(
                matches!(NodeResource::parse(bad), Err(ResourceError::InvalidNode(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn short_paths_parse_with_empty_parts() {
        let r = NodeResource::parse("node/e1").unwrap();
        assert_eq!(
            (
                r.node.as_str(),
                r.namespace.as_str(),
                r.resource_type.as_str()
            ),
            ("e1", "", "")
        );
        let r = NodeResource::parse("node/e1/membership/detail").unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.resource_type.as_str()),
            ("membership", "detail")
        );
    }

    #[test]
    fn finds_the_node_like_the_go_dispatcher() {
        assert_eq!(node_of("node/edge-1/default/pod/x"), Some("edge-1"));
        assert_eq!(node_of("/node/edge-1/default/pod/x"), Some("edge-1"));
        assert_eq!(node_of("default/pod/x"), None);
        assert_eq!(node_of("node//x/node/e2"), Some("e2"));
        assert_eq!(node_of("node/"), None);
    }

    #[test]
    fn trims_and_prefixes_the_node() {
        assert_eq!(
            trim_node("node/edge-1/default/pod/nginx"),
            "default/pod/nginx"
        );
        assert_eq!(trim_node("node/edge-1/membership"), "membership");
        assert_eq!(trim_node("node/edge-1"), "node/edge-1");
        assert_eq!(trim_node("k8s/ca.crt"), "k8s/ca.crt");
        assert_eq!(
            with_node("e", "default/podstatus/x"),
            "node/e/default/podstatus/x"
        );
    }
}
