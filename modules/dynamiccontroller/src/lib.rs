//! KubeEdge's dynamiccontroller on the beehive bus: the cloud side of the edge metaServer.
//!
//! Edge applications (EdgeMesh, kube-proxy-like agents, any client-go program) talk to
//! edgecore's metaServer on `127.0.0.1:10550` as if it were the API server; the metaServer
//! turns each request into an *Application* and sends it here through cloudhub.
//!
//! ```text
//!  edge ─Application─► cloudhub ─► controller ─┬─ requests: list/get/writes/discovery ─► apiserver
//!                                              └─ watches: listeners ─┐
//!  apiserver ─watch (one per type)─► informer ─► dispatch ─(insert/update/delete)─► cloudhub ─► edge
//! ```
//!
//! * [`DynamicController`] is the module; [`DynamicControllerConfig`] is
//!   `modules.dynamicController`; [`DynamicControllerMetrics`] its counters.
//! * `requests` answers everything but watches from the API server; `watches` registers edge
//!   watches on the shared type caches of `informer` and fans changes out; `filter` rewrites
//!   what a node sees; `selector`, `key` and `discovery` parse and resolve what a request
//!   names; `passthrough` shares discovery answers among nodes; `delivered` records what each node's watches delivered, so the deletes it missed
//!   while away are sent; `persist` keeps both across restarts.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! let bus = beehive::Bus::new();
//! let config = dynamiccontroller::DynamicControllerConfig::default();
//! let dc = dynamiccontroller::DynamicController::new(config, bus.endpoint("dynamiccontroller"), client);
//! bus.register(dc).unwrap();
//! bus.start().unwrap();
//! # }
//! ```

// Requests fail with `StatusError` (~176 bytes): the exact shape the edge decodes, built only
// on failure paths, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

mod config;
mod controller;
mod delivered;
mod discovery;
mod filter;
#[cfg(test)]
mod fuzz;
mod informer;
mod key;
mod listeners;
mod metrics;
mod passthrough;
mod persist;
mod policy;
mod requests;
mod selector;
mod shared;
mod watches;

pub use config::DynamicControllerConfig;
pub use controller::DynamicController;
pub use metrics::{DynamicControllerMetrics, MetricsSnapshot};
