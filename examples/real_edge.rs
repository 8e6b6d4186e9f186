//! What a real edge node takes and costs through our cloudcore, on `scripts/local-up` (one
//! edge: an unmodified edgecore with edged running pods on containerd, the whole control
//! plane beside it): `kubectl apply` of a Deployment until its pod is Running and Ready as the
//! edge reported it, p50/p99 over N rollouts one after the other; `kubectl exec` round trips
//! and `kubectl logs` first bytes against the real container, each also through the API
//! alone (without kubectl's start-up); then cloudcore's and edgecore's CPU and RSS while the
//! edge idles with one pod. Needs root and local-up's packages (docs/real-edge.md).
//!
//! ```text
//! cargo build --release -p cloudcore-server --bin cloudcore
//! cargo run --release --example real_edge -- --rollouts 50 --streams 50 --idle-minutes 10
//! ```
//!
//! The cloudcore measured is the newest build beside this example's profile (as the edgecore
//! harness finds it), or `CLOUDCORE_BIN`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::{AsyncBufReadExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use local_up::{Cluster, LocalUp};
use serde_json::json;

#[path = "support/latency.rs"]
mod latency;
// Only its memory readers are used here.
#[allow(dead_code)]
#[path = "support/procstat.rs"]
mod procstat;

use latency::{ms, percentile};

/// Sizes of the run.
#[derive(Debug, Parser)]
struct Args {
    /// Deployments rolled out one after the other.
    #[arg(long, default_value_t = 50)]
    rollouts: usize,
    /// Exec round trips and logs requests, each way.
    #[arg(long, default_value_t = 50)]
    streams: usize,
    /// Minutes the edge idles with one pod while cloudcore's CPU and memory are read.
    #[arg(long, default_value_t = 10)]
    idle_minutes: u64,
}

const NS: &str = "measure";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!("load before: {}", load());
    let cluster = tokio::task::spawn_blocking(|| LocalUp::new().edges(1).start()).await??;
    let node = cluster.nodes()[0].clone();
    let kubeconfig = Kubeconfig::read_from(cluster.kubeconfig())?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    cluster.kubectl_ok(&["create", "namespace", NS]).await?;
    local_up::eventually(
        Duration::from_secs(60),
        Duration::from_secs(1),
        "ServiceAccount",
        || async {
            cluster
                .kubectl_ok(&["-n", NS, "get", "serviceaccount", "default"])
                .await
                .ok()
        },
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client, NS);

    let rollouts = rollouts(&cluster, &pods, &node, args.rollouts).await?;
    report(
        "kubectl apply → pod Running and Ready (reported by the edge)",
        rollouts,
    );

    cluster
        .apply(
            &deployment(
                &cluster,
                "target",
                &node,
                "echo hello from the edge; while true; do sleep 1; done",
            )
            .to_string(),
        )
        .await?;
    let target = ready_pod(&pods, "target").await?;
    let mut exec_kubectl = Vec::new();
    let mut exec_api = Vec::new();
    let mut logs_kubectl = Vec::new();
    let mut logs_api = Vec::new();
    for _ in 0..args.streams {
        exec_kubectl.push(kubectl_exec(&cluster, &target).await?);
        exec_api.push(api_exec(&pods, &target).await?);
        logs_kubectl.push(kubectl_logs_first_byte(&cluster, &target).await?);
        logs_api.push(api_logs_first_byte(&pods, &target).await?);
    }
    report("kubectl exec … -- true (whole command)", exec_kubectl);
    report(
        "exec through the API (WebSocket, until the exit status)",
        exec_api,
    );
    report("kubectl logs: first byte", logs_kubectl);
    report("logs through the API: first byte", logs_api);

    idle(&cluster, &node, Duration::from_secs(args.idle_minutes * 60)).await?;
    println!("load after: {}", load());
    tokio::task::spawn_blocking(move || cluster.down()).await??;
    Ok(())
}

fn deployment(c: &Cluster, name: &str, node: &str, script: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main", "image": c.image(), "imagePullPolicy": "Never",
                        "command": ["sh", "-c", format!("trap 'exit 0' TERM; {script}")],
                    }],
                },
            },
        },
    })
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Each rollout: a watch on its pods first, then `kubectl apply`; timed until a pod of it is
/// Ready. Then it is deleted and its pod awaited gone (not timed).
async fn rollouts(
    c: &Cluster,
    pods: &Api<Pod>,
    node: &str,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("rollout-{i}");
        let params = WatchParams::default()
            .labels(&format!("app={name}"))
            .timeout(120);
        let mut events = pods.watch(&params, "0").await?.boxed();
        let began = Instant::now();
        c.apply(&deployment(c, &name, node, "while true; do sleep 1; done").to_string())
            .await?;
        loop {
            match events.next().await {
                Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))) if ready(&p) => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => bail!("rollout {name}: no Ready pod within 120 s"),
            }
        }
        took.push(began.elapsed());
        c.kubectl_ok(&["-n", NS, "delete", "deployment", &name, "--wait=false"])
            .await?;
        loop {
            match events.next().await {
                Some(Ok(WatchEvent::Deleted(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
            }
        }
    }
    Ok(took)
}

async fn ready_pod(pods: &Api<Pod>, app: &str) -> anyhow::Result<String> {
    local_up::eventually(
        Duration::from_secs(120),
        Duration::from_millis(500),
        "pod Ready",
        || async {
            let list = pods
                .list(&kube::api::ListParams::default().labels(&format!("app={app}")))
                .await
                .ok()?;
            list.items
                .iter()
                .find(|p| ready(p))
                .and_then(|p| p.metadata.name.clone())
        },
    )
    .await
    .map_err(Into::into)
}

async fn kubectl_exec(c: &Cluster, pod: &str) -> anyhow::Result<Duration> {
    let began = Instant::now();
    c.kubectl_ok(&["-n", NS, "exec", pod, "--", "true"]).await?;
    Ok(began.elapsed())
}

async fn api_exec(pods: &Api<Pod>, pod: &str) -> anyhow::Result<Duration> {
    let began = Instant::now();
    let ap = AttachParams::default()
        .stdout(false)
        .stderr(false)
        .stdin(false);
    let mut process = pods.exec(pod, ["true"], &ap).await?;
    let status = process.take_status().context("exec status")?.await;
    let took = began.elapsed();
    let _ = process.join().await;
    match status.and_then(|s| s.status) {
        Some(s) if s == "Success" => Ok(took),
        other => bail!("exec true ended {other:?}"),
    }
}

async fn kubectl_logs_first_byte(c: &Cluster, pod: &str) -> anyhow::Result<Duration> {
    use tokio::io::AsyncReadExt as _;
    let began = Instant::now();
    let mut child = c.kubectl_spawn(&["-n", NS, "logs", pod])?;
    let mut out = child.stdout.take().context("stdout")?;
    let mut byte = [0u8; 1];
    let n = out.read(&mut byte).await?;
    let took = began.elapsed();
    let _ = child.wait().await;
    if n == 0 {
        bail!("kubectl logs wrote nothing");
    }
    Ok(took)
}

async fn api_logs_first_byte(pods: &Api<Pod>, pod: &str) -> anyhow::Result<Duration> {
    let began = Instant::now();
    let mut body = pods.log_stream(pod, &LogParams::default()).await?;
    let first = body.fill_buf().await?;
    if first.is_empty() {
        bail!("logs through the API: empty body");
    }
    Ok(began.elapsed())
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "| {what} | {} | {:.0} ms | {:.0} ms | {:.0} ms |",
        samples.len(),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(samples[samples.len() - 1])
    );
}

/// CPU seconds (user + system) a process has used; clock ticks of 1/100 s, as on Linux/x86.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    // After the command name, fields[0] is the line's field 3 (state): utime (14) and stime
    // (15) are 11 and 12.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / 100.0
}

/// Samples cloudcore and edgecore every 10 s while the edge idles with the `target` pod.
async fn idle(c: &Cluster, node: &str, span: Duration) -> anyhow::Result<()> {
    let pid = |name: &str| -> anyhow::Result<u32> {
        let f = c.dir().join(format!("{name}.pid"));
        Ok(std::fs::read_to_string(&f)
            .with_context(|| f.display().to_string())?
            .trim()
            .parse()?)
    };
    let procs = [("cloudcore", pid("cloudcore")?), ("edgecore", pid(node)?)];
    let began = Instant::now();
    let cpu0: Vec<f64> = procs.iter().map(|(_, p)| cpu_seconds(*p)).collect();
    let mut rss: Vec<Vec<u64>> = vec![Vec::new(); procs.len()];
    while began.elapsed() < span {
        for (i, (_, p)) in procs.iter().enumerate() {
            rss[i].push(procstat::rss_kib(*p));
        }
        tokio::time::sleep(Duration::from_secs(10).min(span)).await;
    }
    let wall = began.elapsed().as_secs_f64();
    for (i, (name, p)) in procs.iter().enumerate() {
        let cpu = cpu_seconds(*p) - cpu0[i];
        let r = &rss[i];
        println!(
            "| {name} idle {:.0} min, one edge, one pod | CPU {:.2} % of a core ({cpu:.1} s) | RSS {:.1}-{:.1} MiB, last {:.1} MiB |",
            wall / 60.0,
            cpu / wall * 100.0,
            procstat::mib(*r.iter().min().unwrap_or(&0)),
            procstat::mib(*r.iter().max().unwrap_or(&0)),
            procstat::mib(procstat::rss_kib(*p)),
        );
    }
    Ok(())
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
