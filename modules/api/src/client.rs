//! Kubernetes calls made on behalf of an edge node: only [`Authorized`] requests, each sent
//! with the identity its decision named (KubeEdge's impersonation, cloudhub
//! `authorization.enable && !debug`).
//!
//! kube-rs sets impersonation per client; this adds the `Impersonate-User:
//! system:node:<id>` and `Impersonate-Group: system:nodes` headers per request instead, so one
//! client (one connection pool) serves every node. Failures come back as [`StatusError`], the
//! shape the edge decodes, with transport errors as `500 InternalError`.

use http::HeaderValue;
use serde::de::DeserializeOwned;

use crate::authz::{Act, Authorized};
use crate::status::StatusError;

/// A `kube::Client` that sends [`Authorized`] requests only, plus the impersonation switch.
///
/// It has no way to send anything else, so code that holds only a `NodeClient` cannot make an
/// API call for an edge that no decision allowed. cloudcore's own calls (caches, records,
/// lookups a decision needs) use a plain `kube::Client`.
#[derive(Clone)]
pub struct NodeClient {
    client: kube::Client,
    impersonate: bool,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("impersonate", &self.impersonate)
            .finish_non_exhaustive()
    }
}

impl NodeClient {
    /// Requests decided [`Act::Node`] carry impersonation headers only when `impersonate`.
    pub fn new(client: kube::Client, impersonate: bool) -> Self {
        NodeClient {
            client,
            impersonate,
        }
    }

    /// Whether requests decided [`Act::Node`] are impersonated.
    pub fn impersonates(&self) -> bool {
        self.impersonate
    }

    /// Whether a request decided `act` reaches the API server as the node (so the API
    /// server decides it too).
    pub fn as_node(&self, act: Act) -> bool {
        match act {
            Act::Node | Act::Delegated => self.impersonate,
            Act::Cloudcore => false,
        }
    }

    /// Sends `request` as its decision says and decodes the answer. A request left to the API
    /// server ([`Act::Delegated`]) is refused `500` by a client that does not impersonate:
    /// sent as cloudcore, nothing would have decided it.
    pub async fn send<T: DeserializeOwned>(&self, request: Authorized) -> Result<T, StatusError> {
        let request = self.prepare(request)?;
        self.client
            .request::<T>(request)
            .await
            .map_err(|e| StatusError::from_kube(&e))
    }

    /// [`NodeClient::send`] returning the body as the API server wrote it (successful
    /// answers only; failures are decoded into the [`StatusError`]).
    pub async fn send_text(&self, request: Authorized) -> Result<String, StatusError> {
        let request = self.prepare(request)?;
        self.client
            .request_text(request)
            .await
            .map_err(|e| StatusError::from_kube(&e))
    }

    // The error is the shape the edge decodes, built only on failure paths.
    #[allow(clippy::result_large_err)]
    fn prepare(&self, request: Authorized) -> Result<http::Request<Vec<u8>>, StatusError> {
        let (node, act, mut request) = request.into_request();
        if act == Act::Delegated && !self.impersonate {
            return Err(StatusError::internal(
                "a request left to the API server to decide cannot be sent as cloudcore",
            ));
        }
        if self.as_node(act) {
            // The node name is a DNS-1123 subdomain (`authorize` refuses others): always a
            // valid header value.
            let user = HeaderValue::from_str(&format!("system:node:{node}"))
                .map_err(|_| StatusError::bad_request(format!("invalid node name {node:?}")))?;
            let headers = request.headers_mut();
            headers.insert("Impersonate-User", user);
            headers.insert(
                "Impersonate-Group",
                HeaderValue::from_static("system:nodes"),
            );
        }
        Ok(request)
    }
}
