//! Revoking a deleted node's certificates, durably: the table of node name → revoked-at
//! lives in memory ([`pki::Revocations`], checked at every TLS handshake and by the
//! certificate server) and, with Kubernetes, in ConfigMap `kubeedge/revokedcerts` (key: node
//! name, value: RFC 3339 time), read at start and every minute, so it survives restarts and
//! is shared by replicas.
//!
//! What counts as a deletion: every Node is watched (metadata only), so an edge Node that
//! lost its edge label is still seen. A Node that is deleted, that gets a
//! `deletionTimestamp` (a finalizer may hold it for ever), or that is missing from the first
//! full list after a start although the edge-node table ([`crate::edgenodes`]) remembers it
//! (deleted while no cloudcore ran), has its certificates revoked. Until the stored tables
//! are read and that first list is judged, no edge certificate is accepted.
//!
//! Why a date per name and not a list of serials: deleting a Node must revoke every
//! certificate issued to that name before, including ones this process never saw (other
//! replicas, earlier runs, a Go cloudcore); a date per name covers them all, costs one entry
//! per deleted node, and needs nothing recorded at issuance. Entries are pruned once every
//! certificate they can match has expired (`edgeCertSigningDuration` days plus a day), which
//! bounds the ConfigMap by the nodes deleted within one certificate lifetime (~60 bytes each,
//! so about 15,000 before the 1 MiB object limit). Writers touch one key each (JSON merge
//! patch), so replicas never overwrite each other's entries; removal replaces the ConfigMap at the
//! resourceVersion it read, so a newer revocation of the same name is never pruned.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, PartialObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kubeedge_api::names::EDGE_NODE_LABEL;
use tracing::{error, info, warn};

use crate::edgenodes::{EdgeNodes, Incarnation};
use crate::error::Result;
use crate::kv;
use crate::material::{NAMESPACE, is_status};
use crate::messages::{Stop, StopReason};
use crate::state::Hub;

/// The ConfigMap (namespace `kubeedge`) holding node name → revoked-at (RFC 3339).
pub const REVOKED_CERTS: &str = "revokedcerts";
/// How often the ConfigMap is re-read (other replicas' revocations), unwritten entries are
/// written again, and expired entries are pruned.
const RESYNC: Duration = Duration::from_secs(60);
/// How often connected nodes are checked against the edge-node table.
const SESSION_CHECK: Duration = Duration::from_secs(2);
/// Retry period while the stored table has never been read (edges are refused meanwhile).
const RETRY_UNLOADED: Duration = Duration::from_secs(2);

fn api(client: &kube::Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// Reads the stored table (empty when the ConfigMap does not exist). Values that do not
/// parse as a time are skipped with a warning.
pub(crate) async fn read(client: &kube::Client) -> Result<BTreeMap<String, i64>> {
    let mut out = BTreeMap::new();
    for (node, value) in kv::read(client, REVOKED_CERTS).await? {
        match pki::parse_time(&value) {
            Some(t) => {
                out.insert(node, t);
            }
            None => {
                warn!(node = %node, value = %value, "{NAMESPACE}/{REVOKED_CERTS}: unreadable time, entry ignored")
            }
        }
    }
    Ok(out)
}

/// Loads the stored table into `revocations` (later times win); returns what was stored.
pub(crate) async fn load(
    client: &kube::Client,
    revocations: &pki::Revocations,
) -> Result<BTreeMap<String, i64>> {
    let stored = read(client).await?;
    for (node, t) in &stored {
        revocations.revoke(node, *t);
    }
    Ok(stored)
}

/// Writes one entry (creates the namespace and ConfigMap when missing).
pub(crate) async fn store(client: &kube::Client, node: &str, revoked_at: i64) -> Result<()> {
    kv::set(client, REVOKED_CERTS, node, Some(&pki::rfc3339(revoked_at))).await
}

/// Removes `node`'s entry if it still holds `revoked_at` (a replace guarded by the
/// ConfigMap's resourceVersion: a concurrent change makes it a no-op until the next resync).
async fn remove(client: &kube::Client, node: &str, revoked_at: i64) -> Result<()> {
    let cms = api(client);
    let Some(mut cm) = cms.get_opt(REVOKED_CERTS).await? else {
        return Ok(());
    };
    let data = cm.data.get_or_insert_with(BTreeMap::new);
    if data.get(node).and_then(|v| pki::parse_time(v)) != Some(revoked_at) {
        return Ok(());
    }
    data.remove(node);
    match cms
        .replace(REVOKED_CERTS, &PostParams::default(), &cm)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Revokes every certificate issued to `node` until now, closes its session, and (with
/// Kubernetes) records the revocation in ConfigMap `kubeedge/revokedcerts`. The
/// in-memory table is updated first, so no new handshake with an old certificate
/// succeeds once this starts; a failed write is retried by the resync loop.
pub(crate) async fn revoke(hub: &Hub, node: &str) {
    revoke_at(hub, node, pki::unix_now(), "node deleted").await;
}

/// Revokes the certificates of `node` dated at or before `revoked_at` ([`revoke`] with a
/// time, for a deletion noticed late), closing its session when its certificate is among
/// them; `why` goes to the log.
async fn revoke_at(hub: &Hub, node: &str, revoked_at: i64, why: &str) {
    if node.is_empty() {
        return;
    }
    hub.revocations.revoke(node, revoked_at);
    let session = hub
        .registry
        .get(node)
        .filter(|e| e.issued.is_none_or(|t| t <= revoked_at));
    warn!(node, revoked = %pki::rfc3339(revoked_at), connected = session.is_some(), reason = why, "node's certificates revoked");
    if let Some(entry) = session {
        entry.session.stop.do_send(Stop(StopReason::NodeDeleted));
    }
    hub.registry.forget_counters(node);
    if let Some(client) = &hub.kube
        && let Err(e) = store(client, node, revoked_at).await
    {
        hub.metrics.revocation_writes_failed.inc();
        error!(node, error = %e, "writing the revocation failed; retried by the resync loop");
    }
}

/// One resync: merge the stored table, write back entries only this process holds (a
/// failed earlier write), prune entries older than `horizon`.
async fn resync(hub: &Hub, client: &kube::Client, horizon: i64) -> Result<()> {
    let stored = load(client, &hub.revocations).await?;
    let now = pki::unix_now();
    for (node, t) in hub.revocations.snapshot() {
        if t + horizon < now {
            remove(client, &node, t).await?;
            hub.revocations.forget(&node, t);
            info!(node = %node, revoked = %pki::rfc3339(t), "revocation expired with the certificates it covered");
        } else if stored.get(&node).is_none_or(|s| *s < t) {
            store(client, &node, t).await?;
        }
    }
    Ok(())
}

/// Whether `name` is an edge node: its Node is edge-labelled, it has a session here, or the
/// edge-node table remembers it. Only edge nodes' deletions are recorded, so cloud nodes
/// coming and going never fill the ConfigMap.
fn is_edge(hub: &Hub, seen: &EdgeNodes, meta: &kube::api::ObjectMeta, name: &str) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(EDGE_NODE_LABEL))
        || seen.get(name).is_some()
        || hub.registry.get(name).is_some()
}

/// What the watch keeps besides the hub: the edge-node table, every Node's incarnation (a
/// name and a UID each), the UIDs whose `deletionTimestamp` was already turned into a
/// revocation, the listing in progress.
struct NodeWatch {
    hub: Arc<Hub>,
    client: kube::Client,
    seen: EdgeNodes,
    all: HashMap<String, Incarnation>,
    terminating: HashSet<String>,
    listing: Option<HashMap<String, Incarnation>>,
}

impl NodeWatch {
    /// A Node was listed, created or changed.
    async fn observed(&mut self, node: &PartialObjectMeta<Node>) {
        let meta = &node.metadata;
        let name = meta.name.clone().unwrap_or_default();
        let Some(inc) = Incarnation::of(meta) else {
            return;
        };
        if let Some(l) = self.listing.as_mut() {
            l.insert(name.clone(), inc.clone());
        }
        self.all.insert(name.clone(), inc.clone());
        if !is_edge(&self.hub, &self.seen, meta, &name) {
            return;
        }
        if meta.deletion_timestamp.is_some() {
            // Being deleted (held by a finalizer, perhaps for ever): revoked now, once per
            // incarnation.
            if self.terminating.insert(inc.uid.clone()) {
                revoke_at(&self.hub, &name, pki::unix_now(), "node being deleted").await;
            }
            return;
        }
        match self.seen.get(&name).cloned() {
            // Another incarnation than the one remembered: the old one was deleted unseen. A
            // list in progress judges that when it ends; outside one, judge it now.
            Some(known) if known.uid != inc.uid => {
                if self.listing.is_none() {
                    self.recreated(&name, &known, &inc).await;
                    self.flush().await;
                }
            }
            // A list in progress is written at its end, in a few requests.
            _ if self.listing.is_some() => self.seen.note(&name, inc),
            _ => {
                if !self.seen.remember(&self.client, &name, inc).await {
                    self.hub.metrics.revocation_writes_failed.inc();
                }
            }
        }
    }

    /// Writes what [`EdgeNodes::note`] and its kin left unwritten.
    async fn flush(&mut self) {
        if self.seen.flush(&self.client).await > 0 {
            self.hub.metrics.revocation_writes_failed.inc();
        }
    }

    /// Whether a revocation made after `known` was created already covers it.
    fn handled(&self, name: &str, known: &Incarnation) -> bool {
        self.hub
            .revocations
            .revoked_at(name)
            .is_some_and(|t| t >= known.created)
    }

    /// `name` exists as `now` while `known` was remembered: certificates issued before the
    /// new Node existed belong to the old one (a new edge gets its certificate before it
    /// registers its Node only through a cloudcore, which revoked the old one first).
    async fn recreated(&mut self, name: &str, known: &Incarnation, now: &Incarnation) {
        if !self.handled(name, known) {
            revoke_at(
                &self.hub,
                name,
                now.created - 1,
                "node re-created while not watched",
            )
            .await;
        }
        self.seen.note(name, now.clone());
    }

    /// Remembers every node with a session here whose Node exists but is not remembered yet
    /// (a node without the edge label whose Node did not change while it was connected).
    /// Failed writes wait for the resync rather than being retried at every check.
    async fn remember_connected(&mut self) {
        let mut noted = false;
        for name in self.hub.registry.nodes() {
            if self.seen.get(&name).is_some() {
                continue;
            }
            let Some(inc) = self.all.get(&name).cloned() else {
                continue;
            };
            self.seen.note(&name, inc);
            noted = true;
        }
        if noted {
            self.flush().await;
        }
    }

    /// A Node is gone.
    async fn deleted(&mut self, node: &PartialObjectMeta<Node>) {
        let meta = &node.metadata;
        let name = meta.name.clone().unwrap_or_default();
        if let Some(uid) = &meta.uid {
            self.terminating.remove(uid);
        }
        self.all.remove(&name);
        if !is_edge(&self.hub, &self.seen, meta, &name) {
            return;
        }
        revoke(&self.hub, &name).await;
        if !self.seen.forget(&self.client, &name).await {
            self.hub.metrics.revocation_writes_failed.inc();
        }
    }

    /// A full list ended: a remembered node it lacks was deleted while nobody watched, and one
    /// it has under another UID was deleted and created again. Each is revoked unless a
    /// revocation made after its remembered incarnation was created already covers it.
    async fn listed(&mut self) {
        let Some(fresh) = self.listing.take() else {
            return;
        };
        self.all.clone_from(&fresh);
        for (name, known) in self.seen.snapshot() {
            match fresh.get(&name) {
                None => {
                    if !self.handled(&name, &known) {
                        revoke_at(
                            &self.hub,
                            &name,
                            pki::unix_now(),
                            "node deleted while not watched",
                        )
                        .await;
                    }
                    self.seen.note_forgotten(&name);
                }
                Some(now) if now.uid != known.uid => self.recreated(&name, &known, now).await,
                Some(_) => {}
            }
        }
        self.flush().await;
    }
}

/// Watches every Node (metadata only) and revokes the certificates of each edge node that is
/// deleted or being deleted, or that vanished or was re-created while nobody watched (see the
/// module documentation); every [`RESYNC`] re-reads and prunes the ConfigMap. Marks the
/// revocation table loaded once the stored tables were read and the first list judged. Runs
/// until the hub stops.
pub(crate) async fn watch_nodes(hub: Arc<Hub>, client: kube::Client) {
    let horizon = i64::from(hub.config.edge_cert_signing_duration.max(1)) * 86_400 + 86_400;
    let seen = loop {
        match EdgeNodes::load(&client).await {
            Ok(seen) => break seen,
            Err(e) => {
                warn!(error = %e, "kubeedge/{}: read failed; edge certificates are refused until it is read", crate::edgenodes::EDGE_NODES);
                tokio::select! {
                    () = hub.stop.cancelled() => return,
                    _ = tokio::time::sleep(RETRY_UNLOADED) => {}
                }
            }
        }
    };
    let mut watch = NodeWatch {
        hub: hub.clone(),
        client: client.clone(),
        seen,
        all: HashMap::new(),
        terminating: HashSet::new(),
        listing: None,
    };
    let mut sessions = tokio::time::interval(SESSION_CHECK);
    sessions.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let nodes = Api::<PartialObjectMeta<Node>>::all(client.clone());
    let mut events = watcher::watcher(nodes, watcher::Config::default())
        .default_backoff()
        .boxed();
    let (mut stored_read, mut listed) = (false, false);
    let mut next = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = hub.stop.cancelled() => return,
            _ = sessions.tick() => watch.remember_connected().await,
            _ = tokio::time::sleep_until(next) => {
                match resync(&hub, &client, horizon).await {
                    Ok(()) => stored_read = true,
                    Err(e) => warn!(error = %e, "{NAMESPACE}/{REVOKED_CERTS}: resync failed; retrying"),
                }
                watch.flush().await;
                let period = if hub.revocations.is_loaded() { RESYNC } else { RETRY_UNLOADED };
                next = tokio::time::Instant::now() + period;
            }
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(Event::Apply(n) | Event::InitApply(n)) => watch.observed(&n).await,
                    Ok(Event::Delete(n)) => watch.deleted(&n).await,
                    Ok(Event::Init) => watch.listing = Some(HashMap::new()),
                    Ok(Event::InitDone) => {
                        watch.listed().await;
                        listed = true;
                    }
                    Err(e) => warn!(error = %e, "node watch failed; retrying with back-off (deletions meanwhile are found by the next list)"),
                }
            }
        }
        if stored_read && listed && !hub.revocations.is_loaded() {
            hub.revocations.mark_loaded();
            info!(
                revoked_nodes = hub.revocations.len(),
                "certificate revocations loaded and every Node listed"
            );
        }
    }
}
