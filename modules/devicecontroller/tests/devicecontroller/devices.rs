//! devicecontroller against a real API server (downstream order, node moves, twin and state
//! reports, membership detail, model edits, DeviceStatus retries), with a fake edge capturing what
//! is sent to `cloudhub`.

use std::time::Duration;

use beehive::{Bus, Content, Message};
use devicecontroller::{DeviceController, DeviceControllerConfig};
use http::Method;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
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
    _shared: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
    _alone: Option<tokio::sync::RwLockWriteGuard<'static, ()>>,
}

async fn start_with(client: kube::Client, alone: bool) -> Env {
    let (_alone, _shared) = if alone {
        (Some(ALONE.write().await), None)
    } else {
        (None, Some(ALONE.read().await))
    };
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
    let synced = dc.synced();
    bus.register(dc).unwrap();
    bus.start().unwrap();
    tokio::time::timeout(WAIT, synced)
        .await
        .expect("device caches synced");
    Env {
        bus,
        edge,
        client: k8s_testenv::client().await,
        ns: k8s_testenv::namespace("dc").await,
        _shared,
        _alone,
    }
}

async fn start() -> Env {
    start_with(k8s_testenv::client().await, false).await
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id()[..8])
}

impl Env {
    async fn model(&self, name: &str) -> DeviceModel {
        let m: DeviceModel = serde_json::from_value(json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
            "metadata": {"name": name}, "spec": {"protocol": "modbus", "properties": [{"name": "temp", "type": "INT", "accessMode": "ReadWrite"}]}}))
        .unwrap();
        Api::<DeviceModel>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &m)
            .await
            .unwrap()
    }

    async fn device(&self, name: &str, node: &str, model: &str) -> Device {
        let d: Device = serde_json::from_value(json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
            "metadata": {"name": name, "labels": {"description": "thermometer"}},
            "spec": {"nodeName": node, "deviceModelRef": {"name": model},
                     "protocol": {"protocolName": "modbus", "configData": {"slave": 1}},
                     "properties": [{"name": "temp", "desired": {"value": "20"}, "visitors": {"protocolName": "modbus"}}]}}))
        .unwrap();
        self.devices()
            .create(&PostParams::default(), &d)
            .await
            .unwrap()
    }

    fn devices(&self) -> Api<Device> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn statuses(&self) -> Api<DeviceStatus> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn inject(&self, msg: Message) {
        self.bus
            .endpoint("cloudhub")
            .send_to_group("devicecontroller", msg)
            .await
            .unwrap();
    }

    /// Every message for `node`, as "<op> <resource without node/<node>/>".
    fn seen(&self, node: &str) -> Vec<String> {
        let prefix = format!("node/{node}/");
        self.edge
            .matching(|m| m.route.resource.starts_with(&prefix))
            .iter()
            .map(|m| {
                format!(
                    "{} {}",
                    m.route.operation,
                    &m.route.resource[prefix.len()..]
                )
            })
            .collect()
    }

    async fn wait_seen(&self, node: &str, n: usize) -> Vec<String> {
        let prefix = format!("node/{node}/");
        self.edge
            .wait_count(n, WAIT, |m| m.route.resource.starts_with(&prefix))
            .await;
        tokio::time::sleep(QUIET).await;
        self.seen(node)
    }
}

fn body(m: &Message) -> Value {
    serde_json::from_str(m.content.as_json()).unwrap()
}

fn twin_report(node: &str, ns: &str, device: &str, twin: Value) -> Message {
    Message::new()
        .with_route(
            "twin",
            "resource",
            format!("node/{node}/device/{ns}/{device}/twin/edge_updated"),
            "update",
        )
        .with_content(
            Content::json(&json!({"event_id": "e5", "timestamp": 1, "twin": twin})).unwrap(),
        )
}

#[actix_rt::test]
async fn a_bound_device_gets_its_status_and_membership_model_device_in_order() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    env.model("m1").await;
    let d1 = env.device("d1", &e1, "m1").await;
    let ns = env.ns.clone();
    let seen = env.wait_seen(&e1, 3).await;
    assert_eq!(
        seen,
        [
            "update membership",
            &format!("insert {ns}/devicemodel/m1"),
            &format!("insert {ns}/device/d1")
        ]
    );
    let msgs = env
        .edge
        .matching(|m| m.route.resource.starts_with(&format!("node/{e1}/")));
    let membership = &msgs[0];
    assert_eq!(
        (
            membership.route.group.as_str(),
            membership.route.source.as_str()
        ),
        ("twin", "devicecontroller")
    );
    let c = body(membership);
    assert_eq!(c["added_devices"][0]["id"], format!("{ns}/d1"));
    assert_eq!(c["added_devices"][0]["description"], "thermometer");
    assert!(c["removed_devices"].is_null());
    assert_eq!(
        (
            msgs[1].route.group.as_str(),
            body(&msgs[1])["kind"].as_str()
        ),
        ("resource", Some("DeviceModel"))
    );
    let device = body(&msgs[2]);
    assert_eq!(
        (device["kind"].as_str(), device["apiVersion"].as_str()),
        (Some("Device"), Some("devices.kubeedge.io/v1beta1"))
    );
    assert_eq!(
        msgs[2].header.resource_version,
        d1.resource_version().unwrap()
    );
    let status = env.statuses().get("d1").await.unwrap();
    let owner = &status.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Device", "d1", Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), d1.uid());
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_second_device_with_the_same_model_sends_no_second_model() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.wait_seen(&e1, 3).await;
    env.edge.clear();
    env.device("d2", &e1, "m1").await;
    let ns = env.ns.clone();
    assert_eq!(
        env.wait_seen(&e1, 2).await,
        ["update membership", &format!("insert {ns}/device/d2")]
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn moving_a_device_removes_it_from_one_node_and_adds_it_to_the_other() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.wait_seen(&e1, 3).await;
    env.edge.clear();
    env.devices()
        .patch(
            "d1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": e2}})),
        )
        .await
        .unwrap();
    let ns = env.ns.clone();
    assert_eq!(
        env.wait_seen(&e2, 3).await,
        [
            "update membership",
            &format!("insert {ns}/devicemodel/m1"),
            &format!("insert {ns}/device/d1")
        ]
    );
    assert_eq!(
        env.seen(&e1),
        [
            "update membership",
            &format!("delete {ns}/devicemodel/m1"),
            &format!("delete {ns}/device/d1")
        ]
    );
    let removed = env
        .edge
        .matching(|m| m.route.resource == format!("node/{e1}/membership"));
    assert_eq!(
        body(&removed[0])["removed_devices"][0]["id"],
        format!("{ns}/d1")
    );
    assert!(body(&removed[0])["added_devices"].is_null());
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_property_change_sends_model_then_device_and_a_label_change_nothing() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.wait_seen(&e1, 3).await;
    env.edge.clear();
    env.devices()
        .patch(
            "d1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(QUIET).await;
    assert!(env.seen(&e1).is_empty(), "a label change sends nothing");
    let props = json!({"spec": {"properties": [{"name": "temp", "desired": {"value": "25"}, "visitors": {"protocolName": "modbus"}}]}});
    env.devices()
        .patch("d1", &PatchParams::default(), &Patch::Merge(props))
        .await
        .unwrap();
    let ns = env.ns.clone();
    assert_eq!(
        env.wait_seen(&e1, 2).await,
        [
            format!("update {ns}/devicemodel/m1"),
            format!("update {ns}/device/d1")
        ]
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_first_twin_report_is_written_with_its_values_and_confirmed() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.wait_seen(&e1, 3).await;
    let twin = json!({
        "temp": {"actual": {"value": "21", "metadata": {"timestamp": 1700000000000i64}}, "metadata": {"type": "int"}},
        "nonexistent": {"actual": {"value": "9"}},
    });
    let req = twin_report(&e1, &env.ns, "d1", twin);
    env.inject(req.clone()).await;
    let resp = env
        .edge
        .wait_for(WAIT, |m| m.header.parent_id == req.header.id)
        .await
        .expect("confirmation");
    assert_eq!(
        (
            resp.route.resource.as_str(),
            resp.route.group.as_str(),
            resp.route.operation.as_str(),
            resp.content.as_json()
        ),
        (
            format!("node/{e1}/twin").as_str(),
            "twin",
            "response",
            r#""OK""#
        )
    );
    let status = env.statuses().get("d1").await.unwrap().status.unwrap();
    assert_eq!(status.twins.len(), 1, "the unknown property is ignored");
    let t = serde_json::to_value(&status.twins[0]).unwrap();
    assert_eq!(t["propertyName"], "temp");
    assert_eq!(
        t["reported"],
        json!({"value": "21", "metadata": {"timestamp": "1700000000000", "type": "int"}}),
        "a first report keeps its values"
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_state_report_sets_state_and_last_online_time() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.wait_seen(&e1, 3).await;
    let text = r#"{"event_id":"x","timestamp":1,"device":{"name":"d1","state":"online","lastOnlineTime":"2026-01-01T00:00:00Z"}}"#;
    let req = Message::new()
        .with_route(
            "twin",
            "resource",
            format!("node/{e1}/device/{}/d1/state/update", env.ns),
            "update",
        )
        .with_content(Content::string(text));
    env.inject(req.clone()).await;
    let resp = env
        .edge
        .wait_for(WAIT, |m| m.header.parent_id == req.header.id)
        .await
        .expect("confirmation");
    assert_eq!(resp.content.as_json(), r#""OK""#);
    let status = env.statuses().get("d1").await.unwrap().status.unwrap();
    assert_eq!(
        (status.state.as_str(), status.last_online_time.as_str()),
        ("online", "2026-01-01T00:00:00Z")
    );

    // An unknown device: no write; refused (403), not confirmed.
    let ghost = twin_report(
        &e1,
        &env.ns,
        "ghost",
        json!({"temp": {"actual": {"value": "1"}}}),
    );
    env.inject(ghost.clone()).await;
    let refusal = env
        .edge
        .wait_for(WAIT, |m| m.header.parent_id == ghost.header.id)
        .await
        .expect("refusal");
    assert_eq!(body(&refusal)["ErrStatus"]["code"], 403);
    assert!(env.statuses().get_opt("ghost").await.unwrap().is_none());
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn membership_detail_is_confirmed_and_answered_with_the_nodes_devices() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (e1, other) = (unique("e1"), unique("other"));
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.device("d2", &e1, "m1").await;
    env.device("d3", &other, "m1").await;
    env.wait_seen(&e1, 5).await;
    let req = Message::new()
        .with_route(
            "twin",
            "resource",
            format!("node/{e1}/membership/detail"),
            "get",
        )
        .with_content(
            Content::json(
                &json!({"event_type": "group_membership_event", "event_id": "x",
            "operation": "detail", "group_id": e1, "timestamp": 1}),
            )
            .unwrap(),
        );
    env.inject(req.clone()).await;
    let confirm = env
        .edge
        .wait_for(WAIT, |m| m.header.parent_id == req.header.id)
        .await
        .expect("confirmation");
    assert_eq!(
        (
            confirm.route.resource.to_string(),
            confirm.content.as_json()
        ),
        (format!("node/{e1}/twin"), r#""OK""#)
    );
    let detail = env
        .edge
        .wait_for(WAIT, |m| {
            m.route.resource == format!("node/{e1}/membership/detail")
        })
        .await
        .expect("detail");
    assert!(
        detail.header.parent_id.is_empty(),
        "a parentless update, not a confirmation"
    );
    assert_eq!(
        (detail.route.group.as_str(), detail.route.operation.as_str()),
        ("twin", "update")
    );
    let ids: Vec<String> = body(&detail)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [format!("{}/d1", env.ns), format!("{}/d2", env.ns)]);
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_model_change_reaches_every_node_using_it() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    env.model("m1").await;
    env.device("d1", &e1, "m1").await;
    env.device("d2", &e2, "m1").await;
    env.wait_seen(&e1, 3).await;
    env.wait_seen(&e2, 3).await;
    env.edge.clear();
    Api::<DeviceModel>::namespaced(env.client.clone(), &env.ns)
        .patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"protocol": "opcua"}})),
        )
        .await
        .unwrap();
    let ns = env.ns.clone();
    for node in [&e1, &e2] {
        assert_eq!(
            env.wait_seen(node, 1).await,
            [format!("update {ns}/devicemodel/m1")],
            "a model edit is pushed"
        );
    }
    let m = &env
        .edge
        .matching(|m| m.route.resource.starts_with(&format!("node/{e1}/")))[0];
    assert_eq!(body(m)["spec"]["protocol"], "opcua");
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_device_whose_status_cannot_be_created_is_retried_until_it_can() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty_client(k8s_testenv::config().await);
    let env = start_with(client, true).await;
    let e1 = unique("e1");
    env.model("m1").await;
    faults.fail_next(Method::POST, "/devicestatuses", 2, 500, "InternalError");
    env.device("d1", &e1, "m1").await;
    let ns = env.ns.clone();
    assert_eq!(
        env.wait_seen(&e1, 3).await,
        [
            "update membership",
            &format!("insert {ns}/devicemodel/m1"),
            &format!("insert {ns}/device/d1")
        ],
        "sent once the DeviceStatus exists"
    );
    assert!(faults.injected() >= 2);
    assert!(env.statuses().get_opt("d1").await.unwrap().is_some());
    env.devices()
        .delete("d1", &DeleteParams::default())
        .await
        .unwrap();
    env.bus.shutdown().await;
}
