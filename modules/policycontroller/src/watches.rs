//! The watch task: keeps the caches current and turns each change into the keys it affects;
//! and the worker that reconciles them one at a time (as KubeEdge).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use beehive::Backoff;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::EDGE_NODE_LABEL;
use kubeedge_api::policy::ServiceAccountAccess;
use kubeedge_api::watch::{Change, events, key_of};
use tracing::{debug, warn};

use crate::caches::{Caches, Writers};
use crate::queue::Queue;
use crate::reconcile::{Reconciler, pod_account};

/// First and longest wait before a key whose reconcile failed is tried again.
const RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(300));

fn all<K>(
    client: &kube::Client,
    config: watcher::Config,
) -> impl Stream<Item = Event<K>> + Send + Unpin
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    events(Api::<K>::all(client.clone()), config).boxed()
}

/// Keys of the ServiceAccountAccesses of `namespace` (every namespace when `None`).
fn accesses_in(caches: &Caches, namespace: Option<&str>) -> Vec<String> {
    caches
        .accesses
        .filter(|a| namespace.is_none() || a.metadata.namespace.as_deref() == namespace)
        .iter()
        .map(|a| key_of(&**a))
        .collect()
}

/// Keys for a service account: its own name, and hand-made accesses naming it.
fn accesses_of_account(caches: &Caches, namespace: &str, name: &str) -> Vec<String> {
    let mut keys = vec![format!("{namespace}/{name}")];
    keys.extend(
        caches
            .accesses
            .filter(|a| {
                a.metadata.namespace.as_deref() == Some(namespace)
                    && a.spec.service_account.metadata.name == name
            })
            .iter()
            .map(|a| key_of(&**a)),
    );
    keys
}

fn olds_and_news<K>(changes: Vec<Change<K>>) -> Vec<Arc<K>> {
    changes
        .into_iter()
        .flat_map(|c| match c {
            Change::Added(k) | Change::Deleted(k) => vec![k],
            Change::Modified { old, new } => vec![old, new],
        })
        .collect()
}

/// Runs the watches until `stop`.
pub(crate) async fn run(
    client: kube::Client,
    mut w: Writers,
    caches: Caches,
    queue: Arc<Queue>,
    stop: CancellationToken,
) {
    let c = &client;
    let mut accesses = all::<ServiceAccountAccess>(c, watcher::Config::default());
    let mut accounts = all::<ServiceAccount>(c, watcher::Config::default());
    // Only scheduled pods: the node decides whether a pod counts.
    let mut pods = all::<Pod>(c, watcher::Config::default().fields("spec.nodeName!="));
    let mut nodes =
        all::<PartialObjectMeta<Node>>(c, watcher::Config::default().labels(EDGE_NODE_LABEL));
    let mut roles = all::<Role>(c, watcher::Config::default());
    let mut cluster_roles = all::<ClusterRole>(c, watcher::Config::default());
    let mut bindings = all::<RoleBinding>(c, watcher::Config::default());
    let mut cluster_bindings = all::<ClusterRoleBinding>(c, watcher::Config::default());
    let mut was_ready = false;
    loop {
        let keys: Vec<String> = tokio::select! {
            () = stop.cancelled() => return,
            Some(e) = accesses.next() => w.accesses.apply(e).iter().map(|ch| key_of(&**ch.object())).collect(),
            Some(e) = accounts.next() => olds_and_news(w.accounts.apply(e))
                .iter()
                .flat_map(|sa| accesses_of_account(&caches, &sa.namespace().unwrap_or_default(), &sa.name_any()))
                .collect(),
            Some(e) = pods.next() => olds_and_news(w.pods.apply(e))
                .iter()
                .filter_map(|p| pod_account(p))
                .map(|(ns, sa)| format!("{ns}/{sa}"))
                .collect(),
            Some(e) = nodes.next() => {
                let changed: Vec<String> = olds_and_news(w.nodes.apply(e)).iter().map(|n| n.name_any()).collect();
                caches
                    .pods
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| changed.contains(n)))
                    .iter()
                    .filter_map(|p| pod_account(p))
                    .map(|(ns, sa)| format!("{ns}/{sa}"))
                    .collect()
            }
            Some(e) = roles.next() => olds_and_news(w.roles.apply(e))
                .iter()
                .flat_map(|r| accesses_in(&caches, r.namespace().as_deref()))
                .collect(),
            Some(e) = bindings.next() => olds_and_news(w.bindings.apply(e))
                .iter()
                .flat_map(|b| accesses_in(&caches, b.namespace().as_deref()))
                .collect(),
            Some(e) = cluster_roles.next() => {
                w.cluster_roles.apply(e).is_empty().then(Vec::new).unwrap_or_else(|| accesses_in(&caches, None))
            }
            Some(e) = cluster_bindings.next() => {
                w.cluster_bindings.apply(e).is_empty().then(Vec::new).unwrap_or_else(|| accesses_in(&caches, None))
            }
        };
        if !caches.ready() {
            continue;
        }
        if !was_ready {
            was_ready = true;
            // Everything once: what changed while the controller was away.
            let mut all = accesses_in(&caches, None);
            all.extend(
                caches
                    .pods
                    .list()
                    .iter()
                    .filter(|p| {
                        p.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_some_and(|n| caches.nodes.contains(n))
                    })
                    .filter_map(|p| pod_account(p))
                    .map(|(ns, sa)| format!("{ns}/{sa}")),
            );
            debug!(
                keys = all.len(),
                "caches listed: reconciling everything once"
            );
            for key in all {
                queue.push(key);
            }
        }
        for key in keys {
            queue.push(key);
        }
    }
}

/// Reconciles queued keys one at a time until `stop`; a failed key is tried again after a
/// back-off (500 ms doubling to 5 min).
pub(crate) async fn work(reconciler: Reconciler, queue: Arc<Queue>, stop: CancellationToken) {
    tokio::select! {
        () = reconciler.caches.wait_ready() => {}
        () = stop.cancelled() => return,
    }
    let mut failures: HashMap<String, u32> = HashMap::new();
    loop {
        let key = tokio::select! {
            key = queue.pop() => key,
            () = stop.cancelled() => return,
        };
        match reconciler.reconcile(&key).await {
            Ok(()) => {
                failures.remove(&key);
                reconciler.metrics.reconciled(true);
            }
            Err(error) => {
                reconciler.metrics.reconciled(false);
                let n = failures.entry(key.clone()).or_default();
                *n = n.saturating_add(1);
                let wait = RETRY.delay(*n);
                warn!(key, %error, retry_in = ?wait, "service account access not reconciled");
                let (queue, stop) = (queue.clone(), stop.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => queue.push(key),
                        () = stop.cancelled() => {}
                    }
                });
            }
        }
    }
}
