//! Admission limits on the WebSocket listener and the certificate server, through real TCP
//! and TLS on 127.0.0.x: idle sockets are refused or timed out while edges with certificates
//! keep connecting; the certificate server refuses from the head, cuts stalled bodies off and
//! rate-limits node checks per source address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use cloudhub::HubHandle;
use kubeedge_api::listener::ListenerStats;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

const WS: &str = "cloudhub_websocket";
const HTTPS: &str = "cloudhub_https";

/// A second loopback source address (all of 127/8 is local on Linux).
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn stats(hub: &HubHandle, listener: &str) -> ListenerStats {
    hub.listener_stats()
        .into_iter()
        .find(|s| s.listener == listener)
        .unwrap_or_else(|| panic!("no stats for {listener}"))
}

/// A TCP connection from source address `from`.
async fn tcp_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

async fn tls_from(
    from: IpAddr,
    to: SocketAddr,
    tls: rustls::ClientConfig,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = tcp_from(from, to).await;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let mut s = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await?;
    s.flush().await?;
    Ok(s)
}

/// Whether the server ends `s` within `d` (EOF or reset) without sending anything.
async fn closed_within(s: &mut TcpStream, d: Duration) -> bool {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(d, s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(n)) => panic!("the server sent {n} bytes to a refused connection"),
        Err(_) => false,
    }
}

/// Upgrades as edge `node` (with its certificate) from source address `from`; the status.
async fn edge_from(h: &Harness, from: IpAddr, node: &str) -> (u16, TlsStream<TcpStream>) {
    let cert = h.edge_cert(node);
    let mut s = tls_from(from, h.ws, h.tls(Some(&cert))).await.unwrap();
    let mut req = format!(
        "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        edge_path(node)
    );
    for (k, v) in edge_headers(node) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let (status, _) = read_head(&mut s).await;
    (status, s)
}

/// Reads a response head: (status, head text).
async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> (u16, String) {
    let mut buf = Vec::new();
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_string();
            let status = head
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            return (status, head);
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(WAIT, s.read(&mut chunk))
            .await
            .expect("no response in time")
            .expect("connection failed before a response");
        assert!(n > 0, "closed before a response");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One request with `Connection: close` from source address `from`; the status.
async fn https_from(from: IpAddr, h: &Harness, path: &str) -> u16 {
    let mut s = tls_from(from, h.https, pki::tls::insecure_client_config())
        .await
        .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    read_head(&mut s).await.0
}

/// `n` requests for `path` written at once on one keep-alive connection from `from`; the
/// statuses of the responses, in order, until the server closes the connection.
async fn pipelined_from(from: IpAddr, h: &Harness, path: &str, n: usize) -> Vec<u16> {
    let mut s = tls_from(from, h.https, pki::tls::insecure_client_config())
        .await
        .unwrap();
    let one = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(one.repeat(n).as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    let mut buf = Vec::new();
    let mut statuses = Vec::new();
    while statuses.len() < n {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= i + 4 + length {
                statuses.push(
                    head.split(' ')
                        .nth(1)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0),
                );
                buf.drain(..i + 4 + length);
                continue;
            }
        }
        let mut chunk = [0u8; 16384];
        let read = tokio::time::timeout(WAIT, s.read(&mut chunk))
            .await
            .expect("no response in time");
        match read {
            Ok(0) | Err(_) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    statuses
}

/// Whether the peer ended the TLS stream (EOF, reset or alert) within `d`.
async fn tls_closed_within(s: &mut TlsStream<TcpStream>, d: Duration) -> bool {
    let mut buf = Vec::new();
    tokio::time::timeout(d, s.read_to_end(&mut buf))
        .await
        .is_ok()
}

#[actix_rt::test]
async fn idle_sockets_from_one_network_are_capped_whatever_their_addresses() {
    // Real sockets from many loopback addresses of 127.0.9.0/24: one address each is under
    // the per-address limit, together they would take the whole handshake budget. (IPv6 /64
    // and /48 keying has unit tests in kubeedge_api::listener: a test host has only ::1.)
    let h = Harness::with(|c| {
        c.websocket.limits.max_handshakes = 12;
        c.websocket.limits.max_unauthenticated_per_ip = 2;
        c.websocket.limits.max_unauthenticated_per_network = 4;
        c.websocket.limits.pre_auth_timeout_seconds = 60;
        c.handshake_timeout = 0;
    })
    .await;
    let mut idle = Vec::new();
    for last in 1..=4 {
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 9, last));
        idle.push(tcp_from(from, h.ws).await);
    }
    wait_until(|| stats(&h.hub, WS).handshaking == 4).await;
    for last in 5..=8 {
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 9, last));
        let mut refused = tcp_from(from, h.ws).await;
        assert!(
            closed_within(&mut refused, WAIT).await,
            "127.0.9.{last}: the network already holds its share"
        );
    }
    // Another network is served, edges included.
    let (status, _edge) = edge_from(&h, OTHER, "edge-other-net").await;
    assert_eq!(status, 101);
    let s = stats(&h.hub, WS);
    assert_eq!(s.refused_per_network, 4, "{s:?}");
    assert_eq!(s.refused_handshakes + s.refused_per_ip, 0, "{s:?}");
    drop(idle);
}

#[actix_rt::test]
async fn idle_sockets_beyond_the_per_address_limit_are_refused_while_edges_keep_connecting() {
    let h = Harness::with(|c| {
        c.websocket.limits.max_unauthenticated_per_ip = 3;
        c.websocket.limits.pre_auth_timeout_seconds = 60;
        c.handshake_timeout = 0;
    })
    .await;
    // An attacker on 127.0.0.1 holds idle TCP connections: nothing sent, no TLS.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(tcp_from(LOCAL, h.ws).await);
    }
    wait_until(|| stats(&h.hub, WS).handshaking == 3).await;
    let mut refused = tcp_from(LOCAL, h.ws).await;
    assert!(
        closed_within(&mut refused, WAIT).await,
        "the fourth idle connection from the address is closed at once"
    );
    assert!(
        !closed_within(&mut idle[0], Duration::from_millis(200)).await,
        "admitted connections stay open until their deadline"
    );
    // Edges from another address connect; authenticated ones do not count against the
    // per-address limit, so more of them than the limit connect from one address.
    let mut edges = Vec::new();
    for i in 0..5 {
        let (status, s) = edge_from(&h, OTHER, &format!("edge-{i}")).await;
        assert_eq!(status, 101, "edge-{i}");
        edges.push(s);
    }
    h.wait_nodes(5).await;
    let s = stats(&h.hub, WS);
    assert_eq!(s.refused_per_ip, 1);
    assert_eq!((s.open, s.handshaking), (8, 3), "{s:?}");
    assert_eq!(s.accepted, 8);
    assert_eq!(
        s.refused_handshakes + s.refused_connections + s.timed_out,
        0
    );
    // The attacker's sockets released: its address may connect again.
    drop(idle);
    wait_until(|| stats(&h.hub, WS).handshaking == 0).await;
    let (status, _edge) = edge_from(&h, LOCAL, "edge-local").await;
    assert_eq!(status, 101);
    drop(edges);
    wait_until(|| stats(&h.hub, WS).open == 1).await;
}

#[actix_rt::test]
async fn the_handshake_cap_refuses_new_sockets_but_not_connected_edges() {
    let h = Harness::with(|c| {
        c.websocket.limits.max_handshakes = 2;
        c.websocket.limits.max_unauthenticated_per_ip = 0;
        c.websocket.limits.pre_auth_timeout_seconds = 60;
        c.handshake_timeout = 0;
    })
    .await;
    let mut first = h.connect("edge-a").await;
    let mut idle = vec![tcp_from(LOCAL, h.ws).await, tcp_from(OTHER, h.ws).await];
    wait_until(|| stats(&h.hub, WS).handshaking == 2).await;
    let mut refused = tcp_from(OTHER, h.ws).await;
    assert!(closed_within(&mut refused, WAIT).await);
    assert_eq!(stats(&h.hub, WS).refused_handshakes, 1);
    // The connected edge is not affected.
    first.keepalive().await;
    assert!(
        first
            .closed_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    // One handshake slot frees: the next edge gets it.
    idle.pop();
    wait_until(|| stats(&h.hub, WS).handshaking == 1).await;
    let _second = h.connect("edge-b").await;
    h.wait_nodes(2).await;
    let s = stats(&h.hub, WS);
    assert_eq!((s.open, s.handshaking, s.refused_handshakes), (3, 1, 1));
}

#[actix_rt::test]
async fn the_connection_cap_counts_connected_edges() {
    let h = Harness::with(|c| {
        c.websocket.limits.max_connections = 2;
        c.handshake_timeout = 0;
    })
    .await;
    let _a = h.connect("edge-a").await;
    let _b = h.connect("edge-b").await;
    let mut refused = tcp_from(LOCAL, h.ws).await;
    assert!(closed_within(&mut refused, WAIT).await);
    let s = stats(&h.hub, WS);
    assert_eq!((s.open, s.refused_connections), (2, 1));
    drop(_a);
    wait_until(|| stats(&h.hub, WS).open == 1).await;
    let _c = h.connect("edge-c").await;
}

#[actix_rt::test]
async fn a_socket_that_never_finishes_tls_is_closed_at_the_pre_auth_deadline_and_counted() {
    let h = Harness::with(|c| {
        c.websocket.limits.pre_auth_timeout_seconds = 1;
        c.https.limits.pre_auth_timeout_seconds = 1;
    })
    .await;
    let mut silent = tcp_from(LOCAL, h.ws).await;
    // Half a TLS record header, then nothing.
    let mut partial = tcp_from(LOCAL, h.https).await;
    partial.write_all(&[0x16, 0x03]).await.unwrap();
    wait_until(|| stats(&h.hub, WS).handshaking == 1 && stats(&h.hub, HTTPS).handshaking == 1)
        .await;
    assert!(closed_within(&mut silent, Duration::from_secs(10)).await);
    assert!(closed_within(&mut partial, Duration::from_secs(10)).await);
    for listener in [WS, HTTPS] {
        wait_until(|| stats(&h.hub, listener).open == 0).await;
        let s = stats(&h.hub, listener);
        assert_eq!((s.timed_out, s.handshaking, s.accepted), (1, 0, 1), "{s:?}");
    }
    // An edge that authenticates in time is not cut off by the same deadline later.
    let mut edge = h.connect("edge-1").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    edge.keepalive().await;
    assert!(
        edge.closed_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    assert_eq!(stats(&h.hub, WS).timed_out, 1);
}

#[actix_rt::test]
async fn an_unauthenticated_https_connection_is_closed_at_the_deadline_after_its_answer() {
    let h = Harness::with(|c| c.https.limits.pre_auth_timeout_seconds = 1).await;
    let mut s = tls_from(LOCAL, h.https, anonymous(&h)).await.unwrap();
    s.write_all(b"GET /ca.crt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_head(&mut s).await.0, 200);
    // Keep-alive, but never authenticated: the deadline ends it.
    assert!(tls_closed_within(&mut s, Duration::from_secs(10)).await);
    assert_eq!(stats(&h.hub, HTTPS).timed_out, 1);
}

#[actix_rt::test]
async fn an_unauthenticated_upload_is_refused_from_its_head_without_reading_the_body() {
    let h = Harness::start().await;
    let three_mib = 3 * 1024 * 1024;
    let heads = [
        // No certificate for a task report.
        format!(
            "POST /task/prepull/name/j/node/edge-1/status HTTP/1.1\r\nHost: x\r\nContent-Length: {three_mib}\r\n\r\n"
        ),
        format!(
            "POST /nodeupgrade HTTP/1.1\r\nHost: x\r\nContent-Length: {three_mib}\r\n\r\n"
        ),
        // No token for a certificate request.
        "GET /edge.crt HTTP/1.1\r\nHost: x\r\nNodeName: edge-1\r\nContent-Length: 1000000\r\n\r\n"
            .to_owned(),
        "GET /edge.crt HTTP/1.1\r\nHost: x\r\nNodeName: edge-1\r\nAuthorization: Bearer nope\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_owned(),
    ];
    for head in &heads {
        let mut s = tls_from(LOCAL, h.https, anonymous(&h)).await.unwrap();
        // Only the head is sent: the answer comes without the body.
        s.write_all(head.as_bytes()).await.unwrap();
        let (status, text) = read_head(&mut s).await;
        assert_eq!(status, 401, "{head}");
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
        assert!(tls_closed_within(&mut s, WAIT).await, "{head}");
    }
    assert_eq!(h.hub.cert_server_stats().unauthorized, heads.len() as u64);
    // A certificate of another node is refused (403) just as early.
    let other = h.edge_cert("edge-2");
    let mut s = tls_from(LOCAL, h.https, h.tls(Some(&other))).await.unwrap();
    s.write_all(heads[0].as_bytes()).await.unwrap();
    assert_eq!(read_head(&mut s).await.0, 403);
    // An authorized head declaring more than the limit is refused before its body too.
    let cert = h.edge_cert("edge-1");
    let mut s = tls_from(LOCAL, h.https, h.tls(Some(&cert))).await.unwrap();
    let too_big = format!(
        "POST /task/prepull/name/j/node/edge-1/status HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        three_mib + 1
    );
    s.write_all(too_big.as_bytes()).await.unwrap();
    assert_eq!(read_head(&mut s).await.0, 413);
    let stats = h.hub.cert_server_stats();
    assert_eq!((stats.unauthorized, stats.too_large), (5, 1));
    // The legitimate report is served.
    let (status, _) = https(
        h.https,
        h.tls(Some(&cert)),
        "POST",
        "/task/prepull/name/j/node/edge-1/status",
        &[],
        br#"{"state":"success"}"#,
    )
    .await;
    assert_eq!(status, 200);
}

#[actix_rt::test]
async fn a_stalled_upload_is_cut_off_by_the_request_deadline() {
    let h = Harness::with(|c| c.https.request_timeout_seconds = 1).await;
    let cert = h.edge_cert("edge-1");
    let mut s = tls_from(LOCAL, h.https, h.tls(Some(&cert))).await.unwrap();
    s.write_all(
        b"POST /task/prepull/name/j/node/edge-1/status HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"state\":",
    )
    .await
    .unwrap();
    s.flush().await.unwrap();
    let (status, _) = read_head(&mut s).await;
    assert_eq!(status, 408);
    assert!(tls_closed_within(&mut s, WAIT).await);
    assert_eq!(h.hub.cert_server_stats().request_timeouts, 1);
    // The listener's open count follows the closed connection.
    wait_until(|| stats(&h.hub, HTTPS).open == 0).await;
    // A complete upload is served.
    let (status, _) = https(
        h.https,
        h.tls(Some(&cert)),
        "POST",
        "/task/prepull/name/j/node/edge-1/status",
        &[],
        br#"{"state":"success"}"#,
    )
    .await;
    assert_eq!(status, 200);
}

#[actix_rt::test]
async fn one_address_draining_the_node_check_limit_leaves_other_addresses_served() {
    let h = Harness::start().await;
    // 500 checks pipelined on one connection: served as fast as the server goes, so the refill
    // (10 a second) cannot keep up with them however slow the machine is — one connection per
    // check took longer than a token's refill on a loaded debug build.
    let statuses = pipelined_from(LOCAL, &h, "/node/edge-1", 500).await;
    let answered = statuses.iter().take_while(|&&c| c == 404).count();
    assert!(
        statuses.iter().all(|&c| c == 404 || c == 429),
        "unexpected statuses {statuses:?}"
    );
    assert!(
        statuses.contains(&429),
        "the node check is never rate-limited"
    );
    assert!(answered >= 50, "the burst is served first ({answered})");
    assert_eq!(https_from(OTHER, &h, "/node/edge-1").await, 404);
    assert!(h.hub.cert_server_stats().rate_limited >= 1);
}
