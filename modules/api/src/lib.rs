//! The KubeEdge API every module shares: names, resource paths, CRDs and the error shapes the
//! edge decodes.
//!
//! ```text
//! edge ⇄ cloudhub ⇄ beehive ⇄ controllers ⇄ apiserver
//!          └──── resource paths, names, ObjectSync: kubeedge-api ────┘
//! ```
//!
//! Start with [`NodeResource`] for `node/<id>/<ns>/<type>/<name>` paths and [`names`] for the
//! module and group names messages are routed by. [`application`] is the edge metaServer's request envelope; [`access`] asks the API server what a node may do; [`authz`] makes every API call for an edge an authorized one. Controllers share [`watch`] (watch caches
//! that survive relists), [`client`] (sends [`authz::Authorized`] requests only), [`queue`] (bounded request
//! queues) and [`lifecycle`] (background tasks and graceful stop: a `CancellationToken` and a `TaskTracker`); servers share [`listener`] (admission
//! limits for edge-facing listeners) and [`metrics`] (their Prometheus families); [`replicas`] says which replica holds which node; [`devices`], [`rules`],
//! [`operations`] (node jobs) and [`policy`] hold the KubeEdge CRDs; [`validation`] checks names from the wire before they reach a URL and [`escaped`] percent-encodes every name a path is built from; `testing` (feature) has a fake edge and a fault-injecting client.
//!
//! ```
//! use kubeedge_api::{NodeResource, trim_node};
//! let r = NodeResource::new("edge-1", "default", "pod", "web").build().unwrap();
//! assert_eq!(trim_node(&r), "default/pod/web");
//! ```

pub mod access;
pub mod application;
pub mod authz;
pub mod client;
pub mod crds;
pub mod devices;
pub mod escaped;
pub mod lifecycle;
pub mod listener;
pub mod metrics;
pub mod names;
pub mod operations;
pub mod policy;
pub mod queue;
pub mod reliablesyncs;
pub mod replicas;
mod resource;
pub mod rules;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validation;
pub mod version;
pub mod watch;

pub use resource::{NodeResource, NodeResourceRef, ResourceError, node_of, trim_node, with_node};
