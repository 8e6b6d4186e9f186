//! Parity with NodeRestriction where the edgecontroller was looser: tokens need a pod
//! binding with `apiVersion` and `uid`, mirror pods exactly one controller reference to the
//! node's own Node (its uid), pod deletes a uid precondition; and a volume, attachment or
//! certificate request that does not exist gets the same `403` as one that is not the
//! node's, so an edge cannot learn which names exist.

use super::*;

#[tokio::test]
async fn a_token_needs_a_full_pod_binding() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n19-tok").await;
    service_account(&s, "app").await;
    let pod = s.own_pod("web", json!({"serviceAccountName": "app"})).await;
    let uid = pod.uid().unwrap_or_default();
    let resource = format!("{}/serviceaccounttoken/app", s.ns);
    for (what, binding) in [
        (
            "no uid",
            json!({"apiVersion": "v1", "kind": "Pod", "name": "web"}),
        ),
        (
            "no apiVersion",
            json!({"kind": "Pod", "name": "web", "uid": uid}),
        ),
    ] {
        let mut tr = token_request("app", &s.ns, None);
        tr["spec"]["boundObjectRef"] = binding;
        let count = counting("serviceAccountToken").await;
        let reply = s.edge.ask_json(&resource, "query", tr).await;
        reply.forbidden_raw(&s.node);
        assert!(reply.body.get("status").is_none(), "{what}: no token");
        count.one_more().await;
    }
}

#[tokio::test]
async fn a_mirror_pod_is_owned_by_exactly_the_nodes_own_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n19-mirror").await;
    let node = s.own_node().await;
    let unowned = {
        let mut p = mirror_pod(&s.ns, "unowned", &node, json!({}));
        p["metadata"]["ownerReferences"] = json!([]);
        p
    };
    let stale_uid = {
        let mut p = mirror_pod(&s.ns, "stale", &node, json!({}));
        p["metadata"]["ownerReferences"][0]["uid"] = json!("00000000-0000-4000-8000-000000000000");
        p
    };
    assert_pod_creates_refused(
        &s,
        vec![
            ("a mirror pod without an owner", unowned),
            (
                "a mirror pod owned by another incarnation of the Node",
                stale_uid,
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn objects_that_do_not_exist_are_refused_like_objects_of_other_nodes() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n19-oracle").await;
    for (kind, resource) in [
        ("queryPersistentVolume", "persistentvolume"),
        ("queryVolumeAttachment", "volumeattachment"),
        ("certificateSigningRequest", "certificatesigningrequest"),
    ] {
        let count = counting(kind).await;
        let reply = s
            .edge
            .ask(
                &format!("default/{resource}/{}", unique("nothing")),
                "query",
                Content::null(),
            )
            .await;
        reply.forbidden_raw(&s.node);
        count.one_more().await;
    }
}

#[tokio::test]
async fn a_legacy_node_status_cannot_write_the_replica_annotation() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n18-ext").await;
    let before = s.settled_node().await;
    let held_by = before
        .annotations()
        .get("cloudcore")
        .cloned()
        .expect("the replica holding the node annotated it");
    let mut status = legacy_node_status("Legacy");
    status["ExtendResources"] = json!({"cloudcore": [{"name": "10.9.9.9"}],
        "example.com/dongle": [{"name": "d0"}]});
    s.edge
        .ask_json(&format!("default/nodestatus/{}", s.node), "update", status)
        .await
        .ok();
    let node = s.own_node().await;
    assert_eq!(
        node.annotations().get("cloudcore"),
        Some(&held_by),
        "which replica holds the node is the replicas' to say"
    );
    assert!(
        node.annotations().contains_key("example.com/dongle"),
        "other extended resources are written"
    );
}
