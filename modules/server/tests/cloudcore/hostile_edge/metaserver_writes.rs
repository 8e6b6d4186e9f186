//! Writes through the metaServer meet the rules the cluster itself lacks, the ones the
//! edgecontroller applies to the same writes from edged: Devices are the devicecontroller's
//! (even where RBAC lets nodes write DeviceStatuses), events only about the node and its pods,
//! certificate requests only for its own name, tokens only for audiences its pod declares, and
//! never the `cloudcore` annotation or finalizers on its Node. And watch events cost no
//! ObjectSync records.

use super::metaserver::application;
use super::*;

/// A metaServer create of `body` under `key` (with `subresource`).
fn create_app(key: &str, subresource: &str, body: Value) -> Value {
    let mut app = application(
        "create",
        key,
        Some(json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"})),
        Some(body),
    );
    app["Subresource"] = json!(subresource);
    app
}

/// A metaServer merge patch of `name` under `key`.
fn patch_app(key: &str, name: &str, patch: Value) -> Value {
    let info = json!({
        "Name": name,
        "PatchType": "application/merge-patch+json",
        "Data": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
        "Options": {"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1"},
        "Subresources": [""]
    });
    application("patch", key, Some(info), None)
}

/// Lets group `system:nodes` patch DeviceStatuses in the test namespace, as operators were
/// once told to for impersonation.
async fn let_nodes_patch_device_statuses(s: &Scenario) {
    let name = unique("nodes-devices");
    let role: k8s_openapi::api::rbac::v1::Role = from(json!({
        "metadata": {"name": name, "namespace": s.ns},
        "rules": [{"apiGroups": ["devices.kubeedge.io"], "resources": ["devicestatuses", "devices"],
            "verbs": ["get", "patch", "update"]}]
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &role).await;
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = from(json!({
        "metadata": {"name": name, "namespace": s.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &binding).await;
}

#[tokio::test]
async fn device_statuses_cannot_be_written_through_the_metaserver_whatever_rbac_says() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n12").await;
    let_nodes_patch_device_statuses(&s).await;
    let other = s.other_node().await;
    let theirs = device(&s, "theirs", &other).await;
    let mine = device(&s, "mine", &s.node).await;
    let statuses = s.api::<DeviceStatus>();
    let forged = json!({"status": {"twins": [{"propertyName": "temp",
        "reported": {"value": "99", "metadata": {"timestamp": "1"}}}]}});
    // RBAC bindings reach the authorizer a moment after they are made: give them time, so a
    // refusal is cloudcore's and not the API server's.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in ["theirs", "mine"] {
        let key = format!(
            "/devices.kubeedge.io/v1beta1/devicestatuses/{}/{name}",
            s.ns
        );
        let answer = s.edge.apply(patch_app(&key, name, forged.clone())).await;
        answer.rejected(403);
        let why = answer.app["Reason"].as_str().unwrap_or_default();
        assert!(why.contains("devicecontroller"), "{why}");
    }
    s.unchanged(&statuses, &theirs, "another node's DeviceStatus")
        .await;
    s.unchanged(
        &statuses,
        &mine,
        "its own DeviceStatus, through the metaServer",
    )
    .await;
}

#[tokio::test]
async fn metaserver_events_only_about_the_node_and_its_pods() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n18-ev").await;
    let other = s.other_node().await;
    s.pod("theirs", &other, json!({})).await;
    let key = format!("/core/v1/events/{}/null", s.ns);
    let event = |name: &str, kind: &str, about: &str| {
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": s.ns},
            "involvedObject": {"kind": kind, "name": about,
                "namespace": if kind == "Pod" { s.ns.as_str() } else { "" }},
            "reason": "Pwned", "message": "forged", "type": "Warning"})
    };
    let events = s.api::<Event>();
    for (name, kind, about) in [
        ("other-node.1", "Node", other.as_str()),
        ("their-pod.1", "Pod", "theirs"),
    ] {
        s.edge
            .apply(create_app(&key, "", event(name, kind, about)))
            .await
            .rejected(403);
        s.absent(&events, name, "an event about another node's object")
            .await;
    }
    // Its own Node's event, where Node events live.
    let own = format!("{}.{}", s.node, short_id());
    let mut mine = event(&own, "Node", &s.node);
    mine["metadata"]["namespace"] = json!("default");
    s.edge
        .apply(create_app("/core/v1/events/default/null", "", mine))
        .await
        .approved();
    let defaults: Api<Event> = Api::namespaced(s.client.clone(), "default");
    assert!(
        s.get(&defaults, &own).await.is_some(),
        "its own event written"
    );
}

#[tokio::test]
async fn metaserver_certificate_requests_only_for_its_own_name() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n18-csr").await;
    let key = "/certificates.k8s.io/v1/certificatesigningrequests/null/null";
    let name = unique("csr");
    s.edge
        .apply(create_app(key, "", csr(&name, &unique("victim"))))
        .await
        .rejected(403);
    s.absent(
        &s.all::<CertificateSigningRequest>(),
        &name,
        "a CSR for another node",
    )
    .await;
}

#[tokio::test]
async fn metaserver_tokens_only_for_audiences_the_pod_declares() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n18-tok").await;
    service_account(&s, "runner").await;
    let pod = s
        .own_pod("web", json!({"serviceAccountName": "runner"}))
        .await;
    let mut tr = token_request("runner", &s.ns, Some(("web", &pod.uid().unwrap())));
    tr["spec"]["audiences"] = json!(["vault.example.com"]);
    let key = format!("/core/v1/serviceaccounts/{}/runner", s.ns);
    let answer = s.edge.apply(create_app(&key, "token", tr)).await;
    answer.rejected(403);
    assert!(answer.app["RespBody"].is_null(), "no token: {}", answer.app);
}

#[tokio::test]
async fn metaserver_writes_never_touch_the_replica_annotation_or_finalizers() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n18-node").await;
    let nodes = s.all::<Node>();
    let key = format!("/core/v1/nodes/null/{}", s.node);
    for patch in [
        json!({"metadata": {"annotations": {"cloudcore": "10.9.9.9"}}}),
        json!({"metadata": {"finalizers": ["example.com/keep"]}}),
    ] {
        let before = s.settled_node().await;
        s.edge
            .apply(patch_app(&key, &s.node, patch.clone()))
            .await
            .rejected(403);
        s.unchanged(&nodes, &before, &format!("metaServer patch {patch}"))
            .await;
    }
}
