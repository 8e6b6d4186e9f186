//! The CSR approver of `featureGates.requireAuthorization`: an edge's metaServer requests a
//! kubelet-serving certificate through edgecontroller, and this approves it.
//!
//! ```text
//! edge metaServer ─insert CSR─► cloudhub ─► edgecontroller ─► apiserver
//! apiserver ─watch CSRs─► csrapprover ─rules─► PUT …/approval ─► kube-controller-manager signs
//! ```
//!
//! Start with [`CsrApprover`] (the module); the decision is [`rules`]: Kubernetes'
//! kubelet-serving rules (what KubeEdge checks), plus what every edge request satisfies and
//! KubeEdge does not check — IP addresses only, loopback or link-local, created by the node
//! named in the common name or by cloudcore, for an edge node.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! let bus = beehive::Bus::new();
//! let approver = csrapprover::CsrApprover::new(client);
//! let metrics = approver.metrics();
//! bus.register(approver).unwrap();
//! bus.start().unwrap();
//! # let _ = metrics.approved();
//! # }
//! ```

mod approver;
mod metrics;
mod module;
pub mod rules;

pub use approver::Error;
pub use metrics::CsrApproverMetrics;
pub use module::{CSRAPPROVER, CsrApprover};
