//! Node job reports (module taskmanager) from a hostile edge: it may report only on its own
//! task of a job it was sent, and cannot grow a job's status without bound. KubeEdge applies
//! a report to whatever node and job its resource names. Every refusal leaves the job as the
//! API server had it (read back as admin) and is counted.

use super::*;
use kubeedge_api::operations::v1alpha2::ImagePrePullJob;

/// `cloudcore_node_authorization_denied_total{module="taskmanager",kind}`.
async fn task_denied(kind: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value(DENIED, &[("module", "taskmanager"), ("kind", kind)])
        .unwrap_or(0.0)
}

/// `taskmanager_reports_total{outcome}`.
async fn reports(outcome: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value("taskmanager_reports_total", &[("outcome", outcome)])
        .unwrap_or(0.0)
}

/// An admin client of the suite's cluster (its cloudcore started).
struct Jobs {
    client: kube::Client,
}

impl Jobs {
    async fn new() -> Jobs {
        let _ = cloud();
        Jobs {
            client: k8s_testenv::client().await,
        }
    }
}

/// Tests that count the taskmanager's refusals take turns.
static REPORT_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An edge Node, Ready, and a connected edge for it.
async fn ready_edge(s: &Jobs, name: &str) -> Edge {
    edge_node(&s.client, name).await;
    Api::<Node>::all(s.client.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                "reason": "KubeletReady", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
            ),
        )
        .await
        .expect("node Ready");
    Edge::connect(name).await
}

/// An ImagePrePullJob for `nodes`, created as admin.
async fn job_for(s: &Jobs, nodes: &[&str]) -> String {
    let name = unique("job");
    let job: ImagePrePullJob = from(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name},
        "spec": {"imagePrePullTemplate": {"images": ["nginx:1.27"], "nodeNames": nodes,
            "concurrency": 1}}}));
    create(Api::<ImagePrePullJob>::all(s.client.clone()), &job).await;
    name
}

/// The task resource edgecore reports on.
fn task(job: &str, node: &str) -> String {
    format!("operations.kubeedge.io/v1alpha2/imageprepulljob/{job}/node/{node}")
}

/// A report as edgecore's taskManager sends it (no answer comes back).
async fn report(edge: &Edge, job: &str, node: &str, action: &str, succ: bool, time: &str) {
    let body = json!({"action": action, "succ": succ, "finishTime": time,
        "reason": "", "extend": ""});
    let _ = edge
        .send_as(
            "websocket",
            "hub",
            &task(job, node),
            "UpdateNodeActionStatus",
            json_content(&body),
        )
        .await;
}

async fn job_status(s: &Jobs, job: &str) -> Value {
    to_value(
        &Api::<ImagePrePullJob>::all(s.client.clone())
            .get(job)
            .await
            .expect("the job"),
    )["status"]
        .clone()
}

fn node_entry(status: &Value, node: &str) -> Value {
    status["nodeStatus"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["nodeName"] == node))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Waits until `node`'s task of `job` is `InProgress` (sent) and returns the status.
async fn sent(s: &Jobs, job: &str, node: &str) -> Value {
    eventually(WAIT, "the task sent", || async {
        let st = job_status(s, job).await;
        (node_entry(&st, node)["phase"] == "InProgress").then_some(st)
    })
    .await
    .expect("the victim's task is sent")
}

#[tokio::test]
async fn an_edge_cannot_report_on_another_nodes_task() {
    test_tiers::require!(ApiServer);
    let _turn = REPORT_TURN.lock().await;
    let s = Jobs::new().await;
    let victim = ready_edge(&s, &unique("victim")).await;
    let attacker = ready_edge(&s, &unique("attacker")).await;
    let job = job_for(&s, &[&victim.node]).await;
    victim
        .pushed_where("the victim's task", |m| {
            m.route.resource == task(&job, &victim.node) && m.route.operation == "Check"
        })
        .await;
    let before = sent(&s, &job, &victim.node).await;
    let denied = task_denied("taskReportOtherNode").await;
    // The attacker claims the victim's pull succeeded (KubeEdge would write it).
    report(
        &attacker,
        &job,
        &victim.node,
        "Check",
        true,
        "2026-08-06T07:00:00Z",
    )
    .await;
    report(
        &attacker,
        &job,
        &victim.node,
        "Pull",
        true,
        "2026-08-06T07:00:01Z",
    )
    .await;
    eventually(WAIT, "both refusals counted", || async {
        (task_denied("taskReportOtherNode").await >= denied + 2.0).then_some(())
    })
    .await
    .expect("counted");
    assert_eq!(task_denied("taskReportOtherNode").await, denied + 2.0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        node_entry(&job_status(&s, &job).await, &victim.node),
        node_entry(&before, &victim.node),
        "the victim's task is untouched"
    );
    // The victim's own report still lands.
    report(
        &victim,
        &job,
        &victim.node,
        "Check",
        true,
        "2026-08-06T07:00:02Z",
    )
    .await;
    eventually(WAIT, "the victim's report", || async {
        let st = job_status(&s, &job).await;
        node_entry(&st, &victim.node)["actionFlow"][0]["action"]
            .as_str()
            .map(|_| ())
    })
    .await
    .expect("the victim reports its own task");
}

#[tokio::test]
async fn an_edge_cannot_report_on_a_task_it_was_not_sent() {
    test_tiers::require!(ApiServer);
    let _turn = REPORT_TURN.lock().await;
    let s = Jobs::new().await;
    let a = ready_edge(&s, &unique("a")).await;
    let b = ready_edge(&s, &unique("b")).await;
    // One at a time: a is sent first, b waits.
    let job = job_for(&s, &[&a.node, &b.node]).await;
    let before = sent(&s, &job, &a.node).await;
    assert_eq!(node_entry(&before, &b.node)["phase"], "Pending");
    let (not_sent, unknown) = (
        task_denied("taskReportNotSent").await,
        reports("unknownJob").await,
    );
    // b reports its own task before it was sent, and on a job that does not exist.
    report(&b, &job, &b.node, "Pull", true, "2026-08-06T07:00:00Z").await;
    report(
        &b,
        "no-such-job",
        &b.node,
        "Pull",
        true,
        "2026-08-06T07:00:00Z",
    )
    .await;
    eventually(WAIT, "refusals counted", || async {
        let done = task_denied("taskReportNotSent").await >= not_sent + 1.0
            && reports("unknownJob").await >= unknown + 1.0;
        done.then_some(())
    })
    .await
    .expect("counted");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = job_status(&s, &job).await;
    assert_eq!(node_entry(&after, &b.node), node_entry(&before, &b.node));
    assert!(
        b.pushed
            .lock()
            .unwrap()
            .iter()
            .all(|m| m.route.operation != "Check"),
        "b was sent nothing"
    );
}

#[tokio::test]
async fn an_edge_cannot_grow_a_jobs_status_without_bound() {
    test_tiers::require!(ApiServer);
    let _turn = REPORT_TURN.lock().await;
    let s = Jobs::new().await;
    let e = ready_edge(&s, &unique("flood")).await;
    let job = job_for(&s, &[&e.node]).await;
    sent(&s, &job, &e.node).await;
    let too_many = reports("tooMany").await;
    // Three times the cap of 16 entries: each report is applied or refused through the API
    // server (impersonated: one more round trip each), and on a machine other test binaries
    // load too a flood of hundreds took longer than the wait below.
    const SENT: u32 = 48;
    for i in 0..SENT {
        let time = format!("2026-08-06T07:{:02}:{:02}Z", i / 60, i % 60);
        report(&e, &job, &e.node, "Check", true, &time).await;
    }
    eventually(4 * WAIT, "the rest refused", || async {
        (reports("tooMany").await >= too_many + f64::from(SENT - 16)).then_some(())
    })
    .await
    .expect("a node's reports beyond the cap are refused");
    let st = job_status(&s, &job).await;
    let flow = node_entry(&st, &e.node)["actionFlow"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    assert_eq!(flow, 16, "the longest flow twice over, with room");
}

#[tokio::test]
async fn v1alpha1_task_reports_are_dropped() {
    test_tiers::require!(ApiServer);
    let _turn = REPORT_TURN.lock().await;
    let s = Jobs::new().await;
    let e = ready_edge(&s, &unique("legacy")).await;
    let legacy = reports("legacy").await;
    // KubeEdge's v1alpha1 traffic, through the WebSocket: no v1alpha2 job is touched and the
    // v1alpha2 reports behind it still get through (KubeEdge blocks after 64 of these).
    for _ in 0..70 {
        let _ = e
            .send_as(
                "websocket",
                "hub",
                &format!("task/t1/node/{}", e.node),
                "prepull",
                json_content(&json!({"NodeName": e.node, "State": "successful"})),
            )
            .await;
    }
    let job = job_for(&s, &[&e.node]).await;
    sent(&s, &job, &e.node).await;
    report(&e, &job, &e.node, "Check", true, "2026-08-06T07:00:00Z").await;
    eventually(WAIT, "the v1alpha2 report lands", || async {
        let st = job_status(&s, &job).await;
        node_entry(&st, &e.node)["actionFlow"][0]["action"]
            .as_str()
            .map(|_| ())
    })
    .await
    .expect("not blocked");
    assert!(reports("legacy").await >= legacy + 70.0);
}
