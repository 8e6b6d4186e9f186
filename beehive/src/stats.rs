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
    /// Set when the module stopped on its own for good (see [`ModuleStatsSnapshot::failed`]).
    pub(crate) failed: std::sync::atomic::AtomicBool,
    pub(crate) sync_timeouts: AtomicU64,
    pub(crate) late_responses: AtomicU64,
    pub(crate) restarts: AtomicU64,
    pub(crate) sync_completed: AtomicU64,
    pub(crate) sync_micros_total: AtomicU64,
    /// Answered sync requests per latency bucket ([`SYNC_BUCKETS`], then one past the last).
    pub(crate) sync_buckets: [AtomicU64; SYNC_BUCKETS.len() + 1],
}

/// Upper bounds, in seconds, of the sync latency buckets in
/// [`ModuleStatsSnapshot::sync_buckets`] (a last bucket holds what is slower than all).
pub const SYNC_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// [`SYNC_BUCKETS`] in microseconds: a latency is sorted by integer comparisons.
const SYNC_BUCKET_MICROS: [u64; SYNC_BUCKETS.len()] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    5_000_000,
];

pub(crate) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl ModuleStats {
    /// Counts one answered sync request that waited `micros`.
    pub(crate) fn record_sync(&self, micros: u64) {
        inc(&self.sync_completed);
        self.sync_micros_total.fetch_add(micros, Ordering::Relaxed);
        let bucket = SYNC_BUCKET_MICROS
            .iter()
            .position(|le| micros <= *le)
            .unwrap_or(SYNC_BUCKETS.len());
        inc(&self.sync_buckets[bucket]);
    }

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
            failed: self.failed.load(Ordering::Acquire),
            sync_completed: self.sync_completed.load(Ordering::Relaxed),
            sync_micros_total: self.sync_micros_total.load(Ordering::Relaxed),
            sync_buckets: std::array::from_fn(|i| self.sync_buckets[i].load(Ordering::Relaxed)),
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
    /// The module stopped on its own (a panic, or its actor stopped itself) while the bus ran,
    /// and will not run again: it had no restart policy, or its restarts were used up. Its
    /// mailbox refuses messages. A health check fails on this.
    pub failed: bool,
    /// Sync requests of this module that got their answer.
    pub sync_completed: u64,
    /// Total time those answered requests waited, in microseconds (with `sync_completed`,
    /// the mean sync latency).
    pub sync_micros_total: u64,
    /// Answered sync requests by latency: entry `i` counts those that waited at most
    /// [`SYNC_BUCKETS`]`[i]` seconds and longer than the bound before it; the last entry counts
    /// those slower than every bound. Not cumulative; the entries sum to `sync_completed`.
    pub sync_buckets: [u64; SYNC_BUCKETS.len() + 1],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_bounds_in_microseconds_are_the_published_ones() {
        assert_eq!(SYNC_BUCKETS.map(|le| (le * 1e6).round() as u64), SYNC_BUCKET_MICROS);
    }

    #[test]
    fn sync_latencies_land_in_the_bucket_of_their_upper_bound() {
        let s = ModuleStats::default();
        // 0.3 ms, exactly 1 ms, 40 ms, and slower than every bound.
        for micros in [300, 1_000, 40_000, 60_000_000] {
            s.record_sync(micros);
        }
        let snap = s.snapshot("m", 0, 0);
        let mut expected = [0u64; SYNC_BUCKETS.len() + 1];
        expected[0] = 1; // <= 0.5 ms
        expected[1] = 1; // <= 1 ms
        expected[6] = 1; // <= 50 ms
        expected[SYNC_BUCKETS.len()] = 1;
        assert_eq!(snap.sync_buckets, expected);
        assert_eq!(snap.sync_completed, 4);
        assert_eq!(snap.sync_micros_total, 60_041_300);
    }
}
