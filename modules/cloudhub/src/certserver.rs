//! The HTTPS certificate server (default `0.0.0.0:10002`): CA download, edge certificate
//! signing, node check, task reports. Client certificates are requested but verified here, so
//! a bad one yields 401 rather than a TLS alert.
//!
//! Every handler decides from the request head and the TLS identity before it reads a byte
//! of body; a body then has `requestTimeoutSeconds` to arrive.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_http::HttpService;
use actix_service::map_config;
use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::dev::{AppConfig, Extensions};
use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, web};
use beehive::{Content, Message};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kubeedge_api::escaped;
use kubeedge_api::listener::{Admission, Gate};
use kubeedge_api::names;
use serde::Deserialize;
use tracing::{debug, info, warn};

use crate::metrics::HubMetrics;
use crate::state::Hub;
use crate::tls_accept::{Gated, gated_https};

/// The `listener` label of the certificate server's admission counters.
pub(crate) const LISTENER: &str = "cloudhub_https";

/// `/edge.crt` body limit.
const CSR_LIMIT: usize = 1024 * 1024;
/// Task report body limit.
const TASK_LIMIT: usize = 3 * 1024 * 1024;

/// What every handler shares besides the hub.
#[derive(Debug)]
struct Shared {
    metrics: Arc<HubMetrics>,
    node_checks: NodeCheckLimiter,
    request_timeout: Option<Duration>,
}

/// The client certificate chain presented on this connection (DER), if any.
#[derive(Clone, Debug)]
struct PeerChain(Vec<Vec<u8>>);

/// This connection's admission, to mark it authenticated.
#[derive(Clone, Debug)]
struct ConnAdmission(Arc<Admission>);

fn on_connect(tls: &TlsStream<Gated>, ext: &mut Extensions) {
    ext.insert(ConnAdmission(tls.get_ref().0.admission().clone()));
    if let Some(certs) = tls.get_ref().1.peer_certificates() {
        ext.insert(PeerChain(certs.iter().map(|c| c.to_vec()).collect()));
    }
}

/// The request carried valid credentials: its connection leaves the listener's
/// unauthenticated counts and its pre-authentication deadline.
fn authenticated(req: &HttpRequest) {
    if let Some(a) = req.conn_data::<ConnAdmission>() {
        a.0.authenticated();
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .body(body.into())
}

/// A refusal decided before the body was read: counted, and the connection is closed
/// rather than drained, so an unread upload costs nothing more.
fn unauthorized(
    shared: &Shared,
    status: StatusCode,
    body: impl Into<String>,
    payload: web::Payload,
) -> HttpResponse {
    shared.metrics.cert_unauthorized.inc();
    unread(status, body, payload)
}

/// A refusal's text, carrying the request's unread body until the text is sent.
struct Refusal {
    text: Option<web::Bytes>,
    len: u64,
    _unread: web::Payload,
}

impl actix_web::body::MessageBody for Refusal {
    type Error = std::convert::Infallible;

    fn size(&self) -> actix_web::body::BodySize {
        actix_web::body::BodySize::Sized(self.len)
    }

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<web::Bytes, Self::Error>>> {
        std::task::Poll::Ready(self.get_mut().text.take().map(Ok))
    }
}

/// A refusal that leaves the body unread. The connection is closed rather than drained:
/// actix drains a dropped chunked body before it reads the next request (a stalled one for
/// ever), but closes a connection whose body is still held when the response ends, so the
/// body rides on the response until then.
fn unread(status: StatusCode, body: impl Into<String>, payload: web::Payload) -> HttpResponse {
    let text = web::Bytes::from(body.into());
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .force_close()
        .body(Refusal {
            len: text.len() as u64,
            text: Some(text),
            _unread: payload,
        })
}

/// Why a request body was not read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// Declared or actual size over the route's limit.
    #[error("request body is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body did not arrive within `requestTimeoutSeconds`.
    #[error("request body not received within {seconds} s")]
    TimedOut {
        /// The deadline.
        seconds: u64,
    },
    /// The connection failed or the body was malformed.
    #[error("reading the request body failed")]
    Read(#[source] actix_web::error::PayloadError),
}

impl Shared {
    /// Reads the body of an already authorized request: at most `limit` bytes, within the
    /// request deadline (counted from `started`, when the handler got the head). Failures
    /// come back as the response to send.
    async fn read_body(
        &self,
        req: &HttpRequest,
        mut payload: web::Payload,
        limit: usize,
        started: tokio::time::Instant,
    ) -> Result<web::Bytes, HttpResponse> {
        let declared = req
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let result = {
            let read = async {
                if declared.is_some_and(|n| n > limit as u64) {
                    return Err(BodyError::TooLarge { limit });
                }
                let mut body = web::BytesMut::new();
                while let Some(chunk) = payload.next().await {
                    let chunk = chunk.map_err(BodyError::Read)?;
                    if body.len() + chunk.len() > limit {
                        return Err(BodyError::TooLarge { limit });
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(body.freeze())
            };
            match self.request_timeout {
                None => read.await,
                Some(t) => tokio::time::timeout_at(started + t, read)
                    .await
                    .unwrap_or(Err(BodyError::TimedOut {
                        seconds: t.as_secs(),
                    })),
            }
        };
        result.map_err(|e| {
            let status = match &e {
                BodyError::TooLarge { .. } => {
                    self.metrics.cert_too_large.inc();
                    StatusCode::PAYLOAD_TOO_LARGE
                }
                BodyError::TimedOut { .. } => {
                    self.metrics.cert_request_timeouts.inc();
                    StatusCode::REQUEST_TIMEOUT
                }
                BodyError::Read(_) => StatusCode::BAD_REQUEST,
            };
            warn!(path = req.path(), peer = ?req.peer_addr(), error = %e, "request body refused");
            unread(status, format!("{e}\n"), payload)
        })
    }
}

fn header(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Longest wait before signing so that a new certificate is dated after its node's
/// revocation (normally under a second; more means the revocation time is ahead of our clock).
const MAX_ISSUE_DELAY: Duration = Duration::from_secs(3);

/// Verifies the presented client certificate (chain, validity, clientAuth, not revoked) and
/// returns the node it is for.
fn cert_node(hub: &Hub, req: &HttpRequest) -> Option<Result<String, String>> {
    let chain = req.conn_data::<PeerChain>()?;
    let (leaf, rest) = chain.0.split_first()?;
    let verified = hub
        .ca()
        .verify_client_cert(leaf, rest)
        .and_then(|id| hub.revocations.check(leaf).map(|()| id));
    Some(match verified {
        Ok(id) => match id.node_name() {
            Some(node) => kubeedge_api::validation::node_name(node)
                .map(str::to_owned)
                .map_err(|e| format!("certificate names no valid node: {e}")),
            None => Err(format!(
                "certificate subject {:?} {:?} is not an edge node",
                id.common_name, id.organizations
            )),
        },
        Err(e) => Err(e.to_string()),
    })
}

async fn ca_crt(hub: web::Data<Arc<Hub>>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .body(hub.ca().cert_der().to_vec())
}

async fn edge_crt(
    hub: web::Data<Arc<Hub>>,
    shared: web::Data<Shared>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    use actix_web::http::StatusCode as S;
    let started = tokio::time::Instant::now();
    let node = header(&req, "NodeName").unwrap_or_default();
    // A node name becomes a certificate's identity and, through it, part of API paths and
    // object names: only a name Kubernetes accepts for a Node is ever signed.
    if let Err(e) = kubeedge_api::validation::node_name(&node) {
        warn!(node = %node.escape_debug(), peer = ?req.peer_addr(), "edge.crt: invalid node name refused");
        return unread(S::BAD_REQUEST, format!("NodeName header: {e}"), payload);
    }
    // As upstream: a client certificate takes precedence over a token.
    match cert_node(&hub, &req) {
        Some(Ok(cert_node)) if cert_node == node => authenticated(&req),
        Some(Ok(cert_node)) => {
            warn!(node = %node, cert_node = %cert_node, "edge.crt: certificate is for another node");
            return unauthorized(
                &shared,
                S::UNAUTHORIZED,
                format!("certificate is for node {cert_node:?}, not {node:?}"),
                payload,
            );
        }
        Some(Err(e)) => {
            warn!(node = %node, error = %e, "edge.crt: client certificate rejected");
            return unauthorized(
                &shared,
                S::UNAUTHORIZED,
                format!("client certificate rejected: {e}"),
                payload,
            );
        }
        None => {
            let auth = header(&req, "Authorization").unwrap_or_default();
            let parts: Vec<&str> = auth.split(' ').collect();
            if parts.len() != 2 {
                warn!(node = %node, "edge.crt: no usable Authorization header");
                return unauthorized(
                    &shared,
                    S::UNAUTHORIZED,
                    "Authorization header must be \"Bearer <token>\"",
                    payload,
                );
            }
            if let Err(e) = pki::verify_jwt(parts[1], hub.ca().key_der()) {
                warn!(node = %node, error = %e, "edge.crt: token rejected");
                return unauthorized(
                    &shared,
                    S::UNAUTHORIZED,
                    format!("token rejected: {e}"),
                    payload,
                );
            }
            // Read now, not cached: an invalidation must hold for every replica at once
            // (a read shared with the bootstraps waiting beside this one began after it came).
            let current = match &hub.kube {
                Some(client) => match hub.generation_reads.read(client).await {
                    Ok(g) => g,
                    Err(e) => {
                        warn!(node = %node, error = %e, "edge.crt: cannot read the token generation");
                        return unread(
                            S::SERVICE_UNAVAILABLE,
                            "the token generation cannot be read; retry later",
                            payload,
                        );
                    }
                },
                None => hub
                    .token_generation
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            };
            if pki::jwt_generation(parts[1]) != current {
                warn!(node = %node, peer = ?req.peer_addr(), "edge.crt: token of an invalidated generation refused");
                return unauthorized(
                    &shared,
                    S::UNAUTHORIZED,
                    "token rejected: it was invalidated (token generation changed); get the current token (keadm gettoken)",
                    payload,
                );
            }
            authenticated(&req);
            // A token holder must not be able to take over a node that is connected now:
            // the node itself renews with its current certificate instead.
            if hub.registry.get(&node).is_some() {
                hub.metrics.token_refused_connected.inc();
                warn!(
                    node = %node,
                    peer = ?req.peer_addr(),
                    "edge.crt: bootstrap token refused, the node is connected"
                );
                return unread(
                    S::CONFLICT,
                    format!(
                        "node {node:?} is connected right now: a bootstrap token cannot issue its certificate while it is; \
                         the node renews with its current certificate, or disconnect (or delete) the node first"
                    ),
                    payload,
                );
            }
        }
    }
    let requested: Vec<i64> = match header(&req, "ExtKeyUsages").filter(|h| !h.trim().is_empty()) {
        None => Vec::new(),
        Some(h) => match serde_json::from_str(&h) {
            Ok(v) => v,
            Err(e) => {
                return unread(
                    S::BAD_REQUEST,
                    format!("ExtKeyUsages is not a JSON array of integers: {e}"),
                    payload,
                );
            }
        },
    };
    let body = match shared.read_body(&req, payload, CSR_LIMIT, started).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let delay = hub.revocations.issue_delay(&node);
    if delay > MAX_ISSUE_DELAY {
        warn!(node = %node, wait_ms = delay.as_millis() as u64, "edge.crt: node revoked in the future (clock skew?)");
        return text(
            S::SERVICE_UNAVAILABLE,
            format!(
                "node {node:?} was revoked at a time ahead of this server's clock; retry later"
            ),
        );
    }
    if !delay.is_zero() {
        // X.509 times have whole seconds: wait so the certificate is dated after the
        // node's revocation, or it would be revoked at once.
        tokio::time::sleep(delay).await;
    }
    match hub
        .ca()
        .sign_edge_csr(&body, &node, &requested, &hub.sign_policy())
    {
        Ok(der) => {
            info!(node = %node, "edge certificate issued");
            HttpResponse::Ok()
                .content_type("application/octet-stream")
                .body(der)
        }
        Err(pki::Error::Refused(why)) => {
            warn!(node = %node, reason = %why, "edge.crt: request refused");
            text(S::FORBIDDEN, format!("certificate request refused: {why}"))
        }
        Err(e) => {
            warn!(node = %node, error = %e, "edge.crt: signing failed");
            text(
                S::INTERNAL_SERVER_ERROR,
                format!("failed to sign the certificate: {e}"),
            )
        }
    }
}

/// `/node/{name}` is open to anyone (keadm asks before it has credentials) and costs an API
/// server read, so each source address gets its own token bucket: one client draining its
/// bucket leaves every other client served. IPv6 addresses share a bucket per /64, which one
/// host usually holds whole.
#[derive(Debug, Default)]
struct NodeCheckLimiter {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(&self, now: Instant) -> f64 {
        (self.tokens
            + now.saturating_duration_since(self.at).as_secs_f64() * NodeCheckLimiter::RATE)
            .min(NodeCheckLimiter::BURST)
    }
}

impl NodeCheckLimiter {
    /// Checks per second per address once the burst is spent.
    const RATE: f64 = 10.0;
    /// Checks an address may make back to back.
    const BURST: f64 = 50.0;
    /// Addresses tracked at once: beyond it, full (idle) buckets are forgotten first, then
    /// the least recently used, so the table stays bounded whatever the sources.
    const MAX_ADDRESSES: usize = 4096;

    fn allow(&self, ip: IpAddr, now: Instant) -> bool {
        let key = kubeedge_api::listener::source(ip);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(&key) && buckets.len() >= Self::MAX_ADDRESSES {
            // A full bucket holds nothing a fresh one would not.
            buckets.retain(|_, b| b.refilled(now) < Self::BURST);
            if buckets.len() >= Self::MAX_ADDRESSES
                && let Some(oldest) = buckets.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| *k)
            {
                buckets.remove(&oldest);
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: Self::BURST,
            at: now,
        });
        bucket.tokens = bucket.refilled(now);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

async fn node_check(
    hub: web::Data<Arc<Hub>>,
    shared: web::Data<Shared>,
    req: HttpRequest,
    name: web::Path<String>,
) -> HttpResponse {
    use actix_web::http::StatusCode as S;
    let peer = req.peer_addr().map(|a| a.ip());
    if let Some(ip) = peer
        && !shared.node_checks.allow(ip, Instant::now())
    {
        shared.metrics.cert_rate_limited.inc();
        debug!(peer = %ip, "node check rate-limited");
        return text(S::TOO_MANY_REQUESTS, "too many requests");
    }
    let name = name.into_inner();
    if let Err(e) = kubeedge_api::validation::node_name(&name) {
        return text(S::BAD_REQUEST, e.to_string());
    }
    let Some(client) = hub.kube.clone() else {
        // Without Kubernetes there are no Node objects: "not found" lets keadm join proceed.
        return text(
            S::NOT_FOUND,
            "Node not found (no Kubernetes API configured)",
        );
    };
    match escaped::Api::<Node>::all(client).get_opt(&name).await {
        Ok(Some(_)) => text(S::OK, "Node found"),
        Ok(None) => text(S::NOT_FOUND, "Node not found"),
        Err(e) => {
            warn!(node = %name, error = %e, "node check failed");
            text(S::INTERNAL_SERVER_ERROR, "Failed to query node information")
        }
    }
}

/// `/nodeupgrade` body (Go field names).
#[derive(Debug, Deserialize, serde::Serialize)]
#[allow(non_snake_case)] // the wire names are Go's exported field names
struct UpgradeReport {
    #[serde(default)]
    UpgradeID: String,
    #[serde(default)]
    HistoryID: String,
    #[serde(default)]
    NodeName: String,
    #[serde(default)]
    FromVersion: String,
    #[serde(default)]
    ToVersion: String,
    #[serde(default)]
    Status: String,
    #[serde(default)]
    Reason: String,
}

/// A task report must come with a valid certificate of an edge node; returns that node.
fn reporting_node(hub: &Hub, req: &HttpRequest) -> Result<String, (StatusCode, String)> {
    match cert_node(hub, req) {
        Some(Ok(n)) => Ok(n),
        Some(Err(e)) => Err((
            StatusCode::UNAUTHORIZED,
            format!("client certificate rejected: {e}"),
        )),
        None => Err((
            StatusCode::UNAUTHORIZED,
            "a client certificate of the node is required".into(),
        )),
    }
}

/// A node may report only about itself.
fn same_node(cert: &str, node: &str) -> Result<(), (StatusCode, String)> {
    if cert == node {
        Ok(())
    } else {
        Err((
            StatusCode::FORBIDDEN,
            format!("certificate of node {cert:?} cannot report for {node:?}"),
        ))
    }
}

/// Hands a node's task report to the task manager as cloudhub sends it upstream (resource
/// `node/<node>/task/<id>/node/<node>`: the certificate's node in front, operation the task
/// type) and answers the edge.
async fn to_taskmanager(
    hub: &Hub,
    task_id: &str,
    node: &str,
    operation: &str,
    content: &serde_json::Value,
) -> HttpResponse {
    let msg = Message::new()
        .with_route(
            names::CLOUDHUB,
            names::CLOUDHUB,
            format!("node/{node}/task/{task_id}/node/{node}"),
            operation,
        )
        .with_content(Content::json(content).unwrap_or_default());
    match hub.edge.send(names::TASKMANAGER, msg).await {
        Ok(()) => text(actix_web::http::StatusCode::OK, "ok"),
        Err(e) => {
            warn!(error = %e, "task report not delivered");
            text(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("task manager unavailable: {e}"),
            )
        }
    }
}

async fn node_upgrade(
    hub: web::Data<Arc<Hub>>,
    shared: web::Data<Shared>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let started = tokio::time::Instant::now();
    // The node is named in the body: any valid edge certificate may send it, and the name
    // is checked against the certificate once read.
    let cert = match reporting_node(&hub, &req) {
        Ok(n) => n,
        Err((status, why)) => return unauthorized(&shared, status, why, payload),
    };
    authenticated(&req);
    let body = match shared.read_body(&req, payload, TASK_LIMIT, started).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let report: UpgradeReport = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("bad upgrade report: {e}")),
    };
    if let Err((status, why)) = same_node(&cert, &report.NodeName) {
        return text(status, why);
    }
    let (event, action) = match report.Status.as_str() {
        "upgrade_success" => ("Upgrade", "Success"),
        "upgrade_failed_rollback_success" => ("Rollback", "Failure"),
        // sic: upstream maps a failed rollback to Rollback/Success.
        "upgrade_failed_rollback_failed" => ("Rollback", "Success"),
        _ => ("Upgrade", "Failure"),
    };
    let content = serde_json::json!({
        "NodeName": report.NodeName, "Event": event, "Action": action,
        "Reason": report.Reason, "Time": beehive::now_millis() / 1000,
        "UpgradeID": report.UpgradeID, "HistoryID": report.HistoryID,
        "FromVersion": report.FromVersion, "ToVersion": report.ToVersion,
    });
    to_taskmanager(
        &hub,
        &report.UpgradeID,
        &report.NodeName,
        "upgrade",
        &content,
    )
    .await
}

async fn task_status(
    hub: web::Data<Arc<Hub>>,
    shared: web::Data<Shared>,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
    payload: web::Payload,
) -> HttpResponse {
    let started = tokio::time::Instant::now();
    let (task_type, task_id, node) = path.into_inner();
    if let Err((status, why)) = reporting_node(&hub, &req).and_then(|cert| same_node(&cert, &node))
    {
        return unauthorized(&shared, status, why, payload);
    }
    authenticated(&req);
    let body = match shared.read_body(&req, payload, TASK_LIMIT, started).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let content: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("bad task status: {e}")),
    };
    to_taskmanager(&hub, &task_id, &node, &task_type, &content).await
}

/// Binds the certificate server's listener and adds it to the hub's server (see
/// `HubHandle::start_servers`). The returned gate admits its connections (its stats are the
/// listener's metrics).
pub(crate) fn listen(
    builder: actix_server::ServerBuilder,
    hub: Arc<Hub>,
    mut tls: rustls::ServerConfig,
) -> Result<(actix_server::ServerBuilder, SocketAddr, Arc<Gate>), crate::Error> {
    let addr = hub.config.https.socket_addr();
    let bind_err = |source| crate::Error::Bind {
        addr: addr.clone(),
        source,
    };
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let gate = Gate::new(LISTENER, hub.config.https.limits.clone());
    // Served over HTTP/1.1 only.
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = Arc::new(tls);
    let head_timeout = gate.limits().pre_auth_timeout() + Duration::from_secs(5);
    let request_timeout = hub.config.https.request_timeout();
    let shared = web::Data::new(Shared {
        metrics: hub.metrics.clone(),
        node_checks: NodeCheckLimiter::default(),
        request_timeout,
    });
    let data = web::Data::new(hub);
    let factory_gate = gate.clone();
    let builder = builder
        .listen("cloudhub-https", listener, move || {
            let app = App::new()
                .app_data(data.clone())
                .app_data(shared.clone())
                .route("/ca.crt", web::get().to(ca_crt))
                .route("/edge.crt", web::get().to(edge_crt))
                .route("/node/{name}", web::get().to(node_check))
                .route("/nodeupgrade", web::post().to(node_upgrade))
                .route(
                    "/task/{type}/name/{id}/node/{node}/status",
                    web::post().to(task_status),
                );
            let http = HttpService::<TlsStream<Gated>, _, _, _, _>::build()
                .client_request_timeout(head_timeout)
                .client_disconnect_timeout(Duration::from_secs(1))
                .on_connect_ext(on_connect)
                .h1(map_config(app, |_| AppConfig::default()));
            gated_https(factory_gate.clone(), tls.clone(), http)
        })
        .map_err(bind_err)?;
    info!(addr = %local, limits = ?gate.limits(), request_timeout = ?request_timeout, "certificate server listening");
    Ok((builder, local, gate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn each_address_has_its_own_bucket() {
        let limiter = NodeCheckLimiter::default();
        let now = Instant::now();
        let burst = NodeCheckLimiter::BURST as usize;
        assert!((0..burst).all(|_| limiter.allow(v4(1), now)));
        assert!(!limiter.allow(v4(1), now), "the burst is spent");
        assert!(limiter.allow(v4(2), now), "another address is served");
        // Refills at RATE per second.
        assert!(limiter.allow(v4(1), now + Duration::from_millis(150)));
    }

    #[test]
    fn ipv6_hosts_share_a_bucket_per_64_and_mapped_ipv4_counts_as_ipv4() {
        let limiter = NodeCheckLimiter::default();
        let now = Instant::now();
        let a: IpAddr = "2001:db8:1:2::1".parse::<Ipv6Addr>().unwrap().into();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse::<Ipv6Addr>().unwrap().into();
        let other: IpAddr = "2001:db8:1:3::1".parse::<Ipv6Addr>().unwrap().into();
        for _ in 0..NodeCheckLimiter::BURST as usize {
            assert!(limiter.allow(a, now));
        }
        assert!(!limiter.allow(b, now));
        assert!(limiter.allow(other, now));
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
        assert_eq!(kubeedge_api::listener::source(mapped), v4(1));
    }

    #[test]
    fn the_table_stays_bounded_and_forgets_idle_buckets_before_drained_ones() {
        let limiter = NodeCheckLimiter::default();
        let start = Instant::now();
        let max = NodeCheckLimiter::MAX_ADDRESSES as u32;
        let addr = |i: u32| IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i));
        for i in 0..max - 1 {
            assert!(limiter.allow(addr(i), start));
        }
        // A second later the one-request buckets have refilled (idle); this one is drained.
        let later = start + Duration::from_secs(1);
        let drained = v4(1);
        while limiter.allow(drained, later) {}
        for i in max..max * 2 - 2 {
            assert!(limiter.allow(addr(i), later), "a new address is served");
        }
        assert!(
            !limiter.allow(drained, later),
            "the drained bucket was not forgotten in favour of new addresses"
        );
        // A flood of new addresses at once: the least recently used go.
        for i in max * 2..max * 4 {
            assert!(limiter.allow(addr(i), later));
        }
        let len = limiter.buckets.lock().unwrap().len();
        assert_eq!(len, NodeCheckLimiter::MAX_ADDRESSES);
    }
}
