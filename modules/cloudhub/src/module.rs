//! The `cloudhub` module on the bus: built from the configuration (key material, token,
//! revocations), it routes each downstream message to its node's session and runs the hub's
//! background tasks (events, record writer, token refresh, Node watch).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Backoff, Endpoint, Message, Module};
use kubeedge_api::names;
use kubeedge_api::reliablesyncs::RecordCache;
use kubeedge_api::replicas::Ownership;
use pki::{ExtKeyUsage, SignPolicy};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::classify::legacy_drop;
use crate::config::CloudHubConfig;
use crate::error::{Error, Result};
use crate::events::Events;
use crate::handle::HubHandle;
use crate::material;
use crate::messages::{Deliver, Stop, StopReason};
use crate::metrics::{DropReason, HubMetrics};
use crate::persist::Persister;
use crate::registry::Registry;
use crate::revocation;
use crate::state::{Hub, Servers};
use crate::store::ObjectSyncStore;

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
    /// The acknowledgement records as a watch in this process keeps them
    /// (`SyncController::with_record_cache`). With it, the first message about an object is
    /// written to the edge at once: whether the edge acknowledged a version before is read
    /// here instead of from the API server, and the object's record is created beside the
    /// write. Without it (or while it has not listed) the record is read, and created, before
    /// the first write.
    pub records: Option<RecordCache>,
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
        let generation = match &kube {
            Some(client) => material::token_generation(client)
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %e, "reading the token generation failed; the refresh loop retries");
                    String::new()
                }),
            None => String::new(),
        };
        let token =
            pki::create_token_of_generation(&material.ca, config.token_lifetime(), &generation);
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
                // Fail closed: until the stored revocations are read and every Node has been
                // listed (a node deleted while no cloudcore ran is revoked then), no edge
                // certificate is accepted; the Node watch marks the table loaded.
                let revocations = pki::Revocations::pending();
                if let Err(e) = revocation::load(client, &revocations).await {
                    error!(
                        error = %e,
                        "reading certificate revocations failed; edge certificates are refused until they are read"
                    );
                }
                revocations
            }
        };
        let token_refresh = options
            .token_refresh
            .unwrap_or_else(|| config.token_refresh());
        let metrics = Arc::new(HubMetrics::new(
            revocations.clone(),
            config.per_node_metrics,
        ));
        let hub = Hub {
            edge: endpoint.sub(names::EDGE_RELAY_ROLE),
            endpoint,
            registry: Registry::new(metrics.clone()),
            sync_answers: Default::default(),
            persister: Persister::new(
                store,
                metrics.records_written.clone(),
                metrics.records_failed.clone(),
            ),
            events: Events::new(),
            kube,
            metrics,
            revocations,
            ownership: options
                .ownership
                .unwrap_or_else(|| Ownership::new(String::new())),
            records: options.records,
            material,
            sign_policy,
            token: RwLock::new(token),
            token_generation: RwLock::new(generation),
            generation_reads: Default::default(),
            kube_ca_pem: RwLock::new(options.kube_ca_pem),
            token_refresh,
            servers: Mutex::new(Servers::default()),
            started: AtomicBool::new(false),
            stop: CancellationToken::new(),
            done: CancellationToken::new(),
            stopped: CancellationToken::new(),
            sessions: TaskTracker::new(),
            tasks: TaskTracker::new(),
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
        let hub = &self.hub;
        let tasks = &hub.tasks;
        let events = hub.clone();
        let (endpoint, done) = (hub.endpoint.clone(), hub.done.clone());
        actix_rt::spawn(tasks.track_future(async move { events.events.run(endpoint, done).await }));
        actix_rt::spawn(tasks.track_future(hub.persister.clone().run(hub.done.clone())));
        actix_rt::spawn(tasks.track_future(refresh_tokens(hub.clone())));
        if let Some(client) = hub.kube.clone() {
            actix_rt::spawn(tasks.track_future(revocation::watch_nodes(hub.clone(), client)));
        }
        actix_rt::spawn(tasks.track_future(close_revoked_sessions(hub.clone())));
    }
}

impl Handler<Message> for CloudHub {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Context<Self>) {
        dispatch(&self.hub, msg);
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
        // (HubHandle::shutdown, called before or after this, waits for it to finish).
        let handle = HubHandle(self.hub.clone());
        actix_rt::spawn(async move { handle.shutdown().await });
    }
}

/// Routes one downstream message to its node's session (the node after `node/` in the
/// resource). Never blocks: a node without a session here, or with a full mailbox, does not get
/// the message (counted, and an ACK-class object keeps a record the sync loop redelivers from).
fn dispatch(hub: &Arc<Hub>, msg: Message) {
    let Some(node) = kubeedge_api::node_of(&msg.route.resource).map(str::to_owned) else {
        hub.metrics.dropped_no_node.inc();
        hub.count_drop(None, DropReason::Malformed, 1);
        warn!(msg = %msg, "downstream message without node id dropped");
        return;
    };
    let node = node.as_str();
    if legacy_drop(&msg) {
        let known = hub.registry.known_counters(node);
        hub.count_drop(known.as_deref(), DropReason::Refused, 1);
        debug!(node, msg = %msg, "legacy edgemgr message filtered");
        return;
    }
    let Some(entry) = hub.registry.get(node) else {
        offline(hub, node, &msg);
        return;
    };
    if msg.header.sync {
        // A caller waits for this node's answer (and no other node's).
        hub.sync_answers
            .sent(&msg.header.id, node, |id| hub.endpoint.is_waiting(id));
    }
    let deliver = Deliver::new(
        msg,
        hub.persister.clone(),
        hub.metrics.clone(),
        entry.counters.clone(),
    );
    if let Err(e) = entry.session.deliver.try_send(deliver) {
        match e {
            actix::dev::SendError::Full(deliver) => {
                let msg = deliver.into_inner();
                hub.metrics.dropped_full.inc();
                hub.count_drop(Some(&entry.counters), DropReason::QueueFull, 1);
                let recorded = hub.record_offline(node, &msg);
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
                offline(hub, node, &msg);
            }
        }
    }
}

/// A message for a node without a live session here. Its record is written here unless
/// another replica holds the node: only the holder writes a node's records.
fn offline(hub: &Hub, node: &str, msg: &Message) {
    if hub.ownership.held_elsewhere(node) {
        hub.metrics.held_elsewhere.inc();
        debug!(node, msg = %msg, "node held by another replica, message left to it");
        return;
    }
    hub.metrics.dropped_offline.inc();
    let known = hub.registry.known_counters(node);
    hub.count_drop(known.as_deref(), DropReason::Offline, 1);
    debug!(node, msg = %msg, "node not connected here, message dropped");
    hub.record_offline(node, msg);
}

/// How often the revocation table is looked at for changes.
const REVOCATION_POLL: Duration = Duration::from_secs(1);

/// Closes every session whose certificate a revocation now covers, within
/// [`REVOCATION_POLL`] of the table changing: a revocation another replica recorded (read at
/// the next resync) must end a session here too, not only the next handshake. Runs until the
/// hub stops.
async fn close_revoked_sessions(hub: Arc<Hub>) {
    let mut seen = hub.revocations.generation();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(REVOCATION_POLL) => {}
            () = hub.stop.cancelled() => return,
        }
        let now = hub.revocations.generation();
        if now == seen {
            continue;
        }
        seen = now;
        for (node, entry) in hub.registry.all() {
            if let Some(issued) = entry.issued
                && hub.revocations.covers(&node, issued)
            {
                warn!(node = %node, "session closed: the node's certificate is revoked");
                entry.session.stop.do_send(Stop(StopReason::NodeDeleted));
            }
        }
    }
}

/// How often the token generation is read (an operator's bump takes effect within this).
const TOKEN_GENERATION_POLL: Duration = Duration::from_secs(10);
/// The wait after a refreshed token could not be stored: 2 s doubling to 256 s (and never
/// longer than the refresh period itself).
const TOKEN_STORE_RETRY: Backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(256));

/// Replaces the bootstrap token every `tokenRefreshDuration`, and at once when the token
/// generation changed (every older token is then refused by the certificate server), until
/// the hub stops.
async fn refresh_tokens(hub: Arc<Hub>) {
    let mut wait = hub.token_refresh;
    let mut due = tokio::time::Instant::now() + wait;
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = tokio::time::sleep(TOKEN_GENERATION_POLL), if hub.kube.is_some() => {
                let Some(client) = &hub.kube else { continue };
                let Ok(generation) = material::token_generation(client).await else {
                    continue;
                };
                let current = hub.token_generation.read().unwrap_or_else(|e| e.into_inner()).clone();
                if generation == current {
                    continue;
                }
                warn!(from = %current, to = %generation, "token generation changed: earlier bootstrap tokens are refused, a new token is issued");
                *hub.token_generation.write().unwrap_or_else(|e| e.into_inner()) = generation;
            }
            () = hub.stop.cancelled() => return,
        }
        let generation = hub
            .token_generation
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let token =
            pki::create_token_of_generation(hub.ca(), hub.config.token_lifetime(), &generation);
        *hub.token.write().unwrap_or_else(|e| e.into_inner()) = token.clone();
        match material::store_token(&hub.config, hub.kube.as_ref(), &token).await {
            Ok(()) => {
                failures = 0;
                wait = hub.token_refresh;
                info!("bootstrap token refreshed");
            }
            Err(e) => {
                // Keep trying: KubeEdge's refresh stops for good after one failure and tokens
                // expire.
                failures = failures.saturating_add(1);
                wait = TOKEN_STORE_RETRY.delay(failures).min(hub.token_refresh);
                error!(error = %e, retry_in_s = wait.as_secs(), "storing the refreshed token failed");
            }
        }
        due = tokio::time::Instant::now() + wait;
    }
}
