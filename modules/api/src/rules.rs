//! `rules.kubeedge.io/v1`: Rule and RuleEndpoint, the router module's routing table
//! (`staging/src/github.com/kubeedge/api/apis/rules/v1`).
//!
//! Like the device CRDs, upstream's Rule CRD has no status subresource (the edgecontroller
//! merge-patches `{"status": …}` on the main resource); use [`crds`] for manifests.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::devices::without_status_subresource;

/// The API group of the router CRDs.
pub const GROUP: &str = "rules.kubeedge.io";
/// Their only version.
pub const VERSION: &str = "v1";

/// Where messages matching a rule come from and go to.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "rules.kubeedge.io",
    version = "v1",
    kind = "Rule",
    plural = "rules",
    singular = "rule",
    namespaced,
    status = "RuleStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct RuleSpec {
    /// Source RuleEndpoint name.
    pub source: String,
    /// Source details, e.g. `{"topic": "t", "node_name": "edge-1"}`.
    pub source_resource: BTreeMap<String, String>,
    /// Target RuleEndpoint name.
    pub target: String,
    /// Target details, e.g. `{"path": "/request_path"}`.
    pub target_resource: BTreeMap<String, String>,
}

/// Delivery counters of a [`Rule`]; every member is always serialised, as upstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    /// Messages delivered.
    #[serde(default)]
    pub success_messages: i64,
    /// Messages that failed.
    #[serde(default)]
    pub fail_messages: i64,
    /// The last error details.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// An endpoint messages are routed from or to.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "rules.kubeedge.io",
    version = "v1",
    kind = "RuleEndpoint",
    plural = "ruleendpoints",
    singular = "ruleendpoint",
    shortname = "re",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct RuleEndpointSpec {
    /// `rest`, `eventbus` or `servicebus` (a string, so an unknown value stays readable).
    #[schemars(extend("enum" = ["rest", "eventbus", "servicebus"]))]
    pub rule_endpoint_type: String,
    /// Endpoint properties, e.g. `{"service_port": "8080"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// The keys of `sourceResource`, `targetResource` and `properties` (exact, as upstream).
pub mod keys {
    /// REST source: the path under `/<node>/<namespace>/`.
    pub const PATH: &str = "path";
    /// Eventbus source and target: the MQTT topic (under the rule's namespace for a source).
    pub const TOPIC: &str = "topic";
    /// Eventbus and servicebus source: the edge node.
    pub const NODE_NAME: &str = "node_name";
    /// Servicebus source: the URL edge applications call.
    pub const TARGET_URL: &str = "target_url";
    /// REST target: the URL messages are POSTed to.
    pub const RESOURCE: &str = "resource";
    /// Servicebus endpoint property: the edge-local port of the service.
    pub const SERVICE_PORT: &str = "service_port";
}

/// What the router reports after delivering messages for a rule (Go's `ExecResult`: no JSON
/// tags, so capitalised keys). Sent as the content of `node/nodeid/<ns>/rulestatus/<name>`
/// `update` to edgecontroller, which adds it to the Rule's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecResult {
    /// The rule's name.
    #[serde(rename = "RuleID", alias = "ruleID", default)]
    pub rule_id: String,
    /// The rule's namespace.
    #[serde(rename = "ProjectID", alias = "projectID", default)]
    pub project_id: String,
    /// `SUCCESS` or `FAIL`.
    #[serde(rename = "Status", alias = "status", default)]
    pub status: String,
    /// The failure (zero for a success).
    #[serde(rename = "Error", alias = "error", default)]
    pub error: ExecError,
    /// How many deliveries this result stands for (Rust extension: the router coalesces its
    /// results; absent, as from KubeEdge's router, means one).
    #[serde(rename = "Count", default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// The failure detail of an [`ExecResult`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecError {
    /// What went wrong.
    #[serde(rename = "Detail", alias = "detail", default)]
    pub detail: String,
    /// When (RFC 3339; Go's zero time for a success).
    #[serde(rename = "Timestamp", alias = "timestamp", default)]
    pub timestamp: String,
}

impl ExecResult {
    /// `SUCCESS`.
    pub const SUCCESS: &'static str = "SUCCESS";
    /// `FAIL`.
    pub const FAIL: &'static str = "FAIL";

    /// The number of deliveries, at least one.
    pub fn deliveries(&self) -> i64 {
        i64::from(self.count.unwrap_or(1).max(1))
    }
}

/// The router CRDs as upstream installs them (no status subresource).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![without_status_subresource(Rule::crd()), RuleEndpoint::crd()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_json_uses_kubeedge_names() {
        let text = r#"{"apiVersion":"rules.kubeedge.io/v1","kind":"Rule","metadata":{"name":"r1"},
            "spec":{"source":"my-rest","sourceResource":{"path":"/a"},"target":"my-eventbus",
            "targetResource":{"topic":"t"}},
            "status":{"successMessages":2,"failMessages":1,"errors":["x"]}}"#;
        let r: Rule = serde_json::from_str(text).unwrap();
        assert_eq!(r.status.as_ref().unwrap().fail_messages, 1);
        let want: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), want);
        let e: RuleEndpoint = serde_json::from_str(
            r#"{"metadata":{"name":"e"},"spec":{"ruleEndpointType":"servicebus"}}"#,
        )
        .unwrap();
        assert_eq!(e.spec.rule_endpoint_type, "servicebus");
    }

    #[test]
    fn exec_results_read_go_keys_and_count_one_without_a_count() {
        let go: ExecResult = serde_json::from_str(
            r#"{"RuleID":"r","ProjectID":"ns","Status":"FAIL","Error":{"Detail":"x","Timestamp":"2026-01-01T00:00:00Z"}}"#,
        )
        .unwrap();
        assert_eq!(
            (
                go.status.as_str(),
                go.error.detail.as_str(),
                go.deliveries()
            ),
            ("FAIL", "x", 1)
        );
        let mut ours = go.clone();
        ours.count = Some(7);
        let text = serde_json::to_string(&ours).unwrap();
        assert!(text.contains(r#""Count":7"#), "{text}");
        assert_eq!(
            serde_json::from_str::<ExecResult>(&text)
                .unwrap()
                .deliveries(),
            7
        );
    }

    #[test]
    fn crds_have_upstream_names() {
        let crds = crds();
        assert_eq!(
            crds[0].metadata.name.as_deref(),
            Some("rules.rules.kubeedge.io")
        );
        assert_eq!(
            crds[1].metadata.name.as_deref(),
            Some("ruleendpoints.rules.kubeedge.io")
        );
        assert!(crds[0].spec.versions[0].subresources.is_none());
        assert_eq!(
            crds[1].spec.names.short_names.as_deref(),
            Some(&["re".to_string()][..])
        );
    }
}
