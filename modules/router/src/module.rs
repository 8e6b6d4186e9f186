//! The `router` beehive module: learns rules from edgecontroller, takes the edges' uploads and
//! answers, re-subscribes nodes that connect, and runs the REST listener.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use actix::{Actor, Context, Handler};
use actix_web::dev::ServerHandle;
use beehive::constants::operation;
use beehive::{Endpoint, Message, Module};
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::{self, operation as hub_op};
use kubeedge_api::replicas::Ownership;
use kubeedge_api::rules::{Rule, RuleEndpoint};
use tracing::{debug, info, warn};

use crate::config::RouterConfig;
use crate::metrics::{EdgeResult, RouterMetrics};
use crate::nodes;
use crate::route::RuleKey;
use crate::shared::Shared;
use crate::wire;

/// Why the router could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `modules.router` holds a value that cannot work.
    #[error("modules.router.{0}")]
    Config(String),
    /// The REST listener's address could not be bound.
    #[error("router listener {addr}: {source}")]
    Bind {
        /// `address:port`.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// KubeEdge's router (module and group `router`): REST calls to its listener reach MQTT topics
/// and HTTP services at edge nodes, and MQTT messages at the edges reach REST endpoints, as
/// Rules and RuleEndpoints (`rules.kubeedge.io/v1`) say.
///
/// * **Rules** come from edgecontroller (`rule/<name>`, `ruleendpoint/<name>`; `insert` and
///   `delete`, a change as both). A rule whose endpoints are not known yet becomes active
///   when they arrive.
/// * **REST → eventbus / servicebus**: `<METHOD> /<edge node>/<namespace>/<rule path>…` on the
///   listener; an eventbus target answers `200 message delivered` once cloudhub has the
///   message; a servicebus target
///   answers with the edge service's status, headers and body, or `504` after
///   `restTimeout`. A call for a node another replica holds is passed to it.
/// * **Eventbus → REST**: an upload from node N on topic T is POSTed for the rules whose
///   `node_name` is N and whose topic is T (or matches it as an MQTT filter); from any other
///   node it is dropped. Subscriptions are sent when a rule becomes active and again whenever
///   its node connects.
/// * **Limits**: `maxBodyBytes` per call, `maxConcurrentPerRule` and `maxConcurrent`
///   deliveries in progress, `restTimeout` per call.
/// * **Status**: every delivery counts on its rule as the caller saw it (2xx success, else
///   failure), coalesced into one edgecontroller update per rule and second.
///
/// ```no_run
/// # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use router::{Router, RouterConfig};
/// let bus = beehive::Bus::new();
/// let mut config = RouterConfig::default();
/// config.enable = true;
/// let ownership = kubeedge_api::replicas::Ownership::new("10.0.0.1");
/// let router = Router::new(config, bus.endpoint("router"), client, ownership)?;
/// let handle = router.handle();
/// bus.register(router)?;
/// bus.start()?;
/// println!("REST listener on {}", handle.local_addr());
/// # Ok(()) }
/// ```
pub struct Router {
    shared: Arc<Shared>,
    client: kube::Client,
    listener: Option<TcpListener>,
    nodes_writer: Option<
        kubeedge_api::watch::CacheWriter<
            kube::api::PartialObjectMeta<k8s_openapi::api::core::v1::Node>,
        >,
    >,
    life: Lifecycle,
    server: Arc<Mutex<Option<ServerHandle>>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// What a composer keeps of a router: its address, metrics and background tasks.
#[derive(Debug, Clone)]
pub struct RouterHandle {
    addr: SocketAddr,
    metrics: RouterMetrics,
    life: Lifecycle,
    shared: Arc<Shared>,
}

impl RouterHandle {
    /// Where the REST listener listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The router's metrics.
    pub fn metrics(&self) -> RouterMetrics {
        self.metrics.clone()
    }

    /// The background tasks: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for
    /// them (the last rule status counts are sent on the way out).
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }

    /// Resolves once the edge nodes are listed: before that every REST call is refused as
    /// naming no edge node.
    pub async fn ready(&self) {
        self.shared.nodes.wait_ready().await;
    }

    /// Active rules by `namespace/name`, with their source (for diagnosis and tests).
    pub fn active_rules(&self) -> std::collections::BTreeMap<String, String> {
        self.shared.table().active_keys()
    }
}

impl Router {
    /// A router sending with `endpoint`, reading Nodes with `client`, knowing from
    /// `ownership` which replica holds which node (the composition's shared view; cloudhub
    /// records its sessions in it). Binds the REST listener now, so a taken port fails here.
    pub fn new(
        config: RouterConfig,
        endpoint: Endpoint,
        client: kube::Client,
        ownership: Ownership,
    ) -> Result<Self, Error> {
        config.validate().map_err(Error::Config)?;
        let address = config.listen_address();
        let listener = crate::rest::bind(&address).map_err(|source| Error::Bind {
            addr: address.clone(),
            source,
        })?;
        Self::with_listener(config, endpoint, client, ownership, listener)
    }

    /// [`Router::new`] serving on a socket bound by the caller (`address` and `port` of the
    /// configuration are then not used; an embedder or a test can take a port the OS picks).
    pub fn with_listener(
        config: RouterConfig,
        endpoint: Endpoint,
        client: kube::Client,
        ownership: Ownership,
        listener: TcpListener,
    ) -> Result<Self, Error> {
        config.validate().map_err(Error::Config)?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen_address(),
            source,
        })?;
        let (writer, view) = nodes::view();
        let metrics = RouterMetrics::new();
        let shared = Arc::new(Shared::new(config, endpoint, view, ownership, metrics));
        Ok(Router {
            shared,
            client,
            listener: Some(listener),
            nodes_writer: Some(writer),
            life: Lifecycle::new(),
            server: Arc::default(),
            addr,
        })
    }

    /// The handle a composer keeps.
    pub fn handle(&self) -> RouterHandle {
        RouterHandle {
            addr: self.addr,
            metrics: self.shared.metrics.clone(),
            life: self.life.clone(),
            shared: self.shared.clone(),
        }
    }

    fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.life.spawn(f);
    }

    fn learn(&self, msg: Message) {
        let resource = msg.route.resource.as_str();
        let (kind, _) = resource.split_once('/').unwrap_or((resource, ""));
        let op = msg.route.operation.to_string();
        let shared = self.shared.clone();
        match kind {
            "rule" => match msg.content.parse::<Rule>() {
                Ok(rule) => self.spawn(async move {
                    let key = RuleKey {
                        namespace: rule.metadata.namespace.clone().unwrap_or_default(),
                        name: rule.metadata.name.clone().unwrap_or_default(),
                    };
                    info!(rule = %key, op, "rule");
                    if op == operation::DELETE {
                        shared.change(|t| t.delete_rule(&key)).await;
                    } else {
                        shared.change(|t| t.insert_rule(rule)).await;
                    }
                }),
                Err(e) => warn!(resource, error = %e, "rule message without a Rule"),
            },
            "ruleendpoint" => match msg.content.parse::<RuleEndpoint>() {
                Ok(ep) => self.spawn(async move {
                    debug!(endpoint = ?ep.metadata.name, op, "rule endpoint");
                    if op == operation::DELETE {
                        shared
                            .change(|t| {
                                t.delete_endpoint(&ep);
                                Default::default()
                            })
                            .await;
                    } else {
                        shared.change(|t| t.insert_endpoint(ep)).await;
                    }
                }),
                Err(e) => {
                    warn!(resource, error = %e, "rule endpoint message without a RuleEndpoint")
                }
            },
            _ => debug!(resource, "edgecontroller message of another kind: dropped"),
        }
    }

    fn take_edge_message(&self, msg: Message) {
        let m = &self.shared.metrics;
        // cloudhub put the node of the connection in front; nothing in the message chooses it.
        let Some((node, rest)) = wire::edge_node(&msg.route.resource) else {
            m.edge(EdgeResult::Malformed);
            return;
        };
        let (node, rest) = (node.to_owned(), rest.to_owned());
        if !msg.header.parent_id.is_empty() {
            self.shared.answer(&node, msg);
        } else if msg.route.source == wire::SOURCE_BUS && msg.route.operation == wire::op::UPLOAD {
            self.shared.upload(&node, &rest, &msg);
        } else {
            // servicebus → rest (not implemented; KubeEdge's admission refuses such rules)
            // and anything else.
            m.edge(EdgeResult::Malformed);
            debug!(node, source = %msg.route.source, operation = %msg.route.operation, "edge message of another kind: dropped");
        }
    }
}

impl Actor for Router {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        if let Some(writer) = self.nodes_writer.take() {
            self.spawn(nodes::follow(
                self.client.clone(),
                writer,
                self.life.token().clone(),
            ));
        }
        let (shared, stop) = (self.shared.clone(), self.life.token().clone());
        let endpoint = shared.endpoint.clone();
        self.spawn(async move { shared.status.run(endpoint, stop).await });
        if let Some(listener) = self.listener.take() {
            match crate::rest::serve(self.shared.clone(), listener) {
                Ok((handle, _)) => {
                    *self.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
                }
                Err(e) => warn!(error = %e, "router REST listener did not start"),
            }
        }
        info!(addr = %self.addr, "router started");
    }
}

impl Handler<Message> for Router {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        // Who sent it is the bus's word, not the route's: the edgecontroller's rules and
        // cloudhub's own node events are taken from those modules' endpoints only, and
        // everything else (what edges send comes through cloudhub's edge relay) is an edge
        // message, whatever source or group it claims.
        let from = |module: &str| msg.is_sent_by(module);
        if from(names::EDGECONTROLLER) {
            self.learn(msg);
        } else if from(names::CLOUDHUB) && msg.route.operation == hub_op::CONNECTED {
            let Some(node) = msg.route.resource.strip_prefix("node/").map(str::to_owned) else {
                return;
            };
            let shared = self.shared.clone();
            self.spawn(async move { shared.resubscribe(&node).await });
        } else if from(names::CLOUDHUB) {
            // Other node events (disconnected): nothing to do.
        } else {
            self.take_edge_message(msg);
        }
    }
}

impl Module for Router {
    fn name(&self) -> &str {
        names::ROUTER
    }

    fn group(&self) -> &str {
        names::ROUTER
    }

    fn enabled(&self) -> bool {
        self.shared.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
        if let Some(server) = self.server.lock().unwrap_or_else(|e| e.into_inner()).take() {
            actix_rt::spawn(async move { server.stop(true).await });
        }
    }
}
