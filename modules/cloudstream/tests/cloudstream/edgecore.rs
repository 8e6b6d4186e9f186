//! Interop with an unmodified KubeEdge edgecore (its edgestream, Go + gorilla) against our
//! tunnel: logs, follow with the client going away, metrics and exec, bytes unchanged.
//!
//! The `edgecore-interop` harness finds the binary (`EDGECORE_BIN`, `EDGECORE_XZ`, or
//! `shared/peers/edgecore/*.xz` beside the repository; see the README), unpacks it into a cache
//! folder when compressed, writes its config and runs it; the test fails loudly when something
//! is missing. The end-to-end suite through kube-apiserver is
//! `modules/server/tests/edgecore/interop_edgecore.rs`.

use std::time::Duration;

use crate::support::{self, Cloud, FakeKubelet, channel_frame, exec_request, kubelet};
use bytes::BytesMut;
use edgecore_interop::{EdgeConfig, EdgeHome, Edgecore};
use kubeedge_wire::http1::{self, BodyReader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODE: &str = "edge-node-1";

/// An edgecore whose certificates come from `cloud`'s edge CA (no bootstrap) and whose hub
/// points at a closed port: only edgestream is under test.
fn start_edgecore(cloud: &Cloud, home: &EdgeHome) -> Edgecore {
    let cert = cloud.edge_ca.node(NODE);
    home.install_certificates(
        &edgecore_interop::pem("CERTIFICATE", &cloud.edge_ca.ca()),
        &edgecore_interop::pem("CERTIFICATE", &cert.cert_chain[0]),
        &edgecore_interop::pem("PRIVATE KEY", cert.key.secret_der()),
    )
    .unwrap();
    // Nothing listens on port 9: the hub keeps retrying, which edgestream does not mind.
    let closed = "127.0.0.1:9".parse().unwrap();
    let mut config = EdgeConfig::new(NODE, "unused.because.certificates.exist", closed, closed);
    config.tunnel_server = Some(cloud.tunnel_server().parse().unwrap());
    config.meta_server = None;
    home.write_config(&config).unwrap();
    Edgecore::start(home).unwrap()
}

#[actix_rt::test]
async fn a_real_edgecore_should_serve_logs_metrics_and_exec_through_our_tunnel() {
    test_tiers::require!(Edgecore);
    // edgecore relays to what the CONNECT URL names: 127.0.0.1:10350, as upstream's cloud
    // sends; one stand-in on that port at a time on this machine.
    let kubelet = FakeKubelet::start_on_kubelet_port().await.unwrap();
    let cloud = Cloud::start().await;
    cloud.pods.place("ns", "web", NODE);
    let home = EdgeHome::new(NODE).unwrap();
    let edgecore = start_edgecore(&cloud, &home);
    assert!(
        cloud
            .handle
            .wait_for_session(NODE, Duration::from_secs(60))
            .await,
        "edgecore did not open a tunnel; its log:\n{}",
        edgecore.log_tail(40)
    );
    assert!(
        cloud
            .handle
            .wait_for_session("127.0.0.1", Duration::from_secs(1))
            .await,
        "nodeIP header"
    );

    // logs: the whole body, non-UTF-8 included (edgecore reads 256 bytes per DATA).
    let (head, body) = cloud.get("/containerLogs/ns/web/app?tailLines=5", "").await;
    assert_eq!(head.status, 200);
    assert_eq!(
        body,
        kubelet::log_body(),
        "edgecore log tail:\n{}",
        edgecore.log_tail(40)
    );

    // metrics: line relay with identity encoding, final newline added.
    let mut conn = cloud.api_conn().await;
    conn.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:10351\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    .await
    .unwrap();
    let (head, body) = support::read_response(&mut conn).await;
    assert_eq!(head.status, 200);
    let mut want = kubelet::METRICS_BODY.to_vec();
    want.push(b'\n');
    assert_eq!(body, want);
    let metrics_req = kubelet
        .requests()
        .into_iter()
        .find(|r| r.path() == "/metrics")
        .unwrap();
    assert_eq!(
        metrics_req.headers.get_str("Accept-Encoding"),
        Some("identity")
    );

    // logs -f: lines stream; when the client goes away edgecore closes the kubelet request.
    let mut api = cloud.api_conn().await;
    api.write_all(b"GET /containerLogs/ns/web/app?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut api, &mut buf).await.unwrap();
    let mut follow = BodyReader::new(&head);
    kubelet.wait_followers(1).await;
    kubelet.push_line(b"from edgecore \xff\n");
    let mut got = Vec::new();
    while got.len() < 16 {
        let piece = tokio::time::timeout(
            Duration::from_secs(10),
            follow.next(&mut api, &mut buf, 4096),
        )
        .await
        .expect("followed line did not arrive")
        .unwrap()
        .unwrap();
        got.extend_from_slice(&piece);
    }
    assert_eq!(got, b"from edgecore \xff\n");
    drop(api);
    assert!(
        kubelet
            .wait_followers_gone(1, Duration::from_secs(10))
            .await,
        "edgecore kept the follow open"
    );

    // exec over WebSocket v5: raw both ways, the kubelet's 101 head included.
    let mut conn = cloud.api_conn().await;
    let (head, _) = exec_request(
        "/exec/ns/web/app?command=cat&input=1&output=1&error=1",
        "GET",
    );
    let mut opening = head;
    opening.extend_from_slice(&channel_frame(0, b"\x00\xff abc\n"));
    conn.write_all(&opening).await.unwrap();
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut closed_stdin = false;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "exec output did not arrive; got {:?}; kubelet saw {:?} / {:?}; edgecore log:\n{}",
                    String::from_utf8_lossy(&received),
                    kubelet.requests().last().map(|r| (r.method.clone(), r.target.clone(), r.headers.clone())),
                    kubelet.execs(),
                    edgecore.log_tail(40)
                )
            })
            .unwrap();
        if n == 0 {
            break;
        }
        received.extend_from_slice(&chunk[..n]);
        if !closed_stdin && received.windows(6).any(|w| w == b"got 7 ") {
            conn.write_all(&channel_frame(255, &[0])).await.unwrap();
            closed_stdin = true;
        }
    }
    let rec = kubelet
        .execs()
        .into_iter()
        .next()
        .expect("exec reached the kubelet");
    let mut sent = rec.head_sent.clone();
    sent.extend_from_slice(&rec.sent);
    assert_eq!(
        received, sent,
        "client must get exactly what the kubelet sent"
    );
    assert!(received.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
    assert!(String::from_utf8_lossy(&received).contains("NonZeroExitCode"));
}
