//! Prometheus collectors for the composed modules (rendered by [`crate::ops`]).

use beehive::Endpoint;
use cloudhub::HubHandle;
use cloudstream::CloudStreamHandle;
use kubeedge_api::listener::ListenerStats;

use crate::ops::{Exposition, Metrics};

/// A metric family read from one snapshot type: name, type, help, value.
type Family<T> = (&'static str, &'static str, &'static str, fn(&T) -> f64);

/// Writes each family in turn, with one sample per item labelled `label` = the item's name.
fn per_item<'a, T: 'a>(
    out: &mut Exposition,
    families: &[Family<T>],
    label: &str,
    items: impl Iterator<Item = (&'a str, &'a T)> + Clone,
) {
    for (name, kind, help, value) in families {
        out.family(name, kind, help);
        for (item, t) in items.clone() {
            out.sample(name, &[(label, item)], value(t));
        }
    }
}

/// Writes a family with its one unlabelled sample.
fn single(out: &mut Exposition, name: &str, kind: &str, help: &str, value: f64) {
    out.family(name, kind, help);
    out.sample(name, &[], value);
}

/// Mailbox depth, capacity and throughput counters per module; sync latency totals.
pub fn bus(metrics: &Metrics, endpoint: Endpoint) {
    metrics.register(move |out: &mut Exposition| {
        let stats = endpoint.stats();
        let families: [Family<beehive::ModuleStatsSnapshot>; 10] = [
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
                "beehive_mailbox_rejected_stopped_total",
                "counter",
                "Sends refused because the module had stopped or was removed.",
                |m| m.rejected_stopped as f64,
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
        let modules = stats.modules.iter().map(|m| (m.name.as_str(), m));
        per_item(out, &families, "module", modules);
        single(
            out,
            "beehive_unmatched_responses_total",
            "counter",
            "Responses that matched no request.",
            stats.unmatched_responses as f64,
        );
    });
}

/// Connected nodes (KubeEdge's gauge name) and per-node delivery counters.
pub fn cloudhub(metrics: &Metrics, hub: HubHandle) {
    metrics.register(move |out: &mut Exposition| {
        single(
            out,
            "KubeEdge_CloudHub_connected_nodes",
            "gauge",
            "Edge nodes with a session on this cloudhub.",
            hub.connected_nodes() as f64,
        );
        single(
            out,
            "cloudhub_connection_tasks",
            "gauge",
            "Connection tasks running: one per upgraded WebSocket, until its socket closes.",
            hub.stats().connection_tasks as f64,
        );
        let families: [Family<cloudhub::NodeStats>; 6] = [
            (
                "cloudhub_node_messages_sent_total",
                "counter",
                "Messages written to the node.",
                |s| s.sent as f64,
            ),
            (
                "cloudhub_node_messages_acked_total",
                "counter",
                "Messages the node acknowledged.",
                |s| s.acked as f64,
            ),
            (
                "cloudhub_node_messages_retried_total",
                "counter",
                "Re-sends of unacknowledged messages.",
                |s| s.retried as f64,
            ),
            (
                "cloudhub_node_messages_received_total",
                "counter",
                "Messages received from the node.",
                |s| s.received as f64,
            ),
            (
                "cloudhub_node_backlog_bytes",
                "gauge",
                "Bytes queued toward the node and not yet written (replies included).",
                |s| s.backlog as f64,
            ),
            (
                "cloudhub_node_backlog_peak_bytes",
                "gauge",
                "Highest backlog of any one connection of the node.",
                |s| s.backlog_peak as f64,
            ),
        ];
        // Every node seen since start: drop counters must not vanish when a node disconnects.
        let nodes = hub.known_node_stats();
        per_item(
            out,
            &families,
            "node",
            nodes.iter().map(|(node, s)| (node.as_str(), s)),
        );
        let name = "cloudhub_node_messages_dropped_total";
        out.family(
            name,
            "counter",
            "Messages dropped for the node, by reason (stale and stale_node_delete lose nothing; queue_full and offline keep an ObjectSync record for the sync loop).",
        );
        // Only reasons that happened: ten zero series per node would dwarf the rest.
        for (node, s) in &nodes {
            for (reason, n) in s.drops.iter().filter(|(_, n)| *n > 0) {
                out.sample(name, &[("node", node), ("reason", reason.as_str())], n as f64);
            }
        }
        let s = hub.stats();
        let name = "cloudhub_messages_dropped_total";
        out.family(
            name,
            "counter",
            "Messages dropped by the hub, by reason (all nodes, and messages that name no node).",
        );
        for (reason, n) in s.drops.iter() {
            out.sample(name, &[("reason", reason.as_str())], n as f64);
        }
        single(
            out,
            "cloudhub_records_written_total",
            "counter",
            "ObjectSync records written on acknowledgement.",
            s.records_written as f64,
        );
        single(
            out,
            "cloudhub_records_failed_total",
            "counter",
            "ObjectSync writes that failed.",
            s.records_failed as f64,
        );
        single(
            out,
            "cloudhub_messages_held_elsewhere_total",
            "counter",
            "Messages for nodes another replica holds, left to that replica.",
            s.held_elsewhere as f64,
        );
        single(
            out,
            "cloudhub_token_refused_connected_total",
            "counter",
            "Bootstrap-token certificate requests refused because the node was connected.",
            s.token_refused_connected as f64,
        );
        single(
            out,
            "cloudhub_revoked_certificates_refused_total",
            "counter",
            "Handshakes and renewals refused because the certificate is revoked.",
            s.revoked_refused as f64,
        );
        let c = hub.cert_server_stats();
        for (name, help, v) in [
            (
                "cloudhub_certserver_unauthorized_total",
                "Certificate-server requests refused from their head alone (401/403), body unread.",
                c.unauthorized,
            ),
            (
                "cloudhub_certserver_request_timeouts_total",
                "Certificate-server requests whose body did not arrive within https.requestTimeoutSeconds (408).",
                c.request_timeouts,
            ),
            (
                "cloudhub_certserver_too_large_total",
                "Certificate-server requests refused for their body size (413).",
                c.too_large,
            ),
            (
                "cloudhub_certserver_rate_limited_total",
                "/node/{name} checks refused by their source address's rate limit (429).",
                c.rate_limited,
            ),
        ] {
            single(out, name, "counter", help, v as f64);
        }
        single(
            out,
            "cloudhub_revoked_nodes",
            "gauge",
            "Deleted nodes whose earlier certificates are revoked.",
            s.revoked_nodes as f64,
        );
    });
}

/// One controller's upstream request queues, as `<module>_queue_depth`,
/// `<module>_requests_{handled,failed}_total` and `<module>_requests_rejected_total` labelled
/// by kind and reason (`queue_full`: the queue was full; `node_share`: the request's node
/// already held its share of the queue).
fn request_queues(
    out: &mut Exposition,
    module: &str,
    queues: &[kubeedge_api::queue::QueueSnapshot],
) {
    let families: [Family<kubeedge_api::queue::QueueSnapshot>; 3] = [
        (
            "_queue_depth",
            "gauge",
            "Upstream requests waiting, by kind.",
            |q| q.depth as f64,
        ),
        (
            "_requests_handled_total",
            "counter",
            "Upstream requests handled, by kind.",
            |q| q.handled as f64,
        ),
        (
            "_requests_failed_total",
            "counter",
            "Upstream requests that failed, by kind.",
            |q| q.failed as f64,
        ),
    ];
    for (suffix, kind, help, value) in families {
        let name = format!("{module}{suffix}");
        out.family(&name, kind, help);
        for q in queues {
            out.sample(&name, &[("kind", q.kind)], value(q));
        }
    }
    let name = format!("{module}_requests_rejected_total");
    out.family(
        &name,
        "counter",
        "Upstream requests refused at enqueueing, by kind and reason (queue_full, node_share).",
    );
    for q in queues {
        out.sample(
            &name,
            &[("kind", q.kind), ("reason", "queue_full")],
            q.rejected as f64,
        );
        out.sample(
            &name,
            &[("kind", q.kind), ("reason", "node_share")],
            q.rejected_over_share as f64,
        );
    }
}

/// Request queues of the edgecontroller, and what it refused before queueing.
pub fn edgecontroller(metrics: &Metrics, ec: edgecontroller::EdgeControllerMetrics) {
    metrics.register(move |out: &mut Exposition| {
        let snap = ec.snapshot();
        request_queues(out, "edgecontroller", &snap.queues);
        single(
            out,
            "edgecontroller_downstream_sent_total",
            "counter",
            "Messages sent toward edges.",
            snap.downstream_sent as f64,
        );
        single(
            out,
            "edgecontroller_pod_status_lists_refused_total",
            "counter",
            "Legacy podstatus lists refused whole (413) for holding more statuses than the node can run pods.",
            snap.pod_status_lists_refused as f64,
        );
    });
}

/// Request queues of the devicecontroller.
pub fn devicecontroller(metrics: &Metrics, dc: devicecontroller::DeviceControllerMetrics) {
    metrics.register(move |out: &mut Exposition| {
        request_queues(out, "devicecontroller", &dc.snapshot().queues);
    });
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
    metrics.register(move |out: &mut Exposition| {
        let name = "cloudcore_node_authorization_denied_total";
        out.family(
            name,
            "counter",
            "Edge requests refused by node authorization, by module and kind.",
        );
        for (module, read) in &sources {
            for (kind, n) in read() {
                out.sample(name, &[("module", module), ("kind", kind)], n as f64);
            }
        }
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
            (
                "synccontroller_superseded_dropped_total",
                "Records of a previous incarnation of their object (deleted and recreated under the same name) dropped without sending the edge anything.",
                s.superseded_dropped,
            ),
        ] {
            single(out, name, "counter", help, v as f64);
        }
    });
}

/// Requests, listeners and caches of dynamiccontroller.
pub fn dynamiccontroller(metrics: &Metrics, dc: dynamiccontroller::DynamicControllerMetrics) {
    metrics.register(move |out: &mut Exposition| {
        let s = dc.snapshot();
        let name = "dynamiccontroller_requests_total";
        out.family(
            name,
            "counter",
            "metaServer requests answered, by verb and outcome (approved, rejected).",
        );
        for (verb, outcome, n) in &s.requests {
            out.sample(name, &[("verb", verb), ("outcome", outcome)], *n as f64);
        }
        for (name, help, v) in [
            (
                "dynamiccontroller_listeners",
                "Edge watch listeners registered.",
                s.listeners,
            ),
            (
                "dynamiccontroller_listener_nodes",
                "Nodes holding at least one watch listener.",
                s.listener_nodes,
            ),
            (
                "dynamiccontroller_informers",
                "Resource types cached for edge watches (one API server watch each).",
                s.informers,
            ),
        ] {
            single(out, name, "gauge", help, v as f64);
        }
        for (name, help, v) in [
            (
                "dynamiccontroller_events_sent_total",
                "Watch events handed to cloudhub.",
                s.events_sent,
            ),
            (
                "dynamiccontroller_events_failed_total",
                "Watch events cloudhub did not take.",
                s.events_failed,
            ),
        ] {
            single(out, name, "counter", help, v as f64);
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
            (
                "cloudstream_tunnels_refused_total",
                "counter",
                "Tunnel connections refused (TLS, identity or handshake).",
                c.tunnels_refused,
            ),
            (
                "cloudstream_tunnel_identity_refused_total",
                "counter",
                "Tunnels refused for identity: another node's certificate, or a SessionInternalIP that is not the node's or is held by another node's tunnel.",
                c.tunnel_identity_refused,
            ),
            (
                "cloudstream_requests_refused_total",
                "counter",
                "Stream server requests answered with an error status.",
                c.requests_refused,
            ),
            (
                "cloudstream_stream_authorization_reviews_total",
                "counter",
                "SubjectAccessReviews the stream server sent (cached answers not counted).",
                c.authz_reviews,
            ),
            (
                "cloudstream_stream_authorization_denied_total",
                "counter",
                "Stream server requests refused by authorization (403).",
                c.authz_denied,
            ),
            (
                "cloudstream_streams_overflowed_total",
                "counter",
                "Streams ended because their client fell a whole stream budget behind an edge that cannot pace one stream (edgecore), or the edge overran its window.",
                c.streams_overflowed,
            ),
            (
                "cloudstream_streams_refused_per_node_total",
                "counter",
                "Stream requests refused (503) because the node had its maximum of open streams.",
                c.streams_refused_per_node,
            ),
            (
                "cloudstream_edge_response_timeouts_total",
                "counter",
                "Streams answered 504 because the edge never answered.",
                c.edge_response_timeouts,
            ),
            (
                "cloudstream_api_write_timeouts_total",
                "counter",
                "Streams dropped because the API server side stopped reading (write timeout).",
                c.api_write_timeouts,
            ),
            (
                "cloudstream_removes_for_unknown_total",
                "counter",
                "REMOVE answers sent for DATA on stream ids the cloud no longer had.",
                c.removes_for_unknown,
            ),
        ] {
            single(out, name, kind, help, v as f64);
        }
    });
}

/// Reads the admission gauges and counters of some listeners (one module's servers).
pub type ListenerSource = Box<dyn Fn() -> Vec<ListenerStats> + Send + Sync>;

/// Admission on the edge-facing listeners (`websocket`, `https`, `stream`, `tunnel`): open and
/// unauthenticated connections now, and connections accepted, refused by limit and closed for
/// not authenticating in time.
pub fn listeners(metrics: &Metrics, sources: Vec<ListenerSource>) {
    if sources.is_empty() {
        return;
    }
    metrics.register(move |out: &mut Exposition| {
        let stats: Vec<ListenerStats> = sources.iter().flat_map(|read| read()).collect();
        let families: [Family<ListenerStats>; 4] = [
            (
                "cloudcore_listener_connections",
                "gauge",
                "Connections open now, authenticated or not.",
                |s| s.open as f64,
            ),
            (
                "cloudcore_listener_handshakes_in_progress",
                "gauge",
                "Connections not yet authenticated (TLS handshake or request head in progress).",
                |s| s.handshaking as f64,
            ),
            (
                "cloudcore_listener_accepted_total",
                "counter",
                "Connections admitted.",
                |s| s.accepted as f64,
            ),
            (
                "cloudcore_listener_preauth_timeouts_total",
                "counter",
                "Connections closed for not authenticating within preAuthTimeoutSeconds.",
                |s| s.timed_out as f64,
            ),
        ];
        per_item(
            out,
            &families,
            "listener",
            stats.iter().map(|s| (s.listener, s)),
        );
        let name = "cloudcore_listener_refused_total";
        out.family(
            name,
            "counter",
            "Connections refused on accept, by listener and limit (connections: maxConnections, handshakes: maxHandshakes, per_ip: maxUnauthenticatedPerIP, files: the process's open-file limit less a reserve).",
        );
        for s in &stats {
            for (reason, n) in [
                ("connections", s.refused_connections),
                ("handshakes", s.refused_handshakes),
                ("per_ip", s.refused_per_ip),
                ("files", s.refused_files),
            ] {
                out.sample(name, &[("listener", s.listener), ("reason", reason)], n as f64);
            }
        }
    });
}
