//! `reliablesyncs.kubeedge.io/v1alpha1`: what each edge node has acknowledged.

use kube::CustomResource;

use crate::watch::{Cache, CacheWriter};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of an [`ObjectSync`]: which object the record tracks.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "reliablesyncs.kubeedge.io",
    version = "v1alpha1",
    kind = "ObjectSync",
    plural = "objectsyncs",
    singular = "objectsync",
    namespaced,
    status = "ObjectSyncStatus"
)]
pub struct ObjectSyncSpec {
    /// apiVersion of the synced object, e.g. `v1`.
    #[serde(
        rename = "objectAPIVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_api_version: String,
    /// kind of the synced object, e.g. `Pod`.
    #[serde(
        rename = "objectKind",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_kind: String,
    /// metadata.name of the synced object.
    #[serde(
        rename = "objectName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_name: String,
}

/// Status of an [`ObjectSync`] or [`ClusterObjectSync`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ObjectSyncStatus {
    /// The last resourceVersion the edge acknowledged; `"0"` = created, never acknowledged.
    #[serde(
        rename = "objectResourceVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_resource_version: String,
}

/// Spec of a [`ClusterObjectSync`] (same fields as [`ObjectSyncSpec`]).
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "reliablesyncs.kubeedge.io",
    version = "v1alpha1",
    kind = "ClusterObjectSync",
    plural = "clusterobjectsyncs",
    singular = "clusterobjectsync",
    status = "ObjectSyncStatus"
)]
pub struct ClusterObjectSyncSpec {
    /// apiVersion of the synced object.
    #[serde(
        rename = "objectAPIVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_api_version: String,
    /// kind of the synced object.
    #[serde(
        rename = "objectKind",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_kind: String,
    /// metadata.name of the synced object.
    #[serde(
        rename = "objectName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub object_name: String,
}

/// The acknowledgement records in memory, as one watch (synccontroller's) keeps them, readable
/// by another module of the same process: cloudhub learns whether a node ever acknowledged an
/// object without asking the API server (KubeEdge reads its ObjectSync lister the same way).
/// Cheap to clone. [`record_cache`] makes one with its writer.
#[derive(Debug, Clone)]
pub struct RecordCache {
    namespaced: Cache<ObjectSync>,
    cluster: Cache<ClusterObjectSync>,
}

/// The writing side of a [`RecordCache`]: the task that watches ObjectSyncs and
/// ClusterObjectSyncs applies its events here.
#[derive(Debug)]
pub struct RecordCacheWriter {
    /// ObjectSyncs (key `<namespace>/<name>`).
    pub namespaced: CacheWriter<ObjectSync>,
    /// ClusterObjectSyncs (key `<name>`).
    pub cluster: CacheWriter<ClusterObjectSync>,
}

/// An empty record cache: the writer for the watch, and a reader.
pub fn record_cache() -> (RecordCacheWriter, RecordCache) {
    let (namespaced, namespaced_r) = crate::watch::cache();
    let (cluster, cluster_r) = crate::watch::cache();
    (
        RecordCacheWriter {
            namespaced,
            cluster,
        },
        RecordCache {
            namespaced: namespaced_r,
            cluster: cluster_r,
        },
    )
}

impl RecordCache {
    /// The record `name` in `namespace` ([`crate::names::NULL_NAMESPACE`]: the
    /// ClusterObjectSync): `None` until both watches have listed (then ask the API server);
    /// `Some(None)` when there is no record; `Some(Some(rv))` with its
    /// `status.objectResourceVersion` (`""` without a status). A record written moments ago
    /// may not show yet (watch latency).
    pub fn recorded(&self, namespace: &str, name: &str) -> Option<Option<String>> {
        if !(self.namespaced.is_ready() && self.cluster.is_ready()) {
            return None;
        }
        let status = if namespace == crate::names::NULL_NAMESPACE {
            self.cluster
                .get(name)
                .map(|r| r.status.clone().map(|s| s.object_resource_version))
        } else {
            self.namespaced
                .get_by(Some(namespace), name)
                .map(|r| r.status.clone().map(|s| s.object_resource_version))
        };
        Some(status.map(Option::unwrap_or_default))
    }
}

/// The record name for (node, object UID): `<node>.<uid>`.
pub fn object_sync_name(node: &str, uid: &str) -> String {
    format!("{node}.{uid}")
}

/// Splits a record name into (node, uid) at the **last** dot: node names may contain dots,
/// UIDs do not. `None` when there is no dot or either part is empty.
pub fn parse_object_sync_name(name: &str) -> Option<(&str, &str)> {
    let (node, uid) = name.rsplit_once('.')?;
    (!node.is_empty() && !uid.is_empty()).then_some((node, uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn the_record_cache_answers_only_once_both_watches_listed() {
        use kube::runtime::watcher::Event;
        let (mut w, cache) = record_cache();
        let mut os = ObjectSync::new("e1.u1", ObjectSyncSpec::default());
        os.metadata.namespace = Some("ns".into());
        os.metadata.resource_version = Some("3".into());
        os.status = Some(ObjectSyncStatus {
            object_resource_version: "7".into(),
        });
        for e in [Event::Init, Event::InitApply(os), Event::InitDone] {
            w.namespaced.apply(e);
        }
        assert_eq!(
            cache.recorded("ns", "e1.u1"),
            None,
            "cluster records not listed"
        );
        for e in [Event::Init, Event::InitDone] {
            w.cluster.apply(e);
        }
        assert_eq!(cache.recorded("ns", "e1.u1"), Some(Some("7".into())));
        assert_eq!(cache.recorded("ns", "e1.u2"), Some(None));
        assert_eq!(cache.recorded("other", "e1.u1"), Some(None));
        assert_eq!(
            cache.recorded(crate::names::NULL_NAMESPACE, "e1.u1"),
            Some(None)
        );
    }

    #[test]
    fn names_split_at_the_last_dot() {
        assert_eq!(object_sync_name("edge.2", "u-1"), "edge.2.u-1");
        assert_eq!(
            parse_object_sync_name("edge.2.u-1"),
            Some(("edge.2", "u-1"))
        );
        assert_eq!(parse_object_sync_name("nodot"), None);
        assert_eq!(parse_object_sync_name(".u"), None);
    }

    #[test]
    fn json_uses_kubeedge_field_names() {
        let mut os = ObjectSync::new(
            "e1.u1",
            ObjectSyncSpec {
                object_api_version: "v1".into(),
                object_kind: "Pod".into(),
                object_name: "web".into(),
            },
        );
        os.status = Some(ObjectSyncStatus {
            object_resource_version: "7".into(),
        });
        let v = serde_json::to_value(&os).unwrap();
        assert_eq!(v["apiVersion"], "reliablesyncs.kubeedge.io/v1alpha1");
        assert_eq!(v["kind"], "ObjectSync");
        assert_eq!(v["spec"]["objectAPIVersion"], "v1");
        assert_eq!(v["spec"]["objectKind"], "Pod");
        assert_eq!(v["spec"]["objectName"], "web");
        assert_eq!(v["status"]["objectResourceVersion"], "7");
        assert_eq!(ClusterObjectSync::plural(&()), "clusterobjectsyncs");
    }
}
