//! The start-up permission check: before any module touches the API server, cloudcore asks
//! (one SelfSubjectAccessReview per verb) whether its credentials allow what the enabled
//! modules do at start-up and in their watches. A missing permission otherwise shows up as a
//! controller whose cache never syncs, or a retry loop, rather than as an exit.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::config::CloudCoreConfig;

/// The namespace cloudhub and cloudstream keep their Secrets and ConfigMaps in.
const KUBEEDGE: &str = "kubeedge";

/// One permission: `verb` on `resource` (`resource/subresource` for a subresource) of API
/// `group`, in `namespace` (empty: cluster scope), on the object `name` (empty: any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// The verb (`get`, `list`, `watch`, `create`, `patch`, ...).
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource, with `/subresource` when it is one.
    pub resource: &'static str,
    /// The namespace; empty for the cluster scope.
    pub namespace: &'static str,
    /// The object name; empty for any.
    pub name: &'static str,
}

impl std::fmt::Display for Permission {
    /// In the API server's own words: `cannot list resource "pods" in API group "" at the
    /// cluster scope`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot {} resource {:?} in API group {:?}",
            self.verb, self.resource, self.group
        )?;
        if !self.name.is_empty() {
            write!(f, " named {:?}", self.name)?;
        }
        if self.namespace.is_empty() {
            write!(f, " at the cluster scope")
        } else {
            write!(f, " in the namespace {:?}", self.namespace)
        }
    }
}

/// Permissions with the same group, resource, namespace and name, one per verb.
fn each(
    verbs: &'static [&'static str],
    group: &'static str,
    resource: &'static str,
    namespace: &'static str,
    name: &'static str,
) -> impl Iterator<Item = Permission> {
    verbs.iter().copied().map(move |verb| Permission {
        verb,
        group,
        resource,
        namespace,
        name,
    })
}

const READ: &[&str] = &["get", "list", "watch"];
const WATCH: &[&str] = &["list", "watch"];

/// What the modules `config` enables need from the start: their watches and cloudcore's own
/// writes. Requests made on behalf of an edge (which may be impersonated) are not checked: a
/// refusal there is answered to that edge.
pub fn required(config: &CloudCoreConfig) -> Vec<Permission> {
    let m = &config.modules;
    let mut p = Vec::new();
    if m.cloud_hub.enable {
        p.extend(each(&["create"], "", "namespaces", "", ""));
        p.extend(each(&["get", "create"], "", "secrets", KUBEEDGE, ""));
        p.extend(each(&["patch"], "", "secrets", KUBEEDGE, "tokensecret"));
        p.extend(each(&["get", "create"], "", "configmaps", KUBEEDGE, ""));
        p.extend(each(
            &["update", "patch"],
            "",
            "configmaps",
            KUBEEDGE,
            "revokedcerts",
        ));
        p.extend(each(&["patch"], "", "configmaps", KUBEEDGE, "edgenodes"));
        p.extend(each(READ, "", "nodes", "", ""));
        for r in ["objectsyncs", "clusterobjectsyncs"] {
            p.extend(each(
                &["get", "list", "watch", "create", "delete"],
                "reliablesyncs.kubeedge.io",
                r,
                "",
                "",
            ));
        }
        p.extend(each(
            &["patch"],
            "reliablesyncs.kubeedge.io",
            "objectsyncs/status",
            "",
            "",
        ));
    }
    if m.edge_controller.enable {
        p.extend(each(
            &["get", "list", "watch", "patch"],
            "",
            "nodes",
            "",
            "",
        ));
        p.extend(each(READ, "", "pods", "", ""));
        p.extend(each(READ, "", "configmaps", "", ""));
        p.extend(each(READ, "", "secrets", "", ""));
        p.extend(each(
            &["get", "list", "watch", "patch"],
            "rules.kubeedge.io",
            "rules",
            "",
            "",
        ));
        p.extend(each(WATCH, "rules.kubeedge.io", "ruleendpoints", "", ""));
    }
    if m.device_controller.enable {
        p.extend(each(READ, "devices.kubeedge.io", "devices", "", ""));
        p.extend(each(WATCH, "devices.kubeedge.io", "devicemodels", "", ""));
        p.extend(each(
            &["get", "list", "watch", "create", "patch"],
            "devices.kubeedge.io",
            "devicestatuses",
            "",
            "",
        ));
    }
    if m.sync_controller.enable {
        p.extend(each(WATCH, "", "nodes", "", ""));
        for r in ["objectsyncs", "clusterobjectsyncs"] {
            p.extend(each(
                &["list", "watch", "delete"],
                "reliablesyncs.kubeedge.io",
                r,
                "",
                "",
            ));
        }
    }
    if m.dynamic_controller.enable {
        // Reads for edges are decided by reviews as the node.
        p.extend(each(
            &["create"],
            "authorization.k8s.io",
            "subjectaccessreviews",
            "",
            "",
        ));
        if m.dynamic_controller.persist_listeners {
            p.extend(each(
                &["get", "create", "patch", "delete"],
                "",
                "configmaps",
                KUBEEDGE,
                "",
            ));
        }
    }
    if m.task_manager.enable {
        const JOBS: [&str; 3] = ["nodeupgradejobs", "imageprepulljobs", "configupdatejobs"];
        const STATUS: [&str; 3] = [
            "nodeupgradejobs/status",
            "imageprepulljobs/status",
            "configupdatejobs/status",
        ];
        let group = "operations.kubeedge.io";
        // The finalizer is the job controller's.
        let verbs: &'static [&'static str] = if m.task_manager.job_controller {
            &["get", "list", "watch", "patch"]
        } else {
            READ
        };
        for (job, status) in JOBS.into_iter().zip(STATUS) {
            p.extend(each(verbs, group, job, "", ""));
            p.extend(each(&["update"], group, status, "", ""));
        }
        // The job controller chooses nodes; image pre-pulls read their pull secret.
        if m.task_manager.job_controller {
            p.extend(each(&["get", "list"], "", "nodes", "", ""));
        }
        p.extend(each(&["get"], "", "secrets", "", ""));
    }
    if m.cloud_stream.enable {
        p.extend(each(READ, "", "pods", "", ""));
        p.extend(each(&["get"], "", "nodes", "", ""));
        p.extend(each(&["patch"], "", "nodes/status", "", ""));
        p.extend(each(&["get", "create"], "", "configmaps", KUBEEDGE, ""));
        p.extend(each(&["update"], "", "configmaps", KUBEEDGE, "tunnelport"));
    }
    if m.router.enable {
        // Which nodes are edge nodes (REST calls name one).
        p.extend(each(WATCH, "", "nodes", "", ""));
    }
    if config.require_authorization() {
        // The CSR approver.
        p.extend(each(
            READ,
            "certificates.k8s.io",
            "certificatesigningrequests",
            "",
            "",
        ));
        p.extend(each(
            &["update"],
            "certificates.k8s.io",
            "certificatesigningrequests/approval",
            "",
            "",
        ));
        p.extend(each(
            &["approve"],
            "certificates.k8s.io",
            "signers",
            "",
            csrapprover::rules::KUBELET_SERVING_SIGNER,
        ));
        p.extend(each(&["get"], "", "nodes", "", ""));
        // The policycontroller: its accesses, and what they are computed from (all from watch
        // caches, so no `get` but the synccontroller's, which reads a tracked access).
        p.extend(each(
            &["get", "list", "watch", "create", "update", "delete"],
            kubeedge_api::policy::GROUP,
            "serviceaccountaccesses",
            "",
            "",
        ));
        p.extend(each(
            &["update"],
            kubeedge_api::policy::GROUP,
            "serviceaccountaccesses/status",
            "",
            "",
        ));
        for r in ["serviceaccounts", "pods", "nodes"] {
            p.extend(each(WATCH, "", r, "", ""));
        }
        for r in [
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ] {
            p.extend(each(WATCH, "rbac.authorization.k8s.io", r, "", ""));
        }
    }
    let mut seen = Vec::with_capacity(p.len());
    for x in p {
        if !seen.contains(&x) {
            seen.push(x);
        }
    }
    seen
}

/// What the monitor server needs when it reviews its callers (`authorization.mode`
/// `Webhook`, the default with a cluster): a TokenReview per new token and a
/// SubjectAccessReview per new user and path. Checked by [`crate::app::run`], which runs the
/// monitor server, beside [`required`].
pub fn monitor() -> Vec<Permission> {
    each(&["create"], "authentication.k8s.io", "tokenreviews", "", "")
        .chain(each(
            &["create"],
            "authorization.k8s.io",
            "subjectaccessreviews",
            "",
            "",
        ))
        .collect()
}

/// Why the permission check failed.
#[derive(Debug, thiserror::Error)]
pub enum PermissionError {
    /// The credentials lack these permissions.
    #[error(
        "missing permission: {}; grant {} to cloudcore's ServiceAccount (see manifests/rbac.yaml)",
        .0.iter().map(|p| format!("{p} (403)")).collect::<Vec<_>>().join("; "),
        if .0.len() == 1 { "it" } else { "them" }
    )]
    Missing(Vec<Permission>),
    /// The API server did not answer a review.
    #[error("checking permissions: {0}")]
    Kube(#[from] kube::Error),
}

/// Reviews in flight at once: all of a default configuration's (about 60) in one round trip
/// over the HTTP/2 connection, so the check costs about one API server latency at start-up.
const REVIEWS_IN_FLIGHT: usize = 64;

/// Asks the API server about each of `needed` (the reviews run concurrently) and fails naming
/// every one it refuses, in the order of `needed`.
pub async fn check(client: &kube::Client, needed: &[Permission]) -> Result<(), PermissionError> {
    use futures::StreamExt as _;
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answers: Vec<Result<bool, kube::Error>> = futures::stream::iter(needed)
        .map(|p| allowed(&api, p))
        .buffered(REVIEWS_IN_FLIGHT)
        .collect()
        .await;
    let mut missing = Vec::new();
    for (p, answer) in needed.iter().zip(answers) {
        if !answer? {
            missing.push(*p);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PermissionError::Missing(missing))
    }
}

/// One SelfSubjectAccessReview: whether `p` is allowed.
async fn allowed(api: &Api<SelfSubjectAccessReview>, p: &Permission) -> Result<bool, kube::Error> {
    let (resource, subresource) = match p.resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (p.resource, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(p.verb.into()),
                group: Some(p.group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: (!p.namespace.is_empty()).then(|| p.namespace.into()),
                name: (!p.name.is_empty()).then(|| p.name.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_each_missing_verb_and_resource_in_the_api_servers_words() {
        let list_pods = Permission {
            verb: "list",
            group: "",
            resource: "pods",
            namespace: "",
            name: "",
        };
        let one = PermissionError::Missing(vec![list_pods]).to_string();
        assert_eq!(
            one,
            "missing permission: cannot list resource \"pods\" in API group \"\" at the cluster \
             scope (403); grant it to cloudcore's ServiceAccount (see manifests/rbac.yaml)"
        );
        let patch_token = Permission {
            verb: "patch",
            group: "",
            resource: "secrets",
            namespace: KUBEEDGE,
            name: "tokensecret",
        };
        let two = PermissionError::Missing(vec![list_pods, patch_token]).to_string();
        assert!(
            two.contains(
                "cannot patch resource \"secrets\" in API group \"\" named \"tokensecret\" in \
                 the namespace \"kubeedge\" (403); grant them"
            ),
            "{two}"
        );
    }

    #[test]
    fn only_enabled_modules_add_permissions_and_none_twice() {
        let mut config = CloudCoreConfig::default();
        let all = required(&config);
        for (i, p) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(p), "{p} twice");
        }
        assert!(all.iter().any(|p| p.group == "devices.kubeedge.io"));
        config.modules.device_controller.enable = false;
        assert!(
            !required(&config)
                .iter()
                .any(|p| p.group == "devices.kubeedge.io")
        );
    }
}
