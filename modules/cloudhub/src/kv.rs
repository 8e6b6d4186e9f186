//! Keys of a ConfigMap in `kubeedge`, written alone: a JSON merge patch of just those keys (so
//! writers of other keys, other replicas included, are never overwritten), the namespace and
//! ConfigMap created when missing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::error::Result;
use crate::material::{NAMESPACE, ensure_namespace, is_status};

/// The ConfigMap `name` in `kubeedge`.
pub(crate) fn api(client: &kube::Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// Sets `key` of ConfigMap `kubeedge/<name>` to `value`, or removes it (`None`; a missing
/// ConfigMap is then left missing).
pub(crate) async fn set(
    client: &kube::Client,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<()> {
    let entries = BTreeMap::from([(key.to_owned(), value.map(str::to_owned))]);
    set_many(client, name, &entries).await
}

/// Sets every key of `entries` in one request: a value is written, `None` removes the key (a
/// missing ConfigMap is left missing when every entry is a removal).
pub(crate) async fn set_many(
    client: &kube::Client,
    name: &str,
    entries: &BTreeMap<String, Option<String>>,
) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let patch = serde_json::json!({ "data": entries });
    let cms = api(client);
    for _ in 0..3 {
        match cms
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
        let data: BTreeMap<String, String> = entries
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
            .collect();
        if data.is_empty() {
            return Ok(());
        }
        ensure_namespace(client).await?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        };
        match cms.create(&PostParams::default(), &cm).await {
            Ok(_) => return Ok(()),
            // Created concurrently by another writer: patch it.
            Err(e) if is_status(&e, 409) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Every key of ConfigMap `kubeedge/<name>` (empty when it does not exist).
pub(crate) async fn read(client: &kube::Client, name: &str) -> Result<BTreeMap<String, String>> {
    Ok(api(client)
        .get_opt(name)
        .await?
        .and_then(|cm| cm.data)
        .unwrap_or_default())
}
