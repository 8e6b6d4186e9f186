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
