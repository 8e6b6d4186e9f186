//! The three flows end to end: what the edge is sent, how its reports land in the status, and
//! how the job phase follows.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::support::{Replica, World, entry, unique};

fn prepull(name: &str, nodes: &[String], extra: Value) -> Value {
    let mut t = json!({"images": ["nginx:1.27", "busybox:1"], "nodeNames": nodes});
    if let (Some(t), Some(extra)) = (t.as_object_mut(), extra.as_object()) {
        t.extend(extra.clone());
    }
    json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name}, "spec": {"imagePrePullTemplate": t}})
}

#[actix_rt::test]
async fn a_prepull_job_runs_init_in_progress_completed_with_one_check_per_node() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("pp"), 1).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("prepull");
    w.create::<kubeedge_api::operations::v1alpha2::ImagePrePullJob>(prepull(
        &job,
        &nodes,
        json!({}),
    ))
    .await;
    let node = &nodes[0];
    let check = r.wait_check("imageprepulljob", &job, node).await;
    // Exactly KubeEdge's downstream shape: source/group taskmanager, no resource version,
    // the spec as content, the resource untrimmed.
    assert_eq!(
        (check.route.source.as_str(), check.route.group.as_str()),
        ("taskmanager", "taskmanager")
    );
    assert!(check.header.resource_version.is_empty() && check.header.parent_id.is_empty());
    let content: Value = check.content.parse().unwrap();
    assert_eq!(
        content["imagePrePullTemplate"]["images"],
        json!(["nginx:1.27", "busybox:1"])
    );
    // The finalizer, then the node InProgress (written before the Check went out).
    let j = w
        .node_phase("ImagePrePullJob", &job, node, "InProgress")
        .await;
    assert_eq!(j["phase"], "InProgress", "the node entry: {j}");
    let j = w.phase("ImagePrePullJob", &job, "InProgress").await;
    assert_eq!(
        j["metadata"]["finalizers"],
        json!(["kubeedge.io/imageprepulljob-controller"])
    );
    r.report("imageprepulljob", &job, node, "Check", true).await;
    w.until(
        "ImagePrePullJob",
        &job,
        crate::support::WAIT,
        "Check recorded",
        |j| entry(j, node).filter(|e| e["actionFlow"].as_array().is_some_and(|a| a.len() == 1)),
    )
    .await;
    let extend = json!([{"image": "nginx:1.27", "status": "True"},
                        {"image": "busybox:1", "status": "True"}]);
    r.report_with(
        "imageprepulljob",
        &job,
        node,
        "Pull",
        true,
        &extend.to_string(),
    )
    .await;
    let done = w.phase("ImagePrePullJob", &job, "Completed").await;
    let e = entry(&done, node).unwrap();
    assert_eq!(e["phase"], "Successful");
    assert_eq!(
        e["actionFlow"],
        json!([
            {"action": "Check", "status": "True", "time": "2026-08-06T07:00:00Z"},
            {"action": "Pull", "status": "True", "time": "2026-08-06T07:00:00Z"}
        ])
    );
    assert_eq!(e["imageStatus"], extend);
    assert_eq!(
        r.checks("imageprepulljob", &job, node).len(),
        1,
        "sent once"
    );
    let snap = r.tm.snapshot();
    assert_eq!(snap.reports["accepted"], 2);
    r.stop().await;
}

#[actix_rt::test]
async fn an_upgrade_records_versions_and_a_rolled_back_upgrade_counts_as_successful() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("up"), 1).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("upgrade");
    w.create::<kubeedge_api::operations::v1alpha2::NodeUpgradeJob>(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "NodeUpgradeJob",
        "metadata": {"name": job},
        "spec": {"version": "v1.23.0", "nodeNames": nodes}}))
        .await;
    let node = &nodes[0];
    let check = r.wait_check("nodeupgradejob", &job, node).await;
    let spec: Value = check.content.parse().unwrap();
    assert_eq!(
        spec["image"], "kubeedge/installation-package",
        "the documented default image, which the edge needs"
    );
    assert!(spec["imageDigestGatter"].is_null() && spec.get("imageDigestGatter").is_some());
    w.node_phase("NodeUpgradeJob", &job, node, "InProgress")
        .await;
    for (action, ok, extend) in [
        ("Check", true, ""),
        ("WaitingConfirmation", true, ""),
        ("BackUp", true, "v1.22.1,v1.23.0"),
        ("Upgrade", false, "v1.22.1,v1.23.0"),
    ] {
        r.report_with("nodeupgradejob", &job, node, action, ok, extend)
            .await;
    }
    let e = w
        .until(
            "NodeUpgradeJob",
            &job,
            crate::support::WAIT,
            "four actions",
            |j| entry(j, node).filter(|e| e["actionFlow"].as_array().is_some_and(|a| a.len() == 4)),
        )
        .await;
    assert_eq!(
        e["phase"], "InProgress",
        "a failed upgrade goes on to roll back"
    );
    assert_eq!(
        (e["historicVersion"].as_str(), e["currentVersion"].as_str()),
        (Some("v1.22.1"), Some("v1.23.0"))
    );
    assert_eq!(e["actionFlow"][3]["reason"], "it failed");
    r.report("nodeupgradejob", &job, node, "RollBack", true)
        .await;
    let done = w.phase("NodeUpgradeJob", &job, "Completed").await;
    assert_eq!(entry(&done, node).unwrap()["phase"], "Successful");
    r.stop().await;
}

#[actix_rt::test]
async fn a_config_update_report_without_finish_time_gets_the_cloud_time() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("cu"), 1).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("config");
    w.create::<kubeedge_api::operations::v1alpha2::ConfigUpdateJob>(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ConfigUpdateJob",
        "metadata": {"name": job},
        "spec": {"nodeNames": nodes, "updateFields": {"modules.edgeHub.heartbeat": "20"}}}))
        .await;
    let node = &nodes[0];
    let check = r.wait_check("configupdatejob", &job, node).await;
    let spec: Value = check.content.parse().unwrap();
    assert_eq!(spec["updateFields"]["modules.edgeHub.heartbeat"], "20");
    w.node_phase("ConfigUpdateJob", &job, node, "InProgress")
        .await;
    // KubeEdge's edge sends ConfigUpdateJob reports without finishTime.
    for action in ["Check", "BackUp", "Update"] {
        r.report_as(
            node,
            "configupdatejob",
            &job,
            node,
            json!({"action": action, "succ": true, "reason": "", "extend": ""}),
        )
        .await;
    }
    let done = w.phase("ConfigUpdateJob", &job, "Completed").await;
    let flow = &entry(&done, node).unwrap()["actionFlow"];
    assert_eq!(flow.as_array().unwrap().len(), 3);
    for a in flow.as_array().unwrap() {
        let t: k8s_openapi::jiff::Timestamp = a["time"].as_str().unwrap().parse().unwrap();
        let age = k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second();
        assert!((0..120).contains(&age), "the cloud's receive time: {a}");
    }
    r.stop().await;
}

#[actix_rt::test]
async fn the_pull_secret_reaches_the_edge_under_a_name_of_its_own_before_the_task() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let ns = k8s_testenv::namespace("tm").await;
    let secret = taskmanager::secret::docker_config_secret(
        "regcred",
        &ns,
        r#"{"auths":{"127.0.0.1:5000":{"username":"u","password":"p","auth":"dTpw"}}}"#,
    );
    Api::<Secret>::namespaced(w.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let nodes = w.nodes(&unique("ps"), 1).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("private");
    w.create::<kubeedge_api::operations::v1alpha2::ImagePrePullJob>(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": job},
        "spec": {"imagePrePullTemplate": {"images": ["127.0.0.1:5000/app:1"],
            "nodeNames": nodes, "imageSecrets": format!("{ns}/regcred")}}}))
        .await;
    let node = &nodes[0];
    let check = r.wait_check("imageprepulljob", &job, node).await;
    let pushed = r.edge.matching(|m| m.route.resource.contains("/secret/"));
    assert_eq!(pushed.len(), 1, "one copy of the secret");
    let s = &pushed[0];
    assert_eq!(
        s.route.resource,
        format!("node/{node}/{ns}/secret/ImagePrePullJob.{job}")
    );
    assert_eq!(
        (
            s.route.source.as_str(),
            s.route.group.as_str(),
            s.route.operation.as_str()
        ),
        ("taskmanager", "resource", "insert")
    );
    let all = r.edge.messages();
    let at = |m: &beehive::Message| all.iter().position(|x| x.header.id == m.header.id);
    assert!(at(s) < at(&check), "the secret goes first");
    let body: Value = s.content.parse().unwrap();
    let data = body["data"][".dockerconfigjson"].as_str().unwrap();
    use base64::Engine;
    let auth: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        auth,
        json!({"username": "u", "password": "p", "auth": "dTpw"}),
        "the CRI AuthConfig the edge decodes"
    );
    let spec: Value = check.content.parse().unwrap();
    assert_eq!(
        spec["imagePrePullTemplate"]["imageSecrets"],
        format!("{ns}/ImagePrePullJob.{job}")
    );
    // Once the node's task ends, its copy is removed.
    w.node_phase("ImagePrePullJob", &job, node, "InProgress")
        .await;
    r.report("imageprepulljob", &job, node, "Check", true).await;
    r.report("imageprepulljob", &job, node, "Pull", true).await;
    w.phase("ImagePrePullJob", &job, "Completed").await;
    let removed = r
        .edge
        .wait_for(crate::support::WAIT, |m| {
            m.route.resource.contains("/secret/") && m.route.operation == "delete"
        })
        .await;
    assert!(removed.is_some(), "the edge's copy is deleted");
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.stop().await;
}

#[actix_rt::test]
async fn a_missing_pull_secret_fails_the_nodes_with_a_reason() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("nos"), 1).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("nosecret");
    w.create::<kubeedge_api::operations::v1alpha2::ImagePrePullJob>(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": job},
        "spec": {"imagePrePullTemplate": {"images": ["a/b:1"], "nodeNames": nodes,
            "imageSecrets": "default/does-not-exist"}}}))
        .await;
    let e = w
        .node_phase("ImagePrePullJob", &job, &nodes[0], "Failure")
        .await;
    assert_eq!(
        e["reason"],
        "cannot use imageSecrets default/does-not-exist: the Secret does not exist"
    );
    w.phase("ImagePrePullJob", &job, "Failure").await;
    assert!(r.sent_nodes("imageprepulljob", &job).is_empty());
    r.stop().await;
}
