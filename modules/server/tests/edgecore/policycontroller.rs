//! The policycontroller (featureGates.requireAuthorization) with an unmodified edgecore, and
//! cloudcore running as the manifests' ServiceAccount with
//! `manifests/optional/require-authorization.yaml`: a pod on the edge node running as a service
//! account puts that account's ServiceAccountAccess, with its RoleBinding's rules, into the
//! edge's store; the edge's acknowledgement advances its ObjectSync; a change of the role made
//! while the edge is away reaches it when it is back (the sync loop); the pod's deletion removes
//! it from the edge.
//!
//! Run: `cargo test -p cloudcore-server --test edgecore policycontroller`.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use edgecore_interop::{Interop, Stored, store_key};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubeedge_api::policy::ServiceAccountAccess;
use kubeedge_api::reliablesyncs::{ObjectSync, object_sync_name};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn create<K>(api: &Api<K>, v: Value) -> Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    Ok(api
        .create(&PostParams::default(), &serde_json::from_value(v)?)
        .await?)
}

async fn stored(it: &mut Interop, key: &str, check: impl Fn(&Stored) -> bool) -> Result<Stored> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < WAIT {
        it.check_edge_alive()?;
        last = it.store().get(key)?;
        if let Some(s) = last.as_ref().filter(|s| check(s)) {
            return Ok(s.clone());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{key} not stored as expected within {WAIT:?}; last seen: {last:?}")
}

fn verbs(s: &Stored) -> Value {
    s.value["spec"]["accessRoleBinding"][0]["rules"][0]["verbs"].clone()
}

#[tokio::test]
async fn an_accounts_access_reaches_the_edge_store_is_acknowledged_and_follows_its_role()
-> Result<()> {
    let node = "policy-edge";
    let mut it = Interop::builder(node)
        .service_account()
        .optional_rbac("require-authorization.yaml")
        .cloud_config(json!({"featureGates": {"requireAuthorization": true}}))
        .start()
        .await?;
    let client = it.client();
    let ns = k8s_testenv::namespace("policy").await;
    let api = |c: &kube::Client| c.clone();
    create::<ServiceAccount>(
        &Api::namespaced(api(&client), &ns),
        json!({"metadata": {"name": "app-sa"}}),
    )
    .await?;
    create::<Role>(
        &Api::namespaced(api(&client), &ns),
        json!({"metadata": {"name": "reader"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await?;
    create::<RoleBinding>(
        &Api::namespaced(api(&client), &ns),
        json!({"metadata": {"name": "app-read"},
               "subjects": [{"kind": "ServiceAccount", "name": "app-sa", "namespace": ns}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}}),
    )
    .await?;
    create::<Pod>(
        &Api::namespaced(api(&client), &ns),
        json!({"metadata": {"name": "app"},
               "spec": {"nodeName": node, "serviceAccountName": "app-sa",
                        "automountServiceAccountToken": false,
                        "containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await?;
    let key = store_key(&ns, "serviceaccountaccess", "app-sa");
    let got = stored(&mut it, &key, |s| verbs(s) == json!(["get", "list"])).await?;
    if got.value["status"] != json!({}) {
        bail!("the edge holds a node list: {}", got.value["status"]);
    }
    // The edge's acknowledgement advanced the record, at the access's current version.
    let accesses: Api<ServiceAccountAccess> = Api::namespaced(client.clone(), &ns);
    let saa = accesses.get("app-sa").await?;
    let uid = saa.metadata.uid.clone().unwrap_or_default();
    let records: Api<ObjectSync> = Api::namespaced(client.clone(), &ns);
    let start = Instant::now();
    loop {
        let rv = records
            .get_opt(&object_sync_name(node, &uid))
            .await?
            .and_then(|r| r.status)
            .map(|s| s.object_resource_version);
        let current = accesses.get("app-sa").await?.metadata.resource_version;
        if rv.is_some() && rv == current {
            break;
        }
        if start.elapsed() > WAIT {
            bail!("ObjectSync {node}.{uid} at {rv:?}, the access at {current:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The role changes while the edge is away: back, it gets the current access from the sync
    // loop (KubeEdge's content has no kind, so its sync loop cannot re-send an access).
    it.kill_edge();
    it.wait_disconnected(WAIT).await?;
    let patch =
        json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]});
    Api::<Role>::namespaced(client.clone(), &ns)
        .patch("reader", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let start = Instant::now();
    while accesses.get("app-sa").await?.spec.access_role_binding[0].rules[0].verbs != ["get"] {
        if start.elapsed() > WAIT {
            bail!("the access did not follow the role");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    it.start_edge()?;
    it.wait_connected(WAIT).await?;
    let back = stored(&mut it, &key, |s| verbs(s) == json!(["get"])).await?;
    if back.value["status"] != json!({}) {
        bail!(
            "the re-sent access carries a node list: {}",
            back.value["status"]
        );
    }
    // The pod goes: the access is deleted, and so is the edge's copy.
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("app", &dp)
        .await?;
    let start = Instant::now();
    while it.store().get(&key)?.is_some() || accesses.get_opt("app-sa").await?.is_some() {
        if start.elapsed() > WAIT {
            bail!("{key} still at the edge or in the API server after {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    it.finish();
    Ok(())
}
