//! Objects sent while their node has no session here still get their reliable-delivery record
//! (spec §3.4 step 4), so the sync loop delivers them after the node reconnects. Regression: an
//! object created while a real edgecore was away never reached it (edgecore interop suite).

mod support;

use cloudhub::{SyncKey, SyncSpec};
use support::*;

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
