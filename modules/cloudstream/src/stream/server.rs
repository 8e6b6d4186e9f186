//! Accepts the API server's HTTPS connections, reads request heads, routes them, resolves the
//! node's session and hands over to the relays.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::route::{Route, route};
use super::{Outcome, PodLocator, exec, metrics, relay};
use crate::connect::ConnectRequest;
use crate::frame::MessageType;
use crate::gourl::GoUrl;
use crate::http1::{self, HttpError, RequestHead};
use crate::listen::{accept_until, handshake};
use crate::tunnel::{Session, Shared};

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
}

/// Accepts API server connections until `stop` fires.
pub(crate) async fn run(
    listener: TcpListener,
    tls: TlsAcceptor,
    ctx: StreamContext,
    stop: CancellationToken,
) {
    accept_until(listener, &stop.clone(), "stream", |tcp, peer| {
        connection(tcp, peer, tls.clone(), ctx.clone(), stop.clone())
    })
    .await;
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: TlsAcceptor,
    ctx: StreamContext,
    stop: CancellationToken,
) {
    let limit = ctx.shared.tuning.handshake_timeout;
    let Some(mut conn) = handshake(&tls, tcp, peer, limit, "stream").await else {
        return;
    };
    let mut buf = BytesMut::new();
    let mut wait = limit;
    loop {
        let head = tokio::select! {
            _ = stop.cancelled() => break,
            r = http1::read_request_head_within(&mut conn, &mut buf, wait) => r,
        };
        let head = match head {
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
        wait = IDLE_TIMEOUT;
        if handle(&mut conn, &mut buf, head, &ctx).await == Outcome::Close {
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
        ctx.shared.counters.request_refused();
    }
    let ok = conn
        .write_all(&http1::text_response(status, text, !keep_alive))
        .await
        .is_ok()
        && conn.flush().await.is_ok();
    if ok && keep_alive {
        Outcome::KeepAlive
    } else {
        Outcome::Close
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

fn session_for(ctx: &StreamContext, key: &str) -> Result<Arc<Session>, Refusal> {
    ctx.shared.registry.get(key).ok_or_else(|| {
        Refusal::Status(
            503,
            format!("node {key} has no tunnel to cloudstream: the edge is offline or its edgeStream is disabled"),
        )
    })
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    buf: &mut BytesMut,
    head: RequestHead,
    ctx: &StreamContext,
) -> Outcome {
    // A body we do not read would be taken for the next request: only reuse bodiless ones.
    let keep_alive = head.keep_alive() && head.content_length() == Some(0);
    let r = match route(&head.method, head.path()) {
        Ok(r) => r,
        Err(e) => return respond(conn, ctx, e.status(), e.text(), keep_alive).await,
    };
    let url = match GoUrl::from_request_target(&head.target, "http", EDGE_KUBELET_HOST) {
        Ok(u) => u,
        Err(e) => return respond(conn, ctx, 400, &e.to_string(), keep_alive).await,
    };
    let prepared = async {
        let (kind, key) = match &r {
            Route::Logs { namespace, pod } => (
                MessageType::LogsConnect,
                node_of_pod(ctx, namespace, pod).await?,
            ),
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
                (kind, node_of_pod(ctx, namespace, pod).await?)
            }
            Route::Metrics => (
                MessageType::MetricConnect,
                metrics::session_key(&head).ok_or_else(|| {
                    Refusal::Status(400, "no Host header to find the node by".into())
                })?,
            ),
        };
        let session = session_for(ctx, &key)?;
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
            exec::pipe(conn, leftover, stream, ctx.shared.tuning.relay_buffer).await;
            Outcome::Close
        }
        _ => relay::relay_body(conn, buf, stream, keep_alive).await,
    }
}
