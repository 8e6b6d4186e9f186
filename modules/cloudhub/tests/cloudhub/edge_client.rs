//! The Rust edge hub client against a real cloudhub: keepalive, auto-ACK, delivery to local
//! modules on an edge bus, sync requests answered through the cloud, reconnect.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use beehive::{Backoff, Bus, Content, Message};
use edge::hub::{EdgeHub, HubClient, HubClientConfig, HubEvent};

fn client_config(h: &Harness, node: &str) -> (HubClientConfig, Arc<rustls::ClientConfig>) {
    let cert = h.edge_cert(node);
    let mut c = HubClientConfig::new(node, h.ws.to_string());
    c.heartbeat = Duration::from_millis(200);
    c.backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(400),
    };
    (c, Arc::new(h.tls(Some(&cert))))
}

#[actix_rt::test]
async fn client_sends_keepalives_every_heartbeat() {
    let h = Harness::with(|c| c.keepalive_interval = 1).await;
    let (cfg, tls) = client_config(&h, "edge-1");
    let (client, _events) = HubClient::start(cfg, tls);
    h.wait_nodes(1).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Without keepalives the 1 s interval would have closed it.
    assert_eq!(h.hub.connected_nodes(), 1);
    assert!(h.hub.node_stats("edge-1").unwrap().received >= 10);
    assert_eq!(client.connects(), 1);
    client.stop();
}

#[actix_rt::test]
async fn client_reconnects_with_backoff_after_the_connection_drops() {
    let mut h = Harness::start().await;
    let (cfg, tls) = client_config(&h, "edge-1");
    let (client, mut events) = HubClient::start(cfg, tls);
    assert_eq!(recv_event(&mut events).await, HubEvent::Connected);
    client.drop_connection();
    assert!(matches!(
        recv_event(&mut events).await,
        HubEvent::Disconnected { .. }
    ));
    assert_eq!(recv_event(&mut events).await, HubEvent::Connected);
    assert_eq!(client.connects(), 2);
    // The hub saw connected, (maybe disconnected,) connected; edge-1 is registered once.
    h.wait_nodes(1).await;
    let first = h.next_event().await;
    assert_eq!(first.route.operation, "connected");
    client.stop();
}

#[actix_rt::test]
async fn client_retries_while_the_hub_refuses_and_gets_in_when_room_appears() {
    let h = Harness::with(|c| c.node_limit = 1).await;
    let _blocker = h.connect("blocker").await;
    h.wait_nodes(1).await;
    let (cfg, tls) = client_config(&h, "edge-1");
    let (client, mut events) = HubClient::start(cfg, tls);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!client.is_connected(), "503 while the limit is reached");
    drop(_blocker);
    assert_eq!(recv_event(&mut events).await, HubEvent::Connected);
    client.stop();
}

async fn recv_event(events: &mut tokio::sync::mpsc::Receiver<HubEvent>) -> HubEvent {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("an event")
        .expect("open")
}

#[actix_rt::test]
async fn edge_hub_module_delivers_by_group_acks_and_answers_sync_requests() {
    let mut h = Harness::start().await;
    let (cfg, tls) = client_config(&h, "edge-1");
    let edge_bus = Bus::new();
    let mut meta = edge_bus.register_inbox("metamanager", "meta", 64).unwrap();
    let mut twin = edge_bus.register_inbox("twin", "twin", 64).unwrap();
    edge_bus
        .register(EdgeHub::new(cfg, tls, edge_bus.endpoint("websocket")))
        .unwrap();
    edge_bus.start().unwrap();
    h.wait_nodes(1).await;

    // Downstream resource message → group meta, acknowledged automatically.
    h.downstream(pod("edge-1", "p", "u1", "4", "insert")).await;
    let got = recv(&mut meta).await;
    assert_eq!(got.route.resource, "default/pod/p");
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
    // Twin group → group twin.
    let membership = Message::new().with_route(
        "devicecontroller",
        "twin",
        "node/edge-1/membership",
        "update",
    );
    h.downstream(membership).await;
    assert_eq!(recv(&mut twin).await.route.resource, "membership");

    // A local module asks the cloud synchronously; the controller's answer comes back.
    let asker = edge_bus.endpoint("metamanager");
    let query = Message::new().with_route("metamanager", "meta", "default/configmap/cfg", "query");
    let qid = query.header.id.clone();
    let pending = actix_rt::spawn(async move {
        asker
            .send_sync("websocket", query, Duration::from_secs(5))
            .await
    });
    let req = h.next_controller_msg().await;
    assert_eq!(
        (req.header.id.as_str(), req.route.resource.as_str()),
        (qid.as_str(), "node/edge-1/default/configmap/cfg")
    );
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "uid": "cfg-uid", "resourceVersion": "12"}});
    h.downstream(
        req.response(Content::json(&cm).unwrap())
            .with_resource_version("12"),
    )
    .await;
    let answer = pending.await.unwrap().unwrap();
    assert_eq!(answer.header.parent_id, qid);
    assert_eq!(
        answer.content.parse::<serde_json::Value>().unwrap()["metadata"]["name"],
        "cfg"
    );
    // The object response is ACK-class: the client acknowledged it.
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 2)).await;
    assert!(
        meta.try_recv().is_none(),
        "a sync answer is not also delivered to the group"
    );
    edge_bus.shutdown().await;
}

#[actix_rt::test]
async fn client_refuses_a_hub_not_signed_by_its_ca_unless_told_insecure() {
    let mut h = Harness::start().await;
    let base = format!("https://127.0.0.1:{}", h.https.port());
    let mut certs = edge::hub::bootstrap(&base, &h.hub.token(), "edge-1")
        .await
        .unwrap();
    // The edge trusts another CA than the one that signed the hub's certificate.
    certs.ca_der = pki::CertificateAuthority::generate()
        .unwrap()
        .cert_der()
        .to_vec();
    let mut cfg = HubClientConfig::new("edge-1", h.ws.to_string());
    cfg.backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(200),
    };
    let (client, mut events) = HubClient::start(cfg.clone(), Arc::new(certs.client_tls().unwrap()));
    // Dials fail at the TLS handshake (logged as `invalid peer certificate`) and are retried;
    // no session ever comes up.
    let event = tokio::time::timeout(Duration::from_millis(1500), events.recv()).await;
    assert!(event.is_err(), "{event:?}");
    assert_eq!((client.connects(), h.hub.connected_nodes()), (0, 0));
    client.stop();

    let insecure = certs
        .client_tls_with(edge::ServerVerification::InsecureSkipVerify)
        .unwrap();
    let (client, mut events) = HubClient::start(cfg, Arc::new(insecure));
    assert_eq!(recv_event(&mut events).await, HubEvent::Connected);
    h.wait_nodes(1).await;
    assert_eq!(h.next_event().await.route.operation, "connected");
    client.stop();
}
