//! Per-module counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one module name. Sends, sync timeouts and late responses count against
/// the module that *sent* (its [`crate::Endpoint`]); receptions, rejections and depth against
/// the module that *receives*.
#[derive(Debug, Default)]
pub(crate) struct ModuleStats {
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    pub(crate) rejected_full: AtomicU64,
    pub(crate) rejected_stopped: AtomicU64,
    /// Set while the module of this name is removed (cleared when it is registered again).
    pub(crate) removed: std::sync::atomic::AtomicBool,
    pub(crate) sync_timeouts: AtomicU64,
    pub(crate) late_responses: AtomicU64,
    pub(crate) restarts: AtomicU64,
    pub(crate) sync_completed: AtomicU64,
    pub(crate) sync_micros_total: AtomicU64,
}

pub(crate) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl ModuleStats {
    pub(crate) fn snapshot(
        &self,
        name: &str,
        depth: usize,
        capacity: usize,
    ) -> ModuleStatsSnapshot {
        ModuleStatsSnapshot {
            name: name.to_owned(),
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            rejected_full: self.rejected_full.load(Ordering::Relaxed),
            rejected_stopped: self.rejected_stopped.load(Ordering::Relaxed),
            sync_timeouts: self.sync_timeouts.load(Ordering::Relaxed),
            late_responses: self.late_responses.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
            sync_completed: self.sync_completed.load(Ordering::Relaxed),
            sync_micros_total: self.sync_micros_total.load(Ordering::Relaxed),
            depth,
            capacity,
        }
    }
}

/// A point-in-time copy of one module's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleStatsSnapshot {
    /// Module (or endpoint) name.
    pub name: String,
    /// Messages this module's endpoint put into a mailbox (each group member counts once).
    pub sent: u64,
    /// Messages taken out of this module's mailbox for handling.
    pub received: u64,
    /// `try_send` attempts refused because this module's mailbox was full.
    pub rejected_full: u64,
    /// Sends to this module refused because it had stopped or was removed: sends, try-sends
    /// and sync requests addressed to it afterwards, senders that were waiting for room when
    /// it stopped, and group sends that skipped it because it had stopped. (Group sends do
    /// not count removed members: those are no longer members. Once the whole bus has shut
    /// down, sends fail with [`crate::Error::Shutdown`] and count nowhere.)
    pub rejected_stopped: u64,
    /// Sync requests of this module that expired without an answer.
    pub sync_timeouts: u64,
    /// Answers to this module's sync requests that came after the request had timed out.
    pub late_responses: u64,
    /// Times the module was restarted after it stopped on its own.
    pub restarts: u64,
    /// Sync requests of this module that got their answer.
    pub sync_completed: u64,
    /// Total time those answered requests waited, in microseconds (with `sync_completed`,
    /// the mean sync latency).
    pub sync_micros_total: u64,
    /// Messages waiting in the mailbox now (0 for an endpoint without a mailbox).
    pub depth: usize,
    /// Mailbox capacity (0 for an endpoint without a mailbox).
    pub capacity: usize,
}

/// Bus-wide counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BusStats {
    /// Every module and endpoint that has counters, in name order.
    pub modules: Vec<ModuleStatsSnapshot>,
    /// Responses whose parent id matched no waiting request (and no recently expired one).
    pub unmatched_responses: u64,
    /// Sync requests waiting for an answer now.
    pub pending_sync: usize,
}
