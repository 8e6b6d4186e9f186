//! The `edgecontroller` beehive module.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::client::NodeClient;
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::EDGECONTROLLER;
use kubeedge_api::status::StatusError;
use tracing::{debug, info};

use crate::config::EdgeControllerConfig;
use crate::downstream::{Downstream, DownstreamOptions, Readers};
use kubeedge_api::queue::EnqueueError;

use crate::authz::NodeAuthorizer;
use crate::metrics::EdgeControllerMetrics;
use crate::outbox::Outbox;
use crate::policy::EdgePolicy;
use crate::reply;
use crate::request_kind::{Route, route};
use crate::upstream::{Queues, Settings, Upstream};

/// Settings beyond `modules.edgeController`, from the rest of the cloudcore config.
#[derive(Debug, Clone)]
struct Options {
    impersonate: bool,
    cloudcore_ip: Option<String>,
    router: bool,
    watch_timeout: Option<Duration>,
    drain_timeout: Duration,
    cache_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            impersonate: false,
            cloudcore_ip: None,
            router: false,
            watch_timeout: None,
            drain_timeout: Duration::from_secs(5),
            cache_wait: Duration::from_secs(10),
        }
    }
}

/// The edgecontroller module: name and group `edgecontroller`.
///
/// * **Downstream**: watches edge Nodes, their Pods, ConfigMaps, Secrets (and Rules with a
///   router) and sends each change to exactly the edge nodes that need it, through module
///   `cloudhub` (`router` for rules).
/// * **Upstream**: requests from edge nodes arrive in the module's mailbox; each is put on the
///   bounded queue of its kind without waiting (a full queue answers `429`, and so does a
///   queue in which the request's node already holds its share, `nodeQueueShareDivisor`),
///   served by at most `load.*` concurrent handlers, and answered through `cloudhub`.
///
/// Background tasks start when the bus starts the module and stop on bus shutdown; await
/// [`EdgeController::lifecycle`]`.join(..)` after `bus.shutdown()` to let in-flight handlers
/// finish.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use edgecontroller::{EdgeController, EdgeControllerConfig};
/// let bus = beehive::Bus::new();
/// let ec = EdgeController::new(EdgeControllerConfig::default(), bus.endpoint("edgecontroller"), client)
///     .with_cloudcore_ip("10.0.0.1");
/// let metrics = ec.metrics();
/// bus.register(ec).unwrap();
/// bus.start().unwrap();
/// # let _ = metrics;
/// # }
/// ```
pub struct EdgeController {
    config: EdgeControllerConfig,
    endpoint: Endpoint,
    client: kube::Client,
    options: Options,
    metrics: EdgeControllerMetrics,
    life: Lifecycle,
    queues: Option<Queues>,
    out: Outbox,
    downstream: Option<Downstream>,
    readers: Readers,
}

impl std::fmt::Debug for EdgeController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeController")
            .field("config", &self.config)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl EdgeController {
    /// A controller with `config`, sending as `endpoint` (normally `bus.endpoint("edgecontroller")`)
    /// and talking to Kubernetes with `client` (cloudcore's identity). Defaults: no
    /// impersonation, no `cloudcore` annotation, no router. Node authorization
    /// ([`NodeAuthorizer`](crate::NodeAuthorizer)) is always on.
    pub fn new(config: EdgeControllerConfig, endpoint: Endpoint, client: kube::Client) -> Self {
        let metrics = EdgeControllerMetrics::for_config(&config);
        let out = Outbox::new(endpoint.clone(), metrics.clone());
        let (downstream, readers) = Downstream::new(client.clone(), out.clone());
        EdgeController {
            config,
            endpoint,
            client,
            options: Options::default(),
            metrics,
            life: Lifecycle::new(),
            queues: None,
            out,
            downstream: Some(downstream),
            readers,
        }
    }

    /// Applies `modules.cloudHub.nodeLimit` to the node-sized settings, as Go does at start
    /// ([`EdgeControllerConfig::adjust_for_node_limit`]).
    pub fn with_node_limit(mut self, node_limit: i32) -> Self {
        if self.config.adjust_for_node_limit(node_limit) {
            info!(
                node_limit,
                "edgecontroller queue sizes raised for the node limit"
            );
        }
        self.metrics = EdgeControllerMetrics::for_config(&self.config);
        self.out = Outbox::new(self.endpoint.clone(), self.metrics.clone());
        let (downstream, readers) = Downstream::new(self.client.clone(), self.out.clone());
        self.downstream = Some(downstream);
        self.readers = readers;
        self
    }

    /// Make requests "as node" with `Impersonate-User: system:node:<id>` (cloudhub's
    /// `authorization.enable && !authorization.debug`).
    pub fn with_impersonation(mut self, on: bool) -> Self {
        self.options.impersonate = on;
        self
    }

    /// The address written to the `cloudcore` annotation of registering and connecting nodes
    /// (see [`default_cloudcore_ip`]).
    pub fn with_cloudcore_ip(mut self, ip: impl Into<String>) -> Self {
        self.options.cloudcore_ip = Some(ip.into());
        self
    }

    /// A router module is registered (`modules.router.enable`): watch Rules and RuleEndpoints
    /// if their CRDs are installed, and send them to module `router`.
    pub fn with_router(mut self, on: bool) -> Self {
        self.options.router = on;
        self
    }

    /// Server-side timeout of each watch request (kube's default, 290 s, when unset). Shorter
    /// values re-establish watches more often; useful behind proxies that cut long requests.
    pub fn with_watch_timeout(mut self, timeout: Duration) -> Self {
        self.options.watch_timeout = Some(timeout);
        self
    }

    /// How long in-flight handlers get to finish on shutdown (default 5 s).
    pub fn with_drain_timeout(mut self, timeout: Duration) -> Self {
        self.options.drain_timeout = timeout;
        self
    }

    /// How long a cache-backed query waits for the cache's first list before asking the API
    /// directly (default 10 s).
    pub fn with_cache_wait(mut self, wait: Duration) -> Self {
        self.options.cache_wait = wait;
        self
    }

    /// The counters (queue depth, handled/failed/rejected per kind, sends).
    pub fn metrics(&self) -> EdgeControllerMetrics {
        self.metrics.clone()
    }

    /// A handle telling when the watch caches (edge nodes, their pods, ConfigMaps, Secrets)
    /// have completed their first list: a readiness signal.
    pub fn synced(&self) -> Synced {
        Synced(self.readers.clone())
    }

    /// The background tasks: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for
    /// watches to stop and in-flight handlers to finish.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }
}

/// Whether the edgecontroller's watch caches have completed their first list. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Synced(Readers);

impl Synced {
    /// True once edge nodes, their pods, ConfigMaps and Secrets have been listed.
    pub fn is_synced(&self) -> bool {
        let r = &self.0;
        r.nodes.is_ready() && r.pods.is_ready() && r.configmaps.is_ready() && r.secrets.is_ready()
    }

    /// Waits until [`Synced::is_synced`].
    pub async fn wait(&self) {
        let r = &self.0;
        r.nodes.wait_ready().await;
        r.pods.wait_ready().await;
        r.configmaps.wait_ready().await;
        r.secrets.wait_ready().await;
    }
}

/// This host's address as KubeEdge picks it for the `cloudcore` annotation: the address of
/// the interface holding the default route (found without sending anything), else the first
/// address the host name resolves to.
pub fn default_cloudcore_ip() -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    if socket.connect("8.8.8.8:53").is_ok()
        && let Ok(addr) = socket.local_addr()
        && !addr.ip().is_unspecified()
    {
        return Some(addr.ip().to_string());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    std::net::ToSocketAddrs::to_socket_addrs(&(host.trim(), 0))
        .ok()?
        .next()
        .map(|a| a.ip().to_string())
}

impl Actor for EdgeController {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let readers = self.readers.clone();
        if let Some(downstream) = self.downstream.take() {
            let options = DownstreamOptions {
                router: self.options.router,
                watch_timeout: self.options.watch_timeout,
            };
            self.life
                .spawn(downstream.run(options, self.life.token().clone()));
        }
        let upstream = Arc::new(Upstream {
            kube: NodeClient::new(self.client.clone(), self.options.impersonate),
            own: self.client.clone(),
            authz: NodeAuthorizer::new(
                readers.pods.clone(),
                readers.nodes.clone(),
                readers.locations.clone(),
            ),
            policy: EdgePolicy::new(
                readers.pods.clone(),
                readers.nodes.clone(),
                readers.locations.clone(),
                self.client.clone(),
                self.options.cloudcore_ip.clone(),
                self.options.cache_wait,
            ),
            metrics: self.metrics.clone(),
            out: self.out.clone(),
            nodes: readers.nodes,
            pods: readers.pods,
            configmaps: readers.configmaps,
            secrets: readers.secrets,
            settings: Settings {
                node_update_frequency: Duration::from_secs(
                    self.config.node_update_frequency.max(0) as u64,
                ),
                cloudcore_ip: self.options.cloudcore_ip.clone(),
                cache_wait: self.options.cache_wait,
            },
        });
        self.queues = Some(Queues::start(
            upstream,
            &self.metrics.0.queues,
            &self.life,
            self.options.drain_timeout,
        ));
        info!(
            impersonate = self.options.impersonate,
            router = self.options.router,
            "edgecontroller started"
        );
    }
}

impl EdgeController {
    fn answer_soon(&self, resp: Message) {
        let out = self.out.clone();
        self.life.spawn(async move {
            out.send(resp).await;
        });
    }
}

impl Handler<Message> for EdgeController {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        match route(&msg) {
            Route::Queue(kind) => {
                let Some(queues) = &self.queues else { return };
                let Err(refused) = queues.try_enqueue(kind, msg) else {
                    return;
                };
                let (msg, err) = match refused {
                    EnqueueError::Full(msg) => {
                        // Counted in the metrics; a warning per request would flood the log
                        // exactly when the controller is overloaded.
                        debug!(kind = kind.name(), msg_id = %msg.header.id, resource = %msg.route.resource, "queue full, request refused");
                        let err = StatusError::too_many_requests(format!(
                            "edgecontroller: the {} queue is full",
                            kind.name()
                        ));
                        (msg, err)
                    }
                    EnqueueError::OverShare { msg, share } => {
                        // Counted; the queue warns once per episode of a node over its share.
                        let node = kubeedge_api::node_of(&msg.route.resource).unwrap_or_default();
                        debug!(kind = kind.name(), node, share, msg_id = %msg.header.id, "node over its share of the queue, request refused");
                        let err = StatusError::too_many_requests(format!(
                            "edgecontroller: node {node:?} already has {share} {} requests queued or running",
                            kind.name()
                        ));
                        (msg, err)
                    }
                    EnqueueError::Stopped(msg) => (
                        msg,
                        StatusError::new(
                            503,
                            "ServiceUnavailable",
                            "edgecontroller is shutting down",
                        ),
                    ),
                };
                if let Some(resp) = Upstream::error_reply(kind, &msg, &err) {
                    self.answer_soon(resp);
                }
            }
            Route::Ignore(reason) => {
                self.metrics.ignored();
                debug!(reason, msg_id = %msg.header.id, resource = %msg.route.resource, operation = %msg.route.operation, "message ignored");
                if msg.header.sync {
                    // The sender waits for an answer: say why it will not come.
                    let err = StatusError::bad_request(format!(
                        "edgecontroller: {reason}: {} {}",
                        msg.route.operation, msg.route.resource
                    ));
                    self.answer_soon(reply::raw_error(&msg, msg.route.resource.clone(), &err));
                }
            }
        }
    }
}

impl Module for EdgeController {
    fn name(&self) -> &str {
        EDGECONTROLLER
    }

    fn group(&self) -> &str {
        EDGECONTROLLER
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        info!("edgecontroller stopping");
        self.life.stop();
    }
}
