//! The object an Application names: its `Key` (`/<group>/<version>/<resource>/<ns>/<name>`).

use std::borrow::Cow;

use kubeedge_api::status::StatusError;
use kubeedge_api::{escaped, validation};

/// A parsed Application key. `namespace` and `name` are `None` for the `null` token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ResourceKey {
    /// API group, `""` for the core group (`core` on the wire).
    pub group: String,
    pub version: String,
    /// Resource, plural (`services`).
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// Why a key was refused (answered `400 BadRequest`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Application key {key:?}: {why}")]
pub(crate) struct InvalidKey {
    key: String,
    why: String,
}

impl From<InvalidKey> for StatusError {
    fn from(e: InvalidKey) -> Self {
        StatusError::bad_request(e.to_string())
    }
}

/// Longest key accepted (five segments of Kubernetes names).
const KEY_MAX: usize = 1024;

/// True for a name that can travel as one URL path segment: what the API server accepts as
/// an object name in a path (not `.` or `..`, no `/` or `%`), also without characters that
/// would end or change the path (`?`, `#`, spaces, controls).
fn is_path_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= validation::SUBDOMAIN_MAX
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'/' | b'%' | b'?' | b'#'))
}

fn is_resource(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= validation::LABEL_MAX
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn is_version(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl ResourceKey {
    /// Parses a key. Missing trailing segments count as `null` (the edge's own parser
    /// tolerates them too).
    pub(crate) fn parse(key: &str) -> Result<ResourceKey, InvalidKey> {
        let bad = |why: &str| InvalidKey {
            key: key.chars().take(256).collect(),
            why: why.to_owned(),
        };
        if key.len() > KEY_MAX {
            return Err(bad("too long"));
        }
        let rest = key
            .strip_prefix('/')
            .ok_or_else(|| bad("must start with '/'"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.len() < 3 || parts.len() > 5 {
            return Err(bad("want /<group>/<version>/<resource>/<namespace>/<name>"));
        }
        let token = |i: usize| {
            parts
                .get(i)
                .copied()
                .filter(|s| *s != "null" && !s.is_empty())
        };
        let group = match parts[0] {
            "core" | "" => "",
            g if validation::is_dns1123_subdomain(g) => g,
            _ => return Err(bad("group is not a DNS subdomain")),
        };
        if !is_version(parts[1]) {
            return Err(bad("version is not alphanumeric"));
        }
        if !is_resource(parts[2]) {
            return Err(bad("resource is not a lowercase plural"));
        }
        let namespace = match token(3) {
            Some(ns) if validation::is_dns1123_label(ns) => Some(ns.to_owned()),
            Some(_) => return Err(bad("namespace is not a DNS-1123 label")),
            None => None,
        };
        let name = match token(4) {
            Some(n) if is_path_segment(n) => Some(n.to_owned()),
            Some(_) => return Err(bad("name cannot be a path segment")),
            None => None,
        };
        Ok(ResourceKey {
            group: group.to_owned(),
            version: parts[1].to_owned(),
            resource: parts[2].to_owned(),
            namespace,
            name,
        })
    }

    /// `v1` or `<group>/<version>`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The resource's collection path, in the key's namespace when `namespaced` (all
    /// namespaces otherwise): `/api/v1/namespaces/default/services`.
    pub(crate) fn collection_path(&self, namespaced: bool) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match (&self.namespace, namespaced) {
            (Some(ns), true) => format!("{base}/namespaces/{}/{}", segment(ns), self.resource),
            _ => format!("{base}/{}", self.resource),
        }
    }

    /// The path of the named object (and `subresource` when not empty); `None` without a name.
    pub(crate) fn object_path(&self, namespaced: bool, subresource: &str) -> Option<String> {
        let name = segment(self.name.as_deref()?);
        let mut p = format!("{}/{name}", self.collection_path(namespaced));
        if !subresource.is_empty() {
            p.push('/');
            p.push_str(subresource);
        }
        Some(p)
    }
}

/// `s` as one path segment: as it is when [`ResourceKey::parse`] would accept it, otherwise
/// percent-encoded ([`escaped::segment`]), so a name that bypassed parsing still never adds a
/// segment or a query (and the request authorizer refuses a path with an escape). The dot
/// segments and the empty name become `%00`, which no object's name holds.
fn segment(s: &str) -> Cow<'_, str> {
    if is_path_segment(s) {
        Cow::Borrowed(s)
    } else {
        escaped::segment(s).unwrap_or(Cow::Borrowed("%00"))
    }
}

/// Checks an object name from the wire (outside the key) as the key's names are checked.
pub(crate) fn object_name(name: &str) -> Result<&str, StatusError> {
    if is_path_segment(name) {
        Ok(name)
    } else {
        Err(StatusError::bad_request(format!(
            "invalid object name {:?}",
            name.chars().take(64).collect::<String>()
        )))
    }
}

/// Checks a subresource from the wire (`status`, `scale`, `eviction`, …).
pub(crate) fn subresource(s: &str) -> Result<&str, StatusError> {
    if s.is_empty() || (is_resource(s)) {
        Ok(s)
    } else {
        Err(StatusError::bad_request(format!(
            "invalid subresource {:?}",
            s.chars().take(64).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_every_shape() {
        let k = ResourceKey::parse("/core/v1/services/null/null").unwrap();
        assert_eq!((k.group.as_str(), k.resource.as_str()), ("", "services"));
        assert_eq!((&k.namespace, &k.name), (&None, &None));
        assert_eq!(k.collection_path(true), "/api/v1/services");
        let k = ResourceKey::parse("/discovery.k8s.io/v1/endpointslices/kube-system/null").unwrap();
        assert_eq!(
            k.collection_path(true),
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
        );
        let k = ResourceKey::parse("/apps/v1/deployments/default/nginx").unwrap();
        assert_eq!(
            k.object_path(true, "scale").unwrap(),
            "/apis/apps/v1/namespaces/default/deployments/nginx/scale"
        );
        let k = ResourceKey::parse("/core/v1/namespaces/null/default").unwrap();
        assert_eq!(
            k.object_path(false, "").unwrap(),
            "/api/v1/namespaces/default"
        );
        let k = ResourceKey::parse("/rbac.authorization.k8s.io/v1/clusterroles/null/system:node")
            .unwrap();
        assert_eq!(k.name.as_deref(), Some("system:node"));
        // Tolerated: missing trailing segments.
        assert_eq!(ResourceKey::parse("/core/v1/pods").unwrap().namespace, None);
    }

    #[test]
    fn keys_that_would_change_the_url_are_refused() {
        for bad in [
            "core/v1/pods/null/null",
            "/core/v1/pods/../x",
            "/core/v1/pods/default/a%2Fb",
            "/core/v1/pods/default/a?watch=1",
            "/core/v1/pods/default/..",
            "/core/v1/pods/Default/x",
            "/core/v1/Pods/default/x",
            "/core/v1/pods/default/x/y",
            "/Bad_Group/v1/pods/null/null",
            "/core/v-1/pods/null/null",
            "/core/v1/pods/default/a b",
        ] {
            assert!(ResourceKey::parse(bad).is_err(), "{bad}");
        }
        assert!(subresource("status").is_ok());
        assert!(object_name("system:node").is_ok());
        assert!(object_name("../x").is_err() && object_name("a?b").is_err());
        assert!(subresource("../x").is_err());
    }

    #[test]
    fn a_name_that_bypassed_parsing_stays_one_path_segment() {
        let k = ResourceKey {
            group: String::new(),
            version: "v1".into(),
            resource: "secrets".into(),
            namespace: Some("ns/../kube-system".into()),
            name: Some("victim?x=1".into()),
        };
        assert_eq!(
            k.object_path(true, "").unwrap(),
            "/api/v1/namespaces/ns%2F..%2Fkube-system/secrets/victim%3Fx%3D1"
        );
        let dots = ResourceKey {
            name: Some("..".into()),
            namespace: Some("default".into()),
            ..k
        };
        assert_eq!(
            dots.object_path(true, "").unwrap(),
            "/api/v1/namespaces/default/secrets/%00"
        );
    }
}
