//! Kubernetes → edge: watches and the messages they produce (docs/controllers.md).
//!
//! One task owns every watch and processes their events one at a time, so the edge-node set,
//! the pod cache and the location cache change in a single order. Start-up is ordered by cache
//! barriers: the edge-node watch lists first; the pod watch starts once the
//! edge-node set is complete; ConfigMaps, Secrets and (with a router) Rules start once the pods
//! have listed, so the location cache is complete before their events are routed.
//!
//! # Which pods are watched
//! Pods are watched with the field selector `spec.nodeName!=` (the API server drops unscheduled
//! pods), and every pod not bound to an edge node is dropped in process before anything about it is
//! kept (memory follows the edge fleet, not the cluster). One watch per edge node
//! (`spec.nodeName=<node>`) would filter fully server-side, but means thousands of long-lived
//! watches for a large fleet, and a label selector cannot express "bound to an edge node"; a single
//! watch plus the in-process filter keeps memory proportional to the edge fleet at the cost of
//! streaming other pods' changes. When a node joins the edge set later, its pods are listed with
//! `spec.nodeName=<node>` and sent.
//!
//! # Recovery
//! The watches relist after a lost watch (`410 Gone`); [`kubeedge_api::watch::CacheWriter`]
//! reports only objects that changed meanwhile, so a relist sends only real changes (cloudhub's
//! per-object resource-version check is the backstop against duplicates).

mod configmaps;
mod locations;
mod nodes;
mod pods;
mod rules;

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher::{self, Event};
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::EDGE_NODE_LABEL;
use kubeedge_api::rules::{Rule, RuleEndpoint};
use kubeedge_api::watch::{self, Cache, CacheWriter};
use tracing::{info, warn};

use crate::outbox::Outbox;

pub(crate) use locations::{
    MIRROR_POD_ANNOTATION, ObjectRef, RefKind, SharedLocations, bound_node, granted, references,
};

/// Read access to what the downstream task maintains, for the upstream handlers.
#[derive(Debug, Clone)]
pub(crate) struct Readers {
    pub(crate) nodes: Cache<Node>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) configmaps: Cache<ConfigMap>,
    pub(crate) secrets: Cache<Secret>,
    pub(crate) locations: SharedLocations,
}

/// Settings of the downstream task.
#[derive(Debug, Clone)]
pub(crate) struct DownstreamOptions {
    /// Watch Rules and RuleEndpoints (a router module is registered).
    pub(crate) router: bool,
    /// Server-side timeout of each watch request (kube's default when `None`).
    pub(crate) watch_timeout: Option<Duration>,
}

/// The downstream task's state.
pub(crate) struct Downstream {
    client: kube::Client,
    out: Outbox,
    options: DownstreamOptions,
    nodes: CacheWriter<Node>,
    pods: CacheWriter<Pod>,
    configmaps: CacheWriter<ConfigMap>,
    secrets: CacheWriter<Secret>,
    rules: CacheWriter<Rule>,
    endpoints: CacheWriter<RuleEndpoint>,
    locations: SharedLocations,
    /// The pod watch runs: nodes joining the edge set later get their pods listed.
    pods_started: bool,
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

type Events<K> = BoxStream<'static, Event<K>>;

async fn next<K>(stream: &mut Option<Events<K>>) -> Option<Event<K>> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

impl Downstream {
    /// The task state and the readers of its caches.
    pub(crate) fn new(client: kube::Client, out: Outbox) -> (Downstream, Readers) {
        let (nodes, nodes_r) = watch::cache();
        let (pods, pods_r) = watch::cache();
        let (configmaps, configmaps_r) = watch::cache();
        let (secrets, secrets_r) = watch::cache();
        let locations = SharedLocations::default();
        let readers = Readers {
            nodes: nodes_r,
            pods: pods_r,
            configmaps: configmaps_r,
            secrets: secrets_r,
            locations: locations.clone(),
        };
        let d = Downstream {
            client,
            out,
            options: DownstreamOptions {
                router: false,
                watch_timeout: None,
            },
            nodes,
            pods,
            configmaps,
            secrets,
            rules: watch::cache().0,
            endpoints: watch::cache().0,
            locations,
            pods_started: false,
        };
        (d, readers)
    }

    fn watch_config(&self) -> watcher::Config {
        let mut c = watcher::Config::default();
        if let Some(t) = self.options.watch_timeout {
            c = c.timeout(t.as_secs().clamp(1, u64::from(u32::MAX)) as u32);
        }
        c
    }

    /// Runs until `stop`.
    pub(crate) async fn run(mut self, options: DownstreamOptions, stop: CancellationToken) {
        self.options = options;
        let edge = format!("{EDGE_NODE_LABEL}=");
        let mut nodes: Option<Events<Node>> = Some(
            watch::events(
                Api::all(self.client.clone()),
                self.watch_config().labels(&edge),
            )
            .boxed(),
        );
        let mut pods: Option<Events<Pod>> = None;
        let mut configmaps: Option<Events<ConfigMap>> = None;
        let mut secrets: Option<Events<Secret>> = None;
        let mut rules: Option<Events<Rule>> = None;
        let mut endpoints: Option<Events<RuleEndpoint>> = None;
        let mut rest_started = false;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(e) = next(&mut nodes) => self.on_node_event(e).await,
                Some(e) = next(&mut pods) => self.on_pod_event(e).await,
                Some(e) = next(&mut configmaps) => self.on_configmap_event(e).await,
                Some(e) = next(&mut secrets) => self.on_secret_event(e).await,
                Some(e) = next(&mut rules) => self.on_rule_event(e).await,
                Some(e) = next(&mut endpoints) => self.on_endpoint_event(e).await,
            }
            if pods.is_none() && self.nodes.reader().is_ready() {
                info!(
                    edge_nodes = self.nodes.reader().len(),
                    "edge nodes listed, watching pods"
                );
                let config = self.watch_config().fields("spec.nodeName!=");
                pods = Some(watch::events(Api::all(self.client.clone()), config).boxed());
                self.pods_started = true;
            }
            if !rest_started && self.pods.reader().is_ready() {
                rest_started = true;
                info!(
                    edge_pods = self.pods.reader().len(),
                    "pods listed, watching configmaps and secrets"
                );
                configmaps =
                    Some(watch::events(Api::all(self.client.clone()), self.watch_config()).boxed());
                secrets =
                    Some(watch::events(Api::all(self.client.clone()), self.watch_config()).boxed());
                if self.options.router && self.rules_installed().await {
                    rules = Some(
                        watch::events(Api::all(self.client.clone()), self.watch_config()).boxed(),
                    );
                    endpoints = Some(
                        watch::events(Api::all(self.client.clone()), self.watch_config()).boxed(),
                    );
                }
            }
        }
        info!("downstream stopped");
    }

    /// Whether the router CRDs are served; only a clear `404` counts as "not installed"
    /// (other errors leave it to the watch's retries).
    async fn rules_installed(&self) -> bool {
        let lp = ListParams::default().limit(1);
        match Api::<Rule>::all(self.client.clone()).list(&lp).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                info!("the rules.kubeedge.io CRDs are not installed: not watching rules");
                false
            }
            Err(error) => {
                warn!(%error, "cannot check the rules.kubeedge.io CRDs; watching anyway");
                true
            }
        }
    }
}
