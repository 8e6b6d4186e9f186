//! The `synccontroller` beehive module.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::SYNCCONTROLLER;
use tracing::{debug, info};

use crate::config::SyncControllerConfig;
use crate::reconciler::{Counters, Reconciler, Settings};

/// The synccontroller module: name and group `synccontroller`.
///
/// Keeps every edge converging on the latest objects: for each ObjectSync and
/// ClusterObjectSync (what an edge acknowledged) it sends the live object when it is newer,
/// and a delete when the object is gone or was recreated (never one that could remove the new
/// incarnation at the edge: a recreated Node's record is dropped silently); it removes records
/// of deleted nodes. Messages go to module `cloudhub` as `edgecontroller` (`devicecontroller` for
/// `devices.kubeedge.io` kinds). It receives nothing.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use synccontroller::{SyncController, SyncControllerConfig};
/// let bus = beehive::Bus::new();
/// bus.register(SyncController::new(SyncControllerConfig::default(), bus.endpoint("synccontroller"), client)).unwrap();
/// bus.start().unwrap();
/// # }
/// ```
pub struct SyncController {
    config: SyncControllerConfig,
    endpoint: Endpoint,
    client: kube::Client,
    life: Lifecycle,
    counters: Arc<Counters>,
    watch_timeout: Option<Duration>,
}

impl std::fmt::Debug for SyncController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncController")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SyncController {
    /// A controller with `config`, sending with `endpoint` (the message source is set per
    /// message) and reading Kubernetes with `client`.
    pub fn new(config: SyncControllerConfig, endpoint: Endpoint, client: kube::Client) -> Self {
        SyncController {
            config,
            endpoint,
            client,
            life: Lifecycle::new(),
            counters: Arc::default(),
            watch_timeout: None,
        }
    }

    /// Server-side timeout of each watch request (kube's default when unset).
    pub fn with_watch_timeout(mut self, timeout: Duration) -> Self {
        self.watch_timeout = Some(timeout);
        self
    }

    /// The counters.
    pub fn metrics(&self) -> SyncControllerMetrics {
        SyncControllerMetrics(self.counters.clone())
    }

    /// The background tasks: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for
    /// them to end.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }
}

/// A handle on the synccontroller's counters.
#[derive(Debug, Clone)]
pub struct SyncControllerMetrics(Arc<Counters>);

/// Counters of the synccontroller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncMetricsSnapshot {
    /// Newer objects sent.
    pub updates_sent: u64,
    /// Deletes sent for gone or recreated objects.
    pub deletes_sent: u64,
    /// Records deleted (of deleted nodes, of previous incarnations, or unusable).
    pub records_deleted: u64,
    /// Records of a previous incarnation of their object (deleted and recreated under the
    /// same name) dropped without sending the edge anything: the node's own Node, and other
    /// kinds the edge deletes by name once the new incarnation is recorded for the node.
    pub superseded_dropped: u64,
    /// Full reconcile passes.
    pub passes: u64,
}

impl SyncControllerMetrics {
    /// A point-in-time copy.
    pub fn snapshot(&self) -> SyncMetricsSnapshot {
        let c = &self.0;
        SyncMetricsSnapshot {
            updates_sent: c.updates.load(Ordering::Relaxed),
            deletes_sent: c.deletes.load(Ordering::Relaxed),
            records_deleted: c.records_deleted.load(Ordering::Relaxed),
            superseded_dropped: c.superseded_dropped.load(Ordering::Relaxed),
            passes: c.passes.load(Ordering::Relaxed),
        }
    }
}

impl Actor for SyncController {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let settings = Settings {
            interval: Duration::from_secs(self.config.reconcile_interval_seconds.max(1)),
            watch_timeout: self.watch_timeout,
        };
        let reconciler = Reconciler::new(
            self.client.clone(),
            self.endpoint.clone(),
            settings,
            self.life.clone(),
            self.counters.clone(),
        );
        self.life.spawn(reconciler.run(self.life.stop_signal()));
        info!(
            interval_s = self.config.reconcile_interval_seconds,
            "synccontroller started"
        );
    }
}

impl Handler<Message> for SyncController {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        debug!(msg_id = %msg.header.id, resource = %msg.route.resource, "synccontroller takes no messages; ignored");
    }
}

impl Module for SyncController {
    fn name(&self) -> &str {
        SYNCCONTROLLER
    }

    fn group(&self) -> &str {
        SYNCCONTROLLER
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
    }
}
