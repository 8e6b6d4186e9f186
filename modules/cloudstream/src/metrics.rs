//! cloudstream's metrics: tunnels, streams, bytes relayed and refusals, as prometheus-client
//! metrics the servers update lock-free. [`Metrics::register`] adds them to the process's
//! registry; [`Metrics::snapshot`] reads them back.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The metrics of one cloudstream.
#[derive(Debug, Default)]
pub struct Metrics {
    sessions: Gauge,
    /// Read back only; not exposed.
    sessions_total: Counter,
    tunnels_refused: Counter,
    tunnel_identity_refused: Counter,
    streams_active: Gauge,
    streams_total: Counter,
    requests_refused: Counter,
    authz_reviews: Counter,
    authz_denied: Counter,
    bytes_to_edge: Counter,
    bytes_from_edge: Counter,
    streams_overflowed: Counter,
    streams_refused_per_node: Counter,
    edge_response_timeouts: Counter,
    api_write_timeouts: Counter,
    removes_for_unknown: Counter,
}

/// A point-in-time copy of [`Metrics`], for code and tests that read them back.
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

impl Metrics {
    /// Registers every exposed metric under its `cloudstream_…` name (counters get their
    /// `_total` suffix from the encoder).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "cloudstream_tunnels",
            "Tunnels open now.",
            self.sessions.clone(),
        );
        registry.register(
            "cloudstream_streams",
            "Streams open now.",
            self.streams_active.clone(),
        );
        // Its family name would be `cloudstream_streams`, the gauge's: a family per name, so
        // the counter of streams opened is `cloudstream_streams_opened_total`.
        registry.register(
            "cloudstream_streams_opened",
            "Streams opened.",
            self.streams_total.clone(),
        );
        let counters: [(&str, &str, &Counter); 12] = [
            (
                "cloudstream_bytes_to_edge",
                "Stream bytes sent into tunnels.",
                &self.bytes_to_edge,
            ),
            (
                "cloudstream_bytes_from_edge",
                "Stream bytes received from tunnels.",
                &self.bytes_from_edge,
            ),
            (
                "cloudstream_tunnels_refused",
                "Tunnel connections refused (TLS, identity or handshake).",
                &self.tunnels_refused,
            ),
            (
                "cloudstream_tunnel_identity_refused",
                "Tunnels refused for identity: another node's certificate, or a SessionInternalIP that is not the node's or is held by another node's tunnel.",
                &self.tunnel_identity_refused,
            ),
            (
                "cloudstream_requests_refused",
                "Stream server requests answered with an error status.",
                &self.requests_refused,
            ),
            (
                "cloudstream_stream_authorization_reviews",
                "SubjectAccessReviews the stream server sent (cached answers not counted).",
                &self.authz_reviews,
            ),
            (
                "cloudstream_stream_authorization_denied",
                "Stream server requests refused by authorization (403).",
                &self.authz_denied,
            ),
            (
                "cloudstream_streams_overflowed",
                "Streams ended because their client fell a whole stream budget behind an edge that cannot pace one stream (edgecore), or the edge overran its window.",
                &self.streams_overflowed,
            ),
            (
                "cloudstream_streams_refused_per_node",
                "Stream requests refused (503) because the node had its maximum of open streams.",
                &self.streams_refused_per_node,
            ),
            (
                "cloudstream_edge_response_timeouts",
                "Streams answered 504 because the edge never answered.",
                &self.edge_response_timeouts,
            ),
            (
                "cloudstream_api_write_timeouts",
                "Streams dropped because the API server side stopped reading (write timeout).",
                &self.api_write_timeouts,
            ),
            (
                "cloudstream_removes_for_unknown",
                "REMOVE answers sent for DATA on stream ids the cloud no longer had.",
                &self.removes_for_unknown,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
    }

    /// A copy of every value.
    pub fn snapshot(&self) -> CountersSnapshot {
        let gauge = |g: &Gauge| u64::try_from(g.get()).unwrap_or(0);
        CountersSnapshot {
            sessions: gauge(&self.sessions),
            sessions_total: self.sessions_total.get(),
            tunnels_refused: self.tunnels_refused.get(),
            tunnel_identity_refused: self.tunnel_identity_refused.get(),
            streams_active: gauge(&self.streams_active),
            streams_total: self.streams_total.get(),
            requests_refused: self.requests_refused.get(),
            authz_reviews: self.authz_reviews.get(),
            authz_denied: self.authz_denied.get(),
            bytes_to_edge: self.bytes_to_edge.get(),
            bytes_from_edge: self.bytes_from_edge.get(),
            streams_overflowed: self.streams_overflowed.get(),
            streams_refused_per_node: self.streams_refused_per_node.get(),
            edge_response_timeouts: self.edge_response_timeouts.get(),
            api_write_timeouts: self.api_write_timeouts.get(),
            removes_for_unknown: self.removes_for_unknown.get(),
        }
    }

    pub(crate) fn session_opened(&self) {
        self.sessions.inc();
        self.sessions_total.inc();
    }

    pub(crate) fn session_closed(&self) {
        self.sessions.dec();
    }

    pub(crate) fn tunnel_refused(&self) {
        self.tunnels_refused.inc();
    }

    pub(crate) fn tunnel_identity_refused(&self) {
        self.tunnel_identity_refused.inc();
    }

    pub(crate) fn authz_review(&self) {
        self.authz_reviews.inc();
    }

    pub(crate) fn authz_denied(&self) {
        self.authz_denied.inc();
    }

    pub(crate) fn stream_opened(&self) {
        self.streams_active.inc();
        self.streams_total.inc();
    }

    pub(crate) fn stream_closed(&self) {
        self.streams_active.dec();
    }

    pub(crate) fn request_refused(&self) {
        self.requests_refused.inc();
    }

    pub(crate) fn sent_to_edge(&self, n: usize) {
        self.bytes_to_edge.inc_by(n as u64);
    }

    pub(crate) fn received_from_edge(&self, n: usize) {
        self.bytes_from_edge.inc_by(n as u64);
    }

    pub(crate) fn stream_overflowed(&self) {
        self.streams_overflowed.inc();
    }

    pub(crate) fn stream_refused_per_node(&self) {
        self.streams_refused_per_node.inc();
    }

    pub(crate) fn edge_response_timeout(&self) {
        self.edge_response_timeouts.inc();
    }

    pub(crate) fn api_write_timeout(&self) {
        self.api_write_timeouts.inc();
    }

    pub(crate) fn remove_for_unknown(&self) {
        self.removes_for_unknown.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_should_render_with_their_names_and_types() {
        let m = Metrics::default();
        m.session_opened();
        m.stream_opened();
        m.stream_opened();
        m.stream_closed();
        m.sent_to_edge(300);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "# TYPE cloudstream_tunnels gauge",
            "cloudstream_tunnels 1",
            "# TYPE cloudstream_streams gauge",
            "cloudstream_streams 1",
            "# TYPE cloudstream_streams_opened counter",
            "cloudstream_streams_opened_total 2",
            "cloudstream_bytes_to_edge_total 300",
            "cloudstream_removes_for_unknown_total 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        let snap = m.snapshot();
        assert_eq!(
            (snap.sessions, snap.streams_active, snap.streams_total),
            (1, 1, 2)
        );
        assert_eq!(snap.bytes_to_edge, 300);
    }
}
