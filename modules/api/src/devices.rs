//! `devices.kubeedge.io/v1beta1`: Device, DeviceModel and DeviceStatus, with KubeEdge's JSON
//! field names (`staging/src/github.com/kubeedge/api/apis/devices/v1beta1`). The CRDs also
//! serve the older `v1alpha2` (not stored, no conversion), as KubeEdge's do; see [`crds`].
//!
//! Upstream's CRDs have **no status subresource**: `status` is written through the main
//! resource (the devicecontroller merge-patches `devicestatuses/<name>` with `{"status": …}`).
//! `kube`'s derive always adds one when a type has a status, so take the manifests from
//! [`crds`], which removes it, never from `Device::crd()` directly.
//!
//! Free-form maps (`configData`, `protocolConfigData`, `anomalyDetection`, `extensions`) are
//! kept as JSON objects and marked `x-kubernetes-preserve-unknown-fields` in the schema.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the device CRDs.
pub const GROUP: &str = "devices.kubeedge.io";
/// The version the controllers use (storage version upstream).
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of every object in this module.
pub const API_VERSION: &str = "devices.kubeedge.io/v1beta1";

/// A free-form JSON object (Go's `CustomizedValue`, `map[string]interface{}`).
pub type FreeForm = serde_json::Map<String, serde_json::Value>;

fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// Desired state of a [`Device`]: which model it instantiates, where it runs, its properties.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "devices.kubeedge.io",
    version = "v1beta1",
    kind = "Device",
    plural = "devices",
    singular = "device",
    namespaced,
    status = "DeviceInstanceStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSpec {
    /// The DeviceModel (same namespace) this device instantiates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_model_ref: Option<DeviceModelRef>,
    /// The edge node the device is bound to; empty = not bound.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Properties, unique by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<DeviceProperty>,
    /// How to connect to the device (always serialised, as Go does for a struct).
    #[serde(default)]
    pub protocol: ProtocolConfig,
    /// Methods, unique by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<DeviceMethod>,
    /// Whether and how often the mapper reports the device state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_report: Option<StateReportConfig>,
}

/// `Device.status` (Go `DeviceStatusOld`); twins and state live in [`DeviceStatus`] since v1.23.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInstanceStatus {
    /// Whether the state is reported to the cloud.
    #[serde(default, skip_serializing_if = "is_false")]
    pub report_to_cloud: bool,
    /// Report period.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub report_cycle: i64,
}

/// Reference to a DeviceModel by name (Go `v1.LocalObjectReference`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DeviceModelRef {
    /// The DeviceModel's name.
    #[serde(default)]
    pub name: String,
}

/// `spec.stateReport`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateReportConfig {
    /// Whether the state is reported to the cloud.
    #[serde(default, skip_serializing_if = "is_false")]
    pub report_to_cloud: bool,
    /// Report period.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub report_cycle: i64,
}

/// A value with metadata: desired, reported or observed-desired state of a property.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TwinProperty {
    /// The value; always serialised (Go's tag has no `omitempty`).
    #[serde(default)]
    pub value: String,
    /// Metadata such as `timestamp` and `type`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// `spec.protocol` of a Device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolConfig {
    /// The protocol name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_name: String,
    /// Free-form protocol configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config_data: Option<FreeForm>,
}

/// `spec.methods[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMethod {
    /// Unique method name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Properties the method controls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub property_names: Vec<String>,
}

/// `spec.properties[]` of a Device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceProperty {
    /// Unique property name; twins are matched to properties by it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The desired value (always serialised).
    #[serde(default)]
    pub desired: TwinProperty,
    /// How a mapper reaches the property (always serialised).
    #[serde(default)]
    pub visitors: VisitorConfig,
    /// Report period.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub report_cycle: i64,
    /// Collect period.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub collect_cycle: i64,
    /// Whether values are reported to the cloud.
    #[serde(default, skip_serializing_if = "is_false")]
    pub report_to_cloud: bool,
    /// Where the mapper pushes data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_method: Option<PushMethod>,
}

/// Protocol-specific access details of a property.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VisitorConfig {
    /// The protocol name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_name: String,
    /// Free-form visitor configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub config_data: Option<FreeForm>,
}

/// `pushMethod` of a property.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushMethod {
    /// Push over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<PushMethodHttp>,
    /// Push over MQTT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mqtt: Option<PushMethodMqtt>,
    /// Push to an OpenTelemetry collector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otel: Option<PushMethodOtel>,
    /// Push to a database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_method: Option<DbMethodConfig>,
    /// Free-form anomaly detection settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub anomaly_detection: Option<FreeForm>,
}

/// HTTP push target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushMethodHttp {
    /// Host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_name: String,
    /// Port.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port: i64,
    /// Path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request_path: String,
    /// Timeout.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout: i64,
}

/// MQTT push target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PushMethodMqtt {
    /// Broker address, e.g. `mqtt://127.0.0.1:1883`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Topic.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topic: String,
    /// QoS.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub qos: i32,
    /// Retained flag.
    #[serde(default, skip_serializing_if = "is_false")]
    pub retained: bool,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// OpenTelemetry push target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PushMethodOtel {
    /// Exporter endpoint, e.g. `https://localhost:4318/v1/metrics`.
    #[serde(
        rename = "endpointURL",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub endpoint_url: String,
}

/// Database push targets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DbMethodConfig {
    /// InfluxDB 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub influxdb2: Option<DbMethodInfluxdb2>,
    /// Redis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<DbMethodRedis>,
    /// TDengine (upstream key `TDEngine`).
    #[serde(rename = "TDEngine", default, skip_serializing_if = "Option::is_none")]
    pub td_engine: Option<DbMethodTdEngine>,
    /// MySQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mysql: Option<DbMethodMysql>,
}

/// InfluxDB 2 target; both members are always serialised, as upstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DbMethodInfluxdb2 {
    /// Connection.
    #[serde(default)]
    pub influxdb2_client_config: Option<Influxdb2ClientConfig>,
    /// Data layout.
    #[serde(default)]
    pub influxdb2_data_config: Option<Influxdb2DataConfig>,
}

/// InfluxDB 2 connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Influxdb2ClientConfig {
    /// URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Organisation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub org: String,
    /// Bucket.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket: String,
}

/// InfluxDB 2 data layout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Influxdb2DataConfig {
    /// Measurement.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub measurement: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tag: BTreeMap<String, String>,
    /// Field key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field_key: String,
}

/// Redis target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DbMethodRedis {
    /// Connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_client_config: Option<RedisClientConfig>,
}

/// Redis connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisClientConfig {
    /// Address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub addr: String,
    /// Database number (upstream key `db`).
    #[serde(rename = "db", default, skip_serializing_if = "is_zero")]
    pub db: i64,
    /// Pool size.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub poolsize: i64,
    /// Minimum idle connections.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_idle_conns: i64,
}

/// TDengine target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DbMethodTdEngine {
    /// Connection (upstream key `TDEngineClientConfig`).
    #[serde(
        rename = "TDEngineClientConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_config: Option<TdEngineClientConfig>,
}

/// TDengine connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TdEngineClientConfig {
    /// Address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub addr: String,
    /// Database name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub db_name: String,
}

/// MySQL target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DbMethodMysql {
    /// Connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mysql_client_config: Option<MysqlClientConfig>,
}

/// MySQL connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MysqlClientConfig {
    /// Address, e.g. `localhost:3306`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub addr: String,
    /// Database.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub database: String,
    /// User.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_name: String,
}

/// A blueprint of devices: their properties and protocol.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "devices.kubeedge.io",
    version = "v1beta1",
    kind = "DeviceModel",
    plural = "devicemodels",
    singular = "devicemodel",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct DeviceModelSpec {
    /// Properties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<ModelProperty>,
    /// Protocol name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// Free-form protocol configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub protocol_config_data: Option<FreeForm>,
}

/// A property of a [`DeviceModel`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelProperty {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `INT`, `FLOAT`, `DOUBLE`, `STRING`, `BOOLEAN`, `BYTES` or `STREAM`. Kept as a string so
    /// an unknown value does not make the whole object unreadable.
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["INT", "FLOAT", "DOUBLE", "STRING", "BOOLEAN", "BYTES", "STREAM"]))]
    pub property_type: String,
    /// `ReadWrite` or `ReadOnly`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["ReadWrite", "ReadOnly"]))]
    pub access_mode: String,
    /// Minimum.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub minimum: String,
    /// Maximum.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub maximum: String,
    /// Unit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit: String,
    /// Default visitor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitors: Option<VisitorConfig>,
}

/// Spec of a [`DeviceStatus`]: empty; the Device is found through the owner reference.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "devices.kubeedge.io",
    version = "v1beta1",
    kind = "DeviceStatus",
    plural = "devicestatuses",
    singular = "devicestatus",
    namespaced,
    status = "DeviceStatusStatus"
)]
pub struct DeviceStatusSpec {}

/// What the edge reported about a device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceStatusStatus {
    /// Reported and observed-desired values per property.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub twins: Vec<Twin>,
    /// `online`, `offline`, `ok`, `unknown`, `unhealthy`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// RFC 3339 time the device was last online.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_online_time: String,
    /// Free-form extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub extensions: Option<FreeForm>,
}

/// One property's twin. Both values are always serialised (`{"value": ""}` when unset), as Go
/// does.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Twin {
    /// The property (a `spec.properties[].name` of the Device).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub property_name: String,
    /// The value the edge reported.
    #[serde(default)]
    pub reported: TwinProperty,
    /// The desired value the mapper has seen.
    #[serde(default)]
    pub observed_desired: TwinProperty,
}

/// Removes the status subresource the derive adds: upstream's device CRDs have none.
pub(crate) fn without_status_subresource(
    mut crd: CustomResourceDefinition,
) -> CustomResourceDefinition {
    for v in &mut crd.spec.versions {
        v.subresources = None;
    }
    crd
}

/// The older version every device CRD still serves (KubeEdge declares it served, not stored).
pub const LEGACY_VERSION: &str = "v1alpha2";

/// The device CRDs as upstream installs them: `v1beta1` served and stored, no status
/// subresource, and `v1alpha2` served but not stored, listed first.
///
/// There is no conversion webhook (strategy `None`, as upstream): a `v1alpha2` read returns
/// the stored object relabelled, a `v1alpha2` write is stored as written. The `v1alpha2`
/// schema keeps whatever `spec` and `status` hold (and, for DeviceStatus, whose `v1alpha2` is
/// a placeholder upstream, a top-level `twins` list), so clients of the older version read and
/// write without the API server pruning their fields. The controllers use `v1beta1` only.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        with_legacy_version(without_status_subresource(Device::crd()), false),
        with_legacy_version(DeviceModel::crd(), false),
        with_legacy_version(without_status_subresource(DeviceStatus::crd()), true),
    ]
}

/// Adds the served, non-storage [`LEGACY_VERSION`] in front of the derived version.
fn with_legacy_version(
    mut crd: CustomResourceDefinition,
    top_level_twins: bool,
) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionVersion, CustomResourceValidation, JSONSchemaProps,
    };
    let kept = || JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    };
    let mut properties =
        BTreeMap::from([("spec".to_owned(), kept()), ("status".to_owned(), kept())]);
    if top_level_twins {
        properties.insert(
            "twins".to_owned(),
            JSONSchemaProps {
                type_: Some("array".into()),
                items: Some(
                    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(
                        Box::new(kept()),
                    ),
                ),
                ..JSONSchemaProps::default()
            },
        );
    }
    let legacy = CustomResourceDefinitionVersion {
        name: LEGACY_VERSION.into(),
        served: true,
        storage: false,
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(JSONSchemaProps {
                description: Some(format!(
                    "{} of {GROUP}/{LEGACY_VERSION}, served for older clients; stored as {VERSION}",
                    crd.spec.names.kind
                )),
                type_: Some("object".into()),
                properties: Some(properties),
                ..JSONSchemaProps::default()
            }),
        }),
        ..CustomResourceDefinitionVersion::default()
    };
    crd.spec.versions.insert(0, legacy);
    crd
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn device_json_uses_kubeedge_names() {
        let text = r#"{"apiVersion":"devices.kubeedge.io/v1beta1","kind":"Device",
            "metadata":{"name":"d1","namespace":"default"},
            "spec":{"deviceModelRef":{"name":"m1"},"nodeName":"e1",
              "properties":[{"name":"temp","desired":{"value":"1"},"visitors":{"protocolName":"modbus",
                 "configData":{"register":"x","n":{"deep":[1]}}},"reportCycle":5,
                 "pushMethod":{"mqtt":{"address":"a","qos":1},"dbMethod":{"TDEngine":{"TDEngineClientConfig":{"addr":"t"}}},
                 "otel":{"endpointURL":"u"},"anomalyDetection":{"k":1}}}],
              "protocol":{"protocolName":"modbus","configData":{"slave":1}},
              "methods":[{"name":"m","propertyNames":["temp"]}],
              "stateReport":{"reportToCloud":true,"reportCycle":3}}}"#;
        let d: Device = serde_json::from_str(text).unwrap();
        assert_eq!(d.spec.device_model_ref.as_ref().unwrap().name, "m1");
        let p = &d.spec.properties[0];
        assert_eq!(p.visitors.config_data.as_ref().unwrap()["n"]["deep"][0], 1);
        let back = serde_json::to_value(&d).unwrap();
        let want: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(back, want, "round trip keeps every field and name");
        assert_eq!(Device::api_version(&()), API_VERSION);
    }

    #[test]
    fn twins_serialise_unset_values_like_go() {
        let t = Twin {
            property_name: "temp".into(),
            ..Twin::default()
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"propertyName":"temp","reported":{"value":""},"observedDesired":{"value":""}}"#
        );
    }

    #[test]
    fn every_device_crd_serves_v1alpha2_and_stores_v1beta1() {
        for crd in crds() {
            let versions: Vec<(&str, bool, bool)> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [("v1alpha2", true, false), ("v1beta1", true, true)],
                "{:?}",
                crd.metadata.name
            );
            assert!(crd.spec.conversion.is_none(), "no conversion webhook");
            let legacy = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            for field in ["spec", "status"] {
                assert_eq!(
                    legacy["openAPIV3Schema"]["properties"][field]["x-kubernetes-preserve-unknown-fields"],
                    true,
                    "{legacy}"
                );
            }
            let twins = &legacy["openAPIV3Schema"]["properties"]["twins"];
            let is_status = crd.spec.names.kind == "DeviceStatus";
            assert_eq!(twins.is_object(), is_status, "{legacy}");
        }
    }

    #[test]
    fn crds_have_upstream_names_and_no_status_subresource() {
        let crds = crds();
        let names: Vec<_> = crds
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        assert_eq!(
            names,
            [
                "devices.devices.kubeedge.io",
                "devicemodels.devices.kubeedge.io",
                "devicestatuses.devices.kubeedge.io"
            ]
        );
        assert!(
            crds.iter()
                .flat_map(|c| &c.spec.versions)
                .all(|v| v.subresources.is_none())
        );
        let schema = serde_json::to_value(&crds[0].spec.versions[1].schema).unwrap();
        let config = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["protocol"]["properties"]
            ["configData"];
        assert_eq!(
            config["x-kubernetes-preserve-unknown-fields"], true,
            "{config}"
        );
    }
}
