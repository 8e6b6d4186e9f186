//! Revoking a deleted node's certificates, durably: the table of node name → revoked-at
//! lives in memory ([`pki::Revocations`], checked at every TLS handshake and by the
//! certificate server) and, with Kubernetes, in ConfigMap `kubeedge/revokedcerts` (key: node
//! name, value: RFC 3339 time), read at start and every minute, so it survives restarts and
//! is shared by replicas.
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

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ObjectMeta, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tracing::{error, info, warn};

use crate::error::Result;
use crate::material::{NAMESPACE, ensure_namespace, is_status};
use crate::messages::{Stop, StopReason};
use crate::state::Hub;

/// The ConfigMap (namespace `kubeedge`) holding node name → revoked-at (RFC 3339).
pub const REVOKED_CERTS: &str = "revokedcerts";
/// The label edgecore puts on the Node it registers; only Nodes carrying it are watched, so
/// cloud nodes coming and going never fill the ConfigMap.
pub const EDGE_NODE_LABEL: &str = "node-role.kubernetes.io/edge";
/// How often the ConfigMap is re-read (other replicas' revocations), unwritten entries are
/// written again, and expired entries are pruned.
const RESYNC: Duration = Duration::from_secs(60);
/// Retry period while the stored table has never been read (edges are refused meanwhile).
const RETRY_UNLOADED: Duration = Duration::from_secs(2);

fn api(client: &kube::Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// Reads the stored table (empty when the ConfigMap does not exist). Values that do not
/// parse as a time are skipped with a warning.
pub(crate) async fn read(client: &kube::Client) -> Result<BTreeMap<String, i64>> {
    let Some(cm) = api(client).get_opt(REVOKED_CERTS).await? else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for (node, value) in cm.data.unwrap_or_default() {
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
    let value = pki::rfc3339(revoked_at);
    let patch = serde_json::json!({ "data": { node: value } });
    let cms = api(client);
    for _ in 0..3 {
        match cms
            .patch(
                REVOKED_CERTS,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
        ensure_namespace(client).await?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(REVOKED_CERTS.into()),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(node.to_owned(), value.clone())])),
            ..ConfigMap::default()
        };
        match cms.create(&PostParams::default(), &cm).await {
            Ok(_) => return Ok(()),
            // Created concurrently by another writer: patch it.
            Err(e) if is_status(&e, 409) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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
    if node.is_empty() {
        return;
    }
    let revoked_at = pki::unix_now();
    hub.revocations.revoke(node, revoked_at);
    let session = hub.registry.get(node);
    warn!(node, revoked = %pki::rfc3339(revoked_at), connected = session.is_some(), "node deleted: its certificates are revoked");
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
    if !hub.revocations.is_loaded() {
        hub.revocations.mark_loaded();
        info!(
            revoked_nodes = stored.len(),
            "certificate revocations loaded"
        );
    }
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

/// Revokes `name` if its Node is really gone. A label-selected watch also reports a Node
/// that merely lost [`EDGE_NODE_LABEL`] as deleted; that one is left alone. When the API
/// server cannot tell, the node is revoked (the watch said it was deleted).
async fn confirm_deleted(hub: &Hub, nodes: &Api<Node>, name: &str) {
    match nodes.get_metadata_opt(name).await {
        Ok(Some(_)) => {
            info!(node = %name, "node no longer labelled {EDGE_NODE_LABEL}; its certificates stay valid")
        }
        Ok(None) => revoke(hub, name).await,
        Err(e) => {
            warn!(node = %name, error = %e, "cannot confirm the node's deletion; revoking anyway");
            revoke(hub, name).await;
        }
    }
}

/// Watches edge Nodes (label [`EDGE_NODE_LABEL`], metadata only) and revokes the
/// certificates of each deleted one ([`revoke`]); every [`RESYNC`] re-reads and
/// prunes the ConfigMap. Runs until the hub stops. A re-list after a watch gap reports nodes
/// that vanished meanwhile as deleted; deletions while no cloudcore was running are not seen.
pub(crate) async fn watch_nodes(hub: Arc<Hub>, client: kube::Client) {
    let horizon = i64::from(hub.config.edge_cert_signing_duration.max(1)) * 86_400 + 86_400;
    let full = Api::<Node>::all(client.clone());
    let nodes = Api::<PartialObjectMeta<Node>>::all(client.clone());
    let mut events = watcher::watcher(nodes, watcher::Config::default().labels(EDGE_NODE_LABEL))
        .default_backoff()
        .boxed();
    let mut known: HashSet<String> = HashSet::new();
    let mut listing: Option<HashSet<String>> = None;
    let mut next = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = hub.stop.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {
                if let Err(e) = resync(&hub, &client, horizon).await {
                    warn!(error = %e, "{NAMESPACE}/{REVOKED_CERTS}: resync failed; retrying");
                }
                let period = if hub.revocations.is_loaded() { RESYNC } else { RETRY_UNLOADED };
                next = tokio::time::Instant::now() + period;
            }
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(Event::Apply(n)) => {
                        known.insert(n.metadata.name.unwrap_or_default());
                    }
                    Ok(Event::Delete(n)) => {
                        let name = n.metadata.name.unwrap_or_default();
                        known.remove(&name);
                        confirm_deleted(&hub, &full, &name).await;
                    }
                    Ok(Event::Init) => listing = Some(HashSet::new()),
                    Ok(Event::InitApply(n)) => {
                        if let Some(l) = listing.as_mut() {
                            l.insert(n.metadata.name.unwrap_or_default());
                        }
                    }
                    Ok(Event::InitDone) => {
                        let fresh = listing.take().unwrap_or_default();
                        let gone: Vec<String> = known.difference(&fresh).cloned().collect();
                        known = fresh;
                        for name in gone {
                            confirm_deleted(&hub, &full, &name).await;
                        }
                    }
                    Err(e) => warn!(error = %e, "node watch failed; retrying with back-off (deletions are seen once it recovers)"),
                }
            }
        }
    }
}
