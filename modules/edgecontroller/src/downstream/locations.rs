//! The location cache: which edge node needs which ConfigMap, Secret and PersistentVolumeClaim.
//!
//! Derived from the current pods only (KubeEdge's only grows and ignores init and
//! ephemeral containers): each pod on an edge node contributes
//! its references to its node (mirror pods contribute none), with a reference count per (node, object). A pod that is
//! deleted, stops referencing an object, or whose node is deleted takes its counts with it,
//! so Secrets stop flowing to nodes that no longer run a pod using them, and a deleted then
//! recreated object still reaches the nodes whose pods use it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, Pod, Volume};

/// The kinds of object a pod references that a node may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RefKind {
    ConfigMap,
    Secret,
    PersistentVolumeClaim,
}

/// One referenced object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectRef {
    pub(crate) kind: RefKind,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ObjectRef {
    pub(crate) fn new(kind: RefKind, namespace: &str, name: &str) -> Self {
        ObjectRef {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// Every ConfigMap, Secret and PVC `pod` references: volumes (including projected sources,
/// CSI/FlexVolume-style secret refs and generic ephemeral volumes' claims), env and envFrom of
/// regular, init **and** ephemeral containers (the kubelet needs those objects too), and image pull
/// secrets.
pub(crate) fn references(pod: &Pod) -> BTreeSet<ObjectRef> {
    let mut out = Refs {
        namespace: pod.metadata.namespace.as_deref().unwrap_or_default(),
        set: BTreeSet::new(),
    };
    let Some(spec) = &pod.spec else {
        return out.set;
    };
    for v in spec.volumes.iter().flatten() {
        out.volume(v, pod.metadata.name.as_deref().unwrap_or_default());
    }
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        out.container(c);
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        out.env(c.env.as_deref(), c.env_from.as_deref());
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        out.add(RefKind::Secret, &s.name);
    }
    out.set
}

/// The objects `pod` gives its node access to: its [`references`], except for mirror pods
/// (the API server's copy of a static pod), which grant nothing — a node creates those itself,
/// so they must not open a way to other objects (the Node authorizer leaves them out too).
pub(crate) fn granted(pod: &Pod) -> BTreeSet<ObjectRef> {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
    if mirror {
        BTreeSet::new()
    } else {
        references(pod)
    }
}

/// The node a pod is bound to (`spec.nodeName`), if any.
pub(crate) fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The annotation that marks a mirror pod.
pub(crate) const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

struct Refs<'a> {
    namespace: &'a str,
    set: BTreeSet<ObjectRef>,
}

impl Refs<'_> {
    fn add(&mut self, kind: RefKind, name: &str) {
        if !name.is_empty() {
            self.set.insert(ObjectRef::new(kind, self.namespace, name));
        }
    }

    fn volume(&mut self, v: &Volume, pod_name: &str) {
        if let Some(cm) = &v.config_map {
            self.add(RefKind::ConfigMap, &cm.name);
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            self.add(RefKind::Secret, s);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                self.add(RefKind::ConfigMap, &cm.name);
            }
            if let Some(s) = &src.secret {
                self.add(RefKind::Secret, &s.name);
            }
        }
        if let Some(pvc) = &v.persistent_volume_claim {
            self.add(RefKind::PersistentVolumeClaim, &pvc.claim_name);
        }
        if v.ephemeral.is_some() {
            // Generic ephemeral volumes get a PVC named <pod>-<volume>.
            self.add(
                RefKind::PersistentVolumeClaim,
                &format!("{pod_name}-{}", v.name),
            );
        }
        if let Some(af) = &v.azure_file {
            self.add(RefKind::Secret, &af.secret_name);
        }
        let secret_refs = [
            v.csi
                .as_ref()
                .and_then(|x| x.node_publish_secret_ref.as_ref()),
            v.cephfs.as_ref().and_then(|x| x.secret_ref.as_ref()),
            v.cinder.as_ref().and_then(|x| x.secret_ref.as_ref()),
            v.flex_volume.as_ref().and_then(|x| x.secret_ref.as_ref()),
            v.iscsi.as_ref().and_then(|x| x.secret_ref.as_ref()),
            v.rbd.as_ref().and_then(|x| x.secret_ref.as_ref()),
            v.scale_io.as_ref().map(|x| &x.secret_ref),
            v.storageos.as_ref().and_then(|x| x.secret_ref.as_ref()),
        ];
        for r in secret_refs.into_iter().flatten() {
            self.add(RefKind::Secret, &r.name);
        }
    }

    fn container(&mut self, c: &Container) {
        self.env(c.env.as_deref(), c.env_from.as_deref());
    }

    fn env(&mut self, env: Option<&[EnvVar]>, env_from: Option<&[EnvFromSource]>) {
        for e in env_from.into_iter().flatten() {
            if let Some(cm) = &e.config_map_ref {
                self.add(RefKind::ConfigMap, &cm.name);
            }
            if let Some(s) = &e.secret_ref {
                self.add(RefKind::Secret, &s.name);
            }
        }
        for e in env.into_iter().flatten() {
            let Some(from) = &e.value_from else { continue };
            if let Some(cm) = &from.config_map_key_ref {
                self.add(RefKind::ConfigMap, &cm.name);
            }
            if let Some(s) = &from.secret_key_ref {
                self.add(RefKind::Secret, &s.name);
            }
        }
    }
}

/// Reference counts per (object, node), kept in step with the pod cache.
#[derive(Debug, Default)]
pub(crate) struct Locations {
    by_object: HashMap<ObjectRef, HashMap<String, u32>>,
    by_pod: HashMap<String, (String, BTreeSet<ObjectRef>)>,
}

impl Locations {
    /// Records that pod `pod_key` runs on `node` and references `refs`, replacing what was
    /// recorded for it before.
    pub(crate) fn set_pod(&mut self, pod_key: &str, node: &str, refs: BTreeSet<ObjectRef>) {
        self.remove_pod(pod_key);
        for r in &refs {
            *self
                .by_object
                .entry(r.clone())
                .or_default()
                .entry(node.to_owned())
                .or_default() += 1;
        }
        self.by_pod
            .insert(pod_key.to_owned(), (node.to_owned(), refs));
    }

    /// Forgets a pod and its references.
    pub(crate) fn remove_pod(&mut self, pod_key: &str) {
        let Some((node, refs)) = self.by_pod.remove(pod_key) else {
            return;
        };
        for r in refs {
            let Some(nodes) = self.by_object.get_mut(&r) else {
                continue;
            };
            if let Some(count) = nodes.get_mut(&node) {
                *count -= 1;
                if *count == 0 {
                    nodes.remove(&node);
                }
            }
            if nodes.is_empty() {
                self.by_object.remove(&r);
            }
        }
    }

    /// Forgets every pod of `node`.
    pub(crate) fn remove_node(&mut self, node: &str) {
        let pods: Vec<String> = self
            .by_pod
            .iter()
            .filter(|(_, (n, _))| n == node)
            .map(|(k, _)| k.clone())
            .collect();
        for p in pods {
            self.remove_pod(&p);
        }
    }

    /// The nodes running a pod that references `r`, sorted.
    pub(crate) fn nodes_for(&self, r: &ObjectRef) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .by_object
            .get(r)
            .map(|n| n.keys().cloned().collect())
            .unwrap_or_default();
        nodes.sort();
        nodes
    }

    /// Whether a pod on `node` references `r`.
    pub(crate) fn node_uses(&self, node: &str, r: &ObjectRef) -> bool {
        self.by_object.get(r).is_some_and(|n| n.contains_key(node))
    }
}

/// The location cache shared by the downstream task (writer) and upstream handlers (readers).
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedLocations(Arc<RwLock<Locations>>);

impl SharedLocations {
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Locations> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, Locations> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn names(refs: &BTreeSet<ObjectRef>) -> Vec<String> {
        refs.iter()
            .map(|r| format!("{:?}:{}/{}", r.kind, r.namespace, r.name))
            .collect()
    }

    #[test]
    fn references_cover_volumes_env_init_ephemeral_and_pull_secrets() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "cm-vol"}},
                    {"name": "b", "secret": {"secretName": "s-vol"}},
                    {"name": "c", "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}}]}},
                    {"name": "d", "persistentVolumeClaim": {"claimName": "claim"}},
                    {"name": "e", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "s-csi"}}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                ],
                "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm-envfrom"}}],
                    "env": [{"name": "x", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}}]}],
                "initContainers": [{"name": "i", "env": [{"name": "y", "valueFrom": {"configMapKeyRef": {"name": "cm-init", "key": "k"}}}]}],
                "ephemeralContainers": [{"name": "dbg", "envFrom": [{"secretRef": {"name": "s-ephemeral"}}]}],
            }
        }));
        assert_eq!(
            names(&references(&p)),
            [
                "ConfigMap:ns/cm-envfrom",
                "ConfigMap:ns/cm-init",
                "ConfigMap:ns/cm-proj",
                "ConfigMap:ns/cm-vol",
                "Secret:ns/pull",
                "Secret:ns/s-csi",
                "Secret:ns/s-env",
                "Secret:ns/s-ephemeral",
                "Secret:ns/s-proj",
                "Secret:ns/s-vol",
                "PersistentVolumeClaim:ns/claim",
                "PersistentVolumeClaim:ns/web-scratch",
            ]
        );
    }

    #[test]
    fn counts_are_pruned_when_pods_go_away_or_move() {
        let cfg = ObjectRef::new(RefKind::ConfigMap, "ns", "cfg");
        let refs: BTreeSet<_> = [cfg.clone()].into();
        let mut l = Locations::default();
        l.set_pod("ns/a", "e1", refs.clone());
        l.set_pod("ns/b", "e1", refs.clone());
        l.set_pod("ns/c", "e2", refs.clone());
        assert_eq!(l.nodes_for(&cfg), ["e1", "e2"]);
        l.remove_pod("ns/a");
        assert!(l.node_uses("e1", &cfg), "pod b still uses it on e1");
        l.set_pod("ns/b", "e1", BTreeSet::new());
        assert_eq!(l.nodes_for(&cfg), ["e2"], "b stopped referencing it");
        l.remove_node("e2");
        assert!(l.nodes_for(&cfg).is_empty());
        assert!(l.by_object.is_empty() && l.by_pod.len() == 1);
    }
}
