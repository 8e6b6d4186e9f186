//! Logs through the tunnel: plain and follow, query passthrough, errors, and many streams.

use std::time::Duration;

use crate::support::{self, Cloud, FakeKubelet, kubelet};
use bytes::BytesMut;
use kubeedge_wire::http1::{self, BodyReader};
use tokio::io::AsyncWriteExt;

#[actix_rt::test]
async fn logs_should_relay_the_body_byte_for_byte_with_every_query_parameter() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;

    let target = "/containerLogs/ns/web/nginx?tailLines=10&timestamps=true&sinceSeconds=5&limitBytes=100000&previous=false";
    let (head, body) = cloud.get(target, "Accept-Encoding: gzip\r\n").await;
    assert_eq!(head.status, 200);
    assert!(head.headers.has_token("Transfer-Encoding", "chunked"));
    assert_eq!(body, kubelet::log_body());

    let seen = kubelet.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(
        seen[0].target, target,
        "every query parameter reaches the kubelet unchanged"
    );
    assert_eq!(
        seen[0].headers.get_str("User-Agent"),
        Some("kube-apiserver/test")
    );
    assert_eq!(seen[0].headers.get_str("Accept-Encoding"), Some("identity"));
    let c = cloud.handle.counters();
    assert_eq!(c.bytes_from_edge, kubelet::log_body().len() as u64);
}

#[actix_rt::test]
async fn logs_follow_should_stream_lines_as_the_edge_produces_them_and_stop_when_the_client_goes_away()
 {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;

    let mut conn = cloud.api_conn().await;
    conn.write_all(
        b"GET /containerLogs/ns/web/nginx?follow=true HTTP/1.1\r\nHost: 127.0.0.1:10351\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut conn, &mut buf)
        .await
        .unwrap();
    assert_eq!(head.status, 200);
    let mut body = BodyReader::new(&head);
    kubelet.wait_followers(1).await;

    for line in [&b"first line\n"[..], b"second \xff line\n", b"third\n"] {
        assert_eq!(kubelet.push_line(line), 1);
        // Each line arrives before the next one exists: the body streams.
        let mut got = Vec::new();
        while got.len() < line.len() {
            let piece = tokio::time::timeout(
                Duration::from_secs(5),
                body.next(&mut conn, &mut buf, 1 << 20),
            )
            .await
            .expect("line did not arrive in time")
            .unwrap()
            .unwrap();
            got.extend_from_slice(&piece);
        }
        assert_eq!(got, line);
    }
    assert_eq!(cloud.handle.counters().streams_active, 1);

    drop(conn);
    assert!(
        kubelet.wait_followers_gone(1, Duration::from_secs(5)).await,
        "the edge must close the kubelet connection when the client goes away"
    );
    tokio::time::timeout(Duration::from_secs(5), async {
        while cloud.handle.counters().streams_active != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("stream entry not removed");
}

#[actix_rt::test]
async fn logs_for_a_node_without_a_tunnel_should_get_503_with_a_reason() {
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", "ghost-node");
    let (head, body) = cloud.get("/containerLogs/ns/web/c", "").await;
    assert_eq!(head.status, 503);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("ghost-node") && text.contains("no tunnel"),
        "{text}"
    );
}

#[actix_rt::test]
async fn logs_for_an_unknown_pod_should_get_404() {
    let cloud = Cloud::start().await;
    let (head, body) = cloud.get("/containerLogs/ns/nobody/c", "").await;
    assert_eq!(head.status, 404);
    assert!(String::from_utf8_lossy(&body).contains("ns/nobody"));
}

#[actix_rt::test]
async fn kubelet_error_body_should_be_relayed_under_200_as_upstream() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "missing", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    let (head, body) = cloud.get("/containerLogs/ns/missing/c", "").await;
    assert_eq!(head.status, 200);
    assert_eq!(body, b"pod missing is not here");
}

#[actix_rt::test]
async fn unknown_paths_should_get_404_and_wrong_methods_405_with_go_restful_texts() {
    let cloud = Cloud::start().await;
    let (head, body) = cloud.get("/portForward/ns/p", "").await;
    assert_eq!(
        (head.status, body.as_slice()),
        (404, &b"404: Page Not Found"[..])
    );
    let mut conn = cloud.api_conn().await;
    conn.write_all(b"DELETE /containerLogs/ns/p/c HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = support::read_response(&mut conn).await;
    assert_eq!(
        (head.status, body.as_slice()),
        (405, &b"405: Method Not Allowed"[..])
    );
    // The connection stays usable for the next request.
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(support::read_response(&mut conn).await.0.status, 404);
}

#[actix_rt::test]
async fn fifty_concurrent_streams_on_one_node_should_all_complete_unchanged() {
    // Fifty TLS handshakes with client certificates at once, in a debug build, take longer
    // than the stream listener's 10 s handshake and authentication deadlines on a loaded two-core machine:
    // the listener then closes the late ones unanswered (its refusals are tested in
    // `hostile`). This test is about fifty streams, so the deadline is out of its way.
    let tuning = cloudstream::Tuning {
        handshake_timeout: Duration::from_secs(120),
        ..cloudstream::Tuning::default()
    };
    let cloud = Cloud::start_configured(
        tuning,
        |config| config.stream_limits.pre_auth_timeout_seconds = 120,
        |cs| cs,
    )
    .await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    let want = kubelet::log_body();
    let requests = (0..50).map(|i| {
        let cloud = &cloud;
        async move {
            cloud
                .get(&format!("/containerLogs/ns/web/c?tailLines={i}"), "")
                .await
        }
    });
    let results = futures::future::join_all(requests).await;
    for (head, body) in results {
        assert_eq!(head.status, 200);
        assert_eq!(body, want);
    }
    assert_eq!(kubelet.requests().len(), 50);
    let c = cloud.handle.counters();
    assert_eq!(c.streams_total, 50);
    assert_eq!(c.bytes_from_edge, 50 * want.len() as u64);
}

#[actix_rt::test]
async fn slow_api_client_should_throttle_its_stream_not_lose_it() {
    // A tiny budget: the Rust edge's window throttles this stream instead of it being ended.
    let tuning = cloudstream::Tuning {
        stream_queue_bytes: 64 * 1024,
        ..cloudstream::Tuning::default()
    };
    let cloud = Cloud::start_with(tuning).await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "big", "edge-1");
    let _edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    let mut conn = cloud.api_conn().await;
    conn.write_all(b"GET /containerLogs/ns/big/c HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut conn, &mut buf)
        .await
        .unwrap();
    let mut body = BodyReader::new(&head);
    let mut got = Vec::new();
    while let Some(piece) = body.next(&mut conn, &mut buf, 256 * 1024).await.unwrap() {
        got.extend_from_slice(&piece);
        // Slower than the tunnel.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(got.len(), kubelet::big_log_body().len());
    assert!(
        got == kubelet::big_log_body(),
        "throttled body must arrive unchanged"
    );
}
