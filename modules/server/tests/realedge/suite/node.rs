//! The edge's own Node: registered by edged (no fixture), with the labels and addresses edged
//! sets, Ready on edged's Lease cadence for at least five minutes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use local_up::Cluster;
use serde_json::Value;
use tokio::sync::watch;

use crate::support;

/// How long the edge must stay Ready at least.
const READY_FOR: Duration = Duration::from_secs(5 * 60);
/// How often the Node and its Lease are read meanwhile.
const EVERY: Duration = Duration::from_secs(10);
/// edged renews its Lease every 10 s (a quarter of `nodeLeaseDurationSeconds`, 40).
const LEASE_RENEW: Duration = Duration::from_secs(10);

/// Checks the Node as edged registered it, then reads it and its Lease every 10 s until
/// `done` and for at least five minutes: Ready must never be anything but True, no
/// unreachable or not-ready taint may appear, and the Lease must be renewed on edged's
/// cadence (at least half the renewals it makes).
pub(super) async fn registers_and_stays_ready(
    c: &Cluster,
    name: &str,
    mut done: watch::Receiver<bool>,
) -> Result<()> {
    let n = support::node(c, name).await?;
    registered_by_edged(&n, name)?;
    let began = Instant::now();
    let mut renewals = BTreeSet::new();
    let mut samples = 0;
    loop {
        let n = support::node(c, name).await?;
        let ready = support::ready_status(&n);
        ensure!(
            ready == "True",
            "{name} Ready={ready} after {:.0} s: {}",
            began.elapsed().as_secs_f64(),
            n["status"]["conditions"]
        );
        let taints: Vec<&str> = n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["key"].as_str())
            .collect();
        ensure!(
            !taints
                .iter()
                .any(|k| *k == "node.kubernetes.io/unreachable"
                    || *k == "node.kubernetes.io/not-ready"),
            "{name} tainted {taints:?} after {:.0} s",
            began.elapsed().as_secs_f64()
        );
        let lease = c
            .kubectl_json(&["-n", "kube-node-lease", "get", "lease", name])
            .await?;
        ensure!(
            lease["spec"]["holderIdentity"] == name,
            "Lease of {name} held by {}",
            lease["spec"]["holderIdentity"]
        );
        if let Some(t) = lease["spec"]["renewTime"].as_str() {
            renewals.insert(t.to_owned());
        }
        samples += 1;
        if *done.borrow() && began.elapsed() >= READY_FOR {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = done.changed() => {}
        }
    }
    // Each sample sees the latest renewal; at a 10 s cadence nearly every sample sees a new one.
    let expected = (began.elapsed().as_secs() / LEASE_RENEW.as_secs()) as usize;
    ensure!(
        renewals.len() * 2 >= samples.min(expected),
        "the Lease of {name} was renewed {} times in {:.0} s ({samples} samples)",
        renewals.len(),
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What edged sets on its own Node: the edge role labels, the well-known labels, its
/// InternalIP (the loopback address local-up gave it) and hostname, a KubeEdge kubelet
/// version, and Ready with reason EdgeReady.
fn registered_by_edged(n: &Value, name: &str) -> Result<()> {
    let labels = &n["metadata"]["labels"];
    for (key, value) in [
        ("node-role.kubernetes.io/edge", ""),
        ("node-role.kubernetes.io/agent", ""),
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        (
            "kubernetes.io/arch",
            std::env::consts::ARCH.replace("x86_64", "amd64").as_str(),
        ),
    ] {
        ensure!(
            labels[key] == value,
            "{name} label {key}={} (expected {value:?}): {labels}",
            labels[key]
        );
    }
    let addresses = n["status"]["addresses"]
        .as_array()
        .context("no addresses")?;
    let address = |kind: &str| {
        addresses
            .iter()
            .find(|a| a["type"] == kind)
            .and_then(|a| a["address"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    ensure!(
        address("Hostname") == name,
        "Hostname address {addresses:?}"
    );
    let internal = address("InternalIP");
    ensure!(
        internal.starts_with("127.") && internal != "127.0.0.1",
        "InternalIP {internal:?}: local-up gives each edge its own loopback address"
    );
    let version = n["status"]["nodeInfo"]["kubeletVersion"]
        .as_str()
        .unwrap_or_default();
    ensure!(version.contains("kubeedge"), "kubeletVersion {version}");
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .context("no Ready condition")?;
    ensure!(
        ready["status"] == "True" && ready["reason"] == "EdgeReady",
        "Ready condition {ready}"
    );
    ensure!(
        n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no kubelet port for the API server: {}",
        n["status"]["daemonEndpoints"]
    );
    Ok(())
}
