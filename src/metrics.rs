//! Prometheus collectors for the composed modules (rendered by [`crate::ops`]).

use beehive::Endpoint;
use cloudhub::HubHandle;
use cloudstream::CloudStreamHandle;

use crate::ops::{Exposition, Metrics};

/// A metric family read from one snapshot type: name, type, help, value.
type Family<T, V> = (&'static str, &'static str, &'static str, fn(&T) -> V);

/// Mailbox depth, capacity and throughput counters per module; sync latency totals.
pub fn bus(metrics: &Metrics, endpoint: Endpoint) {
    metrics.register(move |out: &mut Exposition| {
        let stats = endpoint.stats();
        let families: [Family<beehive::ModuleStatsSnapshot, f64>; 9] = [
            (
                "beehive_mailbox_depth",
                "gauge",
                "Messages waiting in the module's mailbox.",
                |m| m.depth as f64,
            ),
            (
                "beehive_mailbox_capacity",
                "gauge",
                "Mailbox capacity.",
                |m| m.capacity as f64,
            ),
            (
                "beehive_messages_received_total",
                "counter",
                "Messages the module took from its mailbox.",
                |m| m.received as f64,
            ),
            (
                "beehive_messages_sent_total",
                "counter",
                "Messages the module put into mailboxes.",
                |m| m.sent as f64,
            ),
            (
                "beehive_mailbox_rejected_full_total",
                "counter",
                "try_send refusals because the mailbox was full.",
                |m| m.rejected_full as f64,
            ),
            (
                "beehive_sync_timeouts_total",
                "counter",
                "Sync requests of the module that expired.",
                |m| m.sync_timeouts as f64,
            ),
            (
                "beehive_sync_late_responses_total",
                "counter",
                "Answers that arrived after their request expired.",
                |m| m.late_responses as f64,
            ),
            (
                "beehive_sync_duration_seconds_count",
                "counter",
                "Sync requests answered.",
                |m| m.sync_completed as f64,
            ),
            (
                "beehive_sync_duration_seconds_sum",
                "counter",
                "Time answered sync requests waited.",
                |m| m.sync_micros_total as f64 / 1e6,
            ),
        ];
        for (name, kind, help, value) in families {
            out.family(name, kind, help);
            for m in &stats.modules {
                out.sample(name, &[("module", &m.name)], value(m));
            }
        }
        out.family(
            "beehive_unmatched_responses_total",
            "counter",
            "Responses that matched no request.",
        );
        out.sample(
            "beehive_unmatched_responses_total",
            &[],
            stats.unmatched_responses as f64,
        );
    });
}

/// Connected nodes (KubeEdge's gauge name) and per-node delivery counters.
pub fn cloudhub(metrics: &Metrics, hub: HubHandle) {
    metrics.register(move |out: &mut Exposition| {
        out.family(
            "KubeEdge_CloudHub_connected_nodes",
            "gauge",
            "Edge nodes with a session on this cloudhub.",
        );
        out.sample(
            "KubeEdge_CloudHub_connected_nodes",
            &[],
            hub.connected_nodes() as f64,
        );
        let nodes = hub.all_node_stats();
        let families: [Family<cloudhub::NodeStats, u64>; 5] = [
            (
                "cloudhub_node_messages_sent_total",
                "counter",
                "Messages written to the node.",
                |s| s.sent,
            ),
            (
                "cloudhub_node_messages_acked_total",
                "counter",
                "Messages the node acknowledged.",
                |s| s.acked,
            ),
            (
                "cloudhub_node_messages_retried_total",
                "counter",
                "Re-sends of unacknowledged messages.",
                |s| s.retried,
            ),
            (
                "cloudhub_node_messages_dropped_total",
                "counter",
                "Messages dropped for the node.",
                |s| s.dropped,
            ),
            (
                "cloudhub_node_messages_received_total",
                "counter",
                "Messages received from the node.",
                |s| s.received,
            ),
        ];
        for (name, kind, help, value) in families {
            out.family(name, kind, help);
            for (node, s) in &nodes {
                out.sample(name, &[("node", node)], value(s) as f64);
            }
        }
        let s = hub.stats();
        out.family(
            "cloudhub_records_written_total",
            "counter",
            "ObjectSync records written on acknowledgement.",
        );
        out.sample(
            "cloudhub_records_written_total",
            &[],
            s.records_written as f64,
        );
        out.family(
            "cloudhub_records_failed_total",
            "counter",
            "ObjectSync writes that failed.",
        );
        out.sample(
            "cloudhub_records_failed_total",
            &[],
            s.records_failed as f64,
        );
    });
}

/// Request queues of the edgecontroller.
pub fn edgecontroller(metrics: &Metrics, ec: edgecontroller::EdgeControllerMetrics) {
    metrics.register(move |out: &mut Exposition| {
        let snap = ec.snapshot();
        out.family(
            "edgecontroller_queue_depth",
            "gauge",
            "Upstream requests waiting, by kind.",
        );
        for q in &snap.queues {
            out.sample(
                "edgecontroller_queue_depth",
                &[("kind", q.kind)],
                q.depth as f64,
            );
        }
        out.family(
            "edgecontroller_requests_handled_total",
            "counter",
            "Upstream requests handled, by kind.",
        );
        for q in &snap.queues {
            out.sample(
                "edgecontroller_requests_handled_total",
                &[("kind", q.kind)],
                q.handled as f64,
            );
        }
        out.family(
            "edgecontroller_requests_failed_total",
            "counter",
            "Upstream requests that failed, by kind.",
        );
        for q in &snap.queues {
            out.sample(
                "edgecontroller_requests_failed_total",
                &[("kind", q.kind)],
                q.failed as f64,
            );
        }
        out.family(
            "edgecontroller_downstream_sent_total",
            "counter",
            "Messages sent toward edges.",
        );
        out.sample(
            "edgecontroller_downstream_sent_total",
            &[],
            snap.downstream_sent as f64,
        );
    });
}

/// Reconcile counters of the synccontroller.
pub fn synccontroller(metrics: &Metrics, sc: synccontroller::SyncControllerMetrics) {
    metrics.register(move |out: &mut Exposition| {
        let s = sc.snapshot();
        for (name, help, v) in [
            (
                "synccontroller_updates_sent_total",
                "Newer objects re-sent to edges.",
                s.updates_sent,
            ),
            (
                "synccontroller_deletes_sent_total",
                "Deletes sent for gone objects.",
                s.deletes_sent,
            ),
            (
                "synccontroller_records_deleted_total",
                "ObjectSync records deleted.",
                s.records_deleted,
            ),
            (
                "synccontroller_passes_total",
                "Full reconcile passes.",
                s.passes,
            ),
        ] {
            out.family(name, "counter", help);
            out.sample(name, &[], v as f64);
        }
    });
}

/// Tunnels and streams of cloudstream.
pub fn cloudstream(metrics: &Metrics, stream: CloudStreamHandle) {
    metrics.register(move |out: &mut Exposition| {
        let c = stream.counters();
        for (name, kind, help, v) in [
            (
                "cloudstream_tunnels",
                "gauge",
                "Tunnels open now.",
                c.sessions,
            ),
            (
                "cloudstream_streams",
                "gauge",
                "Streams open now.",
                c.streams_active,
            ),
            (
                "cloudstream_streams_total",
                "counter",
                "Streams opened.",
                c.streams_total,
            ),
            (
                "cloudstream_bytes_to_edge_total",
                "counter",
                "Stream bytes sent into tunnels.",
                c.bytes_to_edge,
            ),
            (
                "cloudstream_bytes_from_edge_total",
                "counter",
                "Stream bytes received from tunnels.",
                c.bytes_from_edge,
            ),
        ] {
            out.family(name, kind, help);
            out.sample(name, &[], v as f64);
        }
    });
}
