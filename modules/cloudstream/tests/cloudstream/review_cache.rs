//! The stream server's answer cache cannot be grown by its callers: a node name no Node could
//! have (from `X-Forwarded-Uri` or `Host`) is never reviewed or remembered, and one caller's
//! answers are bounded (`cacheEntriesPerUser`), so a caller flooding made-up node names
//! evicts its own answers and is asked about again, not remembered for ever.

use cloudstream::{StreamAuthorizationConfig, StreamAuthorizationMode};

use crate::authz::setup;

fn forwarded(node: &str) -> String {
    format!("X-Forwarded-Uri: /api/v1/nodes/{node}/proxy/metrics/x\r\n")
}

#[actix_rt::test]
async fn node_names_no_node_could_have_are_never_reviewed_one_by_one() {
    let env = setup(StreamAuthorizationConfig {
        mode: Some(StreamAuthorizationMode::Webhook),
        ..StreamAuthorizationConfig::default()
    })
    .await;
    let cert = env.stream_ca.user(&format!("mallory-{}", env.ns), None);
    let before = env.handle.counters().authz_reviews;
    for i in 0..40 {
        // 8 KiB names, each different: not DNS-1123 subdomains.
        let name = format!("{i:04}{}", "Z".repeat(8 << 10));
        let (status, _) = env.get_as(&cert, "/metrics", &forwarded(&name)).await;
        assert_eq!(status, 403, "refused as a request for every node");
    }
    let reviews = env.handle.counters().authz_reviews - before;
    assert!(
        reviews <= 1,
        "{reviews} reviews: made-up names are one question (the right on every node), asked once"
    );
}

#[actix_rt::test]
async fn one_caller_holds_at_most_its_share_of_remembered_answers() {
    let env = setup(StreamAuthorizationConfig {
        mode: Some(StreamAuthorizationMode::Webhook),
        cache_entries_per_user: 16,
        ..StreamAuthorizationConfig::default()
    })
    .await;
    let cert = env.stream_ca.user(&format!("mallory-{}", env.ns), None);
    let name = |i: usize| format!("made-up-{i}.{}", env.ns);
    let before = env.handle.counters().authz_reviews;
    for i in 0..40 {
        let (status, _) = env.get_as(&cert, "/metrics", &forwarded(&name(i))).await;
        assert_eq!(status, 403);
    }
    assert_eq!(env.handle.counters().authz_reviews - before, 40);
    // The newest answers are remembered ...
    let reviews = env.handle.counters().authz_reviews;
    env.get_as(&cert, "/metrics", &forwarded(&name(39))).await;
    assert_eq!(env.handle.counters().authz_reviews, reviews, "remembered");
    // ... the first ones were dropped for them: asked again.
    env.get_as(&cert, "/metrics", &forwarded(&name(0))).await;
    assert_eq!(
        env.handle.counters().authz_reviews,
        reviews + 1,
        "evicted: at most 16 answers kept for one caller"
    );
}
