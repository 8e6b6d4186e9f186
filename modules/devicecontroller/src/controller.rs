//! The `devicecontroller` beehive module.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::client::NodeClient;
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::DEVICECONTROLLER;
use kubeedge_api::queue::{
    DEFAULT_NODE_SHARE_DIVISOR, DEFAULT_NODE_SHARE_MIN, EnqueueError, Limit, Queue, QueueSnapshot,
    QueueStats, node_share,
};
use kubeedge_api::watch;
use tracing::{debug, info, warn};

use crate::authz::{Denials, Refusal, classify};
use crate::config::{DeviceControllerConfig, at_least_one};
use crate::downstream::Downstream;
use crate::shared::Shared;
use crate::upstream::Kind;

/// The devicecontroller module: name and group `devicecontroller`.
///
/// * **Downstream**: Devices bound to a node are announced to it (membership, model, device,
///   in that order); model edits are pushed to every node using the model.
/// * **Upstream**: devicetwin's twin and state reports are merge-patched into the Device's
///   DeviceStatus and confirmed; membership detail requests are answered (an extension: KubeEdge
///   ignores them).
/// * **Node authorization**, always on: a report is written only when the Device's
///   `spec.nodeName` is the node of the connection it came from (decided from the Device watch
///   cache), and only for well-formed names; anything else is refused before any API call,
///   logged, counted ([`DeviceControllerMetrics`]) and answered with a `403`/`400` status
///   in place of the `"OK"` confirmation. Resources of any other shape are refused unanswered.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use devicecontroller::{DeviceController, DeviceControllerConfig};
/// let bus = beehive::Bus::new();
/// let dc = DeviceController::new(DeviceControllerConfig::default(), bus.endpoint("devicecontroller"), client);
/// bus.register(dc).unwrap();
/// bus.start().unwrap();
/// # }
/// ```
pub struct DeviceController {
    config: DeviceControllerConfig,
    client: kube::Client,
    shared: Arc<Shared>,
    writers: Option<Writers>,
    life: Lifecycle,
    stats: Vec<(Kind, Arc<QueueStats>)>,
    queues: HashMap<&'static str, Queue>,
    watch_timeout: Option<Duration>,
    drain_timeout: Duration,
}

struct Writers {
    devices: watch::CacheWriter<kubeedge_api::devices::Device>,
    models: watch::CacheWriter<kubeedge_api::devices::DeviceModel>,
    statuses: watch::CacheWriter<kubeedge_api::devices::DeviceStatus>,
}

impl std::fmt::Debug for DeviceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceController")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DeviceController {
    /// A controller with `config`, sending with `endpoint` and talking to Kubernetes with
    /// `client` (no impersonation until [`DeviceController::with_impersonation`]).
    pub fn new(config: DeviceControllerConfig, endpoint: Endpoint, client: kube::Client) -> Self {
        let (devices, devices_r) = watch::cache();
        let (models, models_r) = watch::cache();
        let (statuses, statuses_r) = watch::cache();
        let shared = Arc::new(Shared {
            kube: NodeClient::new(client.clone(), false),
            endpoint,
            devices: devices_r,
            models: models_r,
            statuses: statuses_r,
            written: Default::default(),
            cache_wait: Duration::from_secs(10),
            denials: Default::default(),
            statuses_permitted: Arc::new(true.into()),
        });
        let workers = at_least_one(config.load.update_device_status_workers);
        let stats = Kind::ALL
            .iter()
            .map(|&k| {
                let capacity = match k {
                    Kind::Twin => config.buffer.update_device_twins,
                    Kind::State | Kind::MembershipDetail => config.buffer.update_device_states,
                };
                let capacity = at_least_one(capacity);
                // One node's reports cannot fill a queue every node shares.
                let share =
                    node_share(capacity, DEFAULT_NODE_SHARE_DIVISOR, DEFAULT_NODE_SHARE_MIN);
                (
                    k,
                    Arc::new(QueueStats::new(k.name(), capacity, workers).with_node_share(share)),
                )
            })
            .collect();
        DeviceController {
            config,
            client,
            shared,
            writers: Some(Writers {
                devices,
                models,
                statuses,
            }),
            life: Lifecycle::new(),
            stats,
            queues: HashMap::new(),
            watch_timeout: None,
            drain_timeout: Duration::from_secs(5),
        }
    }

    /// Write twin reports "as node" (cloudhub's `authorization.enable && !debug`).
    pub fn with_impersonation(mut self, on: bool) -> Self {
        // The caches are shared handles: earlier `synced()`/`metrics()` handles stay valid.
        let s = &self.shared;
        self.shared = Arc::new(Shared {
            kube: NodeClient::new(self.client.clone(), on),
            endpoint: s.endpoint.clone(),
            devices: s.devices.clone(),
            models: s.models.clone(),
            statuses: s.statuses.clone(),
            written: Default::default(),
            cache_wait: s.cache_wait,
            denials: s.denials.clone(),
            statuses_permitted: s.statuses_permitted.clone(),
        });
        self
    }

    /// Server-side timeout of each watch request (kube's default when unset).
    pub fn with_watch_timeout(mut self, timeout: Duration) -> Self {
        self.watch_timeout = Some(timeout);
        self
    }

    /// Counters of the three request queues and of refused edge requests. The handle stays
    /// valid across [`DeviceController::with_impersonation`].
    pub fn metrics(&self) -> DeviceControllerMetrics {
        DeviceControllerMetrics {
            queues: self.stats.iter().map(|(_, s)| s.clone()).collect(),
            denials: self.shared.denials.clone(),
        }
    }

    /// Whether Devices, DeviceModels and DeviceStatuses have been listed (DeviceStatuses count
    /// as listed when listing them is forbidden).
    pub fn is_synced(&self) -> bool {
        self.shared.devices.is_ready()
            && self.shared.models.is_ready()
            && self.shared.statuses.is_ready()
    }

    /// A handle that resolves once [`DeviceController::is_synced`].
    pub fn synced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let s = self.shared.clone();
        async move {
            s.models.wait_ready().await;
            s.statuses.wait_ready().await;
            s.devices.wait_ready().await;
        }
    }

    /// The background tasks: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for
    /// them to end.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }
}

/// A handle on the devicecontroller's counters; cheap to clone, readable from any thread.
#[derive(Debug, Clone)]
pub struct DeviceControllerMetrics {
    queues: Vec<Arc<QueueStats>>,
    denials: Arc<Denials>,
}

impl DeviceControllerMetrics {
    /// A point-in-time copy of every counter.
    pub fn snapshot(&self) -> DeviceControllerSnapshot {
        DeviceControllerSnapshot {
            queues: self.queues.iter().map(|s| s.snapshot()).collect(),
            denied: self.denials.snapshot(),
        }
    }
}

/// Counters of the devicecontroller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceControllerSnapshot {
    /// One entry per queue (`updateDeviceTwins`, `updateDeviceStatus`, `membershipDetail`).
    /// Each node may hold an eighth of a queue (at least 16 entries); what is refused is
    /// counted in `rejected` (queue full) or `rejected_over_share` (node over its share).
    pub queues: Vec<QueueSnapshot>,
    /// Edge requests refused by node authorization, as `(kind, count)` for every kind
    /// (`twinUpdate`, `deviceStateUpdate`, `membershipDetail`, and `unknown` for resources that
    /// are none of them), zeros included: the samples of
    /// `cloudcore_node_authorization_denied_total{module="devicecontroller",kind=…}`.
    pub denied: Vec<(&'static str, u64)>,
}

impl DeviceControllerSnapshot {
    /// Refusals of one kind (0 for a kind that does not exist).
    pub fn denied(&self, kind: &str) -> u64 {
        self.denied
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }
}

impl Actor for DeviceController {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        if let Some(w) = self.writers.take() {
            let downstream = Downstream::new(
                self.client.clone(),
                self.shared.clone(),
                w.devices,
                w.models,
                w.statuses,
                self.watch_timeout,
            );
            self.life.spawn(downstream.run(self.life.token().clone()));
        }
        // One limit across the three queues, as Go's shared workers.
        let limit = Limit::new(at_least_one(self.config.load.update_device_status_workers));
        for (kind, stats) in &self.stats {
            let (kind, shared) = (*kind, self.shared.clone());
            let queue = Queue::start(
                stats.clone(),
                limit.clone(),
                &self.life,
                self.drain_timeout,
                move |msg| {
                    let shared = shared.clone();
                    async move { shared.handle(kind, msg).await }
                },
                // Unanswered on stop: an answer would confirm a report that was not written.
                |_msg| async {},
            );
            self.queues.insert(kind.name(), queue);
        }
        info!("devicecontroller started");
    }
}

impl Handler<Message> for DeviceController {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        let Some(kind) = classify(&msg.route.resource).map(|r| r.kind) else {
            // Unanswered: without a kind there is no answer the edge would expect.
            let node = kubeedge_api::node_of(&msg.route.resource).unwrap_or_default();
            self.shared
                .record_refusal(&msg, None, node, "", &Refusal::UnknownRequest);
            return;
        };
        let Some(queue) = self.queues.get(kind.name()) else {
            return;
        };
        let node = kubeedge_api::node_of(&msg.route.resource)
            .unwrap_or_default()
            .to_owned();
        // No answer to a refusal: devicetwin takes any answer as a confirmation and would stop
        // retrying.
        match queue.try_enqueue_from(&node, msg) {
            Ok(()) => {}
            // Counted; the queue warns once per episode of a node over its share.
            Err(refused @ EnqueueError::OverShare { .. }) => {
                debug!(kind = kind.name(), node, %refused, "device request dropped; the edge retries");
            }
            Err(refused) => {
                warn!(kind = kind.name(), node, %refused, "device request dropped; the edge retries");
            }
        }
    }
}

impl Module for DeviceController {
    fn name(&self) -> &str {
        DEVICECONTROLLER
    }

    fn group(&self) -> &str {
        DEVICECONTROLLER
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
    }
}
