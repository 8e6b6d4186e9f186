//! `devices.kubeedge.io/v1alpha2` against the real API server: served beside the stored
//! `v1beta1` without conversion, so an object written in either version reads back in the
//! other relabelled, with the fields both versions have.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kubeedge_api::devices::{self, Device};
use serde_json::json;

fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(devices::GROUP, version, kind),
        plural,
    )
}

#[tokio::test]
async fn a_device_written_as_v1alpha2_reads_back_as_v1beta1_and_the_other_way() {
    k8s_testenv::install_crds(&devices::crds()).await;
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("legacy-devices").await;
    let legacy = resource(devices::LEGACY_VERSION, "Device", "devices");
    let old: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &legacy);

    // Written by an older client: fields of its own version, kept as written.
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "devices.kubeedge.io/v1alpha2",
        "kind": "Device",
        "metadata": {"name": "thermo"},
        "spec": {"deviceModelRef": {"name": "m"}, "nodeSelector": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "", "operator": "In", "values": ["edge-1"]}]}]}},
        "status": {"twins": [{"propertyName": "t", "desired": {"value": "1"}}]}
    }))
    .unwrap();
    old.create(&PostParams::default(), &obj)
        .await
        .expect("v1alpha2 create");
    let new: Api<Device> = Api::namespaced(client.clone(), &ns);
    let read = new.get("thermo").await.expect("v1beta1 read");
    assert_eq!(
        read.spec.device_model_ref.as_ref().map(|r| r.name.as_str()),
        Some("m")
    );
    let raw: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource(devices::VERSION, "Device", "devices"),
    );
    let read = raw.get("thermo").await.expect("v1beta1 read");
    assert_eq!(
        read.types.as_ref().unwrap().api_version,
        devices::API_VERSION
    );
    // No conversion: the object is stored as v1beta1, whose schema prunes what only
    // v1alpha2 has (here the node selector and the status twins); a v1alpha2 read shows the
    // same stored object.
    for read in [
        raw.get("thermo").await.expect("v1beta1 read"),
        old.get("thermo").await.expect("v1alpha2 read"),
    ] {
        assert_eq!(
            read.data["spec"]["deviceModelRef"]["name"], "m",
            "{}",
            read.data
        );
        assert!(read.data["spec"]["nodeSelector"].is_null(), "{}", read.data);
        assert!(read.data["status"]["twins"].is_null(), "{}", read.data);
    }

    // Written by the controllers' version, read by an older client.
    let device: Device = serde_json::from_value(json!({
        "apiVersion": devices::API_VERSION, "kind": "Device",
        "metadata": {"name": "pump"},
        "spec": {"deviceModelRef": {"name": "m"}, "nodeName": "edge-2"}
    }))
    .unwrap();
    new.create(&PostParams::default(), &device)
        .await
        .expect("v1beta1 create");
    let read = old.get("pump").await.expect("v1alpha2 read");
    assert_eq!(
        read.types.as_ref().unwrap().api_version,
        "devices.kubeedge.io/v1alpha2"
    );
    assert_eq!(read.data["spec"]["nodeName"], "edge-2");

    // The models and statuses are served in v1alpha2 too.
    for (kind, plural) in [
        ("DeviceModel", "devicemodels"),
        ("DeviceStatus", "devicestatuses"),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &ns,
            &resource(devices::LEGACY_VERSION, kind, plural),
        );
        api.list(&Default::default())
            .await
            .unwrap_or_else(|e| panic!("{kind} v1alpha2 list: {e}"));
    }
}
