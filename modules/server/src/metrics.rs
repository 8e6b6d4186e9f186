//! What each composed module adds to the process's one Prometheus registry
//! ([`crate::ops::Metrics`], served by [`crate::ops`]).
//!
//! Every module crate owns its prometheus-client metrics and registers them itself. beehive is
//! a runtime whose `bus.stats()` code reads: a collector here renders it at scrape time.

use std::fmt;

use beehive::{Endpoint, ModuleStatsSnapshot, SYNC_BUCKETS};
use cloudhub::HubHandle;
use cloudstream::CloudStreamHandle;
use kubeedge_api::metrics::{
    ListenerMetrics, ListenerSource, counter, encode_family, encode_one, gauge,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::ops::Metrics;

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

/// `cloudcore_build_info{version, git_commit, build_date, rust_version} 1`, as Kubernetes
/// components export `kubernetes_build_info`.
pub fn build_info(metrics: &Metrics) {
    use crate::build_info::{BUILD_DATE, GIT_COMMIT, RUSTC_VERSION, VERSION};
    let info = prometheus_client::metrics::info::Info::new(vec![
        ("version", VERSION),
        ("git_commit", GIT_COMMIT),
        ("build_date", BUILD_DATE),
        ("rust_version", RUSTC_VERSION),
    ]);
    metrics.register(|r| {
        r.register(
            "cloudcore_build",
            "The version and build of this cloudcore; the value is always 1.",
            info,
        )
    });
}

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

/// Connected nodes (KubeEdge's gauge name), per-node delivery counters, drops and refusals:
/// cloudhub's own metrics.
pub fn cloudhub(metrics: &Metrics, hub: HubHandle) {
    metrics.register(|r| hub.metrics().register(r));
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

/// Node jobs: jobs by phase, tasks sent, node results, reports, status writes, durations.
pub fn taskmanager(metrics: &Metrics, tm: taskmanager::TaskManagerMetrics) {
    metrics.register(|r| tm.register(r));
}

/// Volume requests on the Unix socket.
pub fn udsserver(metrics: &Metrics, uds: udsserver::UdsMetrics) {
    metrics.register(|r| uds.register(r));
}

/// REST calls, edge messages and rules of the router.
pub fn router(metrics: &Metrics, router: router::RouterMetrics) {
    metrics.register(|r| router.register(r));
}

/// Reconciles and messages of the policycontroller.
pub fn policycontroller(metrics: &Metrics, pc: policycontroller::PolicyControllerMetrics) {
    metrics.register(|r| pc.register(r));
}

/// Approved and pending certificate requests of the CSR approver.
pub fn csrapprover(metrics: &Metrics, approver: csrapprover::CsrApproverMetrics) {
    metrics.register(|r| approver.register(r));
}

/// Reconcile counters of the synccontroller.
pub fn synccontroller(metrics: &Metrics, sc: synccontroller::SyncControllerMetrics) {
    metrics.register(|r| sc.register(r));
}

/// Requests, listeners and caches of dynamiccontroller.
pub fn dynamiccontroller(metrics: &Metrics, dc: dynamiccontroller::DynamicControllerMetrics) {
    metrics.register(|r| dc.register(r));
}

/// Tunnels and streams of cloudstream: its own metrics.
pub fn cloudstream(metrics: &Metrics, stream: CloudStreamHandle) {
    metrics.register(|r| stream.metrics().register(r));
}

/// Admission on the edge-facing listeners (`websocket`, `https`, `stream`, `tunnel`): open and
/// unauthenticated connections now, and connections accepted, refused by limit and closed for
/// not authenticating in time.
pub fn listeners(metrics: &Metrics, sources: Vec<ListenerSource>) {
    metrics.register(|r| ListenerMetrics::new(sources).register(r));
}
