//! Exec and attach through a real upgrade: the WebSocket `v5.channel.k8s.io` protocol between
//! the client and the edge's kubelet, relayed byte for byte both ways.

use std::time::Duration;

use crate::support::{Cloud, FakeKubelet, channel_frame, exec_request, kubelet};
use bytes::BytesMut;
use edge::stream::AgentOptions;
use kubeedge_wire::http1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ws_peer::{Decoder, Role, WsMessage};

/// Runs one exec session as a client: stdin sent with the head, more stdin with non-UTF-8
/// bytes, close of stdin; checks stdout, stderr and the exit status, then that every byte
/// matched what the kubelet sent and received.
async fn exec_round_trip(cloud: &Cloud, kubelet: &FakeKubelet, target: &str, method: &str) {
    let before = kubelet.execs().len();
    let mut conn = cloud.api_conn().await;
    let (head, _key) = exec_request(target, method);
    let first = channel_frame(0, b"hello\n");
    let second = channel_frame(0, b"\xff\xfe\x00 not utf-8 \xc3\x28\n");
    let close_stdin = channel_frame(255, &[0]);
    let mut sent_after_head = Vec::new();
    // The first stdin frame rides in the same write as the head (upstream drops such bytes).
    let mut opening = head.clone();
    opening.extend_from_slice(&first);
    sent_after_head.extend_from_slice(&first);
    conn.write_all(&opening).await.unwrap();

    let mut raw = BytesMut::new();
    let mut received = Vec::new();
    let resp = http1::read_response_head(&mut conn, &mut raw)
        .await
        .unwrap();
    assert_eq!(resp.status, 101);
    assert_eq!(
        resp.headers.get_str("Sec-WebSocket-Protocol"),
        Some("v5.channel.k8s.io")
    );
    let head_len = {
        // Everything read so far minus what is left is the head.
        let rec = &kubelet.execs()[before];
        rec.head_sent.len()
    };
    received.extend_from_slice(&kubelet.execs()[before].head_sent[..head_len]);
    received.extend_from_slice(&raw);

    let mut decoder = Decoder::new(Role::Client, 1 << 20);
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut status = None;
    let mut closed = false;
    let mut step = 0;
    while !closed {
        while let Some(msg) = decoder.decode(&mut raw).unwrap() {
            match msg {
                WsMessage::Binary(p) => match p[0] {
                    1 => stdout.extend_from_slice(&p[1..]),
                    2 => stderr.extend_from_slice(&p[1..]),
                    3 => status = Some(String::from_utf8(p[1..].to_vec()).unwrap()),
                    c => panic!("unexpected channel {c}"),
                },
                WsMessage::Close(..) => closed = true,
                other => panic!("unexpected {other:?}"),
            }
        }
        if step == 0 && stdout.len() == 6 {
            conn.write_all(&second).await.unwrap();
            sent_after_head.extend_from_slice(&second);
            step = 1;
        }
        if step == 1 && stdout.len() == 6 + 17 {
            conn.write_all(&close_stdin).await.unwrap();
            sent_after_head.extend_from_slice(&close_stdin);
            step = 2;
        }
        if closed {
            break;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk))
            .await
            .expect("exec output did not arrive")
            .unwrap();
        assert!(n > 0, "connection closed before the exec ended");
        received.extend_from_slice(&chunk[..n]);
        raw.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(stdout, b"hello\n\xff\xfe\x00 not utf-8 \xc3\x28\n");
    assert_eq!(stderr, b"got 6 bytes\ngot 17 bytes\n");
    let status = status.expect("no status on channel 3");
    assert!(
        status.contains("\"reason\":\"NonZeroExitCode\""),
        "{status}"
    );
    assert!(
        status.contains(&format!("\"message\":\"{}\"", kubelet::EXIT_CODE)),
        "{status}"
    );

    // After the kubelet closed, the edge's REMOVE_CONNECT closes our connection promptly.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest))
        .await
        .expect("API connection not closed after the kubelet finished")
        .ok();
    received.extend_from_slice(&rest);

    let rec = &kubelet.execs()[before];
    assert_eq!(rec.target, target);
    let mut kubelet_sent = rec.head_sent.clone();
    kubelet_sent.extend_from_slice(&rec.sent);
    assert_eq!(
        received, kubelet_sent,
        "client must receive exactly what the kubelet sent, its 101 head included"
    );
    assert_eq!(
        rec.received, sent_after_head,
        "kubelet must receive exactly what the client sent after the head"
    );
}

#[actix_rt::test]
async fn exec_should_relay_stdin_stdout_stderr_and_exit_status_byte_for_byte() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    exec_round_trip(
        &cloud,
        &kubelet,
        "/exec/ns/web/nginx?command=sh&command=-c&command=cat&input=1&output=1&error=1",
        "POST",
    )
    .await;
    let seen = &kubelet.requests()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.headers.get_str("Upgrade"), Some("websocket"));
    assert_eq!(
        seen.headers.get_str("Sec-Websocket-Protocol"),
        Some("v5.channel.k8s.io")
    );
}

#[actix_rt::test]
async fn attach_should_work_for_both_path_shapes_and_both_methods() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    exec_round_trip(
        &cloud,
        &kubelet,
        "/attach/ns/web/nginx?input=1&output=1",
        "GET",
    )
    .await;
    exec_round_trip(
        &cloud,
        &kubelet,
        "/attach/ns/web/0d5f-uid/nginx?input=1&output=1",
        "POST",
    )
    .await;
    exec_round_trip(
        &cloud,
        &kubelet,
        "/exec/ns/web/0d5f-uid/nginx?command=ls&output=1",
        "GET",
    )
    .await;
    let methods: Vec<String> = kubelet
        .requests()
        .iter()
        .map(|r| r.method.clone())
        .collect();
    assert_eq!(methods, ["GET", "POST", "GET"]);
}

#[actix_rt::test]
async fn exec_without_upgrade_headers_should_get_500() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    let (head, body) = cloud.get("/exec/ns/web/c?command=ls", "").await;
    assert_eq!(head.status, 500);
    assert!(String::from_utf8_lossy(&body).contains("not an upgrade"));
    assert!(kubelet.requests().is_empty());
}

#[actix_rt::test]
async fn slow_local_connection_should_not_block_other_streams_on_the_tunnel() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "stuck", "edge-1");
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;

    // An exec whose kubelet never reads; flood it with stdin.
    let mut conn = cloud.api_conn().await;
    let (head, _) = exec_request("/exec/ns/stuck/c?input=1", "POST");
    conn.write_all(&head).await.unwrap();
    let mut raw = BytesMut::new();
    assert_eq!(
        http1::read_response_head(&mut conn, &mut raw)
            .await
            .unwrap()
            .status,
        101
    );
    let flood = tokio::spawn(async move {
        let chunk = channel_frame(0, &vec![b'x'; 64 * 1024]);
        // Until the cloud closes the connection, however long the pipe holds.
        while conn.write_all(&chunk).await.is_ok() {}
    });

    // Meanwhile other streams on the same tunnel still work.
    for _ in 0..5 {
        let (head, body) = tokio::time::timeout(
            Duration::from_secs(10),
            cloud.get("/containerLogs/ns/web/c", ""),
        )
        .await
        .expect("a logs request was blocked by the stuck exec");
        assert_eq!(head.status, 200);
        assert_eq!(body, kubelet::log_body());
    }
    // The stuck stream is held back, not ended: the edge grants the cloud a window of its
    // queue budget per stream, so the cloud stops reading the API side once that much is
    // unacknowledged (a direct kubelet connection back-pressures the same way), and nothing
    // piles up in between. What the edge wrote into the kubelet socket's kernel buffers
    // (a few MiB on loopback) counts as taken.
    let budget = AgentOptions::new("edge-1", "10.0.0.7").stream_queue_bytes as u64;
    let mut sent = cloud.handle.counters().bytes_to_edge;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = cloud.handle.counters().bytes_to_edge;
        if now == sent {
            break;
        }
        sent = now;
    }
    assert!(
        sent > 0 && sent <= budget + (16 << 20),
        "{sent} bytes sent toward the edge, window {budget}"
    );
    assert!(
        !flood.is_finished(),
        "the stuck exec was ended instead of held back"
    );
    assert_eq!(cloud.handle.counters().streams_active, 1);
    flood.abort();
}
