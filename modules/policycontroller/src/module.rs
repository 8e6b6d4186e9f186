//! The `policycontroller` beehive module.

use std::sync::Arc;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::POLICYCONTROLLER;
use tracing::{debug, info};

use crate::caches::{self, Caches, Writers};
use crate::metrics::PolicyControllerMetrics;
use crate::queue::Queue;
use crate::reconcile::Reconciler;

/// KubeEdge's policycontroller (`featureGates.requireAuthorization`): for every service account
/// that pods on edge nodes run as, a ServiceAccountAccess `<namespace>/<account>` holding the
/// account and every RoleBinding and ClusterRoleBinding that applies to it with its role's
/// rules; sent (`insert`, `update`, `delete`, source `policycontroller`) to exactly the edge
/// nodes that run such pods, which authorize the account's tokens with it offline.
///
/// * Reads come from watch caches, and nothing is reconciled before every cache has listed.
/// * Bindings whose role does not exist are left out (as Kubernetes RBAC ignores them).
/// * The object sent has `apiVersion`/`kind` and an empty status; cloudhub delivers it with
///   acknowledgements and an ObjectSync record, so the sync loop re-sends it to a node that
///   missed it.
/// * An access no edge node needs any more (its pods gone, or its account deleted) is deleted
///   and the nodes that held it are told.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// let bus = beehive::Bus::new();
/// let pc = policycontroller::PolicyController::new(bus.endpoint("policycontroller"), client);
/// bus.register(pc).unwrap();
/// bus.start().unwrap();
/// # }
/// ```
pub struct PolicyController {
    client: kube::Client,
    endpoint: Endpoint,
    writers: Option<Writers>,
    caches: Caches,
    queue: Arc<Queue>,
    metrics: PolicyControllerMetrics,
    life: Lifecycle,
}

impl std::fmt::Debug for PolicyController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyController").finish_non_exhaustive()
    }
}

impl PolicyController {
    /// A controller sending with `endpoint` and working with `client` (which needs
    /// ServiceAccountAccesses list/watch/create/update/delete and `/status` update;
    /// ServiceAccounts, Pods, Nodes, Roles, ClusterRoles, RoleBindings and ClusterRoleBindings
    /// list/watch).
    pub fn new(endpoint: Endpoint, client: kube::Client) -> Self {
        let (writers, caches) = caches::new();
        PolicyController {
            client,
            endpoint,
            writers: Some(writers),
            caches,
            queue: Arc::default(),
            metrics: PolicyControllerMetrics::new(),
            life: Lifecycle::new(),
        }
    }

    /// Its counters.
    pub fn metrics(&self) -> PolicyControllerMetrics {
        self.metrics.clone()
    }

    /// Its tasks: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for them.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }

    /// Resolves once every cache has listed (reconciling starts then).
    pub fn synced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let caches = self.caches.clone();
        async move { caches.wait_ready().await }
    }
}

impl Actor for PolicyController {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let Some(writers) = self.writers.take() else {
            return;
        };
        let stop = self.life.token().clone();
        self.life.spawn(crate::watches::run(
            self.client.clone(),
            writers,
            self.caches.clone(),
            self.queue.clone(),
            stop.clone(),
        ));
        let reconciler = Reconciler {
            client: self.client.clone(),
            caches: self.caches.clone(),
            endpoint: self.endpoint.clone(),
            metrics: self.metrics.clone(),
            sent: Default::default(),
        };
        self.life
            .spawn(crate::watches::work(reconciler, self.queue.clone(), stop));
        info!("policycontroller started");
    }
}

impl Handler<Message> for PolicyController {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        debug!(msg = %msg, "policycontroller takes no messages: dropped");
    }
}

impl Module for PolicyController {
    fn name(&self) -> &str {
        POLICYCONTROLLER
    }

    fn group(&self) -> &str {
        POLICYCONTROLLER
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
    }
}
