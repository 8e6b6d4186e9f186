//! The `tunnelport` ConfigMap through the API server: negotiating this instance's advertised
//! port, following the record for the iptables manager, and releasing the IPs of deleted
//! cloudcore pods.
//!
//! Only cloudcore pods are trusted to free an IP: pods labelled `kubeedge=cloudcore` in
//! cloudcore's own namespace ([`cloudcore_namespace`]) that are bound to a Node without the
//! edge role label (`node-role.kubernetes.io/edge`, which keadm puts on edge Nodes). Edges can create pods bound to themselves, so a
//! pod they made must never make cloudcore drop another instance's DNAT rule.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeedge_api::names::EDGE_NODE_LABEL;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::record::{
    TUNNEL_PORT_ANNOTATION, TUNNEL_PORT_CONFIGMAP, TUNNEL_PORT_NAMESPACE, TunnelPortRecord,
};

/// Label of cloudcore pods whose deletion frees their IP (upstream `kubeedge=cloudcore`).
pub const CLOUDCORE_POD_SELECTOR: &str = "kubeedge=cloudcore";

/// The environment variable naming cloudcore's namespace (set it from the downward API's
/// `metadata.namespace` in cloudcore's pod spec).
pub const NAMESPACE_ENV: &str = "POD_NAMESPACE";

/// Where cloudcore runs when [`NAMESPACE_ENV`] is unset or empty.
pub const DEFAULT_NAMESPACE: &str = "kubeedge";

/// cloudcore's own namespace: `$POD_NAMESPACE`, else `kubeedge`.
pub fn cloudcore_namespace() -> String {
    std::env::var(NAMESPACE_ENV)
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}

/// Read-modify-write attempts before giving up (upstream panics on the first conflict).
const ATTEMPTS: usize = 10;

/// Errors talking to the ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum NegotiateError {
    /// The API server refused or failed.
    #[error("tunnelport ConfigMap: {0}")]
    Api(#[from] kube::Error),
    /// The annotation holds something that is not a record.
    #[error("tunnelport record annotation is not valid JSON: {0}")]
    Record(#[from] serde_json::Error),
    /// Every attempt met a concurrent writer.
    #[error("tunnelport ConfigMap kept changing under us; gave up after {ATTEMPTS} attempts")]
    Contended,
}

fn api(client: kube::Client) -> Api<ConfigMap> {
    Api::namespaced(client, TUNNEL_PORT_NAMESPACE)
}

/// Whether a write went through: `Ok(false)` on a conflict (someone else wrote first, so
/// re-read and retry), the error otherwise.
fn written(result: kube::Result<ConfigMap>) -> Result<bool, NegotiateError> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Replaces the ConfigMap `cm` (as read, so its resourceVersion guards the write) with
/// `record` in its annotation; see [`written`].
async fn replace(
    api: &Api<ConfigMap>,
    cm: ConfigMap,
    record: &TunnelPortRecord,
) -> Result<bool, NegotiateError> {
    let cm = with_record(cm, record);
    written(
        api.replace(TUNNEL_PORT_CONFIGMAP, &PostParams::default(), &cm)
            .await,
    )
}

fn record_of(cm: &ConfigMap) -> Result<TunnelPortRecord, serde_json::Error> {
    TunnelPortRecord::from_annotation(
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TUNNEL_PORT_ANNOTATION))
            .map(String::as_str),
    )
}

fn with_record(mut cm: ConfigMap, record: &TunnelPortRecord) -> ConfigMap {
    cm.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(TUNNEL_PORT_ANNOTATION.to_owned(), record.to_annotation());
    cm
}

/// The advertised port of the cloudcore at `ip`: its recorded one, or the next free one,
/// written back with optimistic concurrency (a conflict re-reads and retries).
pub async fn negotiate_tunnel_port(client: kube::Client, ip: &str) -> Result<u16, NegotiateError> {
    let api = api(client);
    for _ in 0..ATTEMPTS {
        let Some(cm) = api.get_opt(TUNNEL_PORT_CONFIGMAP).await? else {
            let mut record = TunnelPortRecord::default();
            let (port, _) = record.assign(ip);
            let cm = with_record(
                ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(TUNNEL_PORT_CONFIGMAP.into()),
                        namespace: Some(TUNNEL_PORT_NAMESPACE.into()),
                        ..ObjectMeta::default()
                    },
                    ..ConfigMap::default()
                },
                &record,
            );
            if written(api.create(&PostParams::default(), &cm).await)? {
                return Ok(port);
            }
            continue;
        };
        let mut record = record_of(&cm)?;
        let (port, changed) = record.assign(ip);
        if !changed {
            return Ok(port);
        }
        if replace(&api, cm, &record).await? {
            info!(ip, port, "negotiated tunnel port");
            return Ok(port);
        }
    }
    Err(NegotiateError::Contended)
}

/// Removes `ip` from the record; `Ok(false)` when it was not there.
pub async fn release_ip(client: kube::Client, ip: &str) -> Result<bool, NegotiateError> {
    let api = api(client);
    for _ in 0..ATTEMPTS {
        let Some(cm) = api.get_opt(TUNNEL_PORT_CONFIGMAP).await? else {
            return Ok(false);
        };
        let mut record = record_of(&cm)?;
        if !record.release(ip) {
            return Ok(false);
        }
        if replace(&api, cm, &record).await? {
            return Ok(true);
        }
    }
    Err(NegotiateError::Contended)
}

/// Follows the record: the receiver holds `None` until the ConfigMap was first seen, then
/// its latest record (empty when the ConfigMap is deleted). Runs on `tasks` until `stop`.
pub fn watch_record(
    client: kube::Client,
    stop: CancellationToken,
    tasks: &TaskTracker,
) -> watch::Receiver<Option<TunnelPortRecord>> {
    let (tx, rx) = watch::channel(None);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={TUNNEL_PORT_CONFIGMAP}"));
    let mut events = watcher(api(client), config).default_backoff().boxed();
    tasks.spawn(async move {
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => return,
                ev = events.next() => match ev {
                    Some(ev) => ev,
                    None => return,
                },
            };
            match ev {
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                    match record_of(&cm) {
                        Ok(r) => {
                            tx.send_replace(Some(r));
                        }
                        Err(e) => {
                            warn!(error = %e, "tunnelport record unreadable; keeping the previous one")
                        }
                    }
                }
                Ok(watcher::Event::Delete(_)) => {
                    tx.send_replace(Some(TunnelPortRecord::default()));
                }
                Ok(watcher::Event::InitDone) => {
                    // No ConfigMap at all is an empty record, not "unknown".
                    tx.send_if_modified(|r| {
                        if r.is_none() {
                            *r = Some(TunnelPortRecord::default());
                            true
                        } else {
                            false
                        }
                    });
                }
                Ok(watcher::Event::Init) => {}
                Err(e) => warn!(error = %e, "tunnelport watch error (retrying)"),
            }
        }
    });
    rx
}

/// Why a deleted pod is not trusted to free its IP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    /// The pod is outside cloudcore's namespace.
    #[error("pod is in namespace {found:?}, not cloudcore's {want:?}")]
    Namespace {
        /// The pod's namespace.
        found: String,
        /// cloudcore's.
        want: String,
    },
    /// The pod was never bound to a node.
    #[error("pod is not bound to a node")]
    Unbound,
    /// The pod's Node no longer exists, so whether it was an edge cannot be told.
    #[error("node {0} no longer exists")]
    NodeGone(String),
    /// The pod is bound to an edge node.
    #[error("pod is bound to edge node {0}")]
    EdgeNode(String),
}

/// Whether a deleted `kubeedge=cloudcore` pod is one of cloudcore's own: in `namespace` and
/// bound to `node` (its Node as read now, `None` when it does not exist) that is not an edge.
pub fn trusted_cloudcore(pod: &Pod, namespace: &str, node: Option<&Node>) -> Result<(), Untrusted> {
    let found = pod.metadata.namespace.as_deref().unwrap_or("");
    if found != namespace {
        return Err(Untrusted::Namespace {
            found: found.to_owned(),
            want: namespace.to_owned(),
        });
    }
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .ok_or(Untrusted::Unbound)?;
    let node = node.ok_or_else(|| Untrusted::NodeGone(name.to_owned()))?;
    if node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(EDGE_NODE_LABEL))
    {
        return Err(Untrusted::EdgeNode(name.to_owned()));
    }
    Ok(())
}

/// Reads the Node of a deleted pod, retrying transient errors a few times.
async fn node_of(nodes: &Api<Node>, pod: &Pod) -> Result<Option<Node>, kube::Error> {
    let Some(name) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    let mut attempt = 1u32;
    loop {
        match nodes.get_opt(name).await {
            Ok(n) => return Ok(n),
            Err(e) if attempt >= 5 => return Err(e),
            Err(e) => {
                warn!(node = name, attempt, error = %e, "could not read a deleted cloudcore pod's node");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                attempt += 1;
            }
        }
    }
}

/// The IPs of the live cloudcore pods, for the iptables manager: pods labelled
/// `kubeedge=cloudcore` in `namespace` that have an IP, are not being deleted and pass
/// [`trusted_cloudcore`] (bound to a Node without the edge label, read once per Node name).
/// The receiver holds `None` until the first list is complete. Runs on `tasks` until `stop`.
pub fn watch_cloudcore_ips(
    client: kube::Client,
    namespace: String,
    stop: CancellationToken,
    tasks: &TaskTracker,
) -> watch::Receiver<Option<std::collections::BTreeSet<String>>> {
    let (tx, rx) = watch::channel(None);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let nodes = kubeedge_api::escaped::Api::<Node>::all(client);
    let mut events = watcher(
        pods,
        watcher::Config::default().labels(CLOUDCORE_POD_SELECTOR),
    )
    .default_backoff()
    .boxed();
    tasks.spawn(async move {
        // Pod name → its IP, for the pods that count.
        let mut live: BTreeMap<String, String> = BTreeMap::new();
        let mut listing: Option<BTreeMap<String, String>> = None;
        // Node name → whether it may run a cloudcore (not an edge), read once.
        let mut node_ok: BTreeMap<String, bool> = BTreeMap::new();
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => return,
                ev = events.next() => match ev {
                    Some(ev) => ev,
                    None => return,
                },
            };
            let publish = |live: &BTreeMap<String, String>| {
                tx.send_replace(Some(live.values().cloned().collect()));
            };
            match ev {
                Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(pod) | watcher::Event::Apply(pod)) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let ip = match counts(&pod, &namespace, &nodes, &mut node_ok).await {
                        Some(ip) => ip,
                        None => {
                            live.remove(&name);
                            if listing.is_none() {
                                publish(&live);
                            }
                            continue;
                        }
                    };
                    match listing.as_mut() {
                        Some(l) => {
                            l.insert(name, ip);
                        }
                        None => {
                            live.insert(name, ip);
                            publish(&live);
                        }
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    live = listing.take().unwrap_or_default();
                    publish(&live);
                }
                Ok(watcher::Event::Delete(pod)) => {
                    live.remove(pod.metadata.name.as_deref().unwrap_or_default());
                    publish(&live);
                }
                Err(e) => warn!(error = %e, "cloudcore pod watch error (retrying)"),
            }
        }
    });
    rx
}

/// The IP of `pod` when it is a live cloudcore ([`watch_cloudcore_ips`]).
async fn counts(
    pod: &Pod,
    namespace: &str,
    nodes: &kubeedge_api::escaped::Api<Node>,
    node_ok: &mut BTreeMap<String, bool>,
) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())?;
    let node = pod
        .spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|n| !n.is_empty())?;
    if let Some(ok) = node_ok.get(&node) {
        return ok.then_some(ip);
    }
    let found = nodes.get_opt(&node).await.ok()?;
    let ok = trusted_cloudcore(pod, namespace, found.as_ref()).is_ok();
    if !ok {
        warn!(pod = ?pod.metadata.name, node = %node, "a pod labelled kubeedge=cloudcore that is not a cloudcore: its IP gets no tunnel port rule");
    }
    if found.is_some() {
        node_ok.insert(node, ok);
    }
    ok.then_some(ip)
}

/// Removes the `podIP` of every deleted cloudcore pod from the record (upstream's pod-delete
/// listener), retrying a few times. Only pods labelled `kubeedge=cloudcore` in `namespace`
/// (cloudcore's own, see [`cloudcore_namespace`]) and bound to a non-edge Node count (see
/// [`trusted_cloudcore`]); others are logged and ignored. Runs until `stop`.
pub async fn release_deleted_cloudcores(
    client: kube::Client,
    namespace: String,
    stop: CancellationToken,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let nodes: Api<Node> = Api::all(client.clone());
    let mut events = watcher(
        pods,
        watcher::Config::default().labels(CLOUDCORE_POD_SELECTOR),
    )
    .default_backoff()
    .boxed();
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = events.next() => match ev {
                Some(ev) => ev,
                None => return,
            },
        };
        let Ok(watcher::Event::Delete(pod)) = ev else {
            continue;
        };
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty())
        else {
            continue;
        };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let node = match node_of(&nodes, &pod).await {
            Ok(n) => n,
            Err(e) => {
                warn!(pod = %pod_name, %ip, error = %e, "deleted cloudcore pod's node unreadable; its tunnel port record entry is kept");
                continue;
            }
        };
        if let Err(why) = trusted_cloudcore(&pod, &namespace, node.as_ref()) {
            warn!(pod = %pod_name, %namespace, %ip, reason = %why, "ignoring the deletion of a pod labelled kubeedge=cloudcore that is not a cloudcore");
            continue;
        }
        for attempt in 1..=5u32 {
            match release_ip(client.clone(), &ip).await {
                Ok(released) => {
                    info!(pod = %pod_name, %ip, released, "cloudcore pod deleted; its tunnel port record entry is released");
                    break;
                }
                Err(e) => {
                    warn!(%ip, attempt, error = %e, "could not release a deleted cloudcore's tunnel port");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cloudcore-0", "namespace": ns, "labels": {"kubeedge": "cloudcore"}},
            "spec": {"nodeName": node, "containers": []},
        }))
        .unwrap()
    }

    fn node(name: &str, edge: bool) -> Node {
        let labels = if edge {
            serde_json::json!({ EDGE_NODE_LABEL: "" })
        } else {
            serde_json::json!({"node-role.kubernetes.io/control-plane": ""})
        };
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels}}))
            .unwrap()
    }

    #[test]
    fn only_pods_in_our_namespace_on_cloud_nodes_should_be_trusted() {
        let cloud = node("master", false);
        let edge = node("edge-1", true);
        assert_eq!(
            trusted_cloudcore(&pod("kubeedge", Some("master")), "kubeedge", Some(&cloud)),
            Ok(())
        );
        assert!(matches!(
            trusted_cloudcore(&pod("default", Some("master")), "kubeedge", Some(&cloud)),
            Err(Untrusted::Namespace { .. })
        ));
        assert_eq!(
            trusted_cloudcore(&pod("kubeedge", Some("edge-1")), "kubeedge", Some(&edge)),
            Err(Untrusted::EdgeNode("edge-1".into()))
        );
        assert_eq!(
            trusted_cloudcore(&pod("kubeedge", None), "kubeedge", None),
            Err(Untrusted::Unbound)
        );
        assert_eq!(
            trusted_cloudcore(&pod("kubeedge", Some("gone")), "kubeedge", None),
            Err(Untrusted::NodeGone("gone".into()))
        );
    }
}
