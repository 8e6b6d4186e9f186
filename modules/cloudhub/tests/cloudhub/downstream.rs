//! Downstream delivery through real sockets: trimming, classification, retries, ACKs and
//! ObjectSync records.

use std::time::Duration;

use crate::support::*;
use beehive::{Content, Message};
use cloudhub::{SyncKey, SyncSpec};

fn key(node: &str, ns: &str, uid: &str) -> SyncKey {
    SyncKey {
        node: node.into(),
        namespace: ns.into(),
        uid: uid.into(),
    }
}

#[actix_rt::test]
async fn downstream_message_arrives_trimmed_and_otherwise_identical() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let msg = pod("edge-1", "nginx", "u1", "48213", "update");
    h.downstream(msg.clone()).await;
    let text = e.recv_text().await;
    assert!(text.ends_with("}\n"), "JSON followed by one newline");
    let got = kubeedge_wire::hub::decode_json(text.as_bytes()).unwrap();
    assert_eq!(got.route.resource, "default/pod/nginx");
    assert_eq!(got.header, msg.header);
    assert_eq!(
        (
            got.route.source.as_str(),
            got.route.group.as_str(),
            got.route.operation.as_str()
        ),
        ("edgecontroller", "resource", "update")
    );
    assert_eq!(
        got.content.as_json(),
        msg.content.as_json(),
        "content byte-identical"
    );
    // Test vector: the exact wire form of the downstream pod update.
    let mut expected = msg.clone();
    expected.route.resource = "default/pod/nginx".into();
    assert_eq!(text.as_bytes(), kubeedge_wire::hub::encode_json(&expected));
    assert!(text.starts_with(&format!(
        r#"{{"header":{{"msg_id":"{}","timestamp":{},"resourceversion":"48213"}},"route":{{"source":"edgecontroller","group":"resource","operation":"update","resource":"default/pod/nginx"}},"content":{{"apiVersion":"v1","kind":"Pod""#,
        msg.header.id, msg.header.timestamp
    )));
}

#[actix_rt::test]
async fn messages_without_a_node_or_for_absent_nodes_go_nowhere() {
    let h = Harness::start().await;
    let mut e1 = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let mut bad = pod("edge-1", "nginx", "u1", "5", "update");
    bad.route.resource = "default/pod/nginx".into();
    h.downstream(bad).await;
    h.downstream(pod("edge-2", "nginx", "u2", "5", "update"))
        .await;
    assert!(e1.recv_within(Duration::from_millis(500)).await.is_none());
    let s = h.hub.stats();
    assert_eq!((s.dropped_no_node, s.dropped_offline), (1, 1));
}

#[actix_rt::test]
async fn unacknowledged_update_is_rewritten_every_5s_five_times_then_backs_off() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let msg = pod("edge-1", "p", "u1", "10", "update");
    h.downstream(msg.clone()).await;
    let mut times = Vec::new();
    let start = tokio::time::Instant::now();
    for _ in 0..5 {
        e.keepalive().await;
        let m = e.recv_for(Duration::from_secs(7)).await;
        assert_eq!(m.header.id, msg.header.id, "same msg_id on every write");
        times.push(start.elapsed());
    }
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_millis(4800) && gap <= Duration::from_millis(5600),
            "gap {gap:?}"
        );
    }
    // Then a back-off re-queue (5 ms) starts a new round: the message comes again.
    e.keepalive().await;
    let again = e.recv_for(Duration::from_secs(7)).await;
    assert_eq!(again.header.id, msg.header.id);
    let stats = h.hub.node_stats("edge-1").unwrap();
    assert_eq!(stats.sent, 1);
    assert!(stats.retried >= 5, "{stats:?}");
}

#[actix_rt::test]
async fn ack_stops_retransmission_and_records_the_version() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let msg = pod("edge-1", "p", "u1", "48213", "update");
    h.downstream(msg.clone()).await;
    let got = e.recv().await;
    // The edge's ACK keeps the original route (source edgecontroller).
    let ack = kubeedge_wire::hub::ack_for(&got);
    assert_eq!(ack.route.source, "edgecontroller");
    e.send(&ack).await;
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
    // The session counts the ACK before it hands the record's write to the persister, so a
    // flush right after the count may find nothing queued yet: wait for the record itself.
    wait_until(|| {
        h.store
            .record(&key("edge-1", "default", "u1"))
            .is_some_and(|(_, rv)| rv == "48213")
    })
    .await;
    h.hub.flush_records().await;
    let (spec, rv) = h.store.record(&key("edge-1", "default", "u1")).unwrap();
    assert_eq!(rv, "48213");
    assert_eq!(
        spec,
        SyncSpec {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into()
        }
    );
    assert!(
        e.recv_within(Duration::from_millis(5600)).await.is_none(),
        "no retransmission after the ACK"
    );
}

#[actix_rt::test]
async fn cluster_scoped_objects_get_a_cluster_record() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let pv = Message::new()
        .with_route("edgecontroller", "resource", "node/edge-1/null/persistentvolume/pv1", "update")
        .with_resource_version("7")
        .with_content(Content::json(&serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1", "uid": "pvu"}})).unwrap());
    h.downstream(pv).await;
    let got = e.recv().await;
    assert_eq!(got.route.resource, "null/persistentvolume/pv1");
    e.ack(&got).await;
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
    h.hub.flush_records().await;
    let k = key("edge-1", "null", "pvu");
    assert!(k.is_cluster());
    assert_eq!(h.store.record(&k).unwrap().1, "7");
}

#[actix_rt::test]
async fn acknowledging_a_delete_removes_the_record() {
    let h = Harness::start().await;
    h.store.insert(
        key("edge-1", "default", "u1"),
        SyncSpec {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into(),
        },
        "10",
    );
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "p", "u1", "11", "delete")).await;
    let got = e.recv().await;
    assert_eq!(got.route.operation, "delete");
    e.ack(&got).await;
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
    h.hub.flush_records().await;
    assert!(h.store.record(&key("edge-1", "default", "u1")).is_none());
}

#[actix_rt::test]
async fn update_not_newer_than_the_record_is_never_written() {
    let h = Harness::start().await;
    h.store
        .insert(key("edge-1", "default", "u1"), SyncSpec::default(), "20");
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "p", "u1", "20", "update")).await;
    h.downstream(pod("edge-1", "p", "u1", "19", "update")).await;
    assert!(e.recv_within(Duration::from_millis(500)).await.is_none());
    h.downstream(pod("edge-1", "p", "u1", "21", "update")).await;
    assert_eq!(e.recv().await.header.resource_version, "21");
}

#[actix_rt::test]
async fn first_update_for_a_new_uid_creates_the_record_at_zero_and_is_delivered() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "p", "new-uid", "5", "insert"))
        .await;
    assert_eq!(e.recv().await.header.resource_version, "5");
    let (spec, rv) = h
        .store
        .record(&key("edge-1", "default", "new-uid"))
        .unwrap();
    assert_eq!(rv, "0");
    assert_eq!(spec.kind, "Pod");
}

#[actix_rt::test]
async fn ack_class_message_without_resource_version_is_dropped_unless_delete() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "p", "u1", "", "update")).await;
    assert!(e.recv_within(Duration::from_millis(500)).await.is_none());
    let deleting = Message::new()
        .with_route("edgecontroller", "resource", "node/edge-1/default/pod/q", "update")
        .with_content(Content::json(&serde_json::json!({"kind": "Pod", "metadata": {"name": "q", "uid": "u2", "deletionTimestamp": "2026-01-01T00:00:00Z"}})).unwrap());
    h.downstream(deleting).await;
    assert_eq!(e.recv().await.route.resource, "default/pod/q");
}

#[actix_rt::test]
async fn updates_for_one_uid_coalesce_while_the_window_is_busy() {
    let h = Harness::with(|c| c.ack_window = 1).await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    // Another object's unacknowledged message blocks the window of 1.
    let blocker = pod("edge-1", "other", "u0", "", "delete");
    h.downstream(blocker.clone()).await;
    assert_eq!(e.recv().await.header.id, blocker.header.id);
    h.downstream(pod("edge-1", "p", "u1", "10", "update")).await;
    h.downstream(pod("edge-1", "p", "u1", "11", "update")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    e.ack(&blocker).await;
    let got = e.recv().await;
    assert_eq!(got.header.resource_version, "11");
    e.ack(&got).await;
    assert!(
        e.recv_within(Duration::from_millis(500)).await.is_none(),
        "RV 10 is never written"
    );
}

#[actix_rt::test]
async fn no_ack_messages_are_written_once_and_never_recorded() {
    let h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let ec = "edgecontroller";
    let msgs = vec![
        Message::new().with_route(ec, "resource", "node/edge-1/default/podlist", "update"),
        Message::new().with_route(
            "devicecontroller",
            "twin",
            "node/edge-1/membership",
            "update",
        ),
        Message::new().with_route(
            ec,
            "resource",
            "node/edge-1/ns/serviceaccounttoken/sa",
            "response",
        ),
        Message::new().with_route(
            "cloudhub",
            "resource",
            "node/edge-1/ns/volume/v",
            "createvolume",
        ),
        Message::new().with_route("router", "user", "node/edge-1/r/x", "insert"),
        Message::new().with_route(
            "taskmanager",
            "taskmanager",
            "node/edge-1/task/t",
            "upgrade",
        ),
        Message::new().with_route(
            ec,
            "resource",
            "node/edge-1/kube-node-lease/lease/edge-1",
            "response",
        ),
        Message::new()
            .with_route(
                ec,
                "resource",
                "node/edge-1/default/configmap/c",
                "response",
            )
            .with_content(Content::string("OK")),
        Message::new()
            .with_route(
                ec,
                "resource",
                "node/edge-1/default/configmap/c",
                "response",
            )
            .with_content(
                Content::json(&kubeedge_api::status::StatusError::not_found(
                    "configmap",
                    "c",
                ))
                .unwrap(),
            ),
    ];
    for m in &msgs {
        h.downstream(m.clone()).await;
    }
    for m in &msgs {
        assert_eq!(e.recv().await.header.id, m.header.id);
    }
    assert!(
        e.recv_within(Duration::from_millis(5600)).await.is_none(),
        "written exactly once"
    );
    assert!(h.store.records().is_empty());
}

fn node_delete(node: &str) -> Message {
    Message::new().with_route(
        "edgecontroller",
        "resource",
        format!("node/{node}/null/node/{node}"),
        "delete",
    )
}

#[actix_rt::test]
async fn a_node_delete_for_a_node_not_deleted_is_dropped_and_the_session_stays() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    assert_eq!(h.next_event().await.route.operation, "connected");
    // What the sync loop sends for a record of an earlier incarnation of the node, every
    // pass: it must neither be written nor cut the edge off (or it would never stay up).
    for _ in 0..3 {
        h.downstream(node_delete("edge-1")).await;
    }
    let after = pod("edge-1", "p", "u1", "", "delete");
    h.downstream(after.clone()).await;
    assert_eq!(
        e.recv().await.header.id,
        after.header.id,
        "the next message arrives; the deletes were not written"
    );
    let s = h.hub.node_stats("edge-1").unwrap();
    assert_eq!(s.drops.get(cloudhub::DropReason::StaleNodeDelete), 3);
    assert_eq!(
        h.hub
            .stats()
            .drops
            .get(cloudhub::DropReason::StaleNodeDelete),
        3
    );
    assert_eq!(h.hub.nodes(), ["edge-1"]);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), h.next_event())
            .await
            .is_err(),
        "no disconnected event"
    );

    // A real deletion (the Node watcher, or the composer without Kubernetes) still closes it.
    h.hub.revoke_node("edge-1").await;
    let ended = e.closed_within(Duration::from_secs(3)).await.unwrap();
    assert!(
        ended.contains("Policy") || ended.contains("1008"),
        "{ended}"
    );
    let ev = h.next_event().await;
    assert_eq!(
        (ev.route.resource.as_str(), ev.route.operation.as_str()),
        ("node/edge-1", "disconnected")
    );
}

#[actix_rt::test]
async fn an_object_refused_by_a_full_intake_queue_keeps_a_record_for_the_sync_loop() {
    // 16 objects fill the node's queue (nothing is acknowledged); 4 more are refused.
    let h = Harness::with(|c| {
        c.node_queue_size = 16;
        c.ack_window = 1;
    })
    .await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    for i in 0..20 {
        h.downstream(pod(
            "edge-1",
            &format!("p{i}"),
            &format!("u{i}"),
            "7",
            "insert",
        ))
        .await;
    }
    let full = |h: &Harness| {
        h.hub
            .node_stats("edge-1")
            .map_or(0, |s| s.drops.get(cloudhub::DropReason::QueueFull))
    };
    wait_until(|| full(&h) == 4).await;
    h.hub.flush_records().await;
    // The refused objects' records are written through the hub's record queue (flushed
    // above); the queued objects' records are created by their first-sight lookups, which run
    // beside the intake and may still be under way when the last refusal is counted.
    let record = |i: usize| h.store.record(&key("edge-1", "default", &format!("u{i}")));
    wait_until(|| (0..20).all(|i| record(i).is_some())).await;
    for i in 0..20 {
        let (spec, rv) = h
            .store
            .record(&key("edge-1", "default", &format!("u{i}")))
            .unwrap_or_else(|| panic!("no record for u{i}"));
        assert_eq!(
            (spec.name.as_str(), rv.as_str()),
            (format!("p{i}").as_str(), "0")
        );
    }
    let s = h.hub.stats();
    assert_eq!(s.drops.get(cloudhub::DropReason::QueueFull), 4);
    assert_eq!(h.hub.node_stats("edge-1").unwrap().dropped, 4);

    // The edge works through what was queued, one at a time.
    let mut got = std::collections::BTreeSet::new();
    while got.len() < 16 {
        let m = e.recv().await;
        e.ack(&m).await;
        got.insert(m.route.resource.to_string());
    }
    // The sync loop finds the refused objects' records at "0", below the objects' version,
    // and sends them again: now they are delivered, and their records catch up.
    for i in 16..20 {
        h.downstream(pod(
            "edge-1",
            &format!("p{i}"),
            &format!("u{i}"),
            "7",
            "update",
        ))
        .await;
    }
    while got.len() < 20 {
        let m = e.recv().await;
        e.ack(&m).await;
        got.insert(m.route.resource.to_string());
    }
    let want: std::collections::BTreeSet<String> =
        (0..20).map(|i| format!("default/pod/p{i}")).collect();
    assert_eq!(got, want);
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 20)).await;
    h.hub.flush_records().await;
    for i in 16..20 {
        let (_, rv) = h
            .store
            .record(&key("edge-1", "default", &format!("u{i}")))
            .unwrap();
        assert_eq!(rv, "7", "u{i}");
    }
    assert_eq!(
        h.hub.node_stats("edge-1").unwrap().dropped,
        4,
        "nothing more"
    );
}

#[actix_rt::test]
async fn a_replaced_session_counts_what_it_left_and_its_objects_keep_their_records() {
    let h = Harness::with(|c| {
        c.no_ack_burst = 1;
        c.no_ack_rate = 1;
        c.ack_window = 1;
    })
    .await;
    let mut first = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    // Four no-ACK messages: one is written at once, the others wait for the pacing (1/s).
    for i in 0..4 {
        h.downstream(Message::new().with_route(
            "edgecontroller",
            "resource",
            format!("node/edge-1/default/podlist/l{i}"),
            "update",
        ))
        .await;
    }
    // Two objects through a window of one: `a` is written (and never acknowledged), `b`
    // waits behind it.
    let a = pod("edge-1", "a", "ua", "5", "update");
    let b = pod("edge-1", "b", "ub", "6", "update");
    h.downstream(a.clone()).await;
    h.downstream(b.clone()).await;
    loop {
        let m = first.recv().await;
        if m.route.resource.starts_with("default/pod/") {
            assert_eq!(m.header.id, a.header.id);
            break;
        }
    }
    wait_until(|| h.store.record(&key("edge-1", "default", "ub")).is_some()).await;

    let _second = h.connect("edge-1").await;
    let stats = || h.hub.node_stats("edge-1").unwrap();
    wait_until(|| stats().drops.get(cloudhub::DropReason::Replaced) > 0).await;
    // Every message was either written (sent) or left behind unwritten (`replaced`): the
    // no-ACK messages the pacing held back, and `b`. `a`, written but unacknowledged, is not
    // a drop: the edge may have it.
    let s = stats();
    let replaced = s.drops.get(cloudhub::DropReason::Replaced);
    assert_eq!(replaced + s.sent, 6, "{s:?}");
    assert!(replaced >= 2, "{s:?}");
    assert_eq!(s.dropped, replaced, "no other reason: {s:?}");
    assert_eq!(
        h.hub.stats().drops.get(cloudhub::DropReason::Replaced),
        replaced
    );
    h.hub.flush_records().await;
    for uid in ["ua", "ub"] {
        let (_, rv) = h.store.record(&key("edge-1", "default", uid)).unwrap();
        assert_eq!(rv, "0", "the sync loop will send {uid} to the new session");
    }
}

#[actix_rt::test]
async fn a_window_pipelines_many_objects_instead_of_one_at_a_time() {
    let h = Harness::with(|c| c.ack_window = 8).await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    for i in 0..8 {
        h.downstream(pod(
            "edge-1",
            &format!("p{i}"),
            &format!("u{i}"),
            "",
            "delete",
        ))
        .await;
    }
    // All 8 arrive without any ACK (upstream: one, then a 5 s wait).
    for _ in 0..8 {
        tokio::time::timeout(Duration::from_secs(1), e.recv())
            .await
            .unwrap();
    }
}

#[actix_rt::test]
async fn non_numeric_versions_never_crash_and_are_delivered() {
    let h = Harness::start().await;
    h.store
        .insert(key("edge-1", "default", "u1"), SyncSpec::default(), "abc");
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "p", "u1", "xyz", "update"))
        .await;
    assert_eq!(e.recv().await.header.resource_version, "xyz");
    // Empty status counts as "0" (KubeEdge drops the object's messages forever).
    h.store
        .insert(key("edge-1", "default", "u2"), SyncSpec::default(), "");
    h.downstream(pod("edge-1", "q", "u2", "3", "update")).await;
    assert_eq!(e.recv().await.header.resource_version, "3");
}
