//! Accepts tunnels: mTLS, the upgrade at `/v1/kubeedge/connect`, identity checks, then a
//! session per node.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::BytesMut;
use kubeedge_api::listener::{Admission, Gate};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::registry::RegisterError;
use super::{NodeUpdater, Owner, Session, Shared};
use crate::listen::{accept_until, handshake};
use kubeedge_wire::http1::{self, RequestHead};
use kubeedge_wire::tunnel::{INPUT_WINDOW_HEADER, TunnelMessage, WINDOW_HEADER};
use kubeedge_wire::ws::{self, Role, WsReader};
use pki::stream_tls::common_name;

/// The path edges dial (a trailing slash also matches, as go-restful).
const CONNECT_PATH: &str = "/v1/kubeedge/connect";
/// Header with the node name (Go spells it `Sessionhostnameoverride` on the wire).
const NODE_HEADER: &str = "SessionHostNameOverride";
/// Header with the node's internal IP.
const IP_HEADER: &str = "SessionInternalIP";
/// What the edge sees when the Node update fails (upstream text).
const NODE_UPDATE_FAILED: &str = "failed to Update KubeletEndpoint Port";

/// Accepts tunnels until `stop` fires, admitting each connection through `gate`.
pub(crate) async fn run(
    listener: TcpListener,
    tls: TlsAcceptor,
    shared: Arc<Shared>,
    nodes: Option<NodeUpdater>,
    gate: Arc<Gate>,
    stop: CancellationToken,
) {
    let keepalive = shared.tuning.tcp_keepalive;
    let tasks = shared.tasks.clone();
    if let Some(revocations) = shared.revocations.clone() {
        tasks.spawn(close_revoked(shared.clone(), revocations, stop.clone()));
    }
    accept_until(
        listener,
        &stop,
        &tasks,
        "tunnel",
        gate,
        keepalive,
        |tcp, peer, admission| {
            connection(
                tcp,
                peer,
                admission,
                tls.clone(),
                shared.clone(),
                nodes.clone(),
            )
        },
    )
    .await;
}

/// How often the revocation table is looked at for changes.
const REVOCATION_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Closes every live tunnel whose certificate a revocation now covers (a deleted Node, or a
/// revocation another replica recorded), within [`REVOCATION_POLL`] of the table changing:
/// the check at the upgrade alone would leave a revoked node's tunnel serving streams until
/// it disconnects. Runs until `stop`.
async fn close_revoked(
    shared: Arc<Shared>,
    revocations: pki::Revocations,
    stop: CancellationToken,
) {
    let mut seen = revocations.generation();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(REVOCATION_POLL) => {}
        }
        let now = revocations.generation();
        if now == seen {
            continue;
        }
        seen = now;
        for session in shared.registry.all() {
            if let Some(issued) = session.issued()
                && revocations.covers(&session.node, issued)
            {
                warn!(node = %session.node, ip = %session.ip, "tunnel closed: the node's certificate is revoked");
                session.close("the node's certificate is revoked");
                shared.registry.remove(&session);
            }
        }
    }
}

async fn refuse(tls: &mut TlsStream<TcpStream>, shared: &Shared, status: u16, reason: &str) {
    shared.metrics.tunnel_refused();
    let _ = tls
        .write_all(&http1::text_response(status, reason, true))
        .await;
    let _ = tls.shutdown().await;
}

/// What a valid upgrade request names.
struct Identity {
    node: String,
    ip: IpAddr,
    accept: String,
}

/// Why a tunnel was refused: the status and reason the edge gets, and whether it was about
/// identity (certificate, IP) rather than the shape of the request.
struct Refusal {
    status: u16,
    reason: String,
    identity: bool,
}

impl Refusal {
    fn request(status: u16, reason: impl Into<String>) -> Self {
        Refusal {
            status,
            reason: reason.into(),
            identity: false,
        }
    }

    fn identity(status: u16, reason: impl Into<String>) -> Self {
        Refusal {
            status,
            reason: reason.into(),
            identity: true,
        }
    }
}

/// The checks before the upgrade, in order: route, method, node header (a valid Node name),
/// certificate CN (exactly one, `system:node:<node>`), WebSocket headers, IP header syntax.
fn admit(head: &RequestHead, cn: Option<&str>, peer: SocketAddr) -> Result<Identity, Refusal> {
    let path = head.path();
    if path != CONNECT_PATH && path != "/v1/kubeedge/connect/" {
        return Err(Refusal::request(404, "404: Page Not Found"));
    }
    if head.method != "GET" {
        return Err(Refusal::request(405, "405: Method Not Allowed"));
    }
    let node = head
        .headers
        .get_str(NODE_HEADER)
        .unwrap_or("")
        .trim()
        .to_owned();
    if node.is_empty() {
        return Err(Refusal::request(
            400,
            format!("missing {NODE_HEADER} header"),
        ));
    }
    // The name keys the session and goes into the Node's API path: only a Node name will do.
    if let Err(e) = kubeedge_api::validation::node_name(&node) {
        return Err(Refusal::identity(400, format!("{NODE_HEADER}: {e}")));
    }
    // The node name is the verified certificate's (upstream trusts the header).
    let want = format!("system:node:{node}");
    if cn != Some(want.as_str()) {
        return Err(Refusal::identity(
            403,
            format!(
                "client certificate CN {:?} does not match node {node:?}",
                cn.unwrap_or("")
            ),
        ));
    }
    let accept =
        ws::check_upgrade_request(head).map_err(|r| Refusal::request(r.status, r.reason))?;
    let ip = match head.headers.get_str(IP_HEADER).map(str::trim) {
        Some(ip) if !ip.is_empty() => ip.parse::<IpAddr>().map_err(|_| {
            Refusal::identity(400, format!("{IP_HEADER} {ip:?} is not an IP address"))
        })?,
        // Upstream splits RemoteAddr on ':' (IPv6-unsafe).
        _ => peer.ip(),
    };
    Ok(Identity {
        node,
        ip: ip.to_canonical(),
        accept,
    })
}

/// How a tunnel's IP was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Claim {
    /// The IP is the address the tunnel comes from.
    peer_proven: bool,
    /// The node owns the IP (lists it, and listed it before any other Node): a session that
    /// holds it on the strength of its Node's status alone gives way.
    owner: bool,
}

/// Whether `id.ip` belongs to the node. The address the tunnel comes from always does.
/// Otherwise the node's Node must list it in `status.addresses` (an InternalIP or ExternalIP)
/// and own it: no other Node listed it first ([`super::NodeAddresses`]), because a node writes
/// its own status and could list another node's address. With no Kubernetes client there are
/// no Node objects: only the uniqueness the registry enforces applies.
async fn check_ip(
    nodes: Option<&NodeUpdater>,
    id: &Identity,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
) -> Result<Claim, Refusal> {
    if id.ip == peer.ip().to_canonical() {
        return Ok(Claim {
            peer_proven: true,
            owner: false,
        });
    }
    let Some(nodes) = nodes else {
        return Ok(Claim {
            peer_proven: false,
            owner: false,
        });
    };
    let index = nodes.index();
    ready_by(|| index.is_synced(), deadline).await;
    if !index.is_synced() {
        return Err(Refusal::request(
            503,
            format!("{IP_HEADER} cannot be checked yet (Node addresses still loading); retry"),
        ));
    }
    if !index.lists(&id.node, id.ip) {
        // The index follows a watch: a status written a moment ago may not be in it yet.
        match nodes.read(&id.node).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(Refusal::identity(
                    403,
                    format!(
                        "{IP_HEADER} {} is not the tunnel's peer address and Node {} does not exist",
                        id.ip, id.node
                    ),
                ));
            }
            Err(e) => {
                return Err(Refusal::request(
                    503,
                    format!("cannot read Node {} to check {IP_HEADER}: {e}", id.node),
                ));
            }
        }
        if !index.lists(&id.node, id.ip) {
            return Err(Refusal::identity(
                403,
                format!(
                    "{IP_HEADER} {} is neither the tunnel's peer address nor an address of Node {}",
                    id.ip, id.node
                ),
            ));
        }
    }
    match index.owner(id.ip) {
        Owner::Node(owner) if owner == id.node => Ok(Claim {
            peer_proven: false,
            owner: true,
        }),
        Owner::Contested(listers) => {
            warn!(ip = %id.ip, nodes = ?listers, "tunnel IP listed by several Nodes since before this cloudcore started; none may claim it until the others stop listing it");
            Err(Refusal::identity(
                403,
                format!(
                    "{IP_HEADER} {} is listed by several Nodes; none of them may claim it",
                    id.ip
                ),
            ))
        }
        Owner::Node(_) | Owner::Nobody => Err(Refusal::identity(
            403,
            format!(
                "{IP_HEADER} {} was listed by another Node first; Node {} may not claim it",
                id.ip, id.node
            ),
        )),
    }
}

/// An edge that passed every check before the upgrade.
struct Admitted {
    tls: TlsStream<TcpStream>,
    buf: BytesMut,
    id: Identity,
    flow_control: bool,
    input_window: Option<usize>,
    /// Its certificate's notBefore.
    issued: Option<i64>,
    /// How its IP was accepted.
    claim: Claim,
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    tls: TlsAcceptor,
    shared: Arc<Shared>,
    nodes: Option<NodeUpdater>,
) {
    // TLS, the upgrade request and the identity checks all count against the deadline.
    let Some(admitted) = admission
        .pre_auth(authenticate(tcp, peer, &tls, &shared, nodes.as_ref()))
        .await
    else {
        shared.metrics.tunnel_refused();
        return;
    };
    let Some(Admitted {
        mut tls,
        buf,
        id,
        flow_control,
        input_window,
        issued,
        claim,
    }) = admitted
    else {
        return;
    };
    admission.authenticated();

    let (tx, rx) = mpsc::channel(shared.tuning.tunnel_queue);
    let session = Session::new(
        id.node.clone(),
        id.ip.to_string(),
        tx,
        shared.clone(),
        flow_control,
        input_window,
    );
    if let Some(issued) = issued {
        session.set_issued(issued);
    }
    if claim.peer_proven {
        session.set_peer_proven();
    }
    // Registered before the 101, so that a refusal is still an HTTP status.
    match shared.registry.try_insert(session.clone(), claim.owner) {
        Ok(Some(old)) => old.close("replaced by a new tunnel from the same node"),
        Ok(None) => {}
        Err(e) => {
            shared.metrics.tunnel_identity_refused();
            let holder = match &e {
                RegisterError::IpHeld { holder, .. } => holder.as_str(),
                RegisterError::NotAnIp { .. } => "",
            };
            warn!(%peer, node = %id.node, ip = %id.ip, holder, status = 409, reason = %e, "tunnel refused");
            refuse(&mut tls, &shared, 409, &e.to_string()).await;
            return;
        }
    }
    // A revocation made between the check above and the registration: the sweep may have
    // run before this session was there to close.
    if let (Some(revocations), Some(issued)) = (&shared.revocations, issued)
        && revocations.covers(&id.node, issued)
    {
        shared.registry.remove(&session);
        shared.metrics.tunnel_identity_refused();
        refuse(&mut tls, &shared, 403, "the node's certificate is revoked").await;
        return;
    }
    shared.metrics.session_opened();
    let window = session.window().map(|w| w.to_string());
    let input_window = session.input_window().map(|w| w.to_string());
    let mut extra = Vec::new();
    if let Some(w) = &window {
        extra.push((WINDOW_HEADER, w.as_str()));
    }
    if let Some(w) = &input_window {
        // Accepts the edge's input window by echoing it.
        extra.push((INPUT_WINDOW_HEADER, w.as_str()));
    }
    let switching = ws::switching_protocols(&id.accept, &extra);
    if tls.write_all(switching.as_bytes()).await.is_err() || tls.flush().await.is_err() {
        session.close("the upgrade response could not be written");
        shared.registry.remove(&session);
        return;
    }
    info!(node = %id.node, ip = %id.ip, %peer, flow_control, input_window = ?session.input_window(), "tunnel connected");

    let (read_half, write_half) = tokio::io::split(tls);
    let write_timeout = shared.tuning.write_timeout;
    let writer = shared.tasks.spawn({
        let session = session.clone();
        async move {
            if let Err(e) = ws::write_loop(write_half, Role::Server, rx, write_timeout).await {
                session.close(&format!("tunnel write failed: {e}"));
            }
        }
    });
    shared.tasks.spawn(session.clone().keepalive());
    if let Some(nodes) = nodes {
        shared.tasks.spawn(update_node(nodes, session.clone()));
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

/// TLS, the upgrade request and the identity checks; `None` when the edge was refused
/// (answered and counted here).
async fn authenticate(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: &TlsAcceptor,
    shared: &Shared,
    nodes: Option<&NodeUpdater>,
) -> Option<Admitted> {
    let limit = shared.tuning.handshake_timeout;
    let deadline = tokio::time::Instant::now() + limit;
    let Some(mut tls) = handshake(tls, tcp, peer, limit, "tunnel").await else {
        shared.metrics.tunnel_refused();
        return None;
    };
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .cloned();
    let cn = leaf.as_ref().and_then(common_name);
    let mut buf = BytesMut::new();
    let head = match http1::read_request_head_within(&mut tls, &mut buf, limit).await {
        Ok(h) => h,
        Err(e) => {
            debug!(%peer, error = %e, "no upgrade request on the tunnel port");
            refuse(&mut tls, shared, 400, "bad request").await;
            return None;
        }
    };
    let claimed_ip = head
        .headers
        .get_str(IP_HEADER)
        .unwrap_or("")
        .trim()
        .to_owned();
    let checked = async {
        if let (Some(revocations), Some(leaf)) = (&shared.revocations, &leaf) {
            ready_by(|| revocations.is_loaded(), deadline).await;
            revocations.check(leaf).map_err(|e| Refusal {
                status: 403,
                reason: e.to_string(),
                identity: true,
            })?;
        }
        let id = admit(&head, cn.as_deref(), peer)?;
        let claim = check_ip(nodes, &id, peer, deadline).await?;
        Ok::<_, Refusal>((id, claim))
    };
    match checked.await {
        Ok((id, claim)) => Some(Admitted {
            claim,
            tls,
            buf,
            id,
            issued: leaf.as_ref().and_then(|c| pki::not_before(c).ok()),
            flow_control: head.headers.get(WINDOW_HEADER).is_some(),
            input_window: head
                .headers
                .get_str(INPUT_WINDOW_HEADER)
                .and_then(|v| v.trim().parse::<usize>().ok()),
        }),
        Err(r) => {
            if r.identity {
                shared.metrics.tunnel_identity_refused();
            }
            warn!(%peer, cn = cn.as_deref().unwrap_or(""), ip = %claimed_ip, status = r.status, reason = %r.reason, "tunnel refused");
            refuse(&mut tls, shared, r.status, &r.reason).await;
            None
        }
    }
}

/// Waits until `ready()` holds or `deadline` passes. A tunnel dialed in the first moments
/// after a start (edges redial at once when cloudcore restarts) waits for what its checks
/// read — the certificate revocations, the Node address index — instead of being refused;
/// past the deadline the checks refuse it as before (fail closed).
async fn ready_by(ready: impl Fn() -> bool, deadline: tokio::time::Instant) {
    const POLL: std::time::Duration = std::time::Duration::from_millis(20);
    while !ready() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + POLL)).await;
    }
}

/// Registration already happened; this runs beside the session (upstream runs it first,
/// leaving the socket unread for up to 2 min). On failure the edge is told and the
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
