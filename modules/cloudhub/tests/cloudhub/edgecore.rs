//! Interop with an unmodified KubeEdge edgecore (v1.23 line; where the binary comes from:
//! CONTRIBUTING.md, "The real edgecore") run by
//! the `edgecore-interop` harness against this in-process hub: it bootstraps its certificate
//! from our certificate server with our token, connects to our WebSocket, keeps alive, receives
//! a downstream update and acknowledges it. The end-to-end suite with the whole cloudcore is
//! `modules/server/tests/edgecore/interop_edgecore.rs`.

use std::time::Duration;

use crate::support::*;
use beehive::{Content, Message};
use edgecore_interop::{EdgeConfig, EdgeHome, Edgecore, Serial};

const NODE: &str = "edge-node-1";

#[actix_rt::test]
async fn real_edgecore_bootstraps_connects_keeps_alive_and_acknowledges() {
    test_tiers::require!(Edgecore);
    // One edgecore at a time on this machine (its metaServer port is fixed).
    let _serial = Serial::acquire().unwrap();
    let mut h = Harness::start().await;
    let home = EdgeHome::new(NODE).unwrap();
    // Only the hub is under test here: no tunnel, no local metaServer port.
    let mut config = EdgeConfig::new(NODE, &h.hub.token(), h.https, h.ws);
    config.meta_server = None;
    home.write_config(&config).unwrap();
    let edge = Edgecore::start(&home).unwrap();
    let dump = || edge.log_tail(60);

    // Certificate bootstrap, then the WebSocket session.
    let ev = tokio::time::timeout(Duration::from_secs(60), h.controllers.recv())
        .await
        .unwrap_or_else(|_| panic!("edgecore did not connect; its log:\n{}", dump()))
        .unwrap();
    assert_eq!(
        (ev.route.resource.as_str(), ev.route.operation.as_str()),
        ("node/edge-node-1", "connected")
    );
    assert!(home.cert_file().exists());
    wait_until(|| h.hub.node_stats(NODE).is_some_and(|s| s.received >= 1)).await;

    // An ACK-class update is stored by its metamanager and acknowledged.
    let cm = Message::new()
        .with_route("edgecontroller", "resource", "node/edge-node-1/default/configmap/interop", "update")
        .with_resource_version("42")
        .with_content(
            Content::json(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "interop", "namespace": "default", "uid": "interop-uid", "resourceVersion": "42"},
                "data": {"k": "v"}
            }))
            .unwrap(),
        );
    h.downstream(cm).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while h.hub.node_stats(NODE).is_none_or(|s| s.acked != 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ACK from edgecore; its log:\n{}",
            dump()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.hub.flush_records().await;
    let key = cloudhub::SyncKey {
        node: NODE.into(),
        namespace: "default".into(),
        uid: "interop-uid".into(),
    };
    assert_eq!(h.store.record(&key).map(|r| r.1).as_deref(), Some("42"));
    assert_eq!(
        h.hub.node_stats(NODE).unwrap().retried,
        0,
        "acknowledged within the first 5 s"
    );
    // The object is in edgecore's own store.
    let stored = edgecore_interop::EdgeStore::new(&home.database())
        .get("default/configmap/interop")
        .unwrap()
        .expect("stored by edgecore's metamanager");
    assert_eq!(stored.value["data"]["k"], "v");

    // The Node was deleted and re-created under the same name while the edge was away: the
    // sync loop sends a `delete` for the earlier incarnation's record on every pass. The edge
    // must stay connected and keep being served.
    let stale_delete = || {
        Message::new().with_route(
            "edgecontroller",
            "resource",
            format!("node/{NODE}/null/node/{NODE}"),
            "delete",
        )
    };
    for _ in 0..3 {
        h.downstream(stale_delete()).await;
    }
    let cm = Message::new()
        .with_route("edgecontroller", "resource", "node/edge-node-1/default/configmap/interop", "update")
        .with_resource_version("43")
        .with_content(
            Content::json(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "interop", "namespace": "default", "uid": "interop-uid", "resourceVersion": "43"},
                "data": {"k": "v2"}
            }))
            .unwrap(),
        );
    h.downstream(cm).await;
    while h.hub.node_stats(NODE).is_none_or(|s| s.acked != 2) {
        assert!(
            tokio::time::Instant::now() < deadline + Duration::from_secs(30),
            "no ACK after the stale deletes; its log:\n{}",
            dump()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = h.hub.node_stats(NODE).unwrap();
    assert_eq!(
        s.drops.get(cloudhub::DropReason::StaleNodeDelete),
        3,
        "{s:?}"
    );
    assert_eq!(h.hub.nodes(), [NODE]);
    // No disconnection happened meanwhile (edgecore's own traffic may be in the inbox).
    for _ in 0..100 {
        match tokio::time::timeout(Duration::from_millis(300), h.controllers.recv()).await {
            Ok(Ok(m)) => assert_ne!(m.route.operation, "disconnected", "{m}"),
            _ => break,
        }
    }
}
