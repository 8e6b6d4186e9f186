//! Settings of a bus.

use std::time::Duration;

use crate::mailbox::DEFAULT_MAILBOX_CAPACITY;

/// Settings of a [`Bus`].
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// Capacity of inboxes registered without one (modules say their own).
    pub default_capacity: usize,
    /// Timeout used by sync calls given a zero timeout (KubeEdge: 30 s).
    pub default_sync_timeout: Duration,
    /// How long shutdown waits for a module to handle what is queued in its mailbox.
    pub drain_timeout: Duration,
    /// How long shutdown waits for a module's actor to stop after its shutdown hook.
    pub stop_timeout: Duration,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            default_capacity: DEFAULT_MAILBOX_CAPACITY,
            default_sync_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(5),
            stop_timeout: Duration::from_secs(5),
        }
    }
}
