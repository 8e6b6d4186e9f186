//! `operations.kubeedge.io`: the node jobs (NodeUpgradeJob, ImagePrePullJob, ConfigUpdateJob)
//! the taskmanager runs on edge nodes, with KubeEdge's names, versions and constants.
//!
//! [`v1alpha2`] is the stored version and the one cloudcore uses; [`v1alpha1`] is served for
//! NodeUpgradeJob and ImagePrePullJob as KubeEdge serves it (no conversion). All three are
//! cluster-scoped, with a status subresource whose schema requires `status.phase`, and have no
//! printer columns (`kubectl get nodeupgradejobs` prints NAME and AGE, as with KubeEdge's
//! CRDs). Take the manifests from [`crds`].
//!
//! ```
//! use kubeedge_api::operations::{self, v1alpha2::NodeUpgradeJob};
//! let job: NodeUpgradeJob = serde_json::from_str(
//!     r#"{"apiVersion":"operations.kubeedge.io/v1alpha2","kind":"NodeUpgradeJob",
//!         "metadata":{"name":"up-1"},"spec":{"version":"v1.23.0","nodeNames":["edge-1"]}}"#,
//! ).unwrap();
//! assert_eq!(job.spec.node_names, ["edge-1"]);
//! // The spec the edge receives always carries the misspelt digest key, as Go writes it.
//! let spec = serde_json::to_value(&job.spec).unwrap();
//! assert!(spec["imageDigestGatter"].is_null());
//! assert_eq!(operations::crds().len(), 3);
//! ```

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod v1alpha1;
pub mod v1alpha2;

/// The API group of the node jobs.
pub const GROUP: &str = "operations.kubeedge.io";
/// The version cloudcore reads and writes (the storage version).
pub const VERSION: &str = "v1alpha2";
/// `apiVersion` of the stored version, also the first two segments of every task message
/// resource (`operations.kubeedge.io/v1alpha2/<kind>/<job>/node/<node>`).
pub const API_VERSION: &str = "operations.kubeedge.io/v1alpha2";

/// The resource type of each job kind in task message resources, and its finalizer.
pub mod kind {
    /// NodeUpgradeJob's resource type.
    pub const NODE_UPGRADE_JOB: &str = "nodeupgradejob";
    /// ImagePrePullJob's resource type.
    pub const IMAGE_PRE_PULL_JOB: &str = "imageprepulljob";
    /// ConfigUpdateJob's resource type.
    pub const CONFIG_UPDATE_JOB: &str = "configupdatejob";
    /// The job controller's finalizer on NodeUpgradeJobs.
    pub const NODE_UPGRADE_JOB_FINALIZER: &str = "kubeedge.io/nodeupgradejob-controller";
    /// The job controller's finalizer on ImagePrePullJobs.
    pub const IMAGE_PRE_PULL_JOB_FINALIZER: &str = "kubeedge.io/imageprepulljob-controller";
    /// The job controller's finalizer on ConfigUpdateJobs.
    pub const CONFIG_UPDATE_JOB_FINALIZER: &str = "kubeedge.io/configupdatejob-controller";
}

/// Job phases (`status.phase`) and node task phases (`status.nodeStatus[].phase`), exact
/// strings. An empty job phase means "not initialised yet".
pub mod phase {
    /// The job's nodes were selected; work may start.
    pub const INIT: &str = "Init";
    /// Nodes are being worked on (job), or the node's task was sent (node).
    pub const IN_PROGRESS: &str = "InProgress";
    /// Every node finished and the failures are within the tolerance (job only).
    pub const COMPLETED: &str = "Completed";
    /// The job could not start, or too many nodes failed; a node's task failed.
    pub const FAILURE: &str = "Failure";
    /// Not sent yet (node only).
    pub const PENDING: &str = "Pending";
    /// The node finished its task (node only).
    pub const SUCCESSFUL: &str = "Successful";
    /// The node stopped reporting: timed out (node only).
    pub const UNKNOWN: &str = "Unknown";
}

/// Action names of the three flows and the action status strings.
pub mod action {
    /// First action of every flow: the only one cloudcore ever sends.
    pub const CHECK: &str = "Check";
    /// NodeUpgradeJob: stops here when `requireConfirmation` is set.
    pub const WAITING_CONFIRMATION: &str = "WaitingConfirmation";
    /// NodeUpgradeJob, ConfigUpdateJob: `keadm backup edge`.
    pub const BACK_UP: &str = "BackUp";
    /// NodeUpgradeJob: `keadm upgrade edge`.
    pub const UPGRADE: &str = "Upgrade";
    /// NodeUpgradeJob, ConfigUpdateJob: `keadm rollback edge` after a failed upgrade/update.
    pub const ROLL_BACK: &str = "RollBack";
    /// ImagePrePullJob: pulls every image.
    pub const PULL: &str = "Pull";
    /// ConfigUpdateJob: `keadm config-update`.
    pub const UPDATE: &str = "Update";
    /// `actionFlow[].status` and `imageStatus[].status` of a success.
    pub const TRUE: &str = "True";
    /// `actionFlow[].status` and `imageStatus[].status` of a failure.
    pub const FALSE: &str = "False";
}

/// Check items an edge evaluates before it starts (`checkItems`).
pub const CHECK_ITEMS: [&str; 3] = ["cpu", "mem", "disk"];

/// Registry v2 interface access (`registryAPI` of both versions' `imageDigestGatter`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RegistryApi {
    /// The registry host.
    pub host: String,
    /// The bearer token.
    pub token: String,
}

pub(crate) fn int32(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int32"})
}

pub(crate) fn is_zero(v: &i64) -> bool {
    *v == 0
}

pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}

/// The three CRDs as KubeEdge installs them: NodeUpgradeJob and ImagePrePullJob with v1alpha1
/// served and v1alpha2 served and stored, ConfigUpdateJob with v1alpha2 only; `spec` required
/// only on ImagePrePullJob.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let merged = |a: CustomResourceDefinition, b: CustomResourceDefinition| {
        // Both come from this module with the same names and scope: merging cannot fail.
        let mut crd = merge_crds(vec![a, b], VERSION).unwrap_or_else(|e| unreachable!("{e}"));
        // In KubeEdge's order (oldest first), so the manifest reads like theirs.
        crd.spec.versions.sort_by(|x, y| x.name.cmp(&y.name));
        crd
    };
    let mut crds = vec![
        spec_optional(merged(
            v1alpha1::NodeUpgradeJob::crd(),
            v1alpha2::NodeUpgradeJob::crd(),
        )),
        merged(
            v1alpha1::ImagePrePullJob::crd(),
            v1alpha2::ImagePrePullJob::crd(),
        ),
        spec_optional(v1alpha2::ConfigUpdateJob::crd()),
    ];
    for crd in &mut crds {
        let kind = crd.spec.names.kind.clone();
        for v in crd.spec.versions.iter_mut() {
            let stored = v.name == VERSION;
            let Some(root) = v
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            else {
                continue;
            };
            atomic_selectors(root);
            if stored {
                require(root, "status", "phase");
                if kind == "ConfigUpdateJob" {
                    require(root, "spec", "updateFields");
                }
            }
        }
    }
    crds
}

/// Marks every `labelSelector` atomic for server-side apply, as Kubernetes' own schema of a
/// LabelSelector does (k8s-openapi's generated schema leaves the markers out).
fn atomic_selectors(schema: &mut JSONSchemaProps) {
    let Some(props) = schema.properties.as_mut() else {
        return;
    };
    for (name, prop) in props.iter_mut() {
        if name == "labelSelector" {
            prop.x_kubernetes_map_type = Some("atomic".into());
            if let Some(exprs) = prop
                .properties
                .as_mut()
                .and_then(|p| p.get_mut("matchExpressions"))
            {
                exprs.x_kubernetes_list_type = Some("atomic".into());
                if let Some(values) = exprs_values(exprs) {
                    values.x_kubernetes_list_type = Some("atomic".into());
                }
            }
        } else {
            atomic_selectors(prop);
        }
    }
}

fn exprs_values(exprs: &mut JSONSchemaProps) -> Option<&mut JSONSchemaProps> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray;
    match exprs.items.as_mut()? {
        JSONSchemaPropsOrArray::Schema(item) => item.properties.as_mut()?.get_mut("values"),
        JSONSchemaPropsOrArray::Schemas(_) => None,
    }
}

/// Marks `field` of the root's `object` required, as upstream's schema does, while the Rust
/// type reads it leniently (a serde default would otherwise also become a schema default).
fn require(root: &mut JSONSchemaProps, object: &str, field: &str) {
    let Some(object) = root.properties.as_mut().and_then(|p| p.get_mut(object)) else {
        return;
    };
    if let Some(f) = object.properties.as_mut().and_then(|p| p.get_mut(field)) {
        f.default = None;
    }
    let required = object.required.get_or_insert_with(Vec::new);
    if !required.iter().any(|r| r == field) {
        required.push(field.to_owned());
    }
}

/// Drops `spec` from the root's required list: upstream's Go type tags it `omitempty`.
fn spec_optional(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for v in &mut crd.spec.versions {
        let root = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut());
        if let Some(root) = root
            && let Some(required) = root.required.as_mut()
        {
            required.retain(|r| r != "spec");
            if required.is_empty() {
                root.required = None;
            }
        }
    }
    crd
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn version<'a>(
        crd: &'a CustomResourceDefinition,
        name: &str,
    ) -> &'a k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion{
        crd.spec.versions.iter().find(|v| v.name == name).unwrap()
    }

    fn schema(crd: &CustomResourceDefinition, name: &str) -> Value {
        serde_json::to_value(
            &version(crd, name)
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema,
        )
        .unwrap()
    }

    #[test]
    fn crds_serve_the_versions_kubeedge_serves_and_store_v1alpha2() {
        let crds = crds();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "nodeupgradejobs.operations.kubeedge.io",
                "imageprepulljobs.operations.kubeedge.io",
                "configupdatejobs.operations.kubeedge.io"
            ]
        );
        for crd in &crds {
            assert_eq!(crd.spec.scope, "Cluster");
            let versions: Vec<_> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            let want: &[(&str, bool, bool)] = if crd.spec.names.kind == "ConfigUpdateJob" {
                &[("v1alpha2", true, true)]
            } else {
                &[("v1alpha1", true, false), ("v1alpha2", true, true)]
            };
            assert_eq!(versions, want, "{}", crd.spec.names.kind);
            for v in &crd.spec.versions {
                assert!(v.subresources.as_ref().unwrap().status.is_some());
                assert!(v.additional_printer_columns.is_none(), "KubeEdge has none");
            }
            let status = &schema(crd, "v1alpha2")["properties"]["status"];
            assert_eq!(status["required"], json!(["phase"]), "{status}");
        }
        let required = |crd: &CustomResourceDefinition, v: &str| schema(crd, v)["required"].clone();
        assert_eq!(required(&crds[0], "v1alpha2"), Value::Null);
        assert_eq!(required(&crds[1], "v1alpha2"), json!(["spec"]));
        assert_eq!(required(&crds[1], "v1alpha1"), json!(["spec"]));
        assert_eq!(required(&crds[2], "v1alpha2"), Value::Null);
        let cu = schema(&crds[2], "v1alpha2");
        assert_eq!(
            cu["properties"]["spec"]["required"],
            json!(["updateFields"])
        );
        let timeout =
            &schema(&crds[0], "v1alpha2")["properties"]["spec"]["properties"]["timeoutSeconds"];
        assert_eq!(
            timeout,
            &json!({"type": "integer", "format": "int32", "description": timeout["description"]})
        );
    }

    #[test]
    fn v1alpha2_objects_round_trip_with_kubeedge_field_names() {
        let text = r#"{"apiVersion":"operations.kubeedge.io/v1alpha2","kind":"ImagePrePullJob",
            "metadata":{"name":"p"},
            "spec":{"imagePrePullTemplate":{"images":["nginx:1.27"],"nodeNames":["e1"],
              "checkItems":["disk"],"failureTolerate":"0.1","concurrency":2,"timeoutSeconds":300,
              "imageSecrets":"default/regcred","retryTimes":1}},
            "status":{"phase":"InProgress","state":"x","status":[{"nodeStatus":{"nodeName":"e1"},"imageStatus":[{"image":"a","state":"successful"}]}],
              "nodeStatus":[{"nodeName":"e1","phase":"Successful",
              "actionFlow":[{"action":"Check","status":"True","time":"2026-08-06T07:00:00Z"}],
              "imageStatus":[{"image":"nginx:1.27","status":"True"}]}]}}"#;
        let job: v1alpha2::ImagePrePullJob = serde_json::from_str(text).unwrap();
        assert_eq!(
            job.spec.image_pre_pull_template.image_secret,
            "default/regcred"
        );
        let want: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            want,
            "nothing lost or added"
        );
        // `phase` is written even when empty (the schema requires it).
        let st = serde_json::to_value(v1alpha2::ConfigUpdateJobStatus::default()).unwrap();
        assert_eq!(st, json!({"phase": ""}));
    }

    #[test]
    fn odd_values_the_api_server_accepts_stay_readable() {
        let job: v1alpha2::NodeUpgradeJob = serde_json::from_str(
            r#"{"metadata":{"name":"u"},"spec":{"timeoutSeconds":-5,"concurrency":-1,
                "imageDigestGatter":null},"status":{"phase":"Weird","nodeStatus":[{"phase":"?"}]}}"#,
        )
        .unwrap();
        assert_eq!(job.spec.timeout_seconds, Some(-5));
        assert_eq!(job.status.unwrap().node_status[0].phase, "?");
    }
}
