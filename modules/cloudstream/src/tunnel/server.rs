//! Accepts tunnels: mTLS, the upgrade at `/v1/kubeedge/connect`, identity checks, then a
//! session per node.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{NodeUpdater, Session, Shared};
use crate::frame::TunnelMessage;
use crate::http1::{self, RequestHead};
use crate::listen::{accept_until, handshake};
use crate::tls::common_name;
use crate::ws::{self, Role, WsReader};

/// The path edges dial (a trailing slash also matches, as go-restful).
const CONNECT_PATH: &str = "/v1/kubeedge/connect";
/// Header with the node name (Go spells it `Sessionhostnameoverride` on the wire).
const NODE_HEADER: &str = "SessionHostNameOverride";
/// Header with the node's internal IP.
const IP_HEADER: &str = "SessionInternalIP";
/// What the edge sees when the Node update fails (upstream text).
const NODE_UPDATE_FAILED: &str = "failed to Update KubeletEndpoint Port";

/// Accepts tunnels until `stop` fires.
pub(crate) async fn run(
    listener: TcpListener,
    tls: TlsAcceptor,
    shared: Arc<Shared>,
    nodes: Option<NodeUpdater>,
    stop: CancellationToken,
) {
    accept_until(listener, &stop, "tunnel", |tcp, peer| {
        connection(tcp, peer, tls.clone(), shared.clone(), nodes.clone())
    })
    .await;
}

async fn refuse(tls: &mut TlsStream<TcpStream>, shared: &Shared, status: u16, reason: &str) {
    shared.counters.tunnel_refused();
    let _ = tls
        .write_all(&http1::text_response(status, reason, true))
        .await;
    let _ = tls.shutdown().await;
}

/// What a valid upgrade request names.
struct Identity {
    node: String,
    ip: String,
    accept: String,
}

/// The checks before the upgrade, in order: route, method, node header, certificate CN,
/// WebSocket headers. `Err` is the status and reason to answer with.
fn admit(
    head: &RequestHead,
    cn: Option<&str>,
    peer: SocketAddr,
) -> Result<Identity, (u16, String)> {
    let path = head.path();
    if path != CONNECT_PATH && path != "/v1/kubeedge/connect/" {
        return Err((404, "404: Page Not Found".into()));
    }
    if head.method != "GET" {
        return Err((405, "405: Method Not Allowed".into()));
    }
    let node = head
        .headers
        .get_str(NODE_HEADER)
        .unwrap_or("")
        .trim()
        .to_owned();
    if node.is_empty() {
        return Err((400, format!("missing {NODE_HEADER} header")));
    }
    // Rust: the certificate must be the node's own (upstream trusts the header, W2).
    let want = format!("system:node:{node}");
    if cn != Some(want.as_str()) {
        return Err((
            403,
            format!(
                "client certificate CN {:?} does not match node {node:?}",
                cn.unwrap_or("")
            ),
        ));
    }
    let accept = ws::check_upgrade_request(head).map_err(|r| (r.status, r.reason))?;
    let ip = match head.headers.get_str(IP_HEADER).map(str::trim) {
        Some(ip) if !ip.is_empty() => ip.to_owned(),
        // Upstream splits RemoteAddr on ':' (IPv6-unsafe, W7).
        _ => peer.ip().to_string(),
    };
    Ok(Identity { node, ip, accept })
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: TlsAcceptor,
    shared: Arc<Shared>,
    nodes: Option<NodeUpdater>,
) {
    let limit = shared.tuning.handshake_timeout;
    let Some(mut tls) = handshake(&tls, tcp, peer, limit, "tunnel").await else {
        shared.counters.tunnel_refused();
        return;
    };
    let cn = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(common_name);
    let mut buf = BytesMut::new();
    let head = match http1::read_request_head_within(&mut tls, &mut buf, limit).await {
        Ok(h) => h,
        Err(e) => {
            debug!(%peer, error = %e, "no upgrade request on the tunnel port");
            refuse(&mut tls, &shared, 400, "bad request").await;
            return;
        }
    };
    let id = match admit(&head, cn.as_deref(), peer) {
        Ok(id) => id,
        Err((status, reason)) => {
            warn!(%peer, status, %reason, "tunnel refused");
            refuse(&mut tls, &shared, status, &reason).await;
            return;
        }
    };
    let switching = ws::switching_protocols(&id.accept);
    if tls.write_all(switching.as_bytes()).await.is_err() || tls.flush().await.is_err() {
        return;
    }
    info!(node = %id.node, ip = %id.ip, %peer, "tunnel connected");

    let (tx, rx) = mpsc::channel(shared.tuning.tunnel_queue);
    let session = Session::new(id.node.clone(), id.ip, tx, shared.clone());
    if let Some(old) = shared.registry.insert(session.clone()) {
        old.close("replaced by a new tunnel from the same node");
    }
    let (read_half, write_half) = tokio::io::split(tls);
    let write_timeout = shared.tuning.write_timeout;
    let writer = tokio::spawn({
        let session = session.clone();
        async move {
            if let Err(e) = ws::write_loop(write_half, Role::Server, rx, write_timeout).await {
                session.close(&format!("tunnel write failed: {e}"));
            }
        }
    });
    tokio::spawn(session.clone().keepalive());
    if let Some(nodes) = nodes {
        tokio::spawn(update_node(nodes, session.clone()));
    }
    session
        .clone()
        .serve(WsReader::new(read_half, Role::Server, buf))
        .await;
    shared.registry.remove(&session);
    // Give the writer time to send the Close frame, then drop the socket regardless.
    let abort = writer.abort_handle();
    if tokio::time::timeout(write_timeout, writer).await.is_err() {
        abort.abort();
    }
}

/// Registration already happened; this runs beside the session (upstream runs it first,
/// leaving the socket unread for up to 2 min, W6). On failure the edge is told and the
/// tunnel closes, as upstream intends.
async fn update_node(nodes: NodeUpdater, session: Arc<Session>) {
    let result = tokio::select! {
        r = nodes.update(&session.node) => r,
        _ = session.wait_closed() => return,
    };
    if let Err(e) = result {
        warn!(node = %session.node, error = %e, "giving up on the node's kubelet endpoint port; closing its tunnel");
        let _ = session.send(TunnelMessage::close(NODE_UPDATE_FAILED)).await;
        session.close(NODE_UPDATE_FAILED);
    }
}
