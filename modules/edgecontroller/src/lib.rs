//! KubeEdge's edgecontroller on the beehive bus: Kubernetes objects down to edge nodes, edge
//! requests up to the API server.
//!
//! ```text
//!  apiserver ─watch─► downstream ─(node/<id>/<ns>/<type>/<name>)─► cloudhub ─► edge
//!      ▲                 │ location cache (pods → configmaps/secrets/PVCs per node)
//!      │                 ▼
//!      └──── handlers ◄─ bounded queue per kind ◄─ dispatch ◄─ edgecontroller mailbox ◄─ cloudhub
//! ```
//!
//! Start with [`EdgeController`] (the module) and [`EdgeControllerConfig`]
//! (`modules.edgeController`). Counters are in [`EdgeControllerMetrics`].
//!
//! Modules, leaves first (each depends only on those above it): `config`, `request_kind`
//! (the request kinds and which kind a message is), `metrics`, `reply` (answer shapes),
//! `outbox` (sends toward cloudhub), `downstream` (watches → edges, and where each node's
//! objects are), `authz` (what a node may ask), `policy` (the decision on each API request made for a node),
//! `upstream` (edge requests → authorized API calls),
//! `controller` (the beehive module).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! let bus = beehive::Bus::new();
//! let config = edgecontroller::EdgeControllerConfig::default();
//! let ec = edgecontroller::EdgeController::new(config, bus.endpoint("edgecontroller"), client);
//! bus.register(ec).unwrap();
//! bus.start().unwrap();
//! # }
//! ```

mod authz;
mod config;
mod controller;
mod downstream;
mod metrics;
mod outbox;
mod policy;
mod reply;
mod request_kind;
// Handlers fail with `StatusError` (~176 bytes): the exact shape the edge decodes, built only
// on failure paths, so boxing it would buy nothing.
#[allow(clippy::result_large_err)]
mod upstream;

pub use authz::{Fetched, NodeAuthorizer, Refusal};
pub use config::{
    DEFAULT_NODE_LIMIT, EdgeControllerBuffer, EdgeControllerConfig, EdgeControllerLoad,
};
pub use controller::{EdgeController, Synced, default_cloudcore_ip};
pub use metrics::{EdgeControllerMetrics, MetricsSnapshot};
