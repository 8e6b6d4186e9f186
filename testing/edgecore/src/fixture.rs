//! One interop scenario: the test API server, our cloudcore process, an edge Node object, the
//! kubelet stand-in and a real edgecore; the scenarios of one test binary take turns.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus, Secret};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

use crate::cloud::{CloudSpec, Cloudcore, Metrics};
use crate::edge::{EdgeConfig, EdgeHome, Edgecore};
use crate::error::{Error, Result};
use crate::kubelet::FakeKubelet;
use crate::process::tail;
use crate::serial::Serial;
use crate::store::EdgeStore;

/// The edge-node label cloudcore selects nodes by.
pub const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";

/// Polls `check` every 200 ms until it returns `Some`, for at most `limit`.
///
/// # Errors
/// [`Error::Timeout`] naming `what`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!("{what} (waited {limit:?})")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How to set up an [`Interop`].
#[derive(Debug, Clone)]
pub struct InteropBuilder {
    node: String,
    heartbeat: u32,
    keepalive_interval: u32,
    kubelet: bool,
    kubeconfig: Option<PathBuf>,
    service_account: bool,
    impersonate: bool,
    dynamic_controller: bool,
    edge_task_manager: bool,
    container_runtime_endpoint: Option<String>,
    event_bus: Option<std::net::SocketAddr>,
    service_bus: Option<std::net::SocketAddr>,
    cloud_extra: serde_json::Value,
    optional_rbac: Vec<String>,
}

impl InteropBuilder {
    /// Runs edgecore with its taskManager module on (`modules.taskManager.enable`), so that
    /// it runs the node jobs cloudcore sends.
    pub fn edge_task_manager(mut self) -> Self {
        self.edge_task_manager = true;
        self
    }

    /// The CRI endpoint edgecore pulls images through (its
    /// `edged.tailoredKubeletConfig.containerRuntimeEndpoint`, e.g.
    /// `unix:///run/x/containerd.sock`).
    pub fn container_runtime_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.container_runtime_endpoint = Some(endpoint.into());
        self
    }

    /// With [`InteropBuilder::service_account`]: also applies `manifests/optional/<file>`
    /// (e.g. `require-authorization.yaml`) before cloudcore starts.
    pub fn optional_rbac(mut self, file: &str) -> Self {
        self.optional_rbac.push(file.to_owned());
        self
    }

    /// Runs edgecore's eventBus against the MQTT broker at `broker` (e.g. a [`crate::Mosquitto`]).
    pub fn with_event_bus(mut self, broker: std::net::SocketAddr) -> Self {
        self.event_bus = Some(broker);
        self
    }

    /// Runs edgecore's serviceBus (its own server on a free loopback port).
    pub fn with_service_bus(mut self) -> Self {
        self.service_bus = Some(crate::edge::meta_server_port());
        self
    }

    /// Merges `extra` over cloudcore's configuration ([`CloudSpec::extra`]).
    pub fn cloud_config(mut self, extra: serde_json::Value) -> Self {
        self.cloud_extra = extra;
        self
    }

    /// edgecore's `edgeHub.heartbeat` (template 15 s; reconnect waits twice that).
    pub fn heartbeat(mut self, seconds: u32) -> Self {
        self.heartbeat = seconds;
        self
    }

    /// cloudhub's `keepaliveInterval` (KubeEdge default 30 s).
    pub fn keepalive_interval(mut self, seconds: u32) -> Self {
        self.keepalive_interval = seconds;
        self
    }

    /// Runs cloudcore with `modules.dynamicController.enable: false` (KubeEdge's default): the
    /// edge's metaServer then gets no cloud answers.
    pub fn without_dynamic_controller(mut self) -> Self {
        self.dynamic_controller = false;
        self
    }

    /// Runs cloudcore with this kubeconfig instead of the test API server's admin one (the
    /// fixture itself keeps using the admin one).
    pub fn kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }

    /// Runs cloudcore as the manifests deploy it: applies `manifests/namespace.yaml` and the
    /// manifests' RBAC ([`crate::rbac::Grants`]) and gives it a kubeconfig with a token of the ServiceAccount
    /// `kubeedge/cloudcore` (see [`crate::rbac::service_account_kubeconfig`]). An explicit
    /// [`InteropBuilder::kubeconfig`] wins.
    pub fn service_account(mut self) -> Self {
        self.service_account = true;
        self
    }

    /// Runs cloudcore with `authorization.enable: true, debug: false`: its requests on behalf
    /// of the edge are impersonated as `system:node:<name>`. With
    /// [`InteropBuilder::service_account`], the ServiceAccount gets the manifests'
    /// impersonation variant ([`crate::rbac::Grants::Impersonation`]) instead of the edge
    /// requests' rules.
    pub fn impersonating(mut self) -> Self {
        self.impersonate = true;
        self
    }

    /// Runs the kubelet stand-in on 127.0.0.1:10350 (where edgestream relays) before edgecore
    /// starts, holding that port machine-wide until the test's runtime ends
    /// ([`FakeKubelet::start_on_kubelet_port`]).
    pub fn with_kubelet(mut self) -> Self {
        self.kubelet = true;
        self
    }

    /// Prepares the API server (CRDs, a fresh KubeEdge CA, the edge Node), starts the kubelet
    /// stand-in when asked and our cloudcore, and waits until it is ready. No edgecore yet:
    /// [`Interop::start_edge`] starts it.
    ///
    /// # Errors
    /// Anything missing (API server, binaries, ports) is an error naming it; nothing is skipped.
    pub async fn start_cloud(self) -> Result<Interop> {
        let serial = Serial::acquire()?;
        // Fails (panics) with the reason when the API server cannot start.
        let env = k8s_testenv::env();
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        let client = k8s_testenv::client().await;
        fresh_kubeedge_ca(&client).await?;
        create_edge_node(&client, &self.node).await?;
        let dir = std::env::temp_dir().join(format!(
            "cloudcore-interop-{}-{}-{}",
            self.node,
            std::process::id(),
            crate::edge::unique()
        ));
        let mut spec = CloudSpec::for_testenv(&dir)?;
        spec.kubeconfig = match (&self.kubeconfig, self.service_account) {
            (Some(path), _) => path.clone(),
            (None, true) => {
                let grants = match self.impersonate {
                    true => crate::rbac::Grants::Impersonation,
                    false => crate::rbac::Grants::OwnIdentity,
                };
                let kubeconfig =
                    crate::rbac::service_account_kubeconfig_for(&dir.join("sa"), grants).await?;
                for file in &self.optional_rbac {
                    crate::rbac::apply_optional(file, &kubeconfig).await?;
                }
                kubeconfig
            }
            (None, false) => env.kubeconfig(),
        };
        spec.keepalive_interval = self.keepalive_interval;
        spec.impersonate = self.impersonate;
        spec.dynamic_controller = self.dynamic_controller;
        spec.extra = self.cloud_extra.clone();
        let kubelet = match self.kubelet {
            true => Some(FakeKubelet::start_on_kubelet_port().await?),
            false => None,
        };
        let meta_server = crate::edge::meta_server_port();
        let cloud = Cloudcore::start(&spec).await?;
        let home = EdgeHome::new(&self.node)?;
        Ok(Interop {
            edge_task_manager: self.edge_task_manager,
            container_runtime_endpoint: self.container_runtime_endpoint,
            edge: None,
            cloud: Some(cloud),
            home,
            kubelet,
            meta_server,
            event_bus: self.event_bus,
            service_bus: self.service_bus,
            spec,
            node: self.node,
            heartbeat: self.heartbeat,
            client,
            dir,
            finished: false,
            _serial: serial,
        })
    }

    /// [`InteropBuilder::start_cloud`], then edgecore with the cloud's token, then waits (up to
    /// 60 s) until cloudhub counts the node connected.
    pub async fn start(self) -> Result<Interop> {
        let mut interop = self.start_cloud().await?;
        interop.start_edge()?;
        interop.wait_connected(Duration::from_secs(60)).await?;
        Ok(interop)
    }
}

/// Deletes the KubeEdge CA, server certificate and token Secrets so the next cloudcore
/// generates a fresh CA (with Kubernetes, cloudhub keeps them in Secrets, not in files).
async fn fresh_kubeedge_ca(client: &kube::Client) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), "kubeedge");
    for name in ["casecret", "cloudcoresecret", "tokensecret"] {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The Node an edge with edged off never registers itself: edge-labelled, InternalIP 127.0.0.1
/// (where the API server dials the "kubelet", i.e. cloudstream's stream server).
/// Edge Nodes left by earlier scenarios of this test binary (the API server is per binary and
/// scenarios are serialized) are deleted first, so the new cloud does not work for them.
async fn create_edge_node(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let old = api.list(&ListParams::default().labels(EDGE_LABEL)).await?;
    for node in old.items {
        let old_name = node.metadata.name.unwrap_or_default();
        match api.delete(&old_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    eventually(Duration::from_secs(30), "old Node deleted", || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await?;
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(EDGE_LABEL.to_owned(), String::new())].into()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "127.0.0.1".into(),
            }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    api.create(&PostParams::default(), &node).await?;
    Ok(())
}

/// A running scenario. Drop order: edgecore, cloudcore (process groups killed), kubelet
/// stand-in, folders (kept when the test fails), then this binary's turn. The kubelet port is
/// released when the test's runtime ends and the stand-in's listener closes.
pub struct Interop {
    edge_task_manager: bool,
    container_runtime_endpoint: Option<String>,
    edge: Option<Edgecore>,
    cloud: Option<Cloudcore>,
    home: EdgeHome,
    kubelet: Option<FakeKubelet>,
    meta_server: std::net::SocketAddr,
    event_bus: Option<std::net::SocketAddr>,
    service_bus: Option<std::net::SocketAddr>,
    spec: CloudSpec,
    node: String,
    heartbeat: u32,
    client: kube::Client,
    dir: PathBuf,
    finished: bool,
    _serial: Serial,
}

impl Interop {
    /// A scenario for edge node `node` (a DNS-1123 name, distinct per test: the API server is
    /// shared by the tests of one binary).
    pub fn builder(node: &str) -> InteropBuilder {
        InteropBuilder {
            node: node.to_owned(),
            heartbeat: 15,
            keepalive_interval: 30,
            kubelet: false,
            kubeconfig: None,
            service_account: false,
            impersonate: false,
            dynamic_controller: true,
            edge_task_manager: false,
            container_runtime_endpoint: None,
            event_bus: None,
            service_bus: None,
            cloud_extra: serde_json::Value::Null,
            optional_rbac: Vec::new(),
        }
    }

    /// The node name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// An admin client of the API server.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The cloud's spec (ports, folder).
    pub fn cloud_spec(&self) -> &CloudSpec {
        &self.spec
    }

    /// The edge's home folder.
    pub fn home(&self) -> &EdgeHome {
        &self.home
    }

    /// Where the edge's metaServer serves (the same port across edgecore restarts).
    pub fn meta_server(&self) -> std::net::SocketAddr {
        self.meta_server
    }

    /// The kubelet stand-in, when started.
    pub fn kubelet(&self) -> Option<&FakeKubelet> {
        self.kubelet.as_ref()
    }

    /// edgecore's store (its database in the home folder).
    pub fn store(&self) -> EdgeStore {
        EdgeStore::new(&self.home.database())
    }

    /// The running cloudcore.
    ///
    /// # Panics
    /// When it is stopped.
    pub fn cloud(&mut self) -> &mut Cloudcore {
        self.cloud.as_mut().expect("cloudcore is not running")
    }

    /// The running edgecore.
    ///
    /// # Panics
    /// When it is not running.
    pub fn edge(&mut self) -> &mut Edgecore {
        self.edge.as_mut().expect("edgecore is not running")
    }

    /// The current bootstrap token from the running cloud.
    pub fn token(&mut self) -> Result<String> {
        self.cloud().token()
    }

    /// The edge config for `token` against this cloud (tunnel on, metaServer on).
    pub fn edge_config(&self, token: &str) -> EdgeConfig {
        let p = self.spec.ports;
        let mut c = EdgeConfig::new(&self.node, token, p.https_addr(), p.websocket_addr());
        c.heartbeat = self.heartbeat;
        c.tunnel_server = Some(p.tunnel_addr());
        c.meta_server = Some(self.meta_server);
        c.task_manager = self.edge_task_manager;
        c.container_runtime_endpoint = self.container_runtime_endpoint.clone();
        c.event_bus = self.event_bus;
        c.service_bus = self.service_bus;
        c
    }

    /// Writes `home`'s config for `token` and starts an edgecore there (not kept by the
    /// scenario: for attempts that are meant to fail).
    pub fn launch_edge(&self, home: &EdgeHome, token: &str) -> Result<Edgecore> {
        home.write_config(&self.edge_config(token))?;
        Edgecore::start(home)
    }

    /// Starts the scenario's edgecore: the first time with the cloud's token in a fresh home;
    /// later in the same home (it then has its certificates and never uses the token again).
    pub fn start_edge(&mut self) -> Result<()> {
        if self.edge.is_some() {
            return Err(Error::Config("edgecore is already running".into()));
        }
        if !self.home.config_file().exists() {
            let token = self.token()?;
            self.home.write_config(&self.edge_config(&token))?;
        }
        self.edge = Some(Edgecore::start(&self.home)?);
        Ok(())
    }

    /// SIGKILLs edgecore (its store stays in the home folder).
    pub fn kill_edge(&mut self) {
        if let Some(mut e) = self.edge.take() {
            e.kill();
        }
    }

    /// Gracefully stops cloudcore (SIGTERM); returns whether it exited by itself with 0.
    pub async fn stop_cloud(&mut self) -> bool {
        match self.cloud.take() {
            Some(mut c) => c.stop().await,
            None => true,
        }
    }

    /// Starts cloudcore again with the same spec (same ports and folder, same CA from its
    /// Secrets).
    pub async fn start_cloud(&mut self) -> Result<()> {
        if self.cloud.is_none() {
            self.cloud = Some(Cloudcore::start(&self.spec).await?);
        }
        Ok(())
    }

    /// The running cloud's `/metrics`.
    pub async fn metrics(&self) -> Result<Metrics> {
        match &self.cloud {
            Some(c) => c.metrics().await,
            None => Err(Error::Config("cloudcore is not running".into())),
        }
    }

    /// Fails when edgecore has exited (with its log tail).
    pub fn check_edge_alive(&mut self) -> Result<()> {
        if let Some(e) = self.edge.as_mut()
            && let Some(status) = e.try_wait()
        {
            return Err(Error::Process {
                what: format!("edgecore exited: {status}"),
                log: e.log_tail(40),
            });
        }
        Ok(())
    }

    /// Waits until cloudhub counts exactly this node connected and has received from it.
    pub async fn wait_connected(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            self.check_edge_alive()?;
            if let Ok(m) = self.metrics().await
                && m.connected_nodes() == 1.0
                && m.node_counter("received", &self.node) >= 1.0
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "node {} not connected within {limit:?}",
                    self.node
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until cloudhub has no session left; returns how long that took.
    pub async fn wait_disconnected(&mut self, limit: Duration) -> Result<Duration> {
        let start = Instant::now();
        eventually(limit, "cloudhub drops the session", || async {
            let m = self.metrics().await.ok()?;
            (m.connected_nodes() == 0.0).then_some(())
        })
        .await?;
        Ok(start.elapsed())
    }

    /// The cloud's folder (config, certificates, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Marks the scenario as passed. A scenario dropped without it (a test that returned an
    /// error, or panicked) prints the tails of both logs and keeps its folders.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl std::fmt::Debug for Interop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interop")
            .field("node", &self.node)
            .field("edge", &self.edge)
            .field("cloud", &self.cloud)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for Interop {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        // Processes first, so their logs are complete (they print their own tails when the
        // thread panics).
        drop(self.edge.take());
        drop(self.cloud.take());
        // INTEROP_KEEP=1 keeps the folders of passing scenarios too (to read their logs).
        let keep_anyway = std::env::var_os("INTEROP_KEEP").is_some();
        if self.finished && !panicking && !keep_anyway {
            let _ = std::fs::remove_dir_all(&self.dir);
            return;
        }
        if !panicking && !self.finished {
            eprintln!(
                "--- cloudcore log tail ---\n{}\n--- edgecore log tail ---\n{}\n--- end ---",
                tail(&self.spec.log_file(), 60),
                tail(&self.home.log_file(), 60)
            );
        }
        self.home.keep();
        eprintln!(
            "interop folders kept: cloud {} (cloudcore.log), edge {} (edgecore.log)",
            self.dir.display(),
            self.home.path().display()
        );
    }
}
