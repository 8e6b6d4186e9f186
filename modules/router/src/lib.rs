//! KubeEdge's router on the beehive bus: Rules and RuleEndpoints (`rules.kubeedge.io/v1`)
//! connect REST calls in the cloud with MQTT topics and HTTP services at edge nodes.
//!
//! ```text
//! REST client ─► listener :9443 /<node>/<ns>/<path> ─► rule ─► cloudhub ─► edge eventbus (MQTT)
//!                                                         └──► cloudhub ─► edge servicebus ─► 127.0.0.1:<port>
//!                                                              ◄── answer (parent id, same node) ◄──┘
//! edge MQTT ─► edge eventbus ─upload─► cloudhub ─► rule naming that node ─► POST <resource>
//! edgecontroller ─rule/ruleendpoint─► table ─subscribe─► cloudhub ─► edge
//! ```
//!
//! Start with [`Router`] (the module) and [`RouterConfig`] (`modules.router`). The messages are
//! in [`wire`], the only place their shapes are written. What differs from KubeEdge (anchored
//! path matching, one bounded attempt, the target's own status, counters that count, limits,
//! re-subscription on connect) is in `docs/router.md`.

mod client;
mod config;
mod metrics;
mod module;
mod nodes;
mod path;
mod rest;
mod route;
mod shared;
mod status;
mod table;
mod waiters;
pub mod wire;

pub use client::HttpError;
pub use config::RouterConfig;
pub use metrics::{EdgeResult, RestResult, RouterMetrics};
pub use module::{Error, Router, RouterHandle};
pub use route::{INSECURE_SKIP_TLS_VERIFY, RouteError, RuleKey};
