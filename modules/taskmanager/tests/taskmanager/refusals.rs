//! What is refused: job specs that cannot run (a reason an operator reads in the status), and
//! reports a node may not make (dropped, counted, the status unchanged).

use std::time::Duration;

use kubeedge_api::operations::v1alpha2::{ConfigUpdateJob, ImagePrePullJob, NodeUpgradeJob};
use serde_json::{Value, json};

use crate::support::{Replica, World, entry, unique};

fn prepull(name: &str, template: Value) -> Value {
    json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name}, "spec": {"imagePrePullTemplate": template}})
}

#[actix_rt::test]
async fn job_specs_that_cannot_run_fail_with_a_reason_an_operator_understands() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("bad"), 1).await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes).await;
    let n = json!(nodes);
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "labelSelector": {"matchLabels": {"a": "b"}}}),
            "nodeNames and nodeSelector cannot be specified at the same time",
        ),
        (
            json!({"images": ["a/b:1"]}),
            "nodeNames and nodeSelector cannot both be empty",
        ),
        (
            json!({"images": ["a/b:1"], "labelSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}}),
            "nodeSelector is invalid, err: values: Required value: for 'in', 'notin' operators, values set can't be empty (key \"zone\")",
        ),
        (
            json!({"images": ["a/b:1"], "labelSelector": {"matchLabels": {"no-such-label": "x"}}}),
            "no nodes were matched with selector",
        ),
        (
            json!({"images": [], "nodeNames": n}),
            "spec.imagePrePullTemplate.images is empty: list at least one image to pull",
        ),
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "timeoutSeconds": -5}),
            "spec.imagePrePullTemplate.timeoutSeconds is -5: it must be between 1 and 604800 (a week), or 0 or unset for the default 300",
        ),
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "timeoutSeconds": 2000000000}),
            "spec.imagePrePullTemplate.timeoutSeconds is 2000000000: it must be between 1 and 604800 (a week), or 0 or unset for the default 300",
        ),
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "concurrency": -2}),
            "spec.imagePrePullTemplate.concurrency is -2: it must be 1 or more, or 0 or unset for the default 1",
        ),
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "failureTolerate": "ten percent"}),
            "spec.imagePrePullTemplate.failureTolerate is \"ten percent\": it must be a decimal number from 0 to 1, such as \"0.1\" (unset: 0.1)",
        ),
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "imageSecrets": "regcred"}),
            "spec.imagePrePullTemplate.imageSecrets is \"regcred\": it must name a Secret as <namespace>/<name>",
        ),
        (
            json!({"images": ["a/b:1"], "nodeNames": n, "checkItems": ["gpu"]}),
            "spec.imagePrePullTemplate.checkItems has \"gpu\": the edge checks only [\"cpu\", \"mem\", \"disk\"]",
        ),
    ];
    let mut names = Vec::new();
    for (i, (template, _)) in cases.iter().enumerate() {
        let name = format!("{}-{i}", unique("bad"));
        w.create::<ImagePrePullJob>(prepull(&name, template.clone()))
            .await;
        names.push(name);
    }
    let upgrade = unique("badversion");
    w.create::<NodeUpgradeJob>(json!({"apiVersion": "operations.kubeedge.io/v1alpha2",
        "kind": "NodeUpgradeJob", "metadata": {"name": upgrade},
        "spec": {"version": "1.23", "nodeNames": nodes}}))
        .await;
    let config = unique("nofields");
    w.create::<ConfigUpdateJob>(json!({"apiVersion": "operations.kubeedge.io/v1alpha2",
        "kind": "ConfigUpdateJob", "metadata": {"name": config},
        "spec": {"nodeNames": nodes, "updateFields": {"a": "1,2"}}}))
        .await;
    w.create::<ImagePrePullJob>(prepull(
        "node",
        json!({"images": ["a/b:1"], "nodeNames": n}),
    ))
    .await;
    for (name, (_, reason)) in names.iter().zip(&cases) {
        let j = w.phase("ImagePrePullJob", name, "Failure").await;
        assert_eq!(j["status"]["reason"], *reason, "{name}");
        assert!(j["status"]["nodeStatus"].is_null(), "no nodes: {j}");
    }
    let j = w.phase("NodeUpgradeJob", &upgrade, "Failure").await;
    assert_eq!(
        j["status"]["reason"],
        "spec.version is \"1.23\": it must be an edgecore version such as \"v1.23.0\""
    );
    let j = w.phase("ConfigUpdateJob", &config, "Failure").await;
    assert_eq!(
        j["status"]["reason"],
        "spec.updateFields.a is \"1,2\": a value may not contain ',' (the edge passes the fields to keadm as k=v,k=v)"
    );
    let j = w.phase("ImagePrePullJob", "node", "Failure").await;
    assert!(
        j["status"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("a job may not be named \"node\""),
        "{j}"
    );
    // Nothing was sent for any of them, and the reason stays (a failed NodeUpgradeJob is
    // recomputed, but keeps the reason it failed with).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(r.edge.matching(|m| m.route.operation == "Check").is_empty());
    let j = w.get("NodeUpgradeJob", &upgrade).await.unwrap();
    assert!(
        j["status"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("spec.version")
    );
    r.stop().await;
}

#[actix_rt::test]
async fn unknown_non_edge_and_unready_nodes_fail_and_count_against_the_tolerance() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let p = unique("sel");
    let ok = format!("{p}-ok");
    let cloud = format!("{p}-cloud");
    let unready = format!("{p}-unready");
    w.node(&ok, true, true, &[("fleet", &p)]).await;
    w.node(&cloud, false, true, &[("fleet", &p)]).await;
    w.node(&unready, true, false, &[("fleet", &p)]).await;
    let r = Replica::start(&w.client, "10.9.0.1", std::slice::from_ref(&ok)).await;
    // By label: the non-edge and the unready node are included as failures.
    let (strict, lenient) = (unique("strict"), unique("lenient"));
    for (name, tolerate) in [(&strict, "0.5"), (&lenient, "0.7")] {
        w.create::<ImagePrePullJob>(prepull(
            name,
            json!({"images": ["a/b:1"], "failureTolerate": tolerate,
                "labelSelector": {"matchLabels": {"fleet": p}}}),
        ))
        .await;
    }
    for name in [&strict, &lenient] {
        let j = w
            .node_phase("ImagePrePullJob", name, &ok, "InProgress")
            .await;
        assert_eq!(j["nodeName"], ok.as_str());
        let job = w.get("ImagePrePullJob", name).await.unwrap();
        assert_eq!(
            entry(&job, &cloud).unwrap()["reason"],
            "the node is not an edge node"
        );
        assert_eq!(
            entry(&job, &unready).unwrap()["reason"],
            "the node is not ready"
        );
        r.report("imageprepulljob", name, &ok, "Check", true).await;
        r.report("imageprepulljob", name, &ok, "Pull", true).await;
    }
    // 2 of 3 failed: 0.67 > 0.5 fails the job, 0.67 <= 0.7 completes it.
    let j = w.phase("ImagePrePullJob", &strict, "Failure").await;
    assert_eq!(
        j["status"]["reason"],
        "the number of failed nodes is 2/3, which exceeds the failure tolerance threshold"
    );
    w.phase("ImagePrePullJob", &lenient, "Completed").await;
    // By name: an unknown node fails on its own; a repeated name gets one entry.
    let named = unique("named");
    w.create::<ImagePrePullJob>(prepull(
        &named,
        json!({"images": ["a/b:1"], "nodeNames": [ok, "no-such-node", ok, "Bad_Name"],
            "failureTolerate": "1"}),
    ))
    .await;
    let j = w
        .node_phase("ImagePrePullJob", &named, &ok, "InProgress")
        .await;
    assert_eq!(j["phase"], "InProgress");
    let job = w.get("ImagePrePullJob", &named).await.unwrap();
    let entries = job["status"]["nodeStatus"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{job}");
    assert_eq!(
        entry(&job, "no-such-node").unwrap()["reason"],
        "failed to get node, err: nodes \"no-such-node\" not found"
    );
    assert_eq!(
        entry(&job, "Bad_Name").unwrap()["reason"],
        "failed to get node, err: \"Bad_Name\" is not a valid node name"
    );
    r.stop().await;
}

#[actix_rt::test]
async fn a_node_may_report_only_its_own_tasks_it_was_sent() {
    test_tiers::require!(ApiServer);
    let w = World::start().await;
    let nodes = w.nodes(&unique("rep"), 3).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    // `c` is held nowhere but named elsewhere, so it stays Pending and is never sent.
    w.annotate(c, "10.9.9.9").await;
    let r = Replica::start(&w.client, "10.9.0.1", &nodes[..2]).await;
    let job = unique("victim");
    w.create::<ImagePrePullJob>(prepull(
        &job,
        json!({"images": ["a/b:1"], "nodeNames": nodes, "concurrency": 1}),
    ))
    .await;
    r.wait_check("imageprepulljob", &job, a).await;
    w.node_phase("ImagePrePullJob", &job, a, "InProgress").await;
    let before = w.get("ImagePrePullJob", &job).await.unwrap();
    let ok = json!({"action": "Pull", "succ": true, "finishTime": "2026-08-06T07:00:00Z",
        "reason": "", "extend": ""});
    // b reports as a (the resource names a, the session is b's); b reports its own task,
    // which is not sent yet (concurrency 1); b reports on c's task; a node reports on a job
    // that does not exist; an action no flow has; KubeEdge's v1alpha1 report.
    r.report_as(b, "imageprepulljob", &job, a, ok.clone()).await;
    r.report_as(b, "imageprepulljob", &job, b, ok.clone()).await;
    r.report_as(c, "imageprepulljob", &job, c, ok.clone()).await;
    r.report_as(a, "imageprepulljob", "no-such-job", a, ok.clone())
        .await;
    let mut legacy = beehive::Message::new()
        .with_route(
            "edgehub",
            "hub",
            format!("node/{a}/task/t1/node/{b}"),
            "prepull",
        )
        .with_content(beehive::Content::json(&json!({"state": "successful"})).unwrap());
    for _ in 0..100 {
        legacy = legacy.with_new_id();
        r.bus
            .endpoint("cloudhub")
            .send_to_group("taskmanager", legacy.clone())
            .await
            .unwrap();
    }
    r.report_as(
        a,
        "imageprepulljob",
        &job,
        a,
        json!({"action": "Upgrade", "succ": true, "finishTime": "", "reason": "", "extend": ""}),
    )
    .await;
    // a's own report still gets through after all of that (KubeEdge's dispatcher blocks
    // after 64 v1alpha1 messages).
    r.report("imageprepulljob", &job, a, "Check", true).await;
    let e = w
        .until(
            "ImagePrePullJob",
            &job,
            crate::support::WAIT,
            "a's Check",
            |j| entry(j, a).filter(|e| e["actionFlow"].as_array().is_some_and(|f| !f.is_empty())),
        )
        .await;
    assert_eq!(e["phase"], "InProgress");
    assert_eq!(e["actionFlow"].as_array().unwrap().len(), 1, "{e}");
    let after = w.get("ImagePrePullJob", &job).await.unwrap();
    for n in [b, c] {
        assert_eq!(entry(&after, n), entry(&before, n), "{n} untouched");
    }
    let snap = r.tm.snapshot();
    assert_eq!(snap.reports["otherNode"], 1);
    assert_eq!(snap.reports["notSent"], 2);
    assert_eq!(snap.reports["unknownJob"], 1);
    assert_eq!(snap.reports["unknownAction"], 1);
    assert_eq!(snap.reports["legacy"], 100);
    assert_eq!(snap.reports["accepted"], 1);
    assert_eq!(
        r.tm.denied(),
        vec![("taskReportOtherNode", 1), ("taskReportNotSent", 2)]
    );
    // A node cannot grow the status without bound: beyond the longest flow twice over, its
    // reports are refused.
    for i in 0..40 {
        r.report_as(
            a,
            "imageprepulljob",
            &job,
            a,
            json!({"action": "Check", "succ": true,
                "finishTime": format!("2026-08-06T08:00:{i:02}Z"), "reason": "", "extend": ""}),
        )
        .await;
    }
    w.until(
        "ImagePrePullJob",
        &job,
        crate::support::WAIT,
        "flow capped",
        |j| entry(j, a).filter(|e| e["actionFlow"].as_array().is_some_and(|f| f.len() == 16)),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let e = entry(&w.get("ImagePrePullJob", &job).await.unwrap(), a).unwrap();
    assert_eq!(e["actionFlow"].as_array().unwrap().len(), 16);
    assert!(r.tm.snapshot().reports["tooMany"] >= 24);
    r.stop().await;
}
