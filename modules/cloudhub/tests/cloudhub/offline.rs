//! Objects sent while their node has no session here still get their reliable-delivery record
//! (created at `"0"`), so the sync loop delivers them after the node reconnects. Regression: an
//! object created while a real edgecore was away never reached it (edgecore interop suite).

use crate::support::*;
use cloudhub::{SyncKey, SyncSpec};

fn key(uid: &str) -> SyncKey {
    SyncKey {
        node: "edge-away".into(),
        namespace: "default".into(),
        uid: uid.into(),
    }
}

#[actix_rt::test]
async fn an_object_sent_to_an_absent_node_gets_a_record_at_zero() {
    let h = Harness::start().await;
    h.downstream(pod("edge-away", "web", "uid-new", "17", "insert"))
        .await;
    // An object the edge already acknowledged keeps its version: the sync loop compares it.
    h.store.insert(
        key("uid-acked"),
        SyncSpec {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "old".into(),
        },
        "42",
    );
    h.downstream(pod("edge-away", "old", "uid-acked", "50", "update"))
        .await;
    // Deletes need no record: the sync loop finds the object gone by itself.
    h.downstream(pod("edge-away", "gone", "uid-gone", "60", "delete"))
        .await;
    wait_until(|| h.hub.stats().dropped_offline == 3).await;
    h.hub.flush_records().await;

    let (spec, rv) = h
        .store
        .record(&key("uid-new"))
        .expect("a record for the new pod");
    assert_eq!(
        (
            spec.api_version.as_str(),
            spec.kind.as_str(),
            spec.name.as_str(),
            rv.as_str()
        ),
        ("v1", "Pod", "web", "0")
    );
    assert_eq!(
        h.store.record(&key("uid-acked")).map(|r| r.1).as_deref(),
        Some("42")
    );
    assert_eq!(h.store.record(&key("uid-gone")), None);
    assert_eq!(
        h.hub.node_stats("edge-away"),
        None,
        "no session was made up"
    );
}

/// Several replicas: an object for a node another replica holds (its `cloudcore` annotation
/// names that replica) is that replica's to record; a node this replica held last, or that
/// no replica names, is recorded here. A node that connects here is held here whatever the
/// annotation says, and one that leaves is no longer.
#[actix_rt::test]
async fn only_nodes_no_other_replica_holds_get_a_record_here() {
    use kubeedge_api::replicas::Ownership;
    let ownership = Ownership::new("10.0.0.1");
    let h = Harness::with_options(
        |_| {},
        cloudhub::HubOptions {
            ownership: Some(ownership.clone()),
            ..Default::default()
        },
    )
    .await;
    let node_key = |node: &str, uid: &str| SyncKey {
        node: node.into(),
        namespace: "default".into(),
        uid: uid.into(),
    };
    ownership.observe("edge-b", Some("10.0.0.2"));
    ownership.observe("edge-a", Some("10.0.0.1"));
    h.downstream(pod("edge-b", "web", "uid-b", "7", "insert"))
        .await;
    h.downstream(pod("edge-a", "web", "uid-a", "7", "insert"))
        .await;
    h.downstream(pod("edge-none", "web", "uid-n", "7", "insert"))
        .await;
    wait_until(|| h.hub.stats().dropped_offline == 2 && h.hub.stats().held_elsewhere == 1).await;
    h.hub.flush_records().await;
    assert_eq!(h.store.record(&node_key("edge-b", "uid-b")), None);
    assert!(h.store.record(&node_key("edge-a", "uid-a")).is_some());
    assert!(h.store.record(&node_key("edge-none", "uid-n")).is_some());

    // edge-b moves here: held here from its first session on, and the move is reported once.
    let edge = h.connect("edge-b").await;
    wait_until(|| ownership.holds("edge-b")).await;
    assert!(!ownership.held_elsewhere("edge-b"));
    assert_eq!(ownership.take_over("edge-b").as_deref(), Some("10.0.0.2"));
    drop(edge);
    wait_until(|| !ownership.holds("edge-b")).await;
}
