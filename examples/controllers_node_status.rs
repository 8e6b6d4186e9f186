//! Upstream throughput of the edgecontroller against a real API server (k8s-testenv): N
//! simulated edge nodes report their status as `nodepatch` messages, injected exactly as
//! cloudhub publishes them; counts statuses written per second (answers with `Err: null`).
//! Side by side: the same patches sent straight to the API server with the same concurrency
//! (`load.patchNodeWorkers`), the ceiling of this API server.
//!
//! `cargo run --release --example controllers_node_status -- 1000 5 [--impersonate]`
//! (nodes, rounds; `--impersonate` sends each patch as `system:node:<name>`, so the API
//! server's Node authorizer and NodeRestriction decide it too, as
//! `modules.cloudHub.authorization` `enable: true, debug: false` does; without it the patch
//! is decided in-process only and sent as cloudcore, the default).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::{Bus, Content, Message};
use edgecontroller::{EdgeController, EdgeControllerConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn patch(round: usize) -> serde_json::Value {
    json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": format!("round {round}"), "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}})
}

#[actix_rt::main]
async fn main() -> anyhow::Result<()> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let impersonate = all.iter().any(|a| a == "--impersonate");
    let mut args = all.into_iter().filter(|a| a != "--impersonate");
    let nodes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let client = k8s_testenv::client().await;
    let run = &beehive::new_id()[..6];
    let names: Vec<String> = (0..nodes).map(|i| format!("sim-{run}-{i}")).collect();
    let api = Api::<Node>::all(client.clone());
    futures::stream::iter(names.iter())
        .map(|name| {
            let api = api.clone();
            async move {
                let n: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"node-role.kubernetes.io/edge": ""}}}))?;
                api.create(&PostParams::default(), &n).await.map(|_| ()).context("create node")
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    println!("{nodes} nodes created");

    let config = EdgeControllerConfig::default();
    let workers = config.load.patch_node_workers as usize;
    let bus = Bus::new();
    let mut hub = bus.register_inbox("cloudhub", "cloudhub", 1 << 17)?;
    let ec = EdgeController::new(config, bus.endpoint("edgecontroller"), client.clone())
        .with_impersonation(impersonate);
    let (synced, metrics) = (ec.synced(), ec.metrics());
    bus.register(ec)?;
    bus.start()?;
    tokio::time::timeout(Duration::from_secs(60), synced.wait())
        .await
        .context("sync")?;
    // Drain the start-up node updates so only answers remain.
    while hub.try_recv().is_some() {}

    let injector = bus.endpoint("cloudhub");
    let (mut written, mut failed) = (0usize, 0usize);
    let started = Instant::now();
    for round in 0..rounds {
        let body = patch(round).to_string();
        let mut ids = std::collections::HashSet::new();
        for name in &names {
            let mut m = Message::new()
                .with_route(
                    "edged",
                    "meta",
                    format!("node/{name}/null/nodepatch/{name}"),
                    "patch",
                )
                .with_content(Content::string(&body));
            m.header.sync = true;
            ids.insert(m.header.id.clone());
            injector.send_to_group("edgecontroller", m).await?;
        }
        while !ids.is_empty() {
            let m = tokio::time::timeout(Duration::from_secs(60), hub.recv())
                .await
                .context("answers stopped")??;
            if !ids.remove(&m.header.parent_id) {
                continue; // a downstream node update caused by the write
            }
            let ok =
                serde_json::from_str::<serde_json::Value>(m.content.as_json())?["Err"].is_null();
            if ok { written += 1 } else { failed += 1 }
        }
    }
    let elapsed = started.elapsed();
    let controller_rate = written as f64 / elapsed.as_secs_f64();
    let q = metrics.snapshot().queue("patchNode").cloned();

    // Baseline: the same writes straight to the API server, same concurrency.
    let started = Instant::now();
    let mut direct_ok = 0usize;
    for round in rounds..2 * rounds {
        let p = patch(round);
        let results: Vec<bool> = futures::stream::iter(names.iter())
            .map(|name| {
                let (api, p) = (api.clone(), p.clone());
                async move {
                    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(p))
                        .await
                        .is_ok()
                }
            })
            .buffer_unordered(workers)
            .collect()
            .await;
        direct_ok += results.into_iter().filter(|ok| *ok).count();
    }
    let direct_rate = direct_ok as f64 / started.elapsed().as_secs_f64();

    let mode = if impersonate {
        "impersonation"
    } else {
        "in-process"
    };
    println!(
        "nodes {nodes}, rounds {rounds}, patchNodeWorkers {workers}, node authorization {mode}"
    );
    println!(
        "edgecontroller: {written} statuses written, {failed} failed in {:.2} s = {controller_rate:.0} statuses/s",
        elapsed.as_secs_f64()
    );
    println!("direct client:  {direct_ok} statuses written = {direct_rate:.0} statuses/s");
    println!(
        "ratio edgecontroller/direct: {:.2}",
        controller_rate / direct_rate
    );
    if let Some(q) = q {
        println!(
            "patchNode queue: handled {} failed {} rejected {}",
            q.handled, q.failed, q.rejected
        );
    }
    if failed > 0 {
        bail!("{failed} writes failed");
    }
    bus.shutdown().await;
    Ok(())
}
