//! End-to-end downstream latency against a real API server (k8s-testenv): the time from
//! creating a pod bound to an edge node until a Rust edge node connected to cloudhub receives
//! it, through the whole composition (edgecontroller → cloudhub → TLS WebSocket → edge),
//! p50/p99 over N pods created one after the other.
//!
//! `cargo run --release --example cloudcore_pod_latency -- 200`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cloudcore_server::app::CloudCore;
use cloudcore_server::config::CloudCoreConfig;
use cloudcore_server::ops::Metrics;
use edge::hub::{HubClient, HubClientConfig, HubEvent, bootstrap};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
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
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let dir = std::env::temp_dir().join(format!("cloudcore-latency-{}", std::process::id()));

    let mut config = CloudCoreConfig::default();
    let hub = &mut config.modules.cloud_hub;
    hub.advertise_address = vec!["127.0.0.1".into()];
    hub.websocket.address = "127.0.0.1".into();
    hub.websocket.port = 0;
    hub.https.address = "127.0.0.1".into();
    hub.https.port = 0;
    hub.tls_ca_file = dir.join("ca/rootCA.crt");
    hub.tls_ca_key_file = dir.join("ca/rootCA.key");
    hub.tls_cert_file = dir.join("certs/server.crt");
    hub.tls_private_key_file = dir.join("certs/server.key");
    hub.unixsocket.address = format!("unix://{}", dir.join("kubeedge.sock").display());
    config.modules.device_controller.enable = false;
    let core = CloudCore::start(&config, Some(client.clone()), &Metrics::default()).await?;
    let (ws, https) = (
        core.addresses().websocket.context("ws")?,
        core.addresses().https.context("https")?,
    );
    let token = core.hub().context("hub")?.token();

    let node = format!("edge-latency-{}", &beehive::new_id()[..6]);
    let n: Node = serde_json::from_value(
        json!({"metadata": {"name": node, "labels": {"node-role.kubernetes.io/edge": ""}}}),
    )?;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await?;
    let certs = bootstrap(&format!("https://{https}"), &token, &node).await?;
    let (edge, mut events) = HubClient::start(
        HubClientConfig::new(&node, ws.to_string()),
        Arc::new(certs.client_tls()?),
    );
    loop {
        match tokio::time::timeout(Duration::from_secs(20), events.recv()).await {
            Ok(Some(HubEvent::Connected)) => break,
            Ok(Some(_)) => {}
            _ => bail!("the edge did not connect"),
        }
    }

    let ns = k8s_testenv::namespace("latency").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("p{i}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
        }))?;
        let began = Instant::now();
        pods.create(&PostParams::default(), &pod).await?;
        let want = format!("{ns}/pod/{name}");
        loop {
            match tokio::time::timeout(Duration::from_secs(30), events.recv()).await {
                Ok(Some(HubEvent::Message(m)))
                    if m.route.resource == want && m.route.operation == "insert" =>
                {
                    break;
                }
                Ok(Some(_)) => {}
                _ => bail!("pod {name} never reached the edge"),
            }
        }
        latencies.push(began.elapsed());
    }
    latencies.sort();
    println!(
        "pod created → edge received, {count} pods: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies[latencies.len() - 1]),
    );
    edge.stop();
    core.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
