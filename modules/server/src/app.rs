//! Composition: the enabled modules of a [`CloudCoreConfig`] on one bus, their servers, the
//! operations server, leader election and graceful shutdown.
//!
//! Modules are registered in KubeEdge's order (cloudhub, edgecontroller, devicecontroller,
//! taskmanager, synccontroller, cloudstream); the bus starts them in that order and stops them in reverse,
//! so controllers stop producing before cloudhub drains what they sent.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use beehive::Bus;
use cloudhub::{CloudHub, HubHandle, HubOptions, KubeStore, MemoryStore, ObjectSyncStore};
use cloudstream::{CloudStream, CloudStreamHandle, CloudStreamTls, TlsMaterial};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubeedge_api::names;
use kubeedge_api::replicas::Ownership;
use rustls::pki_types::CertificateDer;
use tracing::{info, warn};

use crate::config::{CloudCoreConfig, ConfigError, KubeApiConfig};
use crate::leader::LeaderElector;
use crate::metrics;
use crate::ops::{Access, Metrics, Ops, Phase};

/// How long start-up waits for the first list of Nodes (which replica holds which node).
const OWNERSHIP_LIST_WAIT: Duration = Duration::from_secs(30);

/// Why cloudcore could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The Kubernetes client could not be configured.
    #[error("kubernetes client: {0}")]
    Kube(String),
    /// A CRD the enabled modules need is not installed.
    #[error(
        "CRD {0} is not installed; apply manifests/crds first (kubectl apply -f manifests/crds)"
    )]
    MissingCrd(String),
    /// cloudhub failed to start.
    #[error("cloudhub: {0}")]
    CloudHub(#[from] cloudhub::Error),
    /// cloudstream failed to start.
    #[error("cloudstream: {0}")]
    CloudStream(#[from] cloudstream::Error),
    /// cloudstream's TLS material is unusable.
    #[error("cloudstream tls: {0}")]
    CloudStreamTls(#[from] cloudstream::TlsError),
    /// Tunnel port negotiation failed.
    #[error("tunnel port negotiation: {0}")]
    Negotiate(String),
    /// The enabled modules do not fit together.
    #[error("{0}")]
    Composition(String),
    /// The bus refused a module.
    #[error("bus: {0}")]
    Bus(#[from] beehive::Error),
    /// The operations server could not bind.
    #[error("monitor server: {0}")]
    Ops(#[from] std::io::Error),
    /// The configuration names files that do not fit together.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The Unix socket of `modules.cloudHub.unixsocket` could not be set up.
    #[error(
        "modules.cloudHub.unixsocket.address {0}: {1} (set modules.cloudHub.unixsocket.enable: false when no CSI driver uses it)"
    )]
    UnixSocket(String, #[source] udsserver::BindError),
    /// The router could not start.
    #[error("router: {0}")]
    Router(#[from] router::Error),
    /// A key file cloudhub holds is unusable.
    #[error("cloudhub key: {0}")]
    Key(#[from] pki::Error),
    /// The credentials lack a permission the enabled modules need.
    #[error(transparent)]
    Permission(#[from] crate::permissions::PermissionError),
}

/// A Kubernetes client as `kubeAPIConfig` says: the kubeconfig file when it exists, else the
/// in-cluster configuration or `$KUBECONFIG`; `master` overrides the server.
pub async fn kube_client(config: &KubeApiConfig) -> Result<kube::Client, StartError> {
    crate::apiclient::client(kube_config(config).await?)
        .map_err(|e| StartError::Kube(e.to_string()))
}

/// The CA (PEM, every certificate) a client configuration trusts for the API server: the
/// kubeconfig's `certificate-authority(-data)` or the in-cluster service account's `ca.crt`.
/// Edges ask for it (`k8s/ca.crt`) to verify the API server through their metaServer.
pub fn kube_ca_pem(config: &kube::Config) -> String {
    config
        .root_cert
        .iter()
        .flatten()
        .map(|der| pki::to_pem("CERTIFICATE", der))
        .collect()
}

/// The client configuration [`kube_client`] uses.
pub async fn kube_config(config: &KubeApiConfig) -> Result<kube::Config, StartError> {
    let err = |e: &dyn std::fmt::Display| StartError::Kube(e.to_string());
    let path = std::path::Path::new(&config.kube_config);
    let mut cfg = if !config.kube_config.is_empty() && path.exists() {
        let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(&e))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| err(&e))?
    } else {
        // A configured file that is not there falls back to the in-cluster configuration (as
        // the Deployment runs it, with KubeEdge's default path absent); if that fails too,
        // the file named is what an operator looks for first.
        kube::Config::infer().await.map_err(|e| {
            if config.kube_config.is_empty() {
                err(&e)
            } else {
                StartError::Kube(format!(
                    "kubeAPIConfig.kubeConfig {} does not exist, and no other configuration was found ({e})",
                    config.kube_config
                ))
            }
        })?
    };
    if !config.master.is_empty() {
        cfg.cluster_url = config.master.parse().map_err(|e| err(&e))?;
    }
    Ok(cfg)
}

async fn require_crds(client: &kube::Client, names: &[&str]) -> Result<(), StartError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        match api.get_opt(name).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(StartError::MissingCrd((*name).to_owned())),
            Err(e) => return Err(StartError::Kube(format!("checking CRD {name}: {e}"))),
        }
    }
    Ok(())
}

/// The node job CRDs the taskmanager watches.
fn taskmanager_crds() -> Vec<&'static str> {
    vec![
        "nodeupgradejobs.operations.kubeedge.io",
        "imageprepulljobs.operations.kubeedge.io",
        "configupdatejobs.operations.kubeedge.io",
    ]
}

/// Where the servers of a running cloudcore listen.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    /// cloudhub WebSocket.
    pub websocket: Option<SocketAddr>,
    /// cloudhub certificate server.
    pub https: Option<SocketAddr>,
    /// cloudstream tunnel.
    pub tunnel: Option<SocketAddr>,
    /// cloudstream stream server.
    pub stream: Option<SocketAddr>,
    /// The router's REST listener.
    pub router: Option<SocketAddr>,
}

/// The running modules of one cloudcore.
#[derive(Debug)]
pub struct CloudCore {
    bus: Bus,
    synced: Option<edgecontroller::Synced>,
    hub: Option<HubHandle>,
    stream: Option<CloudStreamHandle>,
    addresses: Addresses,
    diagnostics: crate::diagnose::Sources,
    /// Background tasks that finish work on stop (dynamiccontroller's listener records).
    lifecycles: Vec<kubeedge_api::lifecycle::Lifecycle>,
}

/// cloudhub's certificate for the tunnel; its key in whatever form it was given (PKCS#8,
/// SEC1 or PKCS#1; RSA, ECDSA or Ed25519).
fn hub_tls(hub: &HubHandle) -> Result<TlsMaterial, StartError> {
    let server = hub.server_cert();
    Ok(TlsMaterial {
        cert_chain: vec![CertificateDer::from(server.cert_der.clone())],
        key: pki::load_private_key(&server.key_der)?,
        ca: vec![CertificateDer::from(hub.ca().cert_der().to_vec())],
    })
}

/// What a composer knows besides the configuration.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// The API server's CA (PEM) answered to edges' `k8s/ca.crt` queries; empty when unknown.
    pub kube_ca_pem: String,
}

impl CloudCore {
    /// Builds, registers and starts every enabled module; needs a running actix system.
    /// `kube` is required when a controller is enabled; cloudhub and cloudstream run without
    /// it (acknowledgement records then live in memory).
    pub async fn start(
        config: &CloudCoreConfig,
        kube: Option<kube::Client>,
        metrics: &Metrics,
    ) -> Result<Self, StartError> {
        Self::start_with(config, kube, metrics, StartOptions::default()).await
    }

    /// [`CloudCore::start`] with [`StartOptions`].
    pub async fn start_with(
        config: &CloudCoreConfig,
        kube: Option<kube::Client>,
        metrics: &Metrics,
        options: StartOptions,
    ) -> Result<Self, StartError> {
        config.check_tls_pairs()?;
        let m = &config.modules;
        if config.needs_kubernetes() && kube.is_none() {
            return Err(StartError::Kube(
                "the enabled controllers need a Kubernetes API server".into(),
            ));
        }
        if let Some(client) = &kube {
            crate::permissions::check(client, &crate::permissions::required(config)).await?;
            let mut crds = vec![
                "objectsyncs.reliablesyncs.kubeedge.io",
                "clusterobjectsyncs.reliablesyncs.kubeedge.io",
            ];
            if m.device_controller.enable {
                crds.extend([
                    "devices.devices.kubeedge.io",
                    "devicemodels.devices.kubeedge.io",
                    "devicestatuses.devices.kubeedge.io",
                ]);
            }
            if config.require_authorization() {
                crds.push("serviceaccountaccesses.policy.kubeedge.io");
            }
            if m.cloud_hub.enable || m.sync_controller.enable || config.require_authorization() {
                require_crds(client, &crds).await?;
            }
            if m.task_manager.enable {
                require_crds(client, &taskmanager_crds()).await?;
            }
        }
        let bus = Bus::new();
        let mut addresses = Addresses::default();
        let mut hub = None;
        let mut synced = None;
        let mut lifecycles: Vec<kubeedge_api::lifecycle::Lifecycle> = Vec::new();
        // Which replica holds which node: this replica's sessions, and the others' from the
        // Nodes' `cloudcore` annotations.
        let replica = config.replica_address();
        let ownership = Ownership::new(replica.clone());
        if let Some(client) = &kube {
            let life = kubeedge_api::lifecycle::Lifecycle::new();
            life.spawn(
                ownership
                    .clone()
                    .follow(client.clone(), life.token().clone()),
            );
            lifecycles.push(life);
            // Until the Nodes are listed, a replica cannot tell which nodes the others hold and
            // would write their records.
            if tokio::time::timeout(OWNERSHIP_LIST_WAIT, ownership.listed())
                .await
                .is_err()
            {
                warn!(waited = ?OWNERSHIP_LIST_WAIT, "nodes not listed yet: starting without knowing which nodes other replicas hold");
            }
        }
        // synccontroller's record watch, read by cloudhub for the first message about an
        // object (both enabled, with Kubernetes).
        let (mut record_writer, record_reader) =
            match kube.is_some() && m.cloud_hub.enable && m.sync_controller.enable {
                true => {
                    let (w, r) = kubeedge_api::reliablesyncs::record_cache();
                    (Some(w), Some(r))
                }
                false => (None, None),
            };
        if m.cloud_hub.enable {
            let store: Arc<dyn ObjectSyncStore> = match &kube {
                Some(c) => Arc::new(KubeStore::new(c.clone())),
                None => Arc::new(MemoryStore::new()),
            };
            let module = CloudHub::with_options(
                m.cloud_hub.clone(),
                bus.endpoint(names::CLOUDHUB),
                kube.clone(),
                store,
                HubOptions {
                    kube_ca_pem: options.kube_ca_pem,
                    ownership: Some(ownership.clone()),
                    records: record_reader.clone(),
                    ..HubOptions::default()
                },
            )
            .await?;
            hub = Some(module.handle());
            bus.register(module)?;
            let uds = &m.cloud_hub.unixsocket;
            if uds.enable {
                let server =
                    udsserver::UdsServer::bind(&uds.address, bus.endpoint(udsserver::UDSSERVER))
                        .map_err(|e| StartError::UnixSocket(uds.address.clone(), e))?;
                metrics::udsserver(metrics, server.metrics());
                lifecycles.push(server.lifecycle());
                bus.register(server)?;
            }
        }
        let mut denials: Vec<metrics::Denials> = Vec::new();
        if let Some(client) = kube.clone() {
            let auth = &m.cloud_hub.authorization;
            let impersonate = auth.enable && !auth.debug;
            if m.edge_controller.enable {
                let mut ec_config = m.edge_controller.clone();
                let node_limit = m.cloud_hub.node_limit.min(i32::MAX as u32) as i32;
                ec_config.adjust_for_node_limit(node_limit);
                let mut ec = edgecontroller::EdgeController::new(
                    ec_config,
                    bus.endpoint(names::EDGECONTROLLER),
                    client.clone(),
                )
                .with_node_limit(node_limit)
                .with_impersonation(impersonate);
                if !replica.is_empty() {
                    ec = ec.with_cloudcore_ip(replica.clone());
                }
                ec = ec.with_router(m.router.enable);
                metrics::edgecontroller(metrics, ec.metrics());
                let ec_metrics = ec.metrics();
                denials.push((
                    names::EDGECONTROLLER,
                    Box::new(move || ec_metrics.snapshot().denied),
                ));
                synced = Some(ec.synced());
                bus.register(ec)?;
            }
            if m.device_controller.enable {
                let dc = devicecontroller::DeviceController::new(
                    m.device_controller.clone(),
                    bus.endpoint(names::DEVICECONTROLLER),
                    client.clone(),
                );
                metrics::devicecontroller(metrics, dc.metrics());
                let dc_metrics = dc.metrics();
                denials.push((
                    names::DEVICECONTROLLER,
                    Box::new(move || dc_metrics.snapshot().denied),
                ));
                bus.register(dc)?;
            }
            if m.dynamic_controller.enable {
                let dc = dynamiccontroller::DynamicController::new(
                    m.dynamic_controller.clone(),
                    bus.endpoint(names::DYNAMICCONTROLLER),
                    client.clone(),
                )
                .with_impersonation(impersonate);
                metrics::dynamiccontroller(metrics, dc.metrics());
                let dc_metrics = dc.metrics();
                denials.push((
                    names::DYNAMICCONTROLLER,
                    Box::new(move || dc_metrics.snapshot().denied),
                ));
                lifecycles.push(dc.lifecycle());
                bus.register(dc)?;
            }
            if m.task_manager.enable {
                let tm = taskmanager::TaskManager::new(
                    m.task_manager.clone(),
                    bus.endpoint(names::TASKMANAGER),
                    client.clone(),
                    ownership.clone(),
                );
                metrics::taskmanager(metrics, tm.metrics());
                let tm_metrics = tm.metrics();
                denials.push((names::TASKMANAGER, Box::new(move || tm_metrics.denied())));
                lifecycles.push(tm.lifecycle());
                bus.register(tm)?;
            }
            if m.router.enable {
                let module = router::Router::new(
                    m.router.clone(),
                    bus.endpoint(names::ROUTER),
                    client.clone(),
                    ownership.clone(),
                )?;
                let handle = module.handle();
                metrics::router(metrics, handle.metrics());
                lifecycles.push(handle.lifecycle());
                addresses.router = Some(handle.local_addr());
                bus.register(module)?;
            }
            if config.require_authorization() {
                let approver = csrapprover::CsrApprover::new(client.clone());
                metrics::csrapprover(metrics, approver.metrics());
                lifecycles.push(approver.lifecycle());
                bus.register(approver)?;
                let pc = policycontroller::PolicyController::new(
                    bus.endpoint(names::POLICYCONTROLLER),
                    client.clone(),
                );
                metrics::policycontroller(metrics, pc.metrics());
                lifecycles.push(pc.lifecycle());
                bus.register(pc)?;
            }
            if m.sync_controller.enable {
                let sc = synccontroller::SyncController::new(
                    m.sync_controller.clone(),
                    bus.endpoint(names::SYNCCONTROLLER),
                    client.clone(),
                )
                .with_ownership(ownership.clone());
                let sc = match record_writer.take() {
                    Some(writer) => sc.with_record_cache(writer),
                    None => sc,
                };
                metrics::synccontroller(metrics, sc.metrics());
                bus.register(sc)?;
            }
        }
        metrics::node_authorization(metrics, denials);
        let mut stream = None;
        let mut advertised_port = None;
        if m.cloud_stream.enable {
            let hub_material = hub.as_ref().map(hub_tls).transpose()?.ok_or_else(|| {
                StartError::Composition(
                    "modules.cloudStream needs modules.cloudHub enabled: the tunnel uses its CA"
                        .into(),
                )
            })?;
            let tls = CloudStreamTls {
                tunnel: CloudStreamTls::tunnel_from_config(&m.cloud_stream, hub_material)?,
                stream: None,
            };
            let mut module = CloudStream::new(
                m.cloud_stream.clone(),
                bus.endpoint(names::CLOUDSTREAM),
                kube.clone(),
                tls,
            )?;
            if let Some(hub) = &hub {
                // A certificate revoked at the hub is refused at the tunnel too.
                module = module.with_revocations(hub.revocations());
            }
            // The tunnel port is negotiated and recorded in both modes: in external mode the
            // iptables-manager DaemonSet reads the record to program the DNAT, and nodes must
            // advertise the port it redirects.
            let iptables = &m.iptables_manager;
            let advertised = match (&kube, iptables.enable) {
                (Some(client), true) => {
                    // One port per replica, keyed by the replica's own address: every
                    // replica's iptables rules send that port to this replica's stream server.
                    let ip = replica.clone();
                    let port = cloudstream::negotiate::negotiate_tunnel_port(client.clone(), &ip)
                        .await
                        .map_err(|e| StartError::Negotiate(e.to_string()))?;
                    info!(%ip, port, mode = ?iptables.mode, "tunnel port negotiated");
                    if iptables.runs_inside_cloudcore() {
                        module = module.with_iptables(
                            iptables.clone(),
                            Arc::new(cloudstream::iptables::SystemRunner::new()),
                            &ip,
                        );
                    }
                    port
                }
                // Without any DNAT, nodes report the stream port itself.
                _ => module.handle().stream_addr().port(),
            };
            module = module.with_advertised_port(advertised);
            advertised_port = Some(advertised);
            stream = Some(module.handle());
            bus.register(module)?;
        }
        metrics::bus(metrics, bus.endpoint("metrics"));
        bus.start()?;
        if let Some(hub) = &hub {
            let addrs = hub.start_servers()?;
            addresses.websocket = addrs.websocket;
            addresses.https = addrs.https;
            metrics::cloudhub(metrics, hub.clone());
        }
        let mut listeners: Vec<kubeedge_api::metrics::ListenerSource> = Vec::new();
        if let Some(hub) = &hub {
            let hub = hub.clone();
            listeners.push(Box::new(move || hub.listener_stats()));
        }
        if let Some(s) = &stream {
            addresses.tunnel = Some(s.tunnel_addr());
            addresses.stream = Some(s.stream_addr());
            metrics::cloudstream(metrics, s.clone());
            let s = s.clone();
            listeners.push(Box::new(move || s.listener_stats()));
        }
        metrics::listeners(metrics, listeners);
        info!(?addresses, "cloudcore started");
        let iptables = &m.iptables_manager;
        let diagnostics = crate::diagnose::Sources {
            hub: hub.clone(),
            stream: stream.clone(),
            kube,
            advertised_port,
            replica_ip: replica.clone(),
            iptables: match (iptables.enable, iptables.mode) {
                (false, _) => crate::diagnose::IptablesCheck::NotManaged,
                (true, cloudstream::IptablesMode::Internal) => {
                    crate::diagnose::IptablesCheck::Internal
                }
                (true, cloudstream::IptablesMode::External) => {
                    crate::diagnose::IptablesCheck::External
                }
            },
            runner: Arc::new(cloudstream::iptables::SystemRunner::new()),
        };
        Ok(CloudCore {
            bus,
            synced,
            hub,
            stream,
            addresses,
            diagnostics,
            lifecycles,
        })
    }

    /// Resolves once the edgecontroller's caches are complete (at once without it): before
    /// that, edge queries could be answered from a partial cache; and once cloudhub's
    /// revocations are known (every Node listed), before which every edge is refused.
    pub async fn wait_synced(&self) {
        if let Some(s) = &self.synced {
            s.wait().await;
        }
        if let Some(hub) = &self.hub {
            hub.wait_revocations_loaded().await;
        }
    }

    /// Where the servers listen.
    pub fn addresses(&self) -> &Addresses {
        &self.addresses
    }

    /// cloudhub, when enabled.
    pub fn hub(&self) -> Option<&HubHandle> {
        self.hub.as_ref()
    }

    /// cloudstream, when enabled.
    pub fn stream(&self) -> Option<&CloudStreamHandle> {
        self.stream.as_ref()
    }

    /// What `/debug/nodes/{name}` checks (see [`crate::diagnose`]).
    pub fn diagnostics(&self) -> crate::diagnose::Sources {
        self.diagnostics.clone()
    }

    /// The bus the modules run on.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Stops gracefully: controllers first, then cloudhub drains what they sent to the edges,
    /// closes sessions and writes every acknowledgement record; cloudstream closes tunnels.
    pub async fn shutdown(&self) {
        self.bus.shutdown().await;
        for life in &self.lifecycles {
            life.stop();
            if !life.join(Duration::from_secs(5)).await {
                warn!("a controller's tasks did not finish within 5 s");
            }
        }
        if let Some(hub) = &self.hub {
            hub.shutdown().await;
        }
        if let Some(stream) = &self.stream {
            stream.shutdown();
            if tokio::time::timeout(Duration::from_secs(5), stream.stopped())
                .await
                .is_err()
            {
                warn!("cloudstream did not stop within 5 s");
            }
        }
        info!("cloudcore stopped");
    }
}

/// Runs a cloudcore until `stop` resolves (or leadership is lost): operations server first,
/// then — as leader, when leader election is on — the modules.
pub async fn run(
    config: CloudCoreConfig,
    stop: impl Future<Output = ()>,
) -> Result<(), StartError> {
    use crate::build_info::{BUILD_DATE, GIT_COMMIT, VERSION};
    info!(
        version = VERSION,
        git_commit = GIT_COMMIT,
        build_date = BUILD_DATE,
        modules = config.enabled_modules().join(","),
        "starting cloudcore"
    );
    let client_required = config.needs_kubernetes() || config.leader_election.leader_elect;
    let authorization = &config.common_config.monitor_server.authorization;
    let ops = Ops {
        access: Access::from_settings(authorization, client_required),
        ..Ops::default()
    };
    metrics::build_info(&ops.metrics);
    let Ops {
        readiness,
        metrics,
        diagnostics,
        health,
        access,
        debug: _,
    } = ops.clone();
    let (ops_addr, ops) =
        crate::ops::serve(&config.common_config.monitor_server.bind_address, ops)?;
    let ops_handle = ops.handle();
    actix_rt::spawn(ops);
    info!(addr = %ops_addr, "monitor server listening");

    for field in config.ignored_settings() {
        warn!(field, "setting accepted but not supported; ignored");
    }
    let connect = async {
        let mut cfg = kube_config(&config.kube_api_config).await?;
        // Requests carry the replica's address, so the API server's managedFields and audit
        // log say which replica wrote what.
        if let Ok(agent) = http::HeaderValue::from_str(&format!(
            "cloudcore@{}/{}",
            config.replica_address(),
            env!("CARGO_PKG_VERSION")
        )) {
            cfg.headers.push((http::header::USER_AGENT, agent));
        }
        let ca = kube_ca_pem(&cfg);
        let client = crate::apiclient::client(cfg).map_err(|e| StartError::Kube(e.to_string()))?;
        Ok::<_, StartError>((client, ca))
    };
    let (kube, kube_ca_pem) = if config.needs_kubernetes() || config.leader_election.leader_elect {
        let (client, ca) = connect.await?;
        (Some(client), ca)
    } else {
        match connect.await {
            Ok((client, ca)) => (Some(client), ca),
            Err(e) => {
                info!(reason = %e, "running without Kubernetes: acknowledgement records stay in memory");
                (None, String::new())
            }
        }
    };
    match &kube {
        Some(client) if !access.allows_everyone() => {
            crate::permissions::check(client, &crate::permissions::monitor()).await?;
            access.set_client(client.clone());
        }
        Some(_) => {}
        None if !access.allows_everyone() => {
            return Err(StartError::Composition(
                "commonConfig.monitorServer.authorization.mode Webhook needs a Kubernetes client"
                    .to_owned(),
            ));
        }
        None => {}
    }
    if access.allows_everyone()
        && !config
            .common_config
            .monitor_server
            .bind_address
            .parse::<SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback())
    {
        warn!(
            bind = %config.common_config.monitor_server.bind_address,
            "the monitor server lets anyone who reaches it read /metrics (authorization AlwaysAllow)"
        );
    }
    if kube.is_some() && kube_ca_pem.is_empty() {
        warn!("the kubeconfig names no CA: edges asking for k8s/ca.crt get an empty answer");
    }
    tokio::pin!(stop);
    let elector = match (&kube, config.leader_election.leader_elect) {
        (Some(client), true) => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let identity = format!("{}_{}", host.trim(), beehive::new_id());
            let elector = LeaderElector::new(client.clone(), &config.leader_election, identity);
            readiness.set(Phase::Standby);
            tokio::select! {
                _ = elector.acquire() => {}
                _ = &mut stop => {
                    ops_handle.stop(true).await;
                    return Ok(());
                }
            }
            Some(elector)
        }
        _ => None,
    };
    readiness.set(Phase::Starting);
    let core = CloudCore::start_with(&config, kube, &metrics, StartOptions { kube_ca_pem }).await?;
    health.watch(core.bus());
    diagnostics.set(core.diagnostics());
    tokio::select! {
        _ = core.wait_synced() => readiness.set(Phase::Ready),
        _ = &mut stop => {
            core.shutdown().await;
            ops_handle.stop(true).await;
            return Ok(());
        }
    }
    match &elector {
        Some(elector) => tokio::select! {
            _ = &mut stop => {}
            _ = elector.hold() => warn!("leadership lost: stopping"),
        },
        None => stop.await,
    }
    readiness.set(Phase::ShuttingDown);
    diagnostics.clear();
    health.unwatch();
    core.shutdown().await;
    ops_handle.stop(true).await;
    Ok(())
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => info!(signal = "SIGTERM", "got os signal"),
            _ = int.recv() => info!(signal = "SIGINT", "got os signal"),
        },
        _ => futures_pending().await,
    }
}

async fn futures_pending() {
    std::future::pending::<()>().await
}
