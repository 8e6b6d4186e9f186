//! Siege of cloudcore: the whole composition (cloudhub, cloudstream, the controllers) as a
//! separate process against the test API server (k8s-testenv), attacked on every edge-facing
//! port while 1,000 legitimate Rust edges connect, reconnect, receive pods and acknowledge
//! them. Three phases, each bounded in time, in one run:
//!
//! 1. **baseline**: no attack. Every edge connects, then reconnects (the reconnect is what is
//!    measured, as in the later phases); `--pods` pods are created per node.
//! 2. **attack** (at least `--attack-secs`): after a ramp, every edge reconnects and every pod
//!    is updated, while from loopback addresses of their own attackers hold idle TCP
//!    connections to the WebSocket, certificate, stream and tunnel ports (from `127.66.x.y`),
//!    dribble upload bodies to the certificate server a byte a second (`127.67.x.y`), flood
//!    pings and messages that need answers over valid edge certificates while reading slowly
//!    (`127.68.0.k`, one each), and open exec sessions (as the API server, with its
//!    kubelet-client certificate, from `127.70.0.1`) towards a tunnel that never answers
//!    (`127.69.0.1`). Edges with valid certificates flood the metaServer (`127.71.0.k`):
//!    watches with the largest ids and options cloudcore takes, a new label selector in every
//!    watch and list (each a SubjectAccessReview answer to remember) and discovery of made-up
//!    API groups; and the API server's identity asks the stream server for the metrics of a
//!    new made-up node in every request (`X-Forwarded-Uri`, from `127.72.0.k`), each a review
//!    answer to remember. Each kind has its own addresses so that a per-source limit tripped
//!    by one kind does not hide the others.
//! 3. **after**: the attack stops; once cloudcore's open descriptors are back to the baseline
//!    (or `--settle-secs` passed), the legitimate round runs once more.
//!
//! Each legitimate edge dials from its own loopback address (`127.10.x.y`), as real edges have
//! their own. A pod is *lost* when its last version never reached its edge, or was never
//! acknowledged (no ObjectSync at that version) by the end of the phase. The table gives, per
//! phase: connect p50/p99 (client start to `Connected`), cloudcore's peak RSS (sampled every
//! 100 ms), open descriptors and threads at the end, and lost pods; then the targets.
//!
//! ```text
//! cargo run --release --example cloudcore_siege
//! cargo run --release --example cloudcore_siege -- --nodes 200 --pods 5 --idle 500   # quick
//! ```
//!
//! cloudcore runs as this example re-executed with `cloudcore --config <file>`, which is what
//! `examples/cloudcore` does with a configuration file; set `CLOUDCORE_BIN` to run another
//! binary (e.g. `target/release/examples/cloudcore`) instead. Tokio tasks are not visible from
//! outside the process: the task column shows cloudcore's `*_tasks` gauges from `/metrics`
//! (`cloudhub_connection_tasks`: one per upgraded WebSocket).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::{Backoff, Content, Message};
use clap::{Args as ClapArgs, Parser, Subcommand};
use edge::hub::{DEFAULT_PROJECT_ID, HubClient, HubClientConfig, HubEvent};
use edgecore_interop::{CloudSpec, Process};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubeedge_api::reliablesyncs::ObjectSync;
use kubeedge_wire::hub as wire;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};

#[path = "support/apicalls.rs"]
mod apicalls;
#[path = "support/latency.rs"]
mod latency;
#[path = "support/procstat.rs"]
mod procstat;

use apicalls::{retry, rv_of};
use latency::{ms, percentile};
use procstat::{mib, open_fds, rss_kib, threads};

/// Siege of cloudcore: legitimate edges beside attackers on every port.
#[derive(Debug, Parser)]
#[command(name = "cloudcore_siege")]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    #[command(flatten)]
    siege: Siege,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Run cloudcore itself (the process the siege measures), as `examples/cloudcore` does.
    Cloudcore {
        /// The CloudCore configuration file.
        #[arg(long)]
        config: PathBuf,
        /// Log filter.
        #[arg(long, default_value = "warn")]
        log_level: String,
    },
}

#[derive(Debug, Clone, ClapArgs)]
struct Siege {
    /// Legitimate edge nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pods per node (created in the baseline, updated in the later phases).
    #[arg(long, default_value_t = 10)]
    pods: usize,
    /// Edges (re)connecting at once; the next wave starts when this one is connected.
    #[arg(long, default_value_t = 100)]
    wave: usize,
    /// Threads running the legitimate edges.
    #[arg(long, default_value_t = 2)]
    edge_threads: usize,
    /// Idle TCP connections held by the attackers, spread over the four edge-facing ports.
    #[arg(long, default_value_t = 2000)]
    idle: usize,
    /// Slow-body uploads to the certificate server (one byte a second).
    #[arg(long, default_value_t = 100)]
    slow_uploads: usize,
    /// Edges with valid certificates that flood and read slowly.
    #[arg(long, default_value_t = 4)]
    flooders: usize,
    /// Exec sessions towards the tunnel that never answers.
    #[arg(long, default_value_t = 100)]
    execs: usize,
    /// Edges with valid certificates that flood the metaServer (dynamiccontroller): large
    /// watches, a new selector in every request, made-up API groups.
    #[arg(long, default_value_t = 4)]
    meta_flooders: usize,
    /// Connections to the stream server, as the API server, asking for the metrics of a new
    /// made-up node name in every request.
    #[arg(long, default_value_t = 4)]
    stream_reviewers: usize,
    /// Source addresses the idle connections spread over (127.66.0.1, .2, …), and the slow
    /// uploads (127.67.0.1, …). One address meets the per-source limit at once; many make the
    /// connections pass it and meet the global and pre-authentication limits.
    #[arg(long, default_value_t = 64)]
    attacker_ips: usize,
    /// Delay before an attacker dials again after the server closed its connection.
    #[arg(long, default_value_t = 1000)]
    redial_ms: u64,
    /// Seconds the attack runs before the legitimate round starts.
    #[arg(long, default_value_t = 10)]
    ramp_secs: u64,
    /// Least duration of the attack (ramp included): it goes on after the legitimate round
    /// until then, so that cloudcore's timeouts (pre-authentication, request bodies, silent
    /// edges) have fired at least once.
    #[arg(long, default_value_t = 60)]
    attack_secs: u64,
    /// Limit of each wait (connect wave, delivery) in a phase.
    #[arg(long, default_value_t = 180)]
    phase_timeout_secs: u64,
    /// Longest wait for cloudcore's descriptors to come back after the attack.
    #[arg(long, default_value_t = 120)]
    settle_secs: u64,
    /// The attack is stopped early when cloudcore's RSS passes this (protects the machine).
    #[arg(long, default_value_t = 4096)]
    rss_abort_mib: u64,
    /// cloudcore's log filter (its log is in the run folder).
    #[arg(long, default_value = "warn")]
    log_level: String,
    /// Keep the run folder (config, certificates, cloudcore log).
    #[arg(long)]
    keep: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Role::Cloudcore { config, log_level }) = cli.role {
        return run_cloudcore(&config, &log_level);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(siege(cli.siege))
}

// ------------------------------------------------------------------------- cloudcore role

fn run_cloudcore(config: &Path, log_level: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(log_level)?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false)
        .init();
    // Ends with the siege even when the siege is killed before it can stop us.
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(3);
            }
        }
    });
    let config = cloudcore_server::config::CloudCoreConfig::load(config)
        .map_err(|e| anyhow::anyhow!("invalid configuration {}: {e}", config.display()))?;
    actix_rt::System::new().block_on(cloudcore_server::app::run(
        config,
        cloudcore_server::app::signal(),
    ))?;
    Ok(())
}

/// Starts cloudcore with `spec`'s configuration file in its own process group.
fn start_cloudcore(spec: &CloudSpec, log_level: &str) -> anyhow::Result<Process> {
    let mut cmd = match std::env::var_os("CLOUDCORE_BIN") {
        Some(bin) => Command::new(bin),
        None => {
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("cloudcore");
            c
        }
    };
    cmd.arg("--config")
        .arg(spec.config_file())
        .arg("--log-level")
        .arg(log_level)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .current_dir(&spec.dir);
    let process = Process::spawn("cloudcore", cmd, &spec.log_file())?;
    stop_with_this_process(process.id());
    Ok(process)
}

/// Kills cloudcore's process group once this process has gone, however it went.
// clippy::zombie_processes: the watchdog must outlive this process, which never waits for it.
#[allow(clippy::zombie_processes)]
fn stop_with_this_process(pgid: u32) {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; kill -9 -{pgid} 2>/dev/null",
        me = std::process::id()
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
}

async fn wait_ready(spec: &CloudSpec, cloud: &mut Process) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = cloud.try_wait() {
            bail!(
                "cloudcore exited during start-up ({status}):\n{}",
                cloud.log_tail(30)
            );
        }
        let ready = edgecore_interop::http_get(
            spec.ports.monitor_addr(),
            "/readyz",
            Duration::from_secs(2),
        )
        .await;
        if matches!(&ready, Ok(r) if r.status == 200) && spec.token_file().is_file() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "cloudcore not ready within 60 s ({ready:?}):\n{}",
                cloud.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The current `/metrics` text (empty when unreachable).
async fn metrics(spec: &CloudSpec) -> String {
    edgecore_interop::http_get(
        spec.ports.monitor_addr(),
        "/metrics",
        Duration::from_secs(10),
    )
    .await
    .map(|r| r.text())
    .unwrap_or_default()
}

/// Samples of `/metrics` summed over their labels, by metric name.
fn sum_by_name(text: &str, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let (true, Ok(v)) = (wanted(name), value.parse::<f64>()) {
            *out.entry(name.to_owned()).or_insert(0.0) += v;
        }
    }
    out
}

/// cloudcore's task gauges (`*_tasks`) added up, when it exposes any.
fn task_gauge(text: &str) -> Option<f64> {
    let gauges = sum_by_name(text, |n| n.ends_with("_tasks"));
    (!gauges.is_empty()).then(|| gauges.values().sum())
}

// ------------------------------------------------------------------------- sockets

/// The loopback address of legitimate edge `i`.
fn edge_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 10, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// Address `k` of the block (`127.<block>.x.y`) of one kind of attacker.
fn attacker_ip(block: u8, k: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        block,
        (k / 250) as u8,
        (k % 250 + 1) as u8,
    ))
}

async fn tcp_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_from(from: IpAddr, to: SocketAddr, tls: Arc<ClientConfig>) -> std::io::Result<Tls> {
    let tcp = tcp_from(from, to).await?;
    let name = ServerName::IpAddress(to.ip().into());
    tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
}

/// Writes a request head and reads the response head; an error unless it is `101`.
async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, head: &str) -> std::io::Result<()> {
    s.write_all(head.as_bytes()).await?;
    s.flush().await?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 || got.len() > 16 * 1024 {
            return Err(std::io::Error::other("no response head"));
        }
        got.extend_from_slice(&buf[..n]);
    }
    if got.starts_with(b"HTTP/1.1 101") {
        Ok(())
    } else {
        let line = String::from_utf8_lossy(&got);
        Err(std::io::Error::other(
            line.lines().next().unwrap_or_default().to_owned(),
        ))
    }
}

fn ws_head(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> String {
    let mut head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

fn pem_der(path: &Path) -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(pki::first_pem_der(&text)?)
}

// ------------------------------------------------------------------------- legitimate edges

/// One legitimate edge: who it is and what it has seen.
struct Edge {
    name: String,
    ip: IpAddr,
    tls: Arc<ClientConfig>,
    /// Generation and connect latency of the latest client, once it connected.
    connected: Mutex<Option<(u64, Duration)>>,
    /// Pod name → highest resourceVersion received.
    pods: Mutex<HashMap<String, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

enum ShardCmd {
    Connect { idx: usize, generation: u64 },
    Stop,
}

/// The legitimate edges, on `--edge-threads` current-thread runtimes.
struct Fleet {
    edges: Vec<Arc<Edge>>,
    shards: Vec<mpsc::UnboundedSender<ShardCmd>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Connects {
    latencies: Vec<Duration>,
    failed: usize,
}

impl Fleet {
    fn start(edges: Vec<Arc<Edge>>, threads: usize, server: SocketAddr, ns: &str) -> Fleet {
        let mut shards = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..threads.max(1) {
            let (tx, rx) = mpsc::unbounded_channel();
            let (edges, ns) = (edges.clone(), ns.to_owned());
            handles.push(std::thread::spawn(move || shard(rx, edges, server, ns)));
            shards.push(tx);
        }
        Fleet {
            edges,
            shards,
            threads: handles,
        }
    }

    /// Every edge (re)connects with a fresh client, `wave` at a time; latency is client start
    /// to `Connected` (a wave member not connected within `limit` counts as failed, at `limit`).
    async fn connect_all(&self, generation: u64, wave: usize, limit: Duration) -> Connects {
        let mut out = Connects::default();
        let all: Vec<usize> = (0..self.edges.len()).collect();
        for chunk in all.chunks(wave.max(1)) {
            for &idx in chunk {
                let _ = self.shards[idx % self.shards.len()]
                    .send(ShardCmd::Connect { idx, generation });
            }
            let deadline = Instant::now() + limit;
            let mut pending: Vec<usize> = chunk.to_vec();
            while !pending.is_empty() {
                pending.retain(|&idx| match *lock(&self.edges[idx].connected) {
                    Some((g, d)) if g == generation => {
                        out.latencies.push(d);
                        false
                    }
                    _ => true,
                });
                if Instant::now() > deadline {
                    out.failed += pending.len();
                    out.latencies
                        .extend(std::iter::repeat_n(limit, pending.len()));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        out.latencies.sort();
        out
    }

    fn stop(self) {
        for s in &self.shards {
            let _ = s.send(ShardCmd::Stop);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn shard(
    mut rx: mpsc::UnboundedReceiver<ShardCmd>,
    edges: Vec<Arc<Edge>>,
    server: SocketAddr,
    ns: String,
) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async move {
        let mut clients: HashMap<usize, HubClient> = HashMap::new();
        while let Some(cmd) = rx.recv().await {
            let (idx, generation) = match cmd {
                ShardCmd::Connect { idx, generation } => (idx, generation),
                ShardCmd::Stop => break,
            };
            if let Some(old) = clients.remove(&idx) {
                old.stop();
            }
            let edge = edges[idx].clone();
            let mut cfg = HubClientConfig::new(&edge.name, server.to_string());
            cfg.local_address = Some(edge.ip);
            cfg.queue_capacity = 64;
            cfg.backoff = Backoff {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(5),
            };
            let started = Instant::now();
            let (client, mut events) = HubClient::start(cfg, edge.tls.clone());
            clients.insert(idx, client);
            let prefix = format!("{ns}/pod/");
            tokio::spawn(async move {
                let mut first = true;
                while let Some(ev) = events.recv().await {
                    match ev {
                        HubEvent::Connected if first => {
                            first = false;
                            *lock(&edge.connected) = Some((generation, started.elapsed()));
                        }
                        HubEvent::Message(m) => {
                            let Some(pod) = m.route.resource.strip_prefix(&prefix) else {
                                continue;
                            };
                            let Ok(rv) = m.header.resource_version.parse::<u64>() else {
                                continue;
                            };
                            let mut pods = lock(&edge.pods);
                            let seen = pods.entry(pod.to_owned()).or_default();
                            *seen = (*seen).max(rv);
                        }
                        _ => {}
                    }
                }
            });
        }
        for c in clients.values() {
            c.stop();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
}

// ------------------------------------------------------------------------- pods

/// A pod of a legitimate edge and the version it must reach.
struct PodRec {
    edge: usize,
    name: String,
    uid: String,
    rv: u64,
}

const API_CONCURRENCY: usize = 48;

/// Creates `per_node` pods for every edge; returns them and the count of failed creates.
async fn create_pods(pods: &Api<Pod>, fleet: &Fleet, per_node: usize) -> (Vec<PodRec>, usize) {
    let jobs = fleet
        .edges
        .iter()
        .enumerate()
        .flat_map(|(i, e)| (0..per_node).map(move |j| (i, format!("{}-p{j}", e.name))));
    let results: Vec<_> = futures::stream::iter(jobs)
        .map(|(i, name)| async move {
            let node = &fleet.edges[i].name;
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"siege-phase": "baseline"}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
            }))
            .unwrap_or_default();
            let params = PostParams::default();
            let created = retry(|| pods.create(&params, &pod)).await;
            (i, name, created)
        })
        .buffer_unordered(API_CONCURRENCY)
        .collect()
        .await;
    let mut recs = Vec::new();
    let mut failed = 0;
    for (edge, name, created) in results {
        match created {
            Ok(p) => recs.push(PodRec {
                edge,
                rv: rv_of(&p),
                uid: p.metadata.uid.unwrap_or_default(),
                name,
            }),
            Err(_) => failed += 1,
        }
    }
    (recs, failed)
}

/// Changes every pod (a label naming the phase); returns the count of failed updates, whose
/// pods keep the version they must reach.
async fn update_pods(pods: &Api<Pod>, recs: &mut [PodRec], phase: &str) -> usize {
    let patch = json!({"metadata": {"labels": {"siege-phase": phase}}});
    let results: Vec<_> = futures::stream::iter(recs.iter().enumerate())
        .map(|(k, r)| {
            let patch = &patch;
            async move {
                let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
                let done = retry(|| pods.patch(&r.name, &params, &patch)).await;
                (k, done)
            }
        })
        .buffer_unordered(API_CONCURRENCY)
        .collect()
        .await;
    let mut failed = 0;
    for (k, done) in results {
        match done {
            Ok(p) => recs[k].rv = rv_of(&p),
            Err(_) => failed += 1,
        }
    }
    failed
}

/// What became of a round's pod versions.
#[derive(Debug, Default)]
struct Delivery {
    /// Never reached the edge.
    not_received: usize,
    /// No ObjectSync at that version.
    not_acked: usize,
    /// Either of the two.
    lost: usize,
}

/// Waits (up to `limit`) until every pod's version reached its edge and was acknowledged
/// (ObjectSync `<node>.<uid>` at that version), then counts what did not.
async fn await_delivery(
    fleet: &Fleet,
    recs: &[PodRec],
    syncs: &Api<ObjectSync>,
    limit: Duration,
) -> Delivery {
    let deadline = Instant::now() + limit;
    let received = |r: &PodRec| {
        lock(&fleet.edges[r.edge].pods)
            .get(&r.name)
            .is_some_and(|&v| v >= r.rv)
    };
    while !recs.iter().all(received) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut acked: HashMap<String, u64> = HashMap::new();
    let is_acked = |acked: &HashMap<String, u64>, r: &PodRec| {
        let key = format!("{}.{}", fleet.edges[r.edge].name, r.uid);
        acked.get(&key).is_some_and(|&v| v >= r.rv)
    };
    loop {
        if let Ok(list) = syncs.list(&ListParams::default()).await {
            acked = list
                .items
                .into_iter()
                .filter_map(|o| {
                    let rv = o.status?.object_resource_version.parse().ok()?;
                    Some((o.metadata.name?, rv))
                })
                .collect();
        }
        if recs.iter().all(|r| is_acked(&acked, r)) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let mut d = Delivery::default();
    for r in recs {
        let (got, ack) = (received(r), is_acked(&acked, r));
        d.not_received += usize::from(!got);
        d.not_acked += usize::from(!ack);
        d.lost += usize::from(!got || !ack);
    }
    d
}

// ------------------------------------------------------------------------- RSS sampler

/// Samples cloudcore's RSS every 100 ms: the peak since the last [`Sampler::take_peak`], and
/// a flag once it passed the abort limit.
struct Sampler {
    peak: Arc<AtomicU64>,
    over: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

impl Sampler {
    fn start(pid: u32, abort_kib: u64) -> Sampler {
        let s = Sampler {
            peak: Arc::default(),
            over: Arc::default(),
            done: Arc::default(),
        };
        let (peak, over, done) = (s.peak.clone(), s.over.clone(), s.done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let now = rss_kib(pid);
                peak.fetch_max(now, Ordering::AcqRel);
                if now > abort_kib {
                    over.store(true, Ordering::Release);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        s
    }

    /// The peak since the last call; the next period starts at the current RSS.
    fn take_peak(&self, pid: u32) -> u64 {
        self.peak.swap(rss_kib(pid), Ordering::AcqRel)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

// ------------------------------------------------------------------------- attackers

/// Open connections of one kind: now, peak, and totals.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicU64,
    peak: AtomicU64,
    opened: AtomicU64,
    closed_by_server: AtomicU64,
    dial_failed: AtomicU64,
}

impl Gauge {
    fn open(&self) {
        let now = self.now.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(now, Ordering::AcqRel);
        self.opened.fetch_add(1, Ordering::Relaxed);
    }

    fn close(&self, by_server: bool) {
        self.now.fetch_sub(1, Ordering::AcqRel);
        if by_server {
            self.closed_by_server.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn failed(&self) {
        self.dial_failed.fetch_add(1, Ordering::Relaxed);
    }

    fn line(&self, what: &str) -> String {
        format!(
            "{what:<14} open now {:>5}, peak {:>5}, opened {:>6}, closed by cloudcore {:>6}, dials failed {:>6}",
            self.now.load(Ordering::Acquire),
            self.peak.load(Ordering::Acquire),
            self.opened.load(Ordering::Relaxed),
            self.closed_by_server.load(Ordering::Relaxed),
            self.dial_failed.load(Ordering::Relaxed),
        )
    }
}

#[derive(Debug, Default)]
struct AttackStats {
    idle: Gauge,
    slow: Gauge,
    flood: Gauge,
    flood_bytes: AtomicU64,
    tunnel: Gauge,
    exec: Gauge,
    meta: Gauge,
    meta_requests: AtomicU64,
    review: Gauge,
    review_requests: AtomicU64,
}

impl AttackStats {
    fn print(&self) {
        println!("  {}", self.idle.line("idle TCP"));
        println!("  {}", self.slow.line("slow uploads"));
        println!(
            "  {}; {:.1} MiB written",
            self.flood.line("flooders"),
            self.flood_bytes.load(Ordering::Relaxed) as f64 / 1048576.0
        );
        println!("  {}", self.tunnel.line("mute tunnel"));
        println!("  {}", self.exec.line("exec sessions"));
        println!(
            "  {}; {} requests",
            self.meta.line("metaServer"),
            self.meta_requests.load(Ordering::Relaxed)
        );
        println!(
            "  {}; {} requests",
            self.review.line("stream reviews"),
            self.review_requests.load(Ordering::Relaxed)
        );
    }
}

/// Everything the attackers need; cheap to clone.
#[derive(Clone)]
struct Plan {
    ports: edgecore_interop::CloudPorts,
    ca_only: Arc<ClientConfig>,
    apiserver: Arc<ClientConfig>,
    flooders: Vec<(String, Arc<ClientConfig>)>,
    tunnel: (String, Arc<ClientConfig>),
    meta_flooders: Vec<(String, Arc<ClientConfig>)>,
    /// The namespace the metaServer flood lists in.
    ns: String,
    jwt: String,
    exec_path: String,
    redial: Duration,
    stats: Arc<AttackStats>,
}

#[derive(Debug, Clone, Copy)]
enum Task {
    Idle(u16),
    Slow(usize),
    Flood(usize),
    Tunnel,
    Exec,
    Meta(usize),
    Review(usize),
}

struct Attack {
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    stats: Arc<AttackStats>,
}

impl Attack {
    fn start(plan: Plan, args: &Siege, threads: usize) -> Attack {
        let p = plan.ports;
        let mut tasks = Vec::new();
        for i in 0..args.idle {
            tasks.push(Task::Idle(
                [p.websocket, p.https, p.stream, p.tunnel][i % 4],
            ));
        }
        tasks.extend((0..args.slow_uploads).map(Task::Slow));
        tasks.extend((0..args.flooders).map(Task::Flood));
        if args.execs > 0 {
            tasks.push(Task::Tunnel);
            tasks.extend(std::iter::repeat_n(Task::Exec, args.execs));
        }
        tasks.extend((0..args.meta_flooders).map(Task::Meta));
        tasks.extend((0..args.stream_reviewers).map(Task::Review));
        let spread = args.attacker_ips.max(1);
        let tasks: Vec<(Task, IpAddr)> = tasks
            .into_iter()
            .enumerate()
            .map(|(k, t)| {
                let from = match t {
                    Task::Idle(_) => attacker_ip(66, k % spread),
                    Task::Slow(i) => attacker_ip(67, i % spread),
                    Task::Flood(i) => attacker_ip(68, i),
                    Task::Tunnel => attacker_ip(69, 0),
                    Task::Exec => attacker_ip(70, 0),
                    Task::Meta(i) => attacker_ip(71, i),
                    Task::Review(i) => attacker_ip(72, i),
                };
                (t, from)
            })
            .collect();
        let (stop, stop_rx) = watch::channel(false);
        let threads = (0..threads.max(1))
            .map(|t| {
                let mine: Vec<(Task, IpAddr)> = tasks
                    .iter()
                    .copied()
                    .skip(t)
                    .step_by(threads.max(1))
                    .collect();
                let (plan, stop_rx) = (plan.clone(), stop_rx.clone());
                std::thread::spawn(move || {
                    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    else {
                        return;
                    };
                    rt.block_on(async move {
                        let mut set = tokio::task::JoinSet::new();
                        for (task, from) in mine {
                            set.spawn(attacker(task, from, plan.clone(), stop_rx.clone()));
                        }
                        while set.join_next().await.is_some() {}
                    });
                })
            })
            .collect();
        Attack {
            stop,
            threads,
            stats: plan.stats,
        }
    }

    fn stop(self) -> Arc<AttackStats> {
        let _ = self.stop.send(true);
        for t in self.threads {
            let _ = t.join();
        }
        self.stats
    }
}

/// One attacker: dials, does its harm until cloudcore closes the connection, dials again after
/// the redial delay; ends when told to stop.
async fn attacker(task: Task, from: IpAddr, plan: Plan, mut stop: watch::Receiver<bool>) {
    let st = plan.stats.clone();
    // Execs start once the mute tunnel had a moment to register.
    if matches!(task, Task::Exec) {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    loop {
        let gauge = match task {
            Task::Idle(_) => &st.idle,
            Task::Slow(_) => &st.slow,
            Task::Flood(_) => &st.flood,
            Task::Tunnel => &st.tunnel,
            Task::Exec => &st.exec,
            Task::Meta(_) => &st.meta,
            Task::Review(_) => &st.review,
        };
        let session = one_session(task, from, &plan, gauge);
        let stopped = tokio::select! {
            _ = session => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        if stopped {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(plan.redial) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Holds `gauge` open while alive: a session cancelled by the stop is not counted as closed
/// by the server.
struct Open<'a>(&'a Gauge, bool);

impl<'a> Open<'a> {
    fn new(g: &'a Gauge) -> Self {
        g.open();
        Open(g, false)
    }
    fn closed_by_server(mut self) {
        self.1 = true;
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.close(self.1);
    }
}

/// Reads and discards until EOF or an error.
async fn drain<R: AsyncRead + Unpin>(r: &mut R) {
    let mut buf = vec![0u8; 16 * 1024];
    while matches!(r.read(&mut buf).await, Ok(n) if n > 0) {}
}

async fn one_session(task: Task, from: IpAddr, plan: &Plan, gauge: &Gauge) {
    let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let p = plan.ports;
    match task {
        Task::Idle(port) => {
            let Ok(mut s) = tcp_from(from, local(port)).await else {
                return gauge.failed();
            };
            let open = Open::new(gauge);
            drain(&mut s).await;
            open.closed_by_server();
        }
        Task::Slow(i) => {
            let Ok(Ok(mut s)) = tokio::time::timeout(
                Duration::from_secs(20),
                tls_from(from, local(p.https), plan.ca_only.clone()),
            )
            .await
            else {
                return gauge.failed();
            };
            let head = format!(
                "GET /edge.crt HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\
                 NodeName: siege-slow-{i}\r\nContent-Type: application/octet-stream\r\n\
                 Content-Length: 65536\r\n\r\n",
                p.https, plan.jwt
            );
            if s.write_all(head.as_bytes()).await.is_err() {
                return gauge.failed();
            }
            let open = Open::new(gauge);
            let mut buf = [0u8; 4096];
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    r = s.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
                    _ = tick.tick() => if s.write_all(b"x").await.is_err() { break },
                }
            }
            open.closed_by_server();
        }
        Task::Flood(k) => {
            let (node, tls) = &plan.flooders[k];
            let addr = local(p.websocket);
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_secs(20), tls_from(from, addr, tls.clone()))
                    .await
            else {
                return gauge.failed();
            };
            let head = ws_head(
                addr,
                &format!("/{DEFAULT_PROJECT_ID}/{node}/events"),
                &[
                    ("node_id", node),
                    ("project_id", DEFAULT_PROJECT_ID),
                    ("connectionuse", "msg"),
                ],
            );
            if upgrade(&mut s, &head).await.is_err() {
                return gauge.failed();
            }
            let open = Open::new(gauge);
            let batch = flood_batch();
            let (mut rd, mut wr) = tokio::io::split(s);
            let write = async {
                while wr.write_all(&batch).await.is_ok() {
                    plan.stats
                        .flood_bytes
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
            };
            // Reads 1 KiB a second: the answers pile up on cloudcore's side.
            let read = async {
                let mut buf = [0u8; 1024];
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if !matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {
                        break;
                    }
                }
            };
            tokio::select! {
                _ = write => {}
                _ = read => {}
            }
            open.closed_by_server();
        }
        Task::Tunnel => {
            let (node, tls) = &plan.tunnel;
            let addr = local(p.tunnel);
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_secs(20), tls_from(from, addr, tls.clone()))
                    .await
            else {
                return gauge.failed();
            };
            let ip = from.to_string();
            let head = ws_head(
                addr,
                "/v1/kubeedge/connect",
                &[
                    ("Sessionhostnameoverride", node),
                    ("Sessioninternalip", &ip),
                ],
            );
            if upgrade(&mut s, &head).await.is_err() {
                return gauge.failed();
            }
            // Takes every request the cloud sends and never answers one.
            let open = Open::new(gauge);
            drain(&mut s).await;
            open.closed_by_server();
        }
        Task::Exec => {
            let Ok(Ok(mut s)) = tokio::time::timeout(
                Duration::from_secs(20),
                tls_from(from, local(p.stream), plan.apiserver.clone()),
            )
            .await
            else {
                return gauge.failed();
            };
            let head = format!(
                "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
                 X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n",
                plan.exec_path, p.stream
            );
            if s.write_all(head.as_bytes()).await.is_err() {
                return gauge.failed();
            }
            let open = Open::new(gauge);
            drain(&mut s).await;
            open.closed_by_server();
        }
        Task::Meta(k) => {
            let (node, tls) = &plan.meta_flooders[k];
            let addr = local(p.websocket);
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_secs(20), tls_from(from, addr, tls.clone()))
                    .await
            else {
                return gauge.failed();
            };
            let head = ws_head(
                addr,
                &format!("/{DEFAULT_PROJECT_ID}/{node}/events"),
                &[
                    ("node_id", node),
                    ("project_id", DEFAULT_PROJECT_ID),
                    ("connectionuse", "msg"),
                ],
            );
            if upgrade(&mut s, &head).await.is_err() {
                return gauge.failed();
            }
            let open = Open::new(gauge);
            let (mut rd, mut wr) = tokio::io::split(s);
            let write = async {
                // A per-session salt: a redialled session asks new things again.
                let salt = beehive::new_id().replace('-', "");
                for i in 0u64.. {
                    let (batch, n) = meta_batch(&plan.ns, &format!("{k}{}", &salt[..8]), i);
                    if wr.write_all(&batch).await.is_err() {
                        break;
                    }
                    plan.stats.meta_requests.fetch_add(n, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::select! {
                _ = write => {}
                _ = drain(&mut rd) => {}
            }
            open.closed_by_server();
        }
        Task::Review(k) => {
            let Ok(Ok(s)) = tokio::time::timeout(
                Duration::from_secs(20),
                tls_from(from, local(p.stream), plan.apiserver.clone()),
            )
            .await
            else {
                return gauge.failed();
            };
            let open = Open::new(gauge);
            let (mut rd, mut wr) = tokio::io::split(s);
            let salt = beehive::new_id().replace('-', "");
            let mut buf = vec![0u8; 16 * 1024];
            for i in 0u64.. {
                let head = format!(
                    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\
                     X-Forwarded-Uri: /api/v1/nodes/siege-made-up-{k}-{}-{i}/proxy/metrics\r\n\r\n",
                    p.stream,
                    &salt[..8]
                );
                if wr.write_all(head.as_bytes()).await.is_err() {
                    break;
                }
                plan.stats.review_requests.fetch_add(1, Ordering::Relaxed);
                // One answer before the next request (any bytes of it).
                match tokio::time::timeout(Duration::from_secs(10), rd.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => break,
                }
            }
            open.closed_by_server();
        }
    }
}

/// One round of a metaServer flooder, as edgecore's metaServer sends Applications, and how
/// many requests it holds: a watch of Services with an id of 128 bytes and a label selector
/// of about 6 KiB (the most cloudcore keeps per watch is 8 KiB), new in each round; a list of
/// ConfigMaps with a new selector (the node may not list them: a refusal to remember); the
/// discovery of a made-up API group; and a keepalive.
fn meta_batch(ns: &str, who: &str, i: u64) -> (Vec<u8>, u64) {
    use kubeedge_api::application::Application;
    let app = |verb: &str, key: &str, id: String, option: serde_json::Value| {
        let mut a = Application::request(id, verb, key);
        a.option = Some(option.to_string().into_bytes());
        let content = Content::json(&serde_json::to_value(a).unwrap_or_default())
            .unwrap_or_else(|_| Content::string(""));
        wire::client_frame(
            &Message::new()
                .with_route("metaserver", "dynamiccontroller", "null", "null")
                .with_content(content),
        )
        .to_vec()
    };
    let id = |what: &str| {
        let mut id = format!("{what}-{who}-{i}-");
        id.extend(std::iter::repeat_n('x', 128usize.saturating_sub(id.len())));
        id
    };
    let values: Vec<String> = (0..600).map(|v| format!("v{v}")).collect();
    let selector = format!("siege-{who}-{i} in ({})", values.join(","));
    let mut batch = app(
        "watch",
        "/core/v1/services/null/null",
        id("w"),
        json!({"labelSelector": selector, "watch": true}),
    );
    batch.extend(app(
        "list",
        &format!("/core/v1/configmaps/{ns}/null"),
        id("l"),
        json!({"labelSelector": format!("siege={who}-{i}")}),
    ));
    batch.extend(app(
        "get",
        &format!("/apis/g{i}-{who}.siege.example/v1"),
        id("d"),
        json!({}),
    ));
    batch.extend(wire::client_frame(&wire::keepalive()).to_vec());
    (batch, 3)
}

/// What a flooder writes over and over: a WebSocket ping (answered by a pong), a transport
/// `ping` message with a 16 KiB resource (answered by an echo of it), a `k8s/ca.crt` query
/// (answered with a CA) and a keepalive (so the session is not closed for silence).
fn flood_batch() -> Vec<u8> {
    let text = |m: Message| wire::client_frame(&m).to_vec();
    let mut batch = wire::frame(&[b'p'; 125], wire::OpCode::Ping, true).to_vec();
    batch.extend(text(
        Message::new()
            .with_route("edged", "resource", "r".repeat(16 * 1024), "ping")
            .with_content(Content::string("x")),
    ));
    batch.extend(text(
        Message::new()
            .with_route(
                "edged",
                "resource",
                beehive::constants::resource_type::K8S_CA,
                "query",
            )
            .with_content(Content::string("")),
    ));
    batch.extend(text(wire::keepalive()));
    batch
}

// ------------------------------------------------------------------------- the siege

/// One row of the table.
#[derive(Debug)]
struct Row {
    phase: &'static str,
    connects: Connects,
    peak_rss_kib: u64,
    fds: usize,
    threads: u64,
    tasks: Option<f64>,
    pods: usize,
    api_failed: usize,
    delivery: Delivery,
    took: Duration,
}

impl Row {
    fn lost(&self) -> usize {
        self.delivery.lost
    }

    fn print(&self) {
        let c = &self.connects;
        let q = |p| {
            if c.latencies.is_empty() {
                f64::NAN
            } else {
                ms(percentile(&c.latencies, p))
            }
        };
        println!(
            "{:<9} {:>9.1} {:>9.1} {:>6} {:>10.1} {:>6} {:>7} {:>6} {:>6} {:>9} {:>9} {:>5} {:>7.1}",
            self.phase,
            q(0.5),
            q(0.99),
            c.failed,
            mib(self.peak_rss_kib),
            self.fds,
            self.threads,
            self.tasks
                .map(|t| format!("{t:.0}"))
                .unwrap_or_else(|| "n/a".into()),
            self.lost(),
            self.delivery.not_received,
            self.delivery.not_acked,
            self.api_failed,
            self.took.as_secs_f64(),
        );
    }
}

fn header() {
    println!(
        "{:<9} {:>9} {:>9} {:>6} {:>10} {:>6} {:>7} {:>6} {:>6} {:>9} {:>9} {:>5} {:>7}",
        "phase",
        "p50 ms",
        "p99 ms",
        "failed",
        "peak MiB",
        "fds",
        "threads",
        "tasks",
        "lost",
        "unreceived",
        "unacked",
        "apierr",
        "secs"
    );
}

struct Ctx<'a> {
    args: &'a Siege,
    spec: &'a CloudSpec,
    pid: u32,
    fleet: &'a Fleet,
    pods: Api<Pod>,
    syncs: Api<ObjectSync>,
    sampler: &'a Sampler,
}

/// One legitimate round: every edge (re)connects, then every pod is created (`first`) or
/// changed, and delivery and acknowledgement are awaited.
async fn round(
    ctx: &Ctx<'_>,
    phase: &'static str,
    generation: u64,
    recs: &mut Vec<PodRec>,
) -> anyhow::Result<Row> {
    let began = Instant::now();
    let limit = Duration::from_secs(ctx.args.phase_timeout_secs);
    let connects = ctx
        .fleet
        .connect_all(generation, ctx.args.wave, limit)
        .await;
    println!(
        "  {phase}: {} edges connected in {:.1?} ({} failed)",
        connects.latencies.len() - connects.failed,
        began.elapsed(),
        connects.failed
    );
    let t = Instant::now();
    let api_failed = if recs.is_empty() {
        let (created, failed) = create_pods(&ctx.pods, ctx.fleet, ctx.args.pods).await;
        *recs = created;
        failed
    } else {
        update_pods(&ctx.pods, recs, phase).await
    };
    println!(
        "  {phase}: {} pods written in {:.1?} ({api_failed} API failures)",
        recs.len(),
        t.elapsed()
    );
    let t = Instant::now();
    let delivery = await_delivery(ctx.fleet, recs, &ctx.syncs, limit).await;
    println!(
        "  {phase}: delivered and acknowledged in {:.1?} ({} not received, {} not acknowledged)",
        t.elapsed(),
        delivery.not_received,
        delivery.not_acked
    );
    let text = metrics(ctx.spec).await;
    Ok(Row {
        phase,
        connects,
        peak_rss_kib: ctx.sampler.take_peak(ctx.pid),
        fds: open_fds(ctx.pid),
        threads: threads(ctx.pid),
        tasks: task_gauge(&text),
        pods: recs.len(),
        api_failed,
        delivery,
        took: began.elapsed(),
    })
}

/// Refusals, timeouts and drops cloudcore counted (non-zero families of `/metrics`).
fn print_defences(text: &str) {
    let seen = sum_by_name(text, |n| {
        ["refused", "timed_out", "timeout", "dropped", "rejected"]
            .iter()
            .any(|w| n.contains(w))
    });
    for (name, v) in seen.into_iter().filter(|(_, v)| *v > 0.0) {
        println!("  {name} {v}");
    }
    // What the metaServer and stream floods made cloudcore keep, against its bounds.
    let kept = sum_by_name(text, |n| {
        n.starts_with("dynamiccontroller_")
            && ["listener", "review_cache", "discovery", "informers"]
                .iter()
                .any(|w| n.contains(w))
            || n.starts_with("cloudstream_") && n.contains("cache")
    });
    for (name, v) in kept {
        println!("  {name} {v}");
    }
}

async fn siege(args: Siege) -> anyhow::Result<()> {
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("cloudcore-siege-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("ca"))?;
    // Our own CA in the files cloudhub reads first, so edge certificates are signed here.
    let ca = pki::CertificateAuthority::generate()?;
    pki::write_pem_pair(
        &dir.join("ca/rootCA.crt"),
        &dir.join("ca/rootCA.key"),
        &pki::CertAndKey {
            cert_der: ca.cert_der().to_vec(),
            key_der: ca.key_der().to_vec(),
        },
    )?;

    let env = k8s_testenv::env();
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    // Free ports are picked before cloudcore binds them: another process on the machine may
    // take one meanwhile, so a start-up that failed to bind is tried again on new ports.
    let mut attempt = 0;
    let (spec, mut cloud) = loop {
        attempt += 1;
        let mut spec = CloudSpec::for_testenv(&dir)?;
        spec.log_level = args.log_level.clone();
        let mut yaml: serde_json::Value = serde_saphyr::from_str(&spec.render()?)?;
        yaml["modules"]["cloudHub"]["nodeLimit"] =
            serde_json::Value::from((args.nodes + args.flooders + args.meta_flooders + 100) as u64);
        std::fs::write(spec.config_file(), serde_saphyr::to_string(&yaml)?)?;
        let mut cloud = start_cloudcore(&spec, &args.log_level)?;
        match wait_ready(&spec, &mut cloud).await {
            Ok(()) => break (spec, cloud),
            Err(e) if attempt < 3 && e.to_string().contains("Address already in use") => {
                println!("cloudcore could not bind a port; trying other ports");
            }
            Err(e) => return Err(e),
        }
    };
    let pid = cloud.id();
    println!(
        "cloudcore pid {pid} ready in {:.1?}: websocket {}, https {}, stream {}, tunnel {}; folder {}",
        began.elapsed(),
        spec.ports.websocket,
        spec.ports.https,
        spec.ports.stream,
        spec.ports.tunnel,
        dir.display()
    );

    // Nodes and certificates.
    let ns = k8s_testenv::namespace("siege").await;
    let names: Vec<String> = (0..args.nodes).map(|i| format!("siege-edge-{i}")).collect();
    let flooder_names: Vec<String> = (0..args.flooders)
        .map(|i| format!("siege-flood-{i}"))
        .collect();
    let meta_names: Vec<String> = (0..args.meta_flooders)
        .map(|i| format!("siege-meta-{i}"))
        .collect();
    let tunnel_name = "siege-tunnel".to_owned();
    let nodes_api = Api::<Node>::all(client.clone());
    let t = Instant::now();
    let all_nodes: Vec<&String> = names
        .iter()
        .chain(&flooder_names)
        .chain(&meta_names)
        .chain(std::iter::once(&tunnel_name))
        .collect();
    let created: Vec<_> = futures::stream::iter(all_nodes)
        .map(|name| {
            let api = nodes_api.clone();
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"node-role.kubernetes.io/edge": ""}},
                }))?;
                let params = PostParams::default();
                retry(|| api.create(&params, &node)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(API_CONCURRENCY)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let tls_for = |name: &str| -> anyhow::Result<Arc<ClientConfig>> {
        let c = ca.issue(&pki::IssueOptions::edge(name))?;
        Ok(Arc::new(pki::tls::client_config(
            ca.cert_der(),
            Some((&c.cert_der, &c.key_der)),
        )?))
    };
    let edges: Vec<Arc<Edge>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            Ok(Arc::new(Edge {
                name: name.clone(),
                ip: edge_ip(i),
                tls: tls_for(name)?,
                connected: Mutex::new(None),
                pods: Mutex::default(),
            }))
        })
        .collect::<anyhow::Result<_>>()?;
    println!(
        "{} nodes created and certificates signed in {:.1?}",
        names.len() + flooder_names.len() + meta_names.len() + 1,
        t.elapsed()
    );

    // The pod the exec sessions ask for, on the node whose tunnel never answers.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let exec_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "siege-exec"},
        "spec": {"nodeName": tunnel_name, "containers": [{"name": "c", "image": "nginx"}]},
    }))?;
    pods.create(&PostParams::default(), &exec_pod).await?;
    let pki_dir = env.pki();
    let apiserver = Arc::new(pki::tls::client_config(
        &pem_der(&pki_dir.join("ca.crt"))?,
        Some((
            &pem_der(&pki_dir.join("kubelet-client.crt"))?,
            &pem_der(&pki_dir.join("kubelet-client.key"))?,
        )),
    )?);
    let token = std::fs::read_to_string(spec.token_file())?;
    let jwt = pki::split_token(&token)
        .map(|(_, j)| j.to_owned())
        .context("token")?;
    let plan = Plan {
        ports: spec.ports,
        ca_only: Arc::new(pki::tls::client_config(ca.cert_der(), None)?),
        apiserver,
        flooders: flooder_names
            .iter()
            .map(|n| Ok((n.clone(), tls_for(n)?)))
            .collect::<anyhow::Result<_>>()?,
        tunnel: (tunnel_name.clone(), tls_for(&tunnel_name)?),
        meta_flooders: meta_names
            .iter()
            .map(|n| Ok((n.clone(), tls_for(n)?)))
            .collect::<anyhow::Result<_>>()?,
        ns: ns.clone(),
        jwt,
        exec_path: format!("/exec/{ns}/siege-exec/c?command=sh&input=1&output=1&tty=1"),
        redial: Duration::from_millis(args.redial_ms),
        stats: Arc::default(),
    };

    let fleet = Fleet::start(edges, args.edge_threads, spec.ports.websocket_addr(), &ns);
    let sampler = Sampler::start(pid, args.rss_abort_mib * 1024);
    let ctx = Ctx {
        args: &args,
        spec: &spec,
        pid,
        fleet: &fleet,
        pods,
        syncs: Api::<ObjectSync>::namespaced(client.clone(), &ns),
        sampler: &sampler,
    };
    let mut recs = Vec::new();
    let mut rows = Vec::new();
    let alive = |cloud: &mut Process| -> anyhow::Result<()> {
        match cloud.try_wait() {
            Some(status) => bail!("cloudcore exited ({status}):\n{}", cloud.log_tail(30)),
            None => Ok(()),
        }
    };

    println!(
        "\nphase 1/3: baseline ({} nodes × {} pods)",
        args.nodes, args.pods
    );
    // The first connection of an edge does one-time work (the node's first session); the
    // baseline measures reconnects, like the later rounds.
    let first = fleet
        .connect_all(0, args.wave, Duration::from_secs(args.phase_timeout_secs))
        .await;
    println!(
        "  first connection: {} edges connected ({} failed), p99 {:.1} ms",
        first.latencies.len() - first.failed,
        first.failed,
        first
            .latencies
            .last()
            .map_or(f64::NAN, |_| ms(percentile(&first.latencies, 0.99)))
    );
    sampler.take_peak(pid);
    rows.push(round(&ctx, "baseline", 1, &mut recs).await?);
    alive(&mut cloud)?;
    let base_fds = rows[0].fds;

    println!(
        "\nphase 2/3: attack ({} idle, {} slow uploads, {} flooders, {} execs, {} metaServer flooders, {} stream reviewers; idle and slow spread over {} addresses; ramp {} s)",
        args.idle,
        args.slow_uploads,
        args.flooders,
        args.execs,
        args.meta_flooders,
        args.stream_reviewers,
        args.attacker_ips,
        args.ramp_secs
    );
    let attack_began = Instant::now();
    let attack = Attack::start(plan, &args, 2);
    let stats = attack.stats.clone();
    let guard = {
        let (over, stop) = (sampler.over.clone(), attack.stop.clone());
        tokio::spawn(async move {
            while !over.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = stop.send(true);
            println!("  !! cloudcore RSS passed --rss-abort-mib: attack stopped early");
        })
    };
    tokio::time::sleep(Duration::from_secs(args.ramp_secs)).await;
    println!(
        "  after the ramp: cloudcore RSS {:.1} MiB, {} fds",
        mib(rss_kib(pid)),
        open_fds(pid)
    );
    stats.print();
    let mut row = round(&ctx, "attack", 2, &mut recs).await?;
    let hold = Duration::from_secs(args.attack_secs).saturating_sub(attack_began.elapsed());
    if !hold.is_zero() {
        println!("  attack goes on for {hold:.1?}");
        tokio::time::sleep(hold).await;
    }
    // The ramp and the hold belong to the attack's peak too.
    row.peak_rss_kib = row.peak_rss_kib.max(ctx.sampler.take_peak(pid));
    println!(
        "  at the end of the attack ({:.1?}):",
        attack_began.elapsed()
    );
    stats.print();
    print_defences(&metrics(&spec).await);
    guard.abort();
    let attack_fds = open_fds(pid);
    rows.push(row);
    let stats = attack.stop();
    alive(&mut cloud)?;

    println!("\nphase 3/3: after the attack");
    let fd_target = base_fds + base_fds / 100 + 10;
    let t = Instant::now();
    let settle = Duration::from_secs(args.settle_secs);
    while open_fds(pid) > fd_target && t.elapsed() < settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled_fds = open_fds(pid);
    println!(
        "  fds {attack_fds} at the end of the attack → {settled_fds} {:.1?} after it stopped (baseline {base_fds})",
        t.elapsed()
    );
    sampler.take_peak(pid);
    rows.push(round(&ctx, "after", 3, &mut recs).await?);
    alive(&mut cloud)?;

    println!(
        "\ncloudcore siege: {} legitimate edges × {} pods per phase; connect = client start → Connected",
        args.nodes, args.pods
    );
    header();
    for r in &rows {
        r.print();
    }
    let (base, attack_row, after) = (&rows[0], &rows[1], &rows[2]);
    let p99 = |r: &Row| percentile(&r.connects.latencies, 0.99);
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let p99_ok = p99(attack_row) <= p99(base) * 2;
    let rss_ok = attack_row.peak_rss_kib <= base.peak_rss_kib + 256 * 1024;
    let fds_ok = settled_fds <= fd_target && after.fds <= fd_target;
    println!("targets:");
    println!(
        "  attack connect p99 {:.1} ms ≤ 2 × baseline {:.1} ms: {}",
        ms(p99(attack_row)),
        ms(p99(base)),
        verdict(p99_ok)
    );
    println!(
        "  attack peak RSS {:.1} MiB ≤ baseline {:.1} MiB + 256 MiB: {}",
        mib(attack_row.peak_rss_kib),
        mib(base.peak_rss_kib),
        verdict(rss_ok)
    );
    let lost: usize = rows.iter().map(Row::lost).sum();
    println!(
        "  lost {lost} of {} pod versions: {}",
        rows.iter().map(|r| r.pods).sum::<usize>(),
        verdict(lost == 0)
    );
    println!(
        "  fds back to baseline after the attack: {settled_fds} ≤ {fd_target} (baseline {base_fds} + 1% + 10), {} at the end: {}",
        after.fds,
        verdict(fds_ok)
    );
    println!(
        "  tasks: {}",
        if base.tasks.is_some() {
            "from cloudcore's *_tasks gauges"
        } else {
            "not exposed by cloudcore's /metrics; the threads column counts OS threads"
        }
    );
    let st = &stats;
    println!(
        "attack totals: idle {} opened, slow uploads {}, flooder sessions {} ({:.1} MiB), tunnels {}, execs {}, metaServer requests {}, stream reviews {}",
        st.idle.opened.load(Ordering::Relaxed),
        st.slow.opened.load(Ordering::Relaxed),
        st.flood.opened.load(Ordering::Relaxed),
        st.flood_bytes.load(Ordering::Relaxed) as f64 / 1048576.0,
        st.tunnel.opened.load(Ordering::Relaxed),
        st.exec.opened.load(Ordering::Relaxed),
        st.meta_requests.load(Ordering::Relaxed),
        st.review_requests.load(Ordering::Relaxed),
    );

    fleet.stop();
    drop(sampler);
    let (_, graceful) = cloud.terminate(Duration::from_secs(20)).await;
    println!(
        "cloudcore stopped {}; whole run {:.1?}",
        if graceful {
            "on SIGTERM"
        } else {
            "with SIGKILL"
        },
        began.elapsed()
    );
    if args.keep {
        println!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if !(p99_ok && rss_ok && fds_ok && lost == 0) {
        bail!("siege targets failed");
    }
    Ok(())
}
