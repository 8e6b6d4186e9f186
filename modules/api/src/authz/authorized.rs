//! [`Authorized`]: a request to the API server that an authorization decision allowed, the
//! only thing [`NodeClient`](crate::client::NodeClient) sends.

use std::future::Future;

use serde::de::DeserializeOwned;

use super::request_info::{InvalidRequest, RequestInfo};
use crate::validation;

/// Whose identity an authorized request is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Decided in process; sent as the node (`system:node:<name>`, group `system:nodes`)
    /// when the client impersonates, so the API server's Node authorizer and NodeRestriction
    /// decide it again, otherwise as cloudcore.
    Node,
    /// Left to the API server: sent only as the node, and refused by a client that does not
    /// impersonate (the API server is then the one that decides it).
    Delegated,
    /// cloudcore's own, never impersonated: for what KubeEdge's edge needs that a kubelet may
    /// not do (its role labels at registration, device twins), allowed by a rule that names it.
    Cloudcore,
}

/// One request an edge node wants made, as a [`Policy`] sees it: the node, what the request
/// does ([`RequestInfo`], read from the request) and its body.
#[derive(Debug)]
pub struct EdgeRequest<'a> {
    node: &'a str,
    info: &'a RequestInfo,
    request: &'a http::Request<Vec<u8>>,
}

impl<'a> EdgeRequest<'a> {
    /// The node the request is made for (from its verified connection).
    pub fn node(&self) -> &'a str {
        self.node
    }

    /// What the request does.
    pub fn info(&self) -> &'a RequestInfo {
        self.info
    }

    /// The body as it will be sent.
    pub fn body(&self) -> &'a [u8] {
        self.request.body()
    }

    /// The body's media type (`application/strategic-merge-patch+json`, …), if any.
    pub fn content_type(&self) -> Option<&'a str> {
        self.request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    /// The body as JSON `T`; `None` when it is not (a policy then refuses).
    pub fn json<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(self.request.body()).ok()
    }
}

/// Decides the requests made for edge nodes. Implementations live with the caches their rules
/// read (the edgecontroller's pods, the devicecontroller's devices) or ask the API server
/// (SubjectAccessReviews); [`authorize`] is the only way to call one.
pub trait Policy: Sync {
    /// A refusal, in the caller's own terms; an unreadable request is one too.
    type Error: From<InvalidRequest>;

    /// Whether `request` may be made for its node, and as whom. It is decided on exactly what
    /// will be sent: the attributes come from the request, never from the caller.
    fn decide(
        &self,
        request: &EdgeRequest<'_>,
    ) -> impl Future<Output = Result<Act, Self::Error>> + Send;
}

/// A request to the API server that `policy` allowed for `node`, with the identity to send it
/// as. Only [`authorize`] makes one, and it cannot be changed afterwards: what is sent is what
/// was decided.
///
/// A handler cannot build one by hand (the fields are private):
///
/// ```compile_fail,E0451
/// use kubeedge_api::authz::{Act, Authorized, RequestInfo};
/// let request = http::Request::get("/api/v1/namespaces/kubeedge/secrets").body(Vec::new()).unwrap();
/// let forged = Authorized {
///     node: "edge-1".to_owned(),
///     info: RequestInfo::default(),
///     act: Act::Cloudcore,
///     request,
/// };
/// ```
///
/// It gets one from a decision:
///
/// ```
/// use kubeedge_api::authz::{Act, EdgeRequest, InvalidRequest, Policy, authorize};
///
/// /// Nodes may read their own Node and nothing else.
/// struct OwnNode;
/// #[derive(Debug)]
/// struct Refused(String);
/// impl From<InvalidRequest> for Refused {
///     fn from(e: InvalidRequest) -> Self {
///         Refused(e.to_string())
///     }
/// }
/// impl Policy for OwnNode {
///     type Error = Refused;
///     async fn decide(&self, r: &EdgeRequest<'_>) -> Result<Act, Refused> {
///         let i = r.info();
///         if i.is("", "nodes") && i.verb == "get" && i.name == r.node() {
///             Ok(Act::Node)
///         } else {
///             Err(Refused(format!("{i} is not allowed")))
///         }
///     }
/// }
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let own = http::Request::get("/api/v1/nodes/edge-1").body(Vec::new());
/// let a = authorize(&OwnNode, "edge-1", own.map_err(Into::into)).await.unwrap();
/// assert_eq!(a.info().name, "edge-1");
/// let other = http::Request::get("/api/v1/nodes/edge-2").body(Vec::new());
/// assert!(authorize(&OwnNode, "edge-1", other.map_err(Into::into)).await.is_err());
/// # });
/// ```
#[derive(Debug)]
pub struct Authorized {
    node: String,
    info: RequestInfo,
    act: Act,
    request: http::Request<Vec<u8>>,
}

impl Authorized {
    /// The node the request was allowed for.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What the request does (what was decided).
    pub fn info(&self) -> &RequestInfo {
        &self.info
    }

    /// Whose identity it is sent with.
    pub fn act(&self) -> Act {
        self.act
    }

    /// The request, for the client that sends it.
    pub(crate) fn into_request(self) -> (String, Act, http::Request<Vec<u8>>) {
        (self.node, self.act, self.request)
    }
}

/// Builds a request's error into [`InvalidRequest`] (kube's request builders return one).
impl From<kube::core::request::Error> for InvalidRequest {
    fn from(e: kube::core::request::Error) -> Self {
        InvalidRequest::Build(e.to_string())
    }
}

/// Impossible for a request built by `http`'s builder to fail here; kept for callers that
/// build with it.
impl From<http::Error> for InvalidRequest {
    fn from(e: http::Error) -> Self {
        InvalidRequest::Build(e.to_string())
    }
}

/// Decides `request` for `node` with `policy`: the request is read as the API server will read
/// it ([`RequestInfo::of`]) and the policy decides on that; on success the request and the
/// decision travel together as an [`Authorized`] no one can change.
///
/// Refused before the policy sees it: a node name that is not a DNS-1123 subdomain, a request
/// that does not build, and one that could be read two ways ([`InvalidRequest`]).
pub async fn authorize<P: Policy>(
    policy: &P,
    node: &str,
    request: Result<http::Request<Vec<u8>>, InvalidRequest>,
) -> Result<Authorized, P::Error> {
    if !validation::is_dns1123_subdomain(node) {
        return Err(InvalidRequest::Node(node.chars().take(253).collect()).into());
    }
    let request = request?;
    let info = RequestInfo::of(&request)?;
    let act = policy
        .decide(&EdgeRequest {
            node,
            info: &info,
            request: &request,
        })
        .await?;
    Ok(Authorized {
        node: node.to_owned(),
        info,
        act,
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allows everything as the node: what is tested is what `authorize` does around it.
    struct Anything;
    impl Policy for Anything {
        type Error = InvalidRequest;
        async fn decide(&self, _: &EdgeRequest<'_>) -> Result<Act, InvalidRequest> {
            Ok(Act::Node)
        }
    }

    fn get(uri: &str) -> Result<http::Request<Vec<u8>>, InvalidRequest> {
        Ok(http::Request::get(uri).body(Vec::new())?)
    }

    #[tokio::test]
    async fn the_decision_is_on_the_uri_as_sent() {
        let a = authorize(&Anything, "e1", get("/api/v1/nodes/e1?x=1"))
            .await
            .unwrap();
        assert_eq!(a.info().name, "e1");
        assert_eq!(a.act(), Act::Node);
        let (_, _, req) = a.into_request();
        assert_eq!(req.uri(), "/api/v1/nodes/e1?x=1");
    }

    #[tokio::test]
    async fn bad_node_names_and_ambiguous_requests_never_reach_the_policy() {
        for node in ["victim?", "Victim", "a/b", ""] {
            let e = authorize(&Anything, node, get("/api/v1/nodes/x"))
                .await
                .unwrap_err();
            assert!(matches!(e, InvalidRequest::Node(_)), "{node}");
        }
        let e = authorize(&Anything, "e1", get("/apis/../metrics"))
            .await
            .unwrap_err();
        assert!(matches!(e, InvalidRequest::Path(_)));
    }
}
