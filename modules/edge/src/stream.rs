//! The stream agent: the tunnel to cloudstream, relaying each stream to the local kubelet
//! server, like edgecore's edgestream (and wire-compatible with a Go cloudcore).
//!
//! ```text
//! cloudstream :10004 ══ wss /v1/kubeedge/connect (node cert) ══► StreamAgent
//!                                  LOGS/METRIC_CONNECT ─► GET  127.0.0.1:10350 ─► DATA…, REMOVE_CONNECT
//!                                  EXEC/ATTACH_CONNECT ─► raw socket, bytes both ways (101 head included)
//! ```
//!
//! Start with [`StreamAgent`].
//!
//! ```no_run
//! use edge::stream::{AgentOptions, EdgeStreamConfig, StreamAgent, client_tls};
//! # async fn demo(material: pki::stream_tls::TlsMaterial) -> Result<(), Box<dyn std::error::Error>> {
//! // Verifies the tunnel server against `material.ca`; see `client_tls_with` to opt out.
//! let tls = client_tls(&material)?;
//! let config = EdgeStreamConfig { server: "10.0.0.1:10004".into(), ..EdgeStreamConfig::default() };
//! let agent = StreamAgent::new(config, AgentOptions::new("edge-1", "10.0.0.7"), tls).spawn();
//! agent.wait_connected(std::time::Duration::from_secs(10)).await;
//! # agent.shutdown().await; Ok(()) }
//! ```

mod agent;
mod config;
mod dial;
mod exec;
mod get;
mod link;
mod local;
mod stats;
mod tunnel;

pub use agent::{AgentHandle, StreamAgent};
pub use config::{AgentOptions, EdgeStreamConfig, client_tls, client_tls_with};
pub use dial::DialError;
pub use stats::AgentStats;
