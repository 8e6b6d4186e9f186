//! Node jobs through the cloudcore binary and the real WebSocket, the edges scripted: each is a
//! Rust edge with a certificate from the bootstrap token that answers the task it receives the
//! way edgecore's taskManager does, including what edgecore does where this machine cannot
//! run it (an upgrade that restarts edgecore and reports again on reconnect; a config update
//! whose report is lost with the restart). Against the real API server, with `kubectl`.
//!
//! Run: `cargo test -p cloudcore-server --test cloudcore node_jobs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use beehive::{Content, Message};
use edge::hub::{HubClient, HubClientConfig, HubEvent};
use edgecore_interop::{CloudSpec, Cloudcore, EDGE_LABEL, eventually, kubectl};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubeedge_api::replicas::CLOUDCORE_ANNOTATION;
use serde_json::{Value, json};
use tokio::sync::Notify;

const WAIT: Duration = Duration::from_secs(60);

/// The node jobs tests take turns: each restarts or watches its own cloudcore.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn short_id() -> String {
    beehive::new_id().replace('-', "")[..8].to_owned()
}

/// A cloudcore of this module with its own replica address, and an admin client.
struct Cloud {
    core: Option<Cloudcore>,
    spec: CloudSpec,
    client: kube::Client,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Cloud {
    async fn start(name: &str) -> Cloud {
        let turn = TURN.lock().await;
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        let dir = std::env::temp_dir().join(format!(
            "cloudcore-node-jobs-{name}-{}-{}",
            std::process::id(),
            short_id()
        ));
        let mut spec = CloudSpec::for_testenv(&dir).expect("spec");
        spec.replica_address = Some(crate::support::replica_address());
        assert!(spec.task_manager, "the manifests enable node jobs");
        let core = Cloudcore::start(&spec)
            .await
            .unwrap_or_else(|e| panic!("cloudcore: {e}"));
        Cloud {
            core: Some(core),
            spec,
            client: k8s_testenv::client().await,
            _turn: turn,
        }
    }

    fn core(&self) -> &Cloudcore {
        self.core.as_ref().expect("cloudcore running")
    }

    /// A Ready edge Node named `name`.
    async fn node(&self, name: &str) {
        let api: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {EDGE_LABEL: "", "node-jobs-test": ""}}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
        ready(&self.client, name).await;
    }

    /// Connects a scripted edge for `node` (its Node created first) and waits until this
    /// cloudcore is named its holder.
    async fn edge(&self, node: &str) -> ScriptedEdge {
        self.node(node).await;
        let e = ScriptedEdge::connect(self.core(), node).await;
        self.held(node).await;
        e
    }

    async fn held(&self, node: &str) {
        let api: Api<Node> = Api::all(self.client.clone());
        let me = self.spec.replica_address.clone().unwrap();
        eventually(WAIT, &format!("{node} held by this cloudcore"), || async {
            let n = api.get(node).await.ok()?;
            (n.metadata.annotations?.get(CLOUDCORE_ANNOTATION)? == &me).then_some(())
        })
        .await
        .unwrap();
    }

    async fn create(&self, job: Value) {
        kubectl_apply(&job).await;
    }

    async fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let resource = format!("{kind}s.operations.kubeedge.io");
        let out = kubectl(&["get", &resource, name, "-o", "json"], None, WAIT)
            .await
            .unwrap();
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    async fn until<T>(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            let job = self.get(kind, name).await;
            if let Some(v) = job.as_ref().and_then(&check) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {WAIT:?}; the job is {}",
                serde_json::to_string_pretty(&job).unwrap()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn phase(&self, kind: &str, name: &str, phase: &str) -> Value {
        self.until(kind, name, &format!("{name} {phase}"), |j| {
            (j["status"]["phase"] == phase).then(|| j.clone())
        })
        .await
    }

    async fn node_phase(&self, kind: &str, name: &str, node: &str, phase: &str) -> Value {
        self.until(kind, name, &format!("{node} {phase}"), |j| {
            entry(j, node).filter(|e| e["phase"] == phase)
        })
        .await
    }

    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.core()
            .metrics()
            .await
            .unwrap()
            .value(name, labels)
            .unwrap_or(0.0)
    }

    async fn restart(&mut self) {
        let mut core = self.core.take().expect("running");
        assert!(core.stop().await, "graceful stop");
        self.core = Some(Cloudcore::start(&self.spec).await.expect("restart"));
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.spec.dir);
        }
    }
}

async fn ready(client: &kube::Client, name: &str) {
    Api::<Node>::all(client.clone())
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
        .unwrap();
}

async fn kubectl_apply(obj: &Value) {
    let text = serde_json::to_vec(obj).unwrap();
    let out = kubectl(&["apply", "-f", "-"], Some(&text), WAIT)
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The columns `kubectl get <resource> <name>` prints.
async fn printed_columns(resource: &str, name: &str) -> Vec<String> {
    let out = kubectl(&["get", resource, name], None, WAIT).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap_or_default();
    header.split_whitespace().map(str::to_owned).collect()
}

fn entry(job: &Value, node: &str) -> Option<Value> {
    job["status"]["nodeStatus"]
        .as_array()?
        .iter()
        .find(|e| e["nodeName"] == node)
        .cloned()
}

/// A Rust edge that answers node tasks by script.
struct ScriptedEdge {
    node: String,
    client: HubClient,
    tasks: Arc<Mutex<Vec<Message>>>,
    arrived: Arc<Notify>,
    connects: Arc<Mutex<u64>>,
}

impl ScriptedEdge {
    async fn connect(core: &Cloudcore, node: &str) -> ScriptedEdge {
        let ports = core.spec().ports;
        let token = core.token().unwrap();
        let certs = edge::hub::bootstrap(&format!("https://{}", ports.https_addr()), &token, node)
            .await
            .unwrap_or_else(|e| panic!("bootstrap of {node}: {e}"));
        let tls = Arc::new(certs.client_tls().unwrap());
        let mut config = HubClientConfig::new(node, ports.websocket_addr().to_string());
        config.backoff.initial = Duration::from_millis(200);
        config.backoff.max = Duration::from_secs(1);
        let (client, mut events) = HubClient::start(config, tls);
        let tasks: Arc<Mutex<Vec<Message>>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let connects: Arc<Mutex<u64>> = Arc::default();
        let (t, a, c) = (tasks.clone(), arrived.clone(), connects.clone());
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                match ev {
                    HubEvent::Connected => *c.lock().unwrap() += 1,
                    HubEvent::Message(m) if m.route.group == "taskmanager" => {
                        t.lock().unwrap().push(m);
                    }
                    _ => {}
                }
                a.notify_waiters();
            }
        });
        let e = ScriptedEdge {
            node: node.to_owned(),
            client,
            tasks,
            arrived,
            connects,
        };
        e.wait(|e| *e.connects.lock().unwrap() >= 1, "connected")
            .await;
        e
    }

    async fn wait(&self, check: impl Fn(&Self) -> bool, what: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let arrived = self.arrived.notified();
            if check(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!("edge {}: {what} not within {WAIT:?}", self.node);
            }
        }
    }

    /// The tasks received (each a `Check`).
    fn tasks(&self) -> Vec<Message> {
        self.tasks.lock().unwrap().clone()
    }

    /// Waits for the `n`th task; returns it.
    async fn task(&self, n: usize) -> Message {
        self.wait(|e| e.tasks.lock().unwrap().len() >= n, &format!("task {n}"))
            .await;
        self.tasks()[n - 1].clone()
    }

    /// Reports an action of a task as edgecore's taskManager does (source `websocket`, group
    /// `hub`, the resource as received).
    async fn report(&self, task: &Message, action: &str, succ: bool, extend: &str) {
        let body = json!({"action": action, "succ": succ,
            "finishTime": format!("{}", k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")),
            "reason": if succ { "" } else { "scripted failure" }, "extend": extend});
        self.report_raw(task.route.resource.as_str(), body).await;
    }

    async fn report_raw(&self, resource: &str, body: Value) {
        let msg = Message::new()
            .with_route("websocket", "hub", resource, "UpdateNodeActionStatus")
            .with_content(Content::json(&body).unwrap());
        self.client.send(msg).await.unwrap();
    }

    /// What edgecore does when keadm restarts it: the connection drops and comes back.
    async fn restart(&self) {
        let before = *self.connects.lock().unwrap();
        self.client.drop_connection();
        self.wait(
            |e| *e.connects.lock().unwrap() > before,
            "reconnected after the restart",
        )
        .await;
    }
}

impl Drop for ScriptedEdge {
    fn drop(&mut self) {
        self.client.stop();
    }
}

async fn delete_nodes(client: &kube::Client) {
    let api: Api<Node> = Api::all(client.clone());
    for n in api
        .list(&ListParams::default().labels("node-jobs-test"))
        .await
        .unwrap()
        .items
    {
        let _ = api
            .delete(
                n.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await;
    }
}

#[tokio::test]
async fn scripted_edges_run_an_image_prepull_job_through_the_websocket() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("prepull").await;
    let p = short_id();
    let names: Vec<String> = (0..3).map(|i| format!("pp-{p}-{i}")).collect();
    let mut edges = Vec::new();
    for n in &names {
        edges.push(cloud.edge(n).await);
    }
    let job = format!("prepull-{p}");
    cloud
        .create(
            json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
            "metadata": {"name": job},
            "spec": {"imagePrePullTemplate": {"images": ["nginx:1.27"], "nodeNames": names,
                "concurrency": 2}}}),
        )
        .await;
    // Two in flight: the first two edges get their task, the third waits until one of them
    // finishes.
    let t0 = edges[0].task(1).await;
    let t1 = edges[1].task(1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(edges[2].tasks().is_empty(), "at most 2 at a time");
    let mut done = 0;
    for (e, task) in [(&edges[0], t0), (&edges[1], t1)] {
        // What edgecore's taskManager receives: the untrimmed resource, operation Check,
        // the spec.
        assert_eq!(
            task.route.resource,
            format!(
                "operations.kubeedge.io/v1alpha2/imageprepulljob/{job}/node/{}",
                e.node
            )
        );
        assert_eq!(task.route.operation, "Check");
        let spec: Value = task.content.parse().unwrap();
        assert_eq!(
            spec["imagePrePullTemplate"]["images"],
            json!(["nginx:1.27"])
        );
    }
    for e in &edges {
        let task = e.task(1).await;
        e.report(&task, "Check", true, "").await;
        e.report(
            &task,
            "Pull",
            true,
            r#"[{"image":"nginx:1.27","status":"True"}]"#,
        )
        .await;
        cloud
            .node_phase("imageprepulljob", &job, &e.node, "Successful")
            .await;
        done += 1;
    }
    assert_eq!(done, 3);
    let j = cloud.phase("imageprepulljob", &job, "Completed").await;
    for n in &names {
        assert_eq!(entry(&j, n).unwrap()["imageStatus"][0]["status"], "True");
    }
    for e in &edges {
        assert_eq!(e.tasks().len(), 1, "{} got its task once", e.node);
    }
    assert_eq!(
        cloud
            .metric(
                "taskmanager_tasks_sent_total",
                &[("kind", "ImagePrePullJob")]
            )
            .await,
        3.0
    );
    assert_eq!(
        cloud
            .metric(
                "taskmanager_node_results_total",
                &[("kind", "ImagePrePullJob"), ("phase", "Successful")]
            )
            .await,
        3.0
    );
    // The gauge of jobs by phase follows within its one-second refresh.
    eventually(WAIT, "the Completed job counted", || async {
        let n = cloud
            .metric(
                "taskmanager_jobs",
                &[("kind", "ImagePrePullJob"), ("phase", "Completed")],
            )
            .await;
        (n >= 1.0).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        cloud
            .metric(
                "taskmanager_node_task_duration_seconds_count",
                &[("kind", "ImagePrePullJob")]
            )
            .await,
        3.0,
        "one duration per node sent"
    );
    // `kubectl get` prints what KubeEdge's CRDs print: NAME and AGE.
    assert_eq!(
        printed_columns("imageprepulljobs", &job).await,
        ["NAME", "AGE"]
    );
    delete_nodes(&cloud.client).await;
}

#[tokio::test]
async fn the_upgrade_state_machine_beyond_what_the_real_edge_runs_here() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("upgrade").await;
    let p = short_id();
    let (a, b) = (format!("up-{p}-a"), format!("up-{p}-b"));
    let ea = cloud.edge(&a).await;
    let eb = cloud.edge(&b).await;
    let job = format!("upgrade-{p}");
    cloud
        .create(
            json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "NodeUpgradeJob",
            "metadata": {"name": job},
            "spec": {"version": "v1.23.0", "image": "127.0.0.1:5000/kubeedge/installation-package",
                "nodeNames": [a, b], "concurrency": 2, "timeoutSeconds": 8,
                "requireConfirmation": false}}),
        )
        .await;
    // a: the whole flow as edgecore runs it. keadm stops edgecore during Upgrade, so the
    // in-process report usually never leaves; the new edgecore reports Upgrade from keadm's
    // report file when it reconnects; with both arriving, the second changes nothing.
    let task = ea.task(1).await;
    let spec: Value = task.content.parse().unwrap();
    assert_eq!(
        spec["image"],
        "127.0.0.1:5000/kubeedge/installation-package"
    );
    ea.report(&task, "Check", true, "").await;
    ea.report(&task, "WaitingConfirmation", true, "").await;
    ea.report(&task, "BackUp", true, "v1.22.1,v1.23.0").await;
    ea.restart().await;
    let upgraded = json!({"action": "Upgrade", "succ": true, "finishTime": "2026-08-06T07:02:00Z",
        "reason": "", "extend": "v1.22.1,v1.23.0"});
    ea.report_raw(task.route.resource.as_str(), upgraded.clone())
        .await;
    ea.report_raw(task.route.resource.as_str(), upgraded).await;
    let e = cloud
        .node_phase("nodeupgradejob", &job, &a, "Successful")
        .await;
    assert_eq!(e["actionFlow"].as_array().unwrap().len(), 4, "{e}");
    assert_eq!(
        (e["historicVersion"].as_str(), e["currentVersion"].as_str()),
        (Some("v1.22.1"), Some("v1.23.0"))
    );
    // b: the upgrade fails and keadm rolls back; the rolled-back node counts as successful
    // (KubeEdge's rule), the action flow shows what happened.
    let task = eb.task(1).await;
    for (action, ok) in [
        ("Check", true),
        ("WaitingConfirmation", true),
        ("BackUp", true),
    ] {
        eb.report(&task, action, ok, "v1.22.1,v1.23.0").await;
    }
    eb.restart().await;
    eb.report(&task, "Upgrade", false, "v1.22.1,v1.23.0").await;
    let e = cloud
        .until("nodeupgradejob", &job, "b rolling back", |j| {
            entry(j, &b).filter(|e| e["actionFlow"].as_array().is_some_and(|f| f.len() == 4))
        })
        .await;
    assert_eq!(e["phase"], "InProgress");
    eb.restart().await;
    eb.report(&task, "RollBack", true, "v1.23.0,v1.22.1").await;
    cloud
        .node_phase("nodeupgradejob", &job, &b, "Successful")
        .await;
    cloud.phase("nodeupgradejob", &job, "Completed").await;
    assert_eq!(
        (ea.tasks().len(), eb.tasks().len()),
        (1, 1),
        "no task sent twice"
    );
    assert_eq!(
        printed_columns("nodeupgradejobs", &job).await,
        ["NAME", "AGE"]
    );

    // With requireConfirmation the edge stops after WaitingConfirmation until someone runs
    // `keadm ctl confirm` on it: the node stays InProgress, and without confirmation times
    // out like any node that makes no progress; the confirmed upgrade's final report still
    // lands.
    let confirm = format!("confirm-{p}");
    cloud
        .create(
            json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "NodeUpgradeJob",
            "metadata": {"name": confirm},
            "spec": {"version": "v1.23.1", "nodeNames": [a], "timeoutSeconds": 4,
                "requireConfirmation": true}}),
        )
        .await;
    let task = ea.task(2).await;
    assert_eq!(
        task.content.parse::<Value>().unwrap()["requireConfirmation"],
        true
    );
    ea.report(&task, "Check", true, "").await;
    ea.report(&task, "WaitingConfirmation", true, "").await;
    let e = cloud
        .node_phase("nodeupgradejob", &confirm, &a, "Unknown")
        .await;
    assert_eq!(e["reason"], "The node task has timed out");
    cloud.phase("nodeupgradejob", &confirm, "Failure").await;
    ea.report(&task, "BackUp", true, "v1.23.0,v1.23.1").await;
    ea.report(&task, "Upgrade", true, "v1.23.0,v1.23.1").await;
    cloud
        .node_phase("nodeupgradejob", &confirm, &a, "Successful")
        .await;
    // A failed NodeUpgradeJob is recomputed (KubeEdge's rule): the late result completes it.
    cloud.phase("nodeupgradejob", &confirm, "Completed").await;
    delete_nodes(&cloud.client).await;
}

#[tokio::test]
async fn a_config_update_whose_report_is_lost_in_the_restart_times_out() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("config").await;
    let p = short_id();
    let n = format!("cu-{p}");
    let e = cloud.edge(&n).await;
    let job = format!("config-{p}");
    cloud
        .create(
            json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ConfigUpdateJob",
            "metadata": {"name": job},
            "spec": {"nodeNames": [n], "timeoutSeconds": 4,
                "updateFields": {"modules.edgeHub.heartbeat": "20"}}}),
        )
        .await;
    let task = e.task(1).await;
    assert_eq!(
        task.content.parse::<Value>().unwrap()["updateFields"],
        json!({"modules.edgeHub.heartbeat": "20"})
    );
    // Exactly what edgecore sends: no finishTime.
    for action in ["Check", "BackUp"] {
        e.report_raw(
            task.route.resource.as_str(),
            json!({"action": action, "succ": true, "reason": "", "extend": ""}),
        )
        .await;
    }
    // `keadm config-update` restarts edgecore synchronously: the Update report dies with it,
    // and the restarted edgecore does not report config updates.
    e.restart().await;
    let started = Instant::now();
    let entry = cloud
        .node_phase("configupdatejob", &job, &n, "Unknown")
        .await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(entry["reason"], "The node task has timed out");
    let flow = entry["actionFlow"].as_array().unwrap();
    assert_eq!(flow.len(), 2);
    assert!(
        !flow[0]["time"].as_str().unwrap().is_empty(),
        "the cloud's time"
    );
    cloud.phase("configupdatejob", &job, "Failure").await;
    delete_nodes(&cloud.client).await;
}

#[tokio::test]
async fn cloudcore_restarted_mid_job_resumes_and_sends_no_task_twice() {
    test_tiers::require!(ApiServer);
    let mut cloud = Cloud::start("restart").await;
    let p = short_id();
    let names: Vec<String> = (0..3).map(|i| format!("rs-{p}-{i}")).collect();
    let mut edges = Vec::new();
    for n in &names {
        edges.push(cloud.edge(n).await);
    }
    // A node that is offline at the start: no session anywhere.
    let offline = format!("rs-{p}-offline");
    cloud.node(&offline).await;
    let job = format!("resume-{p}");
    let mut all = names.clone();
    all.push(offline.clone());
    cloud
        .create(
            json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
            "metadata": {"name": job},
            "spec": {"imagePrePullTemplate": {"images": ["a/b:1"], "nodeNames": all,
                "failureTolerate": "0.3"}}}),
        )
        .await;
    let first = edges[0].task(1).await;
    edges[0].report(&first, "Check", true, "").await;
    cloud
        .until("imageprepulljob", &job, "Check recorded", |j| {
            entry(j, &names[0]).filter(|e| !e["actionFlow"].is_null())
        })
        .await;
    cloud.restart().await;
    for n in &names {
        cloud.held(n).await;
    }
    // The node in flight keeps its slot across the restart: nothing else is sent until it
    // finishes, and it is not sent again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(edges[0].tasks().len(), 1);
    assert!(edges[1].tasks().is_empty());
    edges[0].report(&first, "Pull", true, "").await;
    for e in &edges[1..] {
        let t = e.task(1).await;
        e.report(&t, "Check", true, "").await;
        e.report(&t, "Pull", true, "").await;
    }
    let j = cloud.phase("imageprepulljob", &job, "Completed").await;
    assert_eq!(
        entry(&j, &offline).unwrap()["reason"],
        format!("the node {offline} is not connected to the current cloudcore instance")
    );
    for e in &edges {
        assert_eq!(e.tasks().len(), 1, "{}: one task", e.node);
    }
    delete_nodes(&cloud.client).await;
}
