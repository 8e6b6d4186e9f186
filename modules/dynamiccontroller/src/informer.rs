//! One shared watch cache per resource type edges watch, however many nodes watch it: the API
//! server sees one watch per type, never one per node.
//!
//! A cache starts on its first user, reports every change on one channel (in the order the
//! API server reported them for that type), and stops a while after its last user left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::TypeMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kubeedge_api::status::StatusError;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::discovery::ResourceInfo;

/// A change of one cached object.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    Added(Arc<DynamicObject>),
    Modified {
        old: Arc<DynamicObject>,
        new: Arc<DynamicObject>,
    },
    Deleted(Arc<DynamicObject>),
}

/// A change and the type it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct TypeChange {
    pub info: Arc<ResourceInfo>,
    pub change: Change,
}

/// `<apiVersion>/<plural>`: one cache per key.
pub(crate) fn type_key(info: &ResourceInfo) -> String {
    format!("{}/{}", info.resource.api_version, info.resource.plural)
}

fn object_key(obj: &DynamicObject) -> String {
    match &obj.metadata.namespace {
        Some(ns) => format!("{ns}/{}", obj.metadata.name.as_deref().unwrap_or("")),
        None => obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// The cache of one resource type.
pub(crate) struct Informer {
    pub info: Arc<ResourceInfo>,
    store: RwLock<HashMap<String, Arc<DynamicObject>>>,
    ready: watch::Sender<bool>,
    last_error: Mutex<Option<StatusError>>,
    /// Woken when a list fails for good (403, 404): waiters answer at once.
    refused: tokio::sync::Notify,
    users: AtomicUsize,
    idle_since: Mutex<Option<Instant>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("type", &type_key(&self.info))
            .field("users", &self.users.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Informer {
    /// The last list error when it is final (cloudcore may not list the type, or it is gone).
    fn refusal(&self) -> Option<StatusError> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|e| matches!(e.code(), 403 | 404))
    }

    /// Waits until the first list completed, at most `timeout`; a list the API server refuses
    /// (`403`, `404`) is answered at once, so a waiter never holds its turn for a type
    /// cloudcore cannot list. On timeout the error is the API server's last answer to the
    /// list, else `504`.
    pub(crate) async fn wait_ready(&self, timeout: Duration) -> Result<(), StatusError> {
        let mut rx = self.ready.subscribe();
        let refused = self.refused.notified();
        if !self.is_ready()
            && let Some(e) = self.refusal()
        {
            return Err(e);
        }
        let ready = tokio::select! {
            r = tokio::time::timeout(timeout, rx.wait_for(|r| *r)) => r.is_ok_and(|r| r.is_ok()),
            () = refused => self.is_ready(),
        };
        if ready {
            return Ok(());
        }
        let last = self
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Err(last.unwrap_or_else(|| {
            StatusError::new(
                504,
                "Timeout",
                format!(
                    "the watch cache of {} did not complete its first list within {}s",
                    type_key(&self.info),
                    timeout.as_secs()
                ),
            )
        }))
    }

    /// True once the first list completed.
    pub(crate) fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Every cached object.
    pub(crate) fn list(&self) -> Vec<Arc<DynamicObject>> {
        self.store
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The cached object `namespace/name` (`name` for cluster-scoped types).
    pub(crate) fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        let key = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_owned(),
        };
        self.store
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned()
    }

    /// Objects cached.
    pub(crate) fn len(&self) -> usize {
        self.store.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn typed(&self, mut obj: DynamicObject) -> Arc<DynamicObject> {
        // List items come without apiVersion/kind; the edge needs both.
        obj.types = Some(TypeMeta {
            api_version: self.info.resource.api_version.clone(),
            kind: self.info.resource.kind.clone(),
        });
        Arc::new(obj)
    }

    fn upsert(&self, obj: DynamicObject) -> Change {
        let new = self.typed(obj);
        let old = self
            .store
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(object_key(&new), new.clone());
        match old {
            Some(old) => Change::Modified { old, new },
            None => Change::Added(new),
        }
    }

    fn remove(&self, obj: DynamicObject) -> Change {
        let gone = self
            .store
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&object_key(&obj));
        Change::Deleted(gone.unwrap_or_else(|| self.typed(obj)))
    }

    /// Replaces the whole store after a (re)list; the differences are the changes.
    fn replace(&self, fresh: HashMap<String, Arc<DynamicObject>>) -> Vec<Change> {
        let mut store = self.store.write().unwrap_or_else(|p| p.into_inner());
        let mut changes = Vec::new();
        for (k, old) in store.iter() {
            if !fresh.contains_key(k) {
                changes.push(Change::Deleted(old.clone()));
            }
        }
        for (k, new) in &fresh {
            match store.get(k) {
                None => changes.push(Change::Added(new.clone())),
                Some(old) if old.metadata.resource_version != new.metadata.resource_version => {
                    changes.push(Change::Modified {
                        old: old.clone(),
                        new: new.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        *store = fresh;
        changes
    }

    async fn run(self: Arc<Self>, client: kube::Client, out: mpsc::Sender<TypeChange>) {
        let api: Api<DynamicObject> = Api::all_with(client, &self.info.resource);
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut fresh: Option<HashMap<String, Arc<DynamicObject>>> = None;
        while let Some(event) = events.next().await {
            let changes = match event {
                Ok(Event::Init) => {
                    fresh = Some(HashMap::new());
                    continue;
                }
                Ok(Event::InitApply(obj)) => {
                    let obj = self.typed(obj);
                    fresh
                        .get_or_insert_with(HashMap::new)
                        .insert(object_key(&obj), obj);
                    continue;
                }
                Ok(Event::InitDone) => {
                    let mut changes = self.replace(fresh.take().unwrap_or_default());
                    if !self.is_ready() {
                        // No listener exists before the first list: each registers afterwards
                        // and is sent what it selects then.
                        changes.clear();
                    }
                    self.last_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take();
                    if !self.is_ready() {
                        info!(r#type = %type_key(&self.info), objects = self.len(), "watch cache for edges ready");
                        self.ready.send_replace(true);
                    }
                    changes
                }
                Ok(Event::Apply(obj)) => vec![self.upsert(obj)],
                Ok(Event::Delete(obj)) => vec![self.remove(obj)],
                Err(e) => {
                    let status = match &e {
                        watcher::Error::InitialListFailed(k)
                        | watcher::Error::WatchStartFailed(k) => StatusError::from_kube(k),
                        other => StatusError::internal(other.to_string()),
                    };
                    warn!(r#type = %type_key(&self.info), error = %e, "watch for edges failed; retrying");
                    let final_ = matches!(status.code(), 403 | 404);
                    *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
                    if final_ {
                        self.refused.notify_waiters();
                    }
                    continue;
                }
            };
            for change in changes {
                let tc = TypeChange {
                    info: self.info.clone(),
                    change,
                };
                if out.send(tc).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Why a type could not be watched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AcquireError {
    /// `maxInformers` types are watched already.
    #[error("{0} resource types are watched for edges already (maxInformers)")]
    Full(usize),
}

/// Every cache, by type.
pub(crate) struct Informers {
    client: kube::Client,
    out: mpsc::Sender<TypeChange>,
    max: usize,
    linger: Duration,
    map: Mutex<HashMap<String, Arc<Informer>>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("max", &self.max)
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// Caches reporting changes to `out`; at most `max` types; a cache nobody uses stops after
    /// `linger` (at once if it never completed a list).
    pub(crate) fn new(
        client: kube::Client,
        out: mpsc::Sender<TypeChange>,
        max: usize,
        linger: Duration,
    ) -> Self {
        Informers {
            client,
            out,
            max,
            linger,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The cache of `info`, started if needed, with one more user.
    pub(crate) fn acquire(&self, info: &Arc<ResourceInfo>) -> Result<Arc<Informer>, AcquireError> {
        let key = type_key(info);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = map.get(&key) {
            i.users.fetch_add(1, Ordering::Relaxed);
            i.idle_since
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            return Ok(i.clone());
        }
        if map.len() >= self.max {
            return Err(AcquireError::Full(self.max));
        }
        let informer = Arc::new(Informer {
            info: info.clone(),
            store: RwLock::new(HashMap::new()),
            ready: watch::channel(false).0,
            last_error: Mutex::new(None),
            refused: tokio::sync::Notify::new(),
            users: AtomicUsize::new(1),
            idle_since: Mutex::new(None),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(informer.clone().run(self.client.clone(), self.out.clone()));
        *informer.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        debug!(r#type = %key, "watch cache for edges started");
        map.insert(key, informer.clone());
        Ok(informer)
    }

    /// One user fewer of the cache of `info`.
    pub(crate) fn release(&self, info: &ResourceInfo) {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = map.get(&type_key(info))
            && i.users.fetch_sub(1, Ordering::Relaxed) == 1
        {
            *i.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
    }

    /// The running cache of the type with key `key` ([`type_key`]).
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Informer>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Types cached.
    pub(crate) fn count(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Stops caches idle for longer than the linger time; returns how many.
    pub(crate) fn sweep(&self) -> usize {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let before = map.len();
        map.retain(|key, i| {
            let idle = *i.idle_since.lock().unwrap_or_else(|p| p.into_inner());
            let stop = i.users.load(Ordering::Relaxed) == 0
                && idle.is_some_and(|t| !i.is_ready() || t.elapsed() >= self.linger);
            if stop {
                if let Some(task) = i.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    task.abort();
                }
                info!(r#type = %key, "watch cache for edges stopped: no listener left");
            }
            !stop
        });
        before - map.len()
    }

    /// Stops every cache.
    pub(crate) fn stop_all(&self) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for (_, i) in map.drain() {
            if let Some(task) = i.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn informer() -> Informer {
        Informer {
            info: Arc::new(ResourceInfo {
                resource: kube::core::ApiResource::erase::<
                    k8s_openapi::api::certificates::v1::CertificateSigningRequest,
                >(&()),
                namespaced: false,
                verbs: vec!["watch".into()],
            }),
            store: RwLock::new(HashMap::new()),
            ready: watch::channel(false).0,
            last_error: Mutex::new(None),
            refused: tokio::sync::Notify::new(),
            users: AtomicUsize::new(1),
            idle_since: Mutex::new(None),
            task: Mutex::new(None),
        }
    }

    #[tokio::test]
    async fn a_type_cloudcore_may_not_list_is_answered_at_once_not_after_the_timeout() {
        let i = Arc::new(informer());
        *i.last_error.lock().unwrap() = Some(StatusError::forbidden("no list for you"));
        let started = tokio::time::Instant::now();
        let e = i.wait_ready(Duration::from_secs(30)).await.unwrap_err();
        assert_eq!(e.code(), 403);
        assert!(started.elapsed() < Duration::from_secs(1));

        // Refused while a waiter already waits: it is woken.
        let i = Arc::new(informer());
        let waiter = tokio::spawn({
            let i = i.clone();
            async move { i.wait_ready(Duration::from_secs(30)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        *i.last_error.lock().unwrap() = Some(StatusError::forbidden("no list for you"));
        i.refused.notify_waiters();
        let started = tokio::time::Instant::now();
        let e = waiter.await.unwrap().unwrap_err();
        assert_eq!(e.code(), 403);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
