//! What one edge can make cloudcore keep through the metaServer is bounded by configuration:
//! watch ids, options and bodies, the bytes of its listeners, the SubjectAccessReview answers
//! remembered for it, and the discovery of made-up API groups. A listener is decided again
//! while it lives: one the cluster stops allowing is dropped and its objects deleted at the
//! edge.

use super::metaserver::{Answer, application};
use super::*;

/// The value of a dynamiccontroller gauge; missing fails the test.
async fn gauge(name: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value(name, &[])
        .unwrap_or_else(|| panic!("{name} is not exported"))
}

fn watch_app(key: &str, id: &str, option: Value) -> Value {
    let mut app = application("watch", key, Some(option), None);
    app["ID"] = json!(id);
    app
}

impl Scenario {
    async fn watch(&self, id: &str, option: Value) -> Answer {
        let key = format!("/core/v1/services/{}/null", self.ns);
        self.edge.apply(watch_app(&key, id, option)).await
    }
}

#[tokio::test]
async fn a_watch_cannot_make_cloudcore_keep_large_ids_options_or_bodies() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n3-size").await;
    s.watch(&"i".repeat(1 << 10), json!({"watch": true}))
        .await
        .rejected(400);
    s.watch(
        &unique("w"),
        json!({"watch": true, "padding": "p".repeat(64 << 10)}),
    )
    .await
    .rejected(400);
    let mut with_body = watch_app(
        &format!("/core/v1/services/{}/null", s.ns),
        &unique("w"),
        json!({"watch": true}),
    );
    with_body["ReqBody"] =
        json!(base64::engine::general_purpose::STANDARD.encode(vec![b'b'; 1 << 20]));
    s.edge.apply(with_body).await.rejected(400);
    // A watch of edgecore's size is served.
    assert!(
        s.watch(&unique("w"), json!({"watch": true}))
            .await
            .approved()
            .is_null()
    );
}

#[tokio::test]
async fn a_nodes_watches_are_bounded_in_bytes() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n3-bytes").await;
    // Just under maxWatchBytes (8 KiB) each: the node's 512 KiB are spent within 40.
    let padded = json!({"watch": true, "padding": "p".repeat(7 << 10)});
    let mut accepted = 0;
    let mut refused = None;
    for _ in 0..60 {
        let answer = s.watch(&unique("w"), padded.clone()).await;
        match answer.status() {
            "Approved" => accepted += 1,
            _ => {
                refused = Some(answer);
                break;
            }
        }
    }
    let refused = refused.unwrap_or_else(|| panic!("{accepted} large watches all kept"));
    refused.rejected(429);
    let why = refused.app["Reason"].as_str().unwrap_or_default();
    assert!(why.contains("maxListenerBytesPerNode"), "{why}");
    assert!((20..40).contains(&accepted), "{accepted} kept");
    // Small watches are still kept for other nodes.
    let other = Scenario::new("n3-other").await;
    assert!(
        other
            .watch(&unique("w"), json!({"watch": true}))
            .await
            .approved()
            .is_null()
    );
}

#[tokio::test]
async fn made_up_api_groups_are_not_remembered() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n3-disc").await;
    let before = gauge("dynamiccontroller_discovery_entries").await;
    for i in 0..50 {
        let key = format!("/made-up-{i}-{}.example/v1/things/null/null", short_id());
        s.edge
            .apply(application("list", &key, Some(json!({})), None))
            .await
            .rejected(404);
    }
    let after = gauge("dynamiccontroller_discovery_entries").await;
    assert!(
        after - before < 5.0,
        "50 made-up groups grew discovery from {before} to {after}"
    );
}

#[tokio::test]
async fn one_node_holds_at_most_its_share_of_review_answers() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n4").await;
    let key = format!("/core/v1/services/{}/null", s.ns);
    let too_long = format!("a in ({})", vec!["v"; 3000].join(","));
    s.edge
        .apply(application(
            "list",
            &key,
            Some(json!({"labelSelector": too_long})),
            None,
        ))
        .await
        .rejected(400);
    let before = gauge("dynamiccontroller_review_cache_entries").await;
    let mut i = 0;
    while i < 400 {
        let answer = s
            .edge
            .apply(application(
                "list",
                &key,
                Some(json!({"labelSelector": format!("flood-{i}=x")})),
                None,
            ))
            .await;
        if answer.code() == 429 {
            // The node's request rate (nodeQPS): wait for tokens, as a patient attacker does.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        answer.approved();
        i += 1;
    }
    let after = gauge("dynamiccontroller_review_cache_entries").await;
    // 256 per node (reviewCacheEntriesPerNode); other tests' nodes add a few of their own.
    assert!(
        after - before <= 256.0 + 64.0,
        "one node grew the review cache from {before} to {after}"
    );
}

#[tokio::test]
async fn a_watch_ends_when_the_cluster_stops_allowing_it() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n10").await;
    s.watched_secret(None).await;
    // The pod leaves the node: the Node authorizer no longer relates the Secret to it, and
    // the edgecontroller stops sending it.
    s.api::<Pod>()
        .delete("web", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("admin deletes the pod");
    // Listeners are re-reviewed every 2 s here; an allowed answer is remembered 10 s.
    tokio::time::sleep(Duration::from_secs(15)).await;
    s.rotation_not_delivered().await;
}
