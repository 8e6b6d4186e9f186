//! A watch is decided again whenever the edge repeats it, not taken as allowed because it
//! once was: after the pod that related a Secret to the node left, the same watch (same id,
//! as edgecore's watch sync repeats it) is refused, its listener dropped, and the Secret's
//! next rotation does not reach the edge.
//!
//! And a watch whose pod is deleted is decided again at once.
//!
//! Each test runs its own cloudcore: the first with re-reviews off
//! (`listenerReviewSeconds: 0`), so only the repeated watch can end the listener; the second
//! with the periodic review an hour away, so only the pod's deletion can end it in time.

use super::permits::own_cloudcore;
use super::*;

#[tokio::test]
async fn a_repeated_watch_is_decided_again() {
    test_tiers::require!(ApiServer);
    let dir = std::env::temp_dir().join(format!("cloudcore-rereview-{}", short_id()));
    let overrides = json!({"modules": {"dynamicController": {"listenerReviewSeconds": 0}}});
    let mut core = own_cloudcore(&dir, None, overrides).await;
    let s = Scenario::new_on(&core, "n10-again").await;
    let watch = s.watched_secret(Some(unique("w"))).await;

    s.api::<Pod>()
        .delete("web", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("admin deletes the pod");
    // An allowed answer is remembered 10 s; the Node authorizer's graph follows the delete
    // within moments.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let again = s.edge.apply(watch.application()).await;
    again.rejected(403);
    s.rotation_not_delivered().await;
    drop(s);
    core.stop().await;
}

/// The pod that related a Secret to the node is deleted: the node's watch of that Secret is
/// decided again within moments (not at the next periodic review, an hour away here), dropped,
/// and the Secret deleted at the edge; its next rotation does not reach the edge.
#[tokio::test]
async fn a_watch_is_decided_again_when_the_pod_that_allowed_it_is_deleted() {
    test_tiers::require!(ApiServer);
    let dir = std::env::temp_dir().join(format!("cloudcore-rereview-pod-{}", short_id()));
    let overrides = json!({"modules": {"dynamicController": {"listenerReviewSeconds": 3600}}});
    let mut core = own_cloudcore(&dir, None, overrides).await;
    let s = Scenario::new_on(&core, "n10-pod").await;
    s.watched_secret(None).await;
    let deletes = s.secret_deliveries(true);

    s.api::<Pod>()
        .delete("web", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("admin deletes the pod");
    // The listener is dropped and the Secret deleted at the edge, with no periodic review
    // and no repeated watch to do it.
    eventually(
        Duration::from_secs(10),
        "the Secret deleted at the edge",
        || async { (s.secret_deliveries(true) > deletes).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    s.rotation_not_delivered().await;
    drop(s);
    core.stop().await;
}
