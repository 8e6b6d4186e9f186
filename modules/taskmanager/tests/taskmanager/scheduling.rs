//! Who is sent what, when: concurrency, timeouts, nodes no replica holds, deleted jobs, a
//! restarted taskmanager, two replicas, and the job controller switched off.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubeedge_api::operations::v1alpha2::ImagePrePullJob;
use serde_json::{Value, json};

use crate::support::{Replica, WAIT, World, entry, unique};

const KIND: &str = "imageprepulljob";

fn prepull(name: &str, nodes: &[String], extra: Value) -> Value {
    let mut t = json!({"images": ["a/b:1"], "nodeNames": nodes});
    if let (Some(t), Some(extra)) = (t.as_object_mut(), extra.as_object()) {
        t.extend(extra.clone());
    }
    json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name}, "spec": {"imagePrePullTemplate": t}})
}

/// The nodes of `job` in `phase` now.
fn in_phase(job: &Value, phase: &str) -> Vec<String> {
    job["status"]["nodeStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["phase"] == phase)
        .map(|e| e["nodeName"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn finish(r: &Replica, job: &str, node: &str) {
    r.report(KIND, job, node, "Check", true).await;
    r.report(KIND, job, node, "Pull", true).await;
}

#[actix_rt::test]
async fn concurrency_bounds_the_nodes_in_flight_and_a_final_report_frees_a_slot() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("cc"), 5).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("two-at-a-time");
    w.create::<ImagePrePullJob>(prepull(&job, &nodes, json!({"concurrency": 2})))
        .await;
    let mut done = Vec::new();
    while done.len() < nodes.len() {
        // Two in flight (fewer at the end), never more, and only nodes that were sent.
        let expected = (nodes.len() - done.len()).min(2);
        let j = w
            .until("ImagePrePullJob", &job, WAIT, "two in flight", |j| {
                let busy = in_phase(j, "InProgress");
                (busy.len() == expected).then_some(busy)
            })
            .await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let now = w.get("ImagePrePullJob", &job).await.unwrap();
        assert_eq!(
            in_phase(&now, "InProgress"),
            j,
            "no third node while two run"
        );
        let sent = r.sent_nodes(KIND, &job);
        assert_eq!(sent.len(), done.len() + expected, "sent: {sent:?}");
        // The first node in flight finishes; exactly one more goes.
        finish(&r, &job, &j[0]).await;
        w.node_phase("ImagePrePullJob", &job, &j[0], "Successful")
            .await;
        done.push(j[0].clone());
    }
    w.phase("ImagePrePullJob", &job, "Completed").await;
    let mut sent = r.sent_nodes(KIND, &job);
    assert_eq!(sent, nodes, "in nodeNames order, each once");
    sent.dedup();
    assert_eq!(sent.len(), 5);
    r.stop().await;
}

#[actix_rt::test]
async fn a_node_that_never_answers_times_out_and_the_next_one_is_sent() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("to"), 2).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("silent");
    w.create::<ImagePrePullJob>(prepull(
        &job,
        &nodes,
        json!({"timeoutSeconds": 3, "failureTolerate": "0.5"}),
    ))
    .await;
    r.wait_check(KIND, &job, &nodes[0]).await;
    let sent = Instant::now();
    let e = w
        .node_phase("ImagePrePullJob", &job, &nodes[0], "Unknown")
        .await;
    let took = sent.elapsed();
    assert_eq!(e["reason"], "The node task has timed out");
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(10),
        "about 3 s after the task was sent: {took:?}"
    );
    // Its slot is free: the second node goes (KubeEdge's executor would wait forever).
    r.wait_check(KIND, &job, &nodes[1]).await;
    // A node that keeps reporting does not time out: each report is progress.
    for i in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        r.report_as(
            &nodes[1],
            KIND,
            &job,
            &nodes[1],
            json!({"action": "Check", "succ": true,
                "finishTime": format!("2026-08-06T07:00:0{i}Z"),
                "reason": "", "extend": ""}),
        )
        .await;
    }
    let j = w.get("ImagePrePullJob", &job).await.unwrap();
    assert_eq!(entry(&j, &nodes[1]).unwrap()["phase"], "InProgress", "{j}");
    r.report(KIND, &job, &nodes[1], "Pull", true).await;
    // 1 of 2 failed, within 0.5.
    w.phase("ImagePrePullJob", &job, "Completed").await;
    // A late final report replaces the timeout: the real result says more.
    r.report(KIND, &job, &nodes[0], "Pull", true).await;
    w.node_phase("ImagePrePullJob", &job, &nodes[0], "Successful")
        .await;
    r.stop().await;
}

#[actix_rt::test]
async fn a_node_no_replica_holds_fails_as_not_connected() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("off"), 2).await;
    // Only the first is connected; the second is offline when the job starts.
    let r = Replica::start(&w.client, "10.9.0.1", &nodes[..1]).await;
    let job = unique("offline");
    let created = Instant::now();
    w.create::<ImagePrePullJob>(prepull(&job, &nodes, json!({"failureTolerate": "0"})))
        .await;
    r.wait_check(KIND, &job, &nodes[0]).await;
    let e = w
        .node_phase("ImagePrePullJob", &job, &nodes[1], "Failure")
        .await;
    assert_eq!(
        e["reason"],
        format!(
            "the node {} is not connected to the current cloudcore instance",
            nodes[1]
        )
    );
    assert!(
        created.elapsed() >= Duration::from_secs(9),
        "after the 10 s grace"
    );
    finish(&r, &job, &nodes[0]).await;
    w.phase("ImagePrePullJob", &job, "Failure").await;
    assert!(r.checks(KIND, &job, &nodes[1]).is_empty());
    r.stop().await;
}

#[actix_rt::test]
async fn deleting_a_running_job_stops_it_and_removes_the_finalizer() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("del"), 3).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("deleted");
    w.create::<ImagePrePullJob>(prepull(&job, &nodes, json!({})))
        .await;
    r.wait_check(KIND, &job, &nodes[0]).await;
    w.node_phase("ImagePrePullJob", &job, &nodes[0], "InProgress")
        .await;
    let api: Api<ImagePrePullJob> = Api::all(w.client.clone());
    api.delete(&job, &DeleteParams::default()).await.unwrap();
    let gone = Instant::now();
    while w.get("ImagePrePullJob", &job).await.is_some() {
        assert!(gone.elapsed() < WAIT, "the finalizer is removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The edge still reports; nothing is written, nothing else is sent.
    finish(&r, &job, &nodes[0]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(r.sent_nodes(KIND, &job), vec![nodes[0].clone()]);
    assert_eq!(r.tm.snapshot().reports["unknownJob"], 2);
    r.stop().await;
}

#[actix_rt::test]
async fn a_restarted_taskmanager_resumes_without_sending_a_task_twice() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("rs"), 3).await;
    let first = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let job = unique("resumed");
    w.create::<ImagePrePullJob>(prepull(&job, &nodes, json!({"concurrency": 1})))
        .await;
    first.wait_check(KIND, &job, &nodes[0]).await;
    w.node_phase("ImagePrePullJob", &job, &nodes[0], "InProgress")
        .await;
    first.report(KIND, &job, &nodes[0], "Check", true).await;
    w.until("ImagePrePullJob", &job, WAIT, "Check recorded", |j| {
        entry(j, &nodes[0]).filter(|e| !e["actionFlow"].is_null())
    })
    .await;
    first.stop().await;
    // A new process, its Nodes still naming it: the node in flight counts against concurrency
    // 1 even before it reconnects, so nothing is sent until it finishes, and it is not sent
    // again.
    for n in &nodes {
        w.annotate(n, "10.9.0.1").await;
    }
    let second = Replica::start(&w.client, "10.9.0.1", &nodes[1..]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    second.ownership.hold(&nodes[0]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        second
            .edge
            .matching(|m| m.route.operation == "Check")
            .is_empty(),
        "nothing sent while the resumed node is in flight"
    );
    // The report the first process did not see goes to the second: applied.
    second.report(KIND, &job, &nodes[0], "Pull", true).await;
    second.wait_check(KIND, &job, &nodes[1]).await;
    finish(&second, &job, &nodes[1]).await;
    second.wait_check(KIND, &job, &nodes[2]).await;
    finish(&second, &job, &nodes[2]).await;
    w.phase("ImagePrePullJob", &job, "Completed").await;
    assert_eq!(second.sent_nodes(KIND, &job), nodes[1..].to_vec());
    second.stop().await;
}

#[actix_rt::test]
async fn two_replicas_send_only_to_the_nodes_they_hold_and_lose_no_result() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("ha"), 6).await;
    let (on_a, on_b) = nodes.split_at(3);
    for n in on_a {
        w.annotate(n, "10.9.0.1").await;
    }
    for n in on_b {
        w.annotate(n, "10.9.0.2").await;
    }
    let a = Replica::start(&w.client, "10.9.0.1", on_a).await;
    let b = Replica::start(&w.client, "10.9.0.2", on_b).await;
    let job = unique("both");
    w.create::<ImagePrePullJob>(prepull(&job, &nodes, json!({"concurrency": 2})))
        .await;
    // Each replica sends its own nodes, two at a time each.
    let mut finished = 0;
    while finished < nodes.len() {
        let j = w
            .until("ImagePrePullJob", &job, WAIT, "nodes in flight", |j| {
                let busy = in_phase(j, "InProgress");
                (!busy.is_empty()).then_some(busy)
            })
            .await;
        assert!(j.len() <= 4, "two per replica: {j:?}");
        // Every node in flight reports at once, through its own replica: their writes race.
        for n in &j {
            let r = if on_a.contains(n) { &a } else { &b };
            r.report(KIND, &job, n, "Check", true).await;
            r.report(KIND, &job, n, "Pull", true).await;
        }
        for n in &j {
            w.node_phase("ImagePrePullJob", &job, n, "Successful").await;
        }
        finished += j.len();
    }
    let j = w.phase("ImagePrePullJob", &job, "Completed").await;
    for n in &nodes {
        let e = entry(&j, n).unwrap();
        assert_eq!(e["actionFlow"].as_array().unwrap().len(), 2, "{n}: {e}");
    }
    let mut sent_a = a.sent_nodes(KIND, &job);
    let mut sent_b = b.sent_nodes(KIND, &job);
    sent_a.sort();
    sent_b.sort();
    assert_eq!(sent_a, on_a.to_vec());
    assert_eq!(sent_b, on_b.to_vec());
    a.stop().await;
    b.stop().await;
}

#[actix_rt::test]
async fn with_the_job_controller_off_only_initialised_jobs_run() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("nc"), 1).await;
    let r = Replica::start_with(&w.client, "10.9.0.1", &nodes, false).await;
    let job = unique("external");
    w.create::<ImagePrePullJob>(prepull(&job, &nodes, json!({})))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let j = w.get("ImagePrePullJob", &job).await.unwrap();
    assert!(
        j["status"].is_null() && j["metadata"]["finalizers"].is_null(),
        "another controller's work: {j}"
    );
    // KubeEdge's controller-manager writes Init with the node list.
    let api: Api<ImagePrePullJob> = Api::all(w.client.clone());
    api.patch_status(
        &job,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Init",
            "nodeStatus": [{"nodeName": nodes[0], "phase": "Pending"}]}})),
    )
    .await
    .unwrap();
    r.wait_check(KIND, &job, &nodes[0]).await;
    finish(&r, &job, &nodes[0]).await;
    w.node_phase("ImagePrePullJob", &job, &nodes[0], "Successful")
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let j = w.get("ImagePrePullJob", &job).await.unwrap();
    assert_eq!(
        j["status"]["phase"], "Init",
        "the job phase is the other controller's"
    );
    r.stop().await;
}
