//! The connection loop: dial like edgecore, keepalive every heartbeat, auto-ACK, reconnect
//! with jittered exponential back-off. Runtime-agnostic (plain tokio tasks, `Send`).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::{Backoff, Message};
use bytes::{Bytes, BytesMut};
use kubeedge_wire::hub::{self, ack_for, keepalive, needs_ack};
use kubeedge_wire::ws::{self, Outgoing, Role, WsError, WsMessage, WsReader, WsWriter};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::dial::dial;
use super::error::HubError;

/// edgecore's default `edgeHub.projectID`.
pub const DEFAULT_PROJECT_ID: &str = "e632aba927ea4ac2b575ec1603d56f10";

/// Settings of one hub connection (edgecore `modules.edgeHub` where it has them).
#[derive(Debug, Clone)]
pub struct HubClientConfig {
    /// The node name (`Node_id`, URL, certificate CN).
    pub node_name: String,
    /// `projectID` (default edgecore's).
    pub project_id: String,
    /// `websocket.server`: `host:port` of cloudhub.
    pub server: String,
    /// `heartbeat`: keepalive period (default 15 s).
    pub heartbeat: Duration,
    /// `websocket.writeDeadline` (default 15 s).
    pub write_timeout: Duration,
    /// `websocket.handshakeTimeout` (default 30 s).
    pub handshake_timeout: Duration,
    /// Reconnect back-off (default 1 s doubling to 30 s), each wait drawn from the upper half
    /// of its step ("equal jitter") so a fleet that lost the cloud together does not return
    /// together.
    pub backoff: Backoff,
    /// Largest message accepted from the cloud (default 32 MiB).
    pub max_message_size: usize,
    /// ACK downstream insert/update/delete and object responses like edgecore's metamanager
    /// (`response`, content `"OK"`, parent = message id, route copied). Default true.
    pub auto_ack: bool,
    /// Capacity of the event channel and of the outgoing queue.
    pub queue_capacity: usize,
    /// Source address to dial from (port chosen by the OS); `None` (default) lets the OS pick
    /// the address too. Load tools give each simulated edge its own loopback address
    /// (`127.x.y.z`), as real edges have their own, so per-source limits see them apart.
    pub local_address: Option<IpAddr>,
}

impl HubClientConfig {
    /// Defaults for `node` talking to `server` (`host:port`).
    pub fn new(node: impl Into<String>, server: impl Into<String>) -> Self {
        HubClientConfig {
            node_name: node.into(),
            project_id: DEFAULT_PROJECT_ID.into(),
            server: server.into(),
            heartbeat: Duration::from_secs(15),
            write_timeout: Duration::from_secs(15),
            handshake_timeout: Duration::from_secs(30),
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
            max_message_size: 32 * 1024 * 1024,
            auto_ack: true,
            queue_capacity: 1024,
            local_address: None,
        }
    }
}

/// What the client reports.
// clippy::large_enum_variant: a message is the common case; boxing it would cost an
// allocation per message for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubEvent {
    /// A WebSocket session is up (after every reconnect too).
    Connected,
    /// The session ended; the client reconnects after its back-off.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// A message from the cloud (resource in the edge's view, e.g. `default/pod/nginx`).
    Message(Message),
}

#[derive(Debug, Default)]
struct Shared {
    connected: AtomicBool,
    /// Cancelled by [`HubClient::stop`]: ends the session and the reconnect loop.
    stop: CancellationToken,
    /// The session being set up or served, a child of `stop`; [`HubClient::drop_connection`]
    /// cancels it (also while connecting, so that request is not lost).
    session: Mutex<CancellationToken>,
    connects: AtomicU64,
    connect_failures: AtomicU64,
}

impl Shared {
    fn session(&self) -> std::sync::MutexGuard<'_, CancellationToken> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running hub connection. Dropping it does not stop it; call [`HubClient::stop`].
#[derive(Debug, Clone)]
pub struct HubClient {
    out: mpsc::Sender<Message>,
    shared: Arc<Shared>,
}

/// The framing's bytes in a text message (the hub's framing always writes text).
fn encode(msg: &Message) -> Outgoing {
    Outgoing::Text(Bytes::from(hub::encode_json(msg)))
}

impl HubClient {
    /// Starts connecting (and reconnecting) on the current tokio runtime. Events arrive on
    /// the returned channel; if it is not drained, reading from the cloud pauses.
    pub fn start(
        config: HubClientConfig,
        tls: Arc<ClientConfig>,
    ) -> (HubClient, mpsc::Receiver<HubEvent>) {
        let (out_tx, out_rx) = mpsc::channel(config.queue_capacity.max(1));
        let (ev_tx, ev_rx) = mpsc::channel(config.queue_capacity.max(1));
        let shared = Arc::new(Shared::default());
        tokio::spawn(run(config, tls, shared.clone(), out_rx, ev_tx));
        (
            HubClient {
                out: out_tx,
                shared,
            },
            ev_rx,
        )
    }

    /// Queues a message for the cloud, waiting for room. Messages queued while disconnected
    /// are sent after the next connect.
    pub async fn send(&self, msg: Message) -> Result<(), HubError> {
        self.out
            .send(msg)
            .await
            .map_err(|e| HubError::Stopped(Box::new(e.0)))
    }

    /// Queues a message if there is room now.
    pub fn try_send(&self, msg: Message) -> Result<(), HubError> {
        self.out.try_send(msg).map_err(|e| {
            let m = match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => m,
            };
            HubError::Stopped(Box::new(m))
        })
    }

    /// True while a session is up.
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Acquire)
    }

    /// How many sessions have been established so far.
    pub fn connects(&self) -> u64 {
        self.shared.connects.load(Ordering::Relaxed)
    }

    /// How many attempts to connect have failed so far (dial, TLS, upgrade refused or timed
    /// out). An edge that knows several cloudhubs can move on to the next one after a failure.
    pub fn connect_failures(&self) -> u64 {
        self.shared.connect_failures.load(Ordering::Relaxed)
    }

    /// Drops the current connection (abruptly, like a crashed edge); the client reconnects.
    pub fn drop_connection(&self) {
        self.shared.session().cancel();
    }

    /// Stops for good: closes the connection, no reconnect.
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// A connected session: the TLS stream and the bytes read past the `101` head.
struct Ws {
    stream: Tls,
    leftover: BytesMut,
}

async fn connect(cfg: &HubClientConfig, tls: &Arc<ClientConfig>) -> Result<Ws, HubError> {
    let host = cfg
        .server
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&cfg.server)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    tokio::time::timeout(cfg.handshake_timeout, async {
        let tcp = dial(&cfg.server, cfg.local_address)
            .await
            .map_err(|e| HubError::transport("connect", e))?;
        let name = ServerName::try_from(host).map_err(|e| HubError::transport("server name", e))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| HubError::transport("tls handshake", e))?;
        let mut stream = stream;
        let path = format!("/{}/{}/events", cfg.project_id, cfg.node_name);
        let extra = [
            ("Node_id", cfg.node_name.as_str()),
            ("Project_id", cfg.project_id.as_str()),
            ("Connectionuse", "msg"),
        ];
        let (_head, leftover) = ws::client_handshake(&mut stream, &cfg.server, &path, &extra)
            .await
            .map_err(|e| match e {
                WsError::Refused { status, body } => HubError::Http { status, body },
                other => HubError::transport("websocket upgrade", other),
            })?;
        Ok(Ws { stream, leftover })
    })
    .await
    .map_err(|_| HubError::transport("connect", "handshake timed out"))?
}

async fn run(
    cfg: HubClientConfig,
    tls: Arc<ClientConfig>,
    shared: Arc<Shared>,
    mut out: mpsc::Receiver<Message>,
    events: mpsc::Sender<HubEvent>,
) {
    let mut attempt = 0u32;
    while !shared.stop.is_cancelled() {
        let session = shared.stop.child_token();
        *shared.session() = session.clone();
        match connect(&cfg, &tls).await {
            Ok(ws) => {
                attempt = 0;
                shared.connected.store(true, Ordering::Release);
                shared.connects.fetch_add(1, Ordering::Relaxed);
                debug!(node = %cfg.node_name, "connected to cloudhub");
                if events.send(HubEvent::Connected).await.is_err() {
                    return;
                }
                let reason = serve(&cfg, ws, &session, &mut out, &events).await;
                shared.connected.store(false, Ordering::Release);
                info!(node = %cfg.node_name, reason = %reason, "disconnected from cloudhub");
                if events
                    .send(HubEvent::Disconnected { reason })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                shared.connect_failures.fetch_add(1, Ordering::Relaxed);
                warn!(node = %cfg.node_name, error = %e, "connecting to cloudhub failed");
            }
        }
        attempt += 1;
        tokio::select! {
            _ = tokio::time::sleep(cfg.backoff.jittered(attempt, 0.5, 1.0)) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

/// One session; returns why it ended.
async fn serve(
    cfg: &HubClientConfig,
    ws: Ws,
    session: &CancellationToken,
    out: &mut mpsc::Receiver<Message>,
    events: &mpsc::Sender<HubEvent>,
) -> String {
    let (rd, wr) = tokio::io::split(ws.stream);
    let mut stream = WsReader::with_limit(rd, Role::Client, ws.leftover, cfg.max_message_size);
    let mut sink = WsWriter::new(wr, Role::Client);
    let mut heartbeat = tokio::time::interval(cfg.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = cfg.write_timeout;
    macro_rules! write {
        ($msg:expr) => {
            match sink.send_within(encode($msg), deadline).await {
                Ok(()) => {}
                Err(WsError::Timeout(_)) => return "write timed out".into(),
                Err(e) => return format!("write failed: {e}"),
            }
        };
    }
    loop {
        // Checked first: a drop requested while connecting must win over a ready heartbeat.
        if session.is_cancelled() {
            return "connection dropped on request".into();
        }
        tokio::select! {
            _ = session.cancelled() => return "connection dropped on request".into(),
            _ = heartbeat.tick() => write!(&keepalive()),
            next = out.recv() => match next {
                Some(msg) => write!(&msg),
                None => return "client handle dropped".into(),
            },
            frame = stream.next() => {
                let payload = match frame {
                    Ok(Some(WsMessage::Text(p) | WsMessage::Binary(p))) => p,
                    Ok(Some(WsMessage::Ping(p))) => {
                        if let Err(e) = sink.send_within(Outgoing::Pong(p), deadline).await {
                            return format!("write failed: {e}");
                        }
                        continue;
                    }
                    Ok(Some(WsMessage::Close(code, reason))) => {
                        return format!(
                            "closed by cloudhub: {code:?} {}",
                            String::from_utf8_lossy(&reason)
                        );
                    }
                    Ok(Some(WsMessage::Pong(_))) => continue,
                    Err(e) => return format!("read failed: {e}"),
                    Ok(None) => return "connection closed by cloudhub".into(),
                };
                let msg = match hub::decode_json(&payload) {
                    Ok(m) => m,
                    // Go's ReadJSON fails the connection the same way.
                    Err(e) => return format!("undecodable message from cloudhub: {e}"),
                };
                if cfg.auto_ack && needs_ack(&msg) {
                    write!(&ack_for(&msg));
                }
                if events.send(HubEvent::Message(msg)).await.is_err() {
                    return "event receiver dropped".into();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_client_dials_from_its_configured_local_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap().to_string();
        let tls = Arc::new(
            pki::tls::client_config(
                pki::CertificateAuthority::generate().unwrap().cert_der(),
                None,
            )
            .unwrap(),
        );
        for local in [Some(IpAddr::from([127, 0, 0, 7])), None] {
            let mut cfg = HubClientConfig::new("edge-1", server.clone());
            cfg.local_address = local;
            let (client, _events) = HubClient::start(cfg, tls.clone());
            let (_sock, peer) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
                .await
                .expect("the client dials")
                .unwrap();
            assert_eq!(
                peer.ip(),
                local.unwrap_or(IpAddr::from([127, 0, 0, 1])),
                "source address"
            );
            client.stop();
        }
    }

    #[tokio::test]
    async fn failed_attempts_are_counted() {
        // A port nobody listens on: every dial is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let tls = Arc::new(
            pki::tls::client_config(
                pki::CertificateAuthority::generate().unwrap().cert_der(),
                None,
            )
            .unwrap(),
        );
        let mut cfg = HubClientConfig::new("edge-1", format!("127.0.0.1:{port}"));
        cfg.backoff = Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(20),
        };
        let (client, _events) = HubClient::start(cfg, tls);
        tokio::time::timeout(Duration::from_secs(10), async {
            while client.connect_failures() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("failures counted");
        assert_eq!(client.connects(), 0);
        client.stop();
    }
}
