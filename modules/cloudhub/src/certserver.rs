//! The HTTPS certificate server (default `0.0.0.0:10002`, spec §5): CA download, edge
//! certificate signing, node check, task reports. Client certificates are requested but
//! verified here, so a bad one yields 401 rather than a TLS alert.

use std::any::Any;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::dev::Extensions;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use beehive::{Content, Message};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kubeedge_api::names;
use serde::Deserialize;
use tracing::{info, warn};

use crate::hub::Hub;

/// `/edge.crt` body limit (spec §7).
const CSR_LIMIT: usize = 1024 * 1024;
/// Task report body limit.
const TASK_LIMIT: usize = 3 * 1024 * 1024;

/// The client certificate chain presented on this connection (DER), if any.
#[derive(Clone, Debug)]
struct PeerChain(Vec<Vec<u8>>);

fn on_connect(conn: &dyn Any, ext: &mut Extensions) {
    if let Some(tls) = conn.downcast_ref::<TlsStream<actix_web::rt::net::TcpStream>>()
        && let Some(certs) = tls.get_ref().1.peer_certificates()
    {
        ext.insert(PeerChain(certs.iter().map(|c| c.to_vec()).collect()));
    }
}

fn text(status: actix_web::http::StatusCode, body: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .body(body.into())
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
        Ok(id) => id.node_name().map(str::to_owned).ok_or_else(|| {
            format!(
                "certificate subject {:?} {:?} is not an edge node",
                id.common_name, id.organizations
            )
        }),
        Err(e) => Err(e.to_string()),
    })
}

async fn ca_crt(hub: web::Data<Arc<Hub>>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .body(hub.ca().cert_der().to_vec())
}

async fn edge_crt(hub: web::Data<Arc<Hub>>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    use actix_web::http::StatusCode as S;
    let node = header(&req, "NodeName").unwrap_or_default();
    // spec §5.3: a client certificate takes precedence over a token.
    match cert_node(&hub, &req) {
        Some(Ok(cert_node)) if cert_node == node => {}
        Some(Ok(cert_node)) => {
            warn!(node = %node, cert_node = %cert_node, "edge.crt: certificate is for another node");
            return text(
                S::UNAUTHORIZED,
                format!("certificate is for node {cert_node:?}, not {node:?}"),
            );
        }
        Some(Err(e)) => {
            warn!(node = %node, error = %e, "edge.crt: client certificate rejected");
            return text(S::UNAUTHORIZED, format!("client certificate rejected: {e}"));
        }
        None => {
            let auth = header(&req, "Authorization").unwrap_or_default();
            let parts: Vec<&str> = auth.split(' ').collect();
            if parts.len() != 2 {
                warn!(node = %node, "edge.crt: no usable Authorization header");
                return text(
                    S::UNAUTHORIZED,
                    "Authorization header must be \"Bearer <token>\"",
                );
            }
            if let Err(e) = pki::verify_jwt(parts[1], hub.ca().key_der()) {
                warn!(node = %node, error = %e, "edge.crt: token rejected");
                return text(S::UNAUTHORIZED, format!("token rejected: {e}"));
            }
            // A token holder must not be able to take over a node that is connected now:
            // the node itself renews with its current certificate instead.
            if hub.registry.get(&node).is_some() {
                hub.counters
                    .token_refused_connected
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                warn!(
                    node = %node,
                    peer = ?req.peer_addr(),
                    "edge.crt: bootstrap token refused, the node is connected"
                );
                return text(
                    S::CONFLICT,
                    format!(
                        "node {node:?} is connected right now: a bootstrap token cannot issue its certificate while it is; \
                         the node renews with its current certificate, or disconnect (or delete) the node first"
                    ),
                );
            }
        }
    }
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
    let requested: Vec<i64> = match header(&req, "ExtKeyUsages").filter(|h| !h.trim().is_empty()) {
        None => Vec::new(),
        Some(h) => match serde_json::from_str(&h) {
            Ok(v) => v,
            Err(e) => {
                return text(
                    S::BAD_REQUEST,
                    format!("ExtKeyUsages is not a JSON array of integers: {e}"),
                );
            }
        },
    };
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

/// A tiny token bucket for `/node/{name}` (spec §9.13: keep it open, but rate-limit it).
#[derive(Debug)]
struct Bucket {
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    const RATE: f64 = 10.0;
    const BURST: f64 = 50.0;

    fn allow(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * Self::RATE).min(Self::BURST);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

async fn node_check(
    hub: web::Data<Arc<Hub>>,
    bucket: web::Data<Bucket>,
    name: web::Path<String>,
) -> HttpResponse {
    use actix_web::http::StatusCode as S;
    if !bucket.allow() {
        return text(S::TOO_MANY_REQUESTS, "too many requests");
    }
    let name = name.into_inner();
    if name.is_empty() {
        return text(S::BAD_REQUEST, "node name is empty");
    }
    let Some(client) = hub.kube.clone() else {
        // Without Kubernetes there are no Node objects: "not found" lets keadm join proceed.
        return text(
            S::NOT_FOUND,
            "Node not found (no Kubernetes API configured)",
        );
    };
    match Api::<Node>::all(client).get_opt(&name).await {
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

/// spec §9.13: a task report must come with a valid certificate of the node it is about.
fn authorize_node(
    hub: &Hub,
    req: &HttpRequest,
    node: &str,
) -> Result<(), (actix_web::http::StatusCode, String)> {
    use actix_web::http::StatusCode as S;
    match cert_node(hub, req) {
        Some(Ok(n)) if n == node => Ok(()),
        Some(Ok(n)) => Err((
            S::FORBIDDEN,
            format!("certificate of node {n:?} cannot report for {node:?}"),
        )),
        Some(Err(e)) => Err((S::UNAUTHORIZED, format!("client certificate rejected: {e}"))),
        None => Err((
            S::UNAUTHORIZED,
            "a client certificate of the node is required".into(),
        )),
    }
}

async fn to_taskmanager(hub: &Hub, msg: Message) -> HttpResponse {
    match hub.endpoint.send(names::TASKMANAGER, msg).await {
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
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let report: UpgradeReport = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return text(
                actix_web::http::StatusCode::BAD_REQUEST,
                format!("bad upgrade report: {e}"),
            );
        }
    };
    if let Err((status, why)) = authorize_node(&hub, &req, &report.NodeName) {
        return text(status, why);
    }
    let (event, action) = match report.Status.as_str() {
        "upgrade_success" => ("Upgrade", "Success"),
        "upgrade_failed_rollback_success" => ("Rollback", "Failure"),
        // sic (spec §5.2): upstream maps a failed rollback to Rollback/Success.
        "upgrade_failed_rollback_failed" => ("Rollback", "Success"),
        _ => ("Upgrade", "Failure"),
    };
    let content = serde_json::json!({
        "NodeName": report.NodeName, "Event": event, "Action": action,
        "Reason": report.Reason, "Time": beehive::now_millis() / 1000,
        "UpgradeID": report.UpgradeID, "HistoryID": report.HistoryID,
        "FromVersion": report.FromVersion, "ToVersion": report.ToVersion,
    });
    let msg = Message::new()
        .with_route(
            names::CLOUDHUB,
            names::CLOUDHUB,
            format!("task/{}/node/{}", report.UpgradeID, report.NodeName),
            "upgrade",
        )
        .with_content(Content::json(&content).unwrap_or_default());
    to_taskmanager(&hub, msg).await
}

async fn task_status(
    hub: web::Data<Arc<Hub>>,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let (task_type, task_id, node) = path.into_inner();
    if let Err((status, why)) = authorize_node(&hub, &req, &node) {
        return text(status, why);
    }
    let content: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return text(
                actix_web::http::StatusCode::BAD_REQUEST,
                format!("bad task status: {e}"),
            );
        }
    };
    let msg = Message::new()
        .with_route(
            names::CLOUDHUB,
            names::CLOUDHUB,
            format!("task/{task_id}/node/{node}"),
            task_type,
        )
        .with_content(Content::json(&content).unwrap_or_default());
    to_taskmanager(&hub, msg).await
}

/// Binds and starts the certificate server on the current actix system.
pub(crate) fn start(
    hub: Arc<Hub>,
    tls: rustls::ServerConfig,
) -> Result<(actix_web::dev::ServerHandle, SocketAddr), crate::Error> {
    let addr = hub.config.https.socket_addr();
    let bind_err = |source| crate::Error::Bind {
        addr: addr.clone(),
        source,
    };
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let bucket = web::Data::new(Bucket {
        state: Mutex::new((Bucket::BURST, Instant::now())),
    });
    let data = web::Data::new(hub);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(bucket.clone())
            .app_data(web::PayloadConfig::new(TASK_LIMIT))
            .route("/ca.crt", web::get().to(ca_crt))
            .service(
                web::resource("/edge.crt")
                    .app_data(web::PayloadConfig::new(CSR_LIMIT))
                    .route(web::get().to(edge_crt)),
            )
            .route("/node/{name}", web::get().to(node_check))
            .route("/nodeupgrade", web::post().to(node_upgrade))
            .route(
                "/task/{type}/name/{id}/node/{node}/status",
                web::post().to(task_status),
            )
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(2)
    .client_request_timeout(Duration::from_secs(30))
    .on_connect(on_connect)
    .listen_rustls_0_23(listener, tls)
    .map_err(bind_err)?
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    info!(addr = %local, "certificate server listening");
    Ok((handle, local))
}
