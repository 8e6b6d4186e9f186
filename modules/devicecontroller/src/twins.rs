//! The edge's twin and state reports (`devicecontroller/types`), and how a twin report is
//! merged into `DeviceStatus.status.twins` (docs/controllers.md#devicecontroller).

use std::collections::BTreeMap;

use kubeedge_api::devices::{DeviceProperty, Twin, TwinProperty};
use serde::Deserialize;

/// `{"event_id", "timestamp", "twin": {<property>: MsgTwin}}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct TwinUpdate {
    #[serde(default)]
    pub(crate) twin: BTreeMap<String, MsgTwin>,
}

/// One property's report.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct MsgTwin {
    #[serde(default)]
    pub(crate) expected: Option<TwinValue>,
    #[serde(default)]
    pub(crate) actual: Option<TwinValue>,
    #[serde(default)]
    pub(crate) metadata: Option<TypeMetadata>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct TwinValue {
    #[serde(default)]
    pub(crate) value: Option<String>,
    #[serde(default)]
    pub(crate) metadata: Option<ValueMetadata>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct TypeMetadata {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ValueMetadata {
    #[serde(default)]
    pub(crate) timestamp: i64,
}

/// `{"event_id", "timestamp", "device": {"name", "state", "lastOnlineTime"}}` (Go's
/// `Device` member has no tag: any capitalisation).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StateUpdate {
    #[serde(rename = "device", alias = "Device", default)]
    pub(crate) device: StateDevice,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StateDevice {
    #[serde(default)]
    pub(crate) state: String,
    #[serde(rename = "lastOnlineTime", default)]
    pub(crate) last_online_time: String,
}

fn property(value: &TwinValue, twin: &MsgTwin) -> Option<TwinProperty> {
    let v = value.value.clone()?;
    let mut metadata = BTreeMap::new();
    if let Some(m) = &value.metadata {
        metadata.insert("timestamp".to_owned(), m.timestamp.to_string());
    }
    if let Some(t) = &twin.metadata {
        metadata.insert("type".to_owned(), t.kind.clone());
    }
    Some(TwinProperty { value: v, metadata })
}

/// `twins` with every report for a property of the device applied: `actual` → `reported`,
/// `expected` → `observedDesired`; a property reported for the first time gets an entry *with* its
/// values (Go writes them to a copy and loses them); reports for unknown properties are ignored.
pub(crate) fn merge_twins(
    mut twins: Vec<Twin>,
    properties: &[DeviceProperty],
    reports: &BTreeMap<String, MsgTwin>,
) -> Vec<Twin> {
    for (name, report) in reports {
        if !properties.iter().any(|p| &p.name == name) {
            continue;
        }
        let index = match twins.iter().position(|t| &t.property_name == name) {
            Some(i) => i,
            None => {
                twins.push(Twin {
                    property_name: name.clone(),
                    ..Twin::default()
                });
                twins.len() - 1
            }
        };
        let twin = &mut twins[index];
        if let Some(p) = report.actual.as_ref().and_then(|a| property(a, report)) {
            twin.reported = p;
        }
        if let Some(p) = report.expected.as_ref().and_then(|e| property(e, report)) {
            twin.observed_desired = p;
        }
    }
    twins
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_first_report_keeps_its_values_and_unknown_properties_are_ignored() {
        let properties: Vec<DeviceProperty> =
            serde_json::from_value(json!([{"name": "temp"}, {"name": "hum"}])).unwrap();
        let update: TwinUpdate = serde_json::from_value(json!({"event_id": "e", "timestamp": 1, "twin": {
            "temp": {"actual": {"value": "21", "metadata": {"timestamp": 1700000000000i64}}, "metadata": {"type": "int"}},
            "ghost": {"actual": {"value": "1"}},
        }}))
        .unwrap();
        let existing = vec![Twin {
            property_name: "hum".into(),
            reported: TwinProperty {
                value: "40".into(),
                metadata: BTreeMap::new(),
            },
            ..Twin::default()
        }];
        let merged = merge_twins(existing, &properties, &update.twin);
        assert_eq!(merged.len(), 2);
        let v = serde_json::to_value(&merged[1]).unwrap();
        assert_eq!(
            v,
            json!({"propertyName": "temp", "reported": {"value": "21", "metadata": {"timestamp": "1700000000000", "type": "int"}},
                   "observedDesired": {"value": ""}})
        );
        assert_eq!(merged[0].reported.value, "40", "other twins are kept");
    }

    #[test]
    fn expected_values_become_observed_desired() {
        let properties: Vec<DeviceProperty> =
            serde_json::from_value(json!([{"name": "temp"}])).unwrap();
        let update: TwinUpdate =
            serde_json::from_value(json!({"twin": {"temp": {"expected": {"value": "30"}}}}))
                .unwrap();
        let merged = merge_twins(Vec::new(), &properties, &update.twin);
        assert_eq!(merged[0].observed_desired.value, "30");
        assert_eq!(merged[0].reported.value, "");
    }

    #[test]
    fn state_reports_accept_either_casing() {
        let a: StateUpdate = serde_json::from_str(r#"{"event_id":"x","timestamp":1,"device":{"name":"d1","state":"online","lastOnlineTime":"t"}}"#).unwrap();
        let b: StateUpdate = serde_json::from_str(r#"{"Device":{"state":"offline"}}"#).unwrap();
        assert_eq!(
            (a.device.state.as_str(), a.device.last_online_time.as_str()),
            ("online", "t")
        );
        assert_eq!(b.device.state, "offline");
    }
}
