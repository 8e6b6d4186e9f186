//! KubeEdge's synccontroller on the beehive bus: reliable-delivery reconciliation.
//!
//! ```text
//!  ObjectSync / ClusterObjectSync (what each edge acknowledged, written by cloudhub)
//!        │ watch                      live objects (one filtered watch per kind)
//!        ▼                                  │
//!   reconciler ── newer? update ── gone/recreated? delete ──► cloudhub ──► edge
//! ```
//!
//! Start with [`SyncController`] and [`SyncControllerConfig`] (`modules.syncController`).

mod config;
mod controller;
mod kinds;
mod metrics;
mod reconciler;
mod record;
mod takeover;

pub use config::SyncControllerConfig;
pub use controller::SyncController;
pub use metrics::{SyncControllerMetrics, SyncMetricsSnapshot};
