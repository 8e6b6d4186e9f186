//! Shared set-up of the edgecontroller tests: a real API server (k8s-testenv), the controller on
//! a bus, and a fake edge (an inbox named `cloudhub`) on the other side.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::time::Duration;

use beehive::{Bus, Content, Message};
use edgecontroller::{EdgeController, EdgeControllerConfig, EdgeControllerMetrics, Synced};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names;
use kubeedge_api::testing::{FakeEdge, Faults, faulty_client};
use serde_json::{Value, json};

/// The address the controller writes to the `cloudcore` annotation in tests.
pub const CLOUDCORE_IP: &str = "192.0.2.10";
/// How long tests wait for something that should happen.
pub const WAIT: Duration = Duration::from_secs(20);
/// How long tests watch for something that must not happen.
pub const QUIET: Duration = Duration::from_millis(1500);

pub struct Env {
    pub bus: Bus,
    pub edge: FakeEdge,
    pub client: kube::Client,
    pub metrics: EdgeControllerMetrics,
    pub life: Lifecycle,
    pub synced: Synced,
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A client of the test API server whose requests can be failed on purpose.
pub async fn faulty() -> (kube::Client, Faults) {
    faulty_client(k8s_testenv::config().await)
}

/// Starts an edgecontroller (configured by `f`) on a new bus with a fake edge and waits
/// until its caches have listed.
pub async fn start_with(
    client: kube::Client,
    config: EdgeControllerConfig,
    f: impl FnOnce(EdgeController) -> EdgeController,
) -> Env {
    init_tracing();
    let admin = k8s_testenv::client().await;
    let bus = Bus::new();
    let edge = FakeEdge::register(&bus, "cloudhub");
    let ec = f(
        EdgeController::new(config, bus.endpoint("edgecontroller"), client)
            .with_cloudcore_ip(CLOUDCORE_IP)
            .with_cache_wait(Duration::from_secs(5)),
    );
    let (metrics, life, synced) = (ec.metrics(), ec.lifecycle(), ec.synced());
    bus.register(ec).expect("register");
    bus.start().expect("start");
    tokio::time::timeout(WAIT, synced.wait())
        .await
        .expect("caches synced");
    Env {
        bus,
        edge,
        client: admin,
        metrics,
        life,
        synced,
    }
}

/// The default controller.
pub async fn start() -> Env {
    let client = k8s_testenv::client().await;
    start_with(client, EdgeControllerConfig::default(), |ec| ec).await
}

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid_like()[..8])
}

fn uuid_like() -> String {
    beehive::new_id().replace('-', "")
}

/// Creates a Node with these labels.
pub async fn node_with_labels(client: &kube::Client, name: &str, labels: &[(&str, &str)]) -> Node {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create node")
}

/// Creates an edge Node (label `node-role.kubernetes.io/edge: ""`).
pub async fn edge_node(client: &kube::Client, name: &str) -> Node {
    node_with_labels(client, name, &[("node-role.kubernetes.io/edge", "")]).await
}

/// Creates a pod bound to `node`; `spec` is merged into a one-container spec.
pub async fn pod_with(client: &kube::Client, ns: &str, name: &str, node: &str, spec: Value) -> Pod {
    let mut base = json!({"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]});
    if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": base})).unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

/// Creates a plain pod bound to `node`.
pub async fn pod(client: &kube::Client, ns: &str, name: &str, node: &str) -> Pod {
    pod_with(client, ns, name, node, json!({})).await
}

/// A pod spec fragment mounting ConfigMap `cm` as a volume.
pub fn mounting_configmap(cm: &str) -> Value {
    json!({"volumes": [{"name": "v", "configMap": {"name": cm}}]})
}

/// Creates a ConfigMap.
pub async fn configmap(
    client: &kube::Client,
    ns: &str,
    name: &str,
    data: &[(&str, &str)],
) -> ConfigMap {
    let data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap")
}

/// Sets one data key of a ConfigMap.
pub async fn update_configmap(
    client: &kube::Client,
    ns: &str,
    name: &str,
    key: &str,
    value: &str,
) -> ConfigMap {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {key: value}})),
        )
        .await
        .expect("update configmap")
}

/// Creates a Secret.
pub async fn secret(client: &kube::Client, ns: &str, name: &str) -> Secret {
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}}))
            .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .expect("create secret")
}

/// Deletes a pod at once (grace period 0).
pub async fn force_delete_pod(client: &kube::Client, ns: &str, name: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
}

/// Matches messages with this resource and operation.
pub fn is(resource: String, op: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.route.resource == resource && m.route.operation == op
}

/// Matches messages with this resource.
pub fn at(resource: String) -> impl Fn(&Message) -> bool {
    move |m| m.route.resource == resource
}

/// Matches messages for this node.
pub fn for_node(node: &str) -> impl Fn(&Message) -> bool {
    let prefix = format!("node/{node}/");
    move |m| m.route.resource.starts_with(&prefix)
}

/// The content as JSON.
pub fn body(m: &Message) -> Value {
    serde_json::from_str(m.content.as_json()).expect("JSON content")
}

/// The `(code, reason)` of a raw error reply (`{"ErrStatus": {...}}`).
pub fn err_status(reply: &Value) -> (Option<u64>, Option<&str>) {
    (
        reply["ErrStatus"]["code"].as_u64(),
        reply["ErrStatus"]["reason"].as_str(),
    )
}

/// A request as edged sends it, after cloudhub prefixed the resource.
pub fn request(resource: &str, op: &str, content: Content) -> Message {
    let mut m = Message::new()
        .with_route("edged", "meta", resource, op)
        .with_content(content);
    m.header.sync = true;
    m
}

/// JSON content.
pub fn content(v: Value) -> Content {
    Content::json(&v).unwrap()
}

impl Env {
    /// Injects `msg` as cloudhub relays an edge's message: to every module of group
    /// `edgecontroller`, from cloudhub's edge relay endpoint (bus sender `cloudhub/edge`).
    pub async fn inject(&self, msg: Message) {
        self.inject_from(
            &self
                .bus
                .endpoint(names::CLOUDHUB)
                .sub(names::EDGE_RELAY_ROLE),
            msg,
        )
        .await
    }

    /// Injects `msg` as cloudhub's own node event (bus sender `cloudhub`).
    pub async fn hub_event(&self, msg: Message) {
        self.inject_from(&self.bus.endpoint(names::CLOUDHUB), msg)
            .await
    }

    /// Injects `msg` to group `edgecontroller` through `from`.
    pub async fn inject_from(&self, from: &beehive::Endpoint, msg: Message) {
        from.send_to_group("edgecontroller", msg)
            .await
            .expect("inject");
    }

    /// Injects `req` and waits for the answer whose parent id is the request id.
    pub async fn ask(&self, req: Message) -> Message {
        let id = req.header.id.clone();
        self.inject(req).await;
        self.edge
            .wait_for(WAIT, |m| m.header.parent_id == id)
            .await
            .unwrap_or_else(|| panic!("no answer to {id}"))
    }

    /// Waits for one message matching `pred`.
    pub async fn expect(&self, what: &str, pred: impl Fn(&Message) -> bool) -> Message {
        self.edge
            .wait_for(WAIT, pred)
            .await
            .unwrap_or_else(|| panic!("no message: {what}"))
    }

    /// Waits [`QUIET`] and returns every message matching `pred`.
    pub async fn settle(&self, pred: impl Fn(&Message) -> bool) -> Vec<Message> {
        tokio::time::sleep(QUIET).await;
        self.edge.matching(pred)
    }

    /// Stops the bus and the controller's tasks.
    pub async fn stop(self) {
        self.bus.shutdown().await;
        assert!(
            self.life.join(Duration::from_secs(10)).await,
            "tasks stopped"
        );
    }
}

/// The message's resource version header.
pub fn rv(m: &Message) -> &str {
    &m.header.resource_version
}

/// A Rule named `name` (MQTT-style source and target), for tests that write its status.
pub fn rule(name: &str) -> kubeedge_api::rules::Rule {
    serde_json::from_value(json!({
        "apiVersion": "rules.kubeedge.io/v1", "kind": "Rule", "metadata": {"name": name},
        "spec": {"source": "a", "sourceResource": {"path": "/x"}, "target": "b", "targetResource": {"topic": "t"}}}))
    .unwrap()
}
