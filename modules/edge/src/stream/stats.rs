//! An agent's counters: tunnels established, streams started and running.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of an agent.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) tunnels: AtomicU64,
    pub(crate) streams_total: AtomicU64,
    pub(crate) streams_active: AtomicU64,
}

impl Stats {
    pub(crate) fn stream_started(&self) {
        self.streams_total.fetch_add(1, Ordering::Relaxed);
        self.streams_active.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_ended(&self) {
        self.streams_active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A copy of an agent's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Tunnels established so far (a redial adds one).
    pub tunnels: u64,
    /// Streams started so far.
    pub streams_total: u64,
    /// Streams running now.
    pub streams_active: u64,
}
