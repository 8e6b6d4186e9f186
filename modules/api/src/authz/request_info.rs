//! What a request to the API server does, read from the request itself as kube-apiserver's
//! RequestInfo resolver reads it (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
//!
//! The parse is strict where the resolver and the API server could read one URI two ways: a
//! path with an escape (`%`), an empty, `.` or `..` segment, a query with `;` or a broken
//! escape, or two values for `watch`, `labelSelector` or `fieldSelector` is refused rather than
//! guessed at. What passes is read exactly as the API server reads it, so a decision taken on
//! a [`RequestInfo`] is a decision on what the API server will do.

use std::fmt;

/// Values the API server reads from the first occurrence only; a second one is refused.
const SINGLE_VALUED: [&str; 3] = ["watch", "labelSelector", "fieldSelector"];
/// Longest URI accepted (the API server's own limit on a request line is larger; nothing
/// cloudcore sends for an edge comes near this).
pub const URI_MAX: usize = 16 << 10;

/// Why a request cannot be read as the API server would read it (answered `400`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    /// The request could not be built at all.
    #[error("cannot build the request: {0}")]
    Build(String),
    /// The URI has a scheme or authority, or is too long: only a path and a query are sent.
    #[error("the request URI is not a path with an optional query: {0:?}")]
    NotAPath(String),
    /// The path has an escape or an empty, `.` or `..` segment.
    #[error("the request path {0:?} has an escape or an empty, '.' or '..' segment")]
    Path(String),
    /// The query has `;`, a broken escape, or a repeated `watch`/`labelSelector`/`fieldSelector`.
    #[error("the request query is ambiguous: {0}")]
    Query(String),
    /// The request carries identity headers of its own (`Authorization`, `Impersonate-*`):
    /// who a request is made as is the authorizer's to say.
    #[error("the request carries an identity header: {0}")]
    Identity(String),
    /// The node name is not a DNS-1123 subdomain (a Node could not have it).
    #[error("node name {0:?} is not a DNS-1123 subdomain")]
    Node(String),
}

impl InvalidRequest {
    fn excerpt(s: &str) -> String {
        s.chars().take(256).collect()
    }
}

/// An unreadable request is the caller's `400 BadRequest`.
impl From<InvalidRequest> for crate::status::StatusError {
    fn from(e: InvalidRequest) -> Self {
        crate::status::StatusError::bad_request(e.to_string())
    }
}

/// A request as the authorizers see it, derived from its method and URI alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// True for `/api/<version>/…` and `/apis/<group>/<version>/…` paths naming a resource;
    /// false for discovery and other paths (`/api`, `/apis/<group>`, `/version`).
    pub is_resource: bool,
    /// The path as sent.
    pub path: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `proxy`; for a non-resource request, the lowercase HTTP method.
    pub verb: String,
    /// API group, `""` for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace, empty for cluster-scoped requests and requests across all namespaces.
    pub namespace: String,
    /// Resource, plural.
    pub resource: String,
    /// Subresource (`status`, `token`, …) or empty.
    pub subresource: String,
    /// The object's name: from the path, or for a list or watch from a field selector that
    /// requires `metadata.name` to equal it (the request then returns that object only).
    pub name: String,
    /// The label selector of a list, watch or deletecollection (first value, decoded).
    pub label_selector: String,
    /// The field selector of a list, watch or deletecollection (first value, decoded).
    pub field_selector: String,
}

impl fmt::Display for RequestInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_resource {
            return write!(f, "{} {}", self.verb, self.path);
        }
        write!(f, "{} ", self.verb)?;
        if !self.group.is_empty() {
            write!(f, "{}/", self.group)?;
        }
        write!(f, "{}/{}", self.version, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if !self.namespace.is_empty() {
            write!(f, " in {}", self.namespace)?;
        }
        if !self.name.is_empty() {
            write!(f, " named {:?}", self.name)?;
        }
        Ok(())
    }
}

/// True for a name the API server accepts as one path segment (`path.IsValidPathSegmentName`).
fn is_path_segment_name(s: &str) -> bool {
    s != "." && s != ".." && !s.contains(['/', '%'])
}

/// The value a field selector requires `field` to equal, as `fields.ParseSelector` and
/// `RequiresExactMatch` find it: the terms are sorted, each is split at its first operator
/// (`!=`, `==` or `=`), and the first `field=value` or `field==value` term wins. A selector
/// with escapes (`\`) is not read: no name is derived from it, so a decision on it is one on
/// a request without a name.
pub fn field_selector_requires(selector: &str, field: &str) -> Option<String> {
    if selector.contains('\\') || selector.is_empty() {
        return None;
    }
    let mut terms: Vec<&str> = selector.split(',').collect();
    terms.sort_unstable();
    terms.into_iter().find_map(|term| {
        let (lhs, op, rhs) = split_term(term)?;
        (lhs == field && op != "!=").then(|| rhs.to_owned())
    })
}

/// A field selector term split at its first operator (Go's `splitTerm`).
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        for op in ["!=", "==", "="] {
            if term[i..].starts_with(op) {
                return Some((&term[..i], op, &term[i + op.len()..]));
            }
        }
    }
    None
}

/// The path segments of `path`, or `None` when one is empty (other than a trailing `/`), `.`
/// or `..`, or the path has an escape or a character that ends a path.
fn segments(path: &str) -> Option<Vec<&str>> {
    if !path.starts_with('/')
        || path
            .bytes()
            .any(|b| !b.is_ascii_graphic() || matches!(b, b'%' | b'#' | b'?' | b'\\'))
    {
        return None;
    }
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Some(Vec::new());
    }
    let parts: Vec<&str> = trimmed.split('/').collect();
    parts
        .iter()
        .all(|p| !p.is_empty() && *p != "." && *p != "..")
        .then_some(parts)
}

/// The query's pairs, decoded, or why it cannot be read one way only.
fn query_pairs(query: &str) -> Result<Vec<(String, String)>, InvalidRequest> {
    if query.contains(';') {
        return Err(InvalidRequest::Query("';' in the query".into()));
    }
    let b = query.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err(InvalidRequest::Query("a broken '%' escape".into()));
        }
    }
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    for key in SINGLE_VALUED {
        if pairs.iter().filter(|(k, _)| k == key).count() > 1 {
            return Err(InvalidRequest::Query(format!("{key} given twice")));
        }
    }
    Ok(pairs)
}

impl RequestInfo {
    /// Reads `request` as kube-apiserver does. The URI must be a path with an optional query
    /// (cloudcore's client adds the server); identity headers are refused.
    pub fn of<B>(request: &http::Request<B>) -> Result<RequestInfo, InvalidRequest> {
        for name in request.headers().keys() {
            let n = name.as_str();
            if n == "authorization" || n.starts_with("impersonate-") {
                return Err(InvalidRequest::Identity(n.to_owned()));
            }
        }
        let uri = request.uri();
        let text = uri.to_string();
        if uri.scheme().is_some() || uri.authority().is_some() || text.len() > URI_MAX {
            return Err(InvalidRequest::NotAPath(InvalidRequest::excerpt(&text)));
        }
        Self::parse(
            request.method().as_str(),
            uri.path(),
            uri.query().unwrap_or(""),
        )
    }

    /// Reads a request of HTTP `method` on `path` with `query` (without `?`).
    pub fn parse(method: &str, path: &str, query: &str) -> Result<RequestInfo, InvalidRequest> {
        let parts =
            segments(path).ok_or_else(|| InvalidRequest::Path(InvalidRequest::excerpt(path)))?;
        let pairs = query_pairs(query)?;
        let first = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let mut info = RequestInfo {
            path: path.to_owned(),
            verb: method.to_ascii_lowercase(),
            ..RequestInfo::default()
        };
        // /api/<version>/… or /apis/<group>/<version>/…, and at least one part after.
        let rest = match parts.as_slice() {
            ["api", version, rest @ ..] if !rest.is_empty() => {
                info.version = (*version).to_owned();
                rest
            }
            ["apis", group, version, rest @ ..] if !rest.is_empty() => {
                info.group = (*group).to_owned();
                info.version = (*version).to_owned();
                rest
            }
            _ => return Ok(info),
        };
        info.is_resource = true;
        let mut rest = rest;
        if matches!(rest[0], "watch" | "proxy") {
            if rest.len() < 2 {
                return Err(InvalidRequest::Path(InvalidRequest::excerpt(path)));
            }
            info.verb = rest[0].to_owned();
            rest = &rest[1..];
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_owned();
        }
        if rest[0] == "namespaces" && rest.len() > 1 {
            info.namespace = rest[1].to_owned();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        match rest.len() {
            n if n >= 3 && info.verb != "proxy" => {
                info.subresource = rest[2].to_owned();
                info.name = rest[1].to_owned();
                info.resource = rest[0].to_owned();
            }
            n if n >= 2 => {
                info.name = rest[1].to_owned();
                info.resource = rest[0].to_owned();
            }
            _ => info.resource = rest[0].to_owned(),
        }
        if info.name.is_empty() && info.verb == "get" {
            let watch = first("watch")
                .is_some_and(|w| !matches!(w.to_ascii_lowercase().as_str(), "false" | "0"));
            info.verb = if watch { "watch" } else { "list" }.to_owned();
            if let Some(name) = first("fieldSelector")
                .and_then(|fs| field_selector_requires(fs, "metadata.name"))
                .filter(|n| is_path_segment_name(n))
            {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_owned();
        }
        if matches!(info.verb.as_str(), "list" | "watch" | "deletecollection") {
            info.field_selector = first("fieldSelector").unwrap_or_default().to_owned();
            info.label_selector = first("labelSelector").unwrap_or_default().to_owned();
        }
        Ok(info)
    }

    /// The request as a SubjectAccessReview's attributes.
    pub fn attributes(&self) -> crate::access::Attributes {
        crate::access::Attributes {
            verb: self.verb.clone(),
            group: self.group.clone(),
            version: self.version.clone(),
            resource: self.resource.clone(),
            subresource: self.subresource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            field_selector: self.field_selector.clone(),
            label_selector: self.label_selector.clone(),
        }
    }

    /// Whether this is `verb` on `resource` of `group` (any version), no subresource.
    pub fn is(&self, group: &str, resource: &str) -> bool {
        self.is_resource && self.group == group && self.resource == resource
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, uri: &str) -> RequestInfo {
        let req = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap();
        RequestInfo::of(&req).unwrap_or_else(|e| panic!("{uri}: {e}"))
    }

    fn refused(method: &str, uri: &str) -> InvalidRequest {
        let req = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap();
        RequestInfo::of(&req).expect_err(uri)
    }

    #[test]
    fn resource_requests_read_as_the_api_server_reads_them() {
        let i = info("GET", "/api/v1/namespaces/ns/secrets/s");
        assert_eq!(
            (i.verb.as_str(), i.namespace.as_str(), i.resource.as_str()),
            ("get", "ns", "secrets")
        );
        assert_eq!((i.name.as_str(), i.group.as_str()), ("s", ""));
        let i = info("GET", "/api/v1/namespaces/ns/secrets");
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("list", ""));
        let i = info(
            "GET",
            "/api/v1/namespaces/ns/secrets?watch=true&labelSelector=a%3Db",
        );
        assert_eq!(
            (i.verb.as_str(), i.label_selector.as_str()),
            ("watch", "a=b")
        );
        let i = info("GET", "/api/v1/watch/namespaces/ns/pods");
        assert_eq!((i.verb.as_str(), i.resource.as_str()), ("watch", "pods"));
        let i = info("PATCH", "/api/v1/nodes/e1/status");
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.name.as_str()),
            ("patch", "nodes", "e1")
        );
        assert_eq!(
            (i.subresource.as_str(), i.namespace.as_str()),
            ("status", "")
        );
        let i = info("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token");
        assert_eq!(
            (i.verb.as_str(), i.name.as_str(), i.subresource.as_str()),
            ("create", "sa", "token")
        );
        let i = info("DELETE", "/apis/apps/v1/namespaces/ns/deployments");
        assert_eq!(
            (i.verb.as_str(), i.group.as_str()),
            ("deletecollection", "apps")
        );
        let i = info("PUT", "/api/v1/namespaces/ns/status");
        assert_eq!(
            (i.resource.as_str(), i.name.as_str(), i.subresource.as_str()),
            ("namespaces", "ns", "status")
        );
        let i = info("GET", "/api/v1/namespaces/ns");
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.name.as_str()),
            ("get", "namespaces", "ns")
        );
        assert_eq!(i.namespace, "ns");
    }

    #[test]
    fn a_list_names_the_object_its_field_selector_requires() {
        let i = info(
            "GET",
            "/api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%3Ds1%2Ctype%3Dx",
        );
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("list", "s1"));
        assert_eq!(i.field_selector, "metadata.name=s1,type=x");
        let i = info(
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3D%3De1&watch=1",
        );
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("watch", ""));
        assert_eq!(i.field_selector, "spec.nodeName==e1");
        for fs in [
            "metadata.name!%3Ds1",
            "metadata.name%3Da%5C%2Cb",
            "metadata.name%3D..",
        ] {
            let i = info("GET", &format!("/api/v1/secrets?fieldSelector={fs}"));
            assert_eq!(i.name, "", "{fs}");
        }
    }

    #[test]
    fn non_resource_requests_are_paths() {
        for p in [
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/apis/",
        ] {
            let i = info("GET", p);
            assert!(!i.is_resource, "{p}");
            assert_eq!(i.verb, "get");
        }
    }

    #[test]
    fn uris_that_could_read_two_ways_are_refused() {
        for uri in [
            "/apis/../metrics",
            "/api/v1/namespaces/ns/secrets/..",
            "/api/v1/namespaces/ns/secrets/a%2Fb",
            "/api/v1//secrets",
            "/api/v1/./secrets",
        ] {
            assert!(
                matches!(refused("GET", uri), InvalidRequest::Path(_)),
                "{uri}"
            );
        }
        for uri in [
            "/api/v1/secrets?fieldSelector=a%3Db&fieldSelector=c%3Dd",
            "/api/v1/secrets?watch=1&watch=0",
            "/api/v1/secrets?a=b;c=d",
            "/api/v1/secrets?labelSelector=%zz",
        ] {
            assert!(
                matches!(refused("GET", uri), InvalidRequest::Query(_)),
                "{uri}"
            );
        }
        assert!(matches!(
            refused("GET", "https://evil.example/api/v1/secrets"),
            InvalidRequest::NotAPath(_)
        ));
        let req = http::Request::get("/api/v1/nodes/e1")
            .header("Impersonate-User", "admin")
            .body(())
            .unwrap();
        assert!(matches!(
            RequestInfo::of(&req),
            Err(InvalidRequest::Identity(_))
        ));
    }

    #[test]
    fn exact_name_requirements_are_found_as_the_api_server_finds_them() {
        let name = |fs: &str| field_selector_requires(fs, "metadata.name");
        assert_eq!(name("a=b,metadata.name==x").as_deref(), Some("x"));
        assert_eq!(name("metadata.name!=x"), None);
        assert_eq!(name(""), None);
        // The terms are sorted before the first requirement is taken.
        assert_eq!(
            name("metadata.name=used,metadata.name=private").as_deref(),
            Some("private")
        );
        // Split at the first operator: the value holds the rest.
        assert_eq!(name("metadata.name=a!=b").as_deref(), Some("a!=b"));
        assert_eq!(name("metadata.name!=a=b"), None);
    }
}
