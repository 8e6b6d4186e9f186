//! cloudcore runs with exactly the permissions of `manifests/rbac.yaml`: the real binary, with
//! a token of the manifests' ServiceAccount against a real API server (RBAC on), bootstraps a
//! real edgecore and delivers objects to it with acknowledgements. With one rule taken away
//! it exits non-zero at start naming the verb and resource it lacks.
//!
//! Run: `cargo test --test least_privilege` after `cargo build --example cloudcore`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use edgecore_interop::{CloudSpec, Cloudcore, Interop, kubectl_ok, store_key};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubeedge_api::reliablesyncs::{ObjectSync, object_sync_name};

fn manifests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests")
}

async fn apply_file(path: &Path) -> Result<()> {
    kubectl_ok(&["apply", "-f", path.to_str().context("utf-8 path")?], None).await?;
    Ok(())
}

async fn apply_yaml(yaml: &str) -> Result<()> {
    kubectl_ok(&["apply", "-f", "-"], Some(yaml.as_bytes())).await?;
    Ok(())
}

/// A kubeconfig in `dir` for the manifests' ServiceAccount (a fresh token) on the test API
/// server.
async fn service_account_kubeconfig(admin: &kube::Client, dir: &Path) -> Result<PathBuf> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(admin.clone(), "kubeedge")
        .create_token_request("cloudcore", &PostParams::default(), &request)
        .await
        .context("TokenRequest for kubeedge/cloudcore")?;
    let token = answer.status.context("TokenRequest status")?.token;
    let config = k8s_testenv::config().await;
    std::fs::create_dir_all(dir)?;
    let ca = dir.join("apiserver-ca.crt");
    std::fs::write(&ca, cloudcore::app::kube_ca_pem(&config))?;
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
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig)?)?;
    Ok(path)
}

async fn client_of(kubeconfig: &Path) -> Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// Whether the client's own identity may `verb` the cluster-wide `resource` (core group).
async fn may(client: &kube::Client, verb: &str, resource: &str) -> Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(String::new()),
                resource: Some(resource.into()),
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

/// The RBAC authorizer learns of role changes from its informers: wait until it answers
/// `want` for `verb resource`.
async fn wait_may(client: &kube::Client, verb: &str, resource: &str, want: bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while may(client, verb, resource).await? != want {
        if Instant::now() > deadline {
            bail!("may {verb} {resource} is still not {want} after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// `manifests/rbac.yaml` with `verb` taken out of the ClusterRole rule for core `resource`.
fn rbac_without(verb: &str, resource: &str) -> Result<String> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(manifests().join("rbac.yaml"))?;
    let mut out = String::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v = serde_yaml::Value::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        if v["kind"].as_str() == Some("ClusterRole") {
            let mut found = false;
            for rule in v["rules"].as_sequence_mut().context("rules")? {
                let core = rule["apiGroups"].as_sequence().is_some_and(|g| g == &[""]);
                let this = rule["resources"]
                    .as_sequence()
                    .is_some_and(|r| r.iter().any(|r| r.as_str() == Some(resource)));
                if core && this {
                    let verbs = rule["verbs"].as_sequence_mut().context("verbs")?;
                    verbs.retain(|v| v.as_str() != Some(verb));
                    found = true;
                }
            }
            ensure!(found, "no ClusterRole rule for {resource}");
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&v)?);
    }
    Ok(out)
}

/// What the edge and ObjectSync must show for `pod` and `cfg` in `ns`.
async fn delivered(it: &mut Interop, client: &kube::Client, ns: &str) -> Result<()> {
    let node = it.node().to_owned();
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("cfg")
        .await?;
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get("web")
        .await?;
    for (kind, name, meta) in [
        ("configmap", "cfg", &cm.metadata),
        ("pod", "web", &pod.metadata),
    ] {
        let uid = meta.uid.clone().unwrap_or_default();
        let rv = meta.resource_version.clone().unwrap_or_default();
        let key = store_key(ns, kind, name);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            it.check_edge_alive()?;
            let stored = it.store().get(&key)?;
            let acked = Api::<ObjectSync>::namespaced(client.clone(), ns)
                .get_opt(&object_sync_name(&node, &uid))
                .await?
                .and_then(|r| r.status)
                .map(|s| s.object_resource_version);
            if stored.as_ref().is_some_and(|s| {
                s.uid() == Some(uid.as_str()) && s.resource_version() == Some(rv.as_str())
            }) && acked.as_deref() == Some(rv.as_str())
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("{key}: edge has {stored:?}, ObjectSync acked {acked:?}, want rv {rv}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

#[tokio::test]
async fn cloudcore_runs_with_the_manifests_rbac_and_names_a_missing_permission() -> Result<()> {
    let admin = k8s_testenv::client().await;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    apply_file(&manifests().join("namespace.yaml")).await?;
    apply_file(&manifests().join("rbac.yaml")).await?;
    let dir =
        std::env::temp_dir().join(format!("cloudcore-least-privilege-{}", std::process::id()));
    let kubeconfig = service_account_kubeconfig(&admin, &dir).await?;
    let sa = client_of(&kubeconfig).await?;
    wait_may(&sa, "watch", "nodes", true).await?;
    wait_may(&sa, "list", "pods", true).await?;
    // Nothing beyond the manifests: the token is not an administrator's.
    ensure!(
        !may(&sa, "delete", "nodes").await?,
        "cloudcore may delete nodes"
    );

    // The core scenario through cloudcore with only those permissions: bootstrap, the node
    // connects, a pod and its ConfigMap reach the edge and their acknowledgements advance
    // ObjectSync, also after an update.
    let node = "least-privilege";
    let mut it = Interop::builder(node)
        .kubeconfig(&kubeconfig)
        .start()
        .await?;
    let ns = k8s_testenv::namespace("least-privilege").await;
    let ns = ns.as_str();
    // The pod first: edgecontroller sends a ConfigMap once a pod on the node uses it.
    apply_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  nodeName: {node}\n  \
         containers:\n  - name: app\n    image: registry.invalid/app:1\n    volumeMounts:\n    - name: c\n      mountPath: /c\n  \
         volumes:\n  - name: c\n    configMap:\n      name: cfg\n"
    ))
    .await?;
    kubectl_ok(
        &[
            "-n",
            ns,
            "create",
            "configmap",
            "cfg",
            "--from-literal=k=v1",
        ],
        None,
    )
    .await?;
    delivered(&mut it, &admin, ns).await?;
    kubectl_ok(
        &[
            "-n",
            ns,
            "patch",
            "configmap",
            "cfg",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"v2"}}"#,
        ],
        None,
    )
    .await?;
    delivered(&mut it, &admin, ns).await?;
    let log = it.cloud().log();
    ensure!(
        !log.to_lowercase().contains("forbidden"),
        "cloudcore was refused something:\n{log}"
    );
    it.finish();

    // One rule less: the binary exits non-zero at start and names what it lacks.
    apply_yaml(&rbac_without("list", "pods")?).await?;
    wait_may(&sa, "list", "pods", false).await?;
    let mut spec = CloudSpec::for_testenv(&dir.join("missing"))?;
    spec.kubeconfig = kubeconfig.clone();
    let started = Cloudcore::start(&spec).await;
    // The manifests again, whatever happened.
    apply_file(&manifests().join("rbac.yaml")).await?;
    let err = match started {
        Ok(_) => bail!("cloudcore started without list pods"),
        Err(e) => e.to_string(),
    };
    ensure!(
        err.contains("exited during start-up") && !err.contains("exit status: 0"),
        "{err}"
    );
    let log = std::fs::read_to_string(spec.log_file())?;
    let want = r#"missing permission: cannot list resource "pods" in API group "" at the cluster scope (403)"#;
    ensure!(log.contains(want), "want {want:?} in the log:\n{log}");
    ensure!(log.contains("manifests/rbac.yaml"), "{log}");
    ensure!(
        !log.contains("cannot watch resource \"pods\""),
        "only the removed verb is named:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
