//! `operations.kubeedge.io/v1alpha2`, the stored version: NodeUpgradeJob, ImagePrePullJob and
//! ConfigUpdateJob with KubeEdge's JSON field names
//! (`staging/src/github.com/kubeedge/api/apis/operations/v1alpha2`).
//!
//! Fields are read leniently, so that no stored object is unreadable: phases and action
//! names are strings (the [`super::phase`] constants), integers are `i64` (the schema says
//! `int32`, as upstream's; a negative `timeoutSeconds`, which the API server accepts, is
//! refused by the job controller with a reason instead of breaking the watch). The
//! deprecated v1alpha1-compatible status fields are kept, so a read-modify-write of the status
//! preserves whatever another writer put there.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{RegistryApi, int32, is_false, is_zero};

// ---------------------------------------------------------------------------------------------
// Shared status shapes
// ---------------------------------------------------------------------------------------------

/// The result of one action an edge ran for its node task (one entry per edge report).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ActionStatus {
    /// Action represents for the action name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Status is `"True"` when the action succeeded, `"False"` when it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Reason represents the reason for the failure of the action.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Time is when the action finished (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
}

/// The pull result of one image on one node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ImageStatus {
    /// Image is the name of the image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Status is `"True"` when the image was pulled, `"False"` when it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Reason represents the fail reason if image pull failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

// ---------------------------------------------------------------------------------------------
// NodeUpgradeJob
// ---------------------------------------------------------------------------------------------

/// Specification of the desired behavior of NodeUpgradeJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha2",
    kind = "NodeUpgradeJob",
    plural = "nodeupgradejobs",
    singular = "nodeupgradejob",
    status = "NodeUpgradeJobStatus",
    doc = "NodeUpgradeJob is used to upgrade edge node from cloud side."
)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobSpec {
    /// Version is the edgecore version to upgrade to, e.g. `v1.23.0`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// TimeoutSeconds limits how long one node's upgrade may go without progress.
    /// Default to 300. If set to 0, we'll use the default value 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub timeout_seconds: Option<i64>,
    /// NodeNames is a request to select some specific nodes. If it is non-empty,
    /// the upgrade job simply select these edge nodes to do upgrade operation.
    /// Please note that sets of NodeNames and LabelSelector are ORed.
    /// Users must set one and can only set one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_names: Vec<String>,
    /// LabelSelector is a filter to select member clusters by labels.
    /// It must match a node's labels for the NodeUpgradeJob to be operated on that node.
    /// Please note that sets of NodeNames and LabelSelector are ORed.
    /// Users must set one and can only set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Image specifies a container image name, the image contains: keadm and edgecore.
    /// keadm is used as upgradetool, to install the new version of edgecore.
    /// The image name consists of registry hostname and repository name,
    /// if it includes the tag or digest, the tag or digest will be overwritten by Version field above.
    /// If the registry hostname is empty, docker.io will be used as default.
    /// The default image name is: kubeedge/installation-package.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// ImageDigestGetter define registry v2 interface access configuration.
    /// As a transition, it is not required at first, and the image digest is checked when this field is set.
    // Always serialised (`null` when unset): upstream's field has no omitempty, and the
    // misspelt key is the real one.
    #[serde(default)]
    pub image_digest_gatter: Option<ImageDigestGetter>,
    /// Concurrency specifies the maximum number of concurrent that edge nodes associated with
    /// each CloudCore instance can be upgraded at the same time.
    /// The default Concurrency value is 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(schema_with = "int32")]
    pub concurrency: i64,
    /// CheckItems specifies the items need to be checked before the task is executed.
    /// The default CheckItems value is nil.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_items: Vec<String>,
    /// FailureTolerate specifies the task tolerance failure ratio.
    /// The default FailureTolerate value is 0.1.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_tolerate: String,
    /// RequireConfirmation specifies whether you need to confirm the upgrade.
    /// The default RequireConfirmation value is false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub require_confirmation: bool,
}

/// Where the edge takes the expected digest of the installation-package image from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageDigestGetter {
    /// ARM64 indicates the image digest of the arm64 platform for verification.
    /// E.g., sha256:0738039541234567890123456789012345678901234567890123456789012345
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arm64: String,
    /// AMD64 indicates the image digest of the amd64 platform for verification.
    /// E.g., sha256:0738039541234567890123456789012345678901234567890123456789012345
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub amd64: String,
    /// RegistryAPI define registry v2 interface access configuration.
    /// Used to automatically gets multiple platform image digests from a remote registry
    /// to set values into ARM64 and AMD64 fields.
    #[serde(
        rename = "registryAPI",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub registry_api: Option<RegistryApi>,
}

/// Most recently observed status of the NodeUpgradeJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobStatus {
    /// Phase represents for the phase of the NodeUpgradeJob.
    // Always serialised, required by the schema (see `super::crds`); read leniently.
    #[serde(default)]
    pub phase: String,
    /// NodeStatus contains upgrade Status for each edge node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_status: Vec<NodeUpgradeJobNodeTaskStatus>,
    /// Reason represents for the reason of the NodeUpgradeJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// State represents for the state phase of the NodeUpgradeJob.
    /// There are several possible state values: "", Upgrading, BackingUp, RollingBack and Checking.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// CurrentVersion represents for the current status of the EdgeCore.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_version: String,
    /// HistoricVersion represents for the historic status of the EdgeCore.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub historic_version: String,
    /// Time represents for the running time of the ImagePrePullJob.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// Event represents for the event of the ImagePrePullJob.
    /// There are six possible event values: Init, Check, BackUp, Upgrade, TimeOut, Rollback.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event: String,
    /// Action represents for the action of the ImagePrePullJob.
    /// There are two possible action values: Success, Failure.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
}

/// The upgrade of one edge node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobNodeTaskStatus {
    /// ActionFlow represents for the results of executing the action flow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_flow: Vec<ActionStatus>,
    /// CurrentVersion represents for the current status of the EdgeCore.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_version: String,
    /// HistoricVersion represents for the historic status of the EdgeCore.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub historic_version: String,
    /// NodeName is the name of edge node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Phase represents for the phase of the node task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Reason represents the reason for the failure of the node task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// State represents for the upgrade state phase of the edge node.
    /// There are several possible state values: "", Upgrading, BackingUp, RollingBack and Checking.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Event represents for the event of the ImagePrePullJob.
    /// There are three possible event values: Init, Check, Pull.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event: String,
}

// ---------------------------------------------------------------------------------------------
// ImagePrePullJob
// ---------------------------------------------------------------------------------------------

/// ImagePrePullSpec represents the specification of the desired behavior of ImagePrePullJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha2",
    kind = "ImagePrePullJob",
    plural = "imageprepulljobs",
    singular = "imageprepulljob",
    status = "ImagePrePullJobStatus",
    doc = "ImagePrePullJob is used to prepull images on edge node."
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullJobSpec {
    /// ImagePrepullTemplate represents original templates of imagePrePull
    // Always serialised, as Go serialises a struct member.
    #[serde(default)]
    pub image_pre_pull_template: ImagePrePullTemplate,
}

/// ImagePrePullTemplate represents original templates of imagePrePull
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullTemplate {
    /// Images is the image list to be prepull
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// NodeNames is a request to select some specific nodes. If it is non-empty,
    /// the upgrade job simply select these edge nodes to do upgrade operation.
    /// Please note that sets of NodeNames and LabelSelector are ORed.
    /// Users must set one and can only set one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_names: Vec<String>,
    /// LabelSelector is a filter to select member clusters by labels.
    /// It must match a node's labels for the NodeUpgradeJob to be operated on that node.
    /// Please note that sets of NodeNames and LabelSelector are ORed.
    /// Users must set one and can only set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// CheckItems specifies the items need to be checked before the task is executed.
    /// The default CheckItems value is disk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_items: Vec<String>,
    /// FailureTolerate specifies the task tolerance failure ratio.
    /// The default FailureTolerate value is 0.1.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_tolerate: String,
    /// Concurrency specifies the maximum number of concurrent that edge nodes associated with
    /// each CloudCore instance can pull images at the same time.
    /// The default Concurrency value is 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(schema_with = "int32")]
    pub concurrency: i64,
    /// TimeoutSeconds limits the duration of the node prepull job on each edgenode.
    /// Default to 300.
    /// If set to 0, we'll use the default value 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub timeout_seconds: Option<i64>,
    /// ImageSecret specifies the secret for image pull if private registry used.
    /// Use {namespace}/{secretName} in format.
    #[serde(
        rename = "imageSecrets",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub image_secret: String,
    /// RetryTimes specifies the retry times if image pull failed on each edgenode.
    /// Default to 0
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(schema_with = "int32")]
    pub retry_times: i64,
}

/// ImagePrePullJobStatus stores the status of ImagePrePullJob.
/// contains images prepull status on multiple edge nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullJobStatus {
    /// Phase represents for the phase of the NodeUpgradeJob
    #[serde(default)]
    pub phase: String,
    /// NodeStatus contains image prepull status for each edge node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_status: Vec<ImagePrePullNodeTaskStatus>,
    /// Reason represents for the reason of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// State represents for the state phase of the ImagePrePullJob.
    /// There are several possible state values: "", Upgrading, BackingUp, RollingBack and Checking.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Time represents for the running time of the ImagePrePullJob.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// Event represents for the event of the ImagePrePullJob.
    /// There are four possible event values: Init, Check, Pull, TimeOut.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event: String,
    /// Action represents for the action of the ImagePrePullJob.
    /// There are two possible action values: Success, Failure.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Status contains image prepull status for each edge node.
    /// Deprecated: For compatibility with v1alpha1 version, It will be removed in v1.23
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<super::v1alpha1::ImagePrePullStatus>,
}

/// ImagePrePullNodeTaskStatus stores image prepull status for each edge node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullNodeTaskStatus {
    /// ActionFlow represents for the results of executing the action flow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_flow: Vec<ActionStatus>,
    /// ImageStatus represents the prepull status for each image
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_status: Vec<ImageStatus>,
    /// NodeName is the name of edge node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Phase represents for the phase of the node task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Reason represents the reason for the failure of the node task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

// ---------------------------------------------------------------------------------------------
// ConfigUpdateJob
// ---------------------------------------------------------------------------------------------

/// Specification of the desired behavior of ConfigUpdateJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha2",
    kind = "ConfigUpdateJob",
    plural = "configupdatejobs",
    singular = "configupdatejob",
    status = "ConfigUpdateJobStatus",
    doc = "ConfigUpdateJob is used to update edge configuration from cloud side."
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUpdateJobSpec {
    /// NodeNames is a request to select some specific nodes. If it is non-empty,
    /// the update job simply select these edge nodes to do config update operation.
    /// Please note that sets of NodeNames and LabelSelector are ORed.
    /// Users must set one and can only set one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_names: Vec<String>,
    /// LabelSelector is a filter to select member clusters by labels.
    /// It must match a node's labels for the ConfigUpdateJob to be operated on that node.
    /// Please note that sets of NodeNames and LabelSelector are ORed.
    /// Users must set one and can only set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// TimeoutSeconds limits the duration of the config update job.
    /// Default to 300.
    /// If set to 0, we'll use the default value 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int32")]
    pub timeout_seconds: Option<i64>,
    /// Concurrency specifies the maximum number of concurrent that edge nodes associated with
    /// each CloudCore instance can be updated at the same time.
    /// The default Concurrency value is 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(schema_with = "int32")]
    pub concurrency: i64,
    /// UpdateFields specify certain fields in EdgeCore configuration to update
    // Required by the schema (see `super::crds`); read leniently.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub update_fields: BTreeMap<String, String>,
    /// FailureTolerate specifies the task tolerance failure ratio.
    /// The default FailureTolerate value is 0.1.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_tolerate: String,
}

/// ConfigUpdateJobStatus stores the status of ConfigUpdateJob.
/// contains multiple edge nodes config update status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUpdateJobStatus {
    /// Phase represents for the phase of the ConfigUpdateJob
    #[serde(default)]
    pub phase: String,
    /// NodeStatus contains config update status for each edge node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_status: Vec<ConfigUpdateJobNodeTaskStatus>,
    /// Reason represents for the reason of the ConfigUpdateJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// ConfigUpdateJobNodeTaskStatus stores the status of config update for each edge node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUpdateJobNodeTaskStatus {
    /// ActionFlow represents for the results of executing the action flow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_flow: Vec<ActionStatus>,
    /// NodeName is the name of edge node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Phase represents for the phase of the node task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Reason represents the reason for the failure of the node task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}
