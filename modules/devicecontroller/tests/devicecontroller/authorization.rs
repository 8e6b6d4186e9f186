//! Node authorization of devicetwin's requests against a real API server: an edge reports only
//! on Devices bound to its own node; anything else is refused, answered where devicetwin
//! expects an answer, counted, and leaves the API server unchanged.

use std::time::Duration;

use beehive::{Bus, Content, Message};
use devicecontroller::{DeviceController, DeviceControllerConfig, DeviceControllerMetrics};
use futures::FutureExt;
use http::Method;
use kube::api::{Api, PostParams};
use kubeedge_api::devices::{Device, DeviceModel, DeviceStatus};
use kubeedge_api::testing::{FakeEdge, faulty_client};
use serde_json::{Value, json};

use crate::support::ALONE;

const WAIT: Duration = Duration::from_secs(20);
const QUIET: Duration = Duration::from_millis(1500);

struct Env {
    bus: Bus,
    edge: FakeEdge,
    client: kube::Client,
    ns: String,
    metrics: DeviceControllerMetrics,
    /// Resolves once the controller's caches have listed.
    synced: futures::future::BoxFuture<'static, ()>,
    _shared: tokio::sync::RwLockReadGuard<'static, ()>,
}

/// A controller talking through `client`; waits for its caches when `wait_synced`.
async fn start_with(client: kube::Client, wait_synced: bool) -> Env {
    let _shared = ALONE.read().await;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let bus = Bus::new();
    let edge = FakeEdge::register(&bus, "cloudhub");
    let dc = DeviceController::new(
        DeviceControllerConfig::default(),
        bus.endpoint("devicecontroller"),
        client,
    );
    let metrics = dc.metrics();
    let mut synced = dc.synced().boxed();
    bus.register(dc).unwrap();
    bus.start().unwrap();
    if wait_synced {
        tokio::time::timeout(WAIT, &mut synced)
            .await
            .expect("device caches synced");
    }
    Env {
        bus,
        edge,
        client: k8s_testenv::client().await,
        ns: k8s_testenv::namespace("dcauth").await,
        metrics,
        synced,
        _shared,
    }
}

async fn start() -> Env {
    start_with(k8s_testenv::client().await, true).await
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id()[..8])
}

fn twin_report(node: &str, device_id: &str, value: &str) -> Message {
    Message::new()
        .with_route(
            "twin",
            "resource",
            format!("node/{node}/device/{device_id}/twin/edge_updated"),
            "update",
        )
        .with_content(
            Content::json(&json!({"event_id": "e", "timestamp": 1,
                "twin": {"temp": {"actual": {"value": value, "metadata": {"timestamp": 1}}}}}))
            .unwrap(),
        )
}

fn state_report(node: &str, device_id: &str, state: &str) -> Message {
    let text = json!({"event_id": "x", "timestamp": 1,
        "device": {"name": "d", "state": state, "lastOnlineTime": "2026-01-01T00:00:00Z"}})
    .to_string();
    Message::new()
        .with_route(
            "twin",
            "resource",
            format!("node/{node}/device/{device_id}/state/update"),
            "update",
        )
        .with_content(Content::string(text))
}

impl Env {
    async fn model(&self, name: &str) {
        let m: DeviceModel = serde_json::from_value(json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
            "metadata": {"name": name}, "spec": {"protocol": "modbus", "properties": [{"name": "temp", "type": "INT", "accessMode": "ReadWrite"}]}}))
        .unwrap();
        Api::<DeviceModel>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &m)
            .await
            .unwrap();
    }

    async fn device(&self, name: &str, node: &str) {
        let d: Device = serde_json::from_value(json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "deviceModelRef": {"name": "m1"},
                     "protocol": {"protocolName": "modbus"},
                     "properties": [{"name": "temp", "desired": {"value": "20"}, "visitors": {"protocolName": "modbus"}}]}}))
        .unwrap();
        Api::<Device>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }

    fn statuses(&self) -> Api<DeviceStatus> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The device's DeviceStatus once the controller has created it.
    async fn status(&self, name: &str) -> DeviceStatus {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(s) = self.statuses().get_opt(name).await.unwrap() {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no DeviceStatus {name}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reads `before` back: the API server still holds it unchanged (same resource version).
    async fn assert_unchanged(&self, before: &DeviceStatus) {
        let name = before.metadata.name.clone().unwrap();
        let now = self.statuses().get(&name).await.unwrap();
        assert_eq!(
            serde_json::to_value(&now).unwrap(),
            serde_json::to_value(before).unwrap(),
            "DeviceStatus {name} changed"
        );
    }

    async fn inject(&self, msg: Message) {
        self.bus
            .endpoint("cloudhub")
            .send_to_group("devicecontroller", msg)
            .await
            .unwrap();
    }

    /// Sends `req` as cloudhub would and returns the answer devicetwin gets.
    async fn ask(&self, req: Message) -> Message {
        let id = req.header.id.clone();
        self.inject(req).await;
        self.edge
            .wait_for(WAIT, |m| m.header.parent_id == id)
            .await
            .expect("an answer")
    }

    fn denied(&self, kind: &str) -> u64 {
        self.metrics.snapshot().denied(kind)
    }
}

/// The refusal status an answer carries, after checking it is shaped like devicetwin's
/// confirmation (and is not one).
fn refusal(answer: &Message, node: &str) -> Value {
    assert_eq!(
        (
            answer.route.resource.as_str(),
            answer.route.group.as_str(),
            answer.route.operation.as_str(),
            answer.route.source.as_str()
        ),
        (
            format!("node/{node}/twin").as_str(),
            "twin",
            "response",
            "devicecontroller"
        )
    );
    assert_ne!(
        answer.content.as_json(),
        r#""OK""#,
        "a refusal is not a confirmation"
    );
    let body: Value = serde_json::from_str(answer.content.as_json()).unwrap();
    body["ErrStatus"].clone()
}

fn forbidden(answer: &Message, node: &str) {
    let status = refusal(answer, node);
    assert_eq!(
        (status["code"].as_u64(), status["reason"].as_str()),
        (Some(403), Some("Forbidden")),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains(&format!("User \"system:node:{node}\"")),
        "{status}"
    );
}

fn bad_request(answer: &Message, node: &str) {
    let status = refusal(answer, node);
    assert_eq!(
        (status["code"].as_u64(), status["reason"].as_str()),
        (Some(400), Some("BadRequest")),
        "{status}"
    );
}

fn reported(status: &DeviceStatus) -> Vec<String> {
    status
        .status
        .as_ref()
        .map(|s| s.twins.iter().map(|t| t.reported.value.clone()).collect())
        .unwrap_or_default()
}

#[actix_rt::test]
async fn twin_reports_are_written_only_for_devices_bound_to_the_node() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    env.model("m1").await;
    env.device("mine", &e1).await;
    env.device("theirs", &e2).await;
    env.status("mine").await;
    let before = env.status("theirs").await;
    let ns = env.ns.clone();

    let ok = env.ask(twin_report(&e1, &format!("{ns}/mine"), "21")).await;
    assert_eq!(ok.content.as_json(), r#""OK""#);
    assert_eq!(reported(&env.statuses().get("mine").await.unwrap()), ["21"]);
    assert_eq!(env.denied("twinUpdate"), 0);

    let refused = env
        .ask(twin_report(&e1, &format!("{ns}/theirs"), "99"))
        .await;
    forbidden(&refused, &e1);
    env.assert_unchanged(&before).await;
    assert_eq!(env.denied("twinUpdate"), 1);

    // A device that does not exist gets the same answer as one bound elsewhere.
    let ghost = env.ask(twin_report(&e1, &format!("{ns}/ghost"), "1")).await;
    forbidden(&ghost, &e1);
    assert_eq!(
        refusal(&ghost, &e1)["message"]
            .as_str()
            .unwrap()
            .replace("ghost", "theirs"),
        refusal(&refused, &e1)["message"].as_str().unwrap()
    );
    assert!(env.statuses().get_opt("ghost").await.unwrap().is_none());
    assert_eq!(env.denied("twinUpdate"), 2);

    // The node that owns the device still may.
    let theirs = env
        .ask(twin_report(&e2, &format!("{ns}/theirs"), "22"))
        .await;
    assert_eq!(theirs.content.as_json(), r#""OK""#);
    assert_eq!(
        reported(&env.statuses().get("theirs").await.unwrap()),
        ["22"]
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn state_reports_are_written_only_for_devices_bound_to_the_node() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    env.model("m1").await;
    env.device("mine", &e1).await;
    env.device("theirs", &e2).await;
    env.status("mine").await;
    let before = env.status("theirs").await;
    let ns = env.ns.clone();

    let ok = env
        .ask(state_report(&e1, &format!("{ns}/mine"), "online"))
        .await;
    assert_eq!(ok.content.as_json(), r#""OK""#);
    let mine = env.statuses().get("mine").await.unwrap().status.unwrap();
    assert_eq!(mine.state, "online");

    let refused = env
        .ask(state_report(&e1, &format!("{ns}/theirs"), "offline"))
        .await;
    forbidden(&refused, &e1);
    env.assert_unchanged(&before).await;
    let ghost = env
        .ask(state_report(&e1, &format!("{ns}/ghost"), "offline"))
        .await;
    forbidden(&ghost, &e1);
    assert!(env.statuses().get_opt("ghost").await.unwrap().is_none());
    assert_eq!(env.denied("deviceStateUpdate"), 2);
    assert_eq!(env.denied("twinUpdate"), 0);
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn malformed_device_names_are_refused_before_any_request_is_made() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    env.model("m1").await;
    env.device("mine", &e1).await;
    let before = env.status("mine").await;
    let ns = env.ns.clone();
    let ids = [
        format!("{ns}/a/b"),
        format!("{ns}/x?y"),
        format!("{ns}/mine/status"),
        format!("{ns}/mine?dryRun=All"),
        format!("{ns}/mine#x"),
        format!("{ns}/%6dine"),
        "UPPER/mine".to_owned(),
        "mine".to_owned(),
    ];
    for id in &ids {
        bad_request(&env.ask(twin_report(&e1, id, "66")).await, &e1);
        bad_request(&env.ask(state_report(&e1, id, "offline")).await, &e1);
    }
    let n = ids.len() as u64;
    assert_eq!(
        (env.denied("twinUpdate"), env.denied("deviceStateUpdate")),
        (n, n)
    );
    env.assert_unchanged(&before).await;
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn membership_detail_is_answered_and_unknown_requests_are_refused_unanswered() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    env.model("m1").await;
    env.device("mine", &e1).await;
    env.device("theirs", &e2).await;
    env.status("mine").await;
    let before = env.status("theirs").await;
    let ns = env.ns.clone();

    let detail = Message::new()
        .with_route(
            "twin",
            "resource",
            format!("node/{e1}/membership/detail"),
            "get",
        )
        .with_content(
            Content::json(
                &json!({"event_type": "group_membership_event", "event_id": "x",
            "operation": "detail", "group_id": e2, "timestamp": 1}),
            )
            .unwrap(),
        );
    let ok = env.ask(detail).await;
    assert_eq!(ok.content.as_json(), r#""OK""#);
    let list = env
        .edge
        .wait_for(WAIT, |m| {
            m.route.resource == format!("node/{e1}/membership/detail")
        })
        .await
        .expect("detail");
    let body: Value = serde_json::from_str(list.content.as_json()).unwrap();
    assert_eq!(
        body["devices"],
        json!([{"id": format!("{ns}/mine"), "name": "mine"}]),
        "only the node's own devices, whatever group_id says"
    );
    assert_eq!(env.denied("membershipDetail"), 0);

    let unknown = [
        format!("node/{e1}/device/{ns}/theirs/twin/cloud_updated"),
        format!("node/{e1}/device/{ns}/theirs/twin/edge_updated/x"),
        format!("node/{e1}/membership/detail/{e2}"),
        format!("node/{e1}/node/{e2}/device/{ns}/theirs"),
    ];
    let mut ids = Vec::new();
    for resource in &unknown {
        let msg = twin_report(&e1, "x/y", "1").with_route("twin", "resource", resource, "update");
        ids.push(msg.header.id.clone());
        env.inject(msg).await;
    }
    tokio::time::sleep(QUIET).await;
    assert!(
        env.edge
            .matching(|m| ids.contains(&m.header.parent_id))
            .is_empty(),
        "an unknown request has no answer the edge would expect"
    );
    assert_eq!(env.denied("unknown"), unknown.len() as u64);
    env.assert_unchanged(&before).await;
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn before_the_device_cache_has_listed_a_device_is_read_once() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty_client(k8s_testenv::config().await);
    // Holds the cluster-wide Device list back; single-device reads are not held.
    faults.delay_next(
        Method::GET,
        "/apis/devices.kubeedge.io/v1beta1/devices",
        1,
        Duration::from_secs(15),
    );
    let setup = start().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    setup.model("m1").await;
    setup.device("mine", &e1).await;
    setup.device("theirs", &e2).await;
    setup.status("theirs").await;
    let ns = setup.ns.clone();
    setup.bus.shutdown().await;

    let mut env = start_with(client, false).await;
    env.ns = ns.clone();
    let ok = env.ask(twin_report(&e1, &format!("{ns}/mine"), "21")).await;
    assert_eq!(ok.content.as_json(), r#""OK""#);
    let refused = env
        .ask(twin_report(&e1, &format!("{ns}/theirs"), "99"))
        .await;
    forbidden(&refused, &e1);
    assert!(
        (&mut env.synced).now_or_never().is_none(),
        "decided while the device cache had not listed"
    );
    assert_eq!(reported(&env.statuses().get("mine").await.unwrap()), ["21"]);
    assert!(reported(&env.statuses().get("theirs").await.unwrap()).is_empty());
    assert_eq!(env.denied("twinUpdate"), 1);
    env.bus.shutdown().await;
}
