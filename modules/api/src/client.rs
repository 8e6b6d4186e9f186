//! Kubernetes calls made on behalf of an edge node (KubeEdge's impersonation, cloudhub
//! `authorization.enable && !debug`).
//!
//! kube-rs sets impersonation per client; this adds the `Impersonate-User:
//! system:node:<id>` and `Impersonate-Group: system:nodes` headers per request instead, so one
//! client (one connection pool) serves every node. Failures come back as [`StatusError`], the
//! shape the edge decodes, with transport errors as `500 InternalError`.

use http::HeaderValue;
use serde::de::DeserializeOwned;

use crate::status::StatusError;

/// Who a request is made as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity<'a> {
    /// cloudcore's own credentials.
    Cloudcore,
    /// The edge node with this name (impersonated when impersonation is on).
    Node(&'a str),
}

/// A `kube::Client` plus the impersonation switch.
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
    /// Requests as [`Identity::Node`] carry impersonation headers only when `impersonate`.
    pub fn new(client: kube::Client, impersonate: bool) -> Self {
        NodeClient {
            client,
            impersonate,
        }
    }

    /// The underlying client (cloudcore's identity).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Whether node requests are impersonated.
    pub fn impersonates(&self) -> bool {
        self.impersonate
    }

    /// Sends `request` (built with `kube::core::Request`) as `identity` and decodes the
    /// answer. A node name that cannot be a header value is refused with `400 BadRequest`
    /// before anything is sent.
    pub async fn request<T: DeserializeOwned>(
        &self,
        identity: Identity<'_>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, StatusError> {
        let request = self.prepare(identity, request)?;
        self.client
            .request::<T>(request)
            .await
            .map_err(|e| StatusError::from_kube(&e))
    }

    /// [`NodeClient::request`] returning the body as the API server wrote it (successful
    /// answers only; failures are decoded into the [`StatusError`]).
    pub async fn request_text(
        &self,
        identity: Identity<'_>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<String, StatusError> {
        let request = self.prepare(identity, request)?;
        self.client
            .request_text(request)
            .await
            .map_err(|e| StatusError::from_kube(&e))
    }

    // The error is the shape the edge decodes, built only on failure paths.
    #[allow(clippy::result_large_err)]
    fn prepare(
        &self,
        identity: Identity<'_>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<http::Request<Vec<u8>>, StatusError> {
        let mut request =
            request.map_err(|e| StatusError::bad_request(format!("cannot build request: {e}")))?;
        if let (Identity::Node(node), true) = (identity, self.impersonate) {
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
