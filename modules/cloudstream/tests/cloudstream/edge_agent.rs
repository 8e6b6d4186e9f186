//! The edge stream agent against a scripted cloud: dial headers, pings, REMOVE_CONNECT in
//! every failure case, unknown ids, CLOSE_CONNECT and redial, the read deadline, and exec's
//! raw relay of the kubelet's 101 head.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::{self, FakeKubelet, Pki, kubelet};
use bytes::{Bytes, BytesMut};
use edge::stream::{AgentHandle, AgentOptions, EdgeStreamConfig, StreamAgent, client_tls};
use kubeedge_wire::gourl::GoUrl;
use kubeedge_wire::http1::{self, RequestHead};
use kubeedge_wire::tunnel::{ConnectRequest, MessageType, TunnelMessage};
use kubeedge_wire::ws;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use ws_peer::{Decoder, OpCode, Role, WsMessage, encode_frame};

/// A cloud that accepts tunnels and lets the test drive them frame by frame.
struct ScriptedCloud {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ca: Pki,
}

struct Accepted {
    head: RequestHead,
    stream: TlsStream<TcpStream>,
    buf: BytesMut,
    decoder: Decoder,
}

impl ScriptedCloud {
    async fn start() -> Self {
        support::init_tracing();
        let ca = Pki::new("kubeedge-ca");
        let config = pki::stream_tls::server_config(&ca.server(), true).unwrap();
        ScriptedCloud {
            listener: TcpListener::bind("127.0.0.1:0").await.unwrap(),
            acceptor: TlsAcceptor::from(config),
            ca,
        }
    }

    fn agent(
        &self,
        kubelet: SocketAddr,
        tweak: impl FnOnce(&mut EdgeStreamConfig, &mut AgentOptions),
    ) -> AgentHandle {
        let mut config = EdgeStreamConfig {
            enable: true,
            server: self.listener.local_addr().unwrap().to_string(),
            ..EdgeStreamConfig::default()
        };
        let mut options = AgentOptions::new("edge-1", "10.0.0.7");
        options.kubelet = kubelet;
        options.redial_base = Duration::from_millis(200);
        tweak(&mut config, &mut options);
        StreamAgent::new(
            config,
            options,
            client_tls(&self.ca.node("edge-1")).unwrap(),
        )
        .spawn()
    }

    async fn accept(&self) -> Accepted {
        let (tcp, _) = tokio::time::timeout(Duration::from_secs(10), self.listener.accept())
            .await
            .expect("the edge did not dial")
            .unwrap();
        let mut stream = self.acceptor.accept(tcp).await.unwrap();
        let mut buf = BytesMut::new();
        let head = http1::read_request_head(&mut stream, &mut buf)
            .await
            .unwrap();
        let accept = ws::check_upgrade_request(&head).unwrap();
        stream
            .write_all(ws::switching_protocols(&accept, &[]).as_bytes())
            .await
            .unwrap();
        Accepted {
            head,
            stream,
            buf,
            decoder: Decoder::new(Role::Server, 8 << 20),
        }
    }
}

impl Accepted {
    async fn send(&mut self, msg: TunnelMessage) {
        let mut out = BytesMut::new();
        encode_frame(&mut out, OpCode::Text, true, &[&msg.encode()], None);
        self.stream.write_all(&out).await.unwrap();
    }

    async fn next(&mut self, limit: Duration) -> Option<WsMessage> {
        tokio::time::timeout(limit, async {
            loop {
                if let Some(m) = self.decoder.decode(&mut self.buf).unwrap() {
                    return Some(m);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("nothing from the edge in time")
    }

    /// The next tunnel message (pings are answered and skipped).
    async fn next_tunnel(&mut self) -> Option<TunnelMessage> {
        loop {
            match self.next(Duration::from_secs(10)).await? {
                WsMessage::Text(t) => return Some(TunnelMessage::decode(t).unwrap()),
                WsMessage::Ping(p) => {
                    let mut out = BytesMut::new();
                    encode_frame(&mut out, OpCode::Pong, true, &[&p], None);
                    self.stream.write_all(&out).await.unwrap();
                }
                WsMessage::Close(..) => return None,
                _ => {}
            }
        }
    }

    /// Reads DATA for `id` until its REMOVE_CONNECT; returns the bytes.
    async fn collect(&mut self, id: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let m = self.next_tunnel().await.expect("tunnel closed");
            assert_eq!(m.connect_id, id);
            match m.kind {
                MessageType::Data => out.extend_from_slice(&m.data),
                MessageType::RemoveConnect => return out,
                other => panic!("unexpected {other}"),
            }
        }
    }
}

fn connect(id: u64, target: &str, header: &[(&str, &str)], method: Option<&str>) -> Bytes {
    let url = GoUrl::from_request_target(target, "http", "127.0.0.1:10350").unwrap();
    let req = ConnectRequest::new(
        id,
        url,
        header.iter().map(|(n, v)| (*n, v.as_bytes())),
        method,
    );
    Bytes::from(req.to_go_json())
}

#[actix_rt::test]
async fn edge_should_dial_with_both_headers_and_ping_every_interval() {
    let cloud = ScriptedCloud::start().await;
    let agent = cloud.agent("127.0.0.1:1".parse().unwrap(), |_, o| {
        o.ping_interval = Duration::from_millis(200)
    });
    let mut t = cloud.accept().await;
    assert_eq!(t.head.method, "GET");
    assert_eq!(t.head.path(), "/v1/kubeedge/connect");
    assert!(
        t.head
            .headers
            .0
            .iter()
            .any(|(n, v)| n == "Sessionhostnameoverride" && v == b"edge-1")
    );
    assert!(
        t.head
            .headers
            .0
            .iter()
            .any(|(n, v)| n == "Sessioninternalip" && v == b"10.0.0.7")
    );
    assert!(t.head.headers.get("Origin").is_none());
    match t.next(Duration::from_secs(2)).await {
        Some(WsMessage::Ping(p)) => assert_eq!(&p[..], b"ping you"),
        other => panic!("expected a ping, got {other:?}"),
    }
    assert!(agent.is_connected());
    agent.shutdown().await;
}

#[actix_rt::test]
async fn edge_should_answer_bad_connect_json_with_remove_connect_and_survive_a_null_header() {
    let cloud = ScriptedCloud::start().await;
    let kubelet = FakeKubelet::start().await;
    let agent = cloud.agent(kubelet.addr, |_, _| {});
    let mut t = cloud.accept().await;
    t.send(TunnelMessage::new(
        7,
        MessageType::LogsConnect,
        &b"{broken"[..],
    ))
    .await;
    let m = t.next_tunnel().await.unwrap();
    assert_eq!((m.connect_id, m.kind), (7, MessageType::RemoveConnect));

    let null_header = r#"{"MessID":8,"url":{"Scheme":"http","Host":"127.0.0.1:10350","Path":"/metrics","RawQuery":""},"header":null}"#;
    t.send(TunnelMessage::new(
        8,
        MessageType::MetricConnect,
        null_header,
    ))
    .await;
    let mut want = kubelet::METRICS_BODY.to_vec();
    want.push(b'\n');
    assert_eq!(t.collect(8).await, want);
    assert_eq!(agent.stats().streams_total, 2);
    agent.shutdown().await;
}

#[actix_rt::test]
async fn edge_should_answer_a_kubelet_dial_failure_with_remove_connect() {
    let cloud = ScriptedCloud::start().await;
    let unused = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let agent = cloud.agent(unused, |_, _| {});
    let mut t = cloud.accept().await;
    t.send(TunnelMessage::new(
        3,
        MessageType::LogsConnect,
        connect(3, "/containerLogs/a/b/c", &[], None),
    ))
    .await;
    let m = t.next_tunnel().await.unwrap();
    assert_eq!((m.connect_id, m.kind), (3, MessageType::RemoveConnect));
    t.send(TunnelMessage::new(
        4,
        MessageType::ExecConnect,
        connect(4, "/exec/a/b/c", &[], Some("POST")),
    ))
    .await;
    let m = t.next_tunnel().await.unwrap();
    assert_eq!((m.connect_id, m.kind), (4, MessageType::RemoveConnect));
    agent.shutdown().await;
}

#[actix_rt::test]
async fn edge_should_ignore_unknown_ids_and_only_ever_call_its_own_kubelet() {
    let cloud = ScriptedCloud::start().await;
    let kubelet = FakeKubelet::start().await;
    let agent = cloud.agent(kubelet.addr, |_, _| {});
    let mut t = cloud.accept().await;
    t.send(TunnelMessage::data(99, &b"nobody"[..])).await;
    t.send(TunnelMessage::remove(98)).await;
    t.send(TunnelMessage::new(5, MessageType::Unknown(42), &b"?"[..]))
        .await;
    // A URL naming another host still goes to the configured kubelet (no SSRF).
    let url = GoUrl {
        scheme: "http".into(),
        host: "203.0.113.9:80".into(),
        path: "/containerLogs/ns/p/c".into(),
        raw_query: "tailLines=1".into(),
        ..GoUrl::default()
    };
    let json = ConnectRequest::new(6, url, [], None).to_go_json();
    t.send(TunnelMessage::new(6, MessageType::LogsConnect, json))
        .await;
    assert_eq!(t.collect(6).await, kubelet::log_body());
    let seen = kubelet.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/containerLogs/ns/p/c?tailLines=1");
    assert_eq!(
        seen[0].headers.get_str("Host"),
        Some(kubelet.addr.to_string().as_str())
    );
    agent.shutdown().await;
}

#[actix_rt::test]
async fn edge_should_close_on_close_connect_and_redial() {
    let cloud = ScriptedCloud::start().await;
    let agent = cloud.agent("127.0.0.1:1".parse().unwrap(), |_, _| {});
    let mut t = cloud.accept().await;
    assert!(agent.wait_connected(Duration::from_secs(5)).await);
    t.send(TunnelMessage::close(
        "failed to Update KubeletEndpoint Port",
    ))
    .await;
    assert!(
        t.next_tunnel().await.is_none(),
        "the edge must close the tunnel"
    );
    let started = std::time::Instant::now();
    let _again = cloud.accept().await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(agent.wait_connected(Duration::from_secs(5)).await);
    assert_eq!(agent.stats().tunnels, 2);
    agent.shutdown().await;
}

#[actix_rt::test]
async fn edge_should_drop_a_silent_tunnel_after_its_read_deadline() {
    let cloud = ScriptedCloud::start().await;
    let agent = cloud.agent("127.0.0.1:1".parse().unwrap(), |c, o| {
        c.read_deadline = 1;
        o.ping_interval = Duration::from_millis(200);
    });
    let _t = cloud.accept().await;
    assert!(agent.wait_connected(Duration::from_secs(5)).await);
    // We never answer its pings.
    assert!(
        agent.wait_disconnected(Duration::from_secs(3)).await,
        "silent tunnel kept"
    );
    let _again = cloud.accept().await;
    agent.shutdown().await;
}

#[actix_rt::test]
async fn edge_exec_should_write_a_raw_request_and_relay_the_101_head_and_bytes_both_ways() {
    let cloud = ScriptedCloud::start().await;
    let kubelet = FakeKubelet::start().await;
    let agent = cloud.agent(kubelet.addr, |_, _| {});
    let mut t = cloud.accept().await;
    let key = ws::new_client_key();
    let headers = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-Websocket-Version", "13"),
        ("Sec-Websocket-Key", key.as_str()),
        ("User-Agent", "kube-apiserver/test"),
    ];
    t.send(TunnelMessage::new(
        11,
        MessageType::ExecConnect,
        connect(
            11,
            "/exec/ns/p/c?command=cat&input=1",
            &headers,
            Some("GET"),
        ),
    ))
    .await;
    let first = t.next_tunnel().await.unwrap();
    assert_eq!(first.kind, MessageType::Data);
    let mut got = first.data.to_vec();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        got.extend_from_slice(&t.next_tunnel().await.unwrap().data);
    }
    assert!(got.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
    let rec = &kubelet.execs()[0];
    assert_eq!(&got[..rec.head_sent.len()], &rec.head_sent[..]);
    let req = &kubelet.requests()[0];
    assert_eq!(req.method, "GET");
    assert_eq!(
        req.headers.get_str("User-Agent"),
        Some("kube-apiserver/test")
    );

    // stdin in, stdout back; then the kubelet ends and the edge sends REMOVE_CONNECT once.
    t.send(TunnelMessage::data(
        11,
        support::channel_frame(0, b"\x00\xffhi"),
    ))
    .await;
    t.send(TunnelMessage::data(11, support::channel_frame(255, &[0])))
        .await;
    let mut rest = Vec::new();
    loop {
        let m = t.next_tunnel().await.unwrap();
        match m.kind {
            MessageType::Data => rest.extend_from_slice(&m.data),
            MessageType::RemoveConnect => break,
            other => panic!("unexpected {other}"),
        }
    }
    let rec = &kubelet.execs()[0];
    let mut all = got[rec.head_sent.len()..].to_vec();
    all.extend_from_slice(&rest);
    assert_eq!(
        all, rec.sent,
        "bytes after the head must be the kubelet's, unchanged"
    );
    agent.shutdown().await;
}
