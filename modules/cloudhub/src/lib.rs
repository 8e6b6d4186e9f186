//! The hub edge nodes connect to: wire-compatible with KubeEdge edgecore (WebSocket + JSON),
//! with sessions, reliable downstream delivery, upstream routing and the certificate server.
//!
//! ```text
//! controllers ─► [cloudhub module] ─► session actor (one per edge) ─► TLS WebSocket ─► edge
//!      ▲              │ ACK-class: window, 5 s re-sends, ObjectSync on ACK (store)
//!      └── group edgecontroller / devicecontroller / router ◄── upstream routing ◄──┘
//! edge bootstrap ─► HTTPS :10002  /ca.crt  /edge.crt (token or cert)  /node/{name}
//! ```
//!
//! Inside, each layer uses only the ones below it (`scripts/module-graph` checks):
//!
//! ```text
//! module (CloudHub: the bus module, routes downstream) ─► handle (HubHandle: servers, stats, stop)
//!   ─► listener (WebSocket :10000, checks before the 101) · certserver (:10002) · revocation
//!   ─► session (the actor, one per edge) · socket (the socket driver: frames in, outbox out)
//!   ─► state (Hub: what every part shares) ─► registry (node → session) ─► messages (Deliver,
//!      Acked, Stop; sessions are reached as Recipients) ─► persist (ObjectSync writer)
//!   ─► downstream (ACK window, re-sends) · outbox (frames a session and its socket share)
//! leaves: config · error · classify · store · upstream · events · metrics · throttle ·
//!         tls_accept (admission + TLS) · material (CA, certificate, token)
//! ```
//!
//! Start with [`CloudHub`] (the module) and [`HubHandle`] (servers, token, counters,
//! shutdown); the configuration is [`CloudHubConfig`] (`modules.cloudHub`). What the hub
//! checks, guarantees and leaves to the sync loop is in `README.md` beside this crate.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let bus = beehive::Bus::new();
//! let mut config = cloudhub::CloudHubConfig::default();
//! config.advertise_address = vec!["127.0.0.1".into()];
//! let hub = cloudhub::CloudHub::new(config, bus.endpoint("cloudhub"), None, Arc::new(cloudhub::MemoryStore::new())).await?;
//! let handle = hub.handle();
//! bus.register(hub)?;
//! bus.start()?;
//! let addrs = handle.start_servers()?;
//! println!("edges connect to {:?}, token {}", addrs.websocket, handle.token());
//! # Ok(()) }
//! ```
#![doc = include_str!("../README.md")]

mod certserver;
mod classify;
mod config;
mod downstream;
mod edgenodes;
mod error;
mod events;
mod generation;
mod handle;
mod kv;
mod listener;
mod material;
mod messages;
mod metrics;
mod module;
mod outbox;
mod persist;
mod registry;
mod revocation;
mod session;
mod socket;
mod state;
mod store;
mod sync_answers;
mod throttle;
mod tls_accept;
mod upstream;

pub use classify::{Delivery, ObjectInfo, classify, object_info};
pub use config::{
    AuthorizationConfig, AuthorizationMode, CloudHubConfig, ListenerConfig, NodeAuthorization,
    QuicConfig, UnixSocketConfig,
};
pub use edgenodes::EDGE_NODES;
pub use error::{Error, Result};
pub use events::event_message;
pub use handle::{HubHandle, ServerAddrs};
pub use material::{
    CA_SECRET, CLOUDCORE_SECRET, Material, NAMESPACE, TOKEN_GENERATION_ANNOTATION, TOKEN_SECRET,
    prepare, store_token,
};
pub use metrics::{
    CertServerStats, DropCounts, DropReason, HubMetrics, HubStats, NodeCounters, NodeStats,
};
pub use module::{CloudHub, HubOptions};
pub use revocation::REVOKED_CERTS;
pub use store::{Created, KubeStore, MemoryStore, ObjectSyncStore, StoreError, SyncKey, SyncSpec};
