//! Kubernetes → edge against a real API server (docs/controllers.md), location cache
//! pruning and recreated objects included.

use crate::support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

#[actix_rt::test]
async fn a_pod_bound_to_an_edge_node_yields_exactly_one_insert() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let pod = pod(&env.client, &ns, "web", &e1).await;
    let resource = format!("node/{e1}/{ns}/pod/web");
    let m = env
        .expect("pod insert", is(resource.clone(), "insert"))
        .await;
    assert_eq!(
        (m.route.source.as_str(), m.route.group.as_str()),
        ("edgecontroller", "resource")
    );
    assert_eq!(rv(&m), pod.resource_version().unwrap());
    assert!(m.header.parent_id.is_empty(), "a push has no parent id");
    let c = body(&m);
    assert_eq!(
        (c["apiVersion"].as_str(), c["kind"].as_str()),
        (Some("v1"), Some("Pod"))
    );
    assert_eq!(c["metadata"]["uid"].as_str(), pod.uid().as_deref());
    assert_eq!(
        env.settle(at(resource)).await.len(),
        1,
        "exactly one message"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn pods_of_nodes_without_the_exact_edge_label_are_not_sent() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let ns = k8s_testenv::namespace("ec").await;
    let (plain, labelled_true, e1) = (unique("plain"), unique("edgetrue"), unique("e1"));
    node_with_labels(&env.client, &plain, &[]).await;
    node_with_labels(
        &env.client,
        &labelled_true,
        &[("node-role.kubernetes.io/edge", "true")],
    )
    .await;
    edge_node(&env.client, &e1).await;
    pod(&env.client, &ns, "a", &plain).await;
    pod(&env.client, &ns, "b", &labelled_true).await;
    // A pod on a real edge node afterwards proves the controller was processing pods.
    pod(&env.client, &ns, "c", &e1).await;
    env.expect(
        "pod on the edge node",
        is(format!("node/{e1}/{ns}/pod/c"), "insert"),
    )
    .await;
    assert!(env.settle(for_node(&plain)).await.is_empty());
    assert!(
        env.edge.matching(for_node(&labelled_true)).is_empty(),
        "edge=true is not an edge node"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn status_only_changes_send_no_pod_update_but_label_changes_do() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    pod(&env.client, &ns, "web", &e1).await;
    let resource = format!("node/{e1}/{ns}/pod/web");
    env.expect("insert", is(resource.clone(), "insert")).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(
        "web",
        &PatchParams::apply("kubelet").force(),
        &Patch::Apply(json!({
        "apiVersion": "v1", "kind": "Pod", "status": status["status"]})),
    )
    .await
    .unwrap();
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    let labelled = pods
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
        )
        .await
        .unwrap();
    let update = env
        .expect("label update", is(resource.clone(), "update"))
        .await;
    assert_eq!(body(&update)["metadata"]["labels"]["tier"], "web");
    assert_eq!(rv(&update), labelled.resource_version().unwrap());
    let all = env.settle(at(resource)).await;
    let ops: Vec<_> = all.iter().map(|m| m.route.operation.as_str()).collect();
    assert_eq!(
        ops,
        ["insert", "update"],
        "status writes produced no update"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn graceful_delete_sends_an_update_then_a_delete_with_the_uid() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let created = pod(&env.client, &ns, "web", &e1).await;
    let resource = format!("node/{e1}/{ns}/pod/web");
    env.expect("insert", is(resource.clone(), "insert")).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    pods.delete("web", &DeleteParams::default().grace_period(30))
        .await
        .unwrap();
    let update = env
        .expect("deletion update", is(resource.clone(), "update"))
        .await;
    assert!(body(&update)["metadata"]["deletionTimestamp"].is_string());
    force_delete_pod(&env.client, &ns, "web").await;
    let delete = env.expect("delete", is(resource.clone(), "delete")).await;
    assert_eq!(
        body(&delete)["metadata"]["uid"].as_str(),
        created.uid().as_deref()
    );
    env.stop().await;
}

#[actix_rt::test]
async fn a_pod_already_terminating_at_start_is_announced_as_update() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&client, &e1).await;
    pod(&client, &ns, "old", &e1).await;
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("old", &DeleteParams::default().grace_period(300))
        .await
        .unwrap();
    let env = start().await;
    let resource = format!("node/{e1}/{ns}/pod/old");
    let m = env.expect("startup message", at(resource.clone())).await;
    assert_eq!(m.route.operation, "update");
    assert!(body(&m)["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(env.settle(at(resource)).await.len(), 1);
    env.stop().await;
}

#[actix_rt::test]
async fn a_mounted_configmap_update_reaches_its_node_once() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    configmap(&env.client, &ns, "cfg", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "web", &e1, mounting_configmap("cfg")).await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    let updated = update_configmap(&env.client, &ns, "cfg", "a", "2").await;
    let resource = format!("node/{e1}/{ns}/configmap/cfg");
    let m = env
        .expect("configmap update", is(resource.clone(), "update"))
        .await;
    let c = body(&m);
    assert_eq!(
        (c["kind"].as_str(), c["data"]["a"].as_str()),
        (Some("ConfigMap"), Some("2"))
    );
    assert_eq!(rv(&m), updated.resource_version().unwrap());
    // (An `insert` may precede it when the ConfigMap's creation was processed after the pod's.)
    assert_eq!(env.settle(is(resource, "update")).await.len(), 1);
    env.stop().await;
}

#[actix_rt::test]
async fn a_configmap_used_on_two_nodes_yields_one_message_per_node() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1, e2, e3) = (
        k8s_testenv::namespace("ec").await,
        unique("e1"),
        unique("e2"),
        unique("e3"),
    );
    for n in [&e1, &e2, &e3] {
        edge_node(&env.client, n).await;
    }
    configmap(&env.client, &ns, "cfg", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "p1", &e1, mounting_configmap("cfg")).await;
    pod_with(&env.client, &ns, "p2", &e2, mounting_configmap("cfg")).await;
    pod(&env.client, &ns, "p3", &e3).await;
    env.expect("p2", is(format!("node/{e2}/{ns}/pod/p2"), "insert"))
        .await;
    env.expect("p3", is(format!("node/{e3}/{ns}/pod/p3"), "insert"))
        .await;
    update_configmap(&env.client, &ns, "cfg", "a", "2").await;
    let suffix = format!("/{ns}/configmap/cfg");
    let update =
        |m: &beehive::Message| m.route.resource.ends_with(&suffix) && m.route.operation == "update";
    env.edge.wait_count(2, WAIT, update).await;
    let mut nodes: Vec<String> = env
        .settle(update)
        .await
        .iter()
        .map(|m| {
            m.route
                .resource
                .split('/')
                .nth(1)
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    nodes.sort();
    let mut want = vec![e1, e2];
    want.sort();
    assert_eq!(nodes, want);
    env.stop().await;
}

#[actix_rt::test]
async fn an_unreferenced_configmap_is_never_sent() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    configmap(&env.client, &ns, "lonely", &[("a", "1")]).await;
    update_configmap(&env.client, &ns, "lonely", "a", "2").await;
    Api::<ConfigMap>::namespaced(env.client.clone(), &ns)
        .delete("lonely", &DeleteParams::default())
        .await
        .unwrap();
    // Liveness: a referenced one afterwards does arrive.
    configmap(&env.client, &ns, "used", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "web", &e1, mounting_configmap("used")).await;
    update_configmap(&env.client, &ns, "used", "a", "3").await;
    env.expect(
        "used configmap",
        is(format!("node/{e1}/{ns}/configmap/used"), "update"),
    )
    .await;
    assert!(
        env.edge
            .matching(|m| m.route.resource.ends_with("/configmap/lonely"))
            .is_empty()
    );
    env.stop().await;
}

#[actix_rt::test]
async fn an_image_pull_secret_is_sent_as_update_when_created() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    pod_with(
        &env.client,
        &ns,
        "web",
        &e1,
        json!({"imagePullSecrets": [{"name": "pull"}]}),
    )
    .await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    secret(&env.client, &ns, "pull").await;
    let resource = format!("node/{e1}/{ns}/secret/pull");
    let m = env.expect("secret", at(resource.clone())).await;
    assert_eq!(m.route.operation, "update", "secrets are never insert");
    assert_eq!(body(&m)["kind"], "Secret");
    assert_eq!(env.settle(at(resource)).await.len(), 1);
    env.stop().await;
}

#[actix_rt::test]
async fn deleting_an_env_secret_sends_one_delete() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    secret(&env.client, &ns, "token").await;
    let env_ref = json!({"containers": [{"name": "c", "image": "nginx",
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "k"}}}]}]});
    pod_with(&env.client, &ns, "web", &e1, env_ref).await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    Api::<Secret>::namespaced(env.client.clone(), &ns)
        .delete("token", &DeleteParams::default())
        .await
        .unwrap();
    let resource = format!("node/{e1}/{ns}/secret/token");
    env.expect("secret delete", is(resource.clone(), "delete"))
        .await;
    assert_eq!(env.settle(is(resource, "delete")).await.len(), 1);
    env.stop().await;
}

#[actix_rt::test]
async fn projected_and_env_from_configmaps_reach_the_node() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    configmap(&env.client, &ns, "proj", &[("a", "1")]).await;
    configmap(&env.client, &ns, "envs", &[("a", "1")]).await;
    let spec = json!({
        "volumes": [{"name": "p", "projected": {"sources": [{"configMap": {"name": "proj"}}]}}],
        "initContainers": [{"name": "i", "image": "busybox", "envFrom": [{"configMapRef": {"name": "envs"}}]}],
    });
    pod_with(&env.client, &ns, "web", &e1, spec).await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    update_configmap(&env.client, &ns, "proj", "a", "2").await;
    update_configmap(&env.client, &ns, "envs", "a", "2").await;
    env.expect(
        "projected",
        is(format!("node/{e1}/{ns}/configmap/proj"), "update"),
    )
    .await;
    env.expect(
        "envFrom of an init container",
        is(format!("node/{e1}/{ns}/configmap/envs"), "update"),
    )
    .await;
    env.stop().await;
}

#[actix_rt::test]
async fn after_the_last_user_pod_is_deleted_the_configmap_is_no_longer_sent() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    configmap(&env.client, &ns, "cfg", &[("a", "1")]).await;
    configmap(&env.client, &ns, "other", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "web", &e1, mounting_configmap("cfg")).await;
    pod_with(&env.client, &ns, "keeper", &e1, mounting_configmap("other")).await;
    env.expect("keeper", is(format!("node/{e1}/{ns}/pod/keeper"), "insert"))
        .await;
    force_delete_pod(&env.client, &ns, "web").await;
    env.expect(
        "pod delete",
        is(format!("node/{e1}/{ns}/pod/web"), "delete"),
    )
    .await;
    let mark = env.edge.messages().len();
    update_configmap(&env.client, &ns, "cfg", "a", "2").await;
    update_configmap(&env.client, &ns, "other", "a", "2").await;
    env.expect(
        "still-used configmap",
        is(format!("node/{e1}/{ns}/configmap/other"), "update"),
    )
    .await;
    tokio::time::sleep(QUIET).await;
    let cfg = format!("node/{e1}/{ns}/configmap/cfg");
    let after: Vec<_> = env.edge.messages().split_off(mark);
    assert!(
        !after.iter().any(|m| m.route.resource == cfg),
        "the location cache was pruned"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn a_deleted_then_recreated_configmap_reaches_the_nodes_still_using_it() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    configmap(&env.client, &ns, "cfg", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "web", &e1, mounting_configmap("cfg")).await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    Api::<ConfigMap>::namespaced(env.client.clone(), &ns)
        .delete("cfg", &DeleteParams::default())
        .await
        .unwrap();
    let resource = format!("node/{e1}/{ns}/configmap/cfg");
    env.expect("delete", is(resource.clone(), "delete")).await;
    configmap(&env.client, &ns, "cfg", &[("a", "new")]).await;
    env.expect("recreated", |m| {
        is(resource.clone(), "insert")(m) && body(m)["data"]["a"] == "new"
    })
    .await;
    env.stop().await;
}

#[actix_rt::test]
async fn labelling_a_node_as_edge_sends_it_and_then_its_pods() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e3) = (k8s_testenv::namespace("ec").await, unique("e3"));
    node_with_labels(&env.client, &e3, &[]).await;
    pod(&env.client, &ns, "before", &e3).await;
    let nodes = Api::<Node>::all(env.client.clone());
    let labelled = nodes
        .patch(
            &e3,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": ""}}})),
        )
        .await
        .unwrap();
    let resource = format!("node/{e3}/null/node/{e3}");
    let m = env.expect("node update", is(resource, "update")).await;
    assert_eq!(body(&m)["kind"], "Node");
    assert_eq!(rv(&m), labelled.resource_version().unwrap());
    // Rust behaviour: pods already bound to the node are sent when it joins.
    env.expect(
        "existing pod",
        is(format!("node/{e3}/{ns}/pod/before"), "insert"),
    )
    .await;
    pod(&env.client, &ns, "after", &e3).await;
    env.expect("new pod", is(format!("node/{e3}/{ns}/pod/after"), "insert"))
        .await;
    env.stop().await;
}

#[actix_rt::test]
async fn removing_the_edge_label_sends_a_delete_and_stops_forwarding() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e3) = (k8s_testenv::namespace("ec").await, unique("e3"));
    edge_node(&env.client, &e3).await;
    let resource = format!("node/{e3}/null/node/{e3}");
    env.expect("node update", is(resource.clone(), "update"))
        .await;
    Api::<Node>::all(env.client.clone())
        .patch(
            &e3,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"node-role.kubernetes.io/edge": null}}})),
        )
        .await
        .unwrap();
    let m = env.expect("node delete", is(resource, "delete")).await;
    assert!(m.content.is_null());
    assert!(rv(&m).is_empty());
    assert_no_pod_reaches(&env, &ns, &e3).await;
    env.stop().await;
}

#[actix_rt::test]
async fn deleting_an_edge_node_sends_a_delete_with_null_content() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e3) = (k8s_testenv::namespace("ec").await, unique("e3"));
    edge_node(&env.client, &e3).await;
    let resource = format!("node/{e3}/null/node/{e3}");
    env.expect("node update", is(resource.clone(), "update"))
        .await;
    Api::<Node>::all(env.client.clone())
        .delete(&e3, &DeleteParams::default())
        .await
        .unwrap();
    let m = env.expect("node delete", is(resource, "delete")).await;
    assert_eq!((m.content.as_json(), rv(&m)), ("null", ""));
    assert_no_pod_reaches(&env, &ns, &e3).await;
    env.stop().await;
}

#[actix_rt::test]
async fn at_start_existing_pods_configmaps_and_the_node_are_sent_without_a_request() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&client, &e1).await;
    configmap(&client, &ns, "cfg", &[("a", "1")]).await;
    configmap(&client, &ns, "unused", &[("a", "1")]).await;
    pod_with(&client, &ns, "p1", &e1, mounting_configmap("cfg")).await;
    pod(&client, &ns, "p2", &e1).await;
    let env = start().await;
    env.expect("cfg", is(format!("node/{e1}/{ns}/configmap/cfg"), "insert"))
        .await;
    let mine = env.settle(for_node(&e1)).await;
    let mut got: Vec<String> = mine
        .iter()
        .map(|m| format!("{} {}", m.route.operation, m.route.resource))
        .collect();
    got.sort();
    let mut want = vec![
        format!("insert node/{e1}/{ns}/configmap/cfg"),
        format!("insert node/{e1}/{ns}/pod/p1"),
        format!("insert node/{e1}/{ns}/pod/p2"),
        format!("update node/{e1}/null/node/{e1}"),
    ];
    want.sort();
    assert_eq!(got, want);
    env.stop().await;
}

#[actix_rt::test]
async fn rules_go_to_the_router_added_replaced_and_deleted() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let env = {
        // The router inbox must exist before the controller sends to it.
        init_tracing();
        start_with(
            client,
            edgecontroller::EdgeControllerConfig::default(),
            |ec| ec.with_router(true),
        )
        .await
    };
    let router = kubeedge_api::testing::FakeEdge::register(&env.bus, "router");
    let ns = k8s_testenv::namespace("ec").await;
    let name = unique("r");
    let rules = Api::<kubeedge_api::rules::Rule>::namespaced(env.client.clone(), &ns);
    let rule = rule(&name);
    rules.create(&Default::default(), &rule).await.unwrap();
    let resource = format!("rule/{name}");
    let m = router
        .wait_for(WAIT, |m| {
            m.route.resource == resource && m.route.operation == "insert"
        })
        .await
        .expect("rule insert at the router");
    assert_eq!(
        (m.route.source.as_str(), body(&m)["kind"].as_str()),
        ("edgecontroller", Some("Rule"))
    );
    rules
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"target": "c"}})),
        )
        .await
        .unwrap();
    // A modification replaces the rule: the old one deleted, the new one inserted.
    router
        .wait_for(WAIT, |m| {
            m.route.resource == resource
                && m.route.operation == "insert"
                && body(m)["spec"]["target"] == "c"
        })
        .await
        .expect("the changed rule at the router");
    rules.delete(&name, &DeleteParams::default()).await.unwrap();
    let ops = || -> Vec<(String, String)> {
        router
            .matching(|m| m.route.resource == resource)
            .iter()
            .map(|m| {
                (
                    m.route.operation.to_string(),
                    body(m)["spec"]["target"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + WAIT;
    while ops().len() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let want: Vec<(String, String)> = [
        ("insert", "b"),
        ("delete", "b"),
        ("insert", "c"),
        ("delete", "c"),
    ]
    .iter()
    .map(|(o, t)| ((*o).to_owned(), (*t).to_owned()))
    .collect();
    assert_eq!(ops(), want);
    assert!(
        env.edge
            .matching(|m| m.route.resource.contains(&name))
            .is_empty(),
        "nothing to cloudhub"
    );
    env.stop().await;
}

/// A pod bound to `node` now sends it nothing.
async fn assert_no_pod_reaches(env: &Env, ns: &str, node: &str) {
    pod(&env.client, ns, "late", node).await;
    assert!(
        env.settle(at(format!("node/{node}/{ns}/pod/late")))
            .await
            .is_empty()
    );
}
