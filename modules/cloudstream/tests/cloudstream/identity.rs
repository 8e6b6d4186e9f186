//! Tunnel identity: a `SessionInternalIP` must be an IP address of the node (its tunnel's
//! peer address or one of its Node's addresses), an IP held by another node's live tunnel
//! is refused without touching that tunnel, and lookups by node name never use IPs.

use std::time::Duration;

use crate::support::{self, Cloud, Pki, RawTunnel, raw_dial, upgrade_request};
use beehive::Bus;
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamHandle, CloudStreamTls, ServerTls, StaticPods,
    Tuning,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeedge_wire::tunnel::{MessageType, TunnelMessage};
use tokio::io::AsyncWriteExt;

async fn dial(
    handle: &CloudStreamHandle,
    ca: &Pki,
    node: &str,
    ip: Option<&str>,
) -> (u16, Option<RawTunnel>, String) {
    let (head, tunnel, body) = raw_dial(
        handle.tunnel_addr().port(),
        &ca.node(node),
        &upgrade_request(Some(node), ip),
    )
    .await
    .unwrap();
    (
        head.status,
        tunnel,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[actix_rt::test]
async fn an_ip_held_by_another_nodes_live_tunnel_should_be_refused_and_the_holder_kept() {
    let cloud = Cloud::start().await;
    let (status, mut holder, _) =
        dial(&cloud.handle, &cloud.edge_ca, "edge-1", Some("10.0.0.1")).await;
    assert_eq!(status, 101);
    assert!(
        cloud
            .handle
            .wait_for_session("edge-1", Duration::from_secs(5))
            .await
    );
    let before = cloud.handle.counters();

    let (status, tunnel, body) =
        dial(&cloud.handle, &cloud.edge_ca, "edge-2", Some("10.0.0.1")).await;
    assert_eq!(status, 409, "{body}");
    assert!(tunnel.is_none());
    assert!(
        body.contains("IP 10.0.0.1 is held by another node's tunnel"),
        "{body}"
    );
    let after = cloud.handle.counters();
    assert_eq!(
        after.tunnel_identity_refused,
        before.tunnel_identity_refused + 1
    );
    assert_eq!(after.tunnels_refused, before.tunnels_refused + 1);
    assert_eq!(cloud.handle.connected_nodes(), ["edge-1"]);

    // The holder still gets the requests for its IP.
    let mut api = cloud.api_conn().await;
    api.write_all(b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:10351\r\n\r\n")
        .await
        .unwrap();
    let holder_t = holder.as_mut().unwrap();
    let connect = holder_t.next_tunnel().await.unwrap();
    assert_eq!(connect.kind, MessageType::MetricConnect);
    holder_t
        .send(&TunnelMessage::data(connect.connect_id, &b"up 1\n"[..]))
        .await;
    holder_t
        .send(&TunnelMessage::remove(connect.connect_id))
        .await;
    let (head, body) = support::read_response(&mut api).await;
    assert_eq!((head.status, body), (200, b"up 1\n".to_vec()));

    // Another IP is fine, and once the holder is gone its IP is free.
    let (status, _other, body) =
        dial(&cloud.handle, &cloud.edge_ca, "edge-2", Some("10.0.0.2")).await;
    assert_eq!(status, 101, "{body}");
    drop(holder);
    tokio::time::timeout(Duration::from_secs(10), async {
        while cloud
            .handle
            .connected_nodes()
            .contains(&"edge-1".to_owned())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("edge-1's session did not end");
    let (status, _edge3, body) =
        dial(&cloud.handle, &cloud.edge_ca, "edge-3", Some("10.0.0.1")).await;
    assert_eq!(status, 101, "{body}");
}

#[actix_rt::test]
async fn a_session_internal_ip_that_is_not_an_ip_should_be_refused() {
    let cloud = Cloud::start().await;
    let (status, _t, _) = dial(&cloud.handle, &cloud.edge_ca, "edge-1", Some("10.0.0.1")).await;
    assert_eq!(status, 101);
    // The old attack: register with another node's name as the "IP".
    let (status, tunnel, body) =
        dial(&cloud.handle, &cloud.edge_ca, "edge-2", Some("edge-1")).await;
    assert_eq!(status, 400, "{body}");
    assert!(tunnel.is_none());
    assert!(body.contains("is not an IP address"), "{body}");
    assert_eq!(cloud.handle.counters().tunnel_identity_refused, 1);
    assert_eq!(cloud.handle.connected_nodes(), ["edge-1"]);
}

#[actix_rt::test]
async fn a_lookup_by_node_name_should_never_fall_back_to_an_ip() {
    let cloud = Cloud::start().await;
    // A node may be named like an address; edge-1 registers that address as its IP.
    let (status, mut t, _) = dial(&cloud.handle, &cloud.edge_ca, "edge-1", Some("10.0.0.5")).await;
    assert_eq!(status, 101);
    cloud.pods.place("ns", "web", "10.0.0.5");
    let (head, body) = cloud.get("/containerLogs/ns/web/app", "").await;
    assert_eq!(head.status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("node 10.0.0.5 has no tunnel"));
    // A node-proxy request names the node: also by name only.
    let (head, _) = cloud
        .get(
            "/metrics",
            "X-Forwarded-Uri: /api/v1/nodes/10.0.0.5/proxy/metrics\r\n",
        )
        .await;
    assert_eq!(head.status, 503);
    // Nothing reached edge-1.
    let t = t.as_mut().unwrap();
    let next = tokio::time::timeout(Duration::from_millis(300), t.next_tunnel()).await;
    assert!(next.is_err(), "edge-1 got a stream that was not for it");

    // Positive: by its own name, and by its IP in Host.
    cloud.pods.place("ns", "own", "edge-1");
    let api = tokio::spawn({
        let mut conn = cloud.api_conn().await;
        async move {
            conn.write_all(b"GET /containerLogs/ns/own/app HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            support::read_response(&mut conn).await
        }
    });
    let connect = t.next_tunnel().await.unwrap();
    assert_eq!(connect.kind, MessageType::LogsConnect);
    t.send(&TunnelMessage::data(connect.connect_id, &b"mine\n"[..]))
        .await;
    t.send(&TunnelMessage::remove(connect.connect_id)).await;
    let (head, body) = api.await.unwrap();
    assert_eq!((head.status, body), (200, b"mine\n".to_vec()));
}

/// A Node with the given addresses, labelled as an edge.
async fn create_node(client: &kube::Client, name: &str, addresses: &[&str]) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/edge": ""}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let addresses: Vec<_> = addresses
        .iter()
        .map(|a| serde_json::json!({"type": "InternalIP", "address": a}))
        .chain([serde_json::json!({"type": "Hostname", "address": name})])
        .collect();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": {"addresses": addresses}})),
        )
        .await
        .unwrap();
}

#[actix_rt::test]
async fn with_kubernetes_the_ip_should_be_the_peer_or_one_of_the_nodes_addresses() {
    test_tiers::require!(ApiServer);
    support::init_tracing();
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("csid").await;
    let edge_ca = Pki::new("kubeedge-ca");
    let stream_ca = Pki::new("kubernetes-ca");
    let bus = Bus::new();
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(edge_ca.server()),
        stream: Some(ServerTls::Material(stream_ca.server())),
    };
    let cs = CloudStream::new(
        config,
        bus.endpoint("cloudStream"),
        Some(client.clone()),
        tls,
    )
    .unwrap()
    .with_pod_locator(std::sync::Arc::new(StaticPods::new()));
    let handle = cs.handle();
    bus.register(cs).unwrap();
    bus.start().unwrap();

    let a = format!("a-{ns}");
    let b = format!("b-{ns}");
    create_node(&client, &a, &["10.20.0.5"]).await;
    create_node(&client, &b, &["10.20.0.6"]).await;

    // Another node's address, an address of no node, and a node that does not exist.
    for (node, ip) in [
        (a.as_str(), "10.20.0.6"),
        (a.as_str(), "10.20.0.7"),
        ("nobody", "10.20.0.8"),
    ] {
        let (status, tunnel, body) = dial(&handle, &edge_ca, node, Some(ip)).await;
        assert_eq!(status, 403, "{node} {ip}: {body}");
        assert!(tunnel.is_none());
        assert!(
            body.contains("is not the tunnel's peer address") || body.contains("is neither"),
            "{body}"
        );
    }
    assert_eq!(handle.counters().tunnel_identity_refused, 3);
    assert!(handle.connected_nodes().is_empty());

    // Its own address, and the peer address.
    let (status, _ta, body) = dial(&handle, &edge_ca, &a, Some("10.20.0.5")).await;
    assert_eq!(status, 101, "{body}");
    let (status, _tb, body) = dial(&handle, &edge_ca, &b, Some("127.0.0.1")).await;
    assert_eq!(status, 101, "{body}");
    assert!(
        handle
            .wait_for_session("10.20.0.5", Duration::from_secs(5))
            .await
    );
    assert!(
        handle
            .wait_for_session("127.0.0.1", Duration::from_secs(5))
            .await
    );
    assert_eq!(handle.counters().tunnel_identity_refused, 3);
}

/// Dials the tunnel as node `edge-1` (claiming 127.0.0.1) with `cert`: the status, the tunnel
/// when upgraded, the body as text.
async fn dial_edge_1(
    cloud: &Cloud,
    cert: &cloudstream::TlsMaterial,
) -> (u16, Option<RawTunnel>, String) {
    let (head, tunnel, body) = raw_dial(
        cloud.handle.tunnel_addr().port(),
        cert,
        &upgrade_request(Some("edge-1"), Some("127.0.0.1")),
    )
    .await
    .unwrap();
    (
        head.status,
        tunnel,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[actix_rt::test]
async fn a_revoked_edge_certificate_should_be_refused_at_the_tunnel() {
    let revocations = pki::Revocations::new();
    let table = revocations.clone();
    let cloud = Cloud::start_adjusted(Default::default(), |cs| cs.with_revocations(table)).await;

    // Certificates of edge-1 made so far are revoked (as a deletion of Node edge-1 does).
    let old = cloud.edge_ca.node("edge-1");
    revocations.revoke("edge-1", pki::unix_now() + 5);
    let (status, tunnel, body) = dial_edge_1(&cloud, &old).await;
    assert_eq!(status, 403, "{body}");
    assert!(tunnel.is_none());
    assert!(body.contains("revoked"), "{body}");
    assert_eq!(cloud.handle.counters().tunnel_identity_refused, 1);

    // Another node's certificate is not affected.
    let (status, tunnel, body) =
        dial(&cloud.handle, &cloud.edge_ca, "edge-2", Some("127.0.0.1")).await;
    assert_eq!(status, 101, "{body}");
    assert!(tunnel.is_some());
}

#[actix_rt::test]
async fn a_tunnel_dialed_while_revocations_load_waits_for_them_within_the_handshake_timeout() {
    let revocations = pki::Revocations::pending();
    let table = revocations.clone();
    let tuning = Tuning {
        handshake_timeout: Duration::from_secs(2),
        ..Tuning::default()
    };
    let cloud = Cloud::start_adjusted(tuning, |cs| cs.with_revocations(table)).await;

    // Loaded half a second after the dial: the tunnel opens, nothing is refused.
    let loader = revocations.clone();
    let load = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        loader.mark_loaded();
    });
    let (status, tunnel, body) = dial_edge_1(&cloud, &cloud.edge_ca.node("edge-1")).await;
    load.await.unwrap();
    assert_eq!(status, 101, "{body}");
    assert!(tunnel.is_some());
    assert_eq!(cloud.handle.counters().tunnel_identity_refused, 0);
}

#[actix_rt::test]
async fn a_tunnel_is_refused_when_revocations_stay_unknown_past_the_handshake_timeout() {
    let tuning = Tuning {
        handshake_timeout: Duration::from_secs(1),
        ..Tuning::default()
    };
    let cloud = Cloud::start_adjusted(tuning, |cs| {
        cs.with_revocations(pki::Revocations::pending())
    })
    .await;
    let started = std::time::Instant::now();
    let (status, tunnel, body) = dial_edge_1(&cloud, &cloud.edge_ca.node("edge-1")).await;
    assert_eq!(status, 403, "{body}");
    assert!(tunnel.is_none());
    assert!(body.contains("not loaded yet"), "{body}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "refused only once the handshake timeout passed: {:?}",
        started.elapsed()
    );
    assert_eq!(cloud.handle.counters().tunnel_identity_refused, 1);
}

#[actix_rt::test]
async fn a_node_header_that_is_not_a_node_name_or_a_certificate_with_two_cns_should_be_refused() {
    let cloud = Cloud::start().await;
    // A certificate for `edge-1?` (as an unchecked issuer could have made) and the same
    // header: the name would reach the API path of Node `edge-1`.
    for bad in ["edge-1?", "edge-1?x=1", "Edge-1", "edge-1#"] {
        let (head, tunnel, body) = raw_dial(
            cloud.handle.tunnel_addr().port(),
            &cloud.edge_ca.node(bad),
            &upgrade_request(Some(bad), Some("127.0.0.1")),
        )
        .await
        .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert_eq!(head.status, 400, "{bad}: {body}");
        assert!(tunnel.is_none());
        assert!(body.contains("DNS-1123 subdomain"), "{bad}: {body}");
    }
    // Two CNs name no node, whichever one the header repeats.
    let two = cloud
        .edge_ca
        .user_with_two_common_names("system:node:edge-1", "system:node:edge-2");
    for node in ["edge-1", "edge-2"] {
        let (head, tunnel, body) = raw_dial(
            cloud.handle.tunnel_addr().port(),
            &two,
            &upgrade_request(Some(node), Some("127.0.0.1")),
        )
        .await
        .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert_eq!(head.status, 403, "{node}: {body}");
        assert!(tunnel.is_none());
    }
    assert!(cloud.handle.connected_nodes().is_empty());
}

/// cloudstream with a Kubernetes client (the Node address index), started now.
async fn kube_stream(prefix: &str) -> (CloudStreamHandle, Pki, Bus, kube::Client, String) {
    support::init_tracing();
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace(prefix).await;
    let edge_ca = Pki::new("kubeedge-ca");
    let stream_ca = Pki::new("kubernetes-ca");
    let bus = Bus::new();
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(edge_ca.server()),
        stream: Some(ServerTls::Material(stream_ca.server())),
    };
    let cs = CloudStream::new(
        config,
        bus.endpoint("cloudStream"),
        Some(client.clone()),
        tls,
    )
    .unwrap()
    .with_pod_locator(std::sync::Arc::new(StaticPods::new()));
    let handle = cs.handle();
    bus.register(cs).unwrap();
    bus.start().unwrap();
    (handle, edge_ca, bus, client, ns)
}

/// Replaces a Node's `status.addresses` (as the node itself may: it writes its own status).
async fn set_addresses(client: &kube::Client, name: &str, addresses: serde_json::Value) {
    Api::<Node>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": {"addresses": addresses}})),
        )
        .await
        .unwrap();
}

/// Dials until the answer is not 503 (the address index may still be loading).
async fn dial_settled(
    handle: &CloudStreamHandle,
    ca: &Pki,
    node: &str,
    ip: &str,
) -> (u16, Option<RawTunnel>, String) {
    for _ in 0..100 {
        let answer = dial(handle, ca, node, Some(ip)).await;
        if answer.0 != 503 {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{node}: still 503 after 10 s");
}

#[actix_rt::test]
async fn an_ip_another_node_listed_first_should_stay_its_own_whatever_the_claimant_lists() {
    let (handle, edge_ca, _bus, client, ns) = kube_stream("csown").await;
    let (victim, attacker) = (format!("victim-{ns}"), format!("attacker-{ns}"));
    create_node(&client, &victim, &["10.21.0.5"]).await;
    create_node(&client, &attacker, &["10.21.0.6"]).await;
    // The attacker writes the victim's address into its own status, as an InternalIP, an
    // ExternalIP and a Hostname.
    set_addresses(
        &client,
        &attacker,
        serde_json::json!([
            {"type": "InternalIP", "address": "10.21.0.5"},
            {"type": "InternalIP", "address": "10.21.0.6"},
            {"type": "Hostname", "address": "10.21.0.9"},
        ]),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, tunnel, body) = dial_settled(&handle, &edge_ca, &attacker, "10.21.0.5").await;
    assert_eq!(status, 403, "{body}");
    assert!(tunnel.is_none());
    assert!(body.contains("listed by another Node first"), "{body}");
    // A Hostname entry is not an address of the node.
    let (status, _, body) = dial_settled(&handle, &edge_ca, &attacker, "10.21.0.9").await;
    assert_eq!(status, 403, "{body}");
    assert!(handle.connected_nodes().is_empty());
    // Its own address works, and the victim still gets its own.
    let (status, _a, body) = dial_settled(&handle, &edge_ca, &attacker, "10.21.0.6").await;
    assert_eq!(status, 101, "{body}");
    let (status, _v, body) = dial_settled(&handle, &edge_ca, &victim, "10.21.0.5").await;
    assert_eq!(status, 101, "{body}");
    assert!(
        handle
            .wait_for_session(&victim, Duration::from_secs(5))
            .await
    );
    assert_eq!(handle.tunnel_ip(&victim).as_deref(), Some("10.21.0.5"));
}

#[actix_rt::test]
async fn the_node_that_owns_an_ip_should_evict_a_tunnel_holding_it_on_status_alone() {
    let (handle, edge_ca, _bus, client, ns) = kube_stream("csevict").await;
    let (squatter, owner) = (format!("squatter-{ns}"), format!("owner-{ns}"));
    // The squatter lists the address while nobody else does, and opens its tunnel with it.
    create_node(&client, &squatter, &["10.22.0.5"]).await;
    let (status, held, body) = dial_settled(&handle, &edge_ca, &squatter, "10.22.0.5").await;
    assert_eq!(status, 101, "{body}");
    assert!(
        handle
            .wait_for_session(&squatter, Duration::from_secs(5))
            .await
    );
    // It drops the address from its status but keeps the tunnel; the address's real node
    // appears and lists it.
    set_addresses(
        &client,
        &squatter,
        serde_json::json!([{"type": "InternalIP", "address": "10.22.0.6"}]),
    )
    .await;
    create_node(&client, &owner, &["10.22.0.5"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, _t, body) = dial_settled(&handle, &edge_ca, &owner, "10.22.0.5").await;
    assert_eq!(status, 101, "{body}");
    assert!(
        handle
            .wait_for_session(&owner, Duration::from_secs(5))
            .await
    );
    assert_eq!(handle.tunnel_ip(&owner).as_deref(), Some("10.22.0.5"));
    // The squatter's tunnel was closed.
    let mut held = held.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while held.next_tunnel().await.is_some() {}
    })
    .await;
    assert!(end.is_ok(), "the squatter's tunnel stayed open");
    assert!(!handle.connected_nodes().contains(&squatter));
}

#[actix_rt::test]
async fn an_ip_several_nodes_listed_before_the_start_should_be_nobodys() {
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("cscontest").await;
    let (a, b) = (format!("a-{ns}"), format!("b-{ns}"));
    create_node(&client, &a, &["10.23.0.5"]).await;
    create_node(&client, &b, &["10.23.0.5"]).await;
    // cloudstream starts with both listings in place: no history tells them apart.
    let (handle, edge_ca, _bus, _client, _ns) = kube_stream("cscontest2").await;
    for node in [&a, &b] {
        let (status, tunnel, body) = dial_settled(&handle, &edge_ca, node, "10.23.0.5").await;
        assert_eq!(status, 403, "{node}: {body}");
        assert!(tunnel.is_none());
        assert!(body.contains("listed by several Nodes"), "{body}");
    }
    // Once one of them stops listing it, the other owns it.
    set_addresses(
        &client,
        &b,
        serde_json::json!([{"type": "InternalIP", "address": "10.23.0.6"}]),
    )
    .await;
    let mut last = String::new();
    for _ in 0..50 {
        let (status, _t, body) = dial_settled(&handle, &edge_ca, &a, "10.23.0.5").await;
        if status == 101 {
            return;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{a} never got its address: {last}");
}
