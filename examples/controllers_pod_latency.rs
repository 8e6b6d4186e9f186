//! Downstream latency of the edgecontroller against a real API server (k8s-testenv): the time
//! from creating a pod bound to an edge node until edgecontroller's `insert` reaches the
//! `cloudhub` inbox, p50/p99 over N pods, side by side with a bare kube watcher on the same
//! pods (the floor any watch-based controller has).
//!
//! `cargo run --release --example controllers_pod_latency -- 200`

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::Bus;
use edgecontroller::{EdgeController, EdgeControllerConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;

#[path = "support/latency.rs"]
mod latency;

use latency::{ms, percentile};

#[actix_rt::main]
async fn main() -> anyhow::Result<()> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200);
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("latency").await;
    let node = format!("edge-latency-{}", &beehive::new_id()[..6]);
    let n: Node = serde_json::from_value(
        json!({"metadata": {"name": node, "labels": {"node-role.kubernetes.io/edge": ""}}}),
    )?;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await?;

    let bus = Bus::new();
    let mut hub = bus.register_inbox("cloudhub", "cloudhub", 1 << 16)?;
    let ec = EdgeController::new(
        EdgeControllerConfig::default(),
        bus.endpoint("edgecontroller"),
        client.clone(),
    );
    let synced = ec.synced();
    bus.register(ec)?;
    bus.start()?;
    tokio::time::timeout(Duration::from_secs(30), synced.wait())
        .await
        .context("edgecontroller caches did not sync")?;

    // The baseline: a bare watcher on the same pods, in the same process.
    let (watch_tx, mut watch_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut stream = watcher::watcher(pods_api.clone(), watcher::Config::default()).boxed();
    tokio::spawn(async move {
        while let Some(Ok(e)) = stream.next().await {
            if let watcher::Event::Apply(p) = e {
                let _ = watch_tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;

    let (mut controller, mut baseline) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for i in 0..count {
        let name = format!("p{i}");
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}}))?;
        let resource = format!("node/{node}/{ns}/pod/{name}");
        let started = Instant::now();
        pods_api.create(&PostParams::default(), &pod).await?;
        let mut got_msg = None;
        let mut got_watch = None;
        let deadline = started + Duration::from_secs(10);
        while got_msg.is_none() || got_watch.is_none() {
            tokio::select! {
                m = hub.recv() => {
                    let m = m?;
                    if m.route.resource == resource && m.route.operation == "insert" {
                        got_msg = Some(Instant::now());
                    }
                }
                Some((n, at)) = watch_rx.recv() => if n == name { got_watch = Some(at) },
                _ = tokio::time::sleep_until(deadline.into()) => bail!("pod {name}: no message within 10 s"),
            }
        }
        if let (Some(m), Some(w)) = (got_msg, got_watch) {
            controller.push(m - started);
            baseline.push(w - started);
        }
    }
    controller.sort();
    baseline.sort();
    let (c50, c99, b50, b99) = (
        percentile(&controller, 0.5),
        percentile(&controller, 0.99),
        percentile(&baseline, 0.5),
        percentile(&baseline, 0.99),
    );
    println!("pods: {count}");
    println!(
        "create -> cloudhub inbox (edgecontroller): p50 {:.2} ms  p99 {:.2} ms",
        ms(c50),
        ms(c99)
    );
    println!(
        "create -> bare watch event (baseline):     p50 {:.2} ms  p99 {:.2} ms",
        ms(b50),
        ms(b99)
    );
    println!(
        "ratio controller/baseline:                 p50 {:.2}x   p99 {:.2}x",
        ms(c50) / ms(b50),
        ms(c99) / ms(b99)
    );
    bus.shutdown().await;
    Ok(())
}
