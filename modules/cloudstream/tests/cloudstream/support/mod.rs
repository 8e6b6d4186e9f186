//! Shared test harness: certificates, a running cloudstream on a bus, edge agents, an API
//! server stand-in (TLS client with the kubelet-client certificate) and a raw tunnel client.
// Each test binary uses a different part of the harness.
#![allow(dead_code, unused_imports, unreachable_pub, missing_docs)]

// The kubelet stand-in (logs, metrics, exec over SPDY and WebSocket) lives in the interop
// harness, which the real-edgecore tests share.
pub use edgecore_interop::kubelet;
pub mod pki;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use beehive::Bus;
use bytes::{Bytes, BytesMut};
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamHandle, CloudStreamTls, ServerTls, StaticPods,
    TlsMaterial, Tuning,
};
use edge::stream::{AgentHandle, AgentOptions, EdgeStreamConfig, StreamAgent, client_tls};
use kubeedge_wire::http1::{self, BodyReader, ResponseHead};
use kubeedge_wire::ws;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use ws_peer::{OpCode, Role, WsMessage, encode_frame};

pub use kubelet::FakeKubelet;
pub use pki::{Eku, Pki};

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A running cloudstream with its CAs.
pub struct Cloud {
    pub handle: CloudStreamHandle,
    pub pods: StaticPods,
    /// Signs edge certificates (the cloudhub CA).
    pub edge_ca: Pki,
    /// Signs the stream server and the API server's client certificate.
    pub stream_ca: Pki,
    pub bus: Bus,
}

impl Cloud {
    pub async fn start() -> Cloud {
        Cloud::start_with(Tuning::default()).await
    }

    pub async fn start_with(tuning: Tuning) -> Cloud {
        Cloud::start_adjusted(tuning, |cs| cs).await
    }

    /// A cloud whose module `adjust` configures further before it starts.
    pub async fn start_adjusted(
        tuning: Tuning,
        adjust: impl FnOnce(CloudStream) -> CloudStream,
    ) -> Cloud {
        Cloud::start_configured(tuning, |_| {}, adjust).await
    }

    /// A cloud whose configuration `configure` changes (ports stay 0) and whose module
    /// `adjust` configures further before it starts.
    pub async fn start_configured(
        tuning: Tuning,
        configure: impl FnOnce(&mut CloudStreamConfig),
        adjust: impl FnOnce(CloudStream) -> CloudStream,
    ) -> Cloud {
        init_tracing();
        let edge_ca = Pki::new("kubeedge-ca");
        let stream_ca = Pki::new("kubernetes-ca");
        let pods = StaticPods::new();
        let bus = Bus::new();
        let mut config = CloudStreamConfig {
            enable: true,
            tunnel_port: 0,
            stream_port: 0,
            ..CloudStreamConfig::default()
        };
        configure(&mut config);
        let tls = CloudStreamTls {
            tunnel: ServerTls::Material(edge_ca.server()),
            stream: Some(ServerTls::Material(stream_ca.server())),
        };
        let cs = adjust(
            CloudStream::new(config, bus.endpoint("cloudStream"), None, tls)
                .unwrap()
                .with_tuning(tuning)
                .with_pod_locator(Arc::new(pods.clone())),
        );
        let handle = cs.handle();
        bus.register(cs).unwrap();
        bus.start().unwrap();
        Cloud {
            handle,
            pods,
            edge_ca,
            stream_ca,
            bus,
        }
    }

    pub fn tunnel_server(&self) -> String {
        format!("127.0.0.1:{}", self.handle.tunnel_addr().port())
    }

    /// An edge agent for `node` relaying to `kubelet`, connected.
    pub async fn edge(&self, node: &str, ip: &str, kubelet: SocketAddr) -> AgentHandle {
        let agent = self.edge_unconnected(node, ip, kubelet, &self.edge_ca.node(node));
        assert!(
            agent.wait_connected(Duration::from_secs(10)).await,
            "edge {node} did not connect"
        );
        assert!(
            self.handle
                .wait_for_session(node, Duration::from_secs(10))
                .await
        );
        agent
    }

    pub fn edge_unconnected(
        &self,
        node: &str,
        ip: &str,
        kubelet: SocketAddr,
        cert: &TlsMaterial,
    ) -> AgentHandle {
        start_agent(self.tunnel_server(), node, ip, kubelet, cert)
    }

    /// The API server's view: a TLS connection to the stream server with a client cert.
    pub async fn api_conn(&self) -> TlsStream<TcpStream> {
        self.api_conn_as(
            &self
                .stream_ca
                .client("kube-apiserver-kubelet-client", Eku::ClientAuth),
        )
        .await
        .unwrap()
    }

    pub async fn api_conn_as(&self, cert: &TlsMaterial) -> std::io::Result<TlsStream<TcpStream>> {
        let config = ::pki::stream_tls::client_config(
            cert.cert_chain.clone(),
            cert.key.clone_key(),
            Some(&[self.stream_ca.ca()]),
        )
        .unwrap();
        tls_connect(self.handle.stream_addr().port(), config).await
    }

    /// Sends a GET and returns the response head and whole body.
    pub async fn get(&self, target: &str, extra: &str) -> (ResponseHead, Vec<u8>) {
        let mut conn = self.api_conn().await;
        let req = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:10351\r\nUser-Agent: kube-apiserver/test\r\n{extra}\r\n"
        );
        conn.write_all(req.as_bytes()).await.unwrap();
        read_response(&mut conn).await
    }
}

/// An edge agent dialing `server` with `cert`, redialing quickly.
pub fn start_agent(
    server: String,
    node: &str,
    ip: &str,
    kubelet: SocketAddr,
    cert: &TlsMaterial,
) -> AgentHandle {
    let config = EdgeStreamConfig {
        enable: true,
        server,
        ..EdgeStreamConfig::default()
    };
    let mut options = AgentOptions::new(node, ip);
    options.kubelet = kubelet;
    options.redial_base = Duration::from_millis(100);
    options.redial_max = Duration::from_millis(500);
    StreamAgent::new(config, options, client_tls(cert).unwrap()).spawn()
}

pub async fn tls_connect(
    port: u16,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

pub async fn read_response<S: tokio::io::AsyncRead + Unpin>(
    conn: &mut S,
) -> (ResponseHead, Vec<u8>) {
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(conn, &mut buf).await.unwrap();
    let mut body = BodyReader::new(&head);
    let mut out = Vec::new();
    while let Some(p) = body.next(conn, &mut buf, 1 << 20).await.unwrap() {
        out.extend_from_slice(&p);
    }
    (head, out)
}

/// A raw tunnel client (what a Go edge does), for frame-level tests.
pub struct RawTunnel {
    pub stream: TlsStream<TcpStream>,
    pub buf: BytesMut,
    decoder: ws_peer::Decoder,
}

/// Dials the tunnel with `cert` and the given extra header lines; returns the response head
/// and, on 101, the connection.
pub async fn raw_dial(
    server_port: u16,
    cert: &TlsMaterial,
    request: &str,
) -> std::io::Result<(ResponseHead, Option<RawTunnel>, Vec<u8>)> {
    let config =
        ::pki::stream_tls::client_config(cert.cert_chain.clone(), cert.key.clone_key(), None)
            .unwrap();
    let mut stream = tls_connect(server_port, config).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut stream, &mut buf)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    if head.status != 101 {
        let mut body = buf.to_vec();
        let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut body)).await;
        return Ok((head, None, body));
    }
    let t = RawTunnel {
        stream,
        buf,
        decoder: ws_peer::Decoder::new(Role::Client, 8 << 20),
    };
    Ok((head, Some(t), Vec::new()))
}

pub fn upgrade_request(node: Option<&str>, ip: Option<&str>) -> String {
    let mut r = format!(
        "GET /v1/kubeedge/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {}\r\nSec-WebSocket-Version: 13\r\n",
        ws::new_client_key()
    );
    if let Some(n) = node {
        r.push_str(&format!("Sessionhostnameoverride: {n}\r\n"));
    }
    if let Some(ip) = ip {
        r.push_str(&format!("Sessioninternalip: {ip}\r\n"));
    }
    r.push_str("\r\n");
    r
}

impl RawTunnel {
    /// Sends one masked frame.
    pub async fn frame(&mut self, opcode: OpCode, fin: bool, payload: &[u8]) {
        let mut out = BytesMut::new();
        encode_frame(&mut out, opcode, fin, &[payload], Some(rand::random()));
        self.stream.write_all(&out).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    pub async fn send(&mut self, msg: &kubeedge_wire::tunnel::TunnelMessage) {
        self.frame(OpCode::Text, true, &msg.encode()).await;
    }

    /// The next message, within 10 s; `None` when the connection closed.
    pub async fn next(&mut self) -> Option<WsMessage> {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match self.decoder.decode(&mut self.buf) {
                    Ok(Some(m)) => return Some(m),
                    Ok(None) => {}
                    Err(_) => return None,
                }
                self.buf.reserve(8192);
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("no tunnel message within 10 s")
    }

    /// The next tunnel message, skipping control frames; `None` when closed.
    pub async fn next_tunnel(&mut self) -> Option<kubeedge_wire::tunnel::TunnelMessage> {
        loop {
            match self.next().await? {
                WsMessage::Text(t) => {
                    return Some(kubeedge_wire::tunnel::TunnelMessage::decode(t).unwrap());
                }
                WsMessage::Close(..) => return None,
                _ => {}
            }
        }
    }
}

/// Upgrade request for exec through the stream server, with a first stdin frame sent in the
/// same write as the head.
pub fn exec_request(target: &str, method: &str) -> (Vec<u8>, String) {
    let key = ws::new_client_key();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:10351\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
    );
    (head.into_bytes(), key)
}

/// A masked binary WebSocket frame on `channel`.
pub fn channel_frame(channel: u8, data: &[u8]) -> Bytes {
    let mut out = BytesMut::new();
    encode_frame(
        &mut out,
        OpCode::Binary,
        true,
        &[&[channel], data],
        Some(rand::random()),
    );
    out.freeze()
}
