//! A hostile edge against the real cloudcore binary and the real kube-apiserver: an edge node
//! with a valid certificate, speaking through the real WebSocket exactly as edgecore does, tries
//! to act beyond its own node. Every attempt is answered with a refusal the edge decodes, leaves
//! the API server unchanged (read back as admin) and shows in
//! `cloudcore_node_authorization_denied_total`; what a kubelet may do on its own node stays
//! allowed and reaches the API server.
//!
//! One cloudcore serves every test of this suite: here in the default configuration (no
//! impersonation, so cloudcore's own check is all that stands between the edge and the
//! cluster); `hostile_edge_impersonated` runs the same tests with impersonation on, so the
//! API server's Node authorizer and NodeRestriction decide what cloudcore lets through. Each test connects
//! its own edge (own node name, certificate and session) and works in its own namespace, so the
//! tests are independent and may run in parallel.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine;
use beehive::{Content, Message};
use edge::hub::{HubClient, HubClientConfig, HubEvent};
use edgecore_interop::{CloudSpec, Cloudcore, EDGE_LABEL, eventually};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::devices::{Device, DeviceModel, DeviceStatus};
use kubeedge_api::rules::Rule;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

/// The refusal counter every denied request increments.
const DENIED: &str = "cloudcore_node_authorization_denied_total";
/// How long an edge waits for the answer to one request: longer than dynamiccontroller's own
/// bound on a metaServer request (an informer's first sync, `informerSyncTimeout`, 30 s by
/// default), so that a slow API server gets cloudcore's answer rather than the test's panic.
const REPLY_WAIT: Duration = Duration::from_secs(45);
/// How long a test waits for something that should happen.
const WAIT: Duration = Duration::from_secs(15);
/// The annotation that marks a mirror pod.
const MIRROR: &str = "kubernetes.io/config.mirror";

// ---------------------------------------------------------------------------------------------
// The shared cloudcore
// ---------------------------------------------------------------------------------------------

/// The cloudcore process all tests of this binary talk to, started on first use.
fn cloud() -> &'static Cloudcore {
    static CLOUD: OnceLock<Cloudcore> = OnceLock::new();
    // Started on a thread of its own: the callers are inside their test's runtime.
    CLOUD.get_or_init(|| {
        std::thread::spawn(start_cloud)
            .join()
            .unwrap_or_else(|_| panic!("cloudcore did not start (see above)"))
    })
}

fn start_cloud() -> Cloudcore {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        let dir = std::env::temp_dir().join(format!(
            "cloudcore-hostile-edge-{}-{}",
            std::process::id(),
            short_id()
        ));
        let mut spec = CloudSpec::for_testenv(&dir).expect("cloud spec");
        spec.impersonate = super::IMPERSONATE;
        spec.replica_address = Some(crate::support::replica_address());
        // The optional modules whose edge-facing messages the suite attacks too. Listeners
        // are decided again every 2 s (300 s by default), so a test sees a watch end when the
        // cluster stops allowing it; a node's record of what its watches delivered holds
        // 16 KiB (384 KiB by default), so a test reaches its bound with a hundred objects;
        // discovery answers are shared for 8 s (30 s by default), so a test sees one expire.
        let router_port = edgecore_interop::listen_ports(1).expect("a port for the router")[0];
        let socket = format!("unix://{}", dir.join("kubeedge.sock").display());
        spec.extra = json!({
            "featureGates": {"requireAuthorization": true},
            "modules": {
                "router": {"enable": true, "address": "127.0.0.1", "port": router_port,
                           "restTimeout": 10},
                "cloudHub": {"unixsocket": {"enable": true, "address": socket}},
                "dynamicController": {"listenerReviewSeconds": 2,
                                      "maxDeliveredBytesPerNode": 16384,
                                      "passThroughCacheSeconds":
                                          metaserver_discovery::PASS_THROUGH_SECONDS},
            },
        });
        let mut core = Cloudcore::start(&spec)
            .await
            .unwrap_or_else(|e| panic!("cloudcore did not start: {e}"));
        stop_with_this_binary(core.process().id(), &dir);
        core
    })
}

/// A static is never dropped, so the cloudcore process group (its own, led by `pgid`) is
/// killed by a watchdog once this test binary has exited, and its folder removed unless a
/// failing test marked it to be kept (see [`KEEP`]).
// clippy::zombie_processes: the watchdog must outlive this process, which never waits for it;
// init reaps it.
#[allow(clippy::zombie_processes)]
fn stop_with_this_binary(pgid: u32, dir: &Path) {
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; kill -9 -{pgid} 2>/dev/null; \
         [ -e '{dir}/{KEEP}' ] || rm -rf '{dir}'",
        me = std::process::id(),
        dir = dir.display(),
    );
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group: a Ctrl-C to the test run does not stop the watchdog before its work.
        .process_group(0)
        .spawn()
        .expect("start the cloudcore watchdog");
}

/// A file in the cloudcore folder that keeps the folder (and its log) after the run.
const KEEP: &str = "keep";

fn short_id() -> String {
    beehive::new_id().replace('-', "")[..8].to_owned()
}

/// `prefix-<8 hex>`, a DNS-1123 name no other test uses.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", short_id())
}

/// The current value of the refusal counter for an edgecontroller request kind (0 when absent).
async fn denied(kind: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value(DENIED, &[("module", "edgecontroller"), ("kind", kind)])
        .unwrap_or(0.0)
}

/// The refusal counter of one request kind, read before a refused attempt. Tests that count
/// the same kind take turns, so the counter moves only for the attempt being counted.
struct Count {
    kind: &'static str,
    before: f64,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

/// Waits for this test's turn to count refusals of `kind` and reads the counter.
async fn counting(kind: &'static str) -> Count {
    type Turns = Mutex<HashMap<&'static str, Arc<tokio::sync::Mutex<()>>>>;
    static TURNS: OnceLock<Turns> = OnceLock::new();
    let turn = TURNS
        .get_or_init(Turns::default)
        .lock()
        .unwrap()
        .entry(kind)
        .or_default()
        .clone();
    let turn = turn.lock_owned().await;
    Count {
        kind,
        before: denied(kind).await,
        _turn: turn,
    }
}

/// Takes the counting turns of `kinds` for attempts whose refusals a test does not count, so
/// they cannot move another test's count. Sorted: two holders never wait on each other.
async fn without_counting(kinds: &[&'static str]) -> Vec<Count> {
    let mut kinds = kinds.to_vec();
    kinds.sort_unstable();
    kinds.dedup();
    let mut turns = Vec::new();
    for kind in kinds {
        turns.push(counting(kind).await);
    }
    turns
}

impl Count {
    /// Waits until the counter moved (events are counted without an answer to wait for), then
    /// asserts the refusal was counted exactly once.
    async fn one_more(self) {
        let (kind, before) = (self.kind, self.before);
        let moved = eventually(Duration::from_secs(5), "refusal counted", || async {
            let now = denied(kind).await;
            (now > before).then_some(now)
        })
        .await;
        let series = format!("{DENIED}{{module=\"edgecontroller\",kind=\"{kind}\"}}");
        match moved {
            Ok(now) => assert_eq!(now, before + 1.0, "{series}: one refusal, counted once"),
            Err(_) => panic!("{series} did not go above {before}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The edge
// ---------------------------------------------------------------------------------------------

type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Message>>>>;

/// A Rust edge with a certificate from the bootstrap token, connected over the real WebSocket;
/// stopped on drop.
struct Edge {
    node: String,
    client: HubClient,
    waiting: Waiting,
    pushed: Arc<Mutex<Vec<Message>>>,
    push_arrived: Arc<Notify>,
}

/// A certificate for `node` from the certificate server at `server`, dialing again after a
/// failed connection or a `429` as edgecore does: the suite's cloud is shared with tests that
/// flood its listeners, and on a loaded machine a handshake may outlast their limits. Any other
/// refusal fails at once.
async fn bootstrap(server: &str, token: &str, node: &str) -> edge::hub::EdgeCerts {
    use edge::hub::HubError;
    let deadline = tokio::time::Instant::now() + WAIT * 4;
    let mut pause = Duration::from_millis(200);
    loop {
        match edge::hub::bootstrap(server, token, node).await {
            Ok(certs) => return certs,
            Err(e @ (HubError::Transport { .. } | HubError::Http { status: 429, .. }))
                if tokio::time::Instant::now() + pause < deadline =>
            {
                eprintln!("bootstrap of {node}: {e}; dialing again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => panic!("bootstrap of {node}: {e}"),
        }
    }
}

impl Edge {
    /// Bootstraps a certificate for `node` with the cloud's token (like edgecore), connects and
    /// waits until the session is up.
    async fn connect(node: &str) -> Edge {
        Edge::connect_to(cloud(), node).await
    }

    /// [`Edge::connect`] to `core`.
    async fn connect_to(core: &Cloudcore, node: &str) -> Edge {
        let ports = core.spec().ports;
        let token = core.token().expect("bootstrap token");
        let certs = bootstrap(&format!("https://{}", ports.https_addr()), &token, node).await;
        let tls = Arc::new(certs.client_tls().expect("client TLS"));
        let config = HubClientConfig::new(node, ports.websocket_addr().to_string());
        let (client, mut events) = HubClient::start(config, tls);
        let connected = tokio::time::timeout(WAIT, async {
            let mut last = String::new();
            while let Some(ev) = events.recv().await {
                match ev {
                    HubEvent::Connected => return Ok(()),
                    HubEvent::Disconnected { reason } => last = reason,
                    HubEvent::Message(_) => {}
                }
            }
            Err(last)
        })
        .await;
        match connected {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => panic!("edge {node} stopped before connecting: {reason}"),
            Err(_) => panic!("edge {node} not connected within {WAIT:?}"),
        }
        let waiting: Waiting = Arc::default();
        let pushed: Arc<Mutex<Vec<Message>>> = Arc::default();
        let push_arrived = Arc::new(Notify::new());
        let (w, p, n) = (waiting.clone(), pushed.clone(), push_arrived.clone());
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                let HubEvent::Message(m) = ev else { continue };
                let waiter = match m.header.parent_id.is_empty() {
                    true => None,
                    false => w.lock().unwrap().remove(&*m.header.parent_id.as_str()),
                };
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(m);
                    }
                    None => {
                        p.lock().unwrap().push(m);
                        n.notify_waiters();
                    }
                }
            }
        });
        Edge {
            node: node.to_owned(),
            client,
            waiting,
            pushed,
            push_arrived,
        }
    }

    /// Sends one request as edgecore's edged does (source `edged`, group `meta`, resource
    /// `<ns>/<type>/<name>`: cloudhub adds `node/<id>/`) and returns its pending answer.
    async fn send(&self, resource: &str, operation: &str, content: Content) -> Pending {
        self.send_as("edged", "meta", resource, operation, content)
            .await
    }

    /// [`Edge::send`] from another edge module (`source`, `group`), e.g. devicetwin's `twin`.
    async fn send_as(
        &self,
        source: &str,
        group: &str,
        resource: &str,
        operation: &str,
        content: Content,
    ) -> Pending {
        let mut msg = Message::new()
            .with_route(source, group, resource, operation)
            .with_content(content);
        // edgecore's SendSync; the wire carries it as false either way.
        msg.header.sync = true;
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap()
            .insert(msg.header.id.to_string(), tx);
        self.client.send(msg).await.expect("queue the request");
        Pending {
            what: format!("{operation} {resource}"),
            rx,
        }
    }

    /// Sends one request and waits (at most [`REPLY_WAIT`]) for the answer whose parent id is
    /// the request's id.
    async fn ask(&self, resource: &str, operation: &str, content: Content) -> Reply {
        self.send(resource, operation, content).await.reply().await
    }

    /// [`Edge::ask`] with JSON content.
    async fn ask_json(&self, resource: &str, operation: &str, content: Value) -> Reply {
        self.ask(resource, operation, json_content(&content)).await
    }

    /// Waits for a downstream message (no parent id) with this resource and operation.
    async fn pushed(&self, resource: &str, operation: &str) -> Message {
        self.pushed_where(&format!("{operation} {resource}"), |m| {
            m.route.resource == resource && m.route.operation == operation
        })
        .await
    }

    /// Waits for a downstream message (no parent id) that `matches`.
    async fn pushed_where(&self, what: &str, matches: impl Fn(&Message) -> bool) -> Message {
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let arrived = self.push_arrived.notified();
                if let Some(m) = self.pushed.lock().unwrap().iter().find(|m| matches(m)) {
                    return m.clone();
                }
                arrived.await;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            let got: Vec<String> = self
                .pushed
                .lock()
                .unwrap()
                .iter()
                .map(|m| {
                    let (r, h) = (&m.route, &m.header);
                    format!("{} {} rv={}", r.operation, r.resource, h.resource_version)
                })
                .collect();
            panic!(
                "edge {} got no {what} within {WAIT:?}; it got {got:?}",
                self.node
            )
        })
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        self.client.stop();
    }
}

fn json_content(v: &Value) -> Content {
    Content::json(v).expect("JSON content")
}

/// An answer not yet received.
struct Pending {
    what: String,
    rx: oneshot::Receiver<Message>,
}

impl Pending {
    async fn reply(self) -> Reply {
        let what = self.what;
        match tokio::time::timeout(REPLY_WAIT, self.rx).await {
            Ok(Ok(m)) => Reply::new(m, what),
            Ok(Err(_)) => panic!("the edge stopped before the answer to {what}"),
            Err(_) => panic!("no answer within {REPLY_WAIT:?} to {what}"),
        }
    }

    /// The answer if it has already arrived.
    fn arrived(mut self) -> Option<Reply> {
        let what = self.what.clone();
        self.rx.try_recv().ok().map(|m| Reply::new(m, what))
    }
}

/// The cloud's answer to one request, with its content decoded.
#[derive(Debug)]
struct Reply {
    what: String,
    body: Value,
}

impl Reply {
    fn new(msg: Message, what: String) -> Reply {
        let text = msg.content.as_json();
        let body = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        Reply { what, body }
    }

    /// The Kubernetes status of an error answer in either shape, if it is one.
    fn status(&self) -> Option<&Value> {
        let object_resp = &self.body["Err"]["ErrStatus"];
        let raw = &self.body["ErrStatus"];
        [object_resp, raw].into_iter().find(|s| s.is_object())
    }

    fn code(&self) -> Option<u64> {
        self.status().and_then(|s| s["code"].as_u64())
    }

    /// `"OK"`.
    fn ok(&self) {
        assert_eq!(self.body, json!("OK"), "{}: expected \"OK\"", self.what);
    }

    /// A successful ObjectResp; returns the object.
    fn object_resp_ok(&self) -> &Value {
        assert!(
            self.body["Err"].is_null() && self.body["Object"].is_object(),
            "{}: expected an ObjectResp with an object, got {}",
            self.what,
            self.body
        );
        &self.body["Object"]
    }

    /// A raw object of `kind`.
    fn raw_object(&self, kind: &str) -> &Value {
        assert_eq!(
            self.body["kind"], kind,
            "{}: expected a raw {kind}, got {}",
            self.what, self.body
        );
        &self.body
    }

    /// A 403 ObjectResp (`{"Object": null, "Err": {"ErrStatus": …}}`) refusing `node`.
    fn forbidden_object_resp(&self, node: &str) {
        let keys: Vec<&String> = self
            .body
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            ["Err", "Object"],
            "{}: expected an ObjectResp, got {}",
            self.what,
            self.body
        );
        assert!(
            self.body["Object"].is_null(),
            "{}: a refusal carries no object: {}",
            self.what,
            self.body
        );
        self.forbidden(&self.body["Err"]["ErrStatus"], node);
    }

    /// A 403 raw status (`{"ErrStatus": …}`) refusing `node`.
    fn forbidden_raw(&self, node: &str) {
        let keys: Vec<&String> = self
            .body
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            ["ErrStatus"],
            "{}: expected a raw status, got {}",
            self.what,
            self.body
        );
        self.forbidden(&self.body["ErrStatus"], node);
    }

    fn forbidden(&self, status: &Value, node: &str) {
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(403), Some("Forbidden")),
            "{}: expected 403 Forbidden, got {}",
            self.what,
            self.body
        );
        let message = status["message"].as_str().unwrap_or_default();
        let user = format!("User \"system:node:{node}\" cannot");
        assert!(
            message.contains("is forbidden") && message.contains(&user),
            "{}: the message names the node and what it cannot do: {message:?}",
            self.what
        );
    }

    /// A 400 BadRequest in either shape.
    fn bad_request(&self) {
        let status = self.status().unwrap_or(&Value::Null);
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(400), Some("BadRequest")),
            "{}: expected 400 BadRequest, got {}",
            self.what,
            self.body
        );
    }
}

// ---------------------------------------------------------------------------------------------
// One test's world
// ---------------------------------------------------------------------------------------------

/// One test: an admin client, a namespace of its own, and an edge connected as a Node of its own
/// (created by admin, edge-labelled).
struct Scenario {
    client: kube::Client,
    ns: String,
    node: String,
    edge: Edge,
}

impl Scenario {
    /// The edge's Node exists (created by admin, edge-labelled) before the edge connects, as
    /// after registration; returns once edgecontroller has sent the Node to the edge, so its
    /// caches hold it.
    async fn new(prefix: &str) -> Scenario {
        Scenario::new_on(cloud(), prefix).await
    }

    /// [`Scenario::new`] with the edge connected to `core` (a cloudcore of the test's own).
    async fn new_on(core: &Cloudcore, prefix: &str) -> Scenario {
        let (client, ns, node) = Scenario::names(prefix).await;
        edge_node(&client, &node).await;
        let edge = Edge::connect_to(core, &node).await;
        edge.pushed_where("its own Node", |m| {
            m.route.resource.ends_with(&format!("/node/{node}"))
        })
        .await;
        Scenario {
            client,
            ns,
            node,
            edge,
        }
    }

    /// A scenario whose edge's Node does not exist yet.
    async fn unregistered(prefix: &str) -> Scenario {
        let (client, ns, node) = Scenario::names(prefix).await;
        let edge = Edge::connect(&node).await;
        Scenario {
            client,
            ns,
            node,
            edge,
        }
    }

    /// An admin client, a fresh namespace and a fresh node name.
    async fn names(prefix: &str) -> (kube::Client, String, String) {
        let _ = cloud();
        let client = k8s_testenv::client().await;
        let ns = k8s_testenv::namespace(prefix).await;
        (client, ns, unique(&format!("edge-{prefix}")))
    }

    /// The edge's own Node as it is now.
    async fn own_node(&self) -> Node {
        self.get(&self.all::<Node>(), &self.node)
            .await
            .expect("own node")
    }

    /// Sends its own Node back with `wanted` labels and annotations, as edgecore's node update.
    async fn update_own_node(&self, wanted: Value) -> Reply {
        self.edge
            .ask_json(&format!("default/node/{}", self.node), "update", wanted)
            .await
    }

    /// Another edge node (never connected): what this test's edge must not reach.
    async fn other_node(&self) -> String {
        let name = unique("other");
        edge_node(&self.client, &name).await;
        name
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn all<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>,
    {
        Api::all(self.client.clone())
    }

    /// Creates (as admin) pod `name` in the test namespace bound to `node`; `extra` is merged into
    /// a one-container spec.
    async fn pod(&self, name: &str, node: &str, extra: Value) -> Pod {
        let mut spec = json!({"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]});
        merge(&mut spec, extra);
        create(
            self.api(),
            &from::<Pod>(json!({"metadata": {"name": name}, "spec": spec})),
        )
        .await
    }

    /// [`Scenario::pod`] bound to this edge's node; returns once edgecontroller has sent it to
    /// the edge (so its watch caches hold it).
    async fn own_pod(&self, name: &str, extra: Value) -> Pod {
        self.pod(name, &self.node, extra).await;
        self.edge
            .pushed(&format!("{}/pod/{name}", self.ns), "insert")
            .await;
        self.get(&self.api(), name).await.expect("own pod")
    }

    /// The Secret `creds` and the pod `web` on this node that mounts it (what relates the
    /// Secret to the node), then the edge's metaServer watch of the Secret, applied until it is
    /// approved (the caches that decide it learn of the pod within moments). The watch has the
    /// id `id`, or a fresh one per attempt.
    async fn watched_secret(&self, id: Option<String>) -> SecretWatch {
        secret(self, "creds").await;
        self.own_pod(
            "web",
            json!({"volumes": [{"name": "s", "secret": {"secretName": "creds"}}]}),
        )
        .await;
        let watch = SecretWatch {
            key: format!("/core/v1/secrets/{}/creds", self.ns),
            id,
        };
        eventually(WAIT, "the watch of the pod's Secret", || async {
            let a = self.edge.apply(watch.application()).await;
            (a.status() == "Approved").then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        watch
    }

    /// How many deliveries of the Secret `creds` a watch sent the edge: its deletes, or the
    /// others. A watch's only: the edgecontroller, which sends the Secret too until its own
    /// caches see the pod gone, is another source.
    fn secret_deliveries(&self, deletes: bool) -> usize {
        let resource = format!("{}/secret/creds", self.ns);
        self.edge
            .pushed
            .lock()
            .unwrap()
            .iter()
            .filter(|m| {
                m.route.source == "dynamiccontroller"
                    && m.route.resource == resource
                    && (m.route.operation == "delete") == deletes
            })
            .count()
    }

    /// Rotates the Secret `creds` as admin and asserts that no watch delivers it to the edge.
    async fn rotation_not_delivered(&self) {
        let before = self.secret_deliveries(false);
        self.api::<Secret>()
            .patch(
                "creds",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"k": "rotated"}})),
            )
            .await
            .expect("admin rotates the Secret");
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            self.secret_deliveries(false),
            before,
            "a rotated Secret reached an edge whose watch the cluster no longer allows"
        );
    }

    async fn get<K>(&self, api: &Api<K>, name: &str) -> Option<K>
    where
        K: Clone + DeserializeOwned + std::fmt::Debug,
    {
        api.get_opt(name).await.expect("admin read")
    }

    /// Reads `obj` back and asserts it is exactly as it was (same resourceVersion).
    async fn unchanged<K>(&self, api: &Api<K>, obj: &K, what: &str)
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let name = obj.meta().name.clone().expect("named object");
        let now = self
            .get(api, &name)
            .await
            .unwrap_or_else(|| panic!("{what}: {name} was deleted"));
        assert_eq!(
            now.meta().resource_version,
            obj.meta().resource_version,
            "{what}: {name} was changed: {now:?}"
        );
    }

    /// Asserts the object `name` does not exist.
    async fn absent<K>(&self, api: &Api<K>, name: &str, what: &str)
    where
        K: Clone + DeserializeOwned + std::fmt::Debug,
    {
        let found = self.get(api, name).await;
        assert!(found.is_none(), "{what}: {name} was created: {found:?}");
    }
}

impl Drop for Scenario {
    /// A failing test keeps the cloudcore folder and shows what the log says about its node.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let core = cloud();
        let dir = &core.spec().dir;
        let _ = std::fs::write(dir.join(KEEP), "");
        let log = core.log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&self.node)).collect();
        eprintln!(
            "--- cloudcore log about {} ({} kept) ---\n{}\n--- end ---",
            self.node,
            core.spec().log_file().display(),
            lines[lines.len().saturating_sub(40)..].join("\n")
        );
    }
}

/// Creates an edge-labelled Node as an administrator.
/// An edge's metaServer watch of the Secret `creds` (see [`Scenario::watched_secret`]).
struct SecretWatch {
    key: String,
    /// The id every application of it repeats, as edgecore's watch sync; `None`: a fresh one
    /// each time.
    id: Option<String>,
}

impl SecretWatch {
    /// The watch as the edge's metaServer applies it.
    fn application(&self) -> Value {
        let mut app =
            metaserver::application("watch", &self.key, Some(json!({"watch": true})), None);
        app["ID"] = json!(self.id.clone().unwrap_or_else(|| unique("w")));
        app
    }
}

async fn edge_node(client: &kube::Client, name: &str) -> Node {
    let node: Node = from(json!({"metadata": {"name": name, "labels": {EDGE_LABEL: ""}}}));
    create(Api::all(client.clone()), &node).await
}

/// The value of label `key` on `node`.
fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.labels().get(key).map(String::as_str)
}

fn from<K: DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("object from JSON")
}

fn to_value<K: Serialize>(k: &K) -> Value {
    serde_json::to_value(k).expect("object to JSON")
}

async fn create<K>(api: Api<K>, obj: &K) -> K
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| panic!("admin create {:?}: {e}", obj.meta().name))
}

/// Merges the members of `extra` into `base` (one level).
fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(extra)) = (base.as_object_mut(), extra) {
        b.extend(extra);
    }
}

/// A mirror pod as a kubelet posts it for a static pod: annotated, bound to `node`, owned by
/// its Node; `extra` is merged into the spec.
fn mirror_pod(ns: &str, name: &str, node: &Node, extra: Value) -> Value {
    let node_name = node.name_any();
    let mut spec = json!({"nodeName": node_name, "containers": [{"name": "c", "image": "nginx"}]});
    merge(&mut spec, extra);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns,
            "annotations": {MIRROR: "3f2a9c", "kubernetes.io/config.source": "file"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name,
                "uid": node.uid(), "controller": true}],
        },
        "spec": spec,
    })
}

// ---------------------------------------------------------------------------------------------
// Node
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_edge_patches_its_own_node_status() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("np").await;
    let patch =
        r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}"#;
    let reply = s
        .edge
        .ask(
            &format!("default/nodepatch/{}", s.node),
            "patch",
            Content::string(patch),
        )
        .await;
    reply.object_resp_ok();
    let node = s.own_node().await;
    let ready = node
        .status
        .and_then(|st| st.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    assert_eq!(
        ready.map(|c| c.reason),
        Some(Some("KubeletReady".into())),
        "the own node's status was written"
    );
}

#[tokio::test]
async fn an_edge_cannot_patch_another_nodes_status() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("npx").await;
    let other = s.other_node().await;
    let nodes = s.all::<Node>();
    let before_node = s.get(&nodes, &other).await.expect("other node");
    let count = counting("patchNode").await;
    let patch = r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Pwned"}]}}"#;
    let reply = s
        .edge
        .ask(
            &format!("default/nodepatch/{other}"),
            "patch",
            Content::string(patch),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&nodes, &before_node, "nodepatch of another node")
        .await;
    count.one_more().await;
}

/// Which replica holds a node is the replicas' to say: a status patch that would rewrite the
/// Node's `cloudcore` annotation is refused whole, and the annotation stays.
#[tokio::test]
async fn an_edge_cannot_rewrite_which_replica_holds_it() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("npa").await;
    let nodes = s.all::<Node>();
    let before = s.settled_node().await;
    let count = counting("patchNode").await;
    let patch = r#"{"metadata":{"annotations":{"cloudcore":"10.9.9.9"}},"status":{"conditions":[{"type":"Ready","status":"True","reason":"Pwned"}]}}"#;
    let reply = s
        .edge
        .ask(
            &format!("default/nodepatch/{}", s.node),
            "patch",
            Content::string(patch),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&nodes, &before, "a status patch naming another replica")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_reads_its_own_node_but_not_another() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nq").await;
    let other = s.other_node().await;
    let own = s
        .edge
        .ask(
            &format!("default/node/{}", s.node),
            "query",
            Content::null(),
        )
        .await;
    assert_eq!(own.raw_object("Node")["metadata"]["name"], s.node.as_str());
    let count = counting("queryNode").await;
    let reply = s
        .edge
        .ask(&format!("default/node/{other}"), "query", Content::null())
        .await;
    reply.forbidden_raw(&s.node);
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_updates_labels_of_its_own_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nu").await;
    let node = s.own_node().await;
    let mut wanted = to_value(&node);
    wanted["metadata"]["labels"]["example.com/rack"] = json!("r7");
    wanted["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("z1");
    let reply = s.update_own_node(wanted).await;
    reply.ok();
    let after = s.own_node().await;
    assert_eq!(label(&after, "example.com/rack"), Some("r7"));
    assert_eq!(label(&after, "topology.kubernetes.io/zone"), Some("z1"));
}

#[tokio::test]
async fn an_edge_cannot_relabel_another_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nux").await;
    let other = s.other_node().await;
    let nodes = s.all::<Node>();
    let before_node = s.get(&nodes, &other).await.expect("other node");
    let mut wanted = to_value(&before_node);
    wanted["metadata"]["labels"]["example.com/owner"] = json!("attacker");
    let count = counting("updateNode").await;
    let reply = s
        .edge
        .ask_json(&format!("default/node/{other}"), "update", wanted)
        .await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&nodes, &before_node, "relabel of another node")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_set_node_restriction_labels_on_its_own_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nur").await;
    let nodes = s.all::<Node>();
    for (key, value) in [
        // NodeRestriction reserves this prefix for labels only administrators set (the usual
        // way to steer sensitive workloads to trusted nodes).
        ("node-restriction.kubernetes.io/trusted", "true"),
        // Not a kubelet label: claiming to be a control-plane node.
        ("node-role.kubernetes.io/control-plane", ""),
        ("kubernetes.io/role", "master"),
    ] {
        let node = s.get(&nodes, &s.node).await.expect("own node");
        let mut wanted = to_value(&node);
        wanted["metadata"]["labels"][key] = json!(value);
        let count = counting("updateNode").await;
        let reply = s.update_own_node(wanted).await;
        reply.forbidden_raw(&s.node);
        let after = s.get(&nodes, &s.node).await.expect("own node");
        assert!(
            !after.labels().contains_key(key),
            "label {key} was set on the edge's own node"
        );
        count.one_more().await;
    }
}

/// Sets `labels` on the edge's own Node as an administrator would; returns the Node once the
/// edge has received it (edgecore learns its labels that way, after cloudcore's caches did).
async fn label_as_admin(s: &Scenario, labels: Value) -> Node {
    Api::<Node>::all(s.client.clone())
        .patch(
            &s.node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": &labels}})),
        )
        .await
        .expect("admin label");
    s.edge
        .pushed_where("the relabelled Node", |m| {
            let pushed: Value = serde_json::from_str(m.content.as_json()).unwrap_or_default();
            let has = |(k, v): (&String, &Value)| pushed["metadata"]["labels"][k] == *v;
            m.route.resource.ends_with(&format!("/node/{}", s.node))
                && labels.as_object().is_some_and(|l| l.iter().all(has))
        })
        .await;
    // The latest version: the edge may have been sent a later one than the patch's.
    s.own_node().await
}

#[tokio::test]
async fn an_edge_updates_its_own_node_keeping_labels_an_administrator_set() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nua").await;
    let node = label_as_admin(
        &s,
        json!({"node-restriction.kubernetes.io/trusted": "false",
            "node-role.kubernetes.io/worker": ""}),
    )
    .await;
    // edgecore sends its whole Node back, reserved labels included, unchanged.
    let mut wanted = to_value(&node);
    wanted["metadata"]["labels"]["example.com/rack"] = json!("r9");
    let reply = s.update_own_node(wanted).await;
    reply.ok();
    let after = s.own_node().await;
    assert_eq!(label(&after, "example.com/rack"), Some("r9"));
    assert_eq!(
        label(&after, "node-restriction.kubernetes.io/trusted"),
        Some("false")
    );
}

#[tokio::test]
async fn an_edge_cannot_change_node_restriction_labels_an_administrator_set() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nuc").await;
    let node = label_as_admin(
        &s,
        json!({"node-restriction.kubernetes.io/trusted": "false"}),
    )
    .await;
    let mut wanted = to_value(&node);
    wanted["metadata"]["labels"]["node-restriction.kubernetes.io/trusted"] = json!("true");
    let count = counting("updateNode").await;
    let reply = s.update_own_node(wanted).await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&s.all::<Node>(), &node, "an administrator's label")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_registers_its_own_node_with_kubelet_labels() {
    test_tiers::require!(ApiServer);
    let s = Scenario::unregistered("nr").await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": s.node, "labels": {
        "kubernetes.io/hostname": s.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        EDGE_LABEL: "", "node-role.kubernetes.io/agent": "", "example.com/team": "a"}}});
    let reply = s
        .edge
        .ask_json(&format!("default/node/{}", s.node), "insert", node)
        .await;
    reply.object_resp_ok();
    let live = s.get(&s.all::<Node>(), &s.node).await.expect("registered");
    let labels = live.labels();
    for key in [
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        EDGE_LABEL,
        "node-role.kubernetes.io/agent",
        "example.com/team",
    ] {
        assert!(labels.contains_key(key), "label {key} kept: {labels:?}");
    }
}

#[tokio::test]
async fn an_edge_cannot_register_another_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nrx").await;
    let victim = unique("victim");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": victim,
        "labels": {EDGE_LABEL: ""}}});
    let count = counting("createNode").await;
    let reply = s
        .edge
        .ask_json(&format!("default/node/{victim}"), "insert", node)
        .await;
    reply.forbidden_object_resp(&s.node);
    s.absent(&s.all::<Node>(), &victim, "registration of another node")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_register_itself_with_node_restriction_labels() {
    test_tiers::require!(ApiServer);
    let s = Scenario::unregistered("nrl").await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": s.node, "labels": {
        "kubernetes.io/hostname": s.node, EDGE_LABEL: "",
        "node-restriction.kubernetes.io/trusted": "true"}}});
    let count = counting("createNode").await;
    let reply = s
        .edge
        .ask_json(&format!("default/node/{}", s.node), "insert", node)
        .await;
    reply.forbidden_object_resp(&s.node);
    s.absent(
        &s.all::<Node>(),
        &s.node,
        "registration with reserved labels",
    )
    .await;
    count.one_more().await;
}

/// The legacy `NodeStatusRequest` edgecore's older status path sends.
fn legacy_node_status(reason: &str) -> Value {
    json!({"UID": "u", "Status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": reason}],
        "nodeInfo": {"kubeletVersion": "v1.31.0-kubeedge", "machineID": "", "systemUUID": "",
            "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}},
        "ExtendResources": {}})
}

#[tokio::test]
async fn an_edge_writes_the_legacy_status_of_its_own_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ns").await;
    let reply = s
        .edge
        .ask_json(
            &format!("default/nodestatus/{}", s.node),
            "update",
            legacy_node_status("Legacy"),
        )
        .await;
    reply.ok();
    let node = s.own_node().await;
    let info = node.status.and_then(|st| st.node_info).expect("node info");
    assert_eq!(info.kubelet_version, "v1.31.0-kubeedge");
}

#[tokio::test]
async fn an_edge_cannot_write_the_legacy_status_of_another_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nsx").await;
    let other = s.other_node().await;
    let nodes = s.all::<Node>();
    let before_node = s.get(&nodes, &other).await.expect("other node");
    let count = counting("updateNodeStatus").await;
    let reply = s
        .edge
        .ask_json(
            &format!("default/nodestatus/{other}"),
            "update",
            legacy_node_status("Pwned"),
        )
        .await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&nodes, &before_node, "legacy status of another node")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_register_another_node_through_legacy_node_status() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nsi").await;
    let victim = unique("victim");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": victim,
        "labels": {EDGE_LABEL: ""}}});
    let count = counting("updateNodeStatus").await;
    let reply = s
        .edge
        .ask_json(&format!("default/nodestatus/{victim}"), "insert", node)
        .await;
    reply.forbidden_raw(&s.node);
    s.absent(
        &s.all::<Node>(),
        &victim,
        "legacy registration of another node",
    )
    .await;
    count.one_more().await;
}

// ---------------------------------------------------------------------------------------------
// Pods: status, delete
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_edge_patches_the_status_of_its_own_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pp").await;
    s.own_pod("web", json!({})).await;
    let reply = s
        .edge
        .ask(
            &format!("{}/podpatch/web", s.ns),
            "patch",
            Content::string(r#"{"status":{"phase":"Running","podIP":"10.1.2.3"}}"#),
        )
        .await;
    assert_eq!(reply.object_resp_ok()["status"]["podIP"], "10.1.2.3");
    let live = s.get(&s.api::<Pod>(), "web").await.expect("own pod");
    assert_eq!(
        live.status.and_then(|st| st.phase).as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn an_edge_cannot_patch_another_nodes_pod_status() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ppx").await;
    let other = s.other_node().await;
    let pod = s.pod("web", &other, json!({})).await;
    let count = counting("patchPod").await;
    let reply = s
        .edge
        .ask(
            &format!("{}/podpatch/web", s.ns),
            "patch",
            Content::string(r#"{"status":{"phase":"Failed","reason":"Pwned"}}"#),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&s.api::<Pod>(), &pod, "podpatch of another node's pod")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_patch_a_pod_that_shares_a_name_with_its_own_in_another_namespace() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ppn").await;
    let other = s.other_node().await;
    s.own_pod("web", json!({})).await;
    let elsewhere = k8s_testenv::namespace("ppn-victim").await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &elsewhere);
    let theirs: Pod = create(
        pods.clone(),
        &from(
            json!({"metadata": {"name": "web"}, "spec": {"nodeName": other,
            "containers": [{"name": "c", "image": "nginx"}]}}),
        ),
    )
    .await;
    let count = counting("patchPod").await;
    let reply = s
        .edge
        .ask(
            &format!("{elsewhere}/podpatch/web"),
            "patch",
            Content::string(r#"{"status":{"phase":"Failed","reason":"Pwned"}}"#),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&pods, &theirs, "a same-named pod of another node")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_patch_the_status_of_an_unscheduled_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ppu").await;
    let pod = s.pod("pending", "", json!({})).await;
    let count = counting("patchPod").await;
    let reply = s
        .edge
        .ask(
            &format!("{}/podpatch/pending", s.ns),
            "patch",
            Content::string(r#"{"status":{"phase":"Running"}}"#),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&s.api::<Pod>(), &pod, "podpatch of an unscheduled pod")
        .await;
    count.one_more().await;
}

fn legacy_pod_status(pod: &Pod, phase: &str) -> Value {
    json!({"UID": pod.uid(), "Name": pod.name_any(), "Status": {"phase": phase}})
}

#[tokio::test]
async fn an_edge_writes_the_legacy_status_of_its_own_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ps").await;
    let pod = s.own_pod("web", json!({})).await;
    let reply = s
        .edge
        .ask_json(
            &format!("{}/podstatus/web", s.ns),
            "update",
            legacy_pod_status(&pod, "Running"),
        )
        .await;
    reply.ok();
    let live = s.get(&s.api::<Pod>(), "web").await.expect("own pod");
    assert_eq!(
        live.status.and_then(|st| st.phase).as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn an_edge_cannot_write_the_legacy_status_of_another_nodes_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("psx").await;
    let other = s.other_node().await;
    let pod = s.pod("web", &other, json!({})).await;
    let count = counting("updatePodStatus").await;
    let reply = s
        .edge
        .ask_json(
            &format!("{}/podstatus/web", s.ns),
            "update",
            legacy_pod_status(&pod, "Failed"),
        )
        .await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&s.api::<Pod>(), &pod, "legacy status of another node's pod")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn a_legacy_pod_status_cannot_name_another_nodes_pod_in_its_body() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("psb").await;
    let other = s.other_node().await;
    s.own_pod("mine", json!({})).await;
    let theirs = s.pod("theirs", &other, json!({})).await;
    let count = counting("updatePodStatus").await;
    // The resource names the edge's own pod; the request inside names the other one.
    let reply = s
        .edge
        .ask_json(
            &format!("{}/podstatus/mine", s.ns),
            "update",
            legacy_pod_status(&theirs, "Failed"),
        )
        .await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&s.api::<Pod>(), &theirs, "the pod named in the body")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn a_legacy_pod_status_list_naming_another_nodes_pod_is_refused_whole() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("psl").await;
    let other = s.other_node().await;
    let own = s.own_pod("mine", json!({})).await;
    let theirs = s.pod("theirs", &other, json!({})).await;
    let count = counting("updatePodStatus").await;
    // The list form (no name in the resource), as edgecore's status manager sends it.
    let reply = s
        .edge
        .ask_json(
            &format!("{}/podstatus", s.ns),
            "update",
            json!([
                legacy_pod_status(&own, "Running"),
                legacy_pod_status(&theirs, "Failed")
            ]),
        )
        .await;
    reply.forbidden_raw(&s.node);
    let pods = s.api::<Pod>();
    s.unchanged(&pods, &theirs, "the other node's pod in the list")
        .await;
    let mine = s.get(&pods, "mine").await.expect("own pod");
    assert_ne!(
        mine.status.and_then(|st| st.phase).as_deref(),
        Some("Running"),
        "the own pod's status from a refused list was written"
    );
    s.unchanged(&pods, &own, "the own pod of a refused list")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_deletes_its_own_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pd").await;
    let pod = s.own_pod("web", json!({})).await;
    let reply = s
        .edge
        .ask_json(
            &format!("{}/pod/web", s.ns),
            "delete",
            json!({"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid()}}),
        )
        .await;
    reply.ok();
    s.absent(&s.api::<Pod>(), "web", "own pod after its delete")
        .await;
}

#[tokio::test]
async fn an_edge_cannot_delete_another_nodes_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pdx").await;
    let other = s.other_node().await;
    let pod = s.pod("web", &other, json!({})).await;
    let count = counting("deletePod").await;
    let reply = s
        .edge
        .ask_json(
            &format!("{}/pod/web", s.ns),
            "delete",
            json!({"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid()}}),
        )
        .await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&s.api::<Pod>(), &pod, "delete of another node's pod")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_delete_an_unscheduled_pod_by_uid() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pdu").await;
    let pod = s.pod("pending", "", json!({})).await;
    let count = counting("deletePod").await;
    // Old edges send the UID as a plain string.
    let reply = s
        .edge
        .ask(
            &format!("{}/pod/pending", s.ns),
            "delete",
            Content::string(pod.uid().unwrap_or_default()),
        )
        .await;
    reply.forbidden_raw(&s.node);
    s.unchanged(&s.api::<Pod>(), &pod, "delete of an unscheduled pod")
        .await;
    count.one_more().await;
}

// ---------------------------------------------------------------------------------------------
// Pods: create (mirror pods only)
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_edge_creates_a_mirror_pod_bound_to_itself() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pc").await;
    let node = s.own_node().await;
    let pod = mirror_pod(&s.ns, "static-web", &node, json!({}));
    let reply = s
        .edge
        .ask_json(&format!("{}/pod/static-web", s.ns), "insert", pod)
        .await;
    reply.object_resp_ok();
    let live = s.get(&s.api::<Pod>(), "static-web").await.expect("created");
    assert!(live.annotations().contains_key(MIRROR));
}

/// Sends each `(what, pod)` as a pod insert at `<ns>/pod/<name>` and asserts it is refused,
/// not created (in the resource's namespace nor in the pod's own) and counted.
async fn assert_pod_creates_refused(s: &Scenario, attempts: Vec<(&str, Value)>) {
    for (what, pod) in attempts {
        let name = pod["metadata"]["name"]
            .as_str()
            .expect("pod name")
            .to_owned();
        let count = counting("createPod").await;
        let reply = s
            .edge
            .ask_json(&format!("{}/pod/{name}", s.ns), "insert", pod.clone())
            .await;
        reply.forbidden_object_resp(&s.node);
        s.absent(&s.api::<Pod>(), &name, what).await;
        if let Some(ns) = pod["metadata"]["namespace"].as_str() {
            let api: Api<Pod> = Api::namespaced(s.client.clone(), ns);
            s.absent(&api, &name, what).await;
        }
        count.one_more().await;
    }
}

#[tokio::test]
async fn an_edge_cannot_create_a_pod_bound_to_another_node_or_to_none() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pcx").await;
    let other = s.other_node().await;
    let nodes = s.all::<Node>();
    let other_node = s.get(&nodes, &other).await.expect("other node");
    let own = s.get(&nodes, &s.node).await.expect("own node");
    let mut unbound = mirror_pod(&s.ns, "unbound", &own, json!({}));
    unbound["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("nodeName");
    assert_pod_creates_refused(
        &s,
        vec![
            (
                "a mirror pod bound to another node",
                mirror_pod(&s.ns, "elsewhere", &other_node, json!({})),
            ),
            ("a pod for the scheduler to place anywhere", unbound),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_edge_cannot_create_a_non_mirror_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pcn").await;
    let own = s.own_node().await;
    let mut plain = mirror_pod(&s.ns, "plain", &own, json!({}));
    plain["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("annotations");
    let mut privileged = plain.clone();
    privileged["metadata"]["name"] = json!("privileged");
    privileged["spec"]["hostPID"] = json!(true);
    privileged["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    assert_pod_creates_refused(
        &s,
        vec![
            ("a pod without the mirror annotation", plain),
            ("a privileged pod without the mirror annotation", privileged),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_edge_cannot_create_a_pod_in_another_namespace_than_it_names() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pcns").await;
    let own = s.own_node().await;
    let elsewhere = k8s_testenv::namespace("pcns-victim").await;
    assert_pod_creates_refused(
        &s,
        vec![(
            "a mirror pod whose namespace differs from the resource's",
            mirror_pod(&elsewhere, "moved", &own, json!({})),
        )],
    )
    .await;
}

#[tokio::test]
async fn an_edge_cannot_create_a_mirror_pod_that_mounts_secrets_configmaps_or_claims() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pcv").await;
    let own = s.own_node().await;
    let with_volume =
        |name: &str, volume: Value| mirror_pod(&s.ns, name, &own, json!({"volumes": [volume]}));
    assert_pod_creates_refused(
        &s,
        vec![
            (
                "a secret volume",
                with_volume(
                    "secret-vol",
                    json!({"name": "v", "secret": {"secretName": "loot"}}),
                ),
            ),
            (
                "a configmap volume",
                with_volume("cm-vol", json!({"name": "v", "configMap": {"name": "cfg"}})),
            ),
            (
                "a claim volume",
                with_volume(
                    "pvc-vol",
                    json!({"name": "v", "persistentVolumeClaim": {"claimName": "data"}}),
                ),
            ),
            (
                "a projected secret",
                with_volume(
                    "projected-vol",
                    json!({"name": "v", "projected": {"sources": [{"secret": {"name": "loot"}}]}}),
                ),
            ),
            (
                "an ephemeral claim",
                with_volume(
                    "ephemeral-vol",
                    json!({"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}}}),
                ),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_edge_cannot_create_a_mirror_pod_that_reads_secrets_or_configmaps_through_env() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pce").await;
    let own = s.own_node().await;
    let with_container = |name: &str, extra: Value| {
        let mut container = json!({"name": "c", "image": "nginx"});
        merge(&mut container, extra);
        mirror_pod(&s.ns, name, &own, json!({"containers": [container]}))
    };
    let mut init = mirror_pod(&s.ns, "init-env", &own, json!({}));
    init["spec"]["initContainers"] = json!([{"name": "i", "image": "busybox", "env": [{"name": "K",
        "valueFrom": {"secretKeyRef": {"name": "loot", "key": "k"}}}]}]);
    assert_pod_creates_refused(
        &s,
        vec![
            (
                "env from a secret key",
                with_container(
                    "env-secret",
                    json!({"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "loot", "key": "k"}}}]}),
                ),
            ),
            (
                "env from a configmap key",
                with_container(
                    "env-cm",
                    json!({"env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
                ),
            ),
            (
                "envFrom a secret",
                with_container("envfrom-secret", json!({"envFrom": [{"secretRef": {"name": "loot"}}]})),
            ),
            (
                "envFrom a configmap",
                with_container("envfrom-cm", json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]})),
            ),
            ("an init container's env from a secret", init),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_edge_cannot_create_a_mirror_pod_with_pull_secrets_or_a_service_account() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pcs").await;
    let own = s.own_node().await;
    assert_pod_creates_refused(
        &s,
        vec![
            (
                "image pull secrets",
                mirror_pod(
                    &s.ns,
                    "pull",
                    &own,
                    json!({"imagePullSecrets": [{"name": "loot"}]}),
                ),
            ),
            (
                "a service account",
                mirror_pod(&s.ns, "sa", &own, json!({"serviceAccountName": "default"})),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_edge_cannot_create_a_mirror_pod_owned_by_anything_but_its_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pco").await;
    let other = s.other_node().await;
    let nodes = s.all::<Node>();
    let own = s.get(&nodes, &s.node).await.expect("own node");
    let other_node = s.get(&nodes, &other).await.expect("other node");
    let mut owned_by_other = mirror_pod(&s.ns, "owned-other", &own, json!({}));
    owned_by_other["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node",
        "name": other, "uid": other_node.uid(), "controller": true}]);
    let mut owned_by_rs = mirror_pod(&s.ns, "owned-rs", &own, json!({}));
    owned_by_rs["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
        "kind": "ReplicaSet", "name": "web", "uid": "0b6f2d8e-1111-4c3a-9d2e-000000000001",
        "controller": true}]);
    assert_pod_creates_refused(
        &s,
        vec![
            ("a mirror pod owned by another node", owned_by_other),
            ("a mirror pod owned by a ReplicaSet", owned_by_rs),
        ],
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// What pods use: ConfigMaps, Secrets, claims, volumes, attachments
// ---------------------------------------------------------------------------------------------

async fn configmap(s: &Scenario, name: &str) -> ConfigMap {
    create(
        s.api(),
        &from(json!({"metadata": {"name": name}, "data": {"k": "v"}})),
    )
    .await
}

async fn secret(s: &Scenario, name: &str) -> Secret {
    create(
        s.api(),
        &from(json!({"metadata": {"name": name}, "stringData": {"k": "v"}})),
    )
    .await
}

/// A claim bound to a new volume of its own; returns (claim name, volume name).
async fn bound_claim(s: &Scenario, claim: &str) -> (String, String) {
    let pv = unique("pv");
    let volume: PersistentVolume = from(json!({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "hostPath": {"path": "/tmp/hostile-edge"},
        "claimRef": {"namespace": s.ns, "name": claim}}}));
    create(s.all(), &volume).await;
    let pvc: PersistentVolumeClaim = from(json!({"metadata": {"name": claim}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
        "resources": {"requests": {"storage": "1Gi"}}}}));
    create(s.api(), &pvc).await;
    (claim.to_owned(), pv)
}

/// A pod spec fragment using ConfigMap `cm`, Secret `secret` and claim `claim`.
fn using(cm: &str, secret: &str, claim: &str) -> Value {
    json!({"volumes": [
        {"name": "a", "configMap": {"name": cm}},
        {"name": "b", "secret": {"secretName": secret}},
        {"name": "c", "persistentVolumeClaim": {"claimName": claim}}]})
}

#[tokio::test]
async fn an_edge_reads_the_configmaps_secrets_and_claims_its_pods_use() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("rd").await;
    configmap(&s, "cfg").await;
    secret(&s, "creds").await;
    bound_claim(&s, "data").await;
    s.own_pod("web", using("cfg", "creds", "data")).await;
    let cm = s
        .edge
        .ask(&format!("{}/configmap/cfg", s.ns), "query", Content::null())
        .await;
    assert_eq!(cm.raw_object("ConfigMap")["data"]["k"], "v");
    let sec = s
        .edge
        .ask(&format!("{}/secret/creds", s.ns), "query", Content::null())
        .await;
    sec.raw_object("Secret");
    let pvc = s
        .edge
        .ask(
            &format!("{}/persistentvolumeclaim/data", s.ns),
            "query",
            Content::null(),
        )
        .await;
    pvc.raw_object("PersistentVolumeClaim");
}

#[tokio::test]
async fn an_edge_cannot_read_what_only_another_nodes_pods_use() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("rdx").await;
    let other = s.other_node().await;
    configmap(&s, "cfg").await;
    secret(&s, "creds").await;
    bound_claim(&s, "data").await;
    s.pod("theirs", &other, using("cfg", "creds", "data")).await;
    // A pod of the edge's own that uses nothing: its node is known to the caches.
    s.own_pod("mine", json!({})).await;
    for (resource, kind) in [
        ("configmap/cfg", "queryConfigMap"),
        ("secret/creds", "querySecret"),
        ("persistentvolumeclaim/data", "queryPersistentVolumeClaim"),
    ] {
        let count = counting(kind).await;
        let reply = s
            .edge
            .ask(&format!("{}/{resource}", s.ns), "query", Content::null())
            .await;
        reply.forbidden_raw(&s.node);
        count.one_more().await;
    }
}

#[tokio::test]
async fn an_edge_cannot_read_the_kubeedge_ca_secret() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("rdca").await;
    let count = counting("querySecret").await;
    let reply = s
        .edge
        .ask("kubeedge/secret/casecret", "query", Content::null())
        .await;
    reply.forbidden_raw(&s.node);
    assert!(
        reply.body.get("data").is_none(),
        "no key material in the answer"
    );
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_read_a_secret_by_creating_a_pod_that_references_it() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("rdp").await;
    secret(&s, "loot").await;
    let own = s.own_node().await;
    let mut plain = mirror_pod(
        &s.ns,
        "thief",
        &own,
        json!({"volumes": [{"name": "v", "secret": {"secretName": "loot"}}]}),
    );
    plain["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("annotations");
    let mirror = mirror_pod(
        &s.ns,
        "thief-mirror",
        &own,
        json!({"volumes": [{"name": "v", "secret": {"secretName": "loot"}}]}),
    );
    assert_pod_creates_refused(
        &s,
        vec![
            ("a pod that mounts the secret", plain),
            ("a mirror pod that mounts the secret", mirror),
        ],
    )
    .await;
    let count = counting("querySecret").await;
    let reply = s
        .edge
        .ask(&format!("{}/secret/loot", s.ns), "query", Content::null())
        .await;
    reply.forbidden_raw(&s.node);
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_read_a_secret_only_a_mirror_pod_references() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("rdm").await;
    secret(&s, "loot").await;
    let own = s.own_node().await;
    // Created by an administrator: the Node authorizer's graph ignores mirror pods.
    let mirror: Pod = from(mirror_pod(
        &s.ns,
        "static",
        &own,
        json!({"volumes": [{"name": "v", "secret": {"secretName": "loot"}}]}),
    ));
    create(s.api(), &mirror).await;
    s.edge
        .pushed(&format!("{}/pod/static", s.ns), "insert")
        .await;
    let count = counting("querySecret").await;
    let reply = s
        .edge
        .ask(&format!("{}/secret/loot", s.ns), "query", Content::null())
        .await;
    reply.forbidden_raw(&s.node);
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_reads_a_persistent_volume_bound_to_a_claim_its_pod_uses() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pv").await;
    let (_, pv) = bound_claim(&s, "data").await;
    s.own_pod(
        "web",
        json!({"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "data"}}]}),
    )
    .await;
    let reply = s
        .edge
        .ask(
            &format!("default/persistentvolume/{pv}"),
            "query",
            Content::null(),
        )
        .await;
    assert_eq!(
        reply.raw_object("PersistentVolume")["metadata"]["name"],
        pv.as_str()
    );
}

#[tokio::test]
async fn an_edge_cannot_read_a_persistent_volume_its_pods_do_not_use() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("pvx").await;
    let other = s.other_node().await;
    let (_, pv) = bound_claim(&s, "data").await;
    s.pod(
        "theirs",
        &other,
        json!({"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "data"}}]}),
    )
    .await;
    s.own_pod("mine", json!({})).await;
    let count = counting("queryPersistentVolume").await;
    let reply = s
        .edge
        .ask(
            &format!("default/persistentvolume/{pv}"),
            "query",
            Content::null(),
        )
        .await;
    reply.forbidden_raw(&s.node);
    count.one_more().await;
}

async fn volume_attachment(s: &Scenario, node: &str) -> String {
    let name = unique("va");
    let va: VolumeAttachment = from(json!({"metadata": {"name": name}, "spec": {
        "attacher": "csi.example.com", "nodeName": node,
        "source": {"persistentVolumeName": unique("pv")}}}));
    create(s.all(), &va).await;
    name
}

#[tokio::test]
async fn an_edge_reads_volume_attachments_to_its_own_node_only() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("va").await;
    let other = s.other_node().await;
    let own = volume_attachment(&s, &s.node).await;
    let theirs = volume_attachment(&s, &other).await;
    let reply = s
        .edge
        .ask(
            &format!("default/volumeattachment/{own}"),
            "query",
            Content::null(),
        )
        .await;
    assert_eq!(
        reply.raw_object("VolumeAttachment")["spec"]["nodeName"],
        s.node.as_str()
    );
    let count = counting("queryVolumeAttachment").await;
    let reply = s
        .edge
        .ask(
            &format!("default/volumeattachment/{theirs}"),
            "query",
            Content::null(),
        )
        .await;
    reply.forbidden_raw(&s.node);
    count.one_more().await;
}

// ---------------------------------------------------------------------------------------------
// Service-account tokens
// ---------------------------------------------------------------------------------------------

async fn service_account(s: &Scenario, name: &str) {
    let sa: ServiceAccount = from(json!({"metadata": {"name": name}}));
    create(s.api(), &sa).await;
}

/// A TokenRequest as the kubelet's token manager sends it, bound to `bound` (pod name, uid).
/// A TokenRequest as the kubelet makes it for a projected token without an audience (the API
/// server's own).
fn token_request(account: &str, ns: &str, bound: Option<(&str, &str)>) -> Value {
    let mut spec = json!({"expirationSeconds": 3600});
    if let Some((name, uid)) = bound {
        spec["boundObjectRef"] =
            json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid});
    }
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": {"name": account, "namespace": ns}, "spec": spec})
}

#[tokio::test]
async fn an_edge_gets_a_token_for_the_account_of_its_own_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("sa").await;
    service_account(&s, "app").await;
    // With the projected token volume the ServiceAccount admission plugin adds.
    let pod = s
        .own_pod(
            "web",
            json!({"serviceAccountName": "app", "volumes": [{"name": "kube-api-access",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}),
        )
        .await;
    let uid = pod.uid().unwrap_or_default();
    let reply = s
        .edge
        .ask_json(
            &format!("{}/serviceaccounttoken/app", s.ns),
            "query",
            token_request("app", &s.ns, Some(("web", &uid))),
        )
        .await;
    let token = reply.raw_object("TokenRequest")["status"]["token"]
        .as_str()
        .unwrap_or_default();
    assert!(!token.is_empty(), "a token was issued");
}

#[tokio::test]
async fn an_edge_gets_tokens_only_for_audiences_its_pod_declares() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("aud").await;
    service_account(&s, "app").await;
    let pod = s
        .own_pod(
            "web",
            json!({"serviceAccountName": "app", "volumes": [{"name": "t", "projected": {"sources": [
                {"serviceAccountToken": {"audience": "vault", "path": "t"}}]}}]}),
        )
        .await;
    let uid = pod.uid().unwrap_or_default();
    let resource = format!("{}/serviceaccounttoken/app", s.ns);
    let ask = |audience: &str| {
        let mut tr = token_request("app", &s.ns, Some(("web", &uid)));
        tr["spec"]["audiences"] = json!([audience]);
        s.edge.ask_json(&resource, "query", tr)
    };
    let reply = ask("vault").await;
    let token = reply.raw_object("TokenRequest")["status"]["token"]
        .as_str()
        .unwrap_or_default();
    assert!(!token.is_empty(), "a token for the declared audience");
    let count = counting("serviceAccountToken").await;
    ask("https://kubernetes.default.svc")
        .await
        .forbidden_raw(&s.node);
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_get_a_token_its_pods_do_not_use_or_not_bound_to_its_pod() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("sax").await;
    let other = s.other_node().await;
    for account in ["app", "admin", "theirs"] {
        service_account(&s, account).await;
    }
    let mine = s.own_pod("web", json!({"serviceAccountName": "app"})).await;
    let theirs = s
        .pod("db", &other, json!({"serviceAccountName": "theirs"}))
        .await;
    let (mine_uid, theirs_uid) = (
        mine.uid().unwrap_or_default(),
        theirs.uid().unwrap_or_default(),
    );
    let attempts = [
        (
            "an account no pod of the node uses",
            "admin",
            Some(("web", mine_uid.as_str())),
        ),
        (
            "another node's pod's account, bound to that pod",
            "theirs",
            Some(("db", theirs_uid.as_str())),
        ),
        (
            "its own pod's account, bound to another node's pod",
            "app",
            Some(("db", theirs_uid.as_str())),
        ),
        ("its own pod's account, bound to nothing", "app", None),
        (
            "its own pod's account, bound to its pod's name with another uid",
            "app",
            Some(("web", "0b6f2d8e-1111-4c3a-9d2e-000000000002")),
        ),
    ];
    for (what, account, bound) in attempts {
        let count = counting("serviceAccountToken").await;
        let reply = s
            .edge
            .ask_json(
                &format!("{}/serviceaccounttoken/{account}", s.ns),
                "query",
                token_request(account, &s.ns, bound),
            )
            .await;
        assert!(
            reply.body["status"]["token"].is_null(),
            "{what}: a token was issued"
        );
        reply.forbidden_raw(&s.node);
        count.one_more().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

fn lease(ns: &str, name: &str, holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 40,
            "renewTime": "2026-01-01T00:00:00.000000Z"}})
}

#[tokio::test]
async fn an_edge_creates_updates_and_reads_its_own_node_lease() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ls").await;
    let resource = format!("kube-node-lease/lease/{}", s.node);
    let reply = s
        .edge
        .ask_json(
            &resource,
            "insert",
            lease("kube-node-lease", &s.node, &s.node),
        )
        .await;
    let mut created = reply.object_resp_ok().clone();
    created["spec"]["renewTime"] = json!("2026-01-01T00:00:10.000000Z");
    s.edge
        .ask_json(&resource, "update", created)
        .await
        .object_resp_ok();
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "kube-node-lease");
    let live = s.get(&leases, &s.node).await.expect("own lease");
    assert_eq!(
        live.spec
            .and_then(|sp| sp.renew_time)
            .map(|t| t.0.to_string()),
        Some("2026-01-01T00:00:10Z".into())
    );
    let reply = s.edge.ask(&resource, "query", Content::null()).await;
    assert_eq!(reply.object_resp_ok()["metadata"]["name"], s.node.as_str());
}

#[tokio::test]
async fn an_edge_cannot_write_or_read_another_nodes_lease() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("lsx").await;
    let other = s.other_node().await;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "kube-node-lease");
    let resource = format!("kube-node-lease/lease/{other}");
    let count = counting("createLease").await;
    let reply = s
        .edge
        .ask_json(
            &resource,
            "insert",
            lease("kube-node-lease", &other, &s.node),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.absent(&leases, &other, "another node's lease created")
        .await;
    count.one_more().await;

    let existing = create(
        leases.clone(),
        &from(lease("kube-node-lease", &other, &other)),
    )
    .await;
    let mut taken = to_value(&existing);
    taken["spec"]["holderIdentity"] = json!(s.node);
    let count = counting("createLease").await;
    let reply = s.edge.ask_json(&resource, "update", taken).await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&leases, &existing, "another node's lease updated")
        .await;
    count.one_more().await;

    let count = counting("queryLease").await;
    let reply = s.edge.ask(&resource, "query", Content::null()).await;
    reply.forbidden_object_resp(&s.node);
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_write_cloudcores_leader_lease() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("lsc").await;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "kubeedge");
    let existing = match s.get(&leases, "cloudcore").await {
        Some(l) => l,
        None => {
            create(
                leases.clone(),
                &from(lease("kubeedge", "cloudcore", "cloudcore-0")),
            )
            .await
        }
    };
    let mut taken = to_value(&existing);
    taken["spec"]["holderIdentity"] = json!(s.node);
    let count = counting("createLease").await;
    let reply = s
        .edge
        .ask_json("kubeedge/lease/cloudcore", "update", taken)
        .await;
    reply.forbidden_object_resp(&s.node);
    s.unchanged(&leases, &existing, "cloudcore's leader lease")
        .await;
    count.one_more().await;
}

#[tokio::test]
async fn an_edge_cannot_write_a_lease_outside_kube_node_lease_or_under_another_name() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("lsn").await;
    let other = s.other_node().await;
    // Its own name, in another namespace.
    let count = counting("createLease").await;
    let reply = s
        .edge
        .ask_json(
            &format!("{}/lease/{}", s.ns, s.node),
            "insert",
            lease(&s.ns, &s.node, &s.node),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.absent(
        &s.api::<Lease>(),
        &s.node,
        "own lease name in another namespace",
    )
    .await;
    count.one_more().await;
    // Its own lease in the resource, another node's in the body.
    let count = counting("createLease").await;
    let reply = s
        .edge
        .ask_json(
            &format!("kube-node-lease/lease/{}", s.node),
            "insert",
            lease("kube-node-lease", &other, &s.node),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "kube-node-lease");
    s.absent(&leases, &other, "a body naming another node's lease")
        .await;
    count.one_more().await;
}

// ---------------------------------------------------------------------------------------------
// Events (never answered)
// ---------------------------------------------------------------------------------------------

fn event(ns: &str, name: &str, involved: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
        "involvedObject": involved, "reason": "Started", "message": "started", "type": "Normal",
        "source": {"component": "kubelet"}, "count": 1})
}

#[tokio::test]
async fn an_edge_reports_events_about_itself_and_its_pods() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("ev").await;
    let pod = s.own_pod("web", json!({})).await;
    let node_event = unique(&s.node);
    s.edge
        .send(
            &format!("default/event/{node_event}"),
            "insert",
            json_content(&event(
                "default",
                &node_event,
                json!({"kind": "Node", "name": s.node, "uid": s.node}),
            )),
        )
        .await;
    s.edge
        .send(
            &format!("{}/event/web.1", s.ns),
            "insert",
            json_content(&event(
                &s.ns,
                "web.1",
                json!({"kind": "Pod", "name": "web", "namespace": s.ns, "uid": pod.uid()}),
            )),
        )
        .await;
    let defaults: Api<Event> = Api::namespaced(s.client.clone(), "default");
    let pods_events = s.api::<Event>();
    let written = eventually(WAIT, "both events written", || async {
        let a = defaults.get_opt(&node_event).await.ok().flatten();
        let b = pods_events.get_opt("web.1").await.ok().flatten();
        (a.is_some() && b.is_some()).then_some(())
    })
    .await;
    assert!(written.is_ok(), "{written:?}");
}

#[tokio::test]
async fn an_edge_cannot_report_events_about_another_node_or_its_pods() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("evx").await;
    let other = s.other_node().await;
    let pod = s.pod("theirs", &other, json!({})).await;
    let node_event = unique(&other);
    let attempts = [
        (
            "default",
            node_event.clone(),
            json!({"kind": "Node", "name": other, "uid": other}),
        ),
        (
            s.ns.as_str(),
            "theirs.1".to_owned(),
            json!({"kind": "Pod", "name": "theirs", "namespace": s.ns, "uid": pod.uid()}),
        ),
    ];
    for (ns, name, involved) in attempts {
        let count = counting("processEvent").await;
        let pending = s
            .edge
            .send(
                &format!("{ns}/event/{name}"),
                "insert",
                json_content(&event(ns, &name, involved)),
            )
            .await;
        count.one_more().await;
        let api: Api<Event> = Api::namespaced(s.client.clone(), ns);
        s.absent(&api, &name, "an event about another node").await;
        assert!(pending.arrived().is_none(), "events are never answered");
    }
}

#[tokio::test]
async fn an_edge_cannot_report_an_event_about_a_same_named_pod_of_another_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("evn").await;
    let other = s.other_node().await;
    s.own_pod("web", json!({})).await;
    let elsewhere = k8s_testenv::namespace("evn-victim").await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &elsewhere);
    let theirs: Pod = create(
        pods,
        &from(
            json!({"metadata": {"name": "web"}, "spec": {"nodeName": other,
            "containers": [{"name": "c", "image": "nginx"}]}}),
        ),
    )
    .await;
    // The resource's namespace holds the edge's own `web`; the event is in (and about) the
    // other namespace, where `web` is bound to another node.
    let body = event(
        &elsewhere,
        "web.1",
        json!({"kind": "Pod", "name": "web", "namespace": elsewhere, "uid": theirs.uid()}),
    );
    let count = counting("processEvent").await;
    let pending = s
        .edge
        .send(
            &format!("{}/event/web.1", s.ns),
            "insert",
            json_content(&body),
        )
        .await;
    count.one_more().await;
    for ns in [&elsewhere, &s.ns] {
        let api: Api<Event> = Api::namespaced(s.client.clone(), ns);
        s.absent(&api, "web.1", "an event about another node's pod")
            .await;
    }
    assert!(pending.arrived().is_none(), "events are never answered");
}

#[tokio::test]
async fn an_edge_cannot_overwrite_an_event_about_another_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("evu").await;
    let other = s.other_node().await;
    let name = unique(&other);
    let defaults: Api<Event> = Api::namespaced(s.client.clone(), "default");
    let existing: Event = create(
        defaults.clone(),
        &from(event(
            "default",
            &name,
            json!({"kind": "Node", "name": other, "uid": other}),
        )),
    )
    .await;
    let mut replaced = to_value(&existing);
    replaced["message"] = json!("pwned");
    let count = counting("processEvent").await;
    s.edge
        .send(
            &format!("default/event/{name}"),
            "update",
            json_content(&replaced),
        )
        .await;
    count.one_more().await;
    s.unchanged(&defaults, &existing, "another node's event")
        .await;
}

#[tokio::test]
async fn an_edge_cannot_patch_an_event_about_another_node_by_claiming_it_is_its_own() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("evp").await;
    let other = s.other_node().await;
    let name = unique(&other);
    let defaults: Api<Event> = Api::namespaced(s.client.clone(), "default");
    let existing: Event = create(
        defaults.clone(),
        &from(event(
            "default",
            &name,
            json!({"kind": "Node", "name": other, "uid": other}),
        )),
    )
    .await;
    // The body claims the event is about the edge's own node; the live event is not.
    let claimed = event(
        "default",
        &name,
        json!({"kind": "Node", "name": s.node, "uid": s.node}),
    );
    let count = counting("processEvent").await;
    s.edge
        .send(
            &format!("default/event/{name}"),
            "patch",
            json_content(
                &json!({"event": claimed, "patchData": r#"{"message":"pwned","count":9}"#}),
            ),
        )
        .await;
    count.one_more().await;
    s.unchanged(&defaults, &existing, "another node's event")
        .await;
}

// ---------------------------------------------------------------------------------------------
// Certificate signing requests
// ---------------------------------------------------------------------------------------------

/// A kubelet client CSR object for common name `system:node:<cn_node>`.
fn csr(name: &str, cn_node: &str) -> Value {
    let request = pki::EdgeCsr::generate(cn_node).expect("CSR");
    let pem = pki::to_pem("CERTIFICATE REQUEST", &request.csr_der);
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"]}})
}

#[tokio::test]
async fn an_edge_requests_and_reads_a_certificate_for_its_own_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("csr").await;
    let name = unique("csr");
    let reply = s
        .edge
        .ask_json(
            &format!("default/certificatesigningrequest/{name}"),
            "insert",
            csr(&name, &s.node),
        )
        .await;
    reply.object_resp_ok();
    s.get(&s.all::<CertificateSigningRequest>(), &name)
        .await
        .expect("CSR created");
    let reply = s
        .edge
        .ask(
            &format!("default/certificatesigningrequest/{name}"),
            "query",
            Content::null(),
        )
        .await;
    reply.raw_object("CertificateSigningRequest");
}

#[tokio::test]
async fn an_edge_cannot_request_or_read_a_certificate_for_another_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("csrx").await;
    let other = s.other_node().await;
    let csrs = s.all::<CertificateSigningRequest>();
    let name = unique("csr");
    let count = counting("certificateSigningRequest").await;
    let reply = s
        .edge
        .ask_json(
            &format!("default/certificatesigningrequest/{name}"),
            "insert",
            csr(&name, &other),
        )
        .await;
    reply.forbidden_object_resp(&s.node);
    s.absent(&csrs, &name, "a CSR for another node").await;
    count.one_more().await;

    let theirs = unique("csr");
    create(csrs.clone(), &from(csr(&theirs, &other))).await;
    let count = counting("certificateSigningRequest").await;
    let reply = s
        .edge
        .ask(
            &format!("default/certificatesigningrequest/{theirs}"),
            "query",
            Content::null(),
        )
        .await;
    reply.forbidden_raw(&s.node);
    count.one_more().await;
}

// ---------------------------------------------------------------------------------------------
// Requests only the cloud may send, and requests without a rule
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_edge_cannot_write_rule_status() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("rs").await;
    let rule: Rule = from(json!({"apiVersion": "rules.kubeedge.io/v1", "kind": "Rule",
        "metadata": {"name": "r"}, "spec": {"source": "a", "sourceResource": {},
            "target": "b", "targetResource": {}}}));
    let rules: Api<Rule> = Api::namespaced(s.client.clone(), &s.ns);
    let existing = create(rules.clone(), &rule).await;
    // Sources cloudhub lets through (the cloud modules' own names it drops, see
    // `sources.rs`): each reaches the edgecontroller, which takes rule status only from the
    // router module's bus endpoint, so each is refused there whatever it names.
    for source in PASSING_SOURCES {
        let count = counting("updateRuleStatus").await;
        s.edge
            .send_as(
                source,
                "resource",
                &format!("{}/rulestatus/r", s.ns),
                "update",
                json_content(&json!({"Status": "FAIL", "Error": {"Detail": "pwned"}})),
            )
            .await;
        count.one_more().await;
    }
    s.unchanged(&rules, &existing, "rule status from an edge")
        .await;
}

/// Sources an edge may name that cloudhub forwards: an edge's own modules, none, the bus name
/// of cloudhub's edge relay, and near misses of cloud modules' names.
const PASSING_SOURCES: [&str; 6] = [
    "edged",
    "",
    "cloudhub/edge",
    "Router",
    "router ",
    "CloudHub",
];

#[tokio::test]
async fn an_edge_cannot_send_connection_events() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("cn").await;
    let event = json!({"event_type": "connected", "timestamp": 1, "client_id": s.node});
    for source in PASSING_SOURCES {
        let count = counting("connection").await;
        s.edge
            .send_as(source, "resource", "", "connected", json_content(&event))
            .await;
        count.one_more().await;
    }
}

#[tokio::test]
async fn an_edge_cannot_use_operations_without_a_rule() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("op").await;
    let other = s.other_node().await;
    let cm = configmap(&s, "cfg").await;
    let sec = secret(&s, "creds").await;
    let pod = s.own_pod("web", using("cfg", "creds", "none")).await;
    let nodes = s.all::<Node>();
    let other_node = s.get(&nodes, &other).await.expect("other node");
    let mut relabelled = to_value(&pod);
    relabelled["metadata"]["labels"] = json!({"pwned": "yes"});
    let mut changed_cm = to_value(&cm);
    changed_cm["data"]["k"] = json!("pwned");
    let mut changed_secret = to_value(&sec);
    changed_secret["stringData"] = json!({"k": "pwned"});
    let ns = &s.ns;
    let mut pending = Vec::new();
    for (resource, operation, content) in [
        (format!("{ns}/configmap/cfg"), "update", changed_cm),
        (format!("{ns}/configmap/cfg"), "delete", Value::Null),
        (format!("{ns}/secret/creds"), "update", changed_secret),
        (format!("{ns}/pod/web"), "update", relabelled),
        (
            format!("{ns}/pod/web"),
            "patch",
            json!({"metadata": {"labels": {"pwned": "yes"}}}),
        ),
        (format!("default/node/{other}"), "delete", Value::Null),
        (
            format!("default/node/{other}"),
            "patch",
            json!({"metadata": {"labels": {"pwned": "yes"}}}),
        ),
    ] {
        pending.push(
            s.edge
                .send(&resource, operation, json_content(&content))
                .await,
        );
    }
    // Answered after every request above was dispatched: they went first on the same session.
    s.edge
        .ask(
            &format!("default/node/{}", s.node),
            "query",
            Content::null(),
        )
        .await
        .raw_object("Node");
    for p in pending {
        if let Some(reply) = p.arrived() {
            let code = reply.code();
            assert!(
                matches!(code, Some(400..=499)),
                "{}: answered without a refusal: {}",
                reply.what,
                reply.body
            );
        }
    }
    s.unchanged(&s.api::<ConfigMap>(), &cm, "configmap").await;
    s.unchanged(&s.api::<Secret>(), &sec, "secret").await;
    s.unchanged(&s.api::<Pod>(), &pod, "own pod").await;
    s.unchanged(&nodes, &other_node, "another node").await;
}

// ---------------------------------------------------------------------------------------------
// Names from the wire
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_query_in_a_pod_name_cannot_turn_a_status_patch_into_a_whole_pod_patch() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nm").await;
    let pod = s.own_pod("web", json!({})).await;
    let _turns = without_counting(&["patchPod"]).await;
    // `pods/web?x=/status` would be a patch of `pods/web` itself.
    let patch = r#"{"metadata":{"labels":{"pwned":"yes"}},"spec":{"activeDeadlineSeconds":1}}"#;
    for name in ["web?x=", "web/status?x", "web%2Fstatus", "web#x"] {
        let reply = s
            .edge
            .ask(
                &format!("{}/podpatch/{name}", s.ns),
                "patch",
                Content::string(patch),
            )
            .await;
        reply.bad_request();
        s.unchanged(&s.api::<Pod>(), &pod, name).await;
    }
}

#[tokio::test]
async fn names_and_namespaces_that_are_not_dns_1123_are_refused_with_400() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("nmq").await;
    let node = &s.node;
    let ns = &s.ns;
    let pod = s.own_pod("web", json!({})).await;
    let nodes = s.all::<Node>();
    let own_node = s.get(&nodes, node).await.expect("own node");
    let status = Content::string(r#"{"status":{"phase":"Failed"}}"#);
    let _turns = without_counting(&[
        "patchNode",
        "queryNode",
        "deletePod",
        "querySecret",
        "queryConfigMap",
        "queryLease",
        "patchPod",
        "serviceAccountToken",
    ])
    .await;
    let attempts: Vec<(String, &str, Content)> = vec![
        (
            format!("default/nodepatch/{node}?x="),
            "patch",
            Content::string(r#"{"metadata":{"labels":{"pwned":"yes"}}}"#),
        ),
        (
            format!("default/nodepatch/{node}%2Fstatus"),
            "patch",
            status.clone(),
        ),
        (
            format!("default/node/{node}/status"),
            "query",
            Content::null(),
        ),
        (
            format!("{ns}/pod/web?dryRun=All"),
            "delete",
            Content::string(pod.uid().unwrap_or_default()),
        ),
        (format!("{ns}/pod/a%2Fb"), "delete", Content::null()),
        (format!("{ns}/secret/creds?x"), "query", Content::null()),
        (format!("{ns}/configmap/Cfg"), "query", Content::null()),
        (
            format!("kube-node-lease/lease/{node}%2F..%2Fx"),
            "query",
            Content::null(),
        ),
        ("a%2Fb/podpatch/web".to_owned(), "patch", status.clone()),
        ("../podpatch/web".to_owned(), "patch", status.clone()),
        (format!("{ns}?x=/podpatch/web"), "patch", status.clone()),
        (
            format!("{ns}/serviceaccounttoken/default?x"),
            "query",
            json_content(&token_request("default", ns, None)),
        ),
    ];
    for (resource, operation, content) in attempts {
        let reply = s.edge.ask(&resource, operation, content).await;
        reply.bad_request();
    }
    s.unchanged(&s.api::<Pod>(), &pod, "own pod").await;
    s.unchanged(&nodes, &own_node, "own node").await;
}

// ---------------------------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------------------------

/// The devicecontroller's refusal counter of one request kind.
async fn device_denied(kind: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value(DENIED, &[("module", "devicecontroller"), ("kind", kind)])
        .unwrap_or(0.0)
}

/// A device model and a Device of it bound to `node`, in the scenario's namespace; returns
/// once the devicecontroller has created the Device's DeviceStatus.
async fn device(s: &Scenario, name: &str, node: &str) -> DeviceStatus {
    let model: DeviceModel = from(json!({"apiVersion": "devices.kubeedge.io/v1beta1",
        "kind": "DeviceModel", "metadata": {"name": format!("{name}-model")},
        "spec": {"protocol": "modbus", "properties": [{"name": "temp", "type": "INT",
            "accessMode": "ReadWrite"}]}}));
    s.api::<DeviceModel>()
        .create(&PostParams::default(), &model)
        .await
        .expect("device model");
    let d: Device = from(
        json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "deviceModelRef": {"name": format!("{name}-model")},
            "protocol": {"protocolName": "modbus"},
            "properties": [{"name": "temp", "desired": {"value": "20"},
                "visitors": {"protocolName": "modbus"}}]}}),
    );
    s.api::<Device>()
        .create(&PostParams::default(), &d)
        .await
        .expect("device");
    let statuses = s.api::<DeviceStatus>();
    eventually(WAIT, "the DeviceStatus", || async {
        statuses.get_opt(name).await.ok().flatten()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

fn twin_report(value: &str) -> Value {
    json!({"event_id": "e", "timestamp": 1,
        "twin": {"temp": {"actual": {"value": value, "metadata": {"timestamp": 1}}}}})
}

/// Sends a twin report for `name` as devicetwin does and waits for its answer.
async fn twin(s: &Scenario, name: &str, value: &str) -> Reply {
    let resource = format!("device/{}/{name}/twin/edge_updated", s.ns);
    let content = json_content(&twin_report(value));
    s.edge
        .send_as("twin", "resource", &resource, "update", content)
        .await
        .reply()
        .await
}

fn reported(status: &DeviceStatus) -> Vec<String> {
    status
        .status
        .as_ref()
        .map(|s| s.twins.iter().map(|t| t.reported.value.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn an_edge_reports_twins_only_for_its_own_devices() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("dev").await;
    let other = s.other_node().await;
    device(&s, "mine", &s.node).await;
    let before = device(&s, "theirs", &other).await;
    // Its own device: confirmed and written as cloudcore once decided (no RBAC for nodes is
    // needed, in either configuration).
    let statuses = s.api::<DeviceStatus>();
    let (sc, st) = (&s, &statuses);
    eventually(WAIT, "the own twin report written", move || async move {
        let reply = twin(sc, "mine", "21").await;
        let statuses = st;
        let written = statuses.get("mine").await.ok()?;
        (reply.body == json!("OK") && reported(&written) == ["21"]).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    // Another node's device: refused, unchanged, counted.
    let was = device_denied("twinUpdate").await;
    let reply = twin(&s, "theirs", "99").await;
    let status = &reply.body["ErrStatus"];
    reply.forbidden(status, &s.node);
    let after = statuses.get("theirs").await.expect("their status");
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(device_denied("twinUpdate").await, was + 1.0);
}

// ---------------------------------------------------------------------------------------------
// The edge metaServer (dynamiccontroller)
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "metaserver.rs"]
mod metaserver;

// ---------------------------------------------------------------------------------------------
// Node job reports (taskmanager)
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "node_jobs.rs"]
mod node_jobs;

// ---------------------------------------------------------------------------------------------
// The edge metaServer's serving certificate (csrapprover)
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "csrapprover.rs"]
mod csrapprover;

// ---------------------------------------------------------------------------------------------
// Rules: eventbus uploads, servicebus answers, rule status (router)
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "router.rs"]
mod router;

// ---------------------------------------------------------------------------------------------
// Volume answers to the CSI driver's Unix socket (udsserver)
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "udsserver.rs"]
mod udsserver;

// ---------------------------------------------------------------------------------------------
// ServiceAccountAccesses (policycontroller)
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "policycontroller.rs"]
mod policycontroller;

// ---------------------------------------------------------------------------------------------
// The request executed is the request authorized
// ---------------------------------------------------------------------------------------------

#[allow(clippy::duplicate_mod)]
#[path = "executed_request.rs"]
mod executed_request;
#[allow(clippy::duplicate_mod)]
#[path = "metaserver_bounds.rs"]
mod metaserver_bounds;
#[allow(clippy::duplicate_mod)]
#[path = "metaserver_discovery.rs"]
mod metaserver_discovery;
#[allow(clippy::duplicate_mod)]
#[path = "metaserver_writes.rs"]
mod metaserver_writes;
#[allow(clippy::duplicate_mod)]
#[path = "node_restriction.rs"]
mod node_restriction;
#[allow(clippy::duplicate_mod)]
#[path = "parity.rs"]
mod parity;
#[allow(clippy::duplicate_mod)]
#[path = "permits.rs"]
mod permits;
#[allow(clippy::duplicate_mod)]
#[path = "rereview.rs"]
mod rereview;
#[allow(clippy::duplicate_mod)]
#[path = "watch_records.rs"]
mod watch_records;

// ---------------------------------------------------------------------------------------------
// Node names, revocation, tunnels and the other perimeter checks
// ---------------------------------------------------------------------------------------------

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "names.rs"]
mod names;

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "sources.rs"]
mod sources;

// clippy::duplicate_mod: compiled once per configuration, with the suite.
#[allow(clippy::duplicate_mod)]
#[path = "revocation.rs"]
mod revocation;
