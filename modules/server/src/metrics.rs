//! What each composed module adds to the process's one Prometheus registry
//! ([`crate::ops::Metrics`], served by [`crate::ops`]).
//!
//! The controllers own prometheus-client metrics and register them themselves. beehive,
//! cloudhub and cloudstream keep read APIs (`bus.stats()`, `hub.stats()`, `counters()`):
//! collectors here render those at scrape time.

use std::fmt;

use beehive::{Endpoint, ModuleStatsSnapshot, SYNC_BUCKETS};
use cloudhub::HubHandle;
use cloudstream::CloudStreamHandle;
use kubeedge_api::metrics::{ListenerMetrics, counter, encode_family, encode_one, gauge};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::ops::Metrics;

pub use kubeedge_api::metrics::ListenerSource;

/// A collector from a function that writes families read from a module's API.
struct Collect<F>(F);

impl<F> fmt::Debug for Collect<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Collect")
    }
}

impl<F> Collector for Collect<F>
where
    F: Fn(&mut DescriptorEncoder<'_>) -> fmt::Result + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        (self.0)(&mut encoder)
    }
}

/// Registers a collector that runs `f` on every scrape.
fn collect<F>(metrics: &Metrics, f: F)
where
    F: Fn(&mut DescriptorEncoder<'_>) -> fmt::Result + Send + Sync + 'static,
{
    metrics.register(|r| r.register_collector(Box::new(Collect(f))));
}

/// A family with one sample per item, labelled `label` = the item's name.
type PerItem<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Mailbox depth, capacity and throughput counters per module; sync latency as a histogram.
pub fn bus(metrics: &Metrics, endpoint: Endpoint) {
    collect(metrics, move |out| {
        let stats = endpoint.stats();
        let labels = |m: &ModuleStatsSnapshot| [("module", m.name.clone())];
        let gauges: [PerItem<ModuleStatsSnapshot>; 2] = [
            (
                "beehive_mailbox_depth",
                "Messages waiting in the module's mailbox.",
                |m| m.depth as u64,
            ),
            ("beehive_mailbox_capacity", "Mailbox capacity.", |m| {
                m.capacity as u64
            }),
        ];
        for (name, help, value) in gauges {
            let samples = stats.modules.iter().map(|m| (labels(m), gauge(value(m))));
            encode_family(out, name, help, samples)?;
        }
        let counters: [PerItem<ModuleStatsSnapshot>; 6] = [
            (
                "beehive_messages_received",
                "Messages the module took from its mailbox.",
                |m| m.received,
            ),
            (
                "beehive_messages_sent",
                "Messages the module put into mailboxes.",
                |m| m.sent,
            ),
            (
                "beehive_mailbox_rejected_full",
                "try_send refusals because the mailbox was full.",
                |m| m.rejected_full,
            ),
            (
                "beehive_mailbox_rejected_stopped",
                "Sends refused because the module had stopped or was removed.",
                |m| m.rejected_stopped,
            ),
            (
                "beehive_sync_timeouts",
                "Sync requests of the module that expired.",
                |m| m.sync_timeouts,
            ),
            (
                "beehive_sync_late_responses",
                "Answers that arrived after their request expired.",
                |m| m.late_responses,
            ),
        ];
        for (name, help, value) in counters {
            let samples = stats.modules.iter().map(|m| (labels(m), counter(value(m))));
            encode_family(out, name, help, samples)?;
        }
        let mut family = out.encode_descriptor(
            "beehive_sync_duration_seconds",
            "How long answered sync requests of the module waited for their answer.",
            None,
            MetricType::Histogram,
        )?;
        for m in &stats.modules {
            let buckets: Vec<(f64, u64)> = SYNC_BUCKETS
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(m.sync_buckets)
                .collect();
            let labels = labels(m);
            family
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(
                    m.sync_micros_total as f64 / 1e6,
                    m.sync_completed,
                    &buckets,
                    None,
                )?;
        }
        encode_one(
            out,
            "beehive_unmatched_responses",
            "Responses that matched no request.",
            counter(stats.unmatched_responses),
        )
    });
}

/// Connected nodes (KubeEdge's gauge name) and per-node delivery counters.
pub fn cloudhub(metrics: &Metrics, hub: HubHandle) {
    collect(metrics, move |out| {
        encode_one(
            out,
            "KubeEdge_CloudHub_connected_nodes",
            "Edge nodes with a session on this cloudhub.",
            gauge(hub.connected_nodes() as u64),
        )?;
        encode_one(
            out,
            "cloudhub_connection_tasks",
            "Connection tasks running: one per upgraded WebSocket, until its socket closes.",
            gauge(hub.stats().connection_tasks),
        )?;
        // Every node seen since start: drop counters must not vanish when a node disconnects.
        let nodes = hub.known_node_stats();
        let node = |n: &String| [("node", n.clone())];
        let counters: [PerItem<cloudhub::NodeStats>; 4] = [
            (
                "cloudhub_node_messages_sent",
                "Messages written to the node.",
                |s| s.sent,
            ),
            (
                "cloudhub_node_messages_acked",
                "Messages the node acknowledged.",
                |s| s.acked,
            ),
            (
                "cloudhub_node_messages_retried",
                "Re-sends of unacknowledged messages.",
                |s| s.retried,
            ),
            (
                "cloudhub_node_messages_received",
                "Messages received from the node.",
                |s| s.received,
            ),
        ];
        for (name, help, value) in counters {
            let samples = nodes.iter().map(|(n, s)| (node(n), counter(value(s))));
            encode_family(out, name, help, samples)?;
        }
        let gauges: [PerItem<cloudhub::NodeStats>; 2] = [
            (
                "cloudhub_node_backlog_bytes",
                "Bytes queued toward the node and not yet written (replies included).",
                |s| s.backlog,
            ),
            (
                "cloudhub_node_backlog_peak_bytes",
                "Highest backlog of any one connection of the node.",
                |s| s.backlog_peak,
            ),
        ];
        for (name, help, value) in gauges {
            let samples = nodes.iter().map(|(n, s)| (node(n), gauge(value(s))));
            encode_family(out, name, help, samples)?;
        }
        // Only reasons that happened: ten zero series per node would dwarf the rest.
        let drops = nodes.iter().flat_map(|(n, s)| {
            s.drops
                .iter()
                .filter(|(_, k)| *k > 0)
                .map(|(reason, k)| {
                    let labels = [("node", n.clone()), ("reason", reason.as_str().to_owned())];
                    (labels, counter(k))
                })
                .collect::<Vec<_>>()
        });
        encode_family(
            out,
            "cloudhub_node_messages_dropped",
            "Messages dropped for the node, by reason (stale and stale_node_delete lose nothing; queue_full and offline keep an ObjectSync record for the sync loop).",
            drops,
        )?;
        let s = hub.stats();
        let drops = s
            .drops
            .iter()
            .map(|(reason, n)| ([("reason", reason.as_str())], counter(n)));
        encode_family(
            out,
            "cloudhub_messages_dropped",
            "Messages dropped by the hub, by reason (all nodes, and messages that name no node).",
            drops,
        )?;
        let c = hub.cert_server_stats();
        for (name, help, v) in [
            (
                "cloudhub_records_written",
                "ObjectSync records written on acknowledgement.",
                s.records_written,
            ),
            (
                "cloudhub_records_failed",
                "ObjectSync writes that failed.",
                s.records_failed,
            ),
            (
                "cloudhub_messages_held_elsewhere",
                "Messages for nodes another replica holds, left to that replica.",
                s.held_elsewhere,
            ),
            (
                "cloudhub_token_refused_connected",
                "Bootstrap-token certificate requests refused because the node was connected.",
                s.token_refused_connected,
            ),
            (
                "cloudhub_revoked_certificates_refused",
                "Handshakes and renewals refused because the certificate is revoked.",
                s.revoked_refused,
            ),
            (
                "cloudhub_certserver_unauthorized",
                "Certificate-server requests refused from their head alone (401/403), body unread.",
                c.unauthorized,
            ),
            (
                "cloudhub_certserver_request_timeouts",
                "Certificate-server requests whose body did not arrive within https.requestTimeoutSeconds (408).",
                c.request_timeouts,
            ),
            (
                "cloudhub_certserver_too_large",
                "Certificate-server requests refused for their body size (413).",
                c.too_large,
            ),
            (
                "cloudhub_certserver_rate_limited",
                "/node/{name} checks refused by their source address's rate limit (429).",
                c.rate_limited,
            ),
        ] {
            encode_one(out, name, help, counter(v))?;
        }
        encode_one(
            out,
            "cloudhub_revoked_nodes",
            "Deleted nodes whose earlier certificates are revoked.",
            gauge(s.revoked_nodes as u64),
        )
    });
}

/// The edgecontroller's queues, downstream sends and refused status lists.
pub fn edgecontroller(metrics: &Metrics, ec: edgecontroller::EdgeControllerMetrics) {
    metrics.register(|r| ec.register(r));
}

/// The devicecontroller's request queues.
pub fn devicecontroller(metrics: &Metrics, dc: devicecontroller::DeviceControllerMetrics) {
    metrics.register(|r| dc.register(r));
}

/// A module whose requests node authorization decides: its name and a reader of its refusal
/// counters by request kind.
pub type Denials = (
    &'static str,
    Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>,
);

/// Requests refused by node authorization, one family for every module that decides edge
/// requests, labelled by module and request kind.
pub fn node_authorization(metrics: &Metrics, sources: Vec<Denials>) {
    if sources.is_empty() {
        return;
    }
    collect(metrics, move |out| {
        let samples = sources.iter().flat_map(|(module, read)| {
            read()
                .into_iter()
                .map(move |(kind, n)| ([("module", *module), ("kind", kind)], counter(n)))
        });
        encode_family(
            out,
            "cloudcore_node_authorization_denied",
            "Edge requests refused by node authorization, by module and kind.",
            samples,
        )
    });
}

/// Reconcile counters of the synccontroller.
pub fn synccontroller(metrics: &Metrics, sc: synccontroller::SyncControllerMetrics) {
    metrics.register(|r| sc.register(r));
}

/// Requests, listeners and caches of dynamiccontroller.
pub fn dynamiccontroller(metrics: &Metrics, dc: dynamiccontroller::DynamicControllerMetrics) {
    metrics.register(|r| dc.register(r));
}

/// Tunnels and streams of cloudstream.
pub fn cloudstream(metrics: &Metrics, stream: CloudStreamHandle) {
    collect(metrics, move |out| {
        let c = stream.counters();
        encode_one(
            out,
            "cloudstream_tunnels",
            "Tunnels open now.",
            gauge(c.sessions),
        )?;
        encode_one(
            out,
            "cloudstream_streams",
            "Streams open now.",
            gauge(c.streams_active),
        )?;
        for (name, help, v) in [
            // Not `cloudstream_streams_total`: as a counter family that would share its name,
            // `cloudstream_streams`, with the gauge of open streams.
            (
                "cloudstream_streams_opened",
                "Streams opened.",
                c.streams_total,
            ),
            (
                "cloudstream_bytes_to_edge",
                "Stream bytes sent into tunnels.",
                c.bytes_to_edge,
            ),
            (
                "cloudstream_bytes_from_edge",
                "Stream bytes received from tunnels.",
                c.bytes_from_edge,
            ),
            (
                "cloudstream_tunnels_refused",
                "Tunnel connections refused (TLS, identity or handshake).",
                c.tunnels_refused,
            ),
            (
                "cloudstream_tunnel_identity_refused",
                "Tunnels refused for identity: another node's certificate, or a SessionInternalIP that is not the node's or is held by another node's tunnel.",
                c.tunnel_identity_refused,
            ),
            (
                "cloudstream_requests_refused",
                "Stream server requests answered with an error status.",
                c.requests_refused,
            ),
            (
                "cloudstream_stream_authorization_reviews",
                "SubjectAccessReviews the stream server sent (cached answers not counted).",
                c.authz_reviews,
            ),
            (
                "cloudstream_stream_authorization_denied",
                "Stream server requests refused by authorization (403).",
                c.authz_denied,
            ),
            (
                "cloudstream_streams_overflowed",
                "Streams ended because their client fell a whole stream budget behind an edge that cannot pace one stream (edgecore), or the edge overran its window.",
                c.streams_overflowed,
            ),
            (
                "cloudstream_streams_refused_per_node",
                "Stream requests refused (503) because the node had its maximum of open streams.",
                c.streams_refused_per_node,
            ),
            (
                "cloudstream_edge_response_timeouts",
                "Streams answered 504 because the edge never answered.",
                c.edge_response_timeouts,
            ),
            (
                "cloudstream_api_write_timeouts",
                "Streams dropped because the API server side stopped reading (write timeout).",
                c.api_write_timeouts,
            ),
            (
                "cloudstream_removes_for_unknown",
                "REMOVE answers sent for DATA on stream ids the cloud no longer had.",
                c.removes_for_unknown,
            ),
        ] {
            encode_one(out, name, help, counter(v))?;
        }
        Ok(())
    });
}

/// Admission on the edge-facing listeners (`websocket`, `https`, `stream`, `tunnel`): open and
/// unauthenticated connections now, and connections accepted, refused by limit and closed for
/// not authenticating in time.
pub fn listeners(metrics: &Metrics, sources: Vec<ListenerSource>) {
    metrics.register(|r| ListenerMetrics::new(sources).register(r));
}
