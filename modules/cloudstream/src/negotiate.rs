//! The `tunnelport` ConfigMap through the API server: negotiating this instance's advertised
//! port, following the record for the iptables manager, and releasing the IPs of deleted
//! cloudcore pods.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::record::{
    TUNNEL_PORT_ANNOTATION, TUNNEL_PORT_CONFIGMAP, TUNNEL_PORT_NAMESPACE, TunnelPortRecord,
};

/// Label of cloudcore pods whose deletion frees their IP (upstream `kubeedge=cloudcore`).
pub const CLOUDCORE_POD_SELECTOR: &str = "kubeedge=cloudcore";

/// Read-modify-write attempts before giving up (upstream panics on the first conflict, W28).
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
/// its latest record (empty when the ConfigMap is deleted). Runs until `stop`.
pub fn watch_record(
    client: kube::Client,
    stop: CancellationToken,
) -> watch::Receiver<Option<TunnelPortRecord>> {
    let (tx, rx) = watch::channel(None);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={TUNNEL_PORT_CONFIGMAP}"));
    let mut events = watcher(api(client), config).default_backoff().boxed();
    tokio::spawn(async move {
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

/// Removes the `podIP` of every deleted `kubeedge=cloudcore` pod from the record (upstream's
/// pod-delete listener), retrying a few times. Runs until `stop`.
pub async fn release_deleted_cloudcores(client: kube::Client, stop: CancellationToken) {
    let pods: Api<Pod> = Api::all(client.clone());
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
            .and_then(|s| s.pod_ip)
            .filter(|ip| !ip.is_empty())
        else {
            continue;
        };
        for attempt in 1..=5u32 {
            match release_ip(client.clone(), &ip).await {
                Ok(released) => {
                    info!(%ip, released, "cloudcore pod deleted; its tunnel port record entry is released");
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
