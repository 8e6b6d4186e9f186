//! Counters for metrics: sessions, streams and bytes relayed.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, updated lock-free by the servers.
#[derive(Debug, Default)]
pub struct Counters {
    sessions: AtomicU64,
    sessions_total: AtomicU64,
    tunnels_refused: AtomicU64,
    tunnel_identity_refused: AtomicU64,
    streams_active: AtomicU64,
    streams_total: AtomicU64,
    requests_refused: AtomicU64,
    authz_reviews: AtomicU64,
    authz_denied: AtomicU64,
    bytes_to_edge: AtomicU64,
    bytes_from_edge: AtomicU64,
    streams_overflowed: AtomicU64,
    streams_refused_per_node: AtomicU64,
    edge_response_timeouts: AtomicU64,
    api_write_timeouts: AtomicU64,
    removes_for_unknown: AtomicU64,
}

/// A point-in-time copy of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountersSnapshot {
    /// Tunnels open now.
    pub sessions: u64,
    /// Tunnels accepted since start.
    pub sessions_total: u64,
    /// Tunnel connections refused (TLS, identity or handshake).
    pub tunnels_refused: u64,
    /// Of those, refused for identity: a certificate for another node, a `SessionInternalIP`
    /// that is not an address of the node, or one another node's live tunnel holds.
    pub tunnel_identity_refused: u64,
    /// Streams (API connections) open now.
    pub streams_active: u64,
    /// Streams opened since start.
    pub streams_total: u64,
    /// API requests answered with an error status.
    pub requests_refused: u64,
    /// SubjectAccessReviews the stream server sent (answers from its cache are not counted).
    pub authz_reviews: u64,
    /// API requests refused by authorization (403).
    pub authz_denied: u64,
    /// Stream bytes sent into tunnels.
    pub bytes_to_edge: u64,
    /// Stream bytes received from tunnels.
    pub bytes_from_edge: u64,
    /// Streams ended because their API client fell more than the stream queue budget behind
    /// (edges without per-stream flow control) or the edge overran its window.
    pub streams_overflowed: u64,
    /// Stream requests refused (503) because the node carried `max_streams_per_node`.
    pub streams_refused_per_node: u64,
    /// Exec/attach requests answered 504 because the edge did not answer in time.
    pub edge_response_timeouts: u64,
    /// API connections dropped because a write toward them did not finish in time.
    pub api_write_timeouts: u64,
    /// REMOVE_CONNECT answers sent for DATA on a stream id the cloud no longer (or never)
    /// had, at most one per id.
    pub removes_for_unknown: u64,
}

impl Counters {
    /// A copy of every counter.
    pub fn snapshot(&self) -> CountersSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            sessions: g(&self.sessions),
            sessions_total: g(&self.sessions_total),
            tunnels_refused: g(&self.tunnels_refused),
            tunnel_identity_refused: g(&self.tunnel_identity_refused),
            streams_active: g(&self.streams_active),
            streams_total: g(&self.streams_total),
            requests_refused: g(&self.requests_refused),
            authz_reviews: g(&self.authz_reviews),
            authz_denied: g(&self.authz_denied),
            bytes_to_edge: g(&self.bytes_to_edge),
            bytes_from_edge: g(&self.bytes_from_edge),
            streams_overflowed: g(&self.streams_overflowed),
            streams_refused_per_node: g(&self.streams_refused_per_node),
            edge_response_timeouts: g(&self.edge_response_timeouts),
            api_write_timeouts: g(&self.api_write_timeouts),
            removes_for_unknown: g(&self.removes_for_unknown),
        }
    }

    pub(crate) fn session_opened(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
        self.sessions_total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn session_closed(&self) {
        self.sessions.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn tunnel_refused(&self) {
        self.tunnels_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn tunnel_identity_refused(&self) {
        self.tunnel_identity_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn authz_review(&self) {
        self.authz_reviews.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn authz_denied(&self) {
        self.authz_denied.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_opened(&self) {
        self.streams_active.fetch_add(1, Ordering::Relaxed);
        self.streams_total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_closed(&self) {
        self.streams_active.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn request_refused(&self) {
        self.requests_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sent_to_edge(&self, n: usize) {
        self.bytes_to_edge.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn received_from_edge(&self, n: usize) {
        self.bytes_from_edge.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn stream_overflowed(&self) {
        self.streams_overflowed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_refused_per_node(&self) {
        self.streams_refused_per_node
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn edge_response_timeout(&self) {
        self.edge_response_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn api_write_timeout(&self) {
        self.api_write_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn remove_for_unknown(&self) {
        self.removes_for_unknown.fetch_add(1, Ordering::Relaxed);
    }
}
