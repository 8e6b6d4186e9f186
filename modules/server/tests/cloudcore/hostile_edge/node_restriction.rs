//! What NodeRestriction keeps a kubelet from writing through a status write, kept from an edge
//! too: its Node's restricted labels (and KubeEdge's role labels, once set), finalizers and
//! owners through `nodepatch`, and its pods' labels through `podpatch`. Each refusal is
//! answered, counted, and the API server read back unchanged; the status the patch carried
//! is not written either (a patch is refused whole).

use super::*;

/// Sends `patch` as edgecore's `nodepatch` of its own Node.
async fn node_patch(s: &Scenario, patch: Value) -> Reply {
    s.edge
        .ask(
            &format!("default/nodepatch/{}", s.node),
            "patch",
            Content::string(patch.to_string()),
        )
        .await
}

/// A status change every attempt carries: if the refused patch were applied, it would show.
fn with_status(mut patch: Value) -> Value {
    patch["status"] =
        json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Pwned"}]});
    patch
}

impl Scenario {
    /// The edge's own Node once cloudcore has written which replica holds it (the
    /// `cloudcore` annotation, written when the edge connected), so nothing but the edge's
    /// own request changes it afterwards.
    pub(super) async fn settled_node(&self) -> Node {
        eventually(WAIT, "cloudcore annotates the edge's Node", || async {
            let node = self.own_node().await;
            node.annotations().contains_key("cloudcore").then_some(node)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }
}

async fn node_patch_refused(s: &Scenario, patch: Value) {
    let nodes = s.all::<Node>();
    let before = s.settled_node().await;
    let count = counting("patchNode").await;
    let reply = node_patch(s, with_status(patch.clone())).await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&nodes, &before, &format!("nodepatch {patch}"))
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn a_node_status_patch_cannot_set_restricted_labels() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n2-labels").await;
    for labels in [
        json!({"node-restriction.kubernetes.io/secure": "true"}),
        json!({"node-role.kubernetes.io/control-plane": ""}),
        json!({"kubernetes.io/role": "master"}),
    ] {
        node_patch_refused(&s, json!({"metadata": {"labels": labels}})).await;
    }
}

#[tokio::test]
async fn a_node_status_patch_cannot_remove_or_change_the_edge_label() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n2-edge").await;
    assert_eq!(label(&s.own_node().await, EDGE_LABEL), Some(""));
    for value in [Value::Null, json!("no")] {
        node_patch_refused(&s, json!({"metadata": {"labels": {EDGE_LABEL: value}}})).await;
    }
    assert_eq!(label(&s.own_node().await, EDGE_LABEL), Some(""));
}

#[tokio::test]
async fn a_node_status_patch_cannot_add_finalizers_owners_or_directives() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n2-meta").await;
    for meta in [
        json!({"finalizers": ["example.com/keep"]}),
        json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "default",
            "uid": "6b9c1f0e-0000-4000-8000-000000000000"}]}),
        json!({"labels": {"$patch": "replace", "team": "a"}}),
        json!({"$patch": "replace", "labels": {}}),
    ] {
        node_patch_refused(&s, json!({"metadata": meta})).await;
    }
}

#[tokio::test]
async fn a_node_status_patch_may_still_set_labels_a_kubelet_may_set() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n2-ok").await;
    let reply = node_patch(
        &s,
        with_status(json!({"metadata": {"labels": {"example.com/rack": "r1",
            "kubernetes.io/hostname": s.node}}})),
    )
    .await;
    reply.object_resp_ok();
    let node = s.own_node().await;
    assert_eq!(label(&node, "example.com/rack"), Some("r1"));
    assert_eq!(label(&node, EDGE_LABEL), Some(""), "the edge label stays");
}

#[tokio::test]
async fn a_pod_status_patch_cannot_change_the_pods_labels() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n5").await;
    s.pod("web", &s.node, json!({})).await;
    let pods = s.api::<Pod>();
    let labelled = pods
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
        )
        .await
        .expect("admin labels the pod");
    s.edge
        .pushed_where("its pod, labelled", |m| {
            m.route.resource.ends_with(&format!("{}/pod/web", s.ns))
                && m.content.as_json().contains("\"app\":\"web\"")
        })
        .await;
    for labels in [
        json!({"app": "payments"}),
        json!({"app": null}),
        json!({"tier": "frontend"}),
    ] {
        let count = counting("patchPod").await;
        let patch = json!({"metadata": {"labels": labels}, "status": {"phase": "Failed", "reason": "Pwned"}});
        let reply = s
            .edge
            .ask(
                &format!("{}/podpatch/web", s.ns),
                "patch",
                Content::string(patch.to_string()),
            )
            .await;
        reply.forbidden_object_resp(&s.node);
        s.unchanged(&pods, &labelled, &format!("podpatch {labels}"))
            .await;
        count.one_more().await;
    }
    // The status alone, with the pod's uid as edged sends it, is written.
    let reply = s
        .edge
        .ask(
            &format!("{}/podpatch/web", s.ns),
            "patch",
            Content::string(
                json!({"metadata": {"uid": labelled.uid()}, "status": {"phase": "Running"}})
                    .to_string(),
            ),
        )
        .await;
    reply.object_resp_ok();
    let live = pods.get("web").await.expect("own pod");
    assert_eq!(label_of(&live, "app"), Some("web"));
    assert_eq!(
        live.status.and_then(|st| st.phase).as_deref(),
        Some("Running")
    );
}

/// A status patch is held to the pod it names by uid: one naming an earlier incarnation of
/// the pod (deleted and created again under the same name) changes nothing, and one naming no
/// uid is held to the pod cloudcore decided on (its uid is added, so the API server refuses it
/// for a pod created again under the name between the decision and the write).
#[tokio::test]
async fn a_pod_status_patch_is_held_to_one_pod_by_uid() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n19-uid").await;
    let pod = s.own_pod("web", json!({})).await;
    let pods = s.api::<Pod>();
    let stale = json!({"metadata": {"uid": "00000000-0000-0000-0000-000000000001"},
                       "status": {"phase": "Failed", "reason": "Stale"}});
    // Refused by cloudcore or by the API server, so not counted here; the turn keeps the
    // refusal off the count of a test counting this kind meanwhile.
    let turns = without_counting(&["patchPod"]).await;
    let reply = s
        .edge
        .ask(
            &format!("{}/podpatch/web", s.ns),
            "patch",
            Content::string(stale.to_string()),
        )
        .await;
    // Refused by cloudcore (the uid is not the one of the pod it decided on) or, should the
    // pod change in between, by the API server (a uid cannot change).
    let code = reply.code();
    assert!(
        matches!(code, Some(403 | 409 | 422)),
        "a patch for another incarnation is refused: {code:?}"
    );
    s.unchanged(&pods, &pod, "podpatch for another incarnation")
        .await;
    drop(turns);
    let reply = s
        .edge
        .ask(
            &format!("{}/podpatch/web", s.ns),
            "patch",
            Content::string(json!({"status": {"phase": "Running"}}).to_string()),
        )
        .await;
    reply.object_resp_ok();
    let live = pods.get("web").await.expect("own pod");
    assert_eq!(live.uid(), pod.uid());
    assert_eq!(
        live.status.and_then(|st| st.phase).as_deref(),
        Some("Running")
    );
}

fn label_of<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.labels().get(key).map(String::as_str)
}
