//! The `csrapprover` beehive module: runs the approval loop while the bus runs.

use actix::{Actor, Context, Handler};
use beehive::{Message, Module};
use kubeedge_api::lifecycle::Lifecycle;
use tracing::debug;

use crate::metrics::CsrApproverMetrics;

/// The module name (KubeEdge runs the approver outside beehive; here it is a module so the bus
/// starts and stops it with the others).
pub const CSRAPPROVER: &str = kubeedge_api::names::CSRAPPROVER;

/// Approves the kubelet-serving certificate requests edge nodes' metaServers make
/// (`featureGates.requireAuthorization`), by Kubernetes' rules and the edge checks of
/// [`crate::rules`]; anything else is left pending, counted and logged.
///
/// Nothing is sent to it: it watches CertificateSigningRequests itself. A message that
/// arrives anyway is dropped.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// let bus = beehive::Bus::new();
/// let approver = csrapprover::CsrApprover::new(client);
/// bus.register(approver).unwrap();
/// bus.start().unwrap();
/// # }
/// ```
pub struct CsrApprover {
    client: kube::Client,
    metrics: CsrApproverMetrics,
    life: Lifecycle,
}

impl std::fmt::Debug for CsrApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsrApprover").finish_non_exhaustive()
    }
}

impl CsrApprover {
    /// An approver writing with `client` (which needs CSRs get/list/watch,
    /// `certificatesigningrequests/approval` update and `signers` approve on
    /// `kubernetes.io/kubelet-serving`, and Nodes get).
    pub fn new(client: kube::Client) -> Self {
        CsrApprover {
            client,
            metrics: CsrApproverMetrics::new(),
            life: Lifecycle::new(),
        }
    }

    /// Its counters.
    pub fn metrics(&self) -> CsrApproverMetrics {
        self.metrics.clone()
    }

    /// Its background task: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for it.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }
}

impl Actor for CsrApprover {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        self.life.spawn(crate::approver::run(
            self.client.clone(),
            self.metrics.clone(),
            self.life.token().clone(),
        ));
    }
}

impl Handler<Message> for CsrApprover {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        debug!(msg = %msg, "csrapprover takes no messages: dropped");
    }
}

impl Module for CsrApprover {
    fn name(&self) -> &str {
        CSRAPPROVER
    }

    fn group(&self) -> &str {
        CSRAPPROVER
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
    }
}
