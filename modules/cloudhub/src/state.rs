//! The state every session, the module and the servers share: configuration, the bus
//! endpoint, the session registry, the record writer, counters, key material, the token.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use beehive::{Endpoint, Message};
use kubeedge_api::reliablesyncs::RecordCache;
use kubeedge_api::replicas::Ownership;
use pki::{CertificateAuthority, SignPolicy};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::CloudHubConfig;
use crate::events::Events;
use crate::generation::GenerationReads;
use crate::material::Material;
use crate::metrics::{DropReason, HubMetrics, NodeCounters};
use crate::persist::Persister;
use crate::registry::Registry;
use crate::sync_answers::SyncAnswers;

/// The running listeners.
#[derive(Default)]
pub(crate) struct Servers {
    /// The one actix server of every listener (WebSocket and certificate server): one accept
    /// thread and one set of workers, not one of each per port.
    pub(crate) server: Option<actix_server::ServerHandle>,
    /// Admission gates of the started listeners (their stats are `/metrics` gauges).
    pub(crate) gates: Vec<Arc<kubeedge_api::listener::Gate>>,
}

/// The state every session, the module and the servers share.
pub(crate) struct Hub {
    pub(crate) config: CloudHubConfig,
    /// The hub's own endpoint: its node events and downstream bookkeeping.
    pub(crate) endpoint: Endpoint,
    /// Everything an edge sent goes on the bus through this endpoint (sender
    /// `cloudhub/edge`), so no module mistakes it for the hub's or a cloud module's.
    pub(crate) edge: Endpoint,
    pub(crate) registry: Registry,
    /// Which node each synchronous request went to: only that node may answer it.
    pub(crate) sync_answers: SyncAnswers,
    pub(crate) persister: Arc<Persister>,
    pub(crate) events: Events,
    pub(crate) kube: Option<kube::Client>,
    pub(crate) metrics: Arc<HubMetrics>,
    /// Node certificates revoked by deletion; checked at every TLS handshake.
    pub(crate) revocations: pki::Revocations,
    pub(crate) ownership: Ownership,
    /// The records as another module's watch keeps them (see `HubOptions::records`).
    pub(crate) records: Option<RecordCache>,
    pub(crate) material: Material,
    pub(crate) sign_policy: SignPolicy,
    pub(crate) token: RwLock<String>,
    /// The token generation `token` was issued under (see `material::token_generation`).
    pub(crate) token_generation: RwLock<String>,
    /// The certificate server's reads of the stored token generation.
    pub(crate) generation_reads: GenerationReads,
    pub(crate) kube_ca_pem: RwLock<String>,
    pub(crate) token_refresh: Duration,
    pub(crate) servers: Mutex<Servers>,
    /// The background tasks were started (once, with the module).
    pub(crate) started: AtomicBool,
    /// Cancelled when shutdown begins: background loops end, sessions are being closed.
    pub(crate) stop: CancellationToken,
    /// Cancelled once shutdown has closed every session and flushed the records: the
    /// record writer and the event publisher end.
    pub(crate) done: CancellationToken,
    /// Cancelled when shutdown has finished, so a second caller returns only then.
    pub(crate) stopped: CancellationToken,
    /// Session actors and their connection tasks: shutdown waits for them.
    pub(crate) sessions: TaskTracker,
    /// The hub's background tasks (events, record writer, token refresh, Node watch).
    pub(crate) tasks: TaskTracker,
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
        self.metrics.count_drop(node, reason, n);
    }

    /// For a message its node did not take (away, queue full, session
    /// ended): the record a first-seen object gets (status `"0"`; an existing record is left
    /// alone) is what makes the sync loop send it once the node can take it. True when the
    /// message is one the sync loop redelivers (an ACK-class object with a UID).
    pub(crate) fn record_offline(&self, node: &str, msg: &Message) -> bool {
        let recorded = self.persister.record_undelivered(node, msg);
        // A node that connected meanwhile (or has a session with a full queue) must not find
        // its record behind the backlog: its connect moved only what was queued before it.
        if recorded && self.registry.get(node).is_some() {
            self.persister.node_connected(node);
        }
        recorded
    }
}
