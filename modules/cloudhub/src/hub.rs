//! The `cloudhub` module and the handle a composer uses: key material, token, servers,
//! counters, graceful shutdown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::names;
use kubeedge_api::replicas::Ownership;
use pki::{CertAndKey, CertificateAuthority, ExtKeyUsage, SignPolicy};
use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use crate::classify::legacy_drop;
use crate::classify::{Delivery, classify, is_delete, object_info};
use crate::config::CloudHubConfig;
use crate::error::{Error, Result};
use crate::events::Events;
use crate::material::{self, Material};
use crate::persist::{PersistOp, Persister};
use crate::registry::{DropCounters, DropCounts, DropReason, NodeCounters, NodeStats, Registry};
use crate::session::{Deliver, Stop, StopReason};
use crate::store::{ObjectSyncStore, SyncKey, SyncSpec};

/// Hub-wide counters.
#[derive(Debug, Default)]
pub(crate) struct HubCounters {
    pub(crate) dropped_no_node: AtomicU64,
    pub(crate) dropped_offline: AtomicU64,
    pub(crate) held_elsewhere: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) upstream_unroutable: AtomicU64,
    pub(crate) token_refused_connected: AtomicU64,
    pub(crate) revocation_writes_failed: AtomicU64,
    /// Connection tasks (one per upgraded WebSocket) running now.
    pub(crate) connection_tasks: AtomicU64,
    /// Every drop, per reason, whether or not a node's counters saw it.
    pub(crate) drops: DropCounters,
}

/// A snapshot of the hub's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Live sessions (the `KubeEdge_CloudHub_connected_nodes` gauge).
    pub connected_nodes: usize,
    /// Connection tasks running now: one per upgraded WebSocket, from the upgrade until its
    /// socket is closed. Equal to `connected_nodes` at rest; a higher figure that does not come
    /// back down means connections outlive their sessions.
    pub connection_tasks: u64,
    /// Downstream messages whose resource names no node.
    pub dropped_no_node: u64,
    /// Downstream messages for nodes without a session here (the sync loop redelivers
    /// ACK-class state once the node is back).
    pub dropped_offline: u64,
    /// Downstream messages for nodes another replica holds: left to that replica (not drops;
    /// with several replicas, most messages are someone else's).
    pub held_elsewhere: u64,
    /// Downstream messages refused because the node's session mailbox was full (the
    /// ACK-class ones keep an ObjectSync record, so the sync loop redelivers them).
    pub dropped_full: u64,
    /// Every drop in the hub (downstream and upstream), per reason: the per-node counts
    /// together plus those for nodes without counters (no node id, never connected here).
    pub drops: DropCounts,
    /// Upstream messages no module could take.
    pub upstream_unroutable: u64,
    /// ObjectSync writes done after acknowledgements.
    pub records_written: u64,
    /// ObjectSync writes that failed (the sync loop repairs them).
    pub records_failed: u64,
    /// Token-authenticated certificate requests refused because the node had a live session.
    pub token_refused_connected: u64,
    /// Handshakes and certificate-server requests refused because the certificate is revoked.
    pub revoked_refused: u64,
    /// Nodes whose certificates are revoked (deleted within one certificate lifetime).
    pub revoked_nodes: usize,
    /// Revocations not yet written to the API server (retried every minute).
    pub revocation_writes_failed: u64,
}

/// Addresses the servers actually listen on (useful with port 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerAddrs {
    /// The WebSocket listener, when enabled.
    pub websocket: Option<SocketAddr>,
    /// The certificate server, when enabled.
    pub https: Option<SocketAddr>,
}

/// Options a composer may set besides the configuration.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// The Kubernetes CA (PEM) served to edges asking for `k8s/ca.crt`; empty when unknown.
    pub kube_ca_pem: String,
    /// Overrides `tokenRefreshDuration` (tests; production uses the configuration).
    pub token_refresh: Option<Duration>,
    /// Which replica holds which node, shared with the other modules of this replica. The
    /// hub records its sessions in it, and leaves nodes another replica holds alone: a
    /// message for such a node is dropped without an ObjectSync record (the holder keeps
    /// those). Default: a view of its own that knows no other replica.
    pub ownership: Option<Ownership>,
}

#[derive(Default)]
struct Servers {
    websocket: Option<actix_server::ServerHandle>,
    https: Option<actix_web::dev::ServerHandle>,
    /// Admission gates of the started listeners (their stats are `/metrics` gauges).
    gates: Vec<Arc<kubeedge_api::listener::Gate>>,
    /// The certificate server's request counters (kept across restarts of the listener).
    certserver: Arc<crate::certserver::Counters>,
}

/// The state every session, the module and the servers share.
pub(crate) struct Hub {
    pub(crate) config: CloudHubConfig,
    pub(crate) endpoint: Endpoint,
    pub(crate) registry: Registry,
    pub(crate) persister: Arc<Persister>,
    pub(crate) events: Events,
    pub(crate) kube: Option<kube::Client>,
    pub(crate) counters: HubCounters,
    /// Node certificates revoked by deletion; checked at every TLS handshake.
    pub(crate) revocations: pki::Revocations,
    pub(crate) ownership: Ownership,
    material: Material,
    sign_policy: SignPolicy,
    token: RwLock<String>,
    kube_ca_pem: RwLock<String>,
    token_refresh: Duration,
    servers: Mutex<Servers>,
    started: AtomicBool,
    stopping: AtomicBool,
    pub(crate) stopped: Notify,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("nodes", &self.registry.len())
            .finish_non_exhaustive()
    }
}

impl Hub {
    pub(crate) fn ca(&self) -> &CertificateAuthority {
        &self.material.ca
    }

    pub(crate) fn sign_policy(&self) -> SignPolicy {
        self.sign_policy.clone()
    }

    pub(crate) fn kube_ca_pem(&self) -> String {
        self.kube_ca_pem
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts `n` drops of `reason`: hub-wide, and for the node when it has counters.
    pub(crate) fn count_drop(&self, node: Option<&NodeCounters>, reason: DropReason, n: u64) {
        if n == 0 {
            return;
        }
        self.counters.drops.add(reason, n);
        if let Some(c) = node {
            c.drop_n(reason, n);
        }
    }

    /// Routes one downstream message to its node's session (the node after `node/` in the
    /// resource). Never blocks: a node without a session here, or with a full mailbox, does not get
    /// the message (counted, and an ACK-class object keeps a record the sync loop redelivers from).
    fn dispatch(self: &Arc<Self>, msg: Message) {
        let Some(node) = kubeedge_api::node_of(&msg.route.resource).map(str::to_owned) else {
            self.counters
                .dropped_no_node
                .fetch_add(1, Ordering::Relaxed);
            self.count_drop(None, DropReason::Malformed, 1);
            warn!(msg = %msg, "downstream message without node id dropped");
            return;
        };
        let node = node.as_str();
        if legacy_drop(&msg) {
            let known = self.registry.known_counters(node);
            self.count_drop(known.as_deref(), DropReason::Refused, 1);
            debug!(node, msg = %msg, "legacy edgemgr message filtered");
            return;
        }
        let Some(entry) = self.registry.get(node) else {
            self.offline(node, &msg);
            return;
        };
        let deliver = Deliver::new(msg, self.clone(), entry.counters.clone());
        if let Err(e) = entry.addr.try_send(deliver) {
            match e {
                actix::dev::SendError::Full(deliver) => {
                    let msg = deliver.into_inner();
                    self.counters.dropped_full.fetch_add(1, Ordering::Relaxed);
                    self.count_drop(Some(&entry.counters), DropReason::QueueFull, 1);
                    let recorded = self.record_offline(node, &msg);
                    warn!(
                        node,
                        resource = %msg.route.resource,
                        reason = "node intake queue full",
                        redelivered_by_sync_loop = recorded,
                        "downstream message dropped"
                    );
                }
                actix::dev::SendError::Closed(deliver) => {
                    let msg = deliver.into_inner();
                    self.offline(node, &msg);
                }
            }
        }
    }

    /// A message for a node without a live session here. Its record is written here unless
    /// another replica holds the node: only the holder writes a node's records.
    fn offline(&self, node: &str, msg: &Message) {
        if self.ownership.held_elsewhere(node) {
            self.counters.held_elsewhere.fetch_add(1, Ordering::Relaxed);
            debug!(node, msg = %msg, "node held by another replica, message left to it");
            return;
        }
        self.counters
            .dropped_offline
            .fetch_add(1, Ordering::Relaxed);
        let known = self.registry.known_counters(node);
        self.count_drop(known.as_deref(), DropReason::Offline, 1);
        debug!(node, msg = %msg, "node not connected here, message dropped");
        self.record_offline(node, msg);
    }

    /// For a message its node did not take (away, queue full, session
    /// ended): the record a first-seen object gets (status `"0"`; an existing record is left
    /// alone) is what makes the sync loop send it once the node can take it. True when the
    /// message is one the sync loop redelivers (an ACK-class object with a UID).
    pub(crate) fn record_offline(&self, node: &str, msg: &Message) -> bool {
        match offline_record(node, msg) {
            Some((key, spec)) => {
                self.persister.submit(key, PersistOp::Ensure { spec });
                true
            }
            None => false,
        }
    }

    /// Revokes every certificate issued to `node` until now, closes its session, and (with
    /// Kubernetes) records the revocation in ConfigMap `kubeedge/revokedcerts`. The
    /// in-memory table is updated first, so no new handshake with an old certificate
    /// succeeds once this starts; a failed write is retried by the resync loop.
    pub(crate) async fn node_deleted(&self, node: &str) {
        if node.is_empty() {
            return;
        }
        let revoked_at = pki::unix_now();
        self.revocations.revoke(node, revoked_at);
        let session = self.registry.get(node);
        warn!(node, revoked = %pki::rfc3339(revoked_at), connected = session.is_some(), "node deleted: its certificates are revoked");
        if let Some(entry) = session {
            entry.addr.do_send(Stop(StopReason::NodeDeleted));
        }
        self.registry.forget_counters(node);
        if let Some(client) = &self.kube
            && let Err(e) = crate::revocation::store(client, node, revoked_at).await
        {
            self.counters
                .revocation_writes_failed
                .fetch_add(1, Ordering::Relaxed);
            error!(node, error = %e, "writing the revocation failed; retried by the resync loop");
        }
    }

    async fn refresh_tokens(self: Arc<Self>) {
        let mut wait = self.token_refresh;
        let mut failures = 0u32;
        loop {
            let stopped = self.stopped.notified();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stopped => return,
            }
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            let token = pki::create_token(self.ca(), self.config.token_lifetime());
            *self.token.write().unwrap_or_else(|e| e.into_inner()) = token.clone();
            match material::store_token(&self.config, self.kube.as_ref(), &token).await {
                Ok(()) => {
                    failures = 0;
                    wait = self.token_refresh;
                    info!("bootstrap token refreshed");
                }
                Err(e) => {
                    // Keep trying: KubeEdge's refresh stops for good after one failure and tokens
                    // expire.
                    failures += 1;
                    wait = Duration::from_secs(1u64 << failures.min(8)).min(self.token_refresh);
                    error!(error = %e, retry_in_s = wait.as_secs(), "storing the refreshed token failed");
                }
            }
        }
    }
}

/// The handle a composer keeps: cheap to clone, `Send + Sync`.
#[derive(Clone, Debug)]
pub struct HubHandle(Arc<Hub>);

impl HubHandle {
    /// The KubeEdge CA (for cloudstream's tunnel TLS and edge bootstrap).
    pub fn ca(&self) -> &CertificateAuthority {
        self.0.ca()
    }

    /// The cloudcore server certificate and key (DER).
    pub fn server_cert(&self) -> &CertAndKey {
        &self.0.material.server
    }

    /// The current bootstrap token (`<sha256(CA)>.<JWT>`); also in `tokendata` beside the CA
    /// file and, with Kubernetes, in Secret `kubeedge/tokensecret`.
    pub fn token(&self) -> String {
        self.0
            .token
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the Kubernetes CA PEM served for `k8s/ca.crt` queries.
    pub fn set_kube_ca_pem(&self, pem: impl Into<String>) {
        *self
            .0
            .kube_ca_pem
            .write()
            .unwrap_or_else(|e| e.into_inner()) = pem.into();
    }

    /// Number of live sessions.
    pub fn connected_nodes(&self) -> usize {
        self.0.registry.len()
    }

    /// Ids of connected nodes.
    pub fn nodes(&self) -> Vec<String> {
        self.0.registry.nodes()
    }

    /// How long the node's current session has been up; `None` when it has none.
    pub fn session_age(&self, node: &str) -> Option<std::time::Duration> {
        self.0.registry.get(node).map(|e| e.since.elapsed())
    }

    /// Counters of a node that has connected to this hub since it started (connected now or
    /// not); they add up over the node's connections. `None` for a node never seen (or
    /// deleted since).
    pub fn node_stats(&self, node: &str) -> Option<NodeStats> {
        self.0.registry.known_counters(node).map(|c| c.snapshot())
    }

    /// Counters of every node seen since start, connected or not (for per-node metrics such
    /// as drops per node and reason, which must not vanish when a node disconnects).
    pub fn known_node_stats(&self) -> Vec<(String, NodeStats)> {
        self.0
            .registry
            .all_counters()
            .into_iter()
            .map(|(n, c)| (n, c.snapshot()))
            .collect()
    }

    /// Counters of every connected node.
    pub fn all_node_stats(&self) -> Vec<(String, NodeStats)> {
        self.0
            .registry
            .all()
            .into_iter()
            .map(|(n, e)| (n, e.counters.snapshot()))
            .collect()
    }

    /// Hub-wide counters.
    pub fn stats(&self) -> HubStats {
        let c = &self.0.counters;
        HubStats {
            connected_nodes: self.0.registry.len(),
            connection_tasks: c.connection_tasks.load(Ordering::Relaxed),
            dropped_no_node: c.dropped_no_node.load(Ordering::Relaxed),
            dropped_offline: c.dropped_offline.load(Ordering::Relaxed),
            held_elsewhere: c.held_elsewhere.load(Ordering::Relaxed),
            dropped_full: c.dropped_full.load(Ordering::Relaxed),
            drops: c.drops.snapshot(),
            upstream_unroutable: c.upstream_unroutable.load(Ordering::Relaxed),
            records_written: self.0.persister.written.load(Ordering::Relaxed),
            records_failed: self.0.persister.failed.load(Ordering::Relaxed),
            token_refused_connected: c.token_refused_connected.load(Ordering::Relaxed),
            revoked_refused: self.0.revocations.refused(),
            revoked_nodes: self.0.revocations.len(),
            revocation_writes_failed: c.revocation_writes_failed.load(Ordering::Relaxed),
        }
    }

    /// The revocation table the hub checks: a certificate for node `N` dated at or before
    /// `N`'s deletion is refused. Clones share the table, so another listener that accepts
    /// edge certificates (the tunnel) stays current by calling [`pki::Revocations::check`]
    /// or wrapping its verifier with [`pki::tls::revocation_checking_verifier`].
    pub fn revocations(&self) -> pki::Revocations {
        self.0.revocations.clone()
    }

    /// Revokes every certificate issued to `node` so far and closes its session, as a Node
    /// deletion does (with Kubernetes the hub watches Nodes and calls this itself). With
    /// Kubernetes the revocation is also stored in ConfigMap `kubeedge/revokedcerts`;
    /// without, it lasts as long as this process.
    pub async fn revoke_node(&self, node: &str) {
        self.0.node_deleted(node).await;
    }

    /// Admission gauges and counters of each started listener (`cloudhub_websocket`,
    /// `cloudhub_https`): open, authenticating, accepted, refused per reason, timed out.
    /// Empty before [`start_servers`](Self::start_servers).
    pub fn listener_stats(&self) -> Vec<kubeedge_api::listener::ListenerStats> {
        let servers = self.0.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers.gates.iter().map(|g| g.stats()).collect()
    }

    /// Request counters of the certificate server (port 10002).
    pub fn cert_server_stats(&self) -> crate::certserver::CertServerStats {
        let servers = self.0.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers.certserver.snapshot()
    }

    /// Starts the enabled listeners on the running actix system (call from it) and returns
    /// their addresses. QUIC and the unix socket are not implemented: enabling them is logged.
    pub fn start_servers(&self) -> Result<ServerAddrs> {
        let hub = &self.0;
        let c = &hub.config;
        let mut addrs = ServerAddrs::default();
        if c.quic.enable {
            error!(
                "quic is enabled but not supported (gQUIC, unauthenticated); edges must use websocket"
            );
        }
        if c.unixsocket.enable {
            info!(address = %c.unixsocket.address, "the unix socket CSI bridge is not implemented; not listening");
        }
        let server = &hub.material.server;
        if c.https.enable {
            let tls = pki::tls::server_config_optional_client(&server.cert_der, &server.key_der)?;
            let counters = hub
                .servers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .certserver
                .clone();
            let (handle, addr, gate) = crate::certserver::start(hub.clone(), tls, counters)?;
            let mut servers = hub.servers.lock().unwrap_or_else(|e| e.into_inner());
            servers.https = Some(handle);
            servers.gates.push(gate);
            addrs.https = Some(addr);
        }
        if c.websocket.enable {
            let tls = pki::tls::server_config_mutual_revocable(
                hub.ca().cert_der(),
                &server.cert_der,
                &server.key_der,
                &hub.revocations,
            )?;
            let (handle, addr, gate) = crate::ws::start(hub.clone(), tls)?;
            let mut servers = hub.servers.lock().unwrap_or_else(|e| e.into_inner());
            servers.websocket = Some(handle);
            servers.gates.push(gate);
            addrs.websocket = Some(addr);
        }
        Ok(addrs)
    }

    /// Graceful shutdown: stop accepting connections, let every session write what it has
    /// queued and close (up to 5 s), stop the servers, write pending ObjectSync records
    /// (up to 5 s). Calling it again does nothing.
    pub async fn shutdown(&self) {
        let hub = &self.0;
        if hub.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        info!(nodes = hub.registry.len(), "cloudhub shutting down");
        hub.registry.close();
        hub.stopped.notify_waiters();
        let (ws, https) = {
            let mut s = hub.servers.lock().unwrap_or_else(|e| e.into_inner());
            (s.websocket.take(), s.https.take())
        };
        if let Some(ws) = &ws {
            ws.pause().await;
        }
        for (_, entry) in hub.registry.all() {
            entry.addr.do_send(Stop(StopReason::Shutdown));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while hub.registry.len() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Some(ws) = ws {
            ws.stop(true).await;
        }
        if let Some(https) = https {
            https.stop(true).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), hub.persister.flushed()).await;
        info!("cloudhub stopped");
    }

    /// Waits until every acknowledgement so far is written to the ObjectSync store.
    pub async fn flush_records(&self) {
        self.0.persister.flushed().await;
    }
}

/// The `cloudhub` module: receives downstream messages from controllers (module name
/// `cloudhub`, group `cloudhub`) and hands each to its node's session.
///
/// Register it on the [`beehive::Bus`], start the bus, then call
/// [`HubHandle::start_servers`] on the running system. See the crate docs for the checks,
/// delivery guarantees and limits.
pub struct CloudHub {
    hub: Arc<Hub>,
}

impl std::fmt::Debug for CloudHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudHub").field("hub", &self.hub).finish()
    }
}

impl CloudHub {
    /// Prepares the hub: validates the configuration, loads or creates the CA, server
    /// certificate and token, in that order. `endpoint` is what the hub sends with
    /// (normally `bus.endpoint("cloudhub")`); `kube` enables the Secrets, `/node/{name}` and
    /// the token Secret; `store` holds acknowledgement records ([`crate::KubeStore`] with
    /// Kubernetes, [`crate::MemoryStore`] without).
    pub async fn new(
        config: CloudHubConfig,
        endpoint: Endpoint,
        kube: Option<kube::Client>,
        store: Arc<dyn ObjectSyncStore>,
    ) -> Result<Self> {
        Self::with_options(config, endpoint, kube, store, HubOptions::default()).await
    }

    /// [`CloudHub::new`] with [`HubOptions`].
    pub async fn with_options(
        config: CloudHubConfig,
        endpoint: Endpoint,
        kube: Option<kube::Client>,
        store: Arc<dyn ObjectSyncStore>,
        options: HubOptions,
    ) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let material = material::prepare(&config, kube.as_ref()).await?;
        let token = pki::create_token(&material.ca, config.token_lifetime());
        if let Err(e) = material::store_token(&config, kube.as_ref(), &token).await {
            error!(error = %e, "storing the bootstrap token failed; the refresh loop retries");
        }
        let allowed = config
            .allowed_ext_key_usages
            .iter()
            .filter_map(|n| ExtKeyUsage::from_go(*n))
            .collect();
        let sign_policy = SignPolicy {
            validity_days: config.edge_cert_signing_duration.max(1),
            allowed_ext_key_usages: allowed,
        };
        let revocations = match &kube {
            None => pki::Revocations::new(),
            Some(client) => {
                // Fail closed: until the stored revocations are read, no edge certificate
                // is accepted (the resync loop keeps trying).
                let revocations = pki::Revocations::pending();
                match crate::revocation::load(client, &revocations).await {
                    Ok(stored) => {
                        revocations.mark_loaded();
                        info!(
                            revoked_nodes = stored.len(),
                            "certificate revocations loaded"
                        );
                    }
                    Err(e) => error!(
                        error = %e,
                        "reading certificate revocations failed; edge certificates are refused until they are read"
                    ),
                }
                revocations
            }
        };
        let token_refresh = options
            .token_refresh
            .unwrap_or_else(|| config.token_refresh());
        let hub = Hub {
            endpoint,
            registry: Registry::default(),
            persister: Persister::new(store),
            events: Events::new(),
            kube,
            counters: HubCounters::default(),
            revocations,
            ownership: options
                .ownership
                .unwrap_or_else(|| Ownership::new(String::new())),
            material,
            sign_policy,
            token: RwLock::new(token),
            kube_ca_pem: RwLock::new(options.kube_ca_pem),
            token_refresh,
            servers: Mutex::new(Servers::default()),
            started: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            stopped: Notify::new(),
            config,
        };
        Ok(CloudHub { hub: Arc::new(hub) })
    }

    /// The handle for servers, counters, token and shutdown.
    pub fn handle(&self) -> HubHandle {
        HubHandle(self.hub.clone())
    }
}

impl Actor for CloudHub {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Context<Self>) {
        if self.hub.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let hub = self.hub.clone();
        let endpoint = hub.endpoint.clone();
        actix_rt::spawn(async move { hub.events.run(endpoint).await });
        actix_rt::spawn(self.hub.persister.clone().run());
        actix_rt::spawn(self.hub.clone().refresh_tokens());
        if let Some(client) = self.hub.kube.clone() {
            actix_rt::spawn(crate::revocation::watch_nodes(self.hub.clone(), client));
        }
    }
}

impl Handler<Message> for CloudHub {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Context<Self>) {
        self.hub.dispatch(msg);
    }
}

impl Module for CloudHub {
    fn name(&self) -> &str {
        names::CLOUDHUB
    }

    fn group(&self) -> &str {
        names::CLOUDHUB
    }

    fn enabled(&self) -> bool {
        self.hub.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Context<Self>) {
        // The bus drained our mailbox already; close sessions and servers in the background
        // (call HubHandle::shutdown first to wait for it).
        let handle = HubHandle(self.hub.clone());
        actix_rt::spawn(async move { handle.shutdown().await });
    }
}

/// The record to ensure for a downstream message its node could not take, so the sync loop delivers
/// it later: an ACK-class `resource` message with a resource version about an object with a UID,
/// that is neither a delete (the sync loop finds the object gone by itself) nor an answer to a
/// query.
fn offline_record(node: &str, msg: &Message) -> Option<(SyncKey, SyncSpec)> {
    if classify(msg) != Delivery::Ack
        || msg.route.group != names::GROUP_RESOURCE
        || msg.route.operation == beehive::constants::operation::RESPONSE
        || msg.header.resource_version.is_empty()
    {
        return None;
    }
    let info = object_info(msg)?;
    if is_delete(msg, Some(&info)) {
        return None;
    }
    let r = kubeedge_api::NodeResource::parse(&msg.route.resource).ok()?;
    if r.namespace.is_empty() {
        return None;
    }
    let name = if r.name.is_empty() { info.name } else { r.name };
    Some((
        SyncKey {
            node: node.to_owned(),
            namespace: r.namespace,
            uid: info.uid,
        },
        SyncSpec {
            api_version: info.api_version,
            kind: info.kind,
            name,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use beehive::Content;

    fn msg(resource: &str, op: &str, rv: &str, content: serde_json::Value) -> Message {
        Message::new()
            .with_route("edgecontroller", "resource", resource, op)
            .with_resource_version(rv)
            .with_content(Content::json(&content).unwrap())
    }

    fn cm(uid: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": uid}})
    }

    #[test]
    fn an_insert_for_an_absent_node_gets_a_record() {
        let (key, spec) = offline_record(
            "e1",
            &msg("node/e1/ns/configmap/c", "insert", "7", cm("u1")),
        )
        .unwrap();
        assert_eq!(
            (key.node.as_str(), key.namespace.as_str(), key.uid.as_str()),
            ("e1", "ns", "u1")
        );
        assert_eq!(
            (
                spec.api_version.as_str(),
                spec.kind.as_str(),
                spec.name.as_str()
            ),
            ("v1", "ConfigMap", "c")
        );
    }

    #[test]
    fn deletes_responses_no_ack_and_unversioned_messages_get_none() {
        let none = [
            msg("node/e1/ns/configmap/c", "delete", "7", cm("u1")),
            msg("node/e1/ns/configmap/c", "response", "7", cm("u1")),
            msg("node/e1/ns/configmap/c", "update", "", cm("u1")),
            msg(
                "node/e1/ns/configmap/c",
                "update",
                "7",
                serde_json::json!({"metadata": {}}),
            ),
            msg("node/e1/kube-node-lease/lease/e1", "update", "7", cm("u1")),
            msg(
                "node/e1/ns/configmap/c",
                "update",
                "7",
                serde_json::json!({"metadata": {"uid": "u", "deletionTimestamp": "2020-01-01T00:00:00Z"}}),
            ),
        ];
        for m in none {
            assert_eq!(offline_record("e1", &m), None, "{m}");
        }
    }
}
