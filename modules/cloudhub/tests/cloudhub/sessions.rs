//! Connection lifecycle through real TLS sockets: checks before the upgrade, identity,
//! keepalive, replacement, node limit and events.

use std::time::Duration;

use crate::support::*;

#[actix_rt::test]
async fn upgrade_on_the_edge_path_and_on_root_are_both_accepted_identity_from_node_id() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    for path in [
        edge_path("edge-1"),
        "/".to_owned(),
        "/anything/else".to_owned(),
    ] {
        let (status, _, ws) = raw_upgrade(h.ws, h.tls(Some(&cert)), &path, &edge_headers("edge-1"))
            .await
            .unwrap();
        assert_eq!(status, 101, "path {path}");
        h.wait_nodes(1).await;
        assert_eq!(h.hub.nodes(), ["edge-1"]);
        drop(ws);
        h.wait_nodes(0).await;
    }
}

#[actix_rt::test]
async fn no_client_certificate_fails_the_tls_handshake_without_http() {
    let h = Harness::start().await;
    let result = raw_upgrade(h.ws, h.tls(None), "/", &edge_headers("edge-1")).await;
    assert!(
        result.is_err(),
        "no HTTP response may be produced: {result:?}"
    );
    assert_eq!(h.hub.connected_nodes(), 0);
}

#[actix_rt::test]
async fn foreign_ca_and_server_auth_only_certificates_fail_the_handshake() {
    let h = Harness::start().await;
    let other = pki::CertificateAuthority::generate().unwrap();
    let foreign = other.issue(&pki::IssueOptions::edge("edge-1")).unwrap();
    assert!(
        raw_upgrade(h.ws, h.tls(Some(&foreign)), "/", &edge_headers("edge-1"))
            .await
            .is_err()
    );
    let mut opts = pki::IssueOptions::edge("edge-1");
    opts.ext_key_usages = vec![pki::ExtKeyUsage::ServerAuth];
    let server_only = h.hub.ca().issue(&opts).unwrap();
    assert!(
        raw_upgrade(
            h.ws,
            h.tls(Some(&server_only)),
            "/",
            &edge_headers("edge-1")
        )
        .await
        .is_err()
    );
}

#[actix_rt::test]
async fn tls12_ecdsa_and_tls13_both_connect() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    let tls12 = rustls::ClientConfig::builder_with_provider(pki::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates({
            let mut r = rustls::RootCertStore::empty();
            r.add(h.hub.ca().cert_der().to_vec().into()).unwrap();
            r
        })
        .with_client_auth_cert(
            vec![cert.cert_der.clone().into()],
            pki::load_private_key(&cert.key_der).unwrap(),
        )
        .unwrap();
    let (status, _, _ws) = raw_upgrade(h.ws, tls12, "/", &edge_headers("edge-1"))
        .await
        .unwrap();
    assert_eq!(status, 101);
    let (status, _, _ws2) = raw_upgrade(
        h.ws,
        h.tls(Some(&h.edge_cert("edge-2"))),
        "/",
        &edge_headers("edge-2"),
    )
    .await
    .unwrap();
    assert_eq!(status, 101);
}

#[actix_rt::test]
async fn node_id_header_lookup_is_case_insensitive() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    for name in ["Node_id", "node_id", "NODE_ID"] {
        let headers = vec![(name.to_owned(), "edge-1".to_owned())];
        let (status, body, ws) = raw_upgrade(h.ws, h.tls(Some(&cert)), "/", &headers)
            .await
            .unwrap();
        assert_eq!(status, 101, "{name}: {body}");
        h.wait_nodes(1).await;
        drop(ws);
        h.wait_nodes(0).await;
    }
}

#[actix_rt::test]
async fn repeated_connectionuse_headers_read_the_first_value() {
    // edgecore v1.23 adds `ConnectionUse: msg` once more on every retry of a cycle.
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    let mut headers = edge_headers("edge-1");
    headers.push(("ConnectionUse".into(), "msg".into()));
    headers.push(("ConnectionUse".into(), "msg".into()));
    let (status, body, _ws) = raw_upgrade(h.ws, h.tls(Some(&cert)), "/", &headers)
        .await
        .unwrap();
    assert_eq!(status, 101, "{body}");
}

#[actix_rt::test]
async fn missing_or_empty_node_id_is_refused_with_400_and_no_session() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    let (status, body, _) = raw_upgrade(h.ws, h.tls(Some(&cert)), "/", &[])
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(body.contains("Node_id"), "{body}");
    let (status, _, _) = raw_upgrade(
        h.ws,
        h.tls(Some(&cert)),
        "/",
        &[("Node_id".into(), "".into())],
    )
    .await
    .unwrap();
    assert_eq!(status, 400);
    assert_eq!(h.hub.connected_nodes(), 0);
}

#[actix_rt::test]
async fn certificate_for_another_node_is_refused_with_403() {
    let h = Harness::with(|c| {
        c.authorization.enable = true;
        c.authorization.debug = false;
    })
    .await;
    let cert_a = h.edge_cert("edge-a");
    let (status, body, ws) = raw_upgrade(h.ws, h.tls(Some(&cert_a)), "/", &edge_headers("edge-b"))
        .await
        .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(ws.is_none());
    assert_eq!(h.hub.connected_nodes(), 0);
}

#[actix_rt::test]
async fn certificate_for_another_node_is_refused_by_default_too() {
    let h = Harness::start().await;
    let cert_a = h.edge_cert("edge-a");
    let (status, _, _) = raw_upgrade(h.ws, h.tls(Some(&cert_a)), "/", &edge_headers("edge-b"))
        .await
        .unwrap();
    assert_eq!(status, 403);
}

#[actix_rt::test]
async fn node_limit_refuses_other_nodes_with_503_but_not_a_reconnect() {
    let h = Harness::with(|c| c.node_limit = 1).await;
    let _e1 = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let cert2 = h.edge_cert("edge-2");
    let (status, _, _) = raw_upgrade(h.ws, h.tls(Some(&cert2)), "/", &edge_headers("edge-2"))
        .await
        .unwrap();
    assert_eq!(status, 503);
    // edge-1 reconnecting while its old session still exists is accepted.
    let _again = h.connect("edge-1").await;
    assert_eq!(h.hub.connected_nodes(), 1);
}

#[actix_rt::test]
async fn missing_connectionuse_is_a_message_connection_and_str_is_refused() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    let (status, _, _ws) = raw_upgrade(
        h.ws,
        h.tls(Some(&cert)),
        "/",
        &[("Node_id".into(), "edge-1".into())],
    )
    .await
    .unwrap();
    assert_eq!(status, 101);
    let cert2 = h.edge_cert("edge-2");
    let headers = vec![
        ("Node_id".into(), "edge-2".into()),
        ("Connectionuse".into(), "str".into()),
    ];
    let (status, _, _) = raw_upgrade(h.ws, h.tls(Some(&cert2)), "/", &headers)
        .await
        .unwrap();
    assert_eq!(status, 400);
}

#[actix_rt::test]
async fn keepalives_keep_a_session_and_silence_closes_it_after_the_interval() {
    let h = Harness::with(|c| c.keepalive_interval = 2).await;
    let mut e = h.connect("edge-1").await;
    for _ in 0..4 {
        e.keepalive().await;
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    assert_eq!(
        h.hub.connected_nodes(),
        1,
        "kept alive past 2x the interval"
    );
    e.keepalive().await;
    let last = tokio::time::Instant::now();
    let ended = e.closed_within(Duration::from_secs(5)).await;
    let after = last.elapsed();
    assert!(ended.is_some());
    assert!(
        after >= Duration::from_millis(1900) && after < Duration::from_millis(3200),
        "closed after {after:?}"
    );
    h.wait_nodes(0).await;
}

#[actix_rt::test]
async fn other_upstream_traffic_does_not_keep_a_session_alive() {
    let h = Harness::with(|c| c.keepalive_interval = 2).await;
    let mut e = h.connect("edge-1").await;
    let start = tokio::time::Instant::now();
    let status =
        beehive::Message::new().with_route("edged", "meta", "default/nodestatus/edge-1", "update");
    let sender = async {
        loop {
            e.send(&status).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            if h.hub.connected_nodes() == 0 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(4),
                "session outlived the keepalive interval"
            );
        }
    };
    sender.await;
    assert!(start.elapsed() >= Duration::from_millis(1900));
}

#[actix_rt::test]
async fn connected_and_disconnected_events_reach_edgecontroller_exactly_once() {
    let mut h = Harness::start().await;
    let e = h.connect("edge-1").await;
    let ev = h.next_event().await;
    assert_eq!(
        (ev.route.source.as_str(), ev.route.group.as_str()),
        ("cloudhub", "resource")
    );
    assert_eq!(
        (ev.route.resource.as_str(), ev.route.operation.as_str()),
        ("node/edge-1", "connected")
    );
    let content: serde_json::Value = ev.content.parse().unwrap();
    assert_eq!(content["client_id"], "edge-1");
    assert_eq!(content["event_type"], "connected");
    let secs = content["timestamp"].as_i64().unwrap();
    assert!((secs - beehive::now_millis() / 1000).abs() <= 5);
    assert!(
        ev.content
            .as_json()
            .starts_with(r#"{"client_id":"edge-1","event_type":"connected","timestamp":"#)
    );
    drop(e);
    let ev = h.next_event().await;
    assert_eq!(ev.route.operation, "disconnected");
    assert_eq!(
        ev.content.parse::<serde_json::Value>().unwrap()["event_type"],
        "disconnected"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), h.controllers.recv())
            .await
            .is_err(),
        "exactly one of each"
    );
}

#[actix_rt::test]
async fn a_burst_of_connections_reaches_a_busy_synccontroller_whole() {
    // synccontroller catches up (and, with replicas, takes over) every node that connects: an
    // event lost to a full mailbox is a node that is never brought up to date.
    let mut h = Harness::start().await;
    let mut sync = h
        .bus
        .register_inbox("synccontroller", "synccontroller", 1)
        .unwrap();
    let mut edges = Vec::new();
    for i in 0..8 {
        edges.push(h.connect(&format!("edge-{i}")).await);
    }
    h.wait_nodes(8).await;
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 8 {
        let ev = tokio::time::timeout(Duration::from_secs(10), sync.recv())
            .await
            .expect("every connected event reaches synccontroller")
            .unwrap();
        assert_eq!(ev.route.operation, "connected");
        seen.insert(ev.route.resource.clone());
    }
    // edgecontroller got all of them too, while synccontroller was not reading.
    for _ in 0..8 {
        assert_eq!(h.next_event().await.route.operation, "connected");
    }
}

#[actix_rt::test]
async fn a_second_connection_replaces_the_first_without_a_stale_disconnect() {
    let mut h = Harness::with(|c| c.keepalive_interval = 2).await;
    let mut first = h.connect("edge-1").await;
    assert_eq!(h.next_event().await.route.operation, "connected");
    let mut second = h.connect("edge-1").await;
    assert_eq!(h.next_event().await.route.operation, "connected");
    assert!(
        first.closed_within(Duration::from_secs(3)).await.is_some(),
        "first socket closed"
    );
    // The second keeps working for more than 2x the keepalive interval.
    for _ in 0..6 {
        second.keepalive().await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(h.hub.connected_nodes(), 1);
    }
    h.downstream(pod("edge-1", "p", "u1", "", "delete")).await;
    assert_eq!(second.recv().await.route.resource, "default/pod/p");
    // No disconnected event for edge-1 while the second session lives.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), h.next_event())
            .await
            .is_err()
    );
}

#[actix_rt::test]
async fn connected_nodes_gauge_tracks_sessions() {
    let h = Harness::start().await;
    let a = h.connect("a").await;
    let _b = h.connect("b").await;
    h.wait_nodes(2).await;
    let _a2 = h.connect("a").await;
    h.wait_nodes(2).await;
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        h.hub.connected_nodes(),
        2,
        "the replaced socket closing changes nothing"
    );
    assert_eq!(h.hub.stats().connected_nodes, 2);
}

#[actix_rt::test]
async fn plain_http_without_upgrade_gets_400_and_nothing_else_is_served() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    let mut s = tls_connect(h.ws, h.tls(Some(&cert))).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(WAIT, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 400"));
}

#[actix_rt::test]
async fn graceful_shutdown_writes_queued_messages_and_closes_sessions() {
    let h = Harness::with(|c| c.ack_window = 1).await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "a", "ua", "", "delete")).await;
    h.downstream(pod("edge-1", "b", "ub", "", "delete")).await;
    assert_eq!(e.recv().await.route.resource, "default/pod/a");
    // b waits behind the window of 1; shutdown still writes it once.
    h.hub.shutdown().await;
    assert_eq!(e.recv().await.route.resource, "default/pod/b");
    assert!(e.closed_within(Duration::from_secs(3)).await.is_some());
    assert_eq!(h.hub.connected_nodes(), 0);
    let cert = h.edge_cert("edge-2");
    assert!(
        raw_upgrade(h.ws, h.tls(Some(&cert)), "/", &edge_headers("edge-2"))
            .await
            .is_err(),
        "no longer accepting"
    );
}

#[actix_rt::test]
async fn tls10_and_tls11_client_hellos_are_refused_without_http() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start().await;
    for version in [[3u8, 1u8], [3, 2]] {
        // A minimal ClientHello offering only TLS 1.0 / 1.1 and classic suites.
        let mut body = vec![version[0], version[1]];
        body.extend_from_slice(&[7u8; 32]); // random
        body.push(0); // session id
        body.extend_from_slice(&[0, 4, 0xc0, 0x09, 0x00, 0x2f]); // two cipher suites
        body.extend_from_slice(&[1, 0]); // null compression
        let mut hs = vec![1u8, 0, (body.len() >> 8) as u8, body.len() as u8];
        hs.extend_from_slice(&body);
        let mut record = vec![0x16, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8];
        record.extend_from_slice(&hs);
        let mut s = tokio::net::TcpStream::connect(h.ws).await.unwrap();
        s.write_all(&record).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut answer)).await;
        assert!(
            answer.is_empty() || answer[0] == 0x15,
            "an alert or nothing: {answer:?}"
        );
        assert!(!String::from_utf8_lossy(&answer).contains("HTTP"));
    }
}
