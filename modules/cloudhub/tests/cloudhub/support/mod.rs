//! Shared test harness: a real cloudhub on 127.0.0.1 (ephemeral ports, temp cert dir) on a
//! beehive bus with inboxes standing in for the controllers, and raw / edge clients.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use beehive::{Bus, Content, Inbox, Message};
use bytes::BytesMut;
use cloudhub::{CloudHub, CloudHubConfig, HubHandle, HubOptions, MemoryStore};
use futures::{SinkExt, StreamExt};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::Role;

/// How long a test waits for something that must happen (a message, a close, a condition)
/// before it fails. Only a hang guard: a passing wait returns as soon as the event comes. It is
/// generous because the suite runs its test binaries side by side, often next to builds: on two
/// cores at a load of 20 and more, a message through TLS, the hub and the bus has been seen to
/// take longer than 5 s.
pub const WAIT: Duration = Duration::from_secs(30);

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Self {
        let p = std::env::temp_dir().join(format!("{prefix}-{}", uuid_like()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn uuid_like() -> String {
    beehive::new_id()
}

/// A config for tests: loopback, ephemeral ports, certs under `dir`.
pub fn config(dir: &std::path::Path) -> CloudHubConfig {
    let mut c = CloudHubConfig {
        advertise_address: vec!["127.0.0.1".into()],
        tls_ca_file: dir.join("ca/rootCA.crt"),
        tls_ca_key_file: dir.join("ca/rootCA.key"),
        tls_cert_file: dir.join("certs/server.crt"),
        tls_private_key_file: dir.join("certs/server.key"),
        unixsocket: cloudhub::UnixSocketConfig {
            enable: false,
            ..Default::default()
        },
        workers: 1,
        ..Default::default()
    };
    c.websocket.address = "127.0.0.1".into();
    c.websocket.port = 0;
    c.https.address = "127.0.0.1".into();
    c.https.port = 0;
    c
}

pub struct Harness {
    pub bus: Bus,
    pub hub: HubHandle,
    pub ws: SocketAddr,
    pub https: SocketAddr,
    pub store: MemoryStore,
    pub controllers: Inbox,
    pub devices: Inbox,
    pub router: Inbox,
    pub tasks: Inbox,
    pub dynamic: Inbox,
    pub dir: TempDir,
}

impl Harness {
    pub async fn start() -> Harness {
        Self::with(|_| {}).await
    }

    pub async fn with(tweak: impl FnOnce(&mut CloudHubConfig)) -> Harness {
        Self::with_options(tweak, HubOptions::default()).await
    }

    pub async fn with_options(
        tweak: impl FnOnce(&mut CloudHubConfig),
        options: HubOptions,
    ) -> Harness {
        let store = MemoryStore::new();
        Self::build(tweak, options, None, Arc::new(store.clone()), store).await
    }

    /// A hub on the given record store, without Kubernetes.
    pub async fn with_store(
        store: Arc<dyn cloudhub::ObjectSyncStore>,
        options: HubOptions,
    ) -> Harness {
        Self::build(|_| {}, options, None, store, MemoryStore::new()).await
    }

    /// A hub on Kubernetes: secrets, `/node/{name}` and the given store.
    pub async fn with_kube(
        client: kube::Client,
        store: Arc<dyn cloudhub::ObjectSyncStore>,
        options: HubOptions,
    ) -> Harness {
        Self::build(|_| {}, options, Some(client), store, MemoryStore::new()).await
    }

    async fn build(
        tweak: impl FnOnce(&mut CloudHubConfig),
        options: HubOptions,
        kube: Option<kube::Client>,
        store: Arc<dyn cloudhub::ObjectSyncStore>,
        memory: MemoryStore,
    ) -> Harness {
        init_tracing();
        let dir = TempDir::new("cloudhub-test");
        let mut c = config(&dir.0);
        tweak(&mut c);
        let with_kube = kube.is_some();
        let bus = Bus::new();
        let hub = CloudHub::with_options(c, bus.endpoint("cloudhub"), kube, store, options)
            .await
            .unwrap();
        let handle = hub.handle();
        bus.register(hub).unwrap();
        let controllers = bus
            .register_inbox("edgecontroller", "edgecontroller", 4096)
            .unwrap();
        let devices = bus
            .register_inbox("devicecontroller", "devicecontroller", 1024)
            .unwrap();
        let router = bus.register_inbox("router", "router", 1024).unwrap();
        let tasks = bus
            .register_inbox("taskmanager", "taskmanager", 1024)
            .unwrap();
        let dynamic = bus
            .register_inbox("dynamiccontroller", "dynamiccontroller", 1024)
            .unwrap();
        bus.start().unwrap();
        let addrs = handle.start_servers().unwrap();
        if with_kube {
            // Edges are refused until every Node has been listed once.
            tokio::time::timeout(Duration::from_secs(30), handle.wait_revocations_loaded())
                .await
                .expect("the revocations are loaded within 30 s");
        }
        Harness {
            bus,
            hub: handle,
            ws: addrs.websocket.unwrap(),
            https: addrs.https.unwrap(),
            store: memory,
            controllers,
            devices,
            router,
            tasks,
            dynamic,
            dir,
        }
    }

    /// A client certificate for `node` signed by the hub's CA.
    pub fn edge_cert(&self, node: &str) -> pki::CertAndKey {
        self.hub.ca().issue(&pki::IssueOptions::edge(node)).unwrap()
    }

    pub fn tls(&self, cert: Option<&pki::CertAndKey>) -> rustls::ClientConfig {
        pki::tls::client_config(
            self.hub.ca().cert_der(),
            cert.map(|c| (c.cert_der.as_slice(), c.key_der.as_slice())),
        )
        .unwrap()
    }

    /// Connects a raw WebSocket as `node` with the real edge's headers and URL.
    pub async fn connect(&self, node: &str) -> Edge {
        self.connect_with(node, &self.edge_cert(node)).await
    }

    /// Connects `node` with the certificate `cert` and keeps the connection open.
    pub async fn connect_with(&self, node: &str, cert: &pki::CertAndKey) -> Edge {
        let (status, _, ws) = raw_upgrade(
            self.ws,
            self.tls(Some(cert)),
            &edge_path(node),
            &edge_headers(node),
        )
        .await
        .unwrap();
        assert_eq!(status, 101);
        Edge { ws: ws.unwrap() }
    }

    /// [`Harness::connect`] taking an owned name (for `join_all`).
    pub async fn connect_owned(&self, node: String) -> Edge {
        self.connect(&node).await
    }

    /// Sends a downstream message as a controller would.
    pub async fn downstream(&self, msg: Message) {
        self.bus
            .endpoint("edgecontroller")
            .send("cloudhub", msg)
            .await
            .unwrap();
    }

    /// Waits until `n` nodes are registered.
    pub async fn wait_nodes(&self, n: usize) {
        wait_until(|| self.hub.connected_nodes() == n).await;
    }

    /// Next message in the edgecontroller inbox that is not a connection event.
    pub async fn next_controller_msg(&mut self) -> Message {
        loop {
            let m = recv(&mut self.controllers).await;
            if m.route.operation != "connected" && m.route.operation != "disconnected" {
                return m;
            }
        }
    }

    pub async fn next_event(&mut self) -> Message {
        loop {
            let m = recv(&mut self.controllers).await;
            if m.route.operation == "connected" || m.route.operation == "disconnected" {
                return m;
            }
        }
    }
}

pub async fn recv(inbox: &mut Inbox) -> Message {
    tokio::time::timeout(WAIT, inbox.recv())
        .await
        .expect("timed out waiting for a bus message")
        .unwrap()
}

pub async fn wait_until(cond: impl FnMut() -> bool) {
    wait_until_for(WAIT, cond).await
}

/// [`wait_until`] with a longer limit.
pub async fn wait_until_for(limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn edge_path(node: &str) -> String {
    format!("/e632aba927ea4ac2b575ec1603d56f10/{node}/events")
}

/// The header spellings a real edgecore sends.
pub fn edge_headers(node: &str) -> Vec<(String, String)> {
    vec![
        ("Node_id".into(), node.into()),
        (
            "Project_id".into(),
            "e632aba927ea4ac2b575ec1603d56f10".into(),
        ),
        ("Connectionuse".into(), "msg".into()),
    ]
}

pub async fn tls_connect(
    addr: SocketAddr,
    tls: rustls::ClientConfig,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let mut s = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await?;
    // TLS 1.3 reports a refused client certificate only on the first read/write.
    s.flush().await?;
    Ok(s)
}

/// Sends a WebSocket upgrade with exactly these headers; returns the status, the response
/// body (non-101) and, for 101, the WebSocket.
pub async fn raw_upgrade(
    addr: SocketAddr,
    tls: rustls::ClientConfig,
    path: &str,
    headers: &[(String, String)],
) -> std::io::Result<(u16, String, Option<WebSocketStream<TlsStream<TcpStream>>>)> {
    let mut s = tls_connect(addr, tls).await?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    s.flush().await?;
    let mut buf = BytesMut::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = tokio::time::timeout(WAIT, s.read_buf(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("timeout"))??;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a response",
            ));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if status != 101 {
        let mut rest = buf[head_end..].to_vec();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
        return Ok((status, String::from_utf8_lossy(&rest).to_string(), None));
    }
    let leftover = buf[head_end..].to_vec();
    let ws = WebSocketStream::from_partially_read(s, leftover, Role::Client, None).await;
    Ok((status, String::new(), Some(ws)))
}

/// A raw edge connection.
pub struct Edge {
    pub ws: WebSocketStream<TlsStream<TcpStream>>,
}

impl Edge {
    /// Sends a message as the real edge does: JSON + "\n" in a text frame.
    pub async fn send(&mut self, msg: &Message) {
        let text = String::from_utf8(kubeedge_wire::hub::encode_json(msg)).unwrap();
        self.ws.send(Frame::Text(text.into())).await.unwrap();
    }

    pub async fn keepalive(&mut self) {
        self.send(&kubeedge_wire::hub::keepalive()).await;
    }

    /// The next data message as raw text (fails on timeout or close).
    pub async fn recv_text(&mut self) -> String {
        self.recv_text_for(WAIT).await
    }

    /// [`Edge::recv`] with a longer wait.
    pub async fn recv_for(&mut self, d: Duration) -> Message {
        let text = self.recv_text_for(d).await;
        kubeedge_wire::hub::decode_json(text.as_bytes()).unwrap()
    }

    pub async fn recv_text_for(&mut self, d: Duration) -> String {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            let f = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("timed out waiting for a frame");
            match f {
                Some(Ok(Frame::Text(t))) => return t.to_string(),
                Some(Ok(Frame::Binary(b))) => return String::from_utf8_lossy(&b).to_string(),
                Some(Ok(Frame::Ping(_) | Frame::Pong(_))) => continue,
                other => panic!("expected a message, got {other:?}"),
            }
        }
    }

    pub async fn recv(&mut self) -> Message {
        let text = self.recv_text().await;
        kubeedge_wire::hub::decode_json(text.as_bytes()).unwrap()
    }

    /// Waits up to `d` for a message; `None` when nothing arrives.
    pub async fn recv_within(&mut self, d: Duration) -> Option<Message> {
        match tokio::time::timeout(d, self.ws.next()).await {
            Ok(Some(Ok(Frame::Text(t)))) => {
                Some(kubeedge_wire::hub::decode_json(t.as_bytes()).unwrap())
            }
            Ok(Some(Ok(f))) => panic!("unexpected frame {f:?}"),
            Ok(other) => panic!("connection ended: {other:?}"),
            Err(_) => None,
        }
    }

    /// Waits for the server to end the connection; returns how it ended.
    pub async fn closed_within(&mut self, d: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Err(_) => return None,
                Ok(None) => return Some("eof".into()),
                Ok(Some(Err(e))) => return Some(format!("error: {e}")),
                Ok(Some(Ok(Frame::Close(c)))) => return Some(format!("close: {c:?}")),
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// ACKs `msg` like the edge metamanager.
    pub async fn ack(&mut self, msg: &Message) {
        self.send(&kubeedge_wire::hub::ack_for(msg)).await;
    }
}

/// An ACK-class pod message for `node` with `uid` at `rv`.
pub fn pod(node: &str, name: &str, uid: &str, rv: &str, op: &str) -> Message {
    Message::new()
        .with_route("edgecontroller", "resource", format!("node/{node}/default/pod/{name}"), op)
        .with_resource_version(rv)
        .with_content(
            Content::json(&serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": rv},
                "spec": {"nodeName": node}
            }))
            .unwrap(),
        )
}

/// One HTTPS/1.1 request (Connection: close) to the certificate server; (status, body).
pub async fn https(
    addr: SocketAddr,
    tls: rustls::ClientConfig,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = tls_connect(addr, tls).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    s.flush().await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut raw)).await;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(raw.len() - end);
    (status, raw[end..end + len].to_vec())
}

/// A client TLS that trusts the hub's CA and presents no certificate.
pub fn anonymous(h: &Harness) -> rustls::ClientConfig {
    h.tls(None)
}
