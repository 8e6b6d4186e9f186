//! dynamiccontroller on a bus against the real API server (k8s-testenv), with cloudcore's
//! identity narrowed (by impersonation) to a user that may not list one resource type.

use std::time::{Duration, Instant};

use beehive::{Bus, Content, Message};
use dynamiccontroller::{DynamicController, DynamicControllerConfig};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use kubeedge_api::application::Application;
use serde_json::{Value, json};

fn from<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("object from JSON")
}

/// A ClusterRole with `rules` bound to `subject` (`User` or `Group`).
async fn grant(admin: &kube::Client, name: &str, subject: (&str, &str), rules: Value) {
    let role: ClusterRole = from(json!({"metadata": {"name": name}, "rules": rules}));
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding: ClusterRoleBinding = from(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": subject.0, "name": subject.1}]
    }));
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
}

fn request(node: &str, verb: &str, key: &str) -> Message {
    let mut app = Application::request(beehive::new_id(), verb, key);
    app.option = Some(br#"{"watch":true}"#.to_vec());
    Message::new()
        .with_route(
            "metaserver",
            "dynamiccontroller",
            format!("node/{node}/null"),
            "null",
        )
        .with_content(Content::json(&app).unwrap())
}

#[actix_rt::test]
async fn a_type_cloudcore_cannot_list_is_refused_at_once_while_other_nodes_are_served() {
    test_tiers::require!(ApiServer);
    let admin = k8s_testenv::client().await;
    let id = &beehive::new_id()[..8];
    let user = format!("dc-test-{id}");
    grant(
        &admin,
        &format!("dc-test-cloudcore-{id}"),
        ("User", &user),
        json!([
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]}
        ]),
    )
    .await;
    // Nodes may watch ResourceQuotas here; cloudcore may not list them.
    grant(
        &admin,
        &format!("dc-test-nodes-{id}"),
        ("Group", "system:nodes"),
        json!([{"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list", "watch"]}]),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut config = k8s_testenv::config().await;
    config.auth_info.impersonate = Some(user);
    let client = kube::Client::try_from(config).unwrap();
    let bus = Bus::new();
    let mut hub = bus.register_inbox("cloudhub", "cloudhub", 1024).unwrap();
    let dc_config = DynamicControllerConfig {
        informer_sync_timeout: 3,
        persist_listeners: false,
        ..DynamicControllerConfig::default()
    };
    bus.register(DynamicController::new(
        dc_config,
        bus.endpoint("dynamiccontroller"),
        client,
    ))
    .unwrap();
    bus.start().unwrap();
    let edge = bus.endpoint("cloudhub").sub("edge");

    let started = Instant::now();
    let stuck = request("node-a", "watch", "/core/v1/resourcequotas/null/null");
    edge.send("dynamiccontroller", stuck.clone()).await.unwrap();
    let served = request("node-b", "list", "/core/v1/services/null/null");
    edge.send("dynamiccontroller", served.clone())
        .await
        .unwrap();

    let mut answers = Vec::new();
    while answers.len() < 2 {
        let m = tokio::time::timeout(Duration::from_secs(15), hub.recv())
            .await
            .expect("answers within 15 s")
            .unwrap();
        if m.header.parent_id == served.header.id || m.header.parent_id == stuck.header.id {
            answers.push((m, started.elapsed()));
        }
    }
    let app = |m: &Message| m.content.parse::<Value>().unwrap();
    let answer = |id: &beehive::Id| {
        answers
            .iter()
            .find(|(m, _)| &m.header.parent_id == id)
            .map(|(m, at)| (app(m), *at))
            .unwrap()
    };
    let (served, served_at) = answer(&served.header.id);
    assert_eq!(served["Status"], "Approved");
    assert!(
        served_at < Duration::from_secs(2),
        "served in {served_at:?}"
    );
    let (refused, refused_at) = answer(&stuck.header.id);
    assert_eq!(refused["Status"], "Rejected", "{refused}");
    assert_eq!(
        refused["Error"]["ErrStatus"]["code"], 403,
        "the API server's refusal: {refused}"
    );
    // The list's 403 is final: answered at once, not after informerSyncTimeout (3 s).
    assert!(
        refused_at < Duration::from_secs(3),
        "refused at once, not at {refused_at:?}"
    );
    bus.shutdown().await;
}
