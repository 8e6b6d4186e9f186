//! The hub client: certificate bootstrap, WebSocket session to cloudhub, keepalive, reconnect.
//!
//! It speaks exactly what edgecore's edgehub speaks (`wss://<server>/<project>/<node>/events`,
//! headers `Node_id`, `Project_id`, `Connectionuse: msg`, JSON text frames with a trailing
//! newline, a keepalive at once and every heartbeat), so cloudhub cannot tell it from a real
//! edge. Use [`HubClient`] directly (tests, load tools) or the [`EdgeHub`] module on an edge
//! [`beehive::Bus`].
//!
//! The server is verified: [`EdgeCerts::client_tls`] checks cloudhub's certificate against
//! the CA from bootstrap and the host dialed; only `GET /ca.crt` during [`bootstrap`] is
//! unverified, and its answer must hash to the token's first part.
//! [`EdgeCerts::client_tls_with`] with [`crate::ServerVerification::InsecureSkipVerify`] is
//! the explicit opt-out.
//!
//! ```no_run
//! # async fn demo() -> Result<(), edge::hub::HubError> {
//! use std::sync::Arc;
//! use edge::hub::{HubClient, HubClientConfig, HubEvent, bootstrap};
//! let certs = bootstrap("https://127.0.0.1:10002", "<token>", "edge-1").await?;
//! let config = HubClientConfig::new("edge-1", "127.0.0.1:10000");
//! let (client, mut events) = HubClient::start(config, Arc::new(certs.client_tls()?));
//! while let Some(ev) = events.recv().await {
//!     if let HubEvent::Message(m) = ev { println!("{m}"); }
//! }
//! # let _ = client; Ok(()) }
//! ```

mod certs;
mod client;
mod dial;
mod error;
mod https;
mod module;

pub use certs::{CertPaths, EdgeCerts, bootstrap, bootstrap_from, rotate};
pub use client::{DEFAULT_PROJECT_ID, HubClient, HubClientConfig, HubEvent};
pub use error::HubError;
pub use module::{EDGEHUB_GROUP, EDGEHUB_MODULE, EdgeHub, GroupRoutes};
