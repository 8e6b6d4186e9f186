//! HTTP towards REST targets (eventbus → rest) and towards the replica that holds a node's
//! session: certificate verification on by default (system roots), bounded answers and time.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tracing::warn;

/// How long establishing a connection may take (KubeEdge: 30 s).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No complete answer within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection or the exchange failed (including certificate verification).
    #[error("{0}")]
    Transport(String),
    /// The answer's body is larger than allowed.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
}

/// An answer: status, headers, body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Two clients: one verifying servers against the system's roots, one not (for endpoints that
/// opt out). Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Http {
    verified: HttpsClient,
    insecure: HttpsClient,
}

fn connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http
}

impl Http {
    pub(crate) fn new() -> Self {
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let verified = match builder.with_provider_and_native_roots(pki::tls::provider()) {
            Ok(b) => b.https_or_http().enable_http1().wrap_connector(connector()),
            Err(e) => {
                // Every https:// target then fails verification, and says so.
                warn!(error = %e, "no system CA certificates: https targets cannot be verified");
                let tls = rustls::ClientConfig::builder_with_provider(pki::tls::provider())
                    .with_safe_default_protocol_versions()
                    .map(|b| {
                        b.with_root_certificates(rustls::RootCertStore::empty())
                            .with_no_client_auth()
                    })
                    .unwrap_or_else(|_| pki::tls::insecure_client_config());
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(connector())
            }
        };
        let insecure = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(pki::tls::insecure_client_config())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector());
        Http {
            verified: Client::builder(TokioExecutor::new()).build(verified),
            insecure: Client::builder(TokioExecutor::new()).build(insecure),
        }
    }

    /// Sends `req` and reads the answer's body up to `limit` bytes, all within `timeout`.
    pub(crate) async fn send(
        &self,
        req: Request<Full<Bytes>>,
        insecure: bool,
        limit: usize,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        let client = if insecure {
            &self.insecure
        } else {
            &self.verified
        };
        let exchange = async {
            let resp = client
                .request(req)
                .await
                .map_err(|e| HttpError::Transport(error_chain(&e)))?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        HttpError::TooLarge(limit)
                    } else {
                        HttpError::Transport(e.to_string())
                    }
                })?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| HttpError::Timeout(timeout))?
    }
}

/// An error with its causes, `a: b: c` (hyper's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
