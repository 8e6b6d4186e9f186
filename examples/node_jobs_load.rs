//! Node jobs at scale against a real API server (k8s-testenv): one ImagePrePullJob over N
//! simulated edge nodes whose edges answer every task at once (`Check`, then `Pull`, injected
//! as cloudhub forwards reports). Prints how long the job took from creation to `Completed`,
//! the status writes it cost (one read-modify-write of the whole job carries every report
//! waiting for it) and their conflicts, and the size of the finished job. Side by side, the
//! ceiling of this API server: one status write per report, each of the finished job's size.
//!
//! `cargo run --release --example node_jobs_load -- 1000 100`  (nodes, concurrency; the
//! numbers in docs/taskmanager.md are of a debug build)

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::{Bus, Content, Message};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeedge_api::operations::v1alpha2::ImagePrePullJob;
use kubeedge_api::replicas::Ownership;
use serde_json::json;
use taskmanager::{TaskManager, TaskManagerConfig};

#[actix_rt::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let concurrency: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let run = &beehive::new_id()[..6];
    let names: Vec<String> = (0..nodes).map(|i| format!("job-{run}-{i}")).collect();
    let api = Api::<Node>::all(client.clone());
    futures::stream::iter(names.iter())
        .map(|name| {
            let api = api.clone();
            async move {
                let n: Node = serde_json::from_value(json!({"metadata": {"name": name,
                    "labels": {"node-role.kubernetes.io/edge": ""}}}))?;
                api.create(&PostParams::default(), &n).await?;
                let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                    "reason": "KubeletReady", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&ready))
                    .await
                    .map(|_| ())
                    .context("node Ready")
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    println!("{nodes} nodes created");

    let bus = Bus::new();
    let mut hub = bus.register_inbox("cloudhub", "cloudhub", 1 << 17)?;
    let ownership = Ownership::new("10.0.0.1");
    for n in &names {
        ownership.hold(n);
    }
    let config = TaskManagerConfig {
        enable: true,
        ..TaskManagerConfig::default()
    };
    let tm = TaskManager::new(
        config,
        bus.endpoint("taskmanager"),
        client.clone(),
        ownership,
    );
    let metrics = tm.metrics();
    bus.register(tm)?;
    bus.start()?;
    // The edges: every task is answered at once, as cloudhub forwards reports.
    let endpoint = bus.endpoint("cloudhub");
    tokio::spawn(async move {
        while let Ok(m) = hub.recv().await {
            if m.route.operation != "Check" {
                continue;
            }
            let node = m
                .route
                .resource
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            for (action, extend) in [
                ("Check", String::new()),
                ("Pull", r#"[{"image":"a/b:1","status":"True"}]"#.to_owned()),
            ] {
                let body = json!({"action": action, "succ": true,
                    "finishTime": "2026-08-06T07:00:00Z", "reason": "", "extend": extend});
                let report = Message::new()
                    .with_route(
                        "websocket",
                        "hub",
                        format!("node/{node}/{}", m.route.resource),
                        "UpdateNodeActionStatus",
                    )
                    .with_content(Content::json(&body).unwrap_or_default());
                let _ = endpoint.send_to_group("taskmanager", report).await;
            }
        }
    });

    let jobs: Api<ImagePrePullJob> = Api::all(client.clone());
    let name = format!("load-{run}");
    let job: ImagePrePullJob = serde_json::from_value(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name},
        "spec": {"imagePrePullTemplate": {"images": ["a/b:1"], "nodeNames": names,
            "concurrency": concurrency, "timeoutSeconds": 600}}}))?;
    let started = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let done = loop {
        let j = jobs.get(&name).await?;
        match j.status.as_ref().map(|s| s.phase.as_str()) {
            Some("Completed") => break j,
            Some("Failure") => bail!("the job failed: {:?}", j.status.map(|s| s.reason)),
            _ => {}
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("not Completed within 30 min");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = started.elapsed();
    let size = serde_json::to_vec(&done)?.len();
    let writes = |outcome: &str| {
        let labels = [("kind", "ImagePrePullJob"), ("outcome", outcome)];
        let text = render(&metrics);
        value(&text, "taskmanager_status_writes_total", &labels)
    };
    let (ok, conflicts) = (writes("ok"), writes("conflict"));
    let reports = 2 * nodes;
    println!(
        "taskmanager: {nodes} nodes, concurrency {concurrency}: Completed in {:.1} s; {ok} status writes ({conflicts} conflicts) for {reports} reports and {nodes} sends; finished job {} KiB",
        took.as_secs_f64(),
        size / 1024
    );
    bus.shutdown().await;

    // The ceiling: one write per report, each carrying the finished job.
    let api_status: Api<ImagePrePullJob> = Api::all(client);
    let mut latest = api_status.get(&name).await?;
    let t = Instant::now();
    let n = reports.min(400);
    for _ in 0..n {
        latest = api_status
            .replace_status(&name, &PostParams::default(), &latest)
            .await?;
    }
    let per = t.elapsed() / n as u32;
    println!(
        "API server alone: one status write of the finished job takes {:.1} ms; one per report and send would take {:.1} s",
        per.as_secs_f64() * 1e3,
        per.as_secs_f64() * (reports + nodes) as f64
    );
    Ok(())
}

fn render(metrics: &taskmanager::TaskManagerMetrics) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    text
}

fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
