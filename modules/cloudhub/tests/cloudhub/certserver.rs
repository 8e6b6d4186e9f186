//! The certificate server through real HTTPS (CA download, token and certificate authentication,
//! CSR checks, usages; without Kubernetes), and the Rust edge's bootstrap against it.

use std::time::Duration;

use crate::support::*;

#[actix_rt::test]
async fn ca_crt_is_served_without_a_client_certificate() {
    let h = Harness::start().await;
    let (status, body) = https(
        h.https,
        pki::tls::insecure_client_config(),
        "GET",
        "/ca.crt",
        &[],
        b"",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, h.hub.ca().cert_der());
}

/// `GET /edge.crt` with `csr` as the body: (status, body).
async fn edge_crt(
    addr: std::net::SocketAddr,
    tls: rustls::ClientConfig,
    headers: &[(&str, String)],
    csr: &[u8],
) -> (u16, Vec<u8>) {
    https(addr, tls, "GET", "/edge.crt", headers, csr).await
}

fn jwt(h: &Harness) -> String {
    pki::split_token(&h.hub.token()).unwrap().1.to_owned()
}

#[actix_rt::test]
async fn edge_crt_with_a_valid_token_signs_the_node_csr() {
    let h = Harness::with(|c| c.edge_cert_signing_duration = 30).await;
    let csr = pki::EdgeCsr::generate("edge-1").unwrap();
    let headers = [
        ("Authorization", format!("Bearer {}", jwt(&h))),
        ("NodeName", "edge-1".into()),
    ];
    let (status, der) = edge_crt(h.https, anonymous(&h), &headers, &csr.csr_der).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&der));
    let id = h.hub.ca().verify_client_cert(&der, &[]).unwrap();
    assert_eq!(id.common_name.as_deref(), Some("system:node:edge-1"));
    assert_eq!(id.organizations, ["system:nodes"]);
    assert_eq!(pki::ext_key_usages(&der).unwrap(), [2]);
    use x509_parser::prelude::FromDer;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
    let days =
        (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) / 86_400;
    assert_eq!(days, 30);
}

#[actix_rt::test]
async fn edge_crt_refuses_missing_malformed_foreign_and_expired_tokens_with_401() {
    let h = Harness::start().await;
    let csr = pki::EdgeCsr::generate("edge-1").unwrap();
    let node = ("NodeName", "edge-1".to_owned());
    let other = pki::CertificateAuthority::generate().unwrap();
    let expired = pki::create_jwt_expiring(h.hub.ca().key_der(), beehive::now_millis() / 1000 - 10);
    for auth in [
        None,
        Some("Bearer".to_owned()),
        Some(format!(
            "Bearer {}",
            pki::create_jwt(other.key_der(), Duration::from_secs(60))
        )),
        Some(format!("Bearer {expired}")),
        Some("Bearer a b".to_owned()),
    ] {
        let mut headers = vec![node.clone()];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.clone()));
        }
        let (status, body) = edge_crt(h.https, anonymous(&h), &headers, &csr.csr_der).await;
        assert_eq!(status, 401, "{auth:?}: {}", String::from_utf8_lossy(&body));
        assert!(!body.is_empty(), "a clear error text");
    }
    let headers = [("Authorization", format!("Bearer {}", jwt(&h))), node];
    let (status, _) = edge_crt(h.https, anonymous(&h), &headers, b"not a csr").await;
    assert_eq!(status, 500);
}

#[actix_rt::test]
async fn edge_crt_refuses_a_csr_for_another_node_even_with_a_token() {
    let h = Harness::start().await;
    let csr = pki::EdgeCsr::generate("edge-2").unwrap();
    let headers = [
        ("Authorization", format!("Bearer {}", jwt(&h))),
        ("NodeName", "edge-1".into()),
    ];
    let (status, _) = edge_crt(h.https, anonymous(&h), &headers, &csr.csr_der).await;
    assert_eq!(status, 403);
}

#[actix_rt::test]
async fn rotation_with_a_client_certificate_checks_the_node_name() {
    let h = Harness::start().await;
    let cert = h.edge_cert("edge-1");
    let csr = pki::EdgeCsr::generate("edge-1").unwrap();
    let (status, _) = edge_crt(
        h.https,
        h.tls(Some(&cert)),
        &[("NodeName", "edge-2".into())],
        &csr.csr_der,
    )
    .await;
    assert_eq!(status, 401);
    let (status, der) = edge_crt(
        h.https,
        h.tls(Some(&cert)),
        &[("NodeName", "edge-1".into())],
        &csr.csr_der,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        h.hub
            .ca()
            .verify_client_cert(&der, &[])
            .unwrap()
            .is_node("edge-1")
    );
    // A certificate of another CA gets 401, not a TLS alert.
    let other = pki::CertificateAuthority::generate()
        .unwrap()
        .issue(&pki::IssueOptions::edge("edge-1"))
        .unwrap();
    let (status, _) = edge_crt(
        h.https,
        h.tls(Some(&other)),
        &[("NodeName", "edge-1".into())],
        &csr.csr_der,
    )
    .await;
    assert_eq!(status, 401);
}

#[actix_rt::test]
async fn ext_key_usages_header_grants_server_auth_only_when_configured() {
    let csr = pki::EdgeCsr::generate("edge-1").unwrap();
    let strict = Harness::start().await;
    let headers = |h: &Harness| {
        [
            ("Authorization", format!("Bearer {}", jwt(h))),
            ("NodeName", "edge-1".into()),
            ("ExtKeyUsages", "[1,2]".into()),
        ]
    };
    let (status, _) = edge_crt(
        strict.https,
        anonymous(&strict),
        &headers(&strict),
        &csr.csr_der,
    )
    .await;
    assert_eq!(status, 403);
    let open = Harness::with(|c| c.allowed_ext_key_usages = vec![1]).await;
    let (status, der) = edge_crt(open.https, anonymous(&open), &headers(&open), &csr.csr_der).await;
    assert_eq!(status, 200);
    let mut ekus = pki::ext_key_usages(&der).unwrap();
    ekus.sort();
    assert_eq!(ekus, [1, 2]);
}

#[actix_rt::test]
async fn node_check_without_kubernetes_answers_not_found() {
    let h = Harness::start().await;
    let (status, body) = https(
        h.https,
        pki::tls::insecure_client_config(),
        "GET",
        "/node/edge-1",
        &[],
        b"",
    )
    .await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).starts_with("Node not found"));
}

#[actix_rt::test]
async fn task_reports_need_the_node_certificate_and_reach_taskmanager() {
    let mut h = Harness::start().await;
    let body = br#"{"action":"pull","state":"success"}"#;
    let path = "/task/prepull/name/job-1/node/edge-1/status";
    let (status, _) = https(h.https, anonymous(&h), "POST", path, &[], body).await;
    assert_eq!(status, 401);
    let cert2 = h.edge_cert("edge-2");
    let (status, _) = https(h.https, h.tls(Some(&cert2)), "POST", path, &[], body).await;
    assert_eq!(status, 403);
    let cert = h.edge_cert("edge-1");
    let (status, _) = https(h.https, h.tls(Some(&cert)), "POST", path, &[], b"{nope").await;
    assert_eq!(status, 400);
    let (status, text) = https(h.https, h.tls(Some(&cert)), "POST", path, &[], body).await;
    assert_eq!((status, text.as_slice()), (200, &b"ok"[..]));
    let m = recv(&mut h.tasks).await;
    // A report an edge made over HTTPS is on the bus as the edge relay's, like its frames.
    assert!(m.is_sent_by("cloudhub/edge"), "{:?}", m.sender());
    assert_eq!(
        (m.route.source.as_str(), m.route.group.as_str()),
        ("cloudhub", "cloudhub")
    );
    assert_eq!(
        (m.route.resource.as_str(), m.route.operation.as_str()),
        ("node/edge-1/task/job-1/node/edge-1", "prepull")
    );
    assert_eq!(
        m.content.parse::<serde_json::Value>().unwrap()["state"],
        "success"
    );
    let report = br#"{"UpgradeID":"u1","HistoryID":"h","NodeName":"edge-1","FromVersion":"v1","ToVersion":"v2","Status":"upgrade_success","Reason":""}"#;
    let (status, _) = https(
        h.https,
        h.tls(Some(&cert)),
        "POST",
        "/nodeupgrade",
        &[],
        report,
    )
    .await;
    assert_eq!(status, 200);
    let m = recv(&mut h.tasks).await;
    assert_eq!(
        m.route.resource, "node/edge-1/task/u1/node/edge-1",
        "parsed values, not task//node/"
    );
    let c: serde_json::Value = m.content.parse().unwrap();
    assert_eq!(
        (c["Event"].as_str(), c["Action"].as_str()),
        (Some("Upgrade"), Some("Success"))
    );
}

#[actix_rt::test]
async fn token_has_four_parts_matches_the_ca_and_is_written_to_a_file() {
    let h = Harness::start().await;
    let token = h.hub.token();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 4);
    assert_eq!(parts[0], pki::sha256_hex(h.hub.ca().cert_der()));
    let exp = pki::verify_jwt(&parts[1..].join("."), h.hub.ca().key_der()).unwrap();
    let expected = beehive::now_millis() / 1000 + 24 * 3600;
    assert!((exp - expected).abs() < 60, "exp ≈ now + 24 h");
    let file = std::fs::read_to_string(h.dir.0.join("ca/tokendata")).unwrap();
    assert_eq!(file, token);
}

#[actix_rt::test]
async fn token_is_refreshed_on_schedule() {
    let h = Harness::with_options(
        |_| {},
        cloudhub::HubOptions {
            token_refresh: Some(Duration::from_millis(300)),
            ..Default::default()
        },
    )
    .await;
    let first = h.hub.token();
    // JWTs carry whole-second expiries: wait past a second boundary.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let later = h.hub.token();
    assert_ne!(first, later);
    assert_eq!(
        std::fs::read_to_string(h.dir.0.join("ca/tokendata")).unwrap(),
        later
    );
}

#[actix_rt::test]
async fn key_material_is_generated_once_and_reused_after_a_restart() {
    let dir = TempDir::new("cloudhub-restart");
    let bus = beehive::Bus::new();
    let store = std::sync::Arc::new(cloudhub::MemoryStore::new());
    let first = cloudhub::CloudHub::new(config(&dir.0), bus.endpoint("a"), None, store.clone())
        .await
        .unwrap()
        .handle();
    assert!(dir.0.join("ca/rootCA.crt").exists() && dir.0.join("certs/server.key").exists());
    let second = cloudhub::CloudHub::new(config(&dir.0), bus.endpoint("b"), None, store)
        .await
        .unwrap()
        .handle();
    assert_eq!(first.ca().cert_der(), second.ca().cert_der());
    assert_eq!(first.server_cert(), second.server_cert());
    assert_eq!(
        first.token().split('.').next(),
        second.token().split('.').next()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.0.join("ca/rootCA.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[actix_rt::test]
async fn rust_edge_bootstraps_with_the_token_then_connects_and_acks() {
    let mut h = Harness::start().await;
    let base = format!("https://127.0.0.1:{}", h.https.port());
    // A token for another CA is refused before any CSR is sent.
    let other = pki::CertificateAuthority::generate().unwrap();
    let bad = pki::create_token(&other, Duration::from_secs(60));
    assert!(matches!(
        edge::hub::bootstrap(&base, &bad, "edge-1").await,
        Err(edge::hub::HubError::CaMismatch { .. })
    ));
    let certs = edge::hub::bootstrap(&base, &h.hub.token(), "edge-1")
        .await
        .unwrap();
    let paths = edge::hub::CertPaths::under(&h.dir.0.join("edge"));
    certs.store(&paths).unwrap();
    let certs = edge::hub::EdgeCerts::load(&paths, "edge-1")
        .unwrap()
        .unwrap();
    let config = edge::hub::HubClientConfig::new("edge-1", h.ws.to_string());
    let (client, mut events) =
        edge::hub::HubClient::start(config, std::sync::Arc::new(certs.client_tls().unwrap()));
    assert_eq!(
        tokio::time::timeout(WAIT, events.recv()).await.unwrap(),
        Some(edge::hub::HubEvent::Connected)
    );
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "p", "u1", "3", "insert")).await;
    let Some(edge::hub::HubEvent::Message(m)) =
        tokio::time::timeout(WAIT, events.recv()).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(m.route.resource, "default/pod/p");
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
    // Rotation with the current certificate.
    let rotated = edge::hub::rotate(&base, &certs, "edge-1").await.unwrap();
    assert_ne!(rotated.cert_der, certs.cert_der);
    client.stop();
    let ev = h.next_event().await;
    assert_eq!(ev.route.operation, "connected");
}

#[actix_rt::test]
async fn token_refresh_keeps_retrying_after_a_failed_write() {
    let dir_holder = TempDir::new("cloudhub-token-fail");
    let blocked = dir_holder.0.join("ca/tokendata");
    // A directory where the token file should go makes every write fail.
    std::fs::create_dir_all(blocked.join("x")).unwrap();
    let h = Harness::with_options(
        |c| {
            c.tls_ca_file = dir_holder.0.join("ca/rootCA.crt");
            c.tls_ca_key_file = dir_holder.0.join("ca/rootCA.key");
        },
        cloudhub::HubOptions {
            token_refresh: Some(Duration::from_millis(300)),
            ..Default::default()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(blocked.is_dir(), "still failing");
    std::fs::remove_dir_all(&blocked).unwrap();
    wait_until(|| std::fs::read_to_string(&blocked).is_ok_and(|t| t == h.hub.token())).await;
}
