//! Node certificates: a bootstrap token cannot take over a connected node, and deleting a
//! Node revokes the certificates issued to it (in memory without Kubernetes; in ConfigMap
//! `kubeedge/revokedcerts` with it, so a restarted hub still refuses them).

use std::sync::Arc;

use crate::support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

/// `GET /edge.crt` for `node` with a fresh CSR: with the token, or with `client`'s certificate.
async fn request_cert(h: &Harness, node: &str, client: Option<&pki::CertAndKey>) -> (u16, String) {
    let csr = pki::EdgeCsr::generate(node).unwrap();
    let mut headers = vec![("NodeName", node.to_owned())];
    if client.is_none() {
        let jwt = pki::split_token(&h.hub.token()).unwrap().1.to_owned();
        headers.push(("Authorization", format!("Bearer {jwt}")));
    }
    let (status, body) = https(
        h.https,
        h.tls(client),
        "GET",
        "/edge.crt",
        &headers,
        &csr.csr_der,
    )
    .await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Upgrades as `node` with `cert`: the status, or the I/O error text (a TLS refusal).
async fn upgrade_with(h: &Harness, node: &str, cert: &pki::CertAndKey) -> Result<u16, String> {
    raw_upgrade(
        h.ws,
        h.tls(Some(cert)),
        &edge_path(node),
        &edge_headers(node),
    )
    .await
    .map(|(status, _, _)| status)
    .map_err(|e| e.to_string())
}

async fn bootstrap(h: &Harness, node: &str) -> pki::CertAndKey {
    let base = format!("https://127.0.0.1:{}", h.https.port());
    let certs = edge::hub::bootstrap(&base, &h.hub.token(), node)
        .await
        .unwrap();
    pki::CertAndKey {
        cert_der: certs.cert_der,
        key_der: certs.key_der,
    }
}

#[actix_rt::test]
async fn a_token_cannot_mint_a_certificate_for_a_connected_node_until_it_disconnects() {
    let h = Harness::start().await;
    let own = h.edge_cert("edge-1");
    let (status, _, ws) = raw_upgrade(
        h.ws,
        h.tls(Some(&own)),
        &edge_path("edge-1"),
        &edge_headers("edge-1"),
    )
    .await
    .unwrap();
    assert_eq!(status, 101);
    h.wait_nodes(1).await;

    let (status, body) = request_cert(&h, "edge-1", None).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("\"edge-1\" is connected"), "{body}");
    assert_eq!(h.hub.stats().token_refused_connected, 1);
    // Other nodes still bootstrap, and the node renews with its own certificate meanwhile.
    assert_eq!(request_cert(&h, "edge-2", None).await.0, 200);
    let (status, body) = request_cert(&h, "edge-1", Some(&own)).await;
    assert_eq!(status, 200, "{body}");

    drop(ws);
    h.wait_nodes(0).await;
    let (status, body) = request_cert(&h, "edge-1", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h.hub.stats().token_refused_connected, 1);
}

#[actix_rt::test]
async fn a_revoked_node_is_refused_at_the_handshake_and_renewal_until_it_bootstraps_again() {
    let h = Harness::start().await;
    let old = bootstrap(&h, "edge-1").await;
    let _held = h.connect_with("edge-1", &old).await;
    h.wait_nodes(1).await;

    // Without Kubernetes the composer revokes; the live session is closed.
    h.hub.revoke_node("edge-1").await;
    h.wait_nodes(0).await;
    let err = upgrade_with(&h, "edge-1", &old).await.unwrap_err();
    assert!(err.contains("CertificateRevoked"), "{err}");
    let (status, body) = request_cert(&h, "edge-1", Some(&old)).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("revoked"), "{body}");
    assert!(h.hub.stats().revoked_refused >= 2);
    // Another node's certificate is unaffected.
    assert_eq!(
        upgrade_with(&h, "edge-2", &h.edge_cert("edge-2")).await,
        Ok(101)
    );

    // Bootstrapping again yields a certificate dated after the revocation.
    let fresh = bootstrap(&h, "edge-1").await;
    assert_eq!(upgrade_with(&h, "edge-1", &fresh).await, Ok(101));
}

#[actix_rt::test]
async fn a_recreated_node_is_not_cut_off_by_deletes_meant_for_its_earlier_incarnation() {
    let h = Harness::start().await;
    let old = bootstrap(&h, "edge-1").await;
    let _held = h.connect_with("edge-1", &old).await;
    h.wait_nodes(1).await;
    h.hub.revoke_node("edge-1").await;
    h.wait_nodes(0).await;

    // Re-created under the same name: the edge bootstraps again and connects.
    let fresh = bootstrap(&h, "edge-1").await;
    let mut e = h.connect_with("edge-1", &fresh).await;
    h.wait_nodes(1).await;
    // The sync loop's delete for the old incarnation's record: dropped, counted, not fatal.
    let stale = beehive::Message::new().with_route(
        "edgecontroller",
        "resource",
        "node/edge-1/null/node/edge-1",
        "delete",
    );
    h.downstream(stale).await;
    let next = pod("edge-1", "p", "u1", "", "delete");
    h.downstream(next.clone()).await;
    assert_eq!(e.recv().await.header.id, next.header.id);
    assert_eq!(
        h.hub
            .node_stats("edge-1")
            .unwrap()
            .drops
            .get(cloudhub::DropReason::StaleNodeDelete),
        1
    );
    assert_eq!(h.hub.connected_nodes(), 1);

    // Deleting the new incarnation does close it.
    h.hub.revoke_node("edge-1").await;
    assert!(e.closed_within(WAIT).await.is_some());
    h.wait_nodes(0).await;
}

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [(
                    kubeedge_api::names::EDGE_NODE_LABEL.to_owned(),
                    String::new(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[actix_rt::test]
async fn deleting_a_node_revokes_its_certificates_across_a_hub_restart() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let name = format!("hub-revoke-{}", &beehive::new_id()[..8]);
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();
    let store = || Arc::new(cloudhub::MemoryStore::new());
    let h = Harness::with_kube(client.clone(), store(), Default::default()).await;
    let old = bootstrap(&h, &name).await;
    let (status, _, _ws) = raw_upgrade(
        h.ws,
        h.tls(Some(&old)),
        &edge_path(&name),
        &edge_headers(&name),
    )
    .await
    .unwrap();
    assert_eq!(status, 101);
    h.wait_nodes(1).await;

    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
    // The watch sees the deletion: the session closes and the old certificate is refused.
    h.wait_nodes(0).await;
    let err = upgrade_with(&h, &name, &old).await.unwrap_err();
    assert!(err.contains("CertificateRevoked"), "{err}");
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "kubeedge");
    let mut stored = None;
    for _ in 0..100 {
        stored = cms
            .get_opt(cloudhub::REVOKED_CERTS)
            .await
            .unwrap()
            .and_then(|cm| cm.data?.get(&name).cloned());
        if stored.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let stored = stored.expect("revocation stored in kubeedge/revokedcerts");
    assert!(pki::parse_time(&stored).is_some(), "{stored}");

    // A restarted hub reads the revocation back from the API server.
    h.hub.shutdown().await;
    drop(h);
    let h = Harness::with_kube(client.clone(), store(), Default::default()).await;
    let err = upgrade_with(&h, &name, &old).await.unwrap_err();
    assert!(err.contains("CertificateRevoked"), "{err}");

    // Re-created and bootstrapped again with the token: the new certificate works.
    nodes
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();
    let fresh = bootstrap(&h, &name).await;
    // Held open: a connection dropped right after its `101` can end before the count shows it.
    let (status, _, _ws) = raw_upgrade(
        h.ws,
        h.tls(Some(&fresh)),
        &edge_path(&name),
        &edge_headers(&name),
    )
    .await
    .unwrap();
    assert_eq!(status, 101);
    h.wait_nodes(1).await;
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
    h.wait_nodes(0).await;
}

#[actix_rt::test]
async fn a_cloud_node_deletion_and_an_edge_label_removal_revoke_nothing() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let id = &beehive::new_id()[..8];
    let (edge_name, cloud_name) = (format!("hub-relabel-{id}"), format!("hub-cloud-{id}"));
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(&PostParams::default(), &node(&edge_name))
        .await
        .unwrap();
    let mut cloud = node(&cloud_name);
    cloud.metadata.labels = None;
    nodes.create(&PostParams::default(), &cloud).await.unwrap();
    let h = Harness::with_kube(
        client.clone(),
        Arc::new(cloudhub::MemoryStore::new()),
        Default::default(),
    )
    .await;
    let cert = bootstrap(&h, &edge_name).await;
    // Let the watch list both nodes first.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let unlabel =
        serde_json::json!({"metadata": {"labels": {kubeedge_api::names::EDGE_NODE_LABEL: null}}});
    nodes
        .patch(
            &edge_name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&unlabel),
        )
        .await
        .unwrap();
    nodes
        .delete(&cloud_name, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(upgrade_with(&h, &edge_name, &cert).await, Ok(101));
    let revoked = h.hub.revocations();
    assert_eq!(
        (
            revoked.revoked_at(&edge_name),
            revoked.revoked_at(&cloud_name)
        ),
        (None, None)
    );
    nodes
        .delete(&edge_name, &DeleteParams::default())
        .await
        .unwrap();
}

#[actix_rt::test]
async fn edges_are_refused_while_the_revocations_cannot_be_read() {
    init_tracing();
    let mut cfg = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    cfg.connect_timeout = Some(std::time::Duration::from_millis(200));
    let broken = kube::Client::try_from(cfg).unwrap();
    // Key material from files, so only the revocation read needs the API server.
    let dir = TempDir::new("cloudhub-revocations-down");
    let c = config(&dir.0);
    let ca = pki::CertificateAuthority::generate().unwrap();
    let ca_pair = pki::CertAndKey {
        cert_der: ca.cert_der().to_vec(),
        key_der: ca.key_der().to_vec(),
    };
    pki::write_pem_pair(&c.tls_ca_file, &c.tls_ca_key_file, &ca_pair).unwrap();
    let server = ca.issue_server_cert(&["127.0.0.1".into()], &[]).unwrap();
    pki::write_pem_pair(&c.tls_cert_file, &c.tls_private_key_file, &server).unwrap();
    let bus = beehive::Bus::new();
    let hub = cloudhub::CloudHub::new(
        c,
        bus.endpoint("cloudhub"),
        Some(broken),
        Arc::new(cloudhub::MemoryStore::new()),
    )
    .await
    .unwrap();
    let handle = hub.handle();
    bus.register(hub).unwrap();
    bus.start().unwrap();
    let addrs = handle.start_servers().unwrap();
    assert!(!handle.revocations().is_loaded());

    let cert = ca.issue(&pki::IssueOptions::edge("edge-1")).unwrap();
    let tls = pki::tls::client_config(
        ca.cert_der(),
        Some((cert.cert_der.as_slice(), cert.key_der.as_slice())),
    )
    .unwrap();
    let refused = raw_upgrade(
        addrs.websocket.unwrap(),
        tls,
        &edge_path("edge-1"),
        &edge_headers("edge-1"),
    )
    .await;
    assert!(refused.is_err(), "upgraded without knowing the revocations");
    assert_eq!(handle.connected_nodes(), 0);
    handle.shutdown().await;
}
