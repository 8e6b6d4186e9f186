//! Where acknowledged resource versions are recorded: ObjectSync / ClusterObjectSync records
//! (docs/hub-protocol.md#the-records), behind a trait with an in-memory and a Kubernetes
//! implementation.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeedge_api::names::NULL_NAMESPACE;
use kubeedge_api::reliablesyncs::{
    ClusterObjectSync, ClusterObjectSyncSpec, ObjectSync, ObjectSyncSpec, object_sync_name,
};

/// A record's identity: node, namespace token (`null` = cluster-scoped) and object UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SyncKey {
    /// The edge node.
    pub node: String,
    /// The object's namespace, or `null` for a ClusterObjectSync.
    pub namespace: String,
    /// The object's UID.
    pub uid: String,
}

impl SyncKey {
    /// The record name `<node>.<uid>`.
    pub fn name(&self) -> String {
        object_sync_name(&self.node, &self.uid)
    }

    /// True when the record is a ClusterObjectSync.
    pub fn is_cluster(&self) -> bool {
        self.namespace == NULL_NAMESPACE
    }
}

/// The object a record tracks (its spec).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncSpec {
    /// `objectAPIVersion`.
    pub api_version: String,
    /// `objectKind`.
    pub kind: String,
    /// `objectName`.
    pub name: String,
}

/// Result of a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The record was created with status `"0"`.
    New,
    /// Someone (another replica) created it first; its status resource version (may be empty).
    Existed(String),
}

/// A store failure. Never fatal: the hub logs it and delivers anyway (the sync loop repairs).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The Kubernetes API call failed.
    #[error("objectsync api call failed")]
    Kube(#[from] kube::Error),
    /// The record cannot be created (no kind known).
    #[error("cannot create a record for {0}: {1}")]
    Invalid(String, String),
}

/// Reads and writes acknowledgement records. Implementations must be cheap to call
/// concurrently; every method is idempotent.
pub trait ObjectSyncStore: Send + Sync + fmt::Debug {
    /// The record's `status.objectResourceVersion`: `None` when there is no record, `Some("")`
    /// when it exists with an empty status.
    fn get(&self, key: &SyncKey) -> BoxFuture<'static, Result<Option<String>, StoreError>>;
    /// Creates the record with status `"0"`; an existing record is reported, not overwritten.
    fn create(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
    ) -> BoxFuture<'static, Result<Created, StoreError>>;
    /// Records that the edge acknowledged `rv`: creates the record if missing (needs a kind),
    /// then sets its status.
    fn set_acked(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
        rv: &str,
    ) -> BoxFuture<'static, Result<(), StoreError>>;
    /// Records that the edge acknowledged `rv` of an object whose record is most likely
    /// missing (first sight, not written yet): the same outcome as [`Self::set_acked`], in an
    /// order that saves the API server a request when the record is indeed missing (create,
    /// then status; `set_acked` tries the status first).
    fn create_acked(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
        rv: &str,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        self.set_acked(key, spec, rv)
    }
    /// Deletes the record; a missing record is fine.
    fn delete(&self, key: &SyncKey) -> BoxFuture<'static, Result<(), StoreError>>;
}

/// Records kept in process: for demos and tests without Kubernetes. Lost on restart.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    records: Arc<Mutex<HashMap<SyncKey, (SyncSpec, String)>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record for `key`: its spec and status resource version.
    pub fn record(&self, key: &SyncKey) -> Option<(SyncSpec, String)> {
        self.lock().get(key).cloned()
    }

    /// Every record.
    pub fn records(&self) -> Vec<(SyncKey, SyncSpec, String)> {
        self.lock()
            .iter()
            .map(|(k, (s, rv))| (k.clone(), s.clone(), rv.clone()))
            .collect()
    }

    /// Sets a record directly (tests: pretend an edge acknowledged `rv` earlier).
    pub fn insert(&self, key: SyncKey, spec: SyncSpec, rv: &str) {
        self.lock().insert(key, (spec, rv.to_owned()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SyncKey, (SyncSpec, String)>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ObjectSyncStore for MemoryStore {
    fn get(&self, key: &SyncKey) -> BoxFuture<'static, Result<Option<String>, StoreError>> {
        let r = self.lock().get(key).map(|(_, rv)| rv.clone());
        Box::pin(async move { Ok(r) })
    }

    fn create(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
    ) -> BoxFuture<'static, Result<Created, StoreError>> {
        let mut records = self.lock();
        let r = match records.get(key) {
            Some((_, rv)) => Created::Existed(rv.clone()),
            None => {
                records.insert(key.clone(), (spec.clone(), "0".to_owned()));
                Created::New
            }
        };
        Box::pin(async move { Ok(r) })
    }

    fn set_acked(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
        rv: &str,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let mut records = self.lock();
        let r = match records.get_mut(key) {
            Some(entry) => {
                entry.1 = rv.to_owned();
                Ok(())
            }
            None if spec.kind.is_empty() => Err(StoreError::Invalid(key.name(), "no kind".into())),
            None => {
                records.insert(key.clone(), (spec.clone(), rv.to_owned()));
                Ok(())
            }
        };
        Box::pin(async move { r })
    }

    fn delete(&self, key: &SyncKey) -> BoxFuture<'static, Result<(), StoreError>> {
        self.lock().remove(key);
        Box::pin(async { Ok(()) })
    }
}

/// Records as `reliablesyncs.kubeedge.io/v1alpha1` ObjectSync / ClusterObjectSync objects on
/// the API server (the CRDs of `kubeedge_api::crds` must be installed).
#[derive(Clone)]
pub struct KubeStore {
    client: kube::Client,
}

impl fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeStore").finish_non_exhaustive()
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The status patch recording `rv`; with `only_if` (a record's `metadata.resourceVersion`) the
/// API server applies it only to that version of the record and answers 409 otherwise.
fn status_patch(rv: &str, only_if: Option<&str>) -> Patch<serde_json::Value> {
    let mut patch = serde_json::json!({"status": {"objectResourceVersion": rv}});
    if let Some(version) = only_if {
        patch["metadata"] = serde_json::json!({"resourceVersion": version});
    }
    Patch::Merge(patch)
}

impl KubeStore {
    /// A store on `client`.
    pub fn new(client: kube::Client) -> Self {
        KubeStore { client }
    }

    async fn get_rv(client: kube::Client, key: SyncKey) -> Result<Option<String>, StoreError> {
        let name = key.name();
        let status = if key.is_cluster() {
            Api::<ClusterObjectSync>::all(client)
                .get_opt(&name)
                .await?
                .map(|o| o.status)
        } else {
            Api::<ObjectSync>::namespaced(client, &key.namespace)
                .get_opt(&name)
                .await?
                .map(|o| o.status)
        };
        Ok(status.map(|s| s.map(|s| s.object_resource_version).unwrap_or_default()))
    }

    async fn set_status(
        client: kube::Client,
        key: &SyncKey,
        rv: &str,
        only_if: Option<&str>,
    ) -> Result<(), kube::Error> {
        let name = key.name();
        let pp = PatchParams::default();
        let patch = status_patch(rv, only_if);
        if key.is_cluster() {
            Api::<ClusterObjectSync>::all(client)
                .patch_status(&name, &pp, &patch)
                .await?;
        } else {
            Api::<ObjectSync>::namespaced(client, &key.namespace)
                .patch_status(&name, &pp, &patch)
                .await?;
        }
        Ok(())
    }

    /// Creates the record (spec only; status is a subresource): `Some(its resourceVersion)`,
    /// or `None` when it existed.
    async fn create_record(
        client: kube::Client,
        key: &SyncKey,
        spec: &SyncSpec,
    ) -> Result<Option<String>, kube::Error> {
        let name = key.name();
        let pp = PostParams::default();
        let result = if key.is_cluster() {
            let obj = ClusterObjectSync::new(
                &name,
                ClusterObjectSyncSpec {
                    object_api_version: spec.api_version.clone(),
                    object_kind: spec.kind.clone(),
                    object_name: spec.name.clone(),
                },
            );
            Api::<ClusterObjectSync>::all(client)
                .create(&pp, &obj)
                .await
                .map(|o| o.metadata.resource_version)
        } else {
            let obj = ObjectSync::new(
                &name,
                ObjectSyncSpec {
                    object_api_version: spec.api_version.clone(),
                    object_kind: spec.kind.clone(),
                    object_name: spec.name.clone(),
                },
            );
            Api::<ObjectSync>::namespaced(client, &key.namespace)
                .create(&pp, &obj)
                .await
                .map(|o| o.metadata.resource_version)
        };
        match result {
            Ok(version) => Ok(Some(version.unwrap_or_default())),
            Err(e) if is_status(&e, 409) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl ObjectSyncStore for KubeStore {
    fn get(&self, key: &SyncKey) -> BoxFuture<'static, Result<Option<String>, StoreError>> {
        Box::pin(Self::get_rv(self.client.clone(), key.clone()))
    }

    fn create(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
    ) -> BoxFuture<'static, Result<Created, StoreError>> {
        let (client, key, spec) = (self.client.clone(), key.clone(), spec.clone());
        Box::pin(async move {
            if spec.kind.is_empty() {
                return Err(StoreError::Invalid(key.name(), "no kind".into()));
            }
            if let Some(version) = Self::create_record(client.clone(), &key, &spec).await? {
                // Only on the record as created: an acknowledgement written in between (another
                // worker, another replica) must not be overwritten with "0".
                let only_if = (!version.is_empty()).then_some(version.as_str());
                match Self::set_status(client.clone(), &key, "0", only_if).await {
                    Ok(()) => Ok(Created::New),
                    Err(e) if is_status(&e, 409) => Ok(Created::Existed(
                        Self::get_rv(client, key).await?.unwrap_or_default(),
                    )),
                    Err(e) => Err(e.into()),
                }
            } else {
                // Another replica won the race; compare with what it stored (KubeEdge drops the
                // message).
                Ok(Created::Existed(
                    Self::get_rv(client, key).await?.unwrap_or_default(),
                ))
            }
        })
    }

    fn set_acked(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
        rv: &str,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let (client, key, spec, rv) = (
            self.client.clone(),
            key.clone(),
            spec.clone(),
            rv.to_owned(),
        );
        Box::pin(async move {
            match Self::set_status(client.clone(), &key, &rv, None).await {
                Ok(()) => Ok(()),
                Err(e) if is_status(&e, 404) => {
                    if spec.kind.is_empty() {
                        return Err(StoreError::Invalid(key.name(), "no kind".into()));
                    }
                    Self::create_record(client.clone(), &key, &spec).await?;
                    Self::set_status(client, &key, &rv, None).await?;
                    Ok(())
                }
                Err(e) => Err(e.into()),
            }
        })
    }

    fn create_acked(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
        rv: &str,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let (client, key, spec, rv) = (
            self.client.clone(),
            key.clone(),
            spec.clone(),
            rv.to_owned(),
        );
        Box::pin(async move {
            if spec.kind.is_empty() {
                return Err(StoreError::Invalid(key.name(), "no kind".into()));
            }
            // Created now or found (409): either way the status is set next.
            Self::create_record(client.clone(), &key, &spec).await?;
            Self::set_status(client, &key, &rv, None).await?;
            Ok(())
        })
    }

    fn delete(&self, key: &SyncKey) -> BoxFuture<'static, Result<(), StoreError>> {
        let (client, key) = (self.client.clone(), key.clone());
        Box::pin(async move {
            let name = key.name();
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            let r = if key.is_cluster() {
                Api::<ClusterObjectSync>::all(client)
                    .delete(&name, &dp)
                    .await
                    .map(|_| ())
            } else {
                Api::<ObjectSync>::namespaced(client, &key.namespace)
                    .delete(&name, &dp)
                    .await
                    .map(|_| ())
            };
            match r {
                Ok(()) => Ok(()),
                Err(e) if is_status(&e, 404) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
    }
}
