//! The tunnel at the frame level, as a Go edge drives it: identity checks, upgrade errors,
//! sessions by name and IP, reconnects, opcodes, fragments, pings, connect ids.

use std::time::Duration;

use crate::support::{self, Cloud, Eku, FakeKubelet, Pki, RawTunnel, raw_dial, upgrade_request};
use bytes::BytesMut;
use kubeedge_wire::http1::{self, BodyReader};
use kubeedge_wire::tunnel::{ConnectRequest, MessageType, TunnelMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ws_peer::{OpCode, WsMessage};

async fn connect_raw(cloud: &Cloud, node: &str, ip: Option<&str>) -> RawTunnel {
    let (head, tunnel, body) = raw_dial(
        cloud.handle.tunnel_addr().port(),
        &cloud.edge_ca.node(node),
        &upgrade_request(Some(node), ip),
    )
    .await
    .unwrap();
    assert_eq!(head.status, 101, "{}", String::from_utf8_lossy(&body));
    assert!(
        cloud
            .handle
            .wait_for_session(node, Duration::from_secs(5))
            .await
    );
    tunnel.unwrap()
}

#[actix_rt::test]
async fn tunnel_should_refuse_clients_without_a_certificate_or_with_a_foreign_one() {
    let cloud = Cloud::start().await;
    let foreign = Pki::new("someone-else").node("edge-1");
    let refused = raw_dial(
        cloud.handle.tunnel_addr().port(),
        &foreign,
        &upgrade_request(Some("edge-1"), None),
    )
    .await;
    assert!(
        refused.is_err(),
        "a foreign-CA certificate must fail the TLS handshake"
    );

    let config = rustls::ClientConfig::builder_with_provider(pki::stream_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates({
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cloud.edge_ca.ca()).unwrap();
            roots
        })
        .with_no_client_auth();
    let result = async {
        let mut s = support::tls_connect(
            cloud.handle.tunnel_addr().port(),
            std::sync::Arc::new(config),
        )
        .await?;
        s.write_all(upgrade_request(Some("edge-1"), None).as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    }
    .await;
    assert!(
        result.is_err() || result.unwrap().is_empty(),
        "no HTTP answer without a client certificate"
    );
    // The client can see the alert before the server task has counted the refusal.
    tokio::time::timeout(Duration::from_secs(5), async {
        while cloud.handle.counters().tunnels_refused < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("both refusals counted");
    assert!(cloud.handle.connected_nodes().is_empty());
}

#[actix_rt::test]
async fn tunnel_should_refuse_a_certificate_without_client_auth_usage() {
    let cloud = Cloud::start().await;
    let server_only = cloud
        .edge_ca
        .client("system:node:edge-1", Eku::ServerAuthOnly);
    let r = raw_dial(
        cloud.handle.tunnel_addr().port(),
        &server_only,
        &upgrade_request(Some("edge-1"), None),
    )
    .await;
    assert!(r.is_err());
}

#[actix_rt::test]
async fn tunnel_should_accept_a_ca_signed_edge_certificate_and_refuse_one_for_another_node() {
    let cloud = Cloud::start().await;
    let _ok = connect_raw(&cloud, "edge-1", Some("10.0.0.1")).await;
    let (head, tunnel, body) = raw_dial(
        cloud.handle.tunnel_addr().port(),
        &cloud.edge_ca.node("edge-2"),
        &upgrade_request(Some("edge-1"), None),
    )
    .await
    .unwrap();
    assert_eq!(head.status, 403);
    assert!(tunnel.is_none());
    assert!(String::from_utf8_lossy(&body).contains("does not match node"));
    assert_eq!(cloud.handle.connected_nodes(), ["edge-1"]);
}

#[actix_rt::test]
async fn upgrade_without_connection_upgrade_should_get_400_and_post_405() {
    let cloud = Cloud::start().await;
    let port = cloud.handle.tunnel_addr().port();
    let cert = cloud.edge_ca.node("edge-1");
    let no_upgrade = upgrade_request(Some("edge-1"), None).replace("Connection: Upgrade\r\n", "");
    let (head, _, body) = raw_dial(port, &cert, &no_upgrade).await.unwrap();
    assert_eq!(head.status, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("'upgrade' token not found in 'Connection' header")
    );
    let post = upgrade_request(Some("edge-1"), None).replacen("GET", "POST", 1);
    assert_eq!(raw_dial(port, &cert, &post).await.unwrap().0.status, 405);
    let other = upgrade_request(Some("edge-1"), None).replacen("/v1/kubeedge/connect", "/other", 1);
    assert_eq!(raw_dial(port, &cert, &other).await.unwrap().0.status, 404);
}

#[actix_rt::test]
async fn headers_should_be_read_case_insensitively_and_a_missing_ip_falls_back_to_the_peer() {
    let cloud = Cloud::start().await;
    let request = upgrade_request(Some("edge-1"), None)
        .replace("Sessionhostnameoverride", "sESSIONhostNAMEoverride");
    let (head, tunnel, _) = raw_dial(
        cloud.handle.tunnel_addr().port(),
        &cloud.edge_ca.node("edge-1"),
        &request,
    )
    .await
    .unwrap();
    assert_eq!(head.status, 101);
    let mut tunnel = tunnel.unwrap();
    assert!(
        cloud
            .handle
            .wait_for_session("edge-1", Duration::from_secs(5))
            .await
    );
    assert!(
        cloud
            .handle
            .wait_for_session("127.0.0.1", Duration::from_secs(1))
            .await,
        "peer IP is the fallback key"
    );
    // A metrics request by Host IP reaches this tunnel.
    let api = tokio::spawn({
        let port = cloud.handle.stream_addr().port();
        let cert = cloud.stream_ca.client("apiserver", Eku::ClientAuth);
        let ca = cloud.stream_ca.ca();
        async move {
            let config = pki::stream_tls::client_config(
                cert.cert_chain.clone(),
                cert.key.clone_key(),
                Some(&[ca]),
            )
            .unwrap();
            let mut c = support::tls_connect(port, config).await.unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:10351\r\n\r\n")
                .await
                .unwrap();
            support::read_response(&mut c).await
        }
    });
    let connect = tunnel.next_tunnel().await.unwrap();
    assert_eq!(connect.kind, MessageType::MetricConnect);
    tunnel
        .send(&TunnelMessage::data(connect.connect_id, &b"up 1\n"[..]))
        .await;
    tunnel
        .send(&TunnelMessage::remove(connect.connect_id))
        .await;
    let (head, body) = api.await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(body, b"up 1\n");
}

#[actix_rt::test]
async fn session_should_be_reachable_by_node_name_and_by_internal_ip() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    let _edge = cloud.edge("edge-1", "10.9.8.7", kubelet.addr).await;
    // By IP: the Host the API server dialed.
    let (head, body) = cloud
        .get("/stats/summary", "Accept-Encoding: gzip\r\n")
        .await;
    assert_eq!(head.status, 503, "Host 127.0.0.1 is not this node's IP");
    let _ = body;
    let mut conn = cloud.api_conn().await;
    conn.write_all(
        b"GET /metrics/cadvisor HTTP/1.1\r\nHost: 10.9.8.7:10351\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    .await
    .unwrap();
    let (head, body) = support::read_response(&mut conn).await;
    assert_eq!(head.status, 200);
    // One DATA per line, and the missing final newline is added (upstream parity).
    let mut want = support::kubelet::METRICS_BODY.to_vec();
    want.push(b'\n');
    assert_eq!(body, want);
    // By name: node proxy requests carry X-Forwarded-Uri.
    let (head, body) = cloud
        .get(
            "/metrics",
            "X-Forwarded-Uri: /api/v1/nodes/edge-1/proxy/metrics\r\n",
        )
        .await;
    assert_eq!((head.status, body), (200, want.clone()));
    for r in kubelet.requests() {
        assert_eq!(r.headers.get_str("Accept-Encoding"), Some("identity"));
    }
}

#[actix_rt::test]
async fn reconnect_should_replace_the_session_and_fail_the_old_streams_at_once() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut old = connect_raw(&cloud, "edge-1", Some("10.0.0.1")).await;

    let mut api = cloud.api_conn().await;
    api.write_all(b"GET /containerLogs/ns/web/c?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let connect = old.next_tunnel().await.unwrap();
    old.send(&TunnelMessage::data(connect.connect_id, &b"before\n"[..]))
        .await;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut api, &mut buf).await.unwrap();
    let mut body = BodyReader::new(&head);
    assert_eq!(
        &body
            .next(&mut api, &mut buf, 1 << 20)
            .await
            .unwrap()
            .unwrap()[..],
        b"before\n"
    );

    let started = std::time::Instant::now();
    let mut new = connect_raw(&cloud, "edge-1", Some("10.0.0.2")).await;
    // The old stream fails (no clean end of the chunked body), promptly.
    let rest = tokio::time::timeout(
        Duration::from_secs(3),
        body.next(&mut api, &mut buf, 1 << 20),
    )
    .await
    .expect("old stream left hanging");
    assert!(
        rest.is_err(),
        "the old stream must end with an error, got {rest:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // The old tunnel is closed by the cloud.
    loop {
        match old.next().await {
            None | Some(WsMessage::Close(..)) => break,
            Some(_) => {}
        }
    }
    // New requests use the new tunnel; the old IP key is gone.
    assert_eq!(cloud.handle.connected_nodes(), ["edge-1"]);
    let api2 = tokio::spawn({
        let mut c = cloud.api_conn().await;
        async move {
            c.write_all(b"GET /containerLogs/ns/web/c HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            support::read_response(&mut c).await
        }
    });
    let connect = new.next_tunnel().await.unwrap();
    assert_eq!(connect.kind, MessageType::LogsConnect);
    new.send(&TunnelMessage::data(connect.connect_id, &b"after\n"[..]))
        .await;
    new.send(&TunnelMessage::remove(connect.connect_id)).await;
    assert_eq!(api2.await.unwrap().1, b"after\n");
    let (head, _) = cloud.get("/metrics", "").await;
    assert_eq!(head.status, 503);
    let mut c = cloud.api_conn().await;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:10351\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        support::read_response(&mut c).await.0.status,
        503,
        "stale IP key must be evicted"
    );
}

/// Opens a logs stream through `tunnel` and returns the API connection and the connect id.
async fn open_logs(
    cloud: &Cloud,
    tunnel: &mut RawTunnel,
) -> (
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    TunnelMessage,
) {
    let mut api = cloud.api_conn().await;
    api.write_all(b"GET /containerLogs/ns/web/c HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let connect = tunnel.next_tunnel().await.unwrap();
    (api, connect)
}

#[actix_rt::test]
async fn connect_json_should_carry_the_frame_id_and_ids_start_at_1() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut t = connect_raw(&cloud, "edge-1", None).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (api, connect) = open_logs(&cloud, &mut t).await;
        assert_eq!(connect.kind, MessageType::LogsConnect);
        let req = ConnectRequest::from_json(&connect.data).unwrap();
        assert_eq!(req.mess_id, connect.connect_id);
        assert_eq!(req.url.host, "127.0.0.1:10350");
        assert_eq!(req.url.scheme, "http");
        assert_eq!(req.url.path, "/containerLogs/ns/web/c");
        assert!(
            std::str::from_utf8(&connect.data)
                .unwrap()
                .contains("\"header\":{")
        );
        ids.push(connect.connect_id);
        // The client going away sends REMOVE_CONNECT for its id, once.
        drop(api);
        let removed = t.next_tunnel().await.unwrap();
        assert_eq!(
            (removed.kind, removed.connect_id),
            (MessageType::RemoveConnect, connect.connect_id)
        );
    }
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(cloud.handle.counters().streams_active, 0);
}

#[actix_rt::test]
async fn non_utf8_text_and_fragmented_messages_should_be_relayed() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut t = connect_raw(&cloud, "edge-1", None).await;
    let (mut api, connect) = open_logs(&cloud, &mut t).await;
    let id = connect.connect_id;
    t.send(&TunnelMessage::data(id, &b"\xff\xfe\xc3\x28 raw\n"[..]))
        .await;
    // A message split as 4096 + 904 bytes, with a ping between the fragments (gorilla's
    // NextWriter does this for big messages).
    let big = TunnelMessage::data(id, vec![b'z'; 4998]).encode();
    assert_eq!(big.len(), 5000);
    t.frame(OpCode::Text, false, &big[..4096]).await;
    t.frame(OpCode::Ping, true, b"ping you").await;
    t.frame(OpCode::Continuation, true, &big[4096..]).await;
    t.send(&TunnelMessage::remove(id)).await;
    let (head, body) = support::read_response(&mut api).await;
    assert_eq!(head.status, 200);
    let mut want = b"\xff\xfe\xc3\x28 raw\n".to_vec();
    want.extend(vec![b'z'; 4998]);
    assert_eq!(body, want);
    // The ping got its pong with the same payload.
    loop {
        match t.next().await.unwrap() {
            WsMessage::Pong(p) => {
                assert_eq!(&p[..], b"ping you");
                break;
            }
            WsMessage::Close(..) => panic!("closed"),
            _ => {}
        }
    }
}

async fn assert_session_ends(cloud: &Cloud, t: &mut RawTunnel) {
    loop {
        match t.next().await {
            None | Some(WsMessage::Close(..)) => break,
            Some(_) => {}
        }
    }
    tokio::time::timeout(Duration::from_secs(5), async {
        while !cloud.handle.connected_nodes().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("session not evicted");
}

#[actix_rt::test]
async fn binary_frame_from_the_edge_should_end_the_session_as_upstream() {
    let cloud = Cloud::start().await;
    let mut t = connect_raw(&cloud, "edge-1", None).await;
    t.frame(OpCode::Binary, true, &TunnelMessage::remove(5).encode())
        .await;
    assert_session_ends(&cloud, &mut t).await;
}

#[actix_rt::test]
async fn empty_message_should_end_the_session_and_fail_its_streams() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut t = connect_raw(&cloud, "edge-1", None).await;
    let (mut api, _connect) = open_logs(&cloud, &mut t).await;
    t.frame(OpCode::Text, true, b"").await;
    assert_session_ends(&cloud, &mut t).await;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut api, &mut buf).await.unwrap();
    let mut body = BodyReader::new(&head);
    assert!(
        body.next(&mut api, &mut buf, 1024).await.is_err(),
        "in-flight stream must fail"
    );
}

#[actix_rt::test]
async fn edge_vanishing_mid_stream_should_fail_in_flight_connections_promptly() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut t = connect_raw(&cloud, "edge-1", None).await;
    let (mut logs, connect) = open_logs(&cloud, &mut t).await;
    t.send(&TunnelMessage::data(connect.connect_id, &b"partial"[..]))
        .await;

    let mut exec = cloud.api_conn().await;
    let (head, _) = support::exec_request("/exec/ns/web/c?command=sh", "POST");
    exec.write_all(&head).await.unwrap();
    let exec_connect = t.next_tunnel().await.unwrap();
    assert_eq!(exec_connect.kind, MessageType::ExecConnect);
    let req = ConnectRequest::from_json(&exec_connect.data).unwrap();
    assert_eq!(req.method.as_deref(), Some("POST"));
    t.send(&TunnelMessage::data(
        exec_connect.connect_id,
        &b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..],
    ))
    .await;
    let mut first = [0u8; 36];
    exec.read_exact(&mut first).await.unwrap();

    // The edge disappears without a close frame or TLS close.
    let started = std::time::Instant::now();
    drop(t);
    let mut rest = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(3), exec.read_to_end(&mut rest)).await;
    assert!(r.is_ok(), "exec connection left open after the tunnel died");
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut logs, &mut buf)
        .await
        .unwrap();
    let mut body = BodyReader::new(&head);
    assert_eq!(
        &body.next(&mut logs, &mut buf, 1024).await.unwrap().unwrap()[..],
        b"partial"
    );
    let end = tokio::time::timeout(Duration::from_secs(3), body.next(&mut logs, &mut buf, 1024))
        .await
        .expect("logs stream left hanging");
    assert!(
        end.is_err(),
        "logs must end with an error, not a clean end: {end:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[actix_rt::test]
async fn silent_tunnel_should_be_dropped_after_the_pong_timeout() {
    let tuning = cloudstream::Tuning {
        ping_interval: Duration::from_millis(100),
        pong_timeout: Duration::from_millis(500),
        ..cloudstream::Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    let mut t = connect_raw(&cloud, "edge-1", None).await;
    // The cloud pings; a live edge answers (this one only reads).
    match t.next().await {
        Some(WsMessage::Ping(_)) => {}
        other => panic!("expected a ping, got {other:?}"),
    }
    assert_session_ends(&cloud, &mut t).await;
}
