//! The `dynamiccontroller` beehive module: takes Applications and watch syncs from cloudhub,
//! serves them concurrently (one node's watch registrations and syncs in order), answers
//! through cloudhub.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::{Actor, Context, Handler};
use beehive::{Content, Endpoint, Message, Module};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kubeedge_api::application::{Application, REPLY_RESOURCE, WATCH_SYNC_RESOURCE, verb};
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::operation::{APPLICATION_RESPONSE, CONNECTED, DISCONNECTED};
use kubeedge_api::names::{CLOUDHUB, DYNAMICCONTROLLER, GROUP_RESOURCE};
use kubeedge_api::status::StatusError;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, info, warn};

use crate::config::DynamicControllerConfig;
use crate::informer::Informers;
use crate::listeners::Registry;
use crate::metrics::{CacheSizes, DynamicControllerMetrics};
use crate::persist::Persist;
use crate::requests;
use crate::shared::Shared;
use crate::watches;

/// Changes waiting for the fan-out; the caches wait beyond this (back-pressure to the API
/// server's watch).
const CHANGE_QUEUE: usize = 1024;
/// How long an unused type cache is kept (edge informers re-watch every few minutes).
const INFORMER_LINGER: Duration = Duration::from_secs(300);
/// The largest answer body sent: base64 makes it 4/3 larger on the wire, which then stays
/// within cloudhub's default 32 MiB message limit.
const MAX_ANSWER_BYTES: usize = 24 << 20;
/// How often deleted nodes' listeners and idle caches are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The dynamiccontroller module: name and group `dynamiccontroller`.
///
/// * **Requests** (list, get, create, update, updatestatus, patch, delete, discovery) are
///   answered from the API server with `Approved` or `Rejected` replies; each node may have
///   `nodeRequests` requests (`nodeRequestBytes` of content) waiting or running and send
///   `nodeQPS` per second (more are refused `429`); `concurrency` run at once.
/// * **Watches** register listeners on one shared cache per resource type; every change is
///   sent to the nodes whose listeners select it, reliably (cloudhub's acknowledged path).
///   A node's watch registrations and syncs are handled in the order they arrive.
/// * **Authorization**: every read is decided for `system:node:<name>` (a cached
///   SubjectAccessReview) unless it is made as the node; writes are always made as the node.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use dynamiccontroller::{DynamicController, DynamicControllerConfig};
/// let bus = beehive::Bus::new();
/// let dc = DynamicController::new(
///     DynamicControllerConfig::default(),
///     bus.endpoint("dynamiccontroller"),
///     client,
/// );
/// bus.register(dc).unwrap();
/// bus.start().unwrap();
/// # }
/// ```
pub struct DynamicController {
    config: DynamicControllerConfig,
    endpoint: Endpoint,
    client: kube::Client,
    impersonate: bool,
    namespace: String,
    metrics: DynamicControllerMetrics,
    life: Lifecycle,
    shared: Option<Arc<Shared>>,
    gate: Arc<Gate>,
}

impl std::fmt::Debug for DynamicController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicController")
            .field("config", &self.config)
            .field("impersonate", &self.impersonate)
            .finish_non_exhaustive()
    }
}

/// Admission of requests: per-node counts, bytes and rate, the global limit, the per-node
/// order lock and which nodes are connected.
#[derive(Debug)]
struct Gate {
    running: Semaphore,
    per_node: Mutex<HashMap<String, NodeLoad>>,
    buckets: Mutex<HashMap<String, Bucket>>,
    node_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each node's share of `running` (a quarter of it, at least one), taken first: one node
    /// never holds every permit, whatever it waits on.
    node_slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    node_share: usize,
    connected: Mutex<HashSet<String>>,
    node_limit: usize,
    node_bytes: usize,
    qps: f64,
    burst: f64,
}

/// What one node has waiting or running.
#[derive(Debug, Default, Clone, Copy)]
struct NodeLoad {
    requests: usize,
    bytes: usize,
}

/// A node's request-rate token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept at most; beyond, those refilled to the full burst are forgotten.
const BUCKETS_MAX: usize = 16_384;

impl Gate {
    fn new(config: &DynamicControllerConfig) -> Self {
        Gate {
            running: Semaphore::new(config.concurrency.max(1)),
            per_node: Mutex::default(),
            buckets: Mutex::default(),
            node_locks: Mutex::default(),
            node_slots: Mutex::default(),
            node_share: (config.concurrency / 4).max(1),
            connected: Mutex::default(),
            node_limit: config.node_requests.max(1),
            node_bytes: config.node_request_bytes.max(1),
            qps: f64::from(config.node_qps.max(1)),
            burst: f64::from(config.node_burst.max(1)),
        }
    }

    /// Takes one token of `node`'s bucket.
    fn rate_ok(&self, node: &str) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= BUCKETS_MAX && !buckets.contains_key(node) {
            let (qps, burst) = (self.qps, self.burst);
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * qps < burst);
        }
        let b = buckets.entry(node.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.qps).min(self.burst);
        b.at = now;
        if b.tokens < 1.0 {
            return false;
        }
        b.tokens -= 1.0;
        true
    }

    /// Admits one request of `bytes` from `node`, or says why not.
    fn try_begin(&self, node: &str, bytes: usize) -> Result<(), String> {
        if !self.rate_ok(node) {
            return Err(format!(
                "node {node} sends more than {} metaServer requests per second",
                self.qps
            ));
        }
        let mut m = self.per_node.lock().unwrap_or_else(|p| p.into_inner());
        let load = m.entry(node.to_owned()).or_default();
        if load.requests >= self.node_limit {
            return Err(format!(
                "node {node} has {} metaServer requests waiting or running already",
                self.node_limit
            ));
        }
        if load.bytes + bytes > self.node_bytes {
            return Err(format!(
                "node {node} has {} bytes of metaServer requests waiting or running (nodeRequestBytes {})",
                load.bytes, self.node_bytes
            ));
        }
        load.requests += 1;
        load.bytes += bytes;
        Ok(())
    }

    fn end(&self, node: &str, bytes: usize) {
        let mut m = self.per_node.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(load) = m.get_mut(node) {
            load.requests -= 1;
            load.bytes -= bytes;
            if load.requests == 0 {
                m.remove(node);
            }
        }
    }

    /// `node`'s share of the running permits.
    fn node_slot(&self, node: &str) -> Arc<Semaphore> {
        let mut m = self.node_slots.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, s| Arc::strong_count(s) > 1);
        m.entry(node.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.node_share)))
            .clone()
    }

    fn node_lock(&self, node: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.node_locks.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry(node.to_owned()).or_default().clone()
    }
}

impl DynamicController {
    /// A controller with `config`, sending as `endpoint` (normally
    /// `bus.endpoint("dynamiccontroller")`) and talking to Kubernetes with `client`
    /// (cloudcore's identity). Listener records go to namespace `kubeedge`.
    pub fn new(config: DynamicControllerConfig, endpoint: Endpoint, client: kube::Client) -> Self {
        let gate = Arc::new(Gate::new(&config));
        DynamicController {
            config,
            endpoint,
            client,
            impersonate: false,
            namespace: "kubeedge".into(),
            metrics: DynamicControllerMetrics::default(),
            life: Lifecycle::new(),
            shared: None,
            gate,
        }
    }

    /// Reads also go to the API server as the node (cloudhub's `authorization.enable &&
    /// !authorization.debug`). Writes always do.
    pub fn with_impersonation(mut self, on: bool) -> Self {
        self.impersonate = on;
        self
    }

    /// The namespace of the listener records (cloudcore's own, default `kubeedge`).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The counters.
    pub fn metrics(&self) -> DynamicControllerMetrics {
        self.metrics.clone()
    }

    /// The background tasks, for a graceful stop after `bus.shutdown()`.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }
}

fn reply(req: &Message, node: &str, resource: &str, content: Content) -> Message {
    Message::with_parent(req.header.id.clone())
        .with_route(
            DYNAMICCONTROLLER,
            GROUP_RESOURCE,
            format!("node/{node}/{resource}"),
            APPLICATION_RESPONSE,
        )
        .with_content(content)
}

fn json(v: &impl serde::Serialize) -> Content {
    Content::json(v).unwrap_or_else(|e| Content::string(format!("cannot encode reply: {e}")))
}

/// The request's Application, or the parts of it that decode and why the rest did not.
fn decode(msg: &Message) -> Result<Application, (Application, StatusError)> {
    match msg.content.parse::<Application>() {
        Ok(app) => Ok(app),
        Err(e) => {
            let v: Value = msg.content.parse().unwrap_or(Value::Null);
            let text = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .chars()
                    .take(256)
                    .collect()
            };
            let partial = Application {
                id: text("ID"),
                key: text("Key"),
                verb: text("Verb"),
                ..Application::default()
            };
            Err((
                partial,
                StatusError::bad_request(format!("the content is not an Application: {e}")),
            ))
        }
    }
}

/// Serves one Application (already decoded); a watch is served while the caller holds the
/// node's order lock.
async fn serve_application(
    shared: &Shared,
    node: &str,
    msg: &Message,
    decoded: Result<Application, (Application, StatusError)>,
) -> Message {
    let (app, result) = match decoded {
        Ok(mut app) => {
            app.node_name = node.to_owned();
            let result = if app.verb == verb::WATCH {
                watches::register(shared, node, &app).await.map(|()| None)
            } else {
                requests::serve(shared, node, &app).await
            };
            (app, result)
        }
        Err((app, e)) => (app, Err(e)),
    };
    let result = result.and_then(|body| match body {
        Some(b) if b.len() > MAX_ANSWER_BYTES => Err(StatusError::new(
            413,
            "RequestEntityTooLarge",
            format!(
                "the answer ({} bytes) is larger than a hub message may be; list with limit and continue",
                b.len()
            ),
        )),
        other => Ok(other),
    });
    shared.metrics.answered(&app.verb, result.is_ok());
    let answer = match result {
        Ok(body) => app.approved(body),
        Err(e) => {
            if e.code() == 403 {
                shared.metrics.denied(&app.verb);
                warn!(node, verb = %app.verb, key = %app.key.chars().take(256).collect::<String>(), reason = %e, "metaServer request refused by node authorization");
            }
            debug!(node, verb = %app.verb, key = %app.key, code = e.code(), error = %e, "application rejected");
            app.rejected(e)
        }
    };
    reply(msg, node, REPLY_RESOURCE, json(&answer))
}

/// Serves a watch sync while the caller holds the node's order lock.
async fn serve_sync(shared: &Shared, node: &str, msg: &Message) -> Message {
    let failed = match msg.content.parse::<BTreeMap<String, Application>>() {
        Ok(apps) => watches::sync(shared, node, apps).await,
        Err(e) => {
            warn!(node, error = %e, "watch sync content is not a map of Applications");
            BTreeMap::new()
        }
    };
    shared.metrics.answered("watchsync", failed.is_empty());
    reply(msg, node, WATCH_SYNC_RESOURCE, json(&failed))
}

impl Actor for DynamicController {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let (tx, rx) = mpsc::channel(CHANGE_QUEUE);
        let informers = Arc::new(Informers::new(
            self.client.clone(),
            tx,
            self.config.max_informers,
            INFORMER_LINGER,
        ));
        let registry = Arc::new(Registry::default());
        let _ = self.metrics.0.registry.set(registry.clone());
        let _ = self.metrics.0.informers.set(informers.clone());
        let persist = self
            .config
            .persist_listeners
            .then(|| Arc::new(Persist::new(self.client.clone(), &self.namespace)));
        let shared = Arc::new(Shared::new(
            self.config.clone(),
            self.client.clone(),
            self.impersonate,
            informers.clone(),
            registry.clone(),
            self.endpoint.clone(),
            self.metrics.clone(),
            persist.clone(),
        ));
        let weak = Arc::downgrade(&shared);
        let _ = self.metrics.0.caches.set(CacheSizes(Box::new(move || {
            weak.upgrade()
                .map(|s| (s.reviewer.cached_answers(), s.resolver.len()))
        })));
        self.life
            .spawn_cancellable(watches::dispatch(shared.clone(), rx));
        let _ = self.metrics.0.delivered.set(shared.delivered.clone());
        if let Some(p) = persist {
            self.life.spawn(p.run(
                registry.clone(),
                shared.delivered.clone(),
                self.life.token().clone(),
            ));
        }
        self.life
            .spawn_cancellable(sweep(shared.clone(), self.gate.clone()));
        self.life
            .spawn_cancellable(watches::review_listeners(shared.clone()));
        self.life
            .spawn_cancellable(watches::review_on_pod_deletes(shared.clone()));
        self.shared = Some(shared);
        info!(
            impersonate = self.impersonate,
            persist_listeners = self.config.persist_listeners,
            "dynamiccontroller started"
        );
    }
}

/// Every [`SWEEP_EVERY`]: drops the listeners of deleted nodes, stops idle caches and
/// confirms what connected nodes were sent.
async fn sweep(shared: Arc<Shared>, gate: Arc<Gate>) {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        shared.informers.sweep();
        for node in shared.delivered.confirm() {
            if let Some(p) = &shared.persist {
                p.mark(&node);
            }
        }
        let offline: Vec<String> = {
            let connected = gate.connected.lock().unwrap_or_else(|p| p.into_inner());
            shared
                .registry
                .nodes()
                .into_iter()
                .filter(|n| !connected.contains(n))
                .collect()
        };
        for node in offline {
            if let Ok(None) = nodes.get_metadata_opt(&node).await {
                watches::forget_node(&shared, &node).await;
            }
        }
    }
}

impl Handler<Message> for DynamicController {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let gate = self.gate.clone();
        // Node events are cloudhub's own (its endpoint `cloudhub`); what an edge sends comes
        // from cloudhub's edge relay and is a request, whatever source it claims.
        if msg.is_sent_by(CLOUDHUB) {
            let Some(node) = kubeedge_api::node_of(&msg.route.resource).map(str::to_owned) else {
                return;
            };
            match msg.route.operation.as_str() {
                CONNECTED => {
                    gate.connected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(node.clone());
                    // A new session (also one replacing another without a disconnect seen
                    // here): what earlier ones were sent and did not confirm is sent again.
                    shared.delivered.disconnected(&node);
                    shared.delivered.connected(&node);
                    self.life.spawn_cancellable(async move {
                        let lock = gate.node_lock(&node);
                        let _order = lock.lock().await;
                        watches::connected(&shared, &node).await;
                    });
                }
                DISCONNECTED => {
                    gate.connected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&node);
                    shared.delivered.disconnected(&node);
                }
                _ => {}
            }
            return;
        }
        let Some(node) = kubeedge_api::node_of(&msg.route.resource).map(str::to_owned) else {
            debug!(resource = %msg.route.resource, "message without a node ignored");
            return;
        };
        let is_sync = msg.route.resource.ends_with(WATCH_SYNC_RESOURCE);
        let bytes = msg.content.as_json().len();
        if let Err(why) = gate.try_begin(&node, bytes) {
            debug!(node, why, "metaServer request refused");
            if !is_sync {
                let app = decode(&msg).unwrap_or_else(|(app, _)| app);
                let e = StatusError::too_many_requests(why);
                shared.metrics.answered(&app.verb, false);
                let out = reply(&msg, &node, REPLY_RESOURCE, json(&app.rejected(e)));
                tokio::spawn(async move { shared.send(out).await });
            }
            return;
        }
        // Not tracked by the lifecycle: there can be many at once (bounded by the gate), each
        // short, and a request cut by a stop is answered by the edge's own fall-back.
        tokio::spawn(async move {
            let decoded = (!is_sync).then(|| decode(&msg));
            let ordered = is_sync || matches!(&decoded, Some(Ok(app)) if app.verb == verb::WATCH);
            // The node's own share first, then its order (watches and syncs one at a time),
            // then a permit: a node waiting on itself (or on a type's first list) holds at
            // most one permit for that and a quarter of them in all.
            let slot = gate.node_slot(&node);
            let Ok(_slot) = slot.acquire_owned().await else {
                gate.end(&node, bytes);
                return;
            };
            let _order = match ordered {
                true => Some(gate.node_lock(&node).lock_owned().await),
                false => None,
            };
            let answer = match gate.running.acquire().await {
                Ok(_permit) => Some(match decoded {
                    None => serve_sync(&shared, &node, &msg).await,
                    Some(d) => serve_application(&shared, &node, &msg, d).await,
                }),
                Err(_) => None,
            };
            gate.end(&node, bytes);
            if let Some(answer) = answer {
                shared.send(answer).await;
            }
        });
    }
}

impl Module for DynamicController {
    fn name(&self) -> &str {
        DYNAMICCONTROLLER
    }

    fn group(&self) -> &str {
        DYNAMICCONTROLLER
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        info!("dynamiccontroller stopping");
        self.life.stop();
        self.gate.running.close();
        if let Some(s) = &self.shared {
            s.informers.stop_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(qps: u32, burst: u32, requests: usize, bytes: usize) -> Gate {
        Gate::new(&DynamicControllerConfig {
            node_qps: qps,
            node_burst: burst,
            node_requests: requests,
            node_request_bytes: bytes,
            ..DynamicControllerConfig::default()
        })
    }

    #[test]
    fn a_node_gets_its_burst_then_its_rate() {
        let g = gate(1, 2, 100, 1 << 20);
        assert!(g.try_begin("a", 1).is_ok());
        assert!(g.try_begin("a", 1).is_ok());
        let e = g.try_begin("a", 1).unwrap_err();
        assert!(e.contains("per second"), "{e}");
        assert!(
            g.try_begin("b", 1).is_ok(),
            "other nodes keep their own budget"
        );
    }

    #[tokio::test]
    async fn a_node_runs_at_most_a_quarter_of_the_permits() {
        let g = Gate::new(&DynamicControllerConfig {
            concurrency: 32,
            ..DynamicControllerConfig::default()
        });
        let slot = g.node_slot("a");
        let held: Vec<_> = (0..8)
            .map(|_| slot.clone().try_acquire_owned().expect("within the share"))
            .collect();
        assert!(
            g.node_slot("a").try_acquire().is_err(),
            "the 9th request of one node waits for its own share"
        );
        assert!(
            g.node_slot("b").try_acquire().is_ok(),
            "others are not held up"
        );
        drop(held);
        let tiny = Gate::new(&DynamicControllerConfig {
            concurrency: 2,
            ..DynamicControllerConfig::default()
        });
        assert_eq!(tiny.node_slot("a").available_permits(), 1);
    }

    #[test]
    fn a_node_holds_at_most_its_requests_and_bytes() {
        let g = gate(1000, 1000, 2, 10);
        g.try_begin("a", 5).unwrap();
        assert!(g.try_begin("a", 6).unwrap_err().contains("bytes"));
        g.try_begin("a", 5).unwrap();
        assert!(
            g.try_begin("a", 0)
                .unwrap_err()
                .contains("waiting or running")
        );
        g.end("a", 5);
        g.try_begin("a", 5).unwrap();
        g.end("a", 5);
        g.end("a", 5);
        assert!(
            g.per_node.lock().unwrap().is_empty(),
            "nothing left for an idle node"
        );
    }
}
