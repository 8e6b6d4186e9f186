//! devicecontroller with KubeEdge's own ClusterRole, which grants nothing on
//! `devicestatuses`: it degrades with a warning instead of waiting forever, so Devices and
//! their models still reach their edge nodes. The controller runs as a user bound to such a
//! role on the real API server (RBAC), through impersonation.

use std::time::Duration;

use beehive::Bus;
use devicecontroller::{DeviceController, DeviceControllerConfig};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ListParams, PostParams};
use kubeedge_api::devices::{Device, DeviceModel, DeviceStatus};
use kubeedge_api::testing::FakeEdge;
use serde_json::json;

use crate::support::ALONE;

const WAIT: Duration = Duration::from_secs(20);

/// A user allowed to read Devices and DeviceModels, and nothing on DeviceStatuses.
async fn user_without_devicestatuses(admin: &kube::Client) -> String {
    let user = format!("dc-no-status-{}", &beehive::new_id()[..8]);
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": user},
        "rules": [{"apiGroups": ["devices.kubeedge.io"], "resources": ["devices", "devicemodels"],
                   "verbs": ["get", "list", "watch"]}]}))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    user
}

async fn client_as(user: &str) -> kube::Client {
    let mut config = k8s_testenv::config().await;
    config.auth_info.impersonate = Some(user.to_owned());
    kube::Client::try_from(config).unwrap()
}

#[actix_rt::test]
async fn devices_reach_the_edge_without_permission_on_devicestatuses() {
    test_tiers::require!(ApiServer);
    // Other tests' controllers would create DeviceStatuses for this test's device.
    let _alone = ALONE.write().await;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let admin = k8s_testenv::client().await;
    let user = user_without_devicestatuses(&admin).await;
    let restricted = client_as(&user).await;
    // RBAC decisions follow the binding within moments; wait until the user can list
    // devices and is refused devicestatuses, so the test checks the role, not a race.
    let mut ready = false;
    for _ in 0..50 {
        let devices = Api::<Device>::all(restricted.clone())
            .list_metadata(&ListParams::default().limit(1))
            .await;
        let statuses = Api::<DeviceStatus>::all(restricted.clone())
            .list_metadata(&ListParams::default().limit(1))
            .await;
        if devices.is_ok() && matches!(statuses, Err(kube::Error::Api(ref s)) if s.code == 403) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the restricted user's role did not take effect");

    let bus = Bus::new();
    let edge = FakeEdge::register(&bus, "cloudhub");
    let dc = DeviceController::new(
        DeviceControllerConfig::default(),
        bus.endpoint("devicecontroller"),
        restricted,
    );
    let synced = dc.synced();
    bus.register(dc).unwrap();
    bus.start().unwrap();
    tokio::time::timeout(WAIT, synced)
        .await
        .expect("synced although DeviceStatuses cannot be listed");

    let ns = k8s_testenv::namespace("dc-perm").await;
    let node = format!("edge-{}", &beehive::new_id()[..8]);
    let model: DeviceModel = serde_json::from_value(json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "DeviceModel",
        "metadata": {"name": "m1"}, "spec": {"protocol": "modbus", "properties": [{"name": "temp", "type": "INT", "accessMode": "ReadWrite"}]}}))
    .unwrap();
    Api::<DeviceModel>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &model)
        .await
        .unwrap();
    let device: Device = serde_json::from_value(json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": {"name": "d1"},
        "spec": {"nodeName": node, "deviceModelRef": {"name": "m1"},
                 "protocol": {"protocolName": "modbus", "configData": {"slave": 1}},
                 "properties": [{"name": "temp", "desired": {"value": "20"}, "visitors": {"protocolName": "modbus"}}]}}))
    .unwrap();
    Api::<Device>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &device)
        .await
        .unwrap();

    let prefix = format!("node/{node}/");
    let sent = edge
        .wait_count(3, WAIT, |m| m.route.resource.starts_with(&prefix))
        .await;
    let seen: Vec<String> = sent
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                m.route.operation,
                &m.route.resource[prefix.len()..]
            )
        })
        .collect();
    assert!(
        seen.iter().any(|s| s == &format!("insert {ns}/device/d1")),
        "the device reached its node: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s == &format!("insert {ns}/devicemodel/m1")),
        "its model too: {seen:?}"
    );
    // Nothing was written on DeviceStatuses (the controller may not, and did not try to).
    let statuses = Api::<DeviceStatus>::namespaced(admin, &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(statuses.items.is_empty());
    bus.shutdown().await;
}
