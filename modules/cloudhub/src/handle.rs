//! The handle a composer keeps: key material, token, counters, the servers' start-up and the
//! graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pki::{CertAndKey, CertificateAuthority};
use tracing::{error, info, warn};

use crate::error::Result;
use crate::messages::{Stop, StopReason};
use crate::metrics::{CertServerStats, HubMetrics, HubStats, NodeStats};
use crate::state::Hub;
use crate::{certserver, listener, revocation};

/// Addresses the servers actually listen on (useful with port 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerAddrs {
    /// The WebSocket listener, when enabled.
    pub websocket: Option<SocketAddr>,
    /// The certificate server, when enabled.
    pub https: Option<SocketAddr>,
}

/// The handle a composer keeps: cheap to clone, `Send + Sync`.
#[derive(Clone, Debug)]
pub struct HubHandle(pub(crate) Arc<Hub>);

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

    /// Hub-wide counters (read from the hub's metrics).
    pub fn stats(&self) -> HubStats {
        self.0.metrics.stats()
    }

    /// The hub's metrics: [`HubMetrics::register`] adds them to a Prometheus registry.
    pub fn metrics(&self) -> &HubMetrics {
        &self.0.metrics
    }

    /// The revocation table the hub checks: a certificate for node `N` dated at or before
    /// `N`'s deletion is refused. Clones share the table, so another listener that accepts
    /// edge certificates (the tunnel) stays current by calling [`pki::Revocations::check`]
    /// or wrapping its verifier with [`pki::tls::revocation_checking_verifier`].
    pub fn revocations(&self) -> pki::Revocations {
        self.0.revocations.clone()
    }

    /// Resolves once the revocation table is complete: with Kubernetes, the stored
    /// revocations and edge nodes are read and the first full Node list judged (until then
    /// every edge certificate is refused); without, at once.
    pub async fn wait_revocations_loaded(&self) {
        while !self.0.revocations.is_loaded() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Revokes every certificate issued to `node` so far and closes its session, as a Node
    /// deletion does (with Kubernetes the hub watches Nodes and calls this itself). With
    /// Kubernetes the revocation is also stored in ConfigMap `kubeedge/revokedcerts`;
    /// without, it lasts as long as this process.
    pub async fn revoke_node(&self, node: &str) {
        revocation::revoke(&self.0, node).await;
    }

    /// Admission gauges and counters of each started listener (`cloudhub_websocket`,
    /// `cloudhub_https`): open, authenticating, accepted, refused per reason, timed out.
    /// Empty before [`start_servers`](Self::start_servers).
    pub fn listener_stats(&self) -> Vec<kubeedge_api::listener::ListenerStats> {
        let servers = self.0.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers.gates.iter().map(|g| g.stats()).collect()
    }

    /// Request counters of the certificate server (port 10002).
    pub fn cert_server_stats(&self) -> CertServerStats {
        self.0.metrics.cert_server_stats()
    }

    /// Starts the enabled listeners on the running actix system (call from it) and returns
    /// their addresses. QUIC is not implemented: enabling it is logged. The unix socket
    /// (`unixsocket`) is served by the crate `udsserver`, which the composition starts.
    pub fn start_servers(&self) -> Result<ServerAddrs> {
        let hub = &self.0;
        let c = &hub.config;
        let mut addrs = ServerAddrs::default();
        if c.quic.enable {
            error!(
                "quic is enabled but not supported (gQUIC, unauthenticated); edges must use websocket"
            );
        }
        let server = &hub.material.server;
        // Both listeners share one actix server: one accept thread and `workers` worker
        // threads (each its own runtime, epoll and eventfd) for both ports. The certificate
        // server's signing then also spreads over the workers.
        let mut builder = actix_server::Server::build()
            .workers(listener::workers(c))
            .backlog(4096)
            // The gates bound connections (maxConnections and the process's open-file limit)
            // and refuse the rest with a close; actix's per-worker cap would instead stop
            // accepting and leave edges waiting in the backlog.
            .max_concurrent_connections(1 << 20)
            .disable_signals()
            .shutdown_timeout(5);
        let mut gates = Vec::new();
        if c.https.enable {
            let tls = pki::tls::server_config_optional_client(&server.cert_der, &server.key_der)?;
            let (b, addr, gate) = certserver::listen(builder, hub.clone(), tls)?;
            builder = b;
            gates.push(gate);
            addrs.https = Some(addr);
        }
        if c.websocket.enable {
            let tls = pki::tls::server_config_mutual_revocable(
                hub.ca().cert_der(),
                &server.cert_der,
                &server.key_der,
                &hub.revocations,
            )?;
            let (b, addr, gate) = listener::listen(builder, hub.clone(), tls)?;
            builder = b;
            gates.push(gate);
            addrs.websocket = Some(addr);
        }
        if !gates.is_empty() {
            let running = builder.run();
            let mut servers = hub.servers.lock().unwrap_or_else(|e| e.into_inner());
            servers.server = Some(running.handle());
            servers.gates.extend(gates);
            actix_rt::spawn(running);
        }
        Ok(addrs)
    }

    /// Graceful shutdown: stop accepting connections, let every session write what it has
    /// queued and close (up to 5 s), stop the servers, write pending ObjectSync records
    /// (up to 5 s), end the background tasks (up to 5 s). Calling it again (or while it runs,
    /// as the module's own `shutdown` hook starts it) waits for that one shutdown to finish.
    pub async fn shutdown(&self) {
        let hub = &self.0;
        if !hub.registry.close() {
            // The bus stops the module first, whose hook runs this in the background: a
            // composer that returns from here must find the records written.
            hub.stopped.cancelled().await;
            return;
        }
        info!(nodes = hub.registry.len(), "cloudhub shutting down");
        hub.stop.cancel();
        let server = {
            let mut s = hub.servers.lock().unwrap_or_else(|e| e.into_inner());
            s.server.take()
        };
        if let Some(server) = &server {
            server.pause().await;
        }
        for (_, entry) in hub.registry.all() {
            entry.session.stop.do_send(Stop(StopReason::Shutdown));
        }
        // Each session actor and connection task holds a place in the tracker until it ends.
        hub.sessions.close();
        if tokio::time::timeout(Duration::from_secs(5), hub.sessions.wait())
            .await
            .is_err()
        {
            warn!(
                sessions = hub.registry.len(),
                connections = hub.sessions.len(),
                "sessions did not close within 5 s"
            );
        }
        if let Some(server) = server {
            server.stop(true).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), hub.persister.flushed()).await;
        hub.done.cancel();
        hub.tasks.close();
        if tokio::time::timeout(Duration::from_secs(5), hub.tasks.wait())
            .await
            .is_err()
        {
            warn!(
                tasks = hub.tasks.len(),
                "background tasks did not end within 5 s"
            );
        }
        hub.stopped.cancel();
        info!("cloudhub stopped");
    }

    /// Waits until every acknowledgement so far is written to the ObjectSync store.
    pub async fn flush_records(&self) {
        self.0.persister.flushed().await;
    }
}
