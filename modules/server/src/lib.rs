//! cloudcore itself: the KubeEdge cloud modules composed on one [`beehive::Bus`] from a
//! CloudCore YAML file, with the operations server, leader election and the `cloudcore` binary.
//!
//! ```text
//! config ─► app ─┬─► bus: cloudhub, edgecontroller, devicecontroller, dynamiccontroller,
//!                │        taskmanager, synccontroller, cloudstream (started in that order,
//!                │        stopped reversed)
//!                ├─► permissions (checked first) · apiclient (one HTTP/2 connection)
//!                ├─► leader (Lease; standby replicas wait)
//!                └─► ops: /healthz /readyz /metrics ◄─ metrics (each module's counters)
//!                         /debug/nodes/{name} ◄─ diagnose
//! cli ─► app::run (the `cloudcore` binary: flags, --demo, iptables-manager, diagnose)
//! ```
//!
//! Start with [`app::run`] (what the binary does: serve until a stop signal) or
//! [`app::CloudCore::start`] (the enabled modules on a bus, for an application that embeds
//! them and serves its own operations); the configuration is [`config::CloudCoreConfig`].
//! Modules are chosen by `modules.<name>.enable`, as in KubeEdge; an application that needs
//! only some of them (or only the bus) depends on those crates directly.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use cloudcore_server::{app, config::CloudCoreConfig};
//! let config = CloudCoreConfig::load("/etc/kubeedge/config/cloudcore.yaml".as_ref())?;
//! // Serves until SIGINT or SIGTERM; needs a running actix system (`actix_rt::System`).
//! app::run(config, app::signal()).await?;
//! # Ok(()) }
//! ```

pub mod apiclient;
pub mod app;
pub mod build_info;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod diagnose;
pub mod leader;
pub mod metrics;
pub mod ops;
pub mod permissions;
