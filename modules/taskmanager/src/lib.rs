//! KubeEdge's node jobs on the beehive bus: NodeUpgradeJob, ImagePrePullJob and
//! ConfigUpdateJob (`operations.kubeedge.io/v1alpha2`), the cloudcore taskmanager module and
//! the job controller KubeEdge runs in a separate binary, in one.
//!
//! ```text
//!  job watch ─► engine (one per kind) ─► status: Init, node InProgress ─► Check ─► cloudhub ─► edge
//!  edge ─► cloudhub (node/<session>/…) ─► report queue ─► engine ─► status: actionFlow, phases
//! ```
//!
//! Start with [`TaskManager`] and [`TaskManagerConfig`] (`modules.taskManager`). The wire
//! formats are in [`wire`], the flows in [`JobKind`]; [`spec`] says what a job must say and
//! [`status`] how its status changes. Modules, leaves first: `config`, `kind`, `wire`, `spec`,
//! `select` (choosing nodes), `job` (one interface over the three types), `status`,
//! `secret` (the pull secret as the edge reads it), `metrics`, `engine`, `module`.

mod config;
mod engine;
mod job;
mod kind;
mod metrics;
mod module;
pub mod secret;
mod select;
pub mod spec;
pub mod status;
pub mod wire;

pub use config::{TaskManagerBuffer, TaskManagerConfig, TaskManagerLoad};
pub use job::{DEFAULT_UPGRADE_IMAGE, NodeJob, NodeTask};
pub use kind::{JobKind, Step};
pub use metrics::{TaskManagerMetrics, TaskManagerSnapshot};
pub use module::TaskManager;
pub use select::{Chosen, check_node, selector};
