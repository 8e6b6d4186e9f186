//! The tunnel server: edges dial in over mTLS WebSocket; each node's session multiplexes the
//! API server's streams by connect id.

mod addresses;
mod node;
mod registry;
mod server;
mod session;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub(crate) use addresses::{NodeAddresses, Owner};
pub(crate) use node::NodeUpdater;
pub(crate) use registry::Registry;
pub(crate) use server::run;
pub(crate) use session::{ApiStream, Session};

use crate::config::Tuning;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;

/// Errors opening or using a stream on a session.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// The session's tunnel is closed (the reason says why).
    #[error("the tunnel of node {node} has closed: {reason}")]
    Closed {
        /// The node.
        node: String,
        /// Why the tunnel closed.
        reason: Arc<str>,
    },
    /// The node already carries its maximum of streams; retryable once some end.
    #[error("node {node} has {limit} streams open, its maximum")]
    TooManyStreams {
        /// The node.
        node: String,
        /// The limit reached (`Tuning::max_streams_per_node`).
        limit: usize,
    },
}

/// State the tunnel server and the stream server share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) registry: Registry,
    /// Connect ids: process-wide, from 1, never reused (the edge keys its table by id, and `0`
    /// is for CLOSE_CONNECT).
    pub(crate) next_id: AtomicU64,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) tuning: Tuning,
    /// Revoked edge certificates (shared with cloudhub); `None` checks nothing.
    pub(crate) revocations: Option<pki::Revocations>,
    /// Every connection's task and every session's writer, keepalive and Node update, so
    /// that a shutdown can wait for them.
    pub(crate) tasks: TaskTracker,
}

impl Shared {
    pub(crate) fn new(metrics: Arc<Metrics>, tuning: Tuning) -> Self {
        Shared {
            registry: Registry::default(),
            next_id: AtomicU64::new(1),
            metrics,
            tuning,
            revocations: None,
            tasks: TaskTracker::new(),
        }
    }
}
