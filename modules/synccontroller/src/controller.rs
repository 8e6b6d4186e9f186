//! The `synccontroller` beehive module.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::operation as hub_op;
use kubeedge_api::names::{CLOUDHUB, SYNCCONTROLLER};
use kubeedge_api::reliablesyncs::RecordCacheWriter;
use kubeedge_api::replicas::Ownership;
use tokio::sync::mpsc;
use tracing::{debug, info};

use crate::config::SyncControllerConfig;
use crate::metrics::{Counters, SyncControllerMetrics};
use crate::reconciler::{Reconciler, Settings};

/// Connection events waiting for the reconciler.
const CONNECTED_BACKLOG: usize = 65_536;

/// The synccontroller module: name and group `synccontroller`.
///
/// Keeps every edge converging on the latest objects: for each ObjectSync and
/// ClusterObjectSync (what an edge acknowledged) it sends the live object when it is newer,
/// and a delete when the object is gone or was recreated (never one that could remove the new
/// incarnation at the edge: a recreated Node's record is dropped silently); it removes records
/// of deleted nodes. Messages go to module `cloudhub` as `edgecontroller` (`devicecontroller` for
/// `devices.kubeedge.io` kinds). It receives cloudhub's `connected` events: a node that
/// connects is brought up to date at once rather than at the next pass.
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
    ownership: Option<Ownership>,
    /// The record cache to fill, shared with cloudhub; taken by the first start.
    records: Option<RecordCacheWriter>,
    /// Connection events to the running reconciler (replaced at each start).
    connected: mpsc::Sender<String>,
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
            ownership: None,
            records: None,
            connected: mpsc::channel(1).0,
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

    /// Shares node ownership with the other modules of this replica (several replicas serve
    /// the edge): records are then reconciled only for nodes connected here, a node is
    /// brought up to date as soon as it connects, and a node that moved here from another
    /// replica is also sent the pods no replica recorded while it was away.
    pub fn with_ownership(mut self, ownership: Ownership) -> Self {
        self.ownership = Some(ownership);
        self
    }

    /// Fills `records` (from [`kubeedge_api::reliablesyncs::record_cache`]) with the
    /// ObjectSyncs and ClusterObjectSyncs the controller watches anyway, so another module of
    /// this process (cloudhub) reads them without a watch or an API call of its own.
    pub fn with_record_cache(mut self, records: RecordCacheWriter) -> Self {
        self.records = Some(records);
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

impl Actor for SyncController {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let settings = Settings {
            interval: Duration::from_secs(self.config.reconcile_interval_seconds.max(1)),
            watch_timeout: self.watch_timeout,
            ownership: self.ownership.clone(),
        };
        let (tx, connected) = mpsc::channel(CONNECTED_BACKLOG);
        self.connected = tx;
        let reconciler = Reconciler::new(
            self.client.clone(),
            self.endpoint.clone(),
            settings,
            self.life.clone(),
            self.counters.clone(),
            connected,
            self.records.take(),
        );
        self.life.spawn(reconciler.run(self.life.token().clone()));
        info!(
            interval_s = self.config.reconcile_interval_seconds,
            "synccontroller started"
        );
    }
}

impl Handler<Message> for SyncController {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        // cloudhub's own event (its endpoint `cloudhub`), never an edge's message relayed by
        // cloudhub claiming to be one.
        let connected = msg.is_sent_by(CLOUDHUB) && msg.route.operation == hub_op::CONNECTED;
        match msg.route.resource.strip_prefix("node/") {
            Some(node) if connected && !node.is_empty() && !node.contains('/') => {
                if self.connected.try_send(node.to_owned()).is_err() {
                    debug!(
                        node,
                        "connection backlog full; the node is caught up by the next pass"
                    );
                }
            }
            _ => {
                debug!(msg_id = %msg.header.id, resource = %msg.route.resource, "synccontroller takes only cloudhub's connected events; ignored")
            }
        }
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
