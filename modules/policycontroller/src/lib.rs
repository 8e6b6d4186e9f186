//! KubeEdge's policycontroller (`featureGates.requireAuthorization`): ServiceAccountAccesses
//! (`policy.kubeedge.io/v1alpha1`) for the edge nodes whose metaServer authorizes
//! service-account tokens offline.
//!
//! ```text
//! Pods, Nodes, ServiceAccounts, Roles, ClusterRoles, (Cluster)RoleBindings, SAAs ─watch─► caches
//! caches ─changes─► keys ─► reconcile ─► create/update/delete SAA, status.nodeList
//!                                     └─► insert/update/delete ─► cloudhub (ACK, ObjectSync) ─► edge metamanager
//! ```
//!
//! Start with [`PolicyController`]. Which bindings apply to an account is in `subjects`; what
//! differs from KubeEdge is in `docs/policycontroller.md`.

mod caches;
mod metrics;
mod module;
mod queue;
mod reconcile;
mod subjects;
mod watches;

pub use metrics::PolicyControllerMetrics;
pub use module::PolicyController;
