//! Watch bookkeeping shared by the controllers: a keyed object cache fed by a `kube` watcher,
//! which turns watcher events into changes *relative to what was known before*.
//!
//! # Recovery
//! After a lost watch (`410 Gone`, resource version too old) `kube`'s watcher relists:
//! `Init`, one `InitApply` per object, `InitDone`. [`CacheWriter::apply`] compares each listed
//! object with the cached one and reports only what differs (new, changed resource version,
//! or missing from the list = deleted), so a relist does not re-announce every object. The very
//! first list finds an empty cache and reports everything as [`Change::Added`].
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::runtime::watcher::Event;
//! use kubeedge_api::watch::{self, Change};
//!
//! let (mut writer, cache) = watch::cache::<ConfigMap>();
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("cfg".into());
//! cm.metadata.namespace = Some("default".into());
//! cm.metadata.resource_version = Some("7".into());
//! for event in [Event::Init, Event::InitApply(cm.clone()), Event::InitDone] {
//!     writer.apply(event);
//! }
//! assert!(cache.is_ready());
//! // The relist after a lost watch returns the same object: nothing to report.
//! let changes: Vec<_> = [Event::Init, Event::InitApply(cm), Event::InitDone]
//!     .into_iter()
//!     .flat_map(|e| writer.apply(e))
//!     .collect();
//! assert!(changes.is_empty());
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// What happened to one object, relative to the cache.
#[derive(Debug)]
pub enum Change<K> {
    /// Not cached before.
    Added(Arc<K>),
    /// Cached before with another resource version.
    Modified {
        /// The cached object before the change.
        old: Arc<K>,
        /// The object now.
        new: Arc<K>,
    },
    /// Removed (watch delete, missing from a relist, or removed by the owner).
    Deleted(Arc<K>),
}

impl<K> Change<K> {
    /// The object after the change (the last known state for a delete).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Added(k) | Change::Deleted(k) => k,
            Change::Modified { new, .. } => new,
        }
    }
}

/// The cache key of an object: `<namespace>/<name>`, or `<name>` for cluster-scoped objects
/// (client-go's `MetaNamespaceKeyFunc`).
pub fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    key(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// The cache key for a namespace (empty or `None` = cluster-scoped) and a name.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

struct Shared<K> {
    objects: RwLock<HashMap<String, Arc<K>>>,
    ready: tokio::sync::watch::Sender<bool>,
}

/// Read access to a cache. Cheap to clone; objects are shared `Arc`s: clone one before
/// changing anything in it (never mutate cached objects in place).
pub struct Cache<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Cache {
            shared: self.shared.clone(),
        }
    }
}

impl<K> fmt::Debug for Cache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("len", &self.len())
            .field("ready", &self.is_ready())
            .finish()
    }
}

/// The single writer of a cache, owned by the task that consumes the watch stream.
pub struct CacheWriter<K> {
    shared: Arc<Shared<K>>,
    /// Keys seen since the last `Init`, while a (re)list is in progress.
    relisting: Option<HashSet<String>>,
}

impl<K> fmt::Debug for CacheWriter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheWriter")
            .field("relisting", &self.relisting.is_some())
            .finish()
    }
}

/// A new empty cache: its writer and a reader.
pub fn cache<K>() -> (CacheWriter<K>, Cache<K>) {
    let shared = Arc::new(Shared {
        objects: RwLock::new(HashMap::new()),
        ready: tokio::sync::watch::channel(false).0,
    });
    (
        CacheWriter {
            shared: shared.clone(),
            relisting: None,
        },
        Cache { shared },
    )
}

impl<K> Cache<K> {
    /// The object under `key` (see [`key`]).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().get(key).cloned()
    }

    /// The object `namespace/name` (`None` or empty namespace: cluster-scoped).
    pub fn get_by(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.get(&key(namespace, name))
    }

    /// Every cached object (a snapshot).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().values().cloned().collect()
    }

    /// Cached objects matching `pred` (a snapshot).
    pub fn filter(&self, pred: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.read().values().filter(|k| pred(k)).cloned().collect()
    }

    /// Whether the key is cached.
    pub fn contains(&self, key: &str) -> bool {
        self.read().contains_key(key)
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the first complete list has been applied.
    pub fn is_ready(&self) -> bool {
        *self.shared.ready.borrow()
    }

    /// Waits until the first complete list has been applied.
    pub async fn wait_ready(&self) {
        let mut rx = self.shared.ready.subscribe();
        // The sender lives in `shared`, which `self` keeps alive: this cannot fail.
        let _ = rx.wait_for(|ready| *ready).await;
    }

    /// Waits at most `timeout` for the first complete list; returns whether it is ready.
    pub async fn wait_ready_for(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.wait_ready())
            .await
            .is_ok()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<K>>> {
        self.shared
            .objects
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: Resource> CacheWriter<K> {
    /// A reader of this cache.
    pub fn reader(&self) -> Cache<K> {
        Cache {
            shared: self.shared.clone(),
        }
    }

    /// Applies one watcher event and returns what changed (see the module docs).
    pub fn apply(&mut self, event: Event<K>) -> Vec<Change<K>> {
        match event {
            Event::Apply(obj) => self.upsert(obj).into_iter().collect(),
            // The delete event carries the final state (last resource version): report that.
            Event::Delete(obj) => match self.write().remove(&key_of(&obj)) {
                Some(_) => vec![Change::Deleted(Arc::new(obj))],
                None => Vec::new(),
            },
            Event::Init => {
                self.relisting = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(obj) => {
                let k = key_of(&obj);
                if let Some(seen) = self.relisting.as_mut() {
                    seen.insert(k);
                }
                self.upsert(obj).into_iter().collect()
            }
            Event::InitDone => {
                let changes = match self.relisting.take() {
                    Some(seen) => {
                        let gone: Vec<String> = self
                            .write()
                            .keys()
                            .filter(|k| !seen.contains(*k))
                            .cloned()
                            .collect();
                        gone.iter().filter_map(|k| self.remove(k)).collect()
                    }
                    None => Vec::new(),
                };
                self.mark_ready();
                changes
            }
        }
    }

    /// Stores `obj`. `None` when the cached copy has the same resource version (nothing
    /// changed), else [`Change::Added`] or [`Change::Modified`].
    pub fn upsert(&mut self, obj: K) -> Option<Change<K>> {
        let k = key_of(&obj);
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(k.clone());
        }
        let new = Arc::new(obj);
        let old = self.write().insert(k, new.clone());
        match old {
            None => Some(Change::Added(new)),
            Some(old) if same_version(&*old, &*new) => None,
            Some(old) => Some(Change::Modified { old, new }),
        }
    }

    /// Removes the object under `key`; [`Change::Deleted`] with the last known copy when it
    /// was cached.
    pub fn remove(&mut self, key: &str) -> Option<Change<K>> {
        self.write().remove(key).map(Change::Deleted)
    }

    /// Removes every object matching `pred`, returning them as deletions.
    pub fn remove_where(&mut self, pred: impl Fn(&K) -> bool) -> Vec<Change<K>> {
        let mut objects = self.write();
        let keys: Vec<String> = objects
            .iter()
            .filter(|(_, v)| pred(v))
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter()
            .filter_map(|k| objects.remove(k))
            .map(Change::Deleted)
            .collect()
    }

    /// Marks the cache ready (done by the first `InitDone`).
    pub fn mark_ready(&self) {
        self.shared.ready.send_replace(true);
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<K>>> {
        self.shared
            .objects
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }
}

fn same_version<K: Resource>(a: &K, b: &K) -> bool {
    match (&a.meta().resource_version, &b.meta().resource_version) {
        (Some(x), Some(y)) => x == y && a.meta().uid == b.meta().uid,
        _ => false,
    }
}

/// The watch stream of `api` with `config`, restarted with kube's default back-off after
/// errors (which are logged, not returned): the stream never ends on its own.
///
/// Objects arrive without `metadata.managedFields`: nothing here reads field ownership, and it
/// is often the largest part of a cached object (a Node written by its edge, by cloudcore and
/// by several replicas carries one entry per writer). Read an object from the API server when
/// its field ownership matters.
pub fn events<K>(api: kube::Api<K>, config: watcher::Config) -> impl Stream<Item = Event<K>> + Send
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    labelled_events(api, config, kind)
}

/// [`events`] for types without a static kind (`DynamicObject`): `kind` labels the logs.
/// Objects arrive without `metadata.managedFields`, as from [`events`].
pub fn labelled_events<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    kind: String,
) -> impl Stream<Item = Event<K>> + Send
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config)
        .default_backoff()
        .modify(|object| object.meta_mut().managed_fields = None)
        .filter_map(move |item| {
            let out = match item {
                Ok(event) => Some(event),
                Err(error) => {
                    tracing::warn!(kind = %kind, %error, "watch failed, retrying with back-off");
                    None
                }
            };
            std::future::ready(out)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(rv.into());
        c
    }

    fn names(changes: &[Change<ConfigMap>]) -> Vec<String> {
        changes
            .iter()
            .map(|c| {
                let kind = match c {
                    Change::Added(_) => "added",
                    Change::Modified { .. } => "modified",
                    Change::Deleted(_) => "deleted",
                };
                format!(
                    "{kind} {}",
                    c.object().metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }

    fn run(w: &mut CacheWriter<ConfigMap>, events: Vec<Event<ConfigMap>>) -> Vec<String> {
        let changes: Vec<_> = events.into_iter().flat_map(|e| w.apply(e)).collect();
        names(&changes)
    }

    #[test]
    fn the_first_list_reports_everything_as_added_and_marks_ready() {
        let (mut w, r) = cache();
        assert!(!r.is_ready());
        let got = run(
            &mut w,
            vec![Event::Init, Event::InitApply(cm("a", "1")), Event::InitDone],
        );
        assert_eq!(got, ["added a"]);
        assert!(r.is_ready());
        assert_eq!(
            r.get("ns/a").unwrap().metadata.resource_version.as_deref(),
            Some("1")
        );
    }

    #[test]
    fn a_relist_reports_only_what_changed_while_the_watch_was_lost() {
        let (mut w, r) = cache();
        run(
            &mut w,
            vec![
                Event::Init,
                Event::InitApply(cm("same", "1")),
                Event::InitApply(cm("changed", "2")),
                Event::InitApply(cm("gone", "3")),
                Event::InitDone,
            ],
        );
        let mut got = run(
            &mut w,
            vec![
                Event::Init,
                Event::InitApply(cm("same", "1")),
                Event::InitApply(cm("changed", "9")),
                Event::InitApply(cm("new", "10")),
                Event::InitDone,
            ],
        );
        got.sort();
        assert_eq!(got, ["added new", "deleted gone", "modified changed"]);
        assert_eq!(r.len(), 3);
        assert!(r.get("ns/gone").is_none());
    }

    #[test]
    fn watch_events_update_and_delete_only_cached_objects() {
        let (mut w, _r) = cache();
        assert_eq!(run(&mut w, vec![Event::Apply(cm("a", "1"))]), ["added a"]);
        assert_eq!(
            run(&mut w, vec![Event::Apply(cm("a", "2"))]),
            ["modified a"]
        );
        assert_eq!(
            run(&mut w, vec![Event::Apply(cm("a", "2"))]),
            Vec::<String>::new()
        );
        assert_eq!(
            run(&mut w, vec![Event::Delete(cm("a", "3"))]),
            ["deleted a"]
        );
        assert_eq!(
            run(&mut w, vec![Event::Delete(cm("b", "3"))]),
            Vec::<String>::new()
        );
    }

    #[tokio::test]
    async fn readers_wait_for_the_first_list() {
        let (mut w, r) = cache::<ConfigMap>();
        assert!(!r.wait_ready_for(Duration::from_millis(10)).await);
        let waiter = tokio::spawn({
            let r = r.clone();
            async move { r.wait_ready().await }
        });
        w.apply(Event::Init);
        w.apply(Event::InitDone);
        waiter.await.unwrap();
        assert!(r.wait_ready_for(Duration::from_millis(10)).await);
    }
}
