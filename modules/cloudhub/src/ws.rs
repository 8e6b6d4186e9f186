//! The WebSocket listener (default `0.0.0.0:10000`): mutual TLS, every check before the 101
//! (spec §2.1 Rust table), then one session actor per connection.
//!
//! Built on actix-server + actix-http's upgrade hook rather than actix-web-actors: a
//! `WebsocketContext` actor is driven by the response body, so once a peer stops reading it
//! stops running altogether (no keepalive, no write deadline). Owning the upgraded socket
//! gives real write deadlines and lets the session cut a stuck peer off.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use actix_codec::{Framed, FramedParts};
use actix_http::header::{self, HeaderMap};
use actix_http::{HttpMessage, HttpService, Request, Response, StatusCode, h1};
use actix_rt::net::TcpStream;
use actix_service::{ServiceFactoryExt, fn_factory, fn_service};
use actix_tls::accept::rustls_0_23::{Acceptor, TlsStream};
use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tracing::{debug, info, warn};

use crate::conn::{self, Conn, Link};
use crate::hub::Hub;
use crate::registry::{NodeCounters, Refused};
use crate::session::{Session, Stop, StopReason};

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

/// A plain HTTP answer before (instead of) the upgrade; the connection closes after it.
async fn refuse(io: &mut TlsStream<TcpStream>, status: StatusCode, body: &str) {
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

/// The spec §2.1 checks, in order. Returns the node id.
fn check(hub: &Hub, req: &Request, io: &TlsStream<TcpStream>) -> Result<String, Refusal> {
    let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_owned());
    actix_http::ws::verify_handshake(req.head())
        .map_err(|e| bad(&format!("not a websocket upgrade: {e}")))?;
    let headers = req.headers();
    let node = first(headers, NODE_ID).unwrap_or_default();
    if node.is_empty() {
        return Err(bad("missing Node_id header"));
    }
    if node.contains('/') || node.chars().any(char::is_control) || node.len() > 253 {
        return Err(bad("invalid Node_id header"));
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
    let auth = &hub.config.authorization;
    if auth.enforce_identity || (auth.enable && !auth.debug) {
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
    }
    Ok(node)
}

/// Handles one upgrade request end to end (runs as the connection's task).
async fn upgrade(
    hub: Arc<Hub>,
    req: Request,
    framed: Framed<TlsStream<TcpStream>, h1::Codec>,
) -> Result<(), Infallible> {
    // Keep only the socket and unread bytes: the HTTP layer's 8 KiB write buffer and the
    // request are dropped before the session starts (they would live as long as the socket).
    let FramedParts {
        mut io, read_buf, ..
    } = framed.into_parts();
    let node = match check(&hub, &req, &io) {
        Ok(node) => node,
        Err((status, why)) => {
            warn!(status = status.as_u16(), reason = %why, peer = ?io.get_ref().0.peer_addr().ok(), "websocket upgrade refused");
            refuse(&mut io, status, &why).await;
            return Ok(());
        }
    };
    let project = first(req.headers(), PROJECT_ID).unwrap_or_default();
    let node: Arc<str> = Arc::from(node.as_str());
    let conn = Conn::new();
    let counters = Arc::new(NodeCounters::default());
    let limit = hub.config.node_limit as usize;
    let registered = hub.registry.register(&node, limit, |generation| {
        let addr = Session::new(
            hub.clone(),
            node.clone(),
            generation,
            conn.clone(),
            counters.clone(),
        )
        .start();
        (addr, counters.clone())
    });
    let (entry, old) = match registered {
        Ok(r) => r,
        Err(Refused::NodeLimit(n)) => {
            warn!(node = %node, sessions = n, limit, "node limit reached, upgrade refused");
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
    if let Some(old) = old {
        // Control message, not bus traffic: must arrive even if the old mailbox is full.
        old.addr.do_send(Stop(StopReason::Replaced));
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
        entry.addr.do_send(Stop(StopReason::ConnectionClosed(
            "upgrade response not written".into(),
        )));
        return Ok(());
    }
    debug!(node = %node, project = %project, generation = entry.generation, "websocket upgraded");
    let link = Link {
        hub,
        node,
        addr: entry.addr,
        conn,
        counters,
    };
    // The socket moves to a task of its own and the HTTP dispatcher finishes: its task (sized
    // for the TLS and HTTP states) and buffers would otherwise live as long as the session.
    // Unread bytes are copied out of the HTTP read buffer for the same reason.
    actix_rt::spawn(conn::run(io, BytesMut::from(&read_buf[..]), link));
    Ok(())
}

fn not_an_upgrade() -> Response<String> {
    Response::with_body(
        StatusCode::BAD_REQUEST,
        "only websocket upgrades are served here\n".to_owned(),
    )
}

/// Binds the listener and starts the server on the current actix system.
pub(crate) fn start(
    hub: Arc<Hub>,
    tls: rustls::ServerConfig,
) -> Result<(actix_server::ServerHandle, SocketAddr), crate::Error> {
    let cfg = &hub.config;
    let addr = cfg.websocket.socket_addr();
    let bind_err = |source| crate::Error::Bind {
        addr: addr.clone(),
        source,
    };
    let listener = std::net::TcpListener::bind(&addr).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let handshake = Duration::from_secs(u64::from(cfg.handshake_timeout.max(1)));
    let workers = if cfg.workers == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    } else {
        cfg.workers
    };
    let per_worker = (cfg.node_limit as usize * 2).div_ceil(workers).max(256);
    let tls = Arc::new(tls);
    let factory_hub = hub.clone();
    let server = actix_server::Server::build()
        .workers(workers)
        .backlog(4096)
        .max_concurrent_connections(per_worker)
        .disable_signals()
        .shutdown_timeout(5)
        .listen("cloudhub-websocket", listener, move || {
            let hub = factory_hub.clone();
            let mut acceptor = Acceptor::new((*tls).clone());
            acceptor.set_handshake_timeout(handshake);
            let http = HttpService::<TlsStream<TcpStream>, _, _, _, _>::build()
                .client_request_timeout(handshake)
                .client_disconnect_timeout(Duration::from_secs(1))
                .upgrade(fn_factory(move || {
                    let hub = hub.clone();
                    async move {
                        Ok::<_, ()>(fn_service(
                            move |(req, framed): (
                                Request,
                                Framed<TlsStream<TcpStream>, h1::Codec>,
                            )| { upgrade(hub.clone(), req, framed) },
                        ))
                    }
                }))
                .h1(fn_service(|_req: Request| async {
                    Ok::<_, Infallible>(not_an_upgrade())
                }));
            acceptor
                .map_err(|e| debug!(error = ?e, "tls handshake failed"))
                .map_init_err(|_| ())
                .map(|io: TlsStream<TcpStream>| {
                    let peer = io.get_ref().0.peer_addr().ok();
                    (io, peer)
                })
                .and_then(
                    http.map_err(|e| debug!(error = %e, "http dispatch ended"))
                        .map_init_err(|_| ()),
                )
        })
        .map_err(bind_err)?
        .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    info!(addr = %local, workers, "websocket server listening");
    Ok((handle, local))
}
