//! `operations.kubeedge.io/v1alpha1`: served (not stored) for NodeUpgradeJob and
//! ImagePrePullJob, as KubeEdge's CRDs serve it
//! (`staging/src/github.com/kubeedge/api/apis/operations/v1alpha1`).
//!
//! There is no conversion webhook (strategy `None`): a v1alpha1 read of a stored v1alpha2
//! object only changes `apiVersion`, and the API server prunes what the v1alpha1 schema lacks.
//! cloudcore never reads or writes this version; the types exist to generate its schema and
//! for clients that still speak it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{int32, is_false, is_zero};

/// Specification of the desired behavior of NodeUpgradeJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha1",
    kind = "NodeUpgradeJob",
    plural = "nodeupgradejobs",
    singular = "nodeupgradejob",
    status = "NodeUpgradeJobStatus",
    doc = "NodeUpgradeJob is used to upgrade edge node from cloud side."
)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobSpec {
    /// The edgecore version to upgrade to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// TimeoutSeconds limits the duration of the node upgrade job.
    /// Default to 300.
    /// If set to 0, we'll use the default value 300.
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
    /// ImageDigestGatter define registry v2 interface access configuration.
    /// As a transition, it is not required at first, and the image digest is checked when this field is set.
    #[serde(default)]
    pub image_digest_gatter: Option<ImageDigestGatter>,
    /// Concurrency specifies the max number of edge nodes that can be upgraded at the same time.
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

/// The v1alpha1 digest source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageDigestGatter {
    /// Value used to directly set a value to check image
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// RegistryAPI define registry v2 interface access configuration
    #[serde(
        rename = "registryAPI",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub registry_api: Option<super::RegistryApi>,
}

/// Most recently observed status of the NodeUpgradeJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobStatus {
    /// State represents for the state phase of the NodeUpgradeJob.
    /// There are several possible state values: "", Upgrading, BackingUp, RollingBack and Checking.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// CurrentVersion represents for the current status of the EdgeCore.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_version: String,
    /// HistoricVersion represents for the historic status of the EdgeCore.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub historic_version: String,
    /// Event represents for the event of the ImagePrePullJob.
    /// There are six possible event values: Init, Check, BackUp, Upgrade, TimeOut, Rollback.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event: String,
    /// Action represents for the action of the ImagePrePullJob.
    /// There are two possible action values: Success, Failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Reason represents for the reason of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Time represents for the running time of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// Status contains upgrade Status for each edge node.
    #[serde(rename = "nodeStatus", default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<TaskStatus>,
}

/// TaskStatus stores the status of Upgrade for each edge node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// NodeName is the name of edge node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// State represents for the upgrade state phase of the edge node.
    /// There are several possible state values: "", Upgrading, BackingUp, RollingBack and Checking.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Event represents for the event of the ImagePrePullJob.
    /// There are three possible event values: Init, Check, Pull.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event: String,
    /// Action represents for the action of the ImagePrePullJob.
    /// There are three possible action values: Success, Failure, TimeOut.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Reason represents for the reason of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Time represents for the running time of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
}

/// ImagePrePullJobSpec represents the specification of the desired behavior of ImagePrePullJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha1",
    kind = "ImagePrePullJob",
    plural = "imageprepulljobs",
    singular = "imageprepulljob",
    status = "ImagePrePullJobStatus",
    doc = "ImagePrePullJob is used to prepull images on edge node."
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullJobSpec {
    /// ImagePrepullTemplate represents original templates of imagePrePull
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
    /// Concurrency specifies the maximum number of edge nodes that can pull images at the same time.
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
    /// State represents for the state phase of the ImagePrePullJob.
    /// There are five possible state values: "", checking, pulling, successful, failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Event represents for the event of the ImagePrePullJob.
    /// There are four possible event values: Init, Check, Pull, TimeOut.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event: String,
    /// Action represents for the action of the ImagePrePullJob.
    /// There are two possible action values: Success, Failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Reason represents for the reason of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Time represents for the running time of the ImagePrePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// Status contains image prepull status for each edge node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<ImagePrePullStatus>,
}

/// ImagePrePullStatus stores image prepull status for each edge node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullStatus {
    /// TaskStatus represents the status for each node
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status: Option<TaskStatus>,
    /// ImageStatus represents the prepull status for each image
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_status: Vec<ImageStatus>,
}

/// ImageStatus stores the prepull status for each image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    /// Image is the name of the image
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// State represents for the state of this image pull on the edge node.
    /// There are two possible state values: successful, failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Reason represents the fail reason if image pull failed
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}
