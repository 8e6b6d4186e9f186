//! What the topics share: the cluster (CRDs, Nodes, jobs), a taskmanager on a bus of its own
//! with the edge captured, reports as cloudhub forwards them, and polling for a status.

use std::time::Duration;

use beehive::{Bus, Content, Message};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::operations::v1alpha2::{ConfigUpdateJob, ImagePrePullJob, NodeUpgradeJob};
use kubeedge_api::replicas::Ownership;
use kubeedge_api::testing::FakeEdge;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use taskmanager::{TaskManager, TaskManagerConfig};

/// How long a test waits for something that should happen.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// The tests take turns: every taskmanager acts on every job of the cluster.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One test's world: its turn, a clean cluster and an admin client.
pub(crate) struct World {
    pub(crate) client: kube::Client,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// `prefix-<8 hex>`.
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id().replace('-', "")[..8])
}

impl World {
    /// Takes this test's turn, installs the CRDs and deletes every job and test Node left
    /// by an earlier test.
    pub(crate) async fn start() -> World {
        let turn = TURN.lock().await;
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info,taskmanager=debug".into()),
            )
            .with_test_writer()
            .try_init();
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        let client = k8s_testenv::client().await;
        let w = World {
            client,
            _turn: turn,
        };
        w.delete_all::<NodeUpgradeJob>().await;
        w.delete_all::<ImagePrePullJob>().await;
        w.delete_all::<ConfigUpdateJob>().await;
        let nodes: Api<Node> = Api::all(w.client.clone());
        let old = nodes
            .list(&ListParams::default().labels("taskmanager-test"))
            .await
            .unwrap();
        for n in old.items {
            let _ = nodes.delete(&n.name_any(), &DeleteParams::default()).await;
        }
        w
    }

    async fn delete_all<K>(&self)
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        for job in api.list(&ListParams::default()).await.unwrap().items {
            let name = job.name_any();
            let _ = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
    }

    /// A Node labelled as an edge node (unless `edge` is false), Ready (unless `ready` is
    /// false), with the extra `labels`.
    pub(crate) async fn node(&self, name: &str, edge: bool, ready: bool, labels: &[(&str, &str)]) {
        let mut l = serde_json::Map::new();
        l.insert("taskmanager-test".into(), "".into());
        if edge {
            l.insert("node-role.kubernetes.io/edge".into(), "".into());
        }
        for (k, v) in labels {
            l.insert((*k).into(), (*v).into());
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": l}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = if ready { "True" } else { "False" };
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{
                    "type": "Ready", "status": status, "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
            )
            .await
            .unwrap();
    }

    /// `n` ready edge nodes named `<prefix>-<i>`.
    pub(crate) async fn nodes(&self, prefix: &str, n: usize) -> Vec<String> {
        let mut names = Vec::new();
        for i in 0..n {
            let name = format!("{prefix}-{i}");
            self.node(&name, true, true, &[]).await;
            names.push(name);
        }
        names
    }

    /// Sets the `cloudcore` annotation of `node` (which replica holds it).
    pub(crate) async fn annotate(&self, node: &str, replica: &str) {
        Api::<Node>::all(self.client.clone())
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"cloudcore": replica}}})),
            )
            .await
            .unwrap();
    }

    /// Creates a job from its JSON (apiVersion and kind included).
    pub(crate) async fn create<K>(&self, job: Value) -> K
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let job: K = serde_json::from_value(job).unwrap();
        Api::<K>::all(self.client.clone())
            .create(&PostParams::default(), &job)
            .await
            .unwrap()
    }

    /// The job as JSON now.
    pub(crate) async fn get(&self, kind: &str, name: &str) -> Option<Value> {
        let plural = format!("{}s", kind.to_lowercase());
        let ar = kube::core::ApiResource {
            group: "operations.kubeedge.io".into(),
            version: "v1alpha2".into(),
            api_version: "operations.kubeedge.io/v1alpha2".into(),
            kind: kind.into(),
            plural,
        };
        let api: Api<kube::core::DynamicObject> = Api::all_with(self.client.clone(), &ar);
        api.get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// Polls the job until `check` returns `Some`, at most `limit`; panics with the last
    /// status otherwise.
    pub(crate) async fn until<T>(
        &self,
        kind: &str,
        name: &str,
        limit: Duration,
        what: &str,
        check: impl Fn(&Value) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let job = self.get(kind, name).await;
            if let Some(v) = job.as_ref().and_then(&check) {
                return v;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{what}: not within {limit:?}; the job is {}",
                    serde_json::to_string_pretty(&job).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the job's phase is `phase`, returning the job.
    pub(crate) async fn phase(&self, kind: &str, name: &str, phase: &str) -> Value {
        self.until(kind, name, WAIT, &format!("job {name} {phase}"), |j| {
            (j["status"]["phase"] == phase).then(|| j.clone())
        })
        .await
    }

    /// Waits until node `node`'s task is in `phase`, returning its entry.
    pub(crate) async fn node_phase(
        &self,
        kind: &str,
        name: &str,
        node: &str,
        phase: &str,
    ) -> Value {
        self.until(
            kind,
            name,
            WAIT,
            &format!("{node} {phase} in {name}"),
            |j| entry(j, node).filter(|e| e["phase"] == phase),
        )
        .await
    }
}

/// The `nodeStatus` entry of `node`.
pub(crate) fn entry(job: &Value, node: &str) -> Option<Value> {
    job["status"]["nodeStatus"]
        .as_array()?
        .iter()
        .find(|e| e["nodeName"] == node)
        .cloned()
}

/// A taskmanager on a bus of its own, as one replica: `address` names it, the test says
/// which nodes it holds.
pub(crate) struct Replica {
    pub(crate) bus: Bus,
    pub(crate) edge: FakeEdge,
    pub(crate) tm: taskmanager::TaskManagerMetrics,
    /// Which nodes this replica holds (the test connects and disconnects them).
    pub(crate) ownership: Ownership,
    life: kubeedge_api::lifecycle::Lifecycle,
    follow: kubeedge_api::lifecycle::Lifecycle,
}

impl Replica {
    /// Starts a taskmanager (job controller on) holding `held`.
    pub(crate) async fn start(client: &kube::Client, address: &str, held: &[String]) -> Replica {
        Self::start_with(client, address, held, true).await
    }

    /// [`Replica::start`] with the job controller on or off.
    pub(crate) async fn start_with(
        client: &kube::Client,
        address: &str,
        held: &[String],
        controller: bool,
    ) -> Replica {
        let bus = Bus::new();
        let edge = FakeEdge::register(&bus, "cloudhub");
        let ownership = Ownership::new(address);
        let follow = kubeedge_api::lifecycle::Lifecycle::new();
        follow.spawn(
            ownership
                .clone()
                .follow(client.clone(), follow.token().clone()),
        );
        tokio::time::timeout(WAIT, ownership.listed())
            .await
            .expect("nodes listed");
        for n in held {
            ownership.hold(n);
        }
        let config = TaskManagerConfig {
            enable: true,
            job_controller: controller,
            ..TaskManagerConfig::default()
        };
        let module = TaskManager::new(
            config,
            bus.endpoint("taskmanager"),
            client.clone(),
            ownership.clone(),
        );
        let tm = module.metrics();
        let life = module.lifecycle();
        bus.register(module).unwrap();
        bus.start().unwrap();
        Replica {
            bus,
            edge,
            tm,
            ownership,
            life,
            follow,
        }
    }

    /// Stops the taskmanager (as a process would stop).
    pub(crate) async fn stop(self) {
        self.bus.shutdown().await;
        self.life.stop();
        assert!(self.life.join(Duration::from_secs(5)).await, "engines stop");
        self.follow.stop();
    }

    /// The `Check` messages sent to `node` for job `job`.
    pub(crate) fn checks(&self, kind: &str, job: &str, node: &str) -> Vec<Message> {
        let resource = format!("operations.kubeedge.io/v1alpha2/{kind}/{job}/node/{node}");
        self.edge
            .matching(|m| m.route.resource == resource && m.route.operation == "Check")
    }

    /// Every node sent a `Check` for `job`, in order.
    pub(crate) fn sent_nodes(&self, kind: &str, job: &str) -> Vec<String> {
        let prefix = format!("operations.kubeedge.io/v1alpha2/{kind}/{job}/node/");
        self.edge
            .matching(|m| m.route.operation == "Check" && m.route.resource.starts_with(&prefix))
            .iter()
            .map(|m| m.route.resource[prefix.len()..].to_owned())
            .collect()
    }

    /// Waits until `node` was sent the task of `job`; returns the message.
    pub(crate) async fn wait_check(&self, kind: &str, job: &str, node: &str) -> Message {
        let resource = format!("operations.kubeedge.io/v1alpha2/{kind}/{job}/node/{node}");
        self.edge
            .wait_for(WAIT, |m| {
                m.route.resource == resource && m.route.operation == "Check"
            })
            .await
            .unwrap_or_else(|| panic!("no Check for {node} in {job}"))
    }

    /// Injects a report from `session` about `node`'s task of `job`, as cloudhub forwards
    /// what an edge sent (`node/<session>/` in front of the resource).
    pub(crate) async fn report_as(
        &self,
        session: &str,
        kind: &str,
        job: &str,
        node: &str,
        content: Value,
    ) {
        let msg = Message::new()
            .with_route(
                "edgehub",
                "hub",
                format!("node/{session}/operations.kubeedge.io/v1alpha2/{kind}/{job}/node/{node}"),
                "UpdateNodeActionStatus",
            )
            .with_content(Content::json(&content).unwrap());
        self.bus
            .endpoint("cloudhub")
            .send_to_group("taskmanager", msg)
            .await
            .unwrap();
    }

    /// A report of `node` about its own task.
    pub(crate) async fn report(&self, kind: &str, job: &str, node: &str, action: &str, succ: bool) {
        self.report_with(kind, job, node, action, succ, "").await;
    }

    /// A report of `node` about its own task, with `extend`.
    pub(crate) async fn report_with(
        &self,
        kind: &str,
        job: &str,
        node: &str,
        action: &str,
        succ: bool,
        extend: &str,
    ) {
        let content = json!({"action": action, "succ": succ,
            "finishTime": "2026-08-06T07:00:00Z",
            "reason": if succ { "" } else { "it failed" }, "extend": extend});
        self.report_as(node, kind, job, node, content).await;
    }
}
