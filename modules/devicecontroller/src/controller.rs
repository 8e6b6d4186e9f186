//! The `devicecontroller` beehive module.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::client::NodeClient;
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::DEVICECONTROLLER;
use kubeedge_api::queue::{EnqueueError, Limit, Queue};
use kubeedge_api::watch;
use tracing::{debug, info, warn};

use crate::authz::{Refusal, classify};
use crate::config::{DeviceControllerConfig, at_least_one};
use crate::downstream::Downstream;
use crate::metrics::DeviceControllerMetrics;
use crate::policy::DevicePolicy;
use crate::shared::Shared;

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
    metrics: DeviceControllerMetrics,
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
    /// `client`. Twin and state reports are written with `client`'s identity once the node
    /// was found to hold the Device (the Node authorizer does not know Devices, so no
    /// impersonation would let the cluster decide them).
    pub fn new(config: DeviceControllerConfig, endpoint: Endpoint, client: kube::Client) -> Self {
        let (devices, devices_r) = watch::cache();
        let (models, models_r) = watch::cache();
        let (statuses, statuses_r) = watch::cache();
        let metrics = DeviceControllerMetrics::for_config(&config);
        let shared = Arc::new(Shared {
            kube: NodeClient::new(client.clone(), false),
            policy: DevicePolicy::new(devices_r.clone(), client.clone()),
            own: client.clone(),
            endpoint,
            devices: devices_r,
            models: models_r,
            statuses: statuses_r,
            written: Default::default(),
            cache_wait: Duration::from_secs(10),
            denials: metrics.denials.clone(),
            statuses_permitted: Arc::new(true.into()),
        });
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
            metrics,
            queues: HashMap::new(),
            watch_timeout: None,
            drain_timeout: Duration::from_secs(5),
        }
    }

    /// Server-side timeout of each watch request (kube's default when unset).
    pub fn with_watch_timeout(mut self, timeout: Duration) -> Self {
        self.watch_timeout = Some(timeout);
        self
    }

    /// Counters of the three request queues and of refused edge requests.
    pub fn metrics(&self) -> DeviceControllerMetrics {
        self.metrics.clone()
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
        for (kind, stats) in &self.metrics.queues {
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
