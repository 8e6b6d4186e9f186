//! Several cloudcore replicas serving the edge together (active-active) against the test API
//! server (k8s-testenv), measured from outside in one run:
//!
//! 1. **single**: one cloudcore process with N Rust edges connected: connect time, RSS before
//!    and after, KiB per node, API server connections, and how long the Nodes' `cloudcore`
//!    annotations lag behind the connects.
//! 2. **replicas**: three cloudcore processes (`replicas.address` 127.0.0.11/12/13, own ports,
//!    one CA: Secret `kubeedge/casecret`, written here before any replica starts) behind a
//!    round-robin TCP balancer (`edgecore_interop::Balancer`, this example re-executed with
//!    `balance`), 3N edges connected through it: connect time, KiB per node per replica beside
//!    the single figure, the spread of the nodes over the replicas, the annotation lag.
//! 3. **latency**: pods created for a sample of nodes spread over every replica; p50/p99 of
//!    the time until the edge has them, overall and per replica.
//! 4. **failover**: while the sample pods keep changing (and new ones are created), one replica
//!    is SIGKILLed; the time until all its nodes are connected to the others, and every pod
//!    version created or changed meanwhile and after must reach its node (lost ones counted).
//!
//! Then PASS/FAIL per target (replica KiB/node within 1.2× of single, failover under 30 s,
//! no lost pod version); the exit status is non-zero on FAIL.
//!
//! Edges are the Rust edge client (`edge::hub::HubClient`), each dialing from a loopback
//! address of its own (`127.10.x.y`); they run in child processes (this example re-executed
//! with `edges`, at most `--per-process` each) that sign their certificates with the run's CA
//! and report connects and received pods on stdout. The balancer holds two descriptors per
//! edge, so it runs in a process of its own. Build the cloudcore binary first (found beside
//! this example, or at `CLOUDCORE_BIN`):
//!
//! ```text
//! cargo build --release --example cloudcore --example replicas_load
//! target/release/examples/replicas_load --nodes 3000
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args as ClapArgs, Parser, Subcommand};
use edge::hub::{HubClient, HubClientConfig, HubEvent};
use edgecore_interop::{Balancer, CloudSpec, Metrics, Process, http_get};
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::{info, warn};

#[path = "support/apicalls.rs"]
mod apicalls;
#[path = "support/cloudcore.rs"]
mod cloudcore_process;
#[path = "support/latency.rs"]
mod latency;
#[path = "support/procstat.rs"]
mod procstat;

use apicalls::{retry, rv_of};
use cloudcore_process::{settled_rss, start_cloudcore, wait_ready};
use latency::{ms, percentile};
use procstat::{connections_to, mib, open_fds, threads};

/// Several cloudcore replicas behind a balancer, against the test API server.
#[derive(Debug, Parser)]
#[command(name = "replicas_load")]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    #[command(flatten)]
    run: Run,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// The balancer: prints `READY <addr>`, answers `stats` with `ACTIVE <n>…` (connections
    /// per backend), ends when stdin closes.
    Balance {
        /// Backends (`ip:port`), in turn.
        #[arg(long, value_delimiter = ',')]
        backends: Vec<SocketAddr>,
    },
    /// Simulated edges `<prefix>-<from>` … `<prefix>-<to - 1>`: prints `READY`, connects all on
    /// `go`, reports `C <i> <ms>` (connected), `D <i> <ms>` (disconnected) and
    /// `P <i> <pod> <rv> <ms>` (a pod of namespace `--ns` received; times in Unix ms); ends
    /// when stdin closes.
    Edges(EdgesArgs),
}

#[derive(Debug, Clone, ClapArgs)]
struct EdgesArgs {
    /// Where the edges dial (`ip:port`).
    #[arg(long)]
    server: SocketAddr,
    /// Folder with the CA (`ca.crt`, `ca.key`, PEM) that signs the edge certificates.
    #[arg(long)]
    ca: PathBuf,
    #[arg(long)]
    prefix: String,
    #[arg(long)]
    from: usize,
    #[arg(long)]
    to: usize,
    /// The namespace of the pods reported.
    #[arg(long, default_value = "")]
    ns: String,
    /// Current-thread runtimes the edges are dealt over.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Edges connecting at once (per process).
    #[arg(long, default_value_t = 200)]
    connect_concurrency: usize,
}

#[derive(Debug, Clone, ClapArgs)]
struct Run {
    /// Edges per replica (the single cloudcore has this many; the three replicas 3×).
    #[arg(long, default_value_t = 3000)]
    nodes: usize,
    /// Nodes whose pod-to-edge latency is measured (spread evenly over the replicas); their
    /// pods are the ones that keep changing during the failover.
    #[arg(long, default_value_t = 300)]
    sample: usize,
    /// Edges per simulator process.
    #[arg(long, default_value_t = 3000)]
    per_process: usize,
    /// `maxUnauthenticatedPerIP` of the replicas' WebSocket listener: every edge arrives from
    /// the balancer's address (KubeEdge default 64).
    #[arg(long, default_value_t = 10_000)]
    max_unauthenticated_per_ip: u64,
    /// Seconds pods keep changing after the kill (at least until the moved nodes are back).
    #[arg(long, default_value_t = 20)]
    churn_after_secs: u64,
    /// cloudcore's log filter (its logs are in the run folder).
    #[arg(long, default_value = "warn")]
    log_level: String,
    /// Keep the run folder (configs, CA, logs) after a passing run too.
    #[arg(long)]
    keep: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.role {
        Some(Role::Balance { backends }) => rt.block_on(balance(backends)),
        Some(Role::Edges(args)) => edges(args),
        None => rt.block_on(run(cli.run)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    beehive::now_millis() as u64
}

/// Lines of this process's stdin, read on a plain thread (this package's tokio has no io-std).
fn stdin_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

// ------------------------------------------------------------------------- balancer role

async fn balance(backends: Vec<SocketAddr>) -> anyhow::Result<()> {
    let lb = Balancer::start("127.0.0.1:0".parse()?, backends).await?;
    println!("READY {}", lb.addr());
    std::io::stdout().flush()?;
    let mut lines = stdin_lines();
    while let Some(line) = lines.recv().await {
        if line.trim() == "stats" {
            let active: Vec<String> = lb.active().iter().map(usize::to_string).collect();
            println!("ACTIVE {}", active.join(" "));
            std::io::stdout().flush()?;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------- edges role

/// Edge `i` dials from its own loopback address, as real edges have their own.
fn node_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 10, (i / 250) as u8, (i % 250 + 1) as u8))
}

fn edges(args: EdgesArgs) -> anyhow::Result<()> {
    let ca = pki::CertificateAuthority::from_pem(
        &std::fs::read_to_string(args.ca.join("ca.crt"))?,
        &std::fs::read_to_string(args.ca.join("ca.key"))?,
    )?;
    let range: Vec<usize> = (args.from..args.to).collect();
    let tls: Vec<Arc<rustls::ClientConfig>> = range
        .iter()
        .map(|i| {
            let c = ca.issue(&pki::IssueOptions::edge(&format!("{}-{i}", args.prefix)))?;
            Ok(Arc::new(pki::tls::client_config(
                ca.cert_der(),
                Some((&c.cert_der, &c.key_der)),
            )?))
        })
        .collect::<anyhow::Result<_>>()?;
    // One writer: lines from every runtime, flushed when none is waiting.
    let (out, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut w = std::io::BufWriter::new(std::io::stdout());
        while let Ok(line) = lines.recv() {
            let _ = writeln!(w, "{line}");
            while let Ok(more) = lines.try_recv() {
                let _ = writeln!(w, "{more}");
            }
            let _ = w.flush();
        }
    });
    let _ = out.send(format!("READY {}", range.len()));
    let stdin = std::io::stdin();
    let mut first = String::new();
    stdin.lock().read_line(&mut first)?;
    if first.trim() != "go" {
        return Ok(());
    }
    let stop = Arc::new(tokio::sync::Notify::new());
    let threads = args.threads.max(1);
    let mut shards = Vec::new();
    let tls = Arc::new(tls);
    for t in 0..threads {
        let (args, tls, out, stop) = (args.clone(), tls.clone(), out.clone(), stop.clone());
        shards.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let sem = Arc::new(tokio::sync::Semaphore::new(
                    args.connect_concurrency.div_ceil(threads).max(1),
                ));
                let mut clients = Vec::new();
                let prefix = format!("{}/pod/", args.ns);
                for k in (t..tls.len()).step_by(threads) {
                    let i = args.from + k;
                    let node = format!("{}-{i}", args.prefix);
                    let mut cfg = HubClientConfig::new(&node, args.server.to_string());
                    cfg.queue_capacity = 16;
                    cfg.local_address = Some(node_ip(i));
                    let permit = sem.clone().acquire_owned().await?;
                    let (client, mut events) = HubClient::start(cfg, tls[k].clone());
                    clients.push(client);
                    let (out, prefix) = (out.clone(), prefix.clone());
                    tokio::spawn(async move {
                        let mut permit = Some(permit);
                        while let Some(ev) = events.recv().await {
                            let line = match ev {
                                HubEvent::Connected => {
                                    permit.take();
                                    format!("C {i} {}", now_ms())
                                }
                                HubEvent::Disconnected { .. } => format!("D {i} {}", now_ms()),
                                HubEvent::Message(m) => {
                                    let Some(pod) = m.route.resource.strip_prefix(&prefix) else {
                                        continue;
                                    };
                                    format!(
                                        "P {i} {pod} {} {}",
                                        m.header.resource_version,
                                        now_ms()
                                    )
                                }
                            };
                            if out.send(line).is_err() {
                                break;
                            }
                        }
                    });
                }
                stop.notified().await;
                for c in &clients {
                    c.stop();
                }
                anyhow::Ok(())
            })
        }));
    }
    // Until the parent closes stdin (or is gone).
    for line in stdin.lock().lines() {
        if line.is_err() {
            break;
        }
    }
    stop.notify_waiters();
    std::process::exit(0);
}

// ------------------------------------------------------------------------- the run's view of the edges

/// What the simulated edges reported, by node index.
#[derive(Default)]
struct Board {
    /// Clients whose session is up.
    up: AtomicUsize,
    state: Mutex<BoardState>,
}

#[derive(Default)]
struct BoardState {
    /// Every connect (node, Unix ms).
    connects: Vec<(usize, u64)>,
    /// Every disconnect (node, Unix ms).
    disconnects: Vec<(usize, u64)>,
    /// Pod name → (highest resourceVersion received, Unix ms it was first received).
    pods: HashMap<String, (u64, u64)>,
}

impl Board {
    fn record(&self, line: &str) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        match w.as_slice() {
            ["C", i, at] => {
                self.up.fetch_add(1, Ordering::Relaxed);
                lock(&self.state).connects.push((num(i) as usize, num(at)));
            }
            ["D", i, at] => {
                self.up.fetch_sub(1, Ordering::Relaxed);
                lock(&self.state)
                    .disconnects
                    .push((num(i) as usize, num(at)));
            }
            ["P", _, pod, rv, at] => {
                let mut s = lock(&self.state);
                let e = s.pods.entry((*pod).to_owned()).or_insert((0, num(at)));
                e.0 = e.0.max(num(rv));
            }
            _ => {}
        }
    }

    fn up(&self) -> usize {
        self.up.load(Ordering::Relaxed)
    }

    /// Highest version of `pod` received, and when it was first received.
    fn pod(&self, pod: &str) -> Option<(u64, u64)> {
        lock(&self.state).pods.get(pod).copied()
    }
}

/// A child process of this example (balancer or edges); killed on drop.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Helper {
    fn spawn(args: &[String]) -> anyhow::Result<(Helper, BufReader<std::process::ChildStdout>)> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok((Helper { child, stdin }, stdout))
    }

    fn send(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Closing stdin ends it; a grace, then SIGKILL.
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_ready(out: &mut impl BufRead, what: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            bail!("{what} exited before it was ready");
        }
        if let Some(rest) = line.trim().strip_prefix("READY") {
            return Ok(rest.trim().to_owned());
        }
    }
}

/// Simulated edges `<prefix>-0` … `<prefix>-<n - 1>` dialing `server`, split over processes;
/// all are ready (certificates signed) but not dialing yet.
struct Fleet {
    procs: Vec<Helper>,
    board: Arc<Board>,
    n: usize,
}

impl Fleet {
    fn start(
        run: &Run,
        dir: &Path,
        server: SocketAddr,
        prefix: &str,
        n: usize,
        ns: &str,
    ) -> anyhow::Result<Fleet> {
        let board = Arc::new(Board::default());
        let mut procs = Vec::new();
        let t = Instant::now();
        for from in (0..n).step_by(run.per_process.max(1)) {
            let to = (from + run.per_process).min(n);
            let args: Vec<String> = [
                "edges",
                "--server",
                &server.to_string(),
                "--ca",
                &dir.display().to_string(),
                "--prefix",
                prefix,
                "--from",
                &from.to_string(),
                "--to",
                &to.to_string(),
                "--ns",
                ns,
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            procs.push(Helper::spawn(&args)?);
        }
        // Each signs its certificates meanwhile.
        let mut helpers = Vec::new();
        for (helper, mut out) in procs {
            read_ready(&mut out, "an edge simulator")?;
            let b = board.clone();
            std::thread::spawn(move || {
                for line in out.lines() {
                    let Ok(line) = line else { break };
                    b.record(&line);
                }
            });
            helpers.push(helper);
        }
        let procs = helpers;
        info!(
            n,
            processes = procs.len(),
            "edge certificates signed in {:.1?}",
            t.elapsed()
        );
        Ok(Fleet { procs, board, n })
    }

    /// Every edge starts dialing; returns when all are connected: the time it took.
    async fn connect(&mut self, limit: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        for p in &mut self.procs {
            p.send("go")?;
        }
        while self.board.up() < self.n {
            if t.elapsed() > limit {
                bail!(
                    "only {}/{} edges connected within {limit:?}",
                    self.board.up(),
                    self.n
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(t.elapsed())
    }
}

// ------------------------------------------------------------------------- measuring cloudcore

/// One cloudcore process of the run.
struct Core {
    process: Process,
    spec: CloudSpec,
    address: String,
    pid: u32,
    rss_before: u64,
}

impl Core {
    async fn start(
        run: &Run,
        dir: &Path,
        address: &str,
        node_limit: usize,
        per_ip: Option<u64>,
    ) -> anyhow::Result<Core> {
        let spec = CloudSpec::for_testenv(dir)?;
        let (mut process, _) = start_cloudcore(&spec, &run.log_level, |c| {
            let mut replicas = serde_json::Map::new();
            replicas.insert("address".into(), address.into());
            c["replicas"] = replicas.into();
            let hub = &mut c["modules"]["cloudHub"];
            hub["nodeLimit"] = serde_json::Value::from(node_limit as u64 + 100);
            if let Some(per_ip) = per_ip {
                hub["websocket"]["limits"]["maxUnauthenticatedPerIP"] = per_ip.into();
            }
        })?;
        wait_ready(&mut process, &spec).await?;
        let pid = process.id();
        Ok(Core {
            process,
            spec,
            address: address.to_owned(),
            pid,
            rss_before: 0,
        })
    }

    async fn metrics(&self) -> Metrics {
        let text = http_get(
            self.spec.ports.monitor_addr(),
            "/metrics",
            Duration::from_secs(10),
        )
        .await
        .map(|r| r.text())
        .unwrap_or_default();
        Metrics(text)
    }

    /// Sessions cloudhub holds.
    async fn sessions(&self) -> usize {
        self.metrics().await.connected_nodes() as usize
    }

    /// edgecontroller's `connected` events (they set the `cloudcore` annotation): handled,
    /// failed, refused at enqueueing.
    async fn connection_events(&self) -> (f64, f64, f64) {
        let m = self.metrics().await;
        let kind = [("kind", "connection")];
        let get = |name: &str, labels: &[(&str, &str)]| m.value(name, labels).unwrap_or(0.0);
        (
            get("edgecontroller_requests_handled_total", &kind),
            get("edgecontroller_requests_failed_total", &kind),
            get(
                "edgecontroller_requests_rejected_total",
                &[("kind", "connection"), ("reason", "queue_full")],
            ) + get(
                "edgecontroller_requests_rejected_total",
                &[("kind", "connection"), ("reason", "node_share")],
            ),
        )
    }

    /// Connections refused on accept by `maxUnauthenticatedPerIP`.
    async fn refused_per_ip(&self) -> f64 {
        self.metrics()
            .await
            .value(
                "cloudcore_listener_refused_total",
                &[("listener", "websocket"), ("reason", "per_ip")],
            )
            .unwrap_or(0.0)
    }
}

/// The API server's port (from the kubeconfig).
async fn apiserver_port() -> anyhow::Result<u16> {
    let config = k8s_testenv::config().await;
    config
        .cluster_url
        .port_u16()
        .context("the API server URL has no port")
}

/// The most API server connections each of some processes had, sampled every 100 ms on a
/// thread of its own until dropped.
struct ConnPeaks {
    peaks: Arc<Vec<AtomicUsize>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl ConnPeaks {
    fn start(pids: Vec<u32>, port: u16) -> ConnPeaks {
        let peaks: Arc<Vec<AtomicUsize>> =
            Arc::new(pids.iter().map(|_| AtomicUsize::new(0)).collect());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s) = (peaks.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for (pid, peak) in pids.iter().zip(p.iter()) {
                    peak.fetch_max(connections_to(*pid, port), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        ConnPeaks { peaks, stop }
    }

    fn peak(&self, k: usize) -> usize {
        self.peaks[k].load(Ordering::Relaxed)
    }
}

impl Drop for ConnPeaks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The Nodes labelled `replicas-load=<phase>` and the replica their `cloudcore` annotation
/// names ("" when none).
async fn holders(nodes: &Api<Node>, phase: &str) -> anyhow::Result<HashMap<String, String>> {
    let list = nodes
        .list_metadata(&ListParams::default().labels(&format!("replicas-load={phase}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|n| {
            let holder = n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("cloudcore"))
                .cloned()
                .unwrap_or_default();
            Some((n.metadata.name?, holder))
        })
        .collect())
}

/// Polls until every Node of `phase` names one of `addresses` (at most `limit`); returns
/// when that was (or `None`).
async fn wait_annotated(
    nodes: &Api<Node>,
    phase: &str,
    addresses: &[String],
    limit: Duration,
) -> anyhow::Result<Option<Instant>> {
    let t = Instant::now();
    loop {
        let h = holders(nodes, phase).await?;
        if !h.is_empty() && h.values().all(|v| addresses.contains(v)) {
            return Ok(Some(Instant::now()));
        }
        if t.elapsed() > limit {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

const API_CONCURRENCY: usize = 32;

/// Creates Nodes `<prefix>-0` … labelled `replicas-load=<phase>`.
async fn create_nodes(
    nodes: &Api<Node>,
    prefix: &str,
    phase: &str,
    n: usize,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| async move {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": format!("{prefix}-{i}"), "labels": {
                    "node-role.kubernetes.io/edge": "", "replicas-load": phase}},
            }))?;
            let params = PostParams::default();
            retry(|| nodes.create(&params, &node)).await?;
            Ok(())
        })
        .buffer_unordered(API_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    info!(n, "Nodes created in {:.1?}", t.elapsed());
    Ok(())
}

/// The run's CA: in Secret `kubeedge/casecret` (where every replica sharing the API server
/// finds it, create-only), and as PEM files for the edge simulators.
async fn shared_ca(client: &kube::Client, dir: &Path) -> anyhow::Result<()> {
    let ca = pki::CertificateAuthority::generate()?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": cloudhub::NAMESPACE}}))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(cloudhub::CA_SECRET.into()),
            namespace: Some(cloudhub::NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            ("cadata".to_owned(), ByteString(ca.cert_der().to_vec())),
            ("cakeydata".to_owned(), ByteString(ca.key_der().to_vec())),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), cloudhub::NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .context("Secret kubeedge/casecret (a fresh test API server has none)")?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
    std::fs::write(dir.join("ca.key"), ca.key_pem())?;
    Ok(())
}

fn summary(sorted: &[Duration]) -> String {
    if sorted.is_empty() {
        return "none".into();
    }
    format!(
        "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} pods)",
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.99)),
        ms(sorted[sorted.len() - 1]),
        sorted.len()
    )
}

/// One pod version the run created or changed, which its node must receive.
#[derive(Debug, Clone)]
struct Change {
    pod: String,
    rv: u64,
}

// ------------------------------------------------------------------------- the run

/// What one replica measured with 3N edges connected through the balancer.
struct ReplicaFigures {
    rss: u64,
    sessions: usize,
    per_node: f64,
    conns: usize,
    conns_peak: usize,
    refused: f64,
    fds: usize,
    threads: u64,
    /// edgecontroller `connected` events handled, failed, refused.
    connection_events: (f64, f64, f64),
}

impl ReplicaFigures {
    fn line(&self, core: &Core, single_per_node: f64) -> String {
        format!(
            "{} nodes, RSS {:.1} → {:.1} MiB, {:.1} KiB/node ({:.2}× single), API server connections {} (peak {}), {} fds, {} threads, refused by maxUnauthenticatedPerIP {}; connected events handled/failed/refused {}/{}/{}",
            self.sessions,
            mib(core.rss_before),
            mib(self.rss),
            self.per_node,
            self.per_node / single_per_node,
            self.conns,
            self.conns_peak,
            self.fds,
            self.threads,
            self.refused,
            self.connection_events.0,
            self.connection_events.1,
            self.connection_events.2
        )
    }
}

/// What the single-cloudcore phase measured.
struct Single {
    connect: Duration,
    rss_before: u64,
    rss_after: u64,
    per_node: f64,
    api_conns: usize,
    api_conns_peak: usize,
    fds: usize,
    threads: u64,
    annotation_lag: Option<Duration>,
}

async fn run(run: Run) -> anyhow::Result<()> {
    let n = run.nodes;
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("replicas-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let api_port = apiserver_port().await?;
    shared_ca(&client, &dir).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    println!(
        "replicas_load: {n} edges per replica, run folder {}",
        dir.display()
    );

    // 1. One cloudcore, N edges.
    create_nodes(&nodes, "rla", "single", n).await?;
    let mut single_core = Core::start(&run, &dir.join("single"), "127.0.0.10", n, None).await?;
    single_core.rss_before = settled_rss(single_core.pid).await;
    let mut fleet = Fleet::start(
        &run,
        &dir,
        single_core.spec.ports.websocket_addr(),
        "rla",
        n,
        "",
    )?;
    let peaks = ConnPeaks::start(vec![single_core.pid], api_port);
    let connect = fleet.connect(Duration::from_secs(300)).await?;
    let connected_at = Instant::now();
    println!(
        "single: {n} edges connected in {:.2} s",
        connect.as_secs_f64()
    );
    let annotated = wait_annotated(
        &nodes,
        "single",
        &["127.0.0.10".to_owned()],
        Duration::from_secs(180),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let peak = peaks.peak(0);
    drop(peaks);
    let rss_after = settled_rss(single_core.pid).await;
    let single = Single {
        connect,
        rss_before: single_core.rss_before,
        rss_after,
        per_node: (rss_after as f64 - single_core.rss_before as f64) / n as f64,
        api_conns: connections_to(single_core.pid, api_port),
        api_conns_peak: peak,
        fds: open_fds(single_core.pid),
        threads: threads(single_core.pid),
        annotation_lag: annotated.map(|t| t.duration_since(connected_at)),
    };
    println!(
        "single: RSS {:.1} → {:.1} MiB, {:.1} KiB per node; API server connections {} (peak {} while connecting); annotations complete {}",
        mib(single.rss_before),
        mib(single.rss_after),
        single.per_node,
        single.api_conns,
        single.api_conns_peak,
        lag_text(single.annotation_lag),
    );
    drop(fleet);
    single_core.process.terminate(Duration::from_secs(20)).await;
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("replicas-load=single"),
        )
        .await?;

    // 2. Three replicas behind the balancer, 3N edges.
    let total = 3 * n;
    create_nodes(&nodes, "rlb", "replicas", total).await?;
    let addresses: Vec<String> = (11..=13).map(|k| format!("127.0.0.{k}")).collect();
    let mut cores = Vec::new();
    for a in &addresses {
        let mut core = Core::start(
            &run,
            &dir.join(a),
            a,
            total,
            Some(run.max_unauthenticated_per_ip),
        )
        .await?;
        core.rss_before = settled_rss(core.pid).await;
        cores.push(core);
    }
    let backends: Vec<String> = cores
        .iter()
        .map(|c| c.spec.ports.websocket_addr().to_string())
        .collect();
    let (mut lb, mut lb_out) = Helper::spawn(&[
        "balance".to_owned(),
        "--backends".to_owned(),
        backends.join(","),
    ])?;
    let lb_addr: SocketAddr = read_ready(&mut lb_out, "the balancer")?.parse()?;
    let ns = k8s_testenv::namespace("replicas").await;
    let mut fleet = Fleet::start(&run, &dir, lb_addr, "rlb", total, &ns)?;
    let board = fleet.board.clone();
    let peaks = ConnPeaks::start(cores.iter().map(|c| c.pid).collect(), api_port);
    let connect3 = fleet.connect(Duration::from_secs(300)).await?;
    let connected_at = Instant::now();
    println!(
        "replicas: {total} edges connected through the balancer in {:.2} s",
        connect3.as_secs_f64()
    );
    let annotated =
        wait_annotated(&nodes, "replicas", &addresses, Duration::from_secs(180)).await?;
    let lag3 = annotated.map(|t| t.duration_since(connected_at));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut per_replica = Vec::new();
    for (k, c) in cores.iter().enumerate() {
        let rss = settled_rss(c.pid).await;
        let sessions = c.sessions().await;
        per_replica.push(ReplicaFigures {
            rss,
            sessions,
            per_node: (rss as f64 - c.rss_before as f64) / sessions.max(1) as f64,
            conns: connections_to(c.pid, api_port),
            conns_peak: peaks.peak(k),
            refused: c.refused_per_ip().await,
            fds: open_fds(c.pid),
            threads: threads(c.pid),
            connection_events: c.connection_events().await,
        });
    }
    drop(peaks);
    lb.send("stats")?;
    let mut lb_line = String::new();
    while !lb_line.starts_with("ACTIVE") {
        lb_line.clear();
        if lb_out.read_line(&mut lb_line)? == 0 {
            bail!("the balancer exited");
        }
    }
    let by_annotation = holders(&nodes, "replicas").await?;
    // "" counts the nodes whose annotation names no replica (not written yet).
    let mut spread: BTreeMap<String, usize> = BTreeMap::new();
    for h in by_annotation.values() {
        *spread.entry(h.clone()).or_default() += 1;
    }
    println!(
        "replicas: annotations complete {}; nodes by annotation {spread:?}; balancer {}",
        lag_text(lag3),
        lb_line.trim()
    );
    for (c, f) in cores.iter().zip(&per_replica) {
        println!("  replica {}: {}", c.address, f.line(c, single.per_node));
    }

    // 3. Pod-to-edge latency for a sample spread over the replicas.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut by_holder: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    // Nodes whose annotation names no replica yet are not sampled: the spread is unknown.
    for (name, holder) in by_annotation.iter().filter(|(_, h)| addresses.contains(h)) {
        if let Some(i) = name.strip_prefix("rlb-").and_then(|i| i.parse().ok()) {
            by_holder.entry(holder.clone()).or_default().push(i);
        }
    }
    let per_holder = run.sample.div_ceil(addresses.len()).max(1);
    let sample: Vec<(usize, String)> = by_holder
        .iter_mut()
        .flat_map(|(h, list)| {
            list.sort_unstable();
            let step = (list.len() / per_holder).max(1);
            list.iter()
                .step_by(step)
                .take(per_holder)
                .map(|&i| (i, h.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let created: Vec<anyhow::Result<(String, u64, Duration)>> =
        futures::stream::iter(sample.iter().cloned())
            .map(|(i, holder)| {
                let (pods, board) = (&pods, &board);
                async move {
                    let name = format!("lat-{i}");
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": {"round": "0"}},
                        "spec": {"nodeName": format!("rlb-{i}"),
                                 "containers": [{"name": "c", "image": "nginx"}]},
                    }))?;
                    let start = now_ms();
                    let params = PostParams::default();
                    let p = retry(|| pods.create(&params, &pod)).await?;
                    let deadline = Instant::now() + Duration::from_secs(30);
                    loop {
                        if let Some((_, at)) = board.pod(&name) {
                            let lat = Duration::from_millis(at.saturating_sub(start));
                            return Ok((holder, rv_of(&p), lat));
                        }
                        if Instant::now() > deadline {
                            bail!("pod {name} never reached node rlb-{i}");
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            })
            .buffer_unordered(4)
            .collect()
            .await;
    let mut all_lat = Vec::new();
    let mut lat_by: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let mut missing = 0;
    let mut changes: Vec<Change> = Vec::new();
    for ((i, _), r) in sample.iter().zip(created) {
        match r {
            Ok((holder, rv, lat)) => {
                all_lat.push(lat);
                lat_by.entry(holder).or_default().push(lat);
                changes.push(Change {
                    pod: format!("lat-{i}"),
                    rv,
                });
            }
            Err(e) => {
                warn!("{e}");
                missing += 1;
            }
        }
    }
    all_lat.sort();
    println!(
        "latency: pod created → edge received, {} nodes: {}{}",
        sample.len(),
        summary(&all_lat),
        if missing > 0 {
            format!(", {missing} never arrived")
        } else {
            String::new()
        }
    );
    for (h, l) in &mut lat_by {
        l.sort();
        println!("  via {h}: {}", summary(l));
    }

    // 4. Failover: one replica SIGKILLed while the sample's pods keep changing.
    let victim = 1;
    let victim_addr = cores[victim].address.clone();
    let victim_nodes: HashSet<usize> = by_annotation
        .iter()
        .filter(|(_, h)| **h == victim_addr)
        .filter_map(|(name, _)| name.strip_prefix("rlb-")?.parse().ok())
        .collect();
    let victim_sessions = per_replica[victim].sessions;
    let churn = Churn {
        pods: &pods,
        sample: &sample,
    };
    let mut round = 0;
    for _ in 0..2 {
        round += 1;
        changes.extend(churn.round(round).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let changes_before_kill = changes.len();
    let kill_ms = now_ms();
    let killed_at = Instant::now();
    cores[victim].process.kill();
    println!(
        "failover: replica {victim_addr} SIGKILLed holding {victim_sessions} sessions ({} nodes by annotation)",
        victim_nodes.len()
    );
    let mut back: Option<Duration> = None;
    let mut disconnected: HashSet<usize> = HashSet::new();
    loop {
        round += 1;
        changes.extend(churn.round(round).await);
        if back.is_none() {
            let s = lock(&board.state);
            disconnected = s
                .disconnects
                .iter()
                .filter(|(_, at)| *at >= kill_ms)
                .map(|(i, _)| *i)
                .collect();
            let mut last_back: HashMap<usize, u64> = HashMap::new();
            for (i, at) in &s.connects {
                if *at >= kill_ms && disconnected.contains(i) {
                    last_back.insert(*i, *at);
                }
            }
            drop(s);
            if !disconnected.is_empty()
                && board.up() == total
                && last_back.len() == disconnected.len()
            {
                let last = last_back.values().copied().max().unwrap_or(kill_ms);
                back = Some(Duration::from_millis(last - kill_ms));
                println!(
                    "failover: {} nodes reconnected to the other replicas {:.2} s after the kill",
                    disconnected.len(),
                    back.map(|d| d.as_secs_f64()).unwrap_or_default()
                );
            }
        }
        let churned = killed_at.elapsed();
        if churned > Duration::from_secs(run.churn_after_secs)
            && (back.is_some() || churned > Duration::from_secs(120))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Every pod's last version must reach its node.
    let last: HashMap<&str, u64> = changes.iter().fold(HashMap::new(), |mut m, c| {
        let e = m.entry(c.pod.as_str()).or_insert(0);
        *e = (*e).max(c.rv);
        m
    });
    let settle = Instant::now();
    while last
        .iter()
        .any(|(p, rv)| board.pod(p).is_none_or(|(got, _)| got < *rv))
        && settle.elapsed() < Duration::from_secs(90)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let settled_in = settle.elapsed();
    let during = &changes[changes_before_kill..];
    let lost: Vec<&Change> = during
        .iter()
        .filter(|c| board.pod(&c.pod).is_none_or(|(got, _)| got < c.rv))
        .collect();
    let lost_earlier: Vec<&Change> = changes[..changes_before_kill]
        .iter()
        .filter(|c| board.pod(&c.pod).is_none_or(|(got, _)| got < c.rv))
        .collect();
    let lost_before = lost_earlier.len();
    let mut survivors = Vec::new();
    for (k, c) in cores.iter().enumerate() {
        if k != victim {
            survivors.push(format!("{} {}", c.address, c.sessions().await));
        }
    }
    let pods_on_victim = sample
        .iter()
        .filter(|(i, _)| victim_nodes.contains(i))
        .count();
    println!(
        "failover: {} pod versions created or changed after the kill ({} of them on {pods_on_victim} pods of the killed replica's nodes), {} lost; {lost_before} of {changes_before_kill} earlier lost; settled {:.1} s after the churn; sessions now {}",
        during.len(),
        during
            .iter()
            .filter(|c| node_of_pod(&c.pod).is_some_and(|i| victim_nodes.contains(&i)))
            .count(),
        lost.len(),
        settled_in.as_secs_f64(),
        survivors.join(", ")
    );
    for c in lost.iter().chain(&lost_earlier).take(10) {
        let holder = node_of_pod(&c.pod).and_then(|i| by_annotation.get(&format!("rlb-{i}")));
        println!(
            "  lost: {c:?} (node annotated {holder:?}), received {:?}",
            board.pod(&c.pod)
        );
    }

    // 5. Summary and targets.
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let worst_ratio = per_replica
        .iter()
        .map(|r| r.per_node / single.per_node)
        .fold(0.0f64, f64::max);
    let mem_ok = worst_ratio <= 1.2;
    let failover_ok = back.is_some_and(|d| d < Duration::from_secs(30));
    let lost_ok = lost.is_empty() && lost_before == 0;
    println!(
        "\n--- replicas_load summary ({:.0} s) ---",
        began.elapsed().as_secs_f64()
    );
    println!(
        "single cloudcore, {n} edges: connect {:.2} s, RSS {:.1} → {:.1} MiB, {:.1} KiB/node, API server connections {} (peak {}), {} fds, {} threads, annotation lag {}",
        single.connect.as_secs_f64(),
        mib(single.rss_before),
        mib(single.rss_after),
        single.per_node,
        single.api_conns,
        single.api_conns_peak,
        single.fds,
        single.threads,
        lag_text(single.annotation_lag)
    );
    println!(
        "3 replicas, {total} edges via the balancer: connect {:.2} s, annotation lag {}, nodes by annotation {spread:?}, balancer {}, maxUnauthenticatedPerIP {}",
        connect3.as_secs_f64(),
        lag_text(lag3),
        lb_line.trim(),
        run.max_unauthenticated_per_ip
    );
    for (c, f) in cores.iter().zip(&per_replica) {
        println!("  {}: {}", c.address, f.line(c, single.per_node));
    }
    println!("pod → edge latency: {}", summary(&all_lat));
    println!(
        "failover of {victim_addr} ({victim_sessions} nodes): {} reconnected in {}, sessions after: {}; {} pod versions during/after the kill, {} lost",
        disconnected.len(),
        back.map_or("never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64())),
        survivors.join(", "),
        during.len(),
        lost.len()
    );
    println!("targets:");
    println!(
        "  KiB/node per replica within 1.2× of single ({:.1}): worst {worst_ratio:.2}×: {}",
        single.per_node,
        verdict(mem_ok)
    );
    println!(
        "  failover under 30 s: {}: {}",
        back.map_or("never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64())),
        verdict(failover_ok)
    );
    println!(
        "  lost pod versions: {} of {} after the kill, {lost_before} of {changes_before_kill} before: {}",
        lost.len(),
        changes.len() - changes_before_kill,
        verdict(lost_ok)
    );
    let _ = std::io::stdout().flush();

    drop(fleet);
    drop(lb);
    for c in &mut cores {
        c.process.terminate(Duration::from_secs(20)).await;
    }
    let ok = mem_ok && failover_ok && lost_ok && missing == 0;
    if ok && !run.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("run folder kept: {}", dir.display());
    }
    if !ok {
        bail!("replicas_load targets failed");
    }
    Ok(())
}

/// The node index of pod `lat-<i>` or `new-<i>-<round>`.
fn node_of_pod(pod: &str) -> Option<usize> {
    let rest = pod
        .strip_prefix("lat-")
        .or_else(|| pod.strip_prefix("new-"))?;
    rest.split('-').next()?.parse().ok()
}

fn lag_text(lag: Option<Duration>) -> String {
    match lag {
        Some(d) => format!("{:.1} s after the last connect", d.as_secs_f64()),
        None => "not within 180 s".into(),
    }
}

/// The pods that keep changing: every round changes each sample pod and creates a new pod on
/// every tenth sample node.
struct Churn<'a> {
    pods: &'a Api<Pod>,
    sample: &'a [(usize, String)],
}

impl Churn<'_> {
    async fn round(&self, round: usize) -> Vec<Change> {
        let patch = json!({"metadata": {"labels": {"round": round.to_string()}}});
        let patches = futures::stream::iter(self.sample.iter())
            .map(|(i, _)| {
                let patch = &patch;
                async move {
                    let name = format!("lat-{i}");
                    let params = PatchParams::default();
                    let patch = Patch::Merge(patch);
                    let p = retry(|| self.pods.patch(&name, &params, &patch)).await;
                    (name, p)
                }
            })
            .buffer_unordered(API_CONCURRENCY);
        let creates = futures::stream::iter(self.sample.iter().skip(round % 10).step_by(10))
            .map(|(i, _)| async move {
                let name = format!("new-{i}-{round}");
                let pod: Result<Pod, _> = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"nodeName": format!("rlb-{i}"),
                             "containers": [{"name": "c", "image": "nginx"}]},
                }));
                let p = match pod {
                    Ok(pod) => {
                        let params = PostParams::default();
                        retry(|| self.pods.create(&params, &pod)).await
                    }
                    Err(e) => Err(kube::Error::SerdeError(e)),
                };
                (name, p)
            })
            .buffer_unordered(API_CONCURRENCY);
        let mut out = Vec::new();
        let done: Vec<(String, Result<Pod, kube::Error>)> = patches.chain(creates).collect().await;
        for (pod, p) in done {
            match p {
                Ok(p) => out.push(Change { pod, rv: rv_of(&p) }),
                Err(e) => warn!(pod, error = %e, "pod change failed; not counted"),
            }
        }
        out
    }
}
