//! The watch listeners edges registered: by node (for syncs and reconnects) and by type (for
//! fanning out changes).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::DynamicObject;
use kubeedge_api::application::Application;

use crate::discovery::ResourceInfo;
use crate::informer::type_key;
use crate::selector::{FieldSelector, LabelSelector};

/// One edge watch: what the node asked for, parsed once.
#[derive(Debug)]
pub(crate) struct Listener {
    /// The Application id (identical watches of one node share it).
    pub id: String,
    pub node: String,
    pub info: Arc<ResourceInfo>,
    /// `None`: all namespaces (or a cluster-scoped type).
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// The request as the edge sent it (kept to persist the listener).
    pub app: Application,
}

impl Listener {
    /// Whether `obj` is one this watch selects.
    pub(crate) fn matches(&self, obj: &DynamicObject) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| obj.metadata.namespace.as_deref() == Some(ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

#[derive(Debug, Default)]
struct Inner {
    by_node: HashMap<String, HashMap<String, Arc<Listener>>>,
    by_type: HashMap<String, HashMap<(String, String), Arc<Listener>>>,
}

/// Every listener. Reads (fan-out) do not block each other.
#[derive(Debug, Default)]
pub(crate) struct Registry(RwLock<Inner>);

impl Registry {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `l`; returns the listener it replaced (same node and id).
    pub(crate) fn add(&self, l: Arc<Listener>) -> Option<Arc<Listener>> {
        let mut inner = self.write();
        let old = inner
            .by_node
            .entry(l.node.clone())
            .or_default()
            .insert(l.id.clone(), l.clone());
        if let Some(old) = &old {
            let t = type_key(&old.info);
            if let Some(m) = inner.by_type.get_mut(&t) {
                m.remove(&(old.node.clone(), old.id.clone()));
            }
        }
        inner
            .by_type
            .entry(type_key(&l.info))
            .or_default()
            .insert((l.node.clone(), l.id.clone()), l);
        old
    }

    /// Removes the listener `id` of `node`.
    pub(crate) fn remove(&self, node: &str, id: &str) -> Option<Arc<Listener>> {
        let mut inner = self.write();
        let gone = inner.by_node.get_mut(node)?.remove(id)?;
        if inner.by_node.get(node).is_some_and(HashMap::is_empty) {
            inner.by_node.remove(node);
        }
        let t = type_key(&gone.info);
        if let Some(m) = inner.by_type.get_mut(&t) {
            m.remove(&(node.to_owned(), id.to_owned()));
            if m.is_empty() {
                inner.by_type.remove(&t);
            }
        }
        Some(gone)
    }

    /// The listeners of `node`.
    pub(crate) fn of_node(&self, node: &str) -> Vec<Arc<Listener>> {
        self.read()
            .by_node
            .get(node)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// How many listeners `node` holds.
    pub(crate) fn node_count(&self, node: &str) -> usize {
        self.read().by_node.get(node).map_or(0, HashMap::len)
    }

    /// Whether `node` holds listener `id`.
    pub(crate) fn contains(&self, node: &str, id: &str) -> bool {
        self.read()
            .by_node
            .get(node)
            .is_some_and(|m| m.contains_key(id))
    }

    /// The listeners of the type with key `key`.
    pub(crate) fn of_type(&self, key: &str) -> Vec<Arc<Listener>> {
        self.read()
            .by_type
            .get(key)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Nodes holding listeners.
    pub(crate) fn nodes(&self) -> Vec<String> {
        self.read().by_node.keys().cloned().collect()
    }

    /// Listeners in all.
    pub(crate) fn len(&self) -> usize {
        self.read().by_node.values().map(HashMap::len).sum()
    }
}
