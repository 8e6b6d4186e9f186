//! The `cloudStream` beehive module: owns the tunnel server, the stream server and the
//! iptables manager, on an actix arbiter of their own.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use actix_rt::Arbiter;
use beehive::{Endpoint, Message, Module};
use kubeedge_api::listener::{Gate, ListenerStats};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::config::{CloudStreamConfig, IptablesManagerConfig, StreamAuthorizationMode, Tuning};
use crate::iptables::{CommandRunner, IptablesManager};
use crate::metrics::{CountersSnapshot, Metrics};
use crate::negotiate;
use crate::stream::{self, Authorizer, KubePodLocator, PodLocator, StreamContext, Webhook};
use crate::tunnel::{self, NodeUpdater, Shared};
use pki::stream_tls::{self as tls, ServerTls, TlsError, TlsMaterial};

/// Errors creating the module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// TLS material missing or unusable.
    #[error("tls: {0}")]
    Tls(#[from] TlsError),
    /// A listener could not be bound.
    #[error("bind {what} port {port}: {source}")]
    Bind {
        /// `tunnel` or `stream`.
        what: &'static str,
        /// The port.
        port: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `streamAuthorization.mode: Webhook` was set but there is no Kubernetes client to send
    /// SubjectAccessReviews with.
    #[error("modules.cloudStream.streamAuthorization.mode Webhook needs a Kubernetes client")]
    WebhookWithoutClient,
}

/// The TLS the two servers use.
#[derive(Debug, Clone)]
pub struct CloudStreamTls {
    /// The tunnel: the cloudhub CA (verifies edge certificates) and the cloudhub server
    /// certificate, unless the `tlsTunnel*` files were chosen by the composer.
    pub tunnel: ServerTls,
    /// The stream server; `None` loads the `tlsStream*` files of the configuration.
    pub stream: Option<ServerTls>,
}

/// The `cloudStream` module. Create it with [`CloudStream::new`] (which binds both ports),
/// keep a [`CloudStreamHandle`], and register it on the bus: starting the actor starts the
/// servers on their own arbiter; bus shutdown stops them gracefully.
///
/// ```no_run
/// use std::sync::Arc;
/// use beehive::Bus;
/// use cloudstream::iptables::SystemRunner;
/// use cloudstream::{CloudStream, CloudStreamConfig, CloudStreamTls, IptablesManagerConfig, ServerTls, TlsMaterial};
/// # async fn demo(cloudhub: TlsMaterial, kube: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let bus = Bus::new();
/// let config = CloudStreamConfig { enable: true, ..CloudStreamConfig::default() };
/// // commonConfig.tunnelPort: what connecting Nodes will report as their kubelet port.
/// let port = cloudstream::negotiate::negotiate_tunnel_port(kube.clone(), "10.0.0.1").await?;
/// let tls = CloudStreamTls { tunnel: ServerTls::Material(cloudhub), stream: None };
/// let module = CloudStream::new(config, bus.endpoint("cloudStream"), Some(kube), tls)?
///     .with_advertised_port(port)
///     .with_iptables(IptablesManagerConfig::default(), Arc::new(SystemRunner::new()), "10.0.0.1");
/// let handle = module.handle();
/// bus.register(module)?;
/// bus.start()?;
/// // … later: bus.shutdown().await closes every tunnel; handle.stopped().await waits for it.
/// # let _ = handle; Ok(()) }
/// ```
pub struct CloudStream {
    config: CloudStreamConfig,
    endpoint: Endpoint,
    kube: Option<kube::Client>,
    tunnel_tls: Arc<rustls::ServerConfig>,
    stream_tls: Arc<rustls::ServerConfig>,
    listeners: Option<(TcpListener, TcpListener)>,
    pods: Option<Arc<dyn PodLocator>>,
    authz: Arc<Authorizer>,
    advertised_port: u16,
    iptables: Option<(IptablesManagerConfig, Arc<dyn CommandRunner>, String)>,
    handle: CloudStreamHandle,
    arbiter: Option<Arbiter>,
}

impl std::fmt::Debug for CloudStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudStream")
            .field("config", &self.config)
            .field("endpoint", &self.endpoint)
            .field("advertised_port", &self.advertised_port)
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// A cheap, cloneable view of a running [`CloudStream`]: addresses, counters, sessions and
/// shutdown.
#[derive(Debug, Clone)]
pub struct CloudStreamHandle {
    tunnel_addr: SocketAddr,
    stream_addr: SocketAddr,
    tunnel_gate: Arc<Gate>,
    stream_gate: Arc<Gate>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    /// Cancelled once the servers have stopped.
    stopped: CancellationToken,
}

impl CloudStreamHandle {
    /// Where the tunnel server listens.
    pub fn tunnel_addr(&self) -> SocketAddr {
        self.tunnel_addr
    }

    /// Where the stream server listens.
    pub fn stream_addr(&self) -> SocketAddr {
        self.stream_addr
    }

    /// Current values of the metrics.
    pub fn counters(&self) -> CountersSnapshot {
        self.shared.metrics.snapshot()
    }

    /// The metrics, to [`Metrics::register`] in the process's registry.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// Admission gauges and counters of both listeners, for `/metrics`: the tunnel server
    /// (listener `cloudstream_tunnel`) then the stream server (`cloudstream_stream`).
    pub fn listener_stats(&self) -> Vec<ListenerStats> {
        vec![self.tunnel_gate.stats(), self.stream_gate.stats()]
    }

    /// Names of the nodes with a tunnel now, sorted.
    pub fn connected_nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .shared
            .registry
            .all()
            .iter()
            .map(|s| s.node.clone())
            .collect();
        nodes.sort();
        nodes
    }

    /// The internal IP the node's tunnel registered (where streams for it go); `None`
    /// without a tunnel.
    pub fn tunnel_ip(&self, node: &str) -> Option<String> {
        self.shared.registry.by_node(node).map(|s| s.ip.clone())
    }

    /// Waits until the node named `node` has a tunnel, or, when `node` is an IP address,
    /// until a tunnel registered that internal IP; false after `limit`.
    pub async fn wait_for_session(&self, node: &str, limit: Duration) -> bool {
        let mut changes = self.shared.registry.subscribe();
        let ip = node.parse::<std::net::IpAddr>().ok();
        tokio::time::timeout(limit, async {
            loop {
                let found = match ip {
                    Some(ip) => self.shared.registry.by_ip(ip.to_canonical()).is_some(),
                    None => self.shared.registry.by_node(node).is_some(),
                };
                if found {
                    return;
                }
                if changes.changed().await.is_err() {
                    futures::future::pending::<()>().await;
                }
            }
        })
        .await
        .is_ok()
    }

    /// Starts a graceful shutdown: stop accepting, close every tunnel (their streams end with
    /// an error), remove the iptables rules. Returns at once; see [`CloudStreamHandle::stopped`].
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// Resolves when the servers have stopped after [`CloudStreamHandle::shutdown`].
    pub async fn stopped(&self) {
        self.stopped.cancelled().await;
    }
}

impl CloudStreamTls {
    /// The tunnel's material as upstream picks it (`cloudstream/config/config.go`): the CA
    /// from `tlsTunnelCAFile` if readable, else the cloudhub CA; the certificate and key from
    /// the `tlsTunnel*` files if both are readable, else cloudhub's. A file that is readable
    /// but unusable is an error (upstream panics on a file without a PEM block).
    pub fn tunnel_from_config(
        config: &CloudStreamConfig,
        cloudhub: TlsMaterial,
    ) -> Result<ServerTls, TlsError> {
        let read = |path: &str| std::fs::read(path).ok();
        let ca = match read(&config.tls_tunnel_ca_file) {
            Some(bytes) => tls::certificates(&bytes, "tunnel CA")?,
            None => cloudhub.ca,
        };
        let (cert_chain, key) = match (
            read(&config.tls_tunnel_cert_file),
            read(&config.tls_tunnel_private_key_file),
        ) {
            (Some(cert), Some(key)) => (
                tls::certificates(&cert, "tunnel certificate")?,
                tls::private_key(&key)?,
            ),
            _ => (cloudhub.cert_chain, cloudhub.key),
        };
        Ok(ServerTls::Material(TlsMaterial {
            cert_chain,
            key,
            ca,
        }))
    }
}

fn bind(what: &'static str, port: u32) -> Result<TcpListener, Error> {
    let bind_err = |source| Error::Bind { what, port, source };
    let port16 =
        u16::try_from(port).map_err(|_| bind_err(std::io::Error::other("port out of range")))?;
    let l = TcpListener::bind(("0.0.0.0", port16)).map_err(bind_err)?;
    l.set_nonblocking(true).map_err(bind_err)?;
    Ok(l)
}

/// The stream server's authorizer: `Webhook` by default when there is a client.
fn authorizer(
    config: &CloudStreamConfig,
    kube: Option<&kube::Client>,
) -> Result<Arc<Authorizer>, Error> {
    let a = &config.stream_authorization;
    let mode = a.mode.unwrap_or(if kube.is_some() {
        StreamAuthorizationMode::Webhook
    } else {
        StreamAuthorizationMode::AlwaysAllow
    });
    let authorizer = match (mode, kube) {
        (StreamAuthorizationMode::AlwaysAllow, _) => {
            if config.enable {
                warn!(
                    explicit = a.mode.is_some(),
                    "cloudstream's stream server allows every caller whose certificate verifies (streamAuthorization AlwaysAllow)"
                );
            }
            Authorizer::AlwaysAllow
        }
        (StreamAuthorizationMode::Webhook, Some(client)) => Authorizer::Webhook(Box::new(
            Webhook::new(
                client.clone(),
                Duration::from_secs(a.cache_authorized_ttl_seconds),
                Duration::from_secs(a.cache_unauthorized_ttl_seconds),
            )
            .with_limits(kubeedge_api::access::CacheLimits {
                entries: a.cache_entries,
                entries_per_subject: a.cache_entries_per_user,
                key_bytes: 4 << 10,
            }),
        )),
        (StreamAuthorizationMode::Webhook, None) => return Err(Error::WebhookWithoutClient),
    };
    Ok(Arc::new(authorizer))
}

fn server_config(tls: ServerTls, verify: bool) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    match tls {
        ServerTls::Config(c) => Ok(c),
        ServerTls::Material(m) => tls::server_config(&m, verify),
    }
}

impl CloudStream {
    /// Binds both ports (`0` picks free ones; nothing is bound when `config.enable` is false)
    /// and prepares TLS; servers start with the actor.
    /// With a `kube` client, connecting nodes get their kubelet port set to the advertised
    /// port, a tunnel's `SessionInternalIP` may also be one of its Node's addresses, pods are
    /// located through a reflector cache, and stream requests are authorized with
    /// SubjectAccessReviews unless `streamAuthorization.mode` is `AlwaysAllow`.
    pub fn new(
        config: CloudStreamConfig,
        endpoint: Endpoint,
        kube: Option<kube::Client>,
        tls: CloudStreamTls,
    ) -> Result<Self, Error> {
        let tunnel_tls = server_config(tls.tunnel, true)?;
        let stream_material = match tls.stream {
            Some(s) => s,
            None => ServerTls::Material(TlsMaterial::from_files(
                config.tls_stream_cert_file.as_ref(),
                config.tls_stream_private_key_file.as_ref(),
                config.tls_stream_ca_file.as_ref(),
            )?),
        };
        let stream_tls = server_config(stream_material, config.verify_stream_client_cert)?;
        let authz = authorizer(&config, kube.as_ref())?;
        // A disabled module never starts: it does not hold its ports either.
        let listeners = if config.enable {
            Some((
                bind("tunnel", config.tunnel_port)?,
                bind("stream", config.stream_port)?,
            ))
        } else {
            None
        };
        let addr = |l: Option<&TcpListener>, what, port: u32| match l {
            Some(l) => l
                .local_addr()
                .map_err(|source| Error::Bind { what, port, source }),
            None => Ok(SocketAddr::from((
                [0, 0, 0, 0],
                u16::try_from(port).unwrap_or(0),
            ))),
        };
        let shared = Arc::new(Shared::new(Arc::new(Metrics::default()), Tuning::default()));
        let handle = CloudStreamHandle {
            tunnel_gate: Gate::new("cloudstream_tunnel", config.tunnel_limits.clone()),
            stream_gate: Gate::new("cloudstream_stream", config.stream_limits.clone()),
            tunnel_addr: addr(
                listeners.as_ref().map(|l| &l.0),
                "tunnel",
                config.tunnel_port,
            )?,
            stream_addr: addr(
                listeners.as_ref().map(|l| &l.1),
                "stream",
                config.stream_port,
            )?,
            shared,
            stop: CancellationToken::new(),
            stopped: CancellationToken::new(),
        };
        Ok(CloudStream {
            advertised_port: 10350,
            config,
            endpoint,
            kube,
            tunnel_tls,
            stream_tls,
            listeners,
            pods: None,
            authz,
            iptables: None,
            handle,
            arbiter: None,
        })
    }

    /// The kubelet port written into connecting Nodes (`commonConfig.tunnelPort`, usually
    /// from [`negotiate::negotiate_tunnel_port`]; default 10350).
    pub fn with_advertised_port(mut self, port: u16) -> Self {
        self.advertised_port = port;
        self
    }

    /// Locates pods with `pods` instead of the kube reflector.
    pub fn with_pod_locator(mut self, pods: Arc<dyn PodLocator>) -> Self {
        self.pods = Some(pods);
        self
    }

    /// Replaces the timing and buffering knobs.
    pub fn with_tuning(mut self, tuning: Tuning) -> Self {
        // Nothing runs before the actor starts, so a fresh shared state loses nothing.
        let mut shared = Shared::new(self.handle.shared.metrics.clone(), tuning);
        shared.revocations = self.handle.shared.revocations.clone();
        self.handle.shared = Arc::new(shared);
        self
    }

    /// Refuses tunnels whose client certificate is revoked in `revocations` (cloudhub's
    /// table, `cloudhub::HubHandle::revocations` in a composition): checked after every
    /// handshake, resumed ones included, and answered `403` with the reason.
    pub fn with_revocations(mut self, revocations: pki::Revocations) -> Self {
        let mut shared = Shared::new(
            self.handle.shared.metrics.clone(),
            self.handle.shared.tuning.clone(),
        );
        shared.revocations = Some(revocations);
        self.handle.shared = Arc::new(shared);
        self
    }

    /// Runs the iptables manager when `config` says it runs inside cloudcore and a kube
    /// client was given (it reads the `tunnelport` ConfigMap). `own_ip` is this cloudcore's
    /// key in the record: its entry is programmed whether or not a cloudcore pod has the IP;
    /// other entries need a live cloudcore pod (see [`crate::iptables::RecordPolicy`]).
    pub fn with_iptables(
        mut self,
        config: IptablesManagerConfig,
        runner: Arc<dyn CommandRunner>,
        own_ip: &str,
    ) -> Self {
        self.iptables = Some((config, runner, own_ip.to_owned()));
        self
    }

    /// A handle for addresses, counters and shutdown.
    pub fn handle(&self) -> CloudStreamHandle {
        self.handle.clone()
    }

    /// The bus endpoint the module sends as (cloudstream sends nothing on the bus today).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn start_servers(&mut self) {
        let Some((tunnel_l, stream_l)) = self.listeners.take() else {
            return;
        };
        let handle = self.handle.clone();
        let shared = handle.shared.clone();
        let kube = self.kube.clone();
        let pods = self.pods.clone();
        let authz = self.authz.clone();
        let tunnel_tls = TlsAcceptor::from(self.tunnel_tls.clone());
        let stream_tls = TlsAcceptor::from(self.stream_tls.clone());
        let advertised = self.advertised_port;
        let stream_port = self.config.stream_port;
        let iptables = self
            .iptables
            .clone()
            .filter(|(c, _, _)| c.runs_inside_cloudcore())
            .and_then(|(c, runner, own_ip)| {
                kube.clone().map(|k| (k, runner, c.policy(Some(own_ip))))
            });
        let arbiter = Arbiter::new();
        let started = arbiter.spawn(async move {
            let stop = handle.stop.clone();
            let (tunnel_l, stream_l) = match (
                tokio::net::TcpListener::from_std(tunnel_l),
                tokio::net::TcpListener::from_std(stream_l),
            ) {
                (Ok(t), Ok(s)) => (t, s),
                (Err(e), _) | (_, Err(e)) => {
                    error!(error = %e, "cloudstream listeners unusable");
                    handle.stopped.cancel();
                    Arbiter::current().stop();
                    return;
                }
            };
            let nodes = kube.clone().map(|k| {
                NodeUpdater::new(k, advertised, shared.tuning.node_update_interval, shared.tuning.node_update_deadline)
            });
            // The servers, the pod reflector and the iptables manager; connections and
            // sessions are on `shared.tasks`.
            let servers = TaskTracker::new();
            let pods: Option<Arc<dyn PodLocator>> = pods.or_else(|| {
                kube.clone()
                    .map(|k| Arc::new(KubePodLocator::start(k, stop.clone(), &servers)) as Arc<dyn PodLocator>)
            });
            let ctx = StreamContext {
                shared: shared.clone(),
                pods,
                authz,
            };
            if let Some(n) = &nodes {
                servers.spawn(n.clone().watch_addresses(stop.clone()));
            }
            servers.spawn(tunnel::run(tunnel_l, tunnel_tls, shared.clone(), nodes, handle.tunnel_gate.clone(), stop.clone()));
            servers.spawn(stream::run(stream_l, stream_tls, ctx, handle.stream_gate.clone(), stop.clone()));
            if let Some((client, runner, policy)) = iptables {
                let records = negotiate::watch_record(client.clone(), stop.clone(), &servers);
                let cloudcores = negotiate::watch_cloudcore_ips(client.clone(), negotiate::cloudcore_namespace(), stop.clone(), &servers);
                servers.spawn(negotiate::release_deleted_cloudcores(client, negotiate::cloudcore_namespace(), stop.clone()));
                servers.spawn(IptablesManager::new(runner, stream_port as u16).with_policy(policy).run(records, cloudcores, stop.clone()));
            }
            servers.close();
            info!(tunnel = %handle.tunnel_addr, stream = %handle.stream_addr, advertised, "cloudstream started");
            stop.cancelled().await;
            // Every task on `servers` ends on `stop` (the iptables manager after removing its
            // rules).
            servers.wait().await;
            for s in shared.registry.all() {
                s.close("cloudstream is shutting down");
            }
            // Let the writers send their Close frames, each within the write deadline.
            shared.tasks.close();
            if tokio::time::timeout(shared.tuning.write_timeout, shared.tasks.wait()).await.is_err() {
                warn!(tasks = shared.tasks.len(), "connections still open after the write deadline; stopping regardless");
            }
            info!("cloudstream stopped");
            handle.stopped.cancel();
            Arbiter::current().stop();
        });
        if !started {
            error!("cloudstream arbiter refused the server task");
        }
        self.arbiter = Some(arbiter);
    }
}

impl Actor for CloudStream {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        // Upstream waits for cloudhub's tunnel certificates; here the composer hands
        // them over before the module exists.
        self.start_servers();
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.handle.shutdown();
    }
}

impl Handler<Message> for CloudStream {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        // Upstream cloudstream receives nothing on the bus.
        debug!(id = %msg.header.id, resource = %msg.route.resource, "cloudStream ignores bus messages");
    }
}

impl Module for CloudStream {
    fn name(&self) -> &str {
        kubeedge_api::names::CLOUDSTREAM
    }

    fn group(&self) -> &str {
        kubeedge_api::names::CLOUDSTREAM
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.handle.shutdown();
    }
}
