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

use super::metaserver::application;
use super::permits::own_cloudcore;
use super::*;

#[tokio::test]
async fn a_repeated_watch_is_decided_again() {
    test_tiers::require!(ApiServer);
    let (client, ns, node) = Scenario::names("n10-again").await;
    let dir = std::env::temp_dir().join(format!("cloudcore-rereview-{}", short_id()));
    let overrides = json!({"modules": {"dynamicController": {"listenerReviewSeconds": 0}}});
    let mut core = own_cloudcore(&dir, None, overrides).await;
    edge_node(&client, &node).await;
    let edge = Edge::connect_to(&core, &node).await;
    edge.pushed_where("its own Node", |m| {
        m.route.resource.ends_with(&format!("/node/{node}"))
    })
    .await;
    let s = Scenario {
        client,
        ns,
        node,
        edge,
    };
    secret(&s, "creds").await;
    s.own_pod(
        "web",
        json!({"volumes": [{"name": "s", "secret": {"secretName": "creds"}}]}),
    )
    .await;
    let key = format!("/core/v1/secrets/{}/creds", s.ns);
    let id = unique("w");
    let watch = || {
        let mut app = application("watch", &key, Some(json!({"watch": true})), None);
        app["ID"] = json!(id);
        app
    };
    eventually(WAIT, "the watch of the pod's Secret", || async {
        let a = s.edge.apply(watch()).await;
        (a.status() == "Approved").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    s.api::<Pod>()
        .delete("web", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("admin deletes the pod");
    // An allowed answer is remembered 10 s; the Node authorizer's graph follows the delete
    // within moments.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let again = s.edge.apply(watch()).await;
    again.rejected(403);

    let rotations = |s: &Scenario| {
        let resource = format!("{}/secret/creds", s.ns);
        s.edge
            .pushed
            .lock()
            .unwrap()
            .iter()
            // The watch's deliveries: the edgecontroller may still send the Secret for a
            // moment, until its own caches see the pod gone.
            .filter(|m| {
                m.route.source == "dynamiccontroller"
                    && m.route.resource == resource
                    && m.route.operation != "delete"
            })
            .count()
    };
    let before = rotations(&s);
    s.api::<Secret>()
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"k": "rotated"}})),
        )
        .await
        .expect("admin rotates the Secret");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        rotations(&s),
        before,
        "a rotated Secret reached an edge whose watch the cluster no longer allows"
    );
    drop(s);
    core.stop().await;
}

/// The pod that related a Secret to the node is deleted: the node's watch of that Secret is
/// decided again within moments (not at the next periodic review, an hour away here), dropped,
/// and the Secret deleted at the edge; its next rotation does not reach the edge.
#[tokio::test]
async fn a_watch_is_decided_again_when_the_pod_that_allowed_it_is_deleted() {
    test_tiers::require!(ApiServer);
    let (client, ns, node) = Scenario::names("n10-pod").await;
    let dir = std::env::temp_dir().join(format!("cloudcore-rereview-pod-{}", short_id()));
    let overrides = json!({"modules": {"dynamicController": {"listenerReviewSeconds": 3600}}});
    let mut core = own_cloudcore(&dir, None, overrides).await;
    edge_node(&client, &node).await;
    let edge = Edge::connect_to(&core, &node).await;
    edge.pushed_where("its own Node", |m| {
        m.route.resource.ends_with(&format!("/node/{node}"))
    })
    .await;
    let s = Scenario {
        client,
        ns,
        node,
        edge,
    };
    secret(&s, "creds").await;
    s.own_pod(
        "web",
        json!({"volumes": [{"name": "s", "secret": {"secretName": "creds"}}]}),
    )
    .await;
    let key = format!("/core/v1/secrets/{}/creds", s.ns);
    eventually(WAIT, "the watch of the pod's Secret", || async {
        let mut app = application("watch", &key, Some(json!({"watch": true})), None);
        app["ID"] = json!(unique("w"));
        let a = s.edge.apply(app).await;
        (a.status() == "Approved").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let resource = format!("{}/secret/creds", s.ns);
    let pushes = |s: &Scenario, delete: bool| {
        s.edge
            .pushed
            .lock()
            .unwrap()
            .iter()
            .filter(|m| {
                // The watch's deliveries only: the edgecontroller may still send the Secret
                // for a moment, until its own caches see the pod gone.
                m.route.source == "dynamiccontroller"
                    && m.route.resource == resource
                    && (m.route.operation == "delete") == delete
            })
            .count()
    };
    let deletes = pushes(&s, true);

    s.api::<Pod>()
        .delete("web", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("admin deletes the pod");
    // The listener is dropped and the Secret deleted at the edge, with no periodic review
    // and no repeated watch to do it.
    eventually(
        Duration::from_secs(10),
        "the Secret deleted at the edge",
        || async { (pushes(&s, true) > deletes).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let before = pushes(&s, false);
    s.api::<Secret>()
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"k": "rotated"}})),
        )
        .await
        .expect("admin rotates the Secret");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        pushes(&s, false),
        before,
        "a rotated Secret reached an edge whose watch the cluster no longer allows"
    );
    drop(s);
    core.stop().await;
}
