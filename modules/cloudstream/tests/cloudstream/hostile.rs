//! Hostile and broken peers on both ports: admission limits, an edge that never answers an
//! exec, clients that do not read, a slow reader beside other streams of the same node,
//! Close and REMOVE_CONNECT answers, and ambiguous request framing. Each refusal is shown
//! together with a legitimate peer that is still served.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::{self, Cloud, RawTunnel, exec_request, raw_dial, upgrade_request};
use bytes::BytesMut;
use cloudstream::Tuning;
use kubeedge_api::listener::ListenerLimits;
use kubeedge_wire::http1::{self, BodyReader};
use kubeedge_wire::tunnel::{MessageType, TunnelMessage};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use ws_peer::{OpCode, WsMessage};

async fn connect_raw(cloud: &Cloud, node: &str) -> RawTunnel {
    connect_raw_as(cloud, node, None).await
}

/// A raw tunnel (an edge without flow control, as edgecore) for `node` claiming `ip`.
async fn connect_raw_as(cloud: &Cloud, node: &str, ip: Option<&str>) -> RawTunnel {
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

/// A TCP connection to `port` from the loopback address `from` (127.0.0.x).
async fn tcp_from(from: [u8; 4], port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback source address");
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap()
}

/// An API server connection (TLS with the kubelet-client certificate) from `from`.
async fn api_conn_from(cloud: &Cloud, from: [u8; 4]) -> std::io::Result<TlsStream<TcpStream>> {
    let cert = cloud
        .stream_ca
        .client("kube-apiserver-kubelet-client", support::Eku::ClientAuth);
    let config = pki::stream_tls::client_config(
        cert.cert_chain.clone(),
        cert.key.clone_key(),
        Some(&[cloud.stream_ca.ca()]),
    )
    .unwrap();
    let tcp = tcp_from(from, cloud.handle.stream_addr().port()).await;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

/// True when the server closes `tcp` within `limit` without sending anything.
async fn closed_unanswered(tcp: &mut TcpStream, limit: Duration) -> bool {
    let mut b = [0u8; 16];
    matches!(
        tokio::time::timeout(limit, tcp.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn stats(cloud: &Cloud, listener: &str) -> kubeedge_api::listener::ListenerStats {
    cloud
        .handle
        .listener_stats()
        .into_iter()
        .find(|s| s.listener == listener)
        .unwrap()
}

#[actix_rt::test]
async fn stream_port_should_cap_unauthenticated_connections_and_still_serve_others() {
    let cloud = Cloud::start_configured(
        Tuning::default(),
        |c| {
            c.stream_limits = ListenerLimits {
                max_unauthenticated_per_ip: 2,
                pre_auth_timeout_seconds: 1,
                ..ListenerLimits::default()
            };
        },
        |cs| cs,
    )
    .await;
    let port = cloud.handle.stream_addr().port();
    // Two idle sockets from one address take its unauthenticated slots…
    let _idle1 = tcp_from([127, 0, 0, 3], port).await;
    let _idle2 = tcp_from([127, 0, 0, 3], port).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // …so a third from it is closed at once, unread and unanswered.
    let mut third = tcp_from([127, 0, 0, 3], port).await;
    assert!(closed_unanswered(&mut third, Duration::from_secs(1)).await);
    // Another address is served meanwhile.
    let mut conn = api_conn_from(&cloud, [127, 0, 0, 4]).await.unwrap();
    conn.write_all(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (head, _) = support::read_response(&mut conn).await;
    assert_eq!(head.status, 404);
    // The idle ones are cut at the pre-authentication deadline; the address is served again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut again = api_conn_from(&cloud, [127, 0, 0, 3]).await.unwrap();
    again
        .write_all(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(support::read_response(&mut again).await.0.status, 404);
    let s = stats(&cloud, "cloudstream_stream");
    assert!(s.refused_per_ip >= 1, "{s:?}");
    assert!(s.timed_out >= 2, "{s:?}");
    // The authenticated connections count as open, not as handshaking.
    assert_eq!(s.handshaking, 0, "{s:?}");
    assert_eq!(s.open, 2, "{s:?}");
}

#[actix_rt::test]
async fn tunnel_port_should_cap_connections_and_handshakes_and_still_admit_an_edge() {
    let cloud = Cloud::start_configured(
        Tuning::default(),
        |c| {
            c.tunnel_limits = ListenerLimits {
                max_connections: 3,
                max_handshakes: 1,
                max_unauthenticated_per_ip: 0,
                max_unauthenticated_per_network: 0,
                pre_auth_timeout_seconds: 1,
            };
        },
        |cs| cs,
    )
    .await;
    let port = cloud.handle.tunnel_addr().port();
    let idle = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut refused = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert!(closed_unanswered(&mut refused, Duration::from_secs(1)).await);
    assert!(stats(&cloud, "cloudstream_tunnel").refused_handshakes >= 1);
    // After the deadline the idle socket is gone and edges get in.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    drop(idle);
    let a = connect_raw_as(&cloud, "edge-a", Some("10.0.0.1")).await;
    let b = connect_raw_as(&cloud, "edge-b", Some("10.0.0.2")).await;
    let c = connect_raw_as(&cloud, "edge-c", Some("10.0.0.3")).await;
    // Three open tunnels: the connection cap refuses a fourth socket outright.
    let mut fourth = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert!(closed_unanswered(&mut fourth, Duration::from_secs(1)).await);
    let s = stats(&cloud, "cloudstream_tunnel");
    assert_eq!((s.open, s.handshaking), (3, 0), "{s:?}");
    assert!(s.refused_connections >= 1 && s.timed_out >= 1, "{s:?}");
    drop((a, b, c));
}

/// Opens an exec through the stream server and returns the API connection and the
/// EXEC_CONNECT the raw edge received.
async fn open_exec(cloud: &Cloud, edge: &mut RawTunnel) -> (TlsStream<TcpStream>, u64) {
    let mut conn = cloud.api_conn().await;
    let (head, _) = exec_request("/exec/ns/web/c?command=sh&stdin=1", "POST");
    conn.write_all(&head).await.unwrap();
    let connect = edge.next_tunnel().await.unwrap();
    assert_eq!(connect.kind, MessageType::ExecConnect);
    (conn, connect.connect_id)
}

/// The next tunnel message that is not a control frame, within `limit`; `None` if none.
async fn next_within(edge: &mut RawTunnel, limit: Duration) -> Option<TunnelMessage> {
    tokio::time::timeout(limit, edge.next_tunnel())
        .await
        .ok()
        .flatten()
}

#[actix_rt::test]
async fn exec_to_an_edge_that_never_answers_should_get_504_and_a_remove() {
    let tuning = Tuning {
        edge_response_timeout: Duration::from_secs(1),
        ..Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut edge = connect_raw(&cloud, "edge-1").await;
    let (mut conn, id) = open_exec(&cloud, &mut edge).await;
    let started = Instant::now();
    let (head, body) =
        tokio::time::timeout(Duration::from_secs(5), support::read_response(&mut conn))
            .await
            .expect("no answer after the edge deadline");
    assert_eq!(head.status, 504);
    assert!(String::from_utf8_lossy(&body).contains("did not answer"));
    assert!(started.elapsed() < Duration::from_secs(4));
    let remove = next_within(&mut edge, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(
        (remove.connect_id, remove.kind),
        (id, MessageType::RemoveConnect)
    );
    assert_eq!(cloud.handle.counters().edge_response_timeouts, 1);
    assert_eq!(cloud.handle.counters().streams_active, 0);
    // Late DATA from the edge for that stream gets no second REMOVE_CONNECT.
    edge.send(&TunnelMessage::data(id, &b"HTTP/1.1 101"[..]))
        .await;
    assert!(
        next_within(&mut edge, Duration::from_millis(500))
            .await
            .is_none()
    );

    // An edge that answers is still served on the same tunnel.
    let (mut conn, id) = open_exec(&cloud, &mut edge).await;
    edge.send(&TunnelMessage::data(
        id,
        &b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..],
    ))
    .await;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut conn, &mut buf)
        .await
        .unwrap();
    assert_eq!(head.status, 101);
}

#[actix_rt::test]
async fn exec_client_that_goes_away_before_the_edge_answers_should_remove_the_stream() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut edge = connect_raw(&cloud, "edge-1").await;
    let (conn, id) = open_exec(&cloud, &mut edge).await;
    // The edge has not answered (default deadline 30 s); the client leaves.
    drop(conn);
    let remove = next_within(&mut edge, Duration::from_secs(3))
        .await
        .expect("the API side's close must be noticed before the edge answers");
    assert_eq!(
        (remove.connect_id, remove.kind),
        (id, MessageType::RemoveConnect)
    );
}

#[actix_rt::test]
async fn api_client_that_stops_reading_should_be_dropped_after_the_write_timeout() {
    let tuning = Tuning {
        write_timeout: Duration::from_secs(1),
        // Large enough that the queue budget is not what ends the stream.
        stream_queue_bytes: 64 << 20,
        ..Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut edge = connect_raw(&cloud, "edge-1").await;
    let (mut conn, id) = open_exec(&cloud, &mut edge).await;
    edge.send(&TunnelMessage::data(
        id,
        &b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..],
    ))
    .await;
    let mut buf = BytesMut::new();
    assert_eq!(
        http1::read_response_head(&mut conn, &mut buf)
            .await
            .unwrap()
            .status,
        101
    );
    // The client now reads nothing while the edge sends far more than socket buffers hold.
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..32 {
        edge.send(&TunnelMessage::data(id, chunk.clone())).await;
    }
    let remove = loop {
        let m = next_within(&mut edge, Duration::from_secs(10))
            .await
            .expect("the stuck client's stream must end");
        if m.kind == MessageType::RemoveConnect {
            break m;
        }
    };
    assert_eq!(remove.connect_id, id);
    assert!(cloud.handle.counters().api_write_timeouts >= 1);
    drop(conn);
}

#[actix_rt::test]
async fn edge_close_1000_should_be_echoed() {
    let cloud = Cloud::start().await;
    let mut edge = connect_raw(&cloud, "edge-1").await;
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye");
    edge.frame(OpCode::Close, true, &payload).await;
    loop {
        match edge.next().await {
            Some(WsMessage::Close(code, _)) => {
                assert_eq!(code, Some(1000));
                break;
            }
            Some(_) => continue,
            None => panic!("the tunnel closed without a Close frame"),
        }
    }
    assert!(edge.next().await.is_none());
}

#[actix_rt::test]
async fn data_for_an_unknown_stream_should_get_exactly_one_remove() {
    let cloud = Cloud::start().await;
    let mut edge = connect_raw(&cloud, "edge-1").await;
    for _ in 0..3 {
        edge.send(&TunnelMessage::data(999, &b"orphan"[..])).await;
    }
    edge.send(&TunnelMessage::data(1000, &b"orphan"[..])).await;
    edge.frame(OpCode::Ping, true, b"marker").await;
    let mut removes = Vec::new();
    loop {
        match edge.next().await.expect("tunnel closed") {
            WsMessage::Text(t) => {
                let m = TunnelMessage::decode(t).unwrap();
                assert_eq!(m.kind, MessageType::RemoveConnect);
                removes.push(m.connect_id);
            }
            WsMessage::Pong(p) if &p[..] == b"marker" => break,
            _ => {}
        }
    }
    assert_eq!(removes, [999, 1000]);
    // Still one per id, however late.
    edge.send(&TunnelMessage::data(999, &b"again"[..])).await;
    assert!(
        next_within(&mut edge, Duration::from_millis(500))
            .await
            .is_none()
    );
    assert_eq!(cloud.handle.counters().removes_for_unknown, 2);
}

#[actix_rt::test]
async fn ambiguous_content_length_should_be_refused_with_400_and_closed() {
    let cloud = Cloud::start().await;
    for extra in [
        "Content-Length: 0\r\nContent-Length: 0\r\n",
        "Content-Length: 0\r\nContent-Length: 5\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
    ] {
        let mut conn = cloud.api_conn().await;
        let req = format!("GET /containerLogs/ns/web/c HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        conn.write_all(req.as_bytes()).await.unwrap();
        let (head, _) = support::read_response(&mut conn).await;
        assert_eq!(head.status, 400, "{extra:?}");
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut rest))
            .await
            .expect("connection left open")
            .unwrap_or(0);
        assert_eq!(n, 0, "nothing may follow the 400");
    }
    // A single Content-Length is fine.
    let mut conn = cloud.api_conn().await;
    conn.write_all(b"GET /nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(support::read_response(&mut conn).await.0.status, 404);
}

#[actix_rt::test]
async fn a_client_far_behind_should_lose_only_its_own_stream_on_an_edge_without_flow_control() {
    let tuning = Tuning {
        stream_queue_bytes: 256 * 1024,
        ..Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut edge = connect_raw(&cloud, "edge-1").await;
    // Stream A: its client never reads the body.
    let mut stuck = cloud.api_conn().await;
    stuck
        .write_all(b"GET /containerLogs/ns/web/c?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let a = edge.next_tunnel().await.unwrap().connect_id;
    // Stream B: a normal client.
    let mut fine = cloud.api_conn().await;
    fine.write_all(b"GET /containerLogs/ns/web/c HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let b = edge.next_tunnel().await.unwrap().connect_id;
    // Far more than A's budget plus every socket buffer on the way.
    let chunk = vec![b'a'; 512 * 1024];
    for _ in 0..40 {
        edge.send(&TunnelMessage::data(a, chunk.clone())).await;
    }
    // The tunnel reader never waited for A: B is answered at once.
    let started = Instant::now();
    edge.send(&TunnelMessage::data(b, &b"hello from b\n"[..]))
        .await;
    edge.send(&TunnelMessage::remove(b)).await;
    let (head, body) =
        tokio::time::timeout(Duration::from_secs(2), support::read_response(&mut fine))
            .await
            .expect("stream B waited for stream A");
    assert_eq!((head.status, &body[..]), (200, &b"hello from b\n"[..]));
    assert!(started.elapsed() < Duration::from_secs(2));
    // A was ended with one REMOVE_CONNECT.
    let remove = loop {
        let m = next_within(&mut edge, Duration::from_secs(5))
            .await
            .unwrap();
        if m.kind == MessageType::RemoveConnect {
            break m;
        }
    };
    assert_eq!(remove.connect_id, a);
    assert!(cloud.handle.counters().streams_overflowed >= 1);
    drop(stuck);
}

/// A kubelet stand-in with one fast container: `/containerLogs/ns/fast/…` answers a large
/// body written as fast as the edge takes it; anything else a short body.
async fn fast_kubelet(big: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let big = std::sync::Arc::new(big);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let big = big.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                let Ok(head) = http1::read_request_head(&mut sock, &mut buf).await else {
                    return;
                };
                let body: &[u8] = if head.path().contains("/fast/") {
                    &big
                } else {
                    b"short answer\n"
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.write_all(body).await;
            });
        }
    });
    addr
}

#[actix_rt::test]
async fn a_slow_reader_should_slow_only_itself_and_get_every_byte() {
    let tuning = Tuning {
        stream_queue_bytes: 256 * 1024,
        ..Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    cloud.pods.place("ns", "fast", "edge-1");
    cloud.pods.place("ns", "quiet", "edge-1");
    let big: Vec<u8> = (0..6u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let kubelet = fast_kubelet(big.clone()).await;
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet).await;

    let mut slow = cloud.api_conn().await;
    slow.write_all(b"GET /containerLogs/ns/fast/c HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        let mut buf = BytesMut::new();
        let head = http1::read_response_head(&mut slow, &mut buf)
            .await
            .unwrap();
        assert_eq!(head.status, 200);
        let mut body = BodyReader::new(&head);
        let mut got = Vec::new();
        // About 1 MiB/s: far slower than the container writes.
        while let Some(p) = body.next(&mut slow, &mut buf, 16 * 1024).await.unwrap() {
            got.extend_from_slice(&p);
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        got
    });
    // Let the slow stream's window fill and its backlog build.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..3 {
        let started = Instant::now();
        let (head, body) = tokio::time::timeout(
            Duration::from_secs(2),
            cloud.get("/containerLogs/ns/quiet/c", ""),
        )
        .await
        .expect("a small request on the same node waited for the slow reader");
        assert_eq!((head.status, &body[..]), (200, &b"short answer\n"[..]));
        assert!(started.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        !reader.is_finished(),
        "the slow reader should still be reading"
    );
    let got = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("slow reader did not finish")
        .unwrap();
    assert_eq!(got.len(), big.len());
    assert!(
        got == big,
        "the slow reader's bytes must arrive whole and in order"
    );
    let c = cloud.handle.counters();
    assert_eq!(c.streams_overflowed, 0);
}

#[actix_rt::test]
async fn a_node_should_carry_at_most_its_stream_limit() {
    let tuning = Tuning {
        max_streams_per_node: 2,
        ..Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    cloud.pods.place("ns", "web", "edge-1");
    let mut edge = connect_raw(&cloud, "edge-1").await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut c = cloud.api_conn().await;
        c.write_all(b"GET /containerLogs/ns/web/c?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        open.push((c, edge.next_tunnel().await.unwrap().connect_id));
    }
    let (head, body) = cloud.get("/containerLogs/ns/web/c", "").await;
    assert_eq!(head.status, 503, "{}", String::from_utf8_lossy(&body));
    assert_eq!(cloud.handle.counters().streams_refused_per_node, 1);
    // One ends; the next request is served again.
    let (_, id) = open.pop().unwrap();
    edge.send(&TunnelMessage::remove(id)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = cloud.api_conn().await;
    c.write_all(b"GET /containerLogs/ns/web/c HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let connect = loop {
        let m = edge.next_tunnel().await.unwrap();
        if m.kind == MessageType::LogsConnect {
            break m;
        }
    };
    edge.send(&TunnelMessage::data(connect.connect_id, &b"ok\n"[..]))
        .await;
    edge.send(&TunnelMessage::remove(connect.connect_id)).await;
    let (head, body) = support::read_response(&mut c).await;
    assert_eq!((head.status, &body[..]), (200, &b"ok\n"[..]));
}
