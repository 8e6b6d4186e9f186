//! Which RBAC bindings apply to a service account, and the access spec they make, as pure
//! functions of what the caches hold.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use kubeedge_api::policy::{
    AccessClusterRoleBinding, AccessRoleBinding, AccessServiceAccount, AccessSpec, EmbeddedBinding,
    EmbeddedMeta,
};

/// The service account as RBAC sees it: user `system:serviceaccount:<ns>:<name>` in groups
/// `system:serviceaccounts` and `system:serviceaccounts:<ns>` (not `system:authenticated`:
/// KubeEdge leaves it out, and the edge never sees bindings to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl Account {
    /// Whether `subject` of a binding (in `binding_ns`, `None` for a ClusterRoleBinding)
    /// names this account.
    pub(crate) fn is(&self, subject: &Subject, binding_ns: Option<&str>) -> bool {
        match subject.kind.as_str() {
            "User" => {
                subject.name == format!("system:serviceaccount:{}:{}", self.namespace, self.name)
            }
            "Group" => {
                subject.name == "system:serviceaccounts"
                    || subject.name == format!("system:serviceaccounts:{}", self.namespace)
            }
            "ServiceAccount" => {
                let ns = subject
                    .namespace
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .or(binding_ns);
                subject.name == self.name && ns == Some(self.namespace.as_str())
            }
            _ => false,
        }
    }

    /// Whether any of `subjects` names this account.
    pub(crate) fn in_subjects(
        &self,
        subjects: Option<&Vec<Subject>>,
        binding_ns: Option<&str>,
    ) -> bool {
        subjects
            .into_iter()
            .flatten()
            .any(|s| self.is(s, binding_ns))
    }
}

/// The embedded form of a ServiceAccount.
pub(crate) fn service_account(sa: &ServiceAccount) -> AccessServiceAccount {
    AccessServiceAccount {
        metadata: EmbeddedMeta::of(&sa.metadata),
        secrets: sa.secrets.clone().unwrap_or_default(),
        image_pull_secrets: sa.image_pull_secrets.clone().unwrap_or_default(),
        automount_service_account_token: sa.automount_service_account_token,
    }
}

/// A binding found for the account, with its role's rules.
pub(crate) struct Found {
    pub(crate) binding: EmbeddedBinding,
    pub(crate) rules: Vec<PolicyRule>,
}

/// The spec for `sa` with the bindings found (each list sorted by binding name, as KubeEdge).
pub(crate) fn spec(
    sa: &ServiceAccount,
    mut role_bindings: Vec<Found>,
    mut cluster_bindings: Vec<Found>,
) -> AccessSpec {
    role_bindings.sort_by(|a, b| a.binding.metadata.name.cmp(&b.binding.metadata.name));
    cluster_bindings.sort_by(|a, b| a.binding.metadata.name.cmp(&b.binding.metadata.name));
    AccessSpec {
        service_account: service_account(sa),
        service_account_uid: sa.metadata.uid.clone().unwrap_or_default(),
        access_role_binding: role_bindings
            .into_iter()
            .map(|f| AccessRoleBinding {
                role_binding: f.binding,
                rules: f.rules,
            })
            .collect(),
        access_cluster_role_binding: cluster_bindings
            .into_iter()
            .map(|f| AccessClusterRoleBinding {
                cluster_role_binding: f.binding,
                rules: f.rules,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(kind: &str, name: &str, ns: Option<&str>) -> Subject {
        Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn subjects_match_as_kubernetes_rbac_for_a_service_account() {
        let a = Account {
            namespace: "default".into(),
            name: "app-sa".into(),
        };
        assert!(a.is(&subject("ServiceAccount", "app-sa", Some("default")), None));
        assert!(
            a.is(&subject("ServiceAccount", "app-sa", None), Some("default")),
            "binding's namespace"
        );
        assert!(
            !a.is(&subject("ServiceAccount", "app-sa", None), None),
            "cluster binding without namespace"
        );
        assert!(!a.is(&subject("ServiceAccount", "app-sa", Some("other")), None));
        assert!(!a.is(&subject("ServiceAccount", "other", Some("default")), None));
        assert!(a.is(
            &subject("User", "system:serviceaccount:default:app-sa", None),
            None
        ));
        assert!(a.is(&subject("Group", "system:serviceaccounts", None), None));
        assert!(a.is(
            &subject("Group", "system:serviceaccounts:default", None),
            None
        ));
        assert!(!a.is(
            &subject("Group", "system:serviceaccounts:other", None),
            None
        ));
        assert!(
            !a.is(&subject("Group", "system:authenticated", None), None),
            "as KubeEdge"
        );
    }
}
