//! cloudcore as the manifests deploy it: the ServiceAccount `kubeedge/cloudcore` with exactly
//! the permissions of one of the manifests' two RBAC variants ([`Grants`]), and a kubeconfig
//! holding a token for it, the way a pod's mounted token reaches the API server.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::edge::pem;
use crate::error::{Error, Result};
use crate::kubectl::kubectl_ok;

/// The repository's `manifests/` folder.
pub fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests")
}

/// The manifests that grant cloudcore's ServiceAccount its permissions with impersonation off:
/// its own (`rbac.yaml`) and those for requests it makes on behalf of edges.
pub const RBAC_FILES: [&str; 2] = ["rbac.yaml", "rbac-edge-requests.yaml"];

/// The manifests that grant them with impersonation on (`authorization.enable: true`, `debug:
/// false`): its own, and the right to impersonate nodes in place of the edge requests.
pub const IMPERSONATION_RBAC_FILES: [&str; 2] = ["rbac.yaml", "optional/impersonation.yaml"];

/// Which of the two RBAC variants of the manifests cloudcore's ServiceAccount gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grants {
    /// [`RBAC_FILES`]: cloudcore makes edge requests with its own identity.
    #[default]
    OwnIdentity,
    /// [`IMPERSONATION_RBAC_FILES`]: edge requests are impersonated as the node.
    Impersonation,
}

impl Grants {
    /// The files applied for this variant.
    pub fn files(self) -> [&'static str; 2] {
        match self {
            Grants::OwnIdentity => RBAC_FILES,
            Grants::Impersonation => IMPERSONATION_RBAC_FILES,
        }
    }

    /// The file of the other variant whose objects this one must not have.
    fn excluded(self) -> &'static str {
        match self {
            Grants::OwnIdentity => "optional/impersonation.yaml",
            Grants::Impersonation => "rbac-edge-requests.yaml",
        }
    }
}

/// Applies `manifests/namespace.yaml`, the [`RBAC_FILES`] and `manifests/admission-policy.yaml`
/// to the test API server, and deletes what only the impersonation variant has.
///
/// # Errors
/// When kubectl fails.
pub async fn apply_manifests_rbac() -> Result<()> {
    apply_manifests_rbac_for(Grants::OwnIdentity).await
}

/// Optional manifests that grant cloudcore's ServiceAccount more than a variant does. A test
/// applies them after [`apply_manifests_rbac_for`] ([`apply_optional`]); the API server outlives
/// the test, so the next one starts without them.
const OPTIONAL_GRANTS: [&str; 1] = ["optional/require-authorization.yaml"];

/// Applies `manifests/namespace.yaml`, the files of `grants` and `manifests/admission-policy.yaml`
/// (which limits the names of what cloudcore writes in `kubeedge`), and deletes the objects
/// only the other variant has and those of the optional manifests that grant cloudcore more
/// (an earlier test of the binary may have applied them to the same API server).
///
/// # Errors
/// When kubectl fails.
pub async fn apply_manifests_rbac_for(grants: Grants) -> Result<()> {
    let files = std::iter::once("namespace.yaml")
        .chain(grants.files())
        .chain(["admission-policy.yaml"]);
    for file in files {
        let path = manifests_dir().join(file);
        kubectl_ok(&["apply", "-f", &path.display().to_string()], None).await?;
    }
    for file in std::iter::once(grants.excluded()).chain(OPTIONAL_GRANTS) {
        let path = manifests_dir().join(file);
        kubectl_ok(
            &[
                "delete",
                "--ignore-not-found",
                "-f",
                &path.display().to_string(),
            ],
            None,
        )
        .await?;
    }
    Ok(())
}

/// Applies the manifests' RBAC, writes a kubeconfig in `dir` with a fresh token of the
/// ServiceAccount `kubeedge/cloudcore`, and waits until the API server's authorizer grants
/// that account the manifests' rules (it learns of role changes asynchronously).
///
/// # Errors
/// When the manifests cannot be applied, the token cannot be had or the rules do not take
/// effect within 30 s.
pub async fn service_account_kubeconfig(dir: &Path) -> Result<PathBuf> {
    service_account_kubeconfig_for(dir, Grants::OwnIdentity).await
}

/// [`service_account_kubeconfig`] with the RBAC variant `grants`; it also waits until the
/// account has the variant's grants and not the other's.
///
/// # Errors
/// As [`service_account_kubeconfig`].
pub async fn service_account_kubeconfig_for(dir: &Path, grants: Grants) -> Result<PathBuf> {
    apply_manifests_rbac_for(grants).await?;
    let admin = k8s_testenv::client().await;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(admin, "kubeedge")
        .create_token_request("cloudcore", &PostParams::default(), &request)
        .await?;
    let token = answer
        .status
        .ok_or_else(|| Error::Config("TokenRequest for kubeedge/cloudcore has no status".into()))?
        .token;
    let config = k8s_testenv::config().await;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let ca = dir.join("apiserver-ca.crt");
    let ca_pem: String = config
        .root_cert
        .iter()
        .flatten()
        .map(|der| pem("CERTIFICATE", der))
        .collect();
    std::fs::write(&ca, ca_pem).map_err(|e| Error::io(&ca, e))?;
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": config.cluster_url.to_string(),
            "certificate-authority": ca.display().to_string(),
        }}],
        "users": [{"name": "cloudcore", "user": {"token": token}}],
        "contexts": [{"name": "cloudcore", "context": {"cluster": "test", "user": "cloudcore"}}],
        "current-context": "cloudcore",
    });
    let path = dir.join("cloudcore.kubeconfig");
    let text = serde_saphyr::to_string(&kubeconfig).map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    let sa = client_of(&path).await?;
    // A ClusterRole and a Role rule: both bindings have taken effect.
    wait_may(&sa, "watch", "", "nodes", "", true).await?;
    wait_may(&sa, "create", "", "secrets", "kubeedge", true).await?;
    // An edge request's rule, and impersonation: exactly one of them.
    let impersonating = grants == Grants::Impersonation;
    wait_may(&sa, "create", "", "pods", "", !impersonating).await?;
    wait_may(&sa, "impersonate", "", "users", "", impersonating).await?;
    Ok(path)
}

/// Applies `manifests/optional/<file>` and waits until the API server's authorizer grants its
/// first ClusterRole rule to the ServiceAccount of `kubeconfig`.
///
/// # Errors
/// When kubectl fails, the file has no ClusterRole rule, or the rule does not take effect
/// within 30 s.
pub async fn apply_optional(file: &str, kubeconfig: &Path) -> Result<()> {
    let path = manifests_dir().join("optional").join(file);
    kubectl_ok(&["apply", "-f", &path.display().to_string()], None).await?;
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| Error::Config(e.to_string()))?;
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .and_then(|d| d["rules"].get(0).cloned())
        .ok_or_else(|| Error::Config(format!("{file} has no ClusterRole rule")))?;
    let first = |key: &str| rule[key][0].as_str().unwrap_or_default().to_owned();
    let sa = client_of(kubeconfig).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (verb, group, resource, name) = (
        first("verbs"),
        first("apiGroups"),
        first("resources"),
        first("resourceNames"),
    );
    while !may_named(&sa, &verb, &group, &resource, "", &name).await? {
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!(
                "{file}: may {verb} {group}/{resource} is still not granted after 30 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A client with the identity of `kubeconfig`.
///
/// # Errors
/// When the file cannot be read or used.
pub async fn client_of(kubeconfig: &Path) -> Result<kube::Client> {
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| Error::Config(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Config(e.to_string()))?;
    Ok(kube::Client::try_from(config)?)
}

/// Whether the client's own identity may `verb` `resource` (`resource/subresource` for a
/// subresource) of `group` in `namespace` (empty: cluster scope).
///
/// # Errors
/// When the API server does not answer.
pub async fn may(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> Result<bool> {
    may_named(client, verb, group, resource, namespace, "").await
}

/// [`may`] for the object named `name` (empty: any).
///
/// # Errors
/// When the API server does not answer.
pub async fn may_named(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<bool> {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: (!namespace.is_empty()).then(|| namespace.into()),
                name: (!name.is_empty()).then(|| name.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Waits (up to 30 s) until [`may`] answers `want`.
///
/// # Errors
/// [`Error::Timeout`] when it does not.
pub async fn wait_may(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    want: bool,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while may(client, verb, group, resource, namespace).await? != want {
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!(
                "may {verb} {group}/{resource} in {namespace:?} is still not {want} after 30 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
