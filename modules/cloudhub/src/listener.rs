//! The WebSocket listener (default `0.0.0.0:10000`): admission, mutual TLS, every check before
//! the 101, then one session actor per connection.
//!
//! Built on actix-server + actix-http's upgrade hook rather than actix-web-actors: a
//! `WebsocketContext` actor is driven by the response body, so once a peer stops reading it
//! stops running altogether (no keepalive, no write deadline). Owning the upgraded socket
//! gives real write deadlines and lets the session cut a stuck peer off.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Actor;
use actix_codec::{Framed, FramedParts};
use actix_http::header::{self, HeaderMap};
use actix_http::{HttpMessage, HttpService, Request, Response, StatusCode, h1};
use actix_service::{fn_factory, fn_service};
use actix_tls::accept::rustls_0_23::TlsStream;
use bytes::BytesMut;
use kubeedge_api::listener::Gate;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::messages::{SessionAddr, Stop, StopReason};
use crate::outbox::Outbox;
use crate::registry::Refused;
use crate::session::Session;
use crate::socket::{self, Link};
use crate::state::Hub;
use crate::throttle::Throttle;
use crate::tls_accept::{Gated, gated_https};

/// Header names (matched case-insensitively; the real edge writes `Node_id`, `Project_id`,
/// `Connectionuse`).
const NODE_ID: &str = "node_id";
const PROJECT_ID: &str = "project_id";
const CONNECTION_USE: &str = "connectionuse";

/// The first value of a header, trimmed; `None` when absent or not text.
fn first(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
}

/// The `listener` label of the WebSocket listener's admission counters.
pub(crate) const LISTENER: &str = "cloudhub_websocket";

/// Upgrades refused at `nodeLimit` come in floods (every edge of a full hub retrying): one
/// log line per period, counting the ones held back.
static NODE_LIMIT_LOG: Mutex<Throttle> = Mutex::new(Throttle::new(Duration::from_secs(10)));
/// Upgrades refused for their head (wrong node id, certificate mismatch, bad headers) can be
/// repeated by any edge holding a certificate: one log line per period, counting the rest.
static REFUSED_LOG: Mutex<Throttle> = Mutex::new(Throttle::new(Duration::from_secs(1)));

/// Whether a line of `throttle` may be written now, and how many were held back before it.
fn may_log(throttle: &Mutex<Throttle>) -> Option<u64> {
    throttle
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .allow(Instant::now())
}

/// A plain HTTP answer before (instead of) the upgrade; the connection closes after it.
async fn refuse(io: &mut TlsStream<Gated>, status: StatusCode, body: &str) {
    let text = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len(),
        body
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        io.write_all(text.as_bytes()).await?;
        io.flush().await?;
        io.shutdown().await
    })
    .await;
}

/// Why an upgrade was refused: status and explanation.
type Refusal = (StatusCode, String);

/// The upgrade checks, in order (the README lists them). Returns the node id.
fn check(hub: &Hub, req: &Request, io: &TlsStream<Gated>) -> Result<String, Refusal> {
    let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_owned());
    actix_http::ws::verify_handshake(req.head())
        .map_err(|e| bad(&format!("not a websocket upgrade: {e}")))?;
    let headers = req.headers();
    let node = first(headers, NODE_ID).unwrap_or_default();
    if node.is_empty() {
        return Err(bad("missing Node_id header"));
    }
    if let Err(e) = kubeedge_api::validation::node_name(&node) {
        return Err(bad(&format!("invalid Node_id header: {e}")));
    }
    // A missing Connectionuse is served as a message connection (Rust); str/shr are refused.
    if let Some(usage) = first(headers, CONNECTION_USE)
        && usage != "msg"
    {
        return Err(bad(&format!(
            "Connectionuse {usage:?} is not supported (only msg)"
        )));
    }
    // The TLS verifier refuses revoked certificates already; this also covers a connection
    // that was accepted just before its node was revoked and reached the upgrade after.
    if let Some(cert) = io.get_ref().1.peer_certificates().and_then(|c| c.first())
        && let Err(e) = hub.revocations.check(cert)
    {
        return Err((StatusCode::FORBIDDEN, e.to_string()));
    }
    // Always checked: the session, its routes and every request it makes are keyed by
    // `Node_id`, so only the certificate of that node may claim it.
    let identity = io
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| pki::parse_identity(c));
    let cn = match identity {
        Some(Ok(id)) => id.common_name,
        _ => None,
    };
    if cn.as_deref() != Some(format!("{}{node}", pki::NODE_CN_PREFIX).as_str()) {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "client certificate CN {:?} does not match node {node:?} (want system:node:{node})",
                cn.unwrap_or_default()
            ),
        ));
    }
    Ok(node)
}

/// Handles one upgrade request end to end (runs as the connection's task).
async fn upgrade(
    hub: Arc<Hub>,
    req: Request,
    framed: Framed<TlsStream<Gated>, h1::Codec>,
) -> Result<(), Infallible> {
    // Keep only the socket and unread bytes: the HTTP layer's 8 KiB write buffer and the
    // request are dropped before the session starts (they would live as long as the socket).
    let FramedParts {
        mut io, read_buf, ..
    } = framed.into_parts();
    let node = match check(&hub, &req, &io) {
        Ok(node) => node,
        Err((status, why)) => {
            if let Some(suppressed) = may_log(&REFUSED_LOG) {
                warn!(status = status.as_u16(), reason = %why, peer = %io.get_ref().0.peer_addr(), suppressed, "websocket upgrade refused");
            }
            refuse(&mut io, status, &why).await;
            return Ok(());
        }
    };
    // TLS verified the certificate and the head passed every check: from here the
    // connection counts as an edge's, not against the handshake and per-address limits.
    io.get_ref().0.admission().authenticated();
    let project = first(req.headers(), PROJECT_ID).unwrap_or_default();
    let node: Arc<str> = Arc::from(node.as_str());
    let outbox = Outbox::new();
    let limit = hub.config.node_limit as usize;
    let issued = io
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| pki::not_before(c).ok());
    let registered = hub.registry.register(&node, limit, issued, |generation| {
        SessionAddr::of(Session::new(hub.clone(), node.clone(), generation, outbox.clone()).start())
    });
    let (entry, old) = match registered {
        Ok(r) => r,
        Err(Refused::NodeLimit(n)) => {
            if let Some(suppressed) = may_log(&NODE_LIMIT_LOG) {
                warn!(node = %node, sessions = n, limit, suppressed, "node limit reached, upgrade refused");
            }
            refuse(
                &mut io,
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("node limit {limit} reached"),
            )
            .await;
            return Ok(());
        }
        Err(Refused::ShuttingDown) => {
            refuse(
                &mut io,
                StatusCode::SERVICE_UNAVAILABLE,
                "cloudhub is shutting down",
            )
            .await;
            return Ok(());
        }
    };
    // What was recorded for the node while it was away goes before other nodes' backlog: the
    // sync loop delivers from those records.
    hub.persister.node_connected(&node);
    if let Some(old) = old {
        // Control message, not bus traffic: must arrive even if the old mailbox is full.
        old.session.stop.do_send(Stop(StopReason::Replaced));
    }
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| actix_http::ws::hash_key(k.as_bytes()))
        .unwrap_or_default();
    drop(req);
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {}\r\n\r\n",
        String::from_utf8_lossy(&key)
    );
    let wrote = tokio::time::timeout(hub.config.write_deadline(), async {
        io.write_all(head.as_bytes()).await?;
        io.flush().await
    })
    .await;
    if !matches!(wrote, Ok(Ok(()))) {
        entry
            .session
            .stop
            .do_send(Stop(StopReason::ConnectionClosed(
                "upgrade response not written".into(),
            )));
        return Ok(());
    }
    debug!(node = %node, project = %project, generation = entry.generation, "websocket upgraded");
    let link = Link {
        hub,
        node,
        session: entry.session,
        outbox,
        counters: entry.counters,
    };
    // The socket moves to a task of its own and the HTTP dispatcher finishes: its task (sized
    // for the TLS and HTTP states) and buffers would otherwise live as long as the session.
    // Unread bytes are copied out of the HTTP read buffer for the same reason.
    let tracker = link.hub.sessions.clone();
    actix_rt::spawn(tracker.track_future(socket::run(io, BytesMut::from(&read_buf[..]), link)));
    Ok(())
}

fn not_an_upgrade() -> Response<String> {
    Response::with_body(
        StatusCode::BAD_REQUEST,
        "only websocket upgrades are served here\n".to_owned(),
    )
}

/// The WebSocket listener's limits: `websocket.limits`, with `handshakeTimeout` as an upper
/// bound on the pre-authentication deadline.
fn limits(cfg: &crate::CloudHubConfig) -> kubeedge_api::listener::ListenerLimits {
    let mut limits = cfg.websocket.limits.clone();
    if cfg.handshake_timeout > 0 {
        limits.pre_auth_timeout_seconds = limits
            .pre_auth_timeout_seconds
            .max(1)
            .min(cfg.handshake_timeout);
    }
    limits
}

/// Worker threads of the hub's server: `websocket.workers`, else one per core.
pub(crate) fn workers(cfg: &crate::CloudHubConfig) -> usize {
    if cfg.workers == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    } else {
        cfg.workers
    }
}

/// Binds the listener and adds it to the hub's server (see `HubHandle::start_servers`). The
/// returned gate admits its connections (its stats are the listener's metrics).
pub(crate) fn listen(
    builder: actix_server::ServerBuilder,
    hub: Arc<Hub>,
    tls: rustls::ServerConfig,
) -> Result<(actix_server::ServerBuilder, SocketAddr, Arc<Gate>), crate::Error> {
    let cfg = &hub.config;
    let addr = cfg.websocket.socket_addr();
    let bind_err = |source| crate::Error::Bind {
        addr: addr.clone(),
        source,
    };
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let gate = Gate::new(LISTENER, limits(cfg));
    // The gate's deadline ends slow heads first; actix's own timer is only a backstop.
    let head_timeout = gate.limits().pre_auth_timeout() + Duration::from_secs(5);
    let tls = Arc::new(tls);
    let factory_hub = hub.clone();
    let factory_gate = gate.clone();
    let builder = builder
        .listen("cloudhub-websocket", listener, move || {
            let hub = factory_hub.clone();
            let http = HttpService::<TlsStream<Gated>, _, _, _, _>::build()
                .client_request_timeout(head_timeout)
                .client_disconnect_timeout(Duration::from_secs(1))
                .upgrade(fn_factory(move || {
                    let hub = hub.clone();
                    async move {
                        Ok::<_, ()>(fn_service(
                            move |(req, framed): (Request, Framed<TlsStream<Gated>, h1::Codec>)| {
                                upgrade(hub.clone(), req, framed)
                            },
                        ))
                    }
                }))
                .h1(fn_service(|_req: Request| async {
                    Ok::<_, Infallible>(not_an_upgrade())
                }));
            gated_https(factory_gate.clone(), tls.clone(), http)
        })
        .map_err(bind_err)?;
    let files = kubeedge_api::listener::file_limit();
    info!(addr = %local, limits = ?gate.limits(), file_limit = ?files, "websocket server listening");
    if let Some(budget) = kubeedge_api::listener::file_budget()
        && u64::from(cfg.node_limit) > budget
    {
        warn!(
            node_limit = cfg.node_limit,
            file_limit = ?files,
            files_until_refused = budget,
            "the open-file limit does not leave room for nodeLimit edges: connections are refused once the process holds files_until_refused files (raise LimitNOFILE)"
        );
    }
    Ok((builder, local, gate))
}
