//! `policy.kubeedge.io/v1alpha1`: ServiceAccountAccess, what an edge's metaServer authorizes
//! service-account tokens with (`featureGates.requireAuthorization`):
//! `staging/src/github.com/kubeedge/api/apis/policy/v1alpha1`.
//!
//! The embedded ServiceAccount and bindings keep only what KubeEdge's CRD keeps of them (name,
//! namespace, labels and annotations of their metadata; subjects, role reference, rules), so an
//! object reads the same whichever CRD stored it, and carry no `apiVersion`/`kind` (KubeEdge's
//! typed reader drops them).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LocalObjectReference, ObjectReference};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "policy.kubeedge.io";
/// Its only version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of a ServiceAccountAccess.
pub const API_VERSION: &str = "policy.kubeedge.io/v1alpha1";
/// The resource type in message resources (`node/<n>/<ns>/serviceaccountaccess/<name>`).
pub const RESOURCE_TYPE: &str = "serviceaccountaccess";

/// A service account and the RBAC bindings that apply to it, with their roles' rules inlined:
/// everything an edge needs to authorize the account's tokens offline.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.kubeedge.io",
    version = "v1alpha1",
    kind = "ServiceAccountAccess",
    plural = "serviceaccountaccesses",
    singular = "serviceaccountaccess",
    shortname = "saaccess",
    namespaced,
    status = "AccessStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct AccessSpec {
    /// The service account (one ServiceAccountAccess per account, named after it).
    #[serde(default)]
    pub service_account: AccessServiceAccount,
    /// The account's UID (embedded metadata keeps no UID).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_uid: String,
    /// RoleBindings of the account's namespace that apply to it, with their role's rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_role_binding: Vec<AccessRoleBinding>,
    /// ClusterRoleBindings that apply to it, with their role's rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_cluster_role_binding: Vec<AccessClusterRoleBinding>,
}

/// Which edge nodes hold the object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessStatus {
    /// Names of the edge nodes sent the object, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_list: Vec<String>,
}

/// What survives of embedded object metadata.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EmbeddedMeta {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl EmbeddedMeta {
    /// The kept part of `meta`.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        EmbeddedMeta {
            name: meta.name.clone().unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
        }
    }
}

/// The embedded ServiceAccount.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessServiceAccount {
    /// Its metadata.
    #[serde(default)]
    pub metadata: EmbeddedMeta,
    /// Its secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<ObjectReference>,
    /// Its image pull secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Whether pods mount its token by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
}

/// An embedded RoleBinding or ClusterRoleBinding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedBinding {
    /// Its metadata.
    #[serde(default)]
    pub metadata: EmbeddedMeta,
    /// Who it binds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<Subject>,
    /// The role it binds.
    #[serde(default)]
    pub role_ref: RoleRef,
}

/// A RoleBinding and its role's rules.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessRoleBinding {
    /// The binding.
    #[serde(default)]
    pub role_binding: EmbeddedBinding,
    /// The rules of the Role or ClusterRole it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PolicyRule>,
}

/// A ClusterRoleBinding and its role's rules.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessClusterRoleBinding {
    /// The binding.
    #[serde(default)]
    pub cluster_role_binding: EmbeddedBinding,
    /// The rules of the ClusterRole it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PolicyRule>,
}

/// The CRD as KubeEdge installs it: one version, status subresource, short name `saaccess`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![ServiceAccountAccess::crd()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeedges_json_reads_and_unknown_embedded_fields_are_ignored() {
        // As KubeEdge's controller writes it: empty apiVersion/kind in embedded objects.
        let text = r#"{"apiVersion":"policy.kubeedge.io/v1alpha1","kind":"ServiceAccountAccess",
            "metadata":{"name":"app-sa","namespace":"default"},
            "spec":{"serviceAccount":{"apiVersion":"","kind":"","metadata":{"name":"app-sa","namespace":"default","uid":"dropped"},
                    "secrets":[{"name":"s"}]},
                "serviceAccountUid":"e1f4",
                "accessRoleBinding":[{"roleBinding":{"metadata":{"name":"app-read","namespace":"default"},
                  "subjects":[{"kind":"ServiceAccount","name":"app-sa","namespace":"default"}],
                  "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"reader"}},
                  "rules":[{"verbs":["get","list"],"apiGroups":[""],"resources":["configmaps"]}]}]},
            "status":{"nodeList":["e1","e2"]}}"#;
        let saa: ServiceAccountAccess = serde_json::from_str(text).unwrap();
        assert_eq!(saa.spec.service_account.metadata.name, "app-sa");
        assert_eq!(saa.spec.service_account_uid, "e1f4");
        let b = &saa.spec.access_role_binding[0];
        assert_eq!(b.role_binding.role_ref.name, "reader");
        assert_eq!(b.rules[0].verbs, ["get", "list"]);
        assert_eq!(saa.status.unwrap().node_list, ["e1", "e2"]);
        // The empty status is `{}`, as Go writes it.
        let empty = serde_json::to_value(AccessStatus::default()).unwrap();
        assert_eq!(empty, serde_json::json!({}));
    }

    #[test]
    fn the_crd_has_kubeedges_names_and_a_status_subresource() {
        let crd = &crds()[0];
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("serviceaccountaccesses.policy.kubeedge.io")
        );
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&["saaccess".to_owned()][..])
        );
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
}
