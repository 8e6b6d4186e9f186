//! State every request and watch of the module shares, and the few operations all of them
//! use: asking the API server, authorizing a node, sending to cloudhub.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use beehive::{Endpoint, Message};
use kube::core::ApiResource;
use kubeedge_api::access::{AccessReviewer, Attributes, CacheLimits, Decision};
use kubeedge_api::authz::Authorized;
use kubeedge_api::client::NodeClient;
use kubeedge_api::names::CLOUDHUB;
use kubeedge_api::status::StatusError;
use tracing::warn;

use crate::config::DynamicControllerConfig;
use crate::delivered::Delivered;
use crate::discovery::{Resolver, ResourceInfo};
use crate::filter::{GROUP_LABEL, Lookup, RANGE_NODEGROUP, TOPOLOGY_ANNOTATION};
use crate::informer::{Informer, Informers};
use crate::listeners::Registry;
use crate::metrics::DynamicControllerMetrics;
use crate::passthrough::{self, PassThroughCache};
use crate::persist::Persist;

/// How long one API server call may take before the edge gets `504`.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an answer that needs the Service and Node caches waits for their first list.
const LOOKUP_WAIT: Duration = Duration::from_secs(5);

/// What the module's tasks share.
pub(crate) struct Shared {
    pub config: DynamicControllerConfig,
    /// cloudcore's identity (discovery, caches, reviews).
    pub client: kube::Client,
    /// Reads made for an edge: as the node when impersonation is on.
    pub reads: NodeClient,
    /// Writes made for an edge: always as the node, so NodeRestriction admission decides
    /// them (a review cannot).
    pub writes: NodeClient,
    pub resolver: Resolver,
    /// Discovery answers, shared by every node for `passThroughCacheSeconds`.
    pub passthrough: PassThroughCache,
    pub reviewer: AccessReviewer,
    pub informers: Arc<Informers>,
    pub registry: Arc<Registry>,
    pub endpoint: Endpoint,
    pub metrics: DynamicControllerMetrics,
    pub persist: Option<Arc<Persist>>,
    /// What each node's watches delivered.
    pub delivered: Arc<Delivered>,
    /// Services and Nodes, for the node-group filter; started on first need.
    topology: OnceLock<(Arc<Informer>, Arc<Informer>)>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn core_type(kind: &str, plural: &str, namespaced: bool) -> Arc<ResourceInfo> {
    Arc::new(ResourceInfo {
        resource: ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        },
        namespaced,
        verbs: vec!["get".into(), "list".into(), "watch".into()],
    })
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: DynamicControllerConfig,
        client: kube::Client,
        impersonate: bool,
        informers: Arc<Informers>,
        registry: Arc<Registry>,
        endpoint: Endpoint,
        metrics: DynamicControllerMetrics,
        persist: Option<Arc<Persist>>,
    ) -> Self {
        Shared {
            reads: NodeClient::new(client.clone(), impersonate),
            writes: NodeClient::new(client.clone(), true),
            resolver: Resolver::new(client.clone(), config.max_discovery_entries),
            passthrough: PassThroughCache::new(
                passthrough::Limits {
                    ttl: config.pass_through_ttl(),
                    entries: config.max_pass_through_cache_entries,
                    bytes: config.max_pass_through_cache_bytes,
                },
                metrics.clone(),
            ),
            reviewer: AccessReviewer::new(
                client.clone(),
                Duration::from_secs(10),
                Duration::from_secs(5),
            )
            .with_limits(CacheLimits {
                entries: config.review_cache_entries,
                entries_per_subject: config.review_cache_entries_per_node,
                key_bytes: 4 << 10,
            }),
            delivered: Arc::new(Delivered::new(
                config.max_delivered_bytes_per_node,
                config.max_delivered_bytes,
            )),
            config,
            client,
            informers,
            registry,
            endpoint,
            metrics,
            persist,
            topology: OnceLock::new(),
        }
    }

    /// What the listener registry may hold (the `maxListener*` settings).
    pub(crate) fn listener_limits(&self) -> crate::listeners::Limits {
        let c = &self.config;
        crate::listeners::Limits {
            per_node: c.max_listeners_per_node,
            total: c.max_listeners,
            bytes_per_node: c.max_listener_bytes_per_node,
            bytes: c.max_listener_bytes,
        }
    }

    /// Decides `attrs` for `node` by a SubjectAccessReview: `403` when the cluster would
    /// refuse the node, `500` when the review cannot be made.
    pub(crate) async fn authorize(
        &self,
        node: &str,
        attrs: &Attributes,
    ) -> Result<(), StatusError> {
        match self.reviewer.review(node, attrs).await {
            Ok(Decision::Allow) => Ok(()),
            Ok(Decision::Deny(reason)) => Err(Decision::forbidden(node, attrs, &reason)),
            Err(e) => {
                warn!(node, error = %e, "subjectaccessreview failed");
                Err(StatusError::internal(format!(
                    "cannot authorize the request: {e}"
                )))
            }
        }
    }

    /// Sends `request` as decided with `client`, bounded by [`CALL_TIMEOUT`].
    pub(crate) async fn call(
        &self,
        client: &NodeClient,
        request: Authorized,
    ) -> Result<String, StatusError> {
        match tokio::time::timeout(CALL_TIMEOUT, client.send_text(request)).await {
            Ok(r) => r,
            Err(_) => Err(StatusError::new(
                504,
                "Timeout",
                format!(
                    "the API server did not answer within {}s",
                    CALL_TIMEOUT.as_secs()
                ),
            )),
        }
    }

    /// Hands `msg` to cloudhub, waiting for room; false when cloudhub is gone.
    pub(crate) async fn send(&self, msg: Message) -> bool {
        match self.endpoint.send(CLOUDHUB, msg).await {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %e, "cannot hand a message to cloudhub");
                false
            }
        }
    }

    /// The Service and Node caches the node-group filter reads, started on first use.
    pub(crate) async fn topology(&self) -> Option<TopologyLookup> {
        if self.topology.get().is_none() {
            let services = self
                .informers
                .acquire(&core_type("Service", "services", true))
                .ok()?;
            let nodes = match self.informers.acquire(&core_type("Node", "nodes", false)) {
                Ok(n) => n,
                Err(_) => {
                    self.informers.release(&services.info);
                    return None;
                }
            };
            if let Err((s, n)) = self.topology.set((services, nodes)) {
                // Another task won: give back this task's uses.
                self.informers.release(&s.info);
                self.informers.release(&n.info);
            }
        }
        let (services, nodes) = self.topology.get()?.clone();
        let _ = services.wait_ready(LOOKUP_WAIT).await;
        let _ = nodes.wait_ready(LOOKUP_WAIT).await;
        Some(TopologyLookup { services, nodes })
    }
}

/// [`Lookup`] from the Service and Node caches.
#[derive(Debug, Clone)]
pub(crate) struct TopologyLookup {
    services: Arc<Informer>,
    nodes: Arc<Informer>,
}

impl Lookup for TopologyLookup {
    fn range_nodegroup(&self, namespace: &str, name: &str) -> Option<bool> {
        let svc = self.services.get(Some(namespace), name)?;
        Some(
            svc.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TOPOLOGY_ANNOTATION))
                .is_some_and(|v| v == RANGE_NODEGROUP),
        )
    }

    fn node_group(&self, name: &str) -> Option<Option<String>> {
        let node = self.nodes.get(None, name)?;
        Some(
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(GROUP_LABEL).cloned()),
        )
    }
}
