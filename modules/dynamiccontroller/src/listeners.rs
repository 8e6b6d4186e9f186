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
    /// The request as the edge sent it, without bodies (kept to persist the listener).
    pub app: Application,
    /// The watch request the listener was decided as (decided again by re-reviews).
    pub uri: String,
    /// What keeping this listener costs, as counted against the byte limits.
    pub bytes: usize,
}

/// Bytes a listener costs beyond its id, key and options (maps, parsed selectors, counted
/// once more as the options they came from).
const LISTENER_OVERHEAD: usize = 512;

impl Listener {
    /// What keeping a listener of `app` costs: its strings twice (the record and what was
    /// parsed from it) plus a fixed overhead.
    pub(crate) fn cost(app: &Application) -> usize {
        let option = app.option.as_ref().map_or(0, Vec::len);
        LISTENER_OVERHEAD + 2 * (app.id.len() + app.key.len() + option + app.node_name.len())
    }
}

/// What the registry holds at most (`maxListenersPerNode`, `maxListeners`,
/// `maxListenerBytesPerNode`, `maxListenerBytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub per_node: usize,
    pub total: usize,
    pub bytes_per_node: usize,
    pub bytes: usize,
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
    /// Bytes per node and in all ([`Listener::bytes`]).
    node_bytes: HashMap<String, usize>,
    bytes: usize,
    count: usize,
}

impl Inner {
    fn account(&mut self, node: &str, bytes: usize, added: bool) {
        if added {
            *self.node_bytes.entry(node.to_owned()).or_default() += bytes;
            self.bytes += bytes;
            self.count += 1;
        } else {
            if let Some(b) = self.node_bytes.get_mut(node) {
                *b -= bytes;
                if *b == 0 {
                    self.node_bytes.remove(node);
                }
            }
            self.bytes -= bytes;
            self.count -= 1;
        }
    }
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

    /// Adds `l` unless that would take its node or all nodes beyond `limits` (then says
    /// which); returns the listener it replaced (same node and id).
    pub(crate) fn try_add(
        &self,
        l: Arc<Listener>,
        limits: &Limits,
    ) -> Result<Option<Arc<Listener>>, String> {
        let mut inner = self.write();
        inner.room(&l.node, &l.id, l.bytes, limits)?;
        Ok(inner.insert(l))
    }

    /// Whether listener `id` of `node`, costing `bytes`, would fit within `limits` now (then
    /// says why not): asked before a watch is reviewed, so a node at its limits costs the
    /// API server no review.
    pub(crate) fn room(
        &self,
        node: &str,
        id: &str,
        bytes: usize,
        limits: &Limits,
    ) -> Result<(), String> {
        self.read().room(node, id, bytes, limits)
    }
}

impl Inner {
    /// See [`Registry::room`].
    fn room(&self, node: &str, id: &str, bytes: usize, limits: &Limits) -> Result<(), String> {
        let replaced = self
            .by_node
            .get(node)
            .and_then(|m| m.get(id))
            .map_or(0, |o| o.bytes);
        let node_count = self.by_node.get(node).map_or(0, HashMap::len);
        let node_bytes = self.node_bytes.get(node).copied().unwrap_or(0) - replaced;
        let new = replaced == 0;
        if new && node_count >= limits.per_node {
            return Err(format!(
                "node {node} holds {node_count} watches already (maxListenersPerNode)"
            ));
        }
        if new && self.count >= limits.total {
            return Err(format!(
                "{} watches are held for edges already (maxListeners)",
                self.count
            ));
        }
        if node_bytes + bytes > limits.bytes_per_node {
            return Err(format!(
                "node {node}'s watches would take more than {} bytes (maxListenerBytesPerNode)",
                limits.bytes_per_node
            ));
        }
        if self.bytes - replaced + bytes > limits.bytes {
            return Err(format!(
                "edges' watches would take more than {} bytes (maxListenerBytes)",
                limits.bytes
            ));
        }
        Ok(())
    }

    /// Adds `l`; returns the listener it replaced (same node and id).
    fn insert(&mut self, l: Arc<Listener>) -> Option<Arc<Listener>> {
        let inner = self;
        inner.account(&l.node, l.bytes, true);
        let old = inner
            .by_node
            .entry(l.node.clone())
            .or_default()
            .insert(l.id.clone(), l.clone());
        if let Some(old) = &old {
            inner.account(&old.node, old.bytes, false);
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
}

impl Registry {
    /// Removes the listener `id` of `node`.
    pub(crate) fn remove(&self, node: &str, id: &str) -> Option<Arc<Listener>> {
        let mut inner = self.write();
        let gone = inner.by_node.get_mut(node)?.remove(id)?;
        inner.account(node, gone.bytes, false);
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

    /// Listener `id` of `node`, if it holds one.
    pub(crate) fn get(&self, node: &str, id: &str) -> Option<Arc<Listener>> {
        self.read().by_node.get(node)?.get(id).cloned()
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
        self.read().count
    }

    /// Bytes the listeners cost in all ([`Listener::bytes`]).
    pub(crate) fn bytes(&self) -> usize {
        self.read().bytes
    }
}
