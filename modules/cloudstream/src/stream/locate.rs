//! Which node a pod runs on: a reflector cache of pods (upstream does one live GET per
//! request), with a live GET when the cache does not know the pod yet.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

/// Errors finding a pod's node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocateError {
    /// No such pod.
    #[error("pod {namespace}/{pod} not found")]
    NotFound {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
    },
    /// The pod exists but is not bound to a node yet.
    #[error("pod {namespace}/{pod} is not scheduled to a node")]
    Unscheduled {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
    },
    /// The API server could not be asked (upstream: `can not get kube client`).
    #[error("cannot look up pods: {0}")]
    Unavailable(String),
}

/// Finds the node of a pod. Implementations must be cheap to call per request.
pub trait PodLocator: Send + Sync + fmt::Debug {
    /// The `spec.nodeName` of `namespace/pod`.
    fn node_of<'a>(
        &'a self,
        namespace: &'a str,
        pod: &'a str,
    ) -> BoxFuture<'a, Result<String, LocateError>>;
}

fn node_of_pod(namespace: &str, name: &str, pod: &Pod) -> Result<String, LocateError> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| LocateError::Unscheduled {
            namespace: namespace.to_owned(),
            pod: name.to_owned(),
        })
}

/// Pods from the API server, cached by a reflector that keeps only names and node names.
#[derive(Clone)]
pub struct KubePodLocator {
    client: kube::Client,
    store: Store<Pod>,
}

impl fmt::Debug for KubePodLocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubePodLocator")
            .field("cached", &self.store.len())
            .finish_non_exhaustive()
    }
}

impl KubePodLocator {
    /// Starts the pod reflector on `tasks` (on the current tokio runtime); it runs until
    /// `stop` is cancelled. Lookups work at once (a miss falls back to a GET).
    pub fn start(client: kube::Client, stop: CancellationToken, tasks: &TaskTracker) -> Self {
        let api: Api<Pod> = Api::all(client.clone());
        let (store, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|pod| {
                // Keep only what routing needs: a cluster's pods can be many.
                let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                pod.spec = Some(PodSpec {
                    node_name,
                    ..PodSpec::default()
                });
                pod.status = None;
                pod.metadata.managed_fields = None;
                pod.metadata.annotations = None;
                pod.metadata.labels = None;
                pod.metadata.owner_references = None;
            });
        let reflect = reflector::reflector(writer, stream).for_each(|ev| async move {
            if let Err(e) = ev {
                warn!(error = %e, "pod watch error (retrying)");
            }
        });
        tasks.spawn(async move {
            stop.run_until_cancelled(reflect).await;
        });
        KubePodLocator { client, store }
    }

    /// The client this locator asks.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}

impl PodLocator for KubePodLocator {
    fn node_of<'a>(
        &'a self,
        namespace: &'a str,
        pod: &'a str,
    ) -> BoxFuture<'a, Result<String, LocateError>> {
        Box::pin(async move {
            if let Some(cached) = self.store.get(&ObjectRef::new(pod).within(namespace))
                && let Ok(node) = node_of_pod(namespace, pod, &cached)
            {
                return Ok(node);
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            match api.get_opt(pod).await {
                Ok(Some(p)) => node_of_pod(namespace, pod, &p),
                Ok(None) => Err(LocateError::NotFound {
                    namespace: namespace.to_owned(),
                    pod: pod.to_owned(),
                }),
                Err(e) => Err(LocateError::Unavailable(e.to_string())),
            }
        })
    }
}

/// Pods placed by hand (tests, tools, or a cloudcore run without a cluster).
#[derive(Debug, Default, Clone)]
pub struct StaticPods {
    pods: Arc<RwLock<HashMap<(String, String), String>>>,
}

impl StaticPods {
    /// An empty set.
    pub fn new() -> Self {
        StaticPods::default()
    }

    /// Places `namespace/pod` on `node` (replacing any earlier placement).
    pub fn place(&self, namespace: &str, pod: &str, node: &str) {
        self.pods
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.to_owned(), pod.to_owned()), node.to_owned());
    }
}

impl PodLocator for StaticPods {
    fn node_of<'a>(
        &'a self,
        namespace: &'a str,
        pod: &'a str,
    ) -> BoxFuture<'a, Result<String, LocateError>> {
        let found = self
            .pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_owned(), pod.to_owned()))
            .cloned();
        Box::pin(async move {
            found.ok_or_else(|| LocateError::NotFound {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
            })
        })
    }
}
