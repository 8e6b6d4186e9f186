//! The wire formats the cloud and the edge both speak, each defined once here, in a crate
//! with no Kubernetes or actor dependencies (as kube-core is split from kube-runtime).
//!
//! ```text
//! edge (edgecore / edge crate) ⇄ hub framing: JSON message per WebSocket message ⇄ cloudhub
//! ```
//!
//! Start with [`hub`] (feature `hub`): what one hub message looks like on the WebSocket,
//! how fragments are reassembled and capped, the keepalive and the acknowledgement.

#[cfg(feature = "hub")]
pub mod hub;
