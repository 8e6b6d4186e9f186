//! What a real edge node takes and costs through our cloudcore, side by side with KubeEdge's
//! own cloudcore: two `scripts/local-up` clusters at once (each one edge: an unmodified
//! edgecore with edged running pods on containerd, and the whole control plane), measured in
//! turns. `kubectl apply` of a Deployment until its pod is Running and Ready as the edge
//! reported it, p50/p99 over N rollouts one after the other; `kubectl exec` round trips and
//! `kubectl logs` first bytes against the real container, each also through the API alone
//! (without kubectl's start-up); then each cloudcore's and edgecore's CPU and RSS while the
//! edges idle with one pod. A stream request that fails is printed with its side and why
//! (kubectl's stderr, the API server's status) and left out of its row; when the side's
//! edgecore has exited, its panic line is printed and it is started again, and the failures
//! and crashes of each side make a row of their own. Needs root, local-up's packages
//! (docs/real-edge.md) and KubeEdge's cloudcore (`CLOUDCORE_GO_BIN` or `CLOUDCORE_GO_XZ`;
//! `--ours-only` without it).
//!
//! ```text
//! cargo build --release -p cloudcore-server --bin cloudcore
//! cargo run --release --example real_edge -- --rollouts 50 --streams 50 --idle-minutes 10
//! cargo run --release --example real_edge -- --rollouts 50 --streams 50 --idle-minutes 10 --kubeedge-first
//! ```
//!
//! Our cloudcore is the newest build beside this example's profile (as the edgecore harness
//! finds it), or `CLOUDCORE_BIN`. Each line prints ours, then KubeEdge's, then ours/KubeEdge's.

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
    /// Deployments rolled out one after the other, on each side.
    #[arg(long, default_value_t = 50)]
    rollouts: usize,
    /// Exec round trips and logs requests, each way, on each side.
    #[arg(long, default_value_t = 50)]
    streams: usize,
    /// Minutes the edges idle with one pod while the processes' CPU and memory are read.
    #[arg(long, default_value_t = 10)]
    idle_minutes: u64,
    /// Our cloudcore alone (no KubeEdge cloudcore at hand).
    #[arg(long)]
    ours_only: bool,
    /// KubeEdge's side takes the first turn of the first round (and so of every even round);
    /// two runs, one with it, measure both orders.
    #[arg(long)]
    kubeedge_first: bool,
}

const NS: &str = "measure";

/// One cluster and what the measurements use of it.
struct Side {
    name: &'static str,
    cluster: Cluster,
    pods: Api<Pod>,
    node: String,
}

async fn side(name: &'static str, kubeedge: bool) -> anyhow::Result<Side> {
    let cluster =
        tokio::task::spawn_blocking(move || LocalUp::new().kubeedge_cloudcore(kubeedge).start())
            .await??;
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
    Ok(Side {
        name,
        cluster,
        pods: Api::namespaced(client, NS),
        node,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!("load before: {}", load());
    let ours = side("ours", false).await?;
    let mut sides = vec![ours];
    if !args.ours_only {
        sides.push(side("KubeEdge's", true).await?);
    }
    println!(
        "| | n | {} |{}",
        sides
            .iter()
            .map(|s| format!("{} p50 / p99", s.name))
            .collect::<Vec<_>>()
            .join(" | "),
        if sides.len() == 2 {
            " ours/KubeEdge's p50 |"
        } else {
            ""
        }
    );

    // In turns, the first side alternating, so that neither always runs right after the other.
    let first = usize::from(args.kubeedge_first);
    let mut rollouts = vec![Vec::new(); sides.len()];
    for i in 0..args.rollouts {
        for k in turns(sides.len(), i + first) {
            rollouts[k].push(rollout(&sides[k], i).await?);
        }
    }
    report(
        "kubectl apply → pod Running and Ready (reported by the edge)",
        rollouts,
    );

    for s in &sides {
        s.cluster
            .apply(
                &deployment(
                    &s.cluster,
                    "target",
                    &s.node,
                    "echo hello from the edge; while true; do sleep 1; done",
                )
                .to_string(),
            )
            .await?;
    }
    let mut targets = Vec::new();
    for s in &sides {
        targets.push(ready_pod(&s.pods, "target").await?);
    }
    let mut streams: Vec<Streams> = sides.iter().map(|_| Streams::default()).collect();
    for i in 0..args.streams {
        for k in turns(sides.len(), i + first) {
            streams[k].round(&sides[k], &targets[k]).await?;
        }
    }
    let rows = |f: fn(&Streams) -> &Vec<Duration>| streams.iter().map(|s| f(s).clone()).collect();
    report(
        "kubectl exec … -- true (whole command)",
        rows(|s| &s.exec_kubectl),
    );
    report(
        "exec through the API (WebSocket, until the exit status)",
        rows(|s| &s.exec_api),
    );
    report("kubectl logs: first byte", rows(|s| &s.logs_kubectl));
    report("logs through the API: first byte", rows(|s| &s.logs_api));
    println!(
        "| stream requests that failed (edgecore crashes, each restarted) | {} | {} |",
        4 * args.streams,
        streams
            .iter()
            .map(|s| format!("{} ({})", s.failed, s.crashes))
            .collect::<Vec<_>>()
            .join(" | ")
    );

    idle(&sides, Duration::from_secs(args.idle_minutes * 60)).await?;
    println!("load after: {}", load());
    for s in sides {
        tokio::task::spawn_blocking(move || s.cluster.down()).await??;
    }
    Ok(())
}

/// The order of the sides in round `i`: rotated by one each round.
fn turns(n: usize, i: usize) -> Vec<usize> {
    (0..n).map(|k| (k + i) % n).collect()
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

/// One rollout: a watch on its pods first, then `kubectl apply`; timed until a pod of it is
/// Ready. Then it is deleted and its pod awaited gone (not timed).
async fn rollout(s: &Side, i: usize) -> anyhow::Result<Duration> {
    let (c, pods) = (&s.cluster, &s.pods);
    let name = format!("rollout-{i}");
    let params = WatchParams::default()
        .labels(&format!("app={name}"))
        .timeout(120);
    let mut events = pods.watch(&params, "0").await?.boxed();
    let began = Instant::now();
    c.apply(&deployment(c, &name, &s.node, "while true; do sleep 1; done").to_string())
        .await?;
    loop {
        match events.next().await {
            Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))) if ready(&p) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => bail!("{} rollout {name}: no Ready pod within 120 s", s.name),
        }
    }
    let took = began.elapsed();
    c.kubectl_ok(&["-n", NS, "delete", "deployment", &name, "--wait=false"])
        .await?;
    loop {
        match events.next().await {
            Some(Ok(WatchEvent::Deleted(_))) | None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
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

/// How long one stream request may take before it counts as failed.
const STREAM_LIMIT: Duration = Duration::from_secs(60);

/// One side's stream measurements, and what failed on the way.
#[derive(Default)]
struct Streams {
    exec_kubectl: Vec<Duration>,
    exec_api: Vec<Duration>,
    logs_kubectl: Vec<Duration>,
    logs_api: Vec<Duration>,
    /// Requests that failed: left out of their rows, each printed with the side and why.
    failed: usize,
    /// Times the side's edgecore was found gone after a failure (and started again).
    crashes: usize,
}

impl Streams {
    /// The samples of request `i` of a round, in the order [`Streams::round`] makes them.
    fn row(&mut self, i: usize) -> &mut Vec<Duration> {
        match i {
            0 => &mut self.exec_kubectl,
            1 => &mut self.exec_api,
            2 => &mut self.logs_kubectl,
            _ => &mut self.logs_api,
        }
    }

    /// One round: each of the four requests once. A failed request is printed with the side,
    /// the request and why (kubectl's stderr, the API server's status) and left out of its
    /// row. If the side's edgecore has exited, its last panic line is printed, the rest of
    /// the round is skipped, and it is started again; the round ends once an exec works.
    async fn round(&mut self, s: &Side, pod: &str) -> anyhow::Result<()> {
        let c = &s.cluster;
        for (what, row) in [
            ("kubectl exec", 0),
            ("exec through the API", 1),
            ("kubectl logs", 2),
            ("logs through the API", 3),
        ] {
            let result = match row {
                0 => timed(kubectl_exec(c, pod)).await,
                1 => timed(api_exec(&s.pods, pod)).await,
                2 => timed(kubectl_logs_first_byte(c, pod)).await,
                _ => timed(api_logs_first_byte(&s.pods, pod)).await,
            };
            let e = match result {
                Ok(d) => {
                    self.row(row).push(d);
                    continue;
                }
                Err(e) => e,
            };
            eprintln!("{}: {what} failed: {e:#}", s.name);
            self.failed += 1;
            if edgecore_running(s).await? {
                continue;
            }
            self.crashes += 1;
            let log = std::fs::read_to_string(c.log(&s.node)).unwrap_or_default();
            let panic = log
                .lines()
                .rev()
                .find(|l| l.starts_with("panic:"))
                .unwrap_or("no panic line in its log");
            eprintln!(
                "{}: edgecore of {} has exited ({panic}); starting it again",
                s.name, s.node
            );
            c.start(&s.node).await?;
            local_up::eventually(
                Duration::from_secs(120),
                Duration::from_secs(2),
                "exec after the edgecore restart",
                || async { kubectl_exec(c, pod).await.ok() },
            )
            .await?;
            break;
        }
        Ok(())
    }
}

/// A request bounded by [`STREAM_LIMIT`].
async fn timed(
    request: impl Future<Output = anyhow::Result<Duration>>,
) -> anyhow::Result<Duration> {
    tokio::time::timeout(STREAM_LIMIT, request)
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {STREAM_LIMIT:?}")))
}

/// Whether the side's edgecore (the process in its pid file) is still alive.
async fn edgecore_running(s: &Side) -> anyhow::Result<bool> {
    // A crashing edgecore takes a moment to exit after its tunnel broke.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let f = s.cluster.dir().join(format!("{}.pid", s.node));
    let pid = std::fs::read_to_string(&f).with_context(|| f.display().to_string())?;
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    // Field 3, after the command name in parentheses, is the state; Z is a process that exited.
    Ok(stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

async fn kubectl_exec(c: &Cluster, pod: &str) -> anyhow::Result<Duration> {
    let began = Instant::now();
    c.kubectl_ok(&["-n", NS, "exec", pod, "--", "true"]).await?;
    Ok(began.elapsed())
}

async fn api_exec(pods: &Api<Pod>, pod: &str) -> anyhow::Result<Duration> {
    let began = Instant::now();
    // The API requires one stream; `true` writes nothing to it.
    let ap = AttachParams::default()
        .stdout(true)
        .stderr(false)
        .stdin(false);
    let mut process = pods.exec(pod, ["true"], &ap).await?;
    let status = process.take_status().context("exec status")?.await;
    let took = began.elapsed();
    let _ = process.join().await;
    match status {
        Some(s) if s.status.as_deref() == Some("Success") => Ok(took),
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
    if n == 0 {
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr).await;
        }
        let status = child.wait().await?;
        bail!("kubectl logs wrote nothing ({status}): {:?}", stderr.trim());
    }
    let _ = child.wait().await;
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

fn report(what: &str, samples: Vec<Vec<Duration>>) {
    // Sides can differ where requests failed: then the column names each side's count.
    let counts: Vec<String> = samples.iter().map(|s| s.len().to_string()).collect();
    let n = if counts.windows(2).all(|w| w[0] == w[1]) {
        counts.first().cloned().unwrap_or_default()
    } else {
        counts.join(" / ")
    };
    let mut cells = Vec::new();
    let mut p50s = Vec::new();
    for mut side in samples {
        if side.is_empty() {
            cells.push("failed".to_owned());
            p50s.push(f64::NAN);
            continue;
        }
        side.sort();
        let (p50, p99) = (percentile(&side, 0.5), percentile(&side, 0.99));
        p50s.push(ms(p50));
        cells.push(format!("{:.0} / {:.0} ms", ms(p50), ms(p99)));
    }
    let ratio = match p50s[..] {
        [ours, theirs] => format!(" ×{:.2} |", ours / theirs),
        _ => String::new(),
    };
    println!("| {what} | {n} | {} |{ratio}", cells.join(" | "));
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

/// Samples each side's cloudcore and edgecore every 10 s while the edges idle with the
/// `target` pod.
async fn idle(sides: &[Side], span: Duration) -> anyhow::Result<()> {
    let mut procs = Vec::new();
    for s in sides {
        for (what, file) in [
            ("cloudcore", "cloudcore".to_owned()),
            ("edgecore", s.node.clone()),
        ] {
            let f = s.cluster.dir().join(format!("{file}.pid"));
            let pid: u32 = std::fs::read_to_string(&f)
                .with_context(|| f.display().to_string())?
                .trim()
                .parse()?;
            procs.push((format!("{} {what}", s.name), pid));
        }
    }
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
            "| {name}, idle {:.0} min, one edge, one pod | CPU {:.2} % of a core ({cpu:.1} s) | RSS {:.1}-{:.1} MiB, last {:.1} MiB |",
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
