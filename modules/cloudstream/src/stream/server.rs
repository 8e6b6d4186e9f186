//! Accepts the API server's HTTPS connections, reads request heads, routes them, resolves the
//! node's session and hands over to the relays.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kubeedge_api::listener::{Admission, Gate};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::authz::{self, Authorizer, Caller, Decision};
use super::client_io::{Outcome, write_within};
use super::route::{Route, route};
use super::session_key::{self, SessionKey};
use super::{PodLocator, exec, relay};
use crate::listen::{accept_until, handshake};
use crate::tunnel::{Session, Shared};
use kubeedge_wire::gourl::GoUrl;
use kubeedge_wire::http1::{self, HttpError, RequestHead};
use kubeedge_wire::tunnel::ConnectRequest;
use kubeedge_wire::tunnel::MessageType;

/// Host the CONNECT URL names: the Go edge dials `URL.Host`, and upstream always sends this
/// (the Rust edge ignores it and dials its configured address).
const EDGE_KUBELET_HOST: &str = "127.0.0.1:10350";
/// How long a kept-alive connection may sit idle between requests.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// What request handling needs.
#[derive(Debug, Clone)]
pub(crate) struct StreamContext {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pods: Option<Arc<dyn PodLocator>>,
    pub(crate) authz: Arc<Authorizer>,
}

/// Accepts API server connections until `stop` fires, admitting each through `gate`.
pub(crate) async fn run(
    listener: TcpListener,
    tls: TlsAcceptor,
    ctx: StreamContext,
    gate: Arc<Gate>,
    stop: CancellationToken,
) {
    let keepalive = ctx.shared.tuning.tcp_keepalive;
    let tasks = ctx.shared.tasks.clone();
    accept_until(
        listener,
        &stop.clone(),
        &tasks,
        "stream",
        gate,
        keepalive,
        |tcp, peer, admission| {
            connection(tcp, peer, admission, tls.clone(), ctx.clone(), stop.clone())
        },
    )
    .await;
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    tls: TlsAcceptor,
    ctx: StreamContext,
    stop: CancellationToken,
) {
    let limit = ctx.shared.tuning.handshake_timeout;
    let mut buf = BytesMut::new();
    // TLS and the first request head must arrive within the listener's deadline.
    let first = admission
        .pre_auth(async {
            let mut conn = handshake(&tls, tcp, peer, limit, "stream").await?;
            let head = tokio::select! {
                _ = stop.cancelled() => return None,
                r = http1::read_request_head_within(&mut conn, &mut buf, limit) => r,
            };
            Some((conn, head))
        })
        .await;
    let Some(Some((mut conn, mut head))) = first else {
        return;
    };
    let caller = match Caller::from_certificate(
        conn.get_ref().1.peer_certificates().and_then(|c| c.first()),
    ) {
        Ok(caller) => caller,
        Err(reason) => {
            warn!(%peer, %reason, "stream client certificate names no user; refused");
            respond_status(&mut conn, &ctx, 401, "Unauthorized", &reason, "", false).await;
            let _ = conn.shutdown().await;
            return;
        }
    };
    let mut first = true;
    loop {
        if !first {
            head = tokio::select! {
                _ = stop.cancelled() => break,
                r = http1::read_request_head_within(&mut conn, &mut buf, IDLE_TIMEOUT) => r,
            };
        }
        let head = match std::mem::replace(&mut head, Err(HttpError::Timeout)) {
            Ok(h) => h,
            Err(HttpError::Eof { partial: false }) | Err(HttpError::Timeout) => break,
            Err(e @ (HttpError::TooLarge | HttpError::Malformed(_))) => {
                debug!(%peer, error = %e, "bad request head");
                let status = if matches!(e, HttpError::TooLarge) {
                    431
                } else {
                    400
                };
                respond(&mut conn, &ctx, status, &e.to_string(), false).await;
                break;
            }
            Err(e) => {
                debug!(%peer, error = %e, "request head not read");
                break;
            }
        };
        if first {
            // The certificate verified during TLS and a well-formed head arrived.
            admission.authenticated();
            first = false;
        }
        if handle(&mut conn, &mut buf, head, &ctx, &caller).await == Outcome::Close {
            break;
        }
    }
    let _ = conn.shutdown().await;
}

async fn respond<S: AsyncWrite + Unpin>(
    conn: &mut S,
    ctx: &StreamContext,
    status: u16,
    text: &str,
    keep_alive: bool,
) -> Outcome {
    if status >= 400 {
        ctx.shared.metrics.request_refused();
    }
    write_response(
        conn,
        ctx,
        &http1::text_response(status, text, !keep_alive),
        keep_alive,
    )
    .await
}

/// Writes a whole response within the write timeout; the connection stays open only when
/// asked and the write worked.
async fn write_response<S: AsyncWrite + Unpin>(
    conn: &mut S,
    ctx: &StreamContext,
    response: &[u8],
    keep_alive: bool,
) -> Outcome {
    let ok = write_within(conn, response, &ctx.shared).await;
    if ok && keep_alive {
        Outcome::KeepAlive
    } else {
        Outcome::Close
    }
}

/// A Kubernetes `Status` failure body, as the API server and kubelets send them.
async fn respond_status<S: AsyncWrite + Unpin>(
    conn: &mut S,
    ctx: &StreamContext,
    code: u16,
    reason: &str,
    message: &str,
    node: &str,
    keep_alive: bool,
) -> Outcome {
    ctx.shared.metrics.request_refused();
    let mut status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    if !node.is_empty() {
        status["details"] = serde_json::json!({"name": node, "kind": "nodes"});
    }
    let response = http1::json_response(code, &status.to_string(), !keep_alive);
    write_response(conn, ctx, &response, keep_alive).await
}

/// Authorizes `caller` for the request against `node` (unknown: `None`). `Err` is the
/// response already written (403 on a denial, 500 when the API server could not answer).
async fn authorize<S: AsyncWrite + Unpin>(
    conn: &mut S,
    ctx: &StreamContext,
    caller: &Caller,
    head: &RequestHead,
    node: Option<&str>,
    keep_alive: bool,
) -> Result<(), Outcome> {
    let attrs = authz::attributes(&head.method, head.path(), node);
    let described = format!(
        "user={}, verb={}, resource=nodes, subresource={}",
        caller.user, attrs.verb, attrs.subresource
    );
    match ctx
        .authz
        .authorize(caller, &attrs, &ctx.shared.metrics)
        .await
    {
        Ok(Decision::Allow) => Ok(()),
        Ok(Decision::Deny { reason }) => {
            ctx.shared.metrics.authz_denied();
            warn!(
                user = %caller.user,
                groups = ?caller.groups,
                verb = attrs.verb,
                subresource = attrs.subresource,
                node = %attrs.node,
                path = %head.path(),
                %reason,
                "stream request forbidden"
            );
            let mut message = format!("Forbidden ({described})");
            if !reason.is_empty() {
                message.push_str(": ");
                message.push_str(&reason);
            }
            Err(respond_status(
                conn,
                ctx,
                403,
                "Forbidden",
                &message,
                &attrs.node,
                keep_alive,
            )
            .await)
        }
        Err(e) => {
            warn!(user = %caller.user, node = %attrs.node, path = %head.path(), error = %e, "stream request authorization failed");
            let message = format!("Authorization error ({described}): {e}");
            Err(respond_status(
                conn,
                ctx,
                500,
                "InternalError",
                &message,
                &attrs.node,
                keep_alive,
            )
            .await)
        }
    }
}

/// Errors that end a request before any relaying, with the status they get.
enum Refusal {
    Status(u16, String),
}

async fn node_of_pod(ctx: &StreamContext, namespace: &str, pod: &str) -> Result<String, Refusal> {
    let Some(pods) = &ctx.pods else {
        return Err(Refusal::Status(500, "can not get kube client".into()));
    };
    pods.node_of(namespace, pod).await.map_err(|e| {
        use super::LocateError::*;
        let status = match e {
            NotFound { .. } => 404,
            Unscheduled { .. } => 409,
            Unavailable(_) => 500,
        };
        Refusal::Status(status, e.to_string())
    })
}

fn no_tunnel(key: &str) -> Refusal {
    Refusal::Status(
        503,
        format!(
            "node {key} has no tunnel to cloudstream: the edge is offline or its edgeStream is disabled"
        ),
    )
}

/// The node a request is for and its session. A node name (a pod's `spec.nodeName`, the
/// node of a node-proxy URI) is looked up among names only, never among IPs; a `Host` that
/// is an IP address is looked up among internal IPs only, and a `Host` that is not an IP
/// is a hostname, looked up among names.
fn target(ctx: &StreamContext, key: SessionKey) -> (Option<String>, Result<Arc<Session>, Refusal>) {
    let name = match key {
        SessionKey::Host(host) => match host.parse::<std::net::IpAddr>() {
            Ok(ip) => {
                return match ctx.shared.registry.by_ip(ip.to_canonical()) {
                    Some(s) => (Some(s.node.clone()), Ok(s)),
                    None => (None, Err(no_tunnel(&host))),
                };
            }
            Err(_) => host,
        },
        SessionKey::Node(name) => name,
    };
    // A name no Node can have (a caller chose it) reaches neither the registry nor a review:
    // the caller then needs the right on every node.
    if !kubeedge_api::validation::is_dns1123_subdomain(&name) {
        return (
            None,
            Err(Refusal::Status(
                400,
                "the node name is not a DNS-1123 subdomain".into(),
            )),
        );
    }
    let session = ctx
        .shared
        .registry
        .by_node(&name)
        .ok_or_else(|| no_tunnel(&name));
    (Some(name), session)
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    buf: &mut BytesMut,
    head: RequestHead,
    ctx: &StreamContext,
    caller: &Caller,
) -> Outcome {
    // A body we do not read would be taken for the next request: only reuse bodiless ones.
    let keep_alive = head.keep_alive() && head.content_length() == Some(0);
    // As in the kubelet, every request is authorized before anything else is said about it;
    // when the node is unknown (no route, unknown pod, no tunnel) the caller needs the right
    // on every node to see why.
    let r = match route(&head.method, head.path()) {
        Ok(r) => r,
        Err(e) => {
            if let Err(done) = authorize(conn, ctx, caller, &head, None, keep_alive).await {
                return done;
            }
            return respond(conn, ctx, e.status(), e.text(), keep_alive).await;
        }
    };
    let resolved = async {
        Ok::<_, Refusal>(match &r {
            Route::Logs { namespace, pod } => {
                let node = node_of_pod(ctx, namespace, pod).await?;
                (
                    MessageType::LogsConnect,
                    target(ctx, SessionKey::Node(node)),
                )
            }
            Route::Exec {
                attach,
                namespace,
                pod,
            } => {
                let kind = if *attach {
                    MessageType::AttachConnect
                } else {
                    MessageType::ExecConnect
                };
                let node = node_of_pod(ctx, namespace, pod).await?;
                (kind, target(ctx, SessionKey::Node(node)))
            }
            Route::Metrics => {
                let key = session_key::session_key(&head).ok_or_else(|| {
                    Refusal::Status(400, "no Host header to find the node by".into())
                })?;
                (MessageType::MetricConnect, target(ctx, key))
            }
        })
    }
    .await;
    let node = match &resolved {
        Ok((_, (node, _))) => node.as_deref(),
        Err(_) => None,
    };
    if let Err(done) = authorize(conn, ctx, caller, &head, node, keep_alive).await {
        return done;
    }
    let url = match GoUrl::from_request_target(&head.target, "http", EDGE_KUBELET_HOST) {
        Ok(u) => u,
        Err(e) => return respond(conn, ctx, 400, &e.to_string(), keep_alive).await,
    };
    let prepared = async {
        let (kind, (_, session)) = resolved?;
        let session = session?;
        if kind != MessageType::LogsConnect
            && kind != MessageType::MetricConnect
            && !head.headers.contains_ci("Connection", "upgrade")
        {
            return Err(Refusal::Status(500, "request was not an upgrade".into()));
        }
        let method = matches!(kind, MessageType::ExecConnect | MessageType::AttachConnect)
            .then_some(head.method.as_str());
        let stream = session
            .open(kind, |id| {
                ConnectRequest::new(id, url, head.headers.pairs(), method).to_go_json()
            })
            .await
            .map_err(|e| Refusal::Status(503, e.to_string()))?;
        debug!(node = %session.node, id = stream.id(), %kind, target = %head.target, "stream opened");
        Ok::<_, Refusal>((kind, stream))
    };
    let (kind, stream) = match prepared.await {
        Ok(x) => x,
        Err(Refusal::Status(status, text)) => {
            info!(target = %head.target, status, reason = %text, "stream request refused");
            return respond(conn, ctx, status, &text, keep_alive).await;
        }
    };
    match kind {
        MessageType::ExecConnect | MessageType::AttachConnect => {
            let leftover = buf.split();
            exec::pipe(conn, leftover, stream, &ctx.shared).await;
            Outcome::Close
        }
        _ => relay::relay_body(conn, buf, stream, keep_alive, &ctx.shared).await,
    }
}
