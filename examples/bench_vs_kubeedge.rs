//! One side of `scripts/bench-vs-kubeedge`: the same workloads against one cloudcore process
//! (KubeEdge's own, or ours), on a fresh test API server (k8s-testenv) of its own, with the
//! same edges; one result line per figure appended to `--out`. The script runs it once per
//! implementation, one after the other, and prints the table.
//!
//! ```text
//! cargo build --release --example cloudcore --example bench_vs_kubeedge
//! target/release/examples/bench_vs_kubeedge side --impl ours --bin target/release/examples/cloudcore \
//!     --crds manifests/crds --out /tmp/ours.txt --quick
//! ```
//!
//! Phases, in order (each bounded in time): **startup** (process start → WebSocket port
//! accepting → a pre-certified edge dialing every 10 ms connected → that edge has its pod);
//! the **real edgecore** (the process at idle with one edge, **single pod** create → in the
//! edge's sqlite store, polled every 2 ms, **relay** of `logs` and `exec` through the edge's
//! stream agent to a kubelet stand-in); then per fleet size N simulated edges
//! (`support/fleet.rs`): **connect** (bootstrap with the token and connect), **idle** (RSS and
//! CPU per edge), at the first N **downstream** (N × `--pods` pods: pod → edge latency, every
//! ObjectSync acknowledged) and **upstream** (node and pod status patches from every edge),
//! and at the last N **reconnect** (every edge dropped while its pod changes, all dialing
//! again at once: back and caught up).
//!
//! Both implementations get one CloudCore YAML (KubeEdge's field names; `nodeLimit` above the
//! largest N), the KubeEdge CRDs from `--crds`, and a CA written beforehand into Secret
//! `kubeedge/casecret` (as a cloudcore that ran before leaves it), so edge certificates can be
//! made before the process starts.
//!
//! Two rows carry the floor they meet, measured in the same run: **connect** gives the CPU the
//! simulators, cloudcore and the API server spent, and the time the same simulators take
//! against a server doing only the handshakes, the token check and the CSR signing
//! (`support/floor.rs`); the **relay throughput** rows give the CPU of the real edgecore,
//! cloudcore and this harness over the transfers, and the ceiling edgecore's CPU per MiB sets.
//!
//! Result lines: `result impl=<i> name=<row> value=<v> unit=<u> dir=lower|higher target=<t>
//! notes=<text>`, `bound impl=<i> name=<row> value=<v> how=<text>` (the best value the floor
//! named allows), and `cpu impl=<i> phase=<p> seconds=<s>` for the cloudcore process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::Backoff;
use clap::{Parser, Subcommand};
use edge::hub::{HubClient, HubClientConfig, HubEvent};
use edgecore_interop::{EdgeConfig, EdgeHome, Edgecore, KubeletPort, Process, listen_ports};
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeedge_api::reliablesyncs::ObjectSync;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{info, warn};

#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/floor.rs"]
mod floor;
#[path = "support/latency.rs"]
mod latency;
#[path = "support/procstat.rs"]
mod procstat;

use fleet::{Fleet, FleetSpec, now_us};
use latency::{ms, percentile};

/// The run's namespace: every pod of the benchmark lives here.
const NS: &str = "bench";
const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";
/// API server requests in flight when the harness creates or changes objects.
const API_CONCURRENCY: usize = 32;

#[derive(Debug, Parser)]
#[command(name = "bench_vs_kubeedge")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every phase against one implementation.
    Side(SideArgs),
    /// A share of the simulated edges (started by `side`).
    Edges(fleet::EdgesArgs),
    /// The least a cloudcore must do for edges to bootstrap and connect (started by `side`).
    FloorServer(floor::FloorArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct SideArgs {
    /// `kubeedge` or `ours` (names the result lines and how the process is told its config).
    #[arg(long = "impl")]
    imp: String,
    /// The cloudcore binary.
    #[arg(long)]
    bin: PathBuf,
    /// A folder of CRD manifests (read recursively), created before cloudcore starts.
    #[arg(long)]
    crds: PathBuf,
    /// Result lines are appended here.
    #[arg(long)]
    out: PathBuf,
    /// A working folder (configs, logs); a fresh one under the temp dir by default.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The scale that takes under 5 minutes per side: 1,000 edges, 64 MiB relay bodies,
    /// shorter windows.
    #[arg(long)]
    quick: bool,
    /// Fleet sizes (default 1000,5000; quick 1000).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<usize>,
    /// Pods per node in the downstream phase.
    #[arg(long, default_value_t = 10)]
    pods: usize,
    /// Pods created one at a time for the single-pod row.
    #[arg(long, default_value_t = 100)]
    single_pods: usize,
    /// Relay body size in MiB (default 256; quick 64).
    #[arg(long)]
    relay_mib: Option<usize>,
    /// How often each edge sends its node and pod status in the upstream row (edged's
    /// `nodeStatusUpdateFrequency` is 10 s).
    #[arg(long, default_value_t = 10_000)]
    status_period_ms: u64,
    /// Edges per simulator process.
    #[arg(long, default_value_t = 2500)]
    per_child: usize,
    /// Phases left out, to look at one row closely (`edgecore`: the real-edgecore rows;
    /// `floor`: the connect row's minimal server; `downstream`, `upstream`, `reconnect`);
    /// startup, connect and idle always run.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
}

impl SideArgs {
    fn runs(&self, phase: &str) -> bool {
        !self.skip.iter().any(|s| s == phase)
    }

    fn sizes(&self) -> Vec<usize> {
        match (self.nodes.is_empty(), self.quick) {
            (false, _) => self.nodes.clone(),
            (true, true) => vec![1000],
            (true, false) => vec![1000, 5000],
        }
    }
    fn relay_bytes(&self) -> usize {
        self.relay_mib.unwrap_or(if self.quick { 64 } else { 256 }) << 20
    }
    /// How long a phase waits for what it measures before it counts the rest as missing
    /// (KubeEdge's one-message-at-a-time delivery per node can take minutes).
    fn limit(&self) -> Duration {
        Duration::from_secs(if self.quick { 60 } else { 180 })
    }

    /// The idle measuring window.
    fn idle_window(&self) -> Duration {
        Duration::from_secs(if self.quick { 30 } else { 60 })
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.cmd {
        Cmd::Edges(args) => fleet::edges(args),
        Cmd::FloorServer(args) => floor::floor_server(args),
        Cmd::Side(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(side(args)),
    }
}

// ------------------------------------------------------------------------- results

/// Where the figures go.
struct Report {
    imp: String,
    out: std::fs::File,
}

impl Report {
    fn line(&mut self, text: String) {
        println!("{text}");
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }

    /// One figure. `lower` says whether less is better; `target` is the factor ours must be
    /// better by.
    fn result(
        &mut self,
        name: &str,
        value: f64,
        unit: &str,
        lower: bool,
        target: f64,
        notes: &str,
    ) {
        let notes = if notes.is_empty() {
            "-".to_owned()
        } else {
            notes.replace(char::is_whitespace, "_")
        };
        let dir = if lower { "lower" } else { "higher" };
        let text = format!(
            "result impl={} name={name} value={value:.4} unit={unit} dir={dir} target={target} notes={notes}",
            self.imp
        );
        self.line(text);
    }

    /// The best value ours could reach in row `name` given a floor (or ceiling) measured in
    /// this run, `how` naming it; the script states the factor it allows against KubeEdge.
    fn bound(&mut self, name: &str, value: f64, how: &str) {
        let text = format!(
            "bound impl={} name={name} value={value:.4} how={}",
            self.imp,
            how.replace(char::is_whitespace, "_")
        );
        self.line(text);
    }

    fn cpu(&mut self, phase: &str, seconds: f64) {
        let text = format!("cpu impl={} phase={phase} seconds={seconds:.3}", self.imp);
        self.line(text);
    }
}

/// User + system CPU seconds of a process so far (`/proc/<pid>/stat`, clock ticks of 10 ms).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name may hold spaces: fields start after its closing parenthesis.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// The CPU seconds of every process in `pids` so far.
fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_seconds(*p)).sum()
}

/// The test API server's processes (kube-apiserver and etcd), from the environment's pid files.
fn apiserver_pids() -> Vec<u32> {
    let dir = k8s_testenv::env().dir();
    ["kube-apiserver.pid", "etcd.pid"]
        .iter()
        .filter_map(|f| {
            std::fs::read_to_string(dir.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect()
}

/// CPU seconds so far of the processes that share the machine during a phase: groups of
/// processes, this harness, and the whole machine (other work included).
#[derive(Debug, Clone)]
struct Usage {
    at: Instant,
    groups: Vec<f64>,
    harness: f64,
    machine: f64,
}

impl Usage {
    fn now(groups: &[&[u32]]) -> Usage {
        Usage {
            at: Instant::now(),
            groups: groups.iter().map(|g| cpu_of(g)).collect(),
            harness: cpu_seconds(std::process::id()),
            machine: procstat::machine_busy_seconds(),
        }
    }

    /// What each used from `self` to `later`, and the wall time between.
    fn until(&self, later: &Usage) -> Spent {
        Spent {
            wall: later.at.duration_since(self.at).as_secs_f64(),
            groups: later
                .groups
                .iter()
                .zip(&self.groups)
                .map(|(b, a)| b - a)
                .collect(),
            harness: later.harness - self.harness,
            machine: later.machine - self.machine,
        }
    }
}

/// CPU seconds spent over a wall time.
#[derive(Debug, Clone)]
struct Spent {
    wall: f64,
    groups: Vec<f64>,
    harness: f64,
    machine: f64,
}

impl Spent {
    /// CPU seconds as % of one core over the wall time.
    fn pct(&self, cpu: f64) -> f64 {
        if self.wall > 0.0 {
            cpu / self.wall * 100.0
        } else {
            0.0
        }
    }

    /// The machine's busy share, as "`<busy>` of `<all>` core-s (`<pct>`% of `<cores>` cores)".
    fn machine_text(&self) -> String {
        let cores = procstat::cores() as f64;
        format!(
            "the machine {:.2} of {:.2} core-s ({:.0}% of {cores:.0} cores, other work included)",
            self.machine,
            self.wall * cores,
            self.pct(self.machine) / cores
        )
    }
}

// ------------------------------------------------------------------------- the cloud process

/// Ports of one run (all on 127.0.0.1 except the stream and tunnel ports, which KubeEdge binds
/// on every interface).
#[derive(Debug, Clone, Copy)]
struct Ports {
    ws: u16,
    https: u16,
    stream: u16,
    tunnel: u16,
    monitor: u16,
}

impl Ports {
    fn ws_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ws))
    }
    fn https_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.https)
    }
}

/// The CloudCore YAML both implementations run with: KubeEdge's keys and its template's
/// choices (controllers on, dynamicController on, cloudStream on, iptables manager, task
/// manager and router off; key material from Secrets).
fn render_config(
    dir: &Path,
    kubeconfig: &Path,
    pki: &Path,
    ports: Ports,
    node_limit: usize,
) -> String {
    let p = |f: &str| pki.join(f).display().to_string();
    let doc = json!({
        "apiVersion": "cloudcore.config.kubeedge.io/v1alpha1",
        "kind": "CloudCore",
        "kubeAPIConfig": {"master": "", "kubeConfig": kubeconfig.display().to_string()},
        "commonConfig": {"monitorServer": {"bindAddress": format!("127.0.0.1:{}", ports.monitor)}},
        "modules": {
            "cloudHub": {
                "enable": true,
                "nodeLimit": node_limit,
                "advertiseAddress": ["127.0.0.1"],
                "dnsNames": ["localhost"],
                "tlsCAFile": "", "tlsCAKeyFile": "", "tlsCertFile": "", "tlsPrivateKeyFile": "",
                "tokenRefreshDuration": 12,
                "websocket": {"enable": true, "address": "127.0.0.1", "port": ports.ws},
                "https": {"enable": true, "address": "127.0.0.1", "port": ports.https},
                "quic": {"enable": false},
                "unixsocket": {"enable": false, "address": format!("unix://{}/kubeedge.sock", dir.display())},
            },
            "edgeController": {"enable": true},
            "deviceController": {"enable": true},
            "syncController": {"enable": true},
            "dynamicController": {"enable": true},
            "cloudStream": {
                "enable": true,
                "tlsTunnelCAFile": "", "tlsTunnelCertFile": "", "tlsTunnelPrivateKeyFile": "",
                "tunnelPort": ports.tunnel,
                "tlsStreamCAFile": p("ca.crt"),
                "tlsStreamCertFile": p("stream.crt"),
                "tlsStreamPrivateKeyFile": p("stream.key"),
                "streamPort": ports.stream,
            },
            "taskManager": {"enable": false},
            "router": {"enable": false},
            "iptablesManager": {"enable": false},
        },
    });
    serde_saphyr::to_string(&doc).expect("yaml")
}

/// The cloudcore process of this side.
struct Cloud {
    process: Process,
    pid: u32,
    started: Instant,
    log: PathBuf,
}

impl Cloud {
    fn start(args: &SideArgs, dir: &Path, config: &Path) -> anyhow::Result<Cloud> {
        let bin = std::fs::canonicalize(&args.bin)
            .with_context(|| format!("cloudcore binary {}", args.bin.display()))?;
        let mut cmd = Command::new(bin);
        cmd.arg("--config").arg(config).arg("--v=2");
        cmd.env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .current_dir(dir);
        // To look into a row: our cloudcore's log filter (KubeEdge's ignores it).
        if let Some(filter) = std::env::var_os("BENCH_CLOUDCORE_RUST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        let log = dir.join(format!("cloudcore-{}.log", now_us()));
        let started = Instant::now();
        let process = Process::spawn("cloudcore", cmd, &log)?;
        let pid = process.id();
        Ok(Cloud {
            process,
            pid,
            started,
            log,
        })
    }

    fn rss_kib(&self) -> u64 {
        procstat::rss_kib(self.pid)
    }

    fn cpu(&self) -> f64 {
        cpu_seconds(self.pid)
    }

    fn alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.process.try_wait() {
            bail!("cloudcore exited: {status}\n{}", self.process.log_tail(30));
        }
        Ok(())
    }
}

/// KubeEdge's start-up sleep (a random 0–9 whole seconds, to negotiate the tunnel port between
/// replicas), read from its log: the gap between the monitor server's start (logged before the
/// sleep) and the first module registration (after it), rounded down to whole seconds.
fn kubeedge_sleep(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    let time_of = |needle: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.contains(needle))?;
        // klog: `I1207 05:53:31.975980 …`
        let t = line.split_whitespace().nth(1)?;
        let mut parts = t.split(':');
        let h: f64 = parts.next()?.parse().ok()?;
        let m: f64 = parts.next()?.parse().ok()?;
        let s: f64 = parts.next()?.parse().ok()?;
        Some(h * 3600.0 + m * 60.0 + s)
    };
    let before = time_of("starting monitor server")?;
    let after = time_of("registered successfully")?;
    Some((after - before).floor().max(0.0))
}

// ------------------------------------------------------------------------- the API server

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every `*.yaml` under `dir`, created with `kubectl create -f` (CRDs), then waits until they
/// are established.
fn install_crds(dir: &Path) -> anyhow::Result<usize> {
    let env = k8s_testenv::env();
    let out = env
        .kubectl()
        .args(["create", "-R", "-f"])
        .arg(dir)
        .output()
        .context("run kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl create -R -f {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let n = String::from_utf8_lossy(&out.stdout).lines().count();
    let out = env
        .kubectl()
        .args([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .output()?;
    if !out.status.success() {
        bail!(
            "CRDs not established: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(n)
}

/// A CA in Secret `kubeedge/casecret` (`cadata`, `cakeydata`: DER), the way a cloudcore that
/// ran before leaves it; both implementations read it there.
async fn seed_ca(client: &kube::Client) -> anyhow::Result<pki::CertificateAuthority> {
    create_namespace(client, "kubeedge").await?;
    let ca = pki::CertificateAuthority::generate()?;
    let mut data = BTreeMap::new();
    data.insert("cadata".to_owned(), ByteString(ca.cert_der().to_vec()));
    data.insert("cakeydata".to_owned(), ByteString(ca.key_der().to_vec()));
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("casecret".into()),
            namespace: Some("kubeedge".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "kubeedge")
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(ca)
}

/// The bootstrap token the running cloudcore wrote to Secret `kubeedge/tokensecret`.
async fn token(client: &kube::Client, limit: Duration) -> anyhow::Result<String> {
    let api = Api::<Secret>::namespaced(client.clone(), "kubeedge");
    let t = Instant::now();
    loop {
        if let Ok(Some(s)) = api.get_opt("tokensecret").await
            && let Some(v) = s.data.as_ref().and_then(|d| d.get("tokendata"))
        {
            let token = String::from_utf8_lossy(&v.0).trim().to_owned();
            if !token.is_empty() {
                return Ok(token);
            }
        }
        if t.elapsed() > limit {
            bail!("no token in kubeedge/tokensecret within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `make(i)` for `0..n` with [`API_CONCURRENCY`] in flight; fails on the first error.
async fn for_each<F, Fut>(n: usize, make: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(make)
        .buffer_unordered(API_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn create_nodes(client: &kube::Client, names: &[String]) -> anyhow::Result<()> {
    let api = Api::<Node>::all(client.clone());
    for_each(names.len(), |i| {
        let (api, name) = (api.clone(), names[i].clone());
        async move {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {EDGE_LABEL: ""}},
            }))?;
            match api.create(&PostParams::default(), &node).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    })
    .await
}

fn pod_object(name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "v0"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
    }))?)
}

/// Pod `k` of node `node` (the simulated edges patch the status of pod 0).
fn pod_name(node: &str, k: usize) -> String {
    format!("{node}-p{k}")
}

fn rv(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

// ------------------------------------------------------------------------- one side

async fn side(args: SideArgs) -> anyhow::Result<()> {
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "bench-vs-kubeedge-{}-{}",
            args.imp,
            std::process::id()
        ))
    });
    std::fs::create_dir_all(&dir)?;
    let mut report = Report {
        imp: args.imp.clone(),
        out: std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.out)?,
    };
    let sizes = args.sizes();
    info!(imp = %args.imp, ?sizes, dir = %dir.display(), "starting the test API server");
    let env = k8s_testenv::env();
    let client = k8s_testenv::client().await;
    let crds = install_crds(&args.crds)?;
    create_namespace(&client, NS).await?;
    let ca = seed_ca(&client).await?;

    // Every Node the run uses exists before cloudcore starts (edgecore registers none with
    // edged off, and KubeEdge's edgecontroller ignores pods of unlabelled nodes).
    let startup_node = "bench-startup".to_owned();
    let edgecore_node = "bench-edgecore".to_owned();
    let mut nodes = vec![startup_node.clone(), edgecore_node.clone()];
    for (k, n) in sizes.iter().enumerate() {
        nodes.extend((0..*n).map(|i| format!("{}-{i}", prefix(k))));
    }
    let t = Instant::now();
    create_nodes(&client, &nodes).await?;
    info!(nodes = nodes.len(), crds, "created in {:.1?}", t.elapsed());
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    pods.create(
        &PostParams::default(),
        &pod_object("startup", &startup_node)?,
    )
    .await?;

    let ports = {
        let p = listen_ports(5)?;
        Ports {
            ws: p[0],
            https: p[1],
            stream: p[2],
            tunnel: p[3],
            monitor: p[4],
        }
    };
    let node_limit = sizes.iter().max().copied().unwrap_or(1000) + 100;
    let config = dir.join("cloudcore.yaml");
    std::fs::write(
        &config,
        render_config(&dir, &env.kubeconfig(), &env.pki(), ports, node_limit),
    )?;

    // ---- startup
    let mut cloud = startup(&args, &mut report, &dir, &config, ports, &ca, &startup_node).await?;
    let cpu_start = cloud.cpu();
    report.cpu("startup", cpu_start);

    // ---- the real edgecore: the process with one edge, single pod, relay
    let before = cloud.cpu();
    if !args.runs("edgecore") {
        info!("the real-edgecore phase is skipped");
    } else if let Err(e) = real_edge(
        &args,
        &mut report,
        &mut cloud,
        &client,
        ports,
        &edgecore_node,
    )
    .await
    {
        warn!(error = %format!("{e:#}"), "the real-edgecore phase failed");
        report.line(format!("error impl={} phase=edgecore {e:#}", args.imp).replace('\n', " "));
    }
    report.cpu("edgecore", cloud.cpu() - before);

    // ---- fleets
    let token = token(&client, Duration::from_secs(30)).await?;
    for (k, n) in sizes.iter().enumerate() {
        let before = cloud.cpu();
        let last = k + 1 == sizes.len();
        if let Err(e) = fleet_phase(
            &args,
            &mut report,
            &mut cloud,
            &client,
            (ports, &token, &ca, &dir),
            k,
            *n,
            last,
        )
        .await
        {
            warn!(error = %format!("{e:#}"), n, "a fleet phase failed");
            report
                .line(format!("error impl={} phase=fleet-{n} {e:#}", args.imp).replace('\n', " "));
        }
        report.cpu(&format!("fleet-{n}"), cloud.cpu() - before);
    }
    report.cpu("total", cloud.cpu());
    report.line(format!(
        "peak impl={} rss_mib={:.1} log={}",
        args.imp,
        procstat::mib(peak_rss(cloud.pid)),
        cloud.log.display()
    ));
    let (status, _) = cloud.process.terminate(Duration::from_secs(10)).await;
    info!(?status, "cloudcore stopped");
    Ok(())
}

/// `VmHWM`: the peak resident set.
fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn prefix(k: usize) -> String {
    format!("bench-{}", (b'a' + k as u8) as char)
}

/// Starts cloudcore; a pre-certified edge dials every 10 ms from the moment the process starts.
/// Rows: port accepting, ready (the edge connected and has the pod bound to it).
async fn startup(
    args: &SideArgs,
    report: &mut Report,
    dir: &Path,
    config: &Path,
    ports: Ports,
    ca: &pki::CertificateAuthority,
    node: &str,
) -> anyhow::Result<Cloud> {
    let cert = ca.issue(&pki::IssueOptions::edge(node))?;
    let tls = Arc::new(pki::tls::client_config(
        ca.cert_der(),
        Some((&cert.cert_der, &cert.key_der)),
    )?);
    let mut cfg = HubClientConfig::new(node, ports.ws_addr().to_string());
    cfg.backoff = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(10),
    };
    let mut cloud = Cloud::start(args, dir, config)?;
    let t0 = cloud.started;
    let (client, mut events) = HubClient::start(cfg, tls);
    let ws = ports.ws_addr();
    let port = tokio::spawn(async move {
        loop {
            if tokio::net::TcpStream::connect(ws).await.is_ok() {
                return t0.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let mut connected = None;
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = events.recv().await {
            match ev {
                HubEvent::Connected => {
                    connected.get_or_insert(t0.elapsed());
                }
                HubEvent::Message(m) if m.route.resource.ends_with("/pod/startup") => {
                    return Some(t0.elapsed());
                }
                _ => {}
            }
        }
        None
    })
    .await;
    cloud.alive()?;
    let port = tokio::time::timeout(Duration::from_secs(1), port).await??;
    let Ok(Some(ready)) = ready else {
        bail!("the startup edge never got its pod within 60 s");
    };
    client.stop();
    let sleep = if args.imp == "kubeedge" {
        kubeedge_sleep(&cloud.log).unwrap_or(0.0)
    } else {
        0.0
    };
    let notes = if sleep > 0.0 {
        format!(
            "random start-up sleep of {sleep:.0} s taken out (measured with it: port {:.3} s, ready {:.3} s)",
            port.as_secs_f64(),
            ready.as_secs_f64()
        )
    } else {
        String::new()
    };
    let connected = connected.unwrap_or(ready).as_secs_f64() - sleep;
    report.result(
        "startup_port",
        port.as_secs_f64() - sleep,
        "s",
        true,
        2.0,
        &notes,
    );
    report.result(
        "startup_ready",
        ready.as_secs_f64() - sleep,
        "s",
        true,
        2.0,
        &format!("edge connected at {connected:.3} s; {notes}"),
    );
    Ok(cloud)
}

// ------------------------------------------------------------------------- the real edgecore

/// Polls edgecore's sqlite store (table `meta`) for keys, every 2 ms, in a python3 child: one
/// read-only connection, a fresh read per poll. Answers `<key> <Unix µs found, or 0>`.
const POLLER: &str = r#"
import sqlite3, sys, time
db = sys.argv[1]
con = None
for line in sys.stdin:
    key = line.strip()
    start = time.time()
    found = 0
    while time.time() - start < 30:
        try:
            if con is None:
                con = sqlite3.connect('file:' + db + '?mode=ro', uri=True, timeout=1)
            if con.execute('SELECT 1 FROM meta WHERE key=?', (key,)).fetchone():
                found = int(time.time() * 1e6)
                break
        except sqlite3.Error:
            con = None
        time.sleep(0.002)
    print(key, found, flush=True)
"#;

struct Poller {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Poller {
    fn start(db: &Path) -> anyhow::Result<Poller> {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(POLLER)
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("python3 (apt-get install python3) polls edgecore's sqlite store")?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Poller {
            child,
            stdin,
            stdout,
        })
    }

    /// Starts polling for `key`.
    fn watch(&mut self, key: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{key}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// When the key watched appeared (Unix µs), blocking; `None` after 30 s.
    fn found(&mut self) -> anyhow::Result<Option<u64>> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let at: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok((at > 0).then_some(at))
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn real_edge(
    args: &SideArgs,
    report: &mut Report,
    cloud: &mut Cloud,
    client: &kube::Client,
    ports: Ports,
    node: &str,
) -> anyhow::Result<()> {
    let _kubelet_port = KubeletPort::acquire().await?;
    let body = Arc::new(relay_body(args.relay_bytes()));
    let kubelet = tokio::net::TcpListener::bind(edgecore_interop::KUBELET)
        .await
        .context("kubelet stand-in on 127.0.0.1:10350")?;
    let stand_in = tokio::spawn(kubelet_stand_in(kubelet, body.clone()));

    let token = token(client, Duration::from_secs(30)).await?;
    let home = EdgeHome::new(node)?;
    let mut cfg = EdgeConfig::new(
        node,
        &token,
        SocketAddr::from(([127, 0, 0, 1], ports.https)),
        ports.ws_addr(),
    );
    cfg.tunnel_server = Some(SocketAddr::from(([127, 0, 0, 1], ports.tunnel)));
    home.write_config(&cfg)?;
    let mut edgecore = Edgecore::start(&home)?;
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let mut poller = Poller::start(&home.database())?;

    // Warm-up: the first pod reaches the store once edgecore bootstrapped and connected.
    for name in ["warmup", "small", "big"] {
        pods.create(&PostParams::default(), &pod_object(name, node)?)
            .await?;
    }
    poller.watch(&format!("{NS}/pod/warmup"))?;
    // Blocking reads of the poller stall this runtime, on purpose: nothing else of the run
    // needs it meanwhile, and the edge's store is written by another process.
    let warm = poller.found()?;
    if warm.is_none() {
        bail!(
            "edgecore never stored its first pod\n{}",
            edgecore.log_tail(30)
        );
    }
    // The process at idle with one edge.
    tokio::time::sleep(Duration::from_secs(if args.quick { 10 } else { 30 })).await;
    cloud.alive()?;
    let rss = cloud.rss_kib();
    let fds = procstat::open_fds(cloud.pid);
    let threads = procstat::threads(cloud.pid);
    report.result(
        "idle_one_edge_rss",
        procstat::mib(rss),
        "MiB",
        true,
        1.0,
        &format!("fds {fds}, threads {threads}"),
    );

    // Single pod, one at a time.
    let mut lat = Vec::new();
    let mut lost = 0;
    for i in 0..args.single_pods {
        let name = format!("single-{i}");
        poller.watch(&format!("{NS}/pod/{name}"))?;
        let start = now_us();
        pods.create(&PostParams::default(), &pod_object(&name, node)?)
            .await?;
        match poller.found()? {
            Some(at) => lat.push(Duration::from_micros(at.saturating_sub(start))),
            None => lost += 1,
        }
    }
    lat.sort();
    if !lat.is_empty() {
        let notes = format!("{} pods, {lost} never stored", lat.len());
        report.result(
            "single_pod_p50",
            ms(percentile(&lat, 0.5)),
            "ms",
            true,
            2.0,
            &notes,
        );
        report.result(
            "single_pod_p99",
            ms(percentile(&lat, 0.99)),
            "ms",
            true,
            2.0,
            &notes,
        );
    }

    // Relay through the edge's stream agent: the tunnel is up once a small logs request passes.
    let pids = [edgecore.process().id(), cloud.pid];
    let relay = relay(args, report, ports, body.len(), pids).await;
    stand_in.abort();
    let _ = edgecore.process().terminate(Duration::from_secs(5)).await;
    relay
}

// ------------------------------------------------------------------------- relay

fn relay_body(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

/// The kubelet's answer to an exec upgrade; the bytes after it are the stream.
const SWITCHING: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
const SMALL: usize = 1024;

/// The kubelet stand-in on 127.0.0.1:10350 (plain HTTP, as edgecore's stream agent dials it):
/// logs and exec output of pod `big` are `body`, of any other pod 1 KiB of it.
async fn kubelet_stand_in(listener: tokio::net::TcpListener, body: Arc<Vec<u8>>) {
    while let Ok((mut sock, _)) = listener.accept().await {
        let _ = sock.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let mut buf = kubeedge_wire::http1::BytesMut::new();
            let Ok(head) = kubeedge_wire::http1::read_request_head(&mut sock, &mut buf).await
            else {
                return;
            };
            let path = head.path().to_owned();
            let data: &[u8] = if path.contains("/big/") {
                &body
            } else {
                &body[..SMALL]
            };
            if path.starts_with("/exec/") {
                let _ = sock.write_all(SWITCHING).await;
                let _ = sock.write_all(data).await;
            } else {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    data.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(data).await;
            }
            let _ = sock.shutdown().await;
        });
    }
}

/// A TLS connection to the stream server as the API server makes it (its kubelet-client
/// certificate).
async fn stream_conn(
    ports: Ports,
    tls: &Arc<rustls::ClientConfig>,
) -> anyhow::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", ports.stream)).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    Ok(tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await?)
}

/// Reads the body of a logs or exec response until `want` bytes (exec) or the end of the
/// response (logs, chunked or not); returns (first byte, end).
async fn transfer<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    exec: bool,
    pod: &str,
    want: usize,
) -> anyhow::Result<(Duration, Duration)> {
    use kubeedge_wire::http1::{self, BodyReader, BytesMut};
    let start = Instant::now();
    let request = if exec {
        format!(
            "POST /exec/{NS}/{pod}/app?command=cat&output=1&stdout=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
        )
    } else {
        format!("GET /containerLogs/{NS}/{pod}/app HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    };
    conn.write_all(request.as_bytes()).await?;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut conn, &mut buf).await?;
    let mut first = None;
    let mut n = 0;
    if exec {
        if head.status != 101 {
            bail!("exec: status {}", head.status);
        }
        n = buf.len();
        if n > 0 {
            first = Some(start.elapsed());
        }
        while n < want {
            buf.clear();
            buf.reserve(1 << 20);
            let k = conn.read_buf(&mut buf).await?;
            if k == 0 {
                break;
            }
            first.get_or_insert_with(|| start.elapsed());
            n += k;
        }
    } else {
        if head.status != 200 {
            bail!("logs: status {}", head.status);
        }
        let mut body = BodyReader::new(&head);
        while let Some(piece) = body.next(&mut conn, &mut buf, 1 << 20).await? {
            if !piece.is_empty() {
                first.get_or_insert_with(|| start.elapsed());
            }
            n += piece.len();
            if n >= want {
                break;
            }
        }
    }
    if n < want {
        bail!(
            "{}: {n} bytes, expected {want}",
            if exec { "exec" } else { "logs" }
        );
    }
    Ok((first.unwrap_or_default(), start.elapsed()))
}

/// `[edgecore, cloudcore]`: the processes whose CPU the throughput rows report.
async fn relay(
    args: &SideArgs,
    report: &mut Report,
    ports: Ports,
    big: usize,
    [edgecore, cloudcore]: [u32; 2],
) -> anyhow::Result<()> {
    let pki = k8s_testenv::env().pki();
    let read = |f: &str| std::fs::read_to_string(pki.join(f));
    let ca = pki::first_pem_der(&read("ca.crt")?)?;
    let cert = pki::first_pem_der(&read("kubelet-client.crt")?)?;
    let key = pki::first_pem_der(&read("kubelet-client.key")?)?;
    let tls = Arc::new(pki::tls::client_config(&ca, Some((&cert, &key)))?);
    // The tunnel is up when a small request passes (edgecore re-dials every 2 s).
    let t = Instant::now();
    loop {
        let attempt = async {
            let conn = stream_conn(ports, &tls).await?;
            transfer(conn, false, "small", SMALL).await
        };
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(_)) => break,
            Ok(Err(e)) if t.elapsed() > Duration::from_secs(60) => {
                bail!("no logs through the tunnel within 60 s: {e:#}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    for exec in [false, true] {
        let what = if exec { "exec" } else { "logs" };
        let mut firsts = Vec::new();
        for _ in 0..20 {
            let conn = stream_conn(ports, &tls).await?;
            let (first, _) = transfer(conn, exec, "small", SMALL).await?;
            firsts.push(first);
        }
        firsts.sort();
        report.result(
            &format!("relay_{what}_first_byte"),
            ms(percentile(&firsts, 0.5)),
            "ms",
            true,
            1.0 / 0.7,
            "median of 20, 1 KiB bodies",
        );
        let rounds = if args.quick { 2 } else { 3 };
        let mut rates = Vec::new();
        let before = Usage::now(&[&[edgecore], &[cloudcore]]);
        let calls_before = [edgecore, cloudcore].map(Calls::of);
        for _ in 0..rounds {
            let conn = stream_conn(ports, &tls).await?;
            let (_, total) = transfer(conn, exec, "big", big).await?;
            rates.push(big as f64 / (1 << 20) as f64 / total.as_secs_f64());
        }
        let spent = before.until(&Usage::now(&[&[edgecore], &[cloudcore]]));
        let [edge_calls, cloud_calls] = [edgecore, cloudcore].map(Calls::of);
        let (edge_calls, cloud_calls) = (
            edge_calls.since(&calls_before[0]),
            cloud_calls.since(&calls_before[1]),
        );
        rates.sort_by(|a, b| a.total_cmp(b));
        let row = format!("relay_{what}_throughput");
        let mib = (rounds * big) as f64 / (1 << 20) as f64;
        let (edge_cpu, cloud_cpu) = (spent.groups[0], spent.groups[1]);
        let per_mib = |cpu: f64| cpu / mib * 1000.0;
        let cores = procstat::cores();
        // Ceilings if cloudcore cost nothing: edgecore's stream agent on one core, and
        // edgecore with the harness (the other end of both hops) sharing every core.
        let one_core = mib / edge_cpu.max(1e-9);
        let all_cores = cores as f64 * mib / (edge_cpu + spent.harness).max(1e-9);
        let notes = format!(
            "median of {rounds} x {} MiB; over the {rounds} transfers ({:.1} s): real edgecore {:.0}% of one core, cloudcore {:.0}%, harness (TLS client and kubelet stand-in, one thread) {:.0}%, {}; CPU-ms per MiB: edgecore {:.1}, cloudcore {:.1}, harness {:.1}; with cloudcore costing nothing the ceiling is {one_core:.1} MiB/s with edgecore on one core, {all_cores:.1} MiB/s with edgecore and the harness on all {cores} cores; per MiB, edgecore {}, cloudcore {}",
            big >> 20,
            spent.wall,
            spent.pct(edge_cpu),
            spent.pct(cloud_cpu),
            spent.pct(spent.harness),
            spent.machine_text(),
            per_mib(edge_cpu),
            per_mib(cloud_cpu),
            per_mib(spent.harness),
            edge_calls.per(mib),
            cloud_calls.per(mib),
        );
        report.result(&row, rates[rates.len() / 2], "MiB/s", false, 2.0, &notes);
        report.bound(&row, one_core, "edgecore's CPU per MiB on one core");
        report.bound(
            &row,
            all_cores,
            &format!("edgecore's and the harness' CPU per MiB on {cores} cores"),
        );
    }
    Ok(())
}

/// A process's read and write system calls and context switches so far: how finely it cut
/// the relayed bytes, which its CPU per MiB follows.
#[derive(Clone, Copy)]
struct Calls {
    reads: u64,
    writes: u64,
    switches: u64,
}

impl Calls {
    fn of(pid: u32) -> Calls {
        let (reads, writes) = procstat::io_calls(pid);
        Calls {
            reads,
            writes,
            switches: procstat::context_switches(pid),
        }
    }

    fn since(&self, before: &Calls) -> Calls {
        Calls {
            reads: self.reads.saturating_sub(before.reads),
            writes: self.writes.saturating_sub(before.writes),
            switches: self.switches.saturating_sub(before.switches),
        }
    }

    fn per(&self, mib: f64) -> String {
        format!(
            "{:.0} reads, {:.0} writes, {:.0} context switches",
            self.reads as f64 / mib,
            self.writes as f64 / mib,
            self.switches as f64 / mib
        )
    }
}

// ------------------------------------------------------------------------- fleets

/// What the fleet phases connect with: the ports, the bootstrap token, the CA, the work folder.
type Cluster<'a> = (Ports, &'a str, &'a pki::CertificateAuthority, &'a Path);

#[allow(clippy::too_many_arguments)] // one phase, everything it measures with
async fn fleet_phase(
    args: &SideArgs,
    report: &mut Report,
    cloud: &mut Cloud,
    client: &kube::Client,
    (ports, token, ca, dir): Cluster<'_>,
    k: usize,
    n: usize,
    last: bool,
) -> anyhow::Result<()> {
    let prefix = prefix(k);
    // ---- the floor of connect: the same simulators against the least a server must do, in
    // the same minute as the row (before it, so cloudcore's state is not touched).
    let floor = if args.runs("floor") {
        match handshake_floor(args, ca, dir, &format!("{prefix}-floor"), n).await {
            Ok(f) => Some(f),
            Err(e) => {
                warn!(error = %format!("{e:#}"), n, "the connect floor failed");
                let text = format!("error impl={} row=connect_floor_{n} {e:#}", report.imp);
                report.line(text.replace('\n', " "));
                None
            }
        }
    } else {
        None
    };
    let rss_before = cloud.rss_kib();
    let mut fleet = Fleet::start(&FleetSpec {
        hub: ports.ws_addr(),
        https: ports.https_url(),
        token,
        prefix: &prefix,
        ns: NS,
        n,
        per_child: args.per_child,
    })?;
    // ---- connect: bootstrap and connect, all at once.
    let (sims, cloud_pid, api) = (fleet.pids(), [cloud.pid], apiserver_pids());
    let requests_before = apiserver_requests(client).await;
    let before = Usage::now(&[&sims, &cloud_pid, &api]);
    let t = Instant::now();
    fleet.command("go")?;
    let took = fleet.wait_up(n, t, Duration::from_secs(300)).await?;
    let spent = before.until(&Usage::now(&[&sims, &cloud_pid, &api]));
    let asked = requests_between(&requests_before, &apiserver_requests(client).await);
    let (failures, why) = fleet.board.bootstrap_failures();
    let mut notes = if failures > 0 {
        format!("{failures} bootstrap attempts failed and were retried (last: {why}); ")
    } else {
        String::new()
    };
    let cores = procstat::cores();
    let (sim_cpu, cloud_cpu, api_cpu) = (spent.groups[0], spent.groups[1], spent.groups[2]);
    notes.push_str(&format!(
        "CPU-s over the phase: simulators {sim_cpu:.2} ({:.0}% of a core), cloudcore {cloud_cpu:.2}, API server and etcd {api_cpu:.2}, harness {:.2}; {}; the simulators' own work alone needs {:.2} s on {cores} cores",
        spent.pct(sim_cpu),
        spent.harness,
        spent.machine_text(),
        sim_cpu / cores as f64,
    ));
    if let Some(f) = &floor {
        notes.push_str(&format!(
            "; the same simulators against a server doing only the TLS handshakes, the token check, the CSR signing and the WebSocket upgrade (same CA): {:.2} s, simulators {:.2} CPU-s, that server {:.2} CPU-s, {}",
            f.wall, f.sims, f.server, f.machine
        ));
    }
    // What made the API server work: the requests of the phase (every client), the most
    // frequent first, per edge.
    let top: Vec<String> = asked
        .iter()
        .take(4)
        .map(|(d, key)| format!("{:.2} {key}", d / n as f64))
        .collect();
    notes.push_str(&format!(
        "; API requests per edge over the phase: {:.2} in all, most: {}",
        asked.iter().map(|(d, _)| d).sum::<f64>() / n as f64,
        top.join(", ")
    ));
    if let Some(dir) = cloud.log.parent() {
        let text: String = asked.iter().map(|(d, k)| format!("{d:.0} {k}\n")).collect();
        std::fs::write(
            dir.join(format!("connect-{n}-apiserver-requests.txt")),
            text,
        )?;
    }
    let row = format!("connect_{n}");
    report.result(&row, took.as_secs_f64(), "s", true, 2.0, &notes);
    report.bound(
        &row,
        sim_cpu / cores as f64,
        &format!("the simulators' CPU on {cores} cores"),
    );
    // The API server's work in the phase is what this cloudcore asked of it: a floor for a
    // cloudcore that asks the same and costs nothing itself.
    report.bound(
        &row,
        (sim_cpu + api_cpu) / cores as f64,
        &format!("the simulators' and the API server's CPU on {cores} cores"),
    );
    if let Some(f) = &floor {
        report.bound(&row, f.wall, "the minimal server's connect time");
    }
    cloud.alive()?;

    // ---- idle
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window = args.idle_window();
    let (cpu0, t0) = (cloud.cpu(), Instant::now());
    tokio::time::sleep(window).await;
    let cpu = cloud.cpu() - cpu0;
    let secs = t0.elapsed().as_secs_f64();
    let rss = cloud.rss_kib();
    let per_edge_kib = rss.saturating_sub(rss_before) as f64 / n as f64;
    let up = fleet.board.up();
    report.result(
        &format!("idle_rss_per_edge_{n}"),
        per_edge_kib,
        "KiB",
        true,
        2.0,
        &format!(
            "RSS {:.1} MiB with {n} edges, {:.1} MiB before them; {up} still connected",
            procstat::mib(rss),
            procstat::mib(rss_before)
        ),
    );
    report.result(
        &format!("idle_cpu_per_edge_{n}"),
        cpu / secs / n as f64 * 1e6,
        "us/s",
        true,
        2.0,
        &format!("{cpu:.2} s of CPU over {secs:.0} s"),
    );

    // A row that fails is reported and the next one runs.
    let failed = |report: &mut Report, row: &str, r: anyhow::Result<()>| {
        if let Err(e) = r {
            warn!(row, error = %format!("{e:#}"), "a row failed");
            let text = format!("error impl={} row={row} {e:#}", report.imp).replace('\n', " ");
            report.line(text);
        }
    };
    let downstream_ran = k == 0 && args.runs("downstream");
    if downstream_ran {
        let r = downstream(args, report, cloud, client, &fleet, &prefix, n).await;
        failed(report, "downstream", r);
    }
    if k == 0 && args.runs("upstream") {
        let r = upstream(args, report, cloud, client, &mut fleet, n).await;
        failed(report, "upstream", r);
    }
    if last && args.runs("reconnect") {
        let r = reconnect(
            args,
            report,
            cloud,
            client,
            &mut fleet,
            &prefix,
            n,
            downstream_ran,
        )
        .await;
        failed(report, &format!("reconnect_{n}"), r);
    }
    Ok(())
}

/// The connect phase against [`floor::FloorServer`].
struct Floor {
    wall: f64,
    sims: f64,
    server: f64,
    machine: String,
}

/// `n` simulated edges (named `<prefix>-<i>`) bootstrap with a token of `ca` and connect to a
/// server that does only what no cloudcore can leave out; the fleet and the server are gone
/// when this returns.
async fn handshake_floor(
    args: &SideArgs,
    ca: &pki::CertificateAuthority,
    dir: &Path,
    prefix: &str,
    n: usize,
) -> anyhow::Result<Floor> {
    let server = floor::FloorServer::start(dir, ca)?;
    let token = pki::create_token(ca, Duration::from_secs(3600));
    let mut fleet = Fleet::start(&FleetSpec {
        hub: SocketAddr::from(([127, 0, 0, 1], server.ws)),
        https: format!("https://127.0.0.1:{}", server.https),
        token: &token,
        prefix,
        ns: NS,
        n,
        per_child: args.per_child,
    })?;
    let (sims, srv) = (fleet.pids(), [server.pid()]);
    let before = Usage::now(&[&sims, &srv]);
    let t = Instant::now();
    fleet.command("go")?;
    let took = fleet.wait_up(n, t, Duration::from_secs(300)).await?;
    let spent = before.until(&Usage::now(&[&sims, &srv]));
    let (failures, why) = fleet.board.bootstrap_failures();
    if failures > 0 {
        bail!("{failures} bootstraps against the floor server failed (last: {why})");
    }
    drop(fleet);
    drop(server);
    Ok(Floor {
        wall: took.as_secs_f64(),
        sims: spent.groups[0],
        server: spent.groups[1],
        machine: spent.machine_text(),
    })
}

/// The ObjectSyncs of the run's namespace as a watch sees them: per record, its status version
/// and when the watch first saw it there.
struct AckWatch {
    seen: Arc<std::sync::Mutex<std::collections::HashMap<String, (u64, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl AckWatch {
    fn start(client: kube::Client) -> AckWatch {
        use kube::runtime::watcher::{self, Event};
        let seen = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let map = seen.clone();
        let task = tokio::spawn(async move {
            let api = Api::<ObjectSync>::namespaced(client, NS);
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(ev) = events.next().await {
                let obj = match ev {
                    Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => o,
                    _ => continue,
                };
                let name = obj.metadata.name.clone().unwrap_or_default();
                let acked: u64 = obj
                    .status
                    .as_ref()
                    .and_then(|s| s.object_resource_version.parse().ok())
                    .unwrap_or(0);
                let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
                let e = m.entry(name).or_insert((0, Instant::now()));
                if acked > e.0 {
                    *e = (acked, Instant::now());
                }
            }
        });
        AckWatch { seen, task }
    }

    /// How many of the created pods' records show their version, and when the last of those
    /// got there.
    fn progress(&self, created: &[(String, String, String, u64, u64)]) -> (usize, Option<Instant>) {
        let m = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0;
        let mut last: Option<Instant> = None;
        for (_, node, uid, rv, _) in created {
            if let Some((acked, at)) = m.get(&format!("{node}.{uid}"))
                && acked >= rv
            {
                done += 1;
                last = Some(last.map_or(*at, |l| l.max(*at)));
            }
        }
        (done, last)
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// `pods` pods per edge created in the API server; latency from the create request to the edge
/// receiving it, and the time until every ObjectSync records the edge's acknowledgement.
async fn downstream(
    args: &SideArgs,
    report: &mut Report,
    cloud: &mut Cloud,
    client: &kube::Client,
    fleet: &Fleet,
    prefix: &str,
    n: usize,
) -> anyhow::Result<()> {
    let per = args.pods;
    let total = n * per;
    let api = Api::<Pod>::namespaced(client.clone(), NS);
    let created = Arc::new(std::sync::Mutex::new(Vec::with_capacity(total)));
    let acks = AckWatch::start(client.clone());
    let t = Instant::now();
    for_each(total, |j| {
        let (api, created) = (api.clone(), created.clone());
        let (i, p) = (j / per, j % per);
        let node = format!("{prefix}-{i}");
        async move {
            let name = pod_name(&node, p);
            let pod = pod_object(&name, &node)?;
            let start = now_us();
            let pod = api.create(&PostParams::default(), &pod).await?;
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            created.lock().unwrap_or_else(|e| e.into_inner()).push((
                name,
                node,
                uid,
                rv(&pod.metadata),
                start,
            ));
            Ok(())
        }
    })
    .await?;
    let creating = t.elapsed();
    let created = std::mem::take(&mut *created.lock().unwrap_or_else(|e| e.into_inner()));
    // Every pod at its edge (at most `limit` after the last create).
    let deadline = Instant::now() + args.limit();
    let mut lat = Vec::with_capacity(total);
    let mut missing;
    loop {
        lat.clear();
        missing = 0;
        for (name, _, _, rv, start) in &created {
            match fleet.board.pod_arrival(name, *rv) {
                Some(at) => lat.push(Duration::from_micros(at.saturating_sub(*start))),
                None => missing += 1,
            }
        }
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let delivered = t.elapsed();
    lat.sort();
    let notes = format!(
        "{total} pods created in {:.1} s ({:.0}/s); {missing} had not reached their edge {} s after the last create; last delivered {:.1} s after the first create; {} pod messages at the edges",
        creating.as_secs_f64(),
        total as f64 / creating.as_secs_f64(),
        args.limit().as_secs(),
        delivered.as_secs_f64(),
        fleet.board.pod_messages()
    );
    if !lat.is_empty() {
        report.result(
            "downstream_p50",
            ms(percentile(&lat, 0.5)),
            "ms",
            true,
            2.0,
            &notes,
        );
        report.result(
            "downstream_p99",
            ms(percentile(&lat, 0.99)),
            "ms",
            true,
            2.0,
            &notes,
        );
    }
    cloud.alive()?;
    // Every ObjectSync at its pod's resource version (the watch started before the creates).
    let deadline = Instant::now() + args.limit();
    let mut done;
    let mut last;
    loop {
        (done, last) = acks.progress(&created);
        if done >= created.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    acks.stop();
    report.result(
        "downstream_all_acked",
        last.map_or(f64::NAN, |l| l.duration_since(t).as_secs_f64()),
        "s",
        true,
        2.0,
        &format!(
            "{done}/{} ObjectSyncs at the pod's version, from the first create",
            created.len()
        ),
    );
    Ok(())
}

/// The API server's `apiserver_request_total` by verb, resource and subresource (empty when
/// its metrics cannot be read).
async fn apiserver_requests(client: &kube::Client) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(req) = http::Request::get("/metrics").body(Vec::new()) else {
        return out;
    };
    let Ok(text) = client.request_text(req).await else {
        return out;
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"'))
                .unwrap_or("")
                .to_owned()
        };
        let key = format!(
            "{} {} {} {}",
            label("verb"),
            label("resource"),
            label("subresource"),
            label("code")
        );
        *out.entry(key).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// The requests counted between two [`apiserver_requests`] readings, the most frequent first.
fn requests_between(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> Vec<(f64, String)> {
    let mut grown: Vec<(f64, String)> = after
        .iter()
        .map(|(key, n)| (n - before.get(key).copied().unwrap_or(0.0), key.clone()))
        .filter(|(d, _)| *d >= 1.0)
        .collect();
    grown.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    grown
}

/// The p99 round trip above which an upstream step no longer counts as sustained.
const UPSTREAM_P99_BOUND: Duration = Duration::from_secs(1);
/// The share of a step's patches that must be answered with success within the step and its
/// grace for the step to count as sustained.
const UPSTREAM_ANSWERED: f64 = 0.95;

/// What one offered upstream rate gave.
struct UpstreamStep {
    offered: f64,
    sent: u64,
    ok: usize,
    nodes_ok: usize,
    errors: usize,
    /// Successful answers per second, first send to last answer.
    rate: f64,
    p50: Duration,
    p99: Duration,
    cpu: f64,
}

impl UpstreamStep {
    fn sustained(&self) -> bool {
        self.ok as f64 >= UPSTREAM_ANSWERED * self.sent as f64 && self.p99 <= UPSTREAM_P99_BOUND
    }

    fn describe(&self) -> String {
        format!(
            "{:.0}/s offered: {} of {} answered OK ({} node, {} pod), {} errors, {:.0}/s, p50 {:.1} ms, p99 {:.1} ms",
            self.offered,
            self.ok,
            self.sent,
            self.nodes_ok,
            self.ok - self.nodes_ok,
            self.errors,
            self.rate,
            ms(self.p50),
            ms(self.p99)
        )
    }
}

/// One step of the upstream ramp: every edge sends a node status and a pod status patch every
/// `period_ms` for `rounds` rounds; waits for the answers (at most `grace` after the last
/// send). Every answer is appended to `raw` (`<offered> <kind> <ok> <sent µs> <rtt µs>`).
async fn upstream_step(
    cloud: &mut Cloud,
    fleet: &mut Fleet,
    n: usize,
    period_ms: u64,
    rounds: u64,
    grace: Duration,
    raw: &mut String,
) -> anyhow::Result<UpstreamStep> {
    let _ = fleet.board.take_answers();
    let cpu0 = cloud.cpu();
    let t = Instant::now();
    fleet.command(&format!("status {period_ms} {rounds}"))?;
    let sent = 2 * n as u64 * rounds;
    let offered = sent as f64 / (period_ms * rounds) as f64 * 1000.0;
    let deadline = t + Duration::from_millis(period_ms * rounds) + grace;
    let mut answers = Vec::new();
    while (answers.len() as u64) < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        answers.extend(fleet.board.take_answers());
    }
    let cpu = cloud.cpu() - cpu0;
    for a in &answers {
        let kind = if a.node { "node" } else { "pod" };
        raw.push_str(&format!(
            "{offered:.0} {kind} {} {} {}\n",
            u8::from(a.ok),
            a.sent_us,
            a.rtt_us
        ));
    }
    let ok: Vec<&fleet::Answer> = answers.iter().filter(|a| a.ok).collect();
    let first = ok.iter().map(|a| a.sent_us).min().unwrap_or(0);
    let last = ok.iter().map(|a| a.sent_us + a.rtt_us).max().unwrap_or(0);
    let span = (last.saturating_sub(first)) as f64 / 1e6;
    let mut rtt: Vec<Duration> = ok.iter().map(|a| Duration::from_micros(a.rtt_us)).collect();
    rtt.sort();
    // Nothing answered: every round trip is longer than the step and its grace.
    let never = deadline - t;
    Ok(UpstreamStep {
        offered,
        sent,
        ok: ok.len(),
        nodes_ok: ok.iter().filter(|a| a.node).count(),
        errors: answers.len() - ok.len(),
        rate: if span > 0.0 {
            ok.len() as f64 / span
        } else {
            0.0
        },
        p50: if rtt.is_empty() {
            never
        } else {
            percentile(&rtt, 0.5)
        },
        p99: if rtt.is_empty() {
            never
        } else {
            percentile(&rtt, 0.99)
        },
        cpu,
    })
}

/// How many steps the upstream ramp takes between the last rate sustained and the first one
/// not sustained, each halving the interval (4: the rate is known to 1/16 of the last
/// doubling).
const UPSTREAM_BISECTIONS: usize = 4;

/// Upstream capacity: every edge sends node and pod status patches (as edged does through its
/// metamanager) at a rate that doubles each step, from edged's own period
/// (`--status-period-ms`) on, until a step is no longer sustained (under 95% answered with
/// success within the step and a grace, or a p99 round trip above 1 s); then
/// [`UPSTREAM_BISECTIONS`] steps halve the interval between the last rate sustained and the
/// first one not. Rows: the highest rate sustained, the p99 at the first step (edged's rate,
/// the same offered load on both sides), and cloudcore's CPU per status answered at the
/// highest doubling step both sides sustained (the script pairs the `step` lines of both; on
/// its own this side reports its own highest doubling step sustained).
async fn upstream(
    args: &SideArgs,
    report: &mut Report,
    cloud: &mut Cloud,
    client: &kube::Client,
    fleet: &mut Fleet,
    n: usize,
) -> anyhow::Result<()> {
    let base_ms = args.status_period_ms.max(100);
    let step_ms: u64 = if args.quick { 10_000 } else { 20_000 };
    let grace = Duration::from_secs(if args.quick { 5 } else { 10 });
    let mut raw = String::new();
    // Each step with whether it belongs to the doubling ladder (the steps both sides run).
    let mut steps: Vec<(UpstreamStep, bool)> = Vec::new();
    let requests_before = apiserver_requests(client).await;
    // Rounds of a step: as many periods as fill about `step_ms`.
    let rounds = |period_ms: u64| ((step_ms + period_ms / 2) / period_ms).max(1);
    let mut period_ms = base_ms;
    // The periods of the last step sustained and the first one not (shorter).
    let mut sustained_ms: Option<u64> = None;
    let mut failed_ms: Option<u64> = None;
    // At most 7 doublings (1,000 edges: 200/s to 25,600/s offered).
    for _ in 0..8 {
        let step = upstream_step(
            cloud,
            fleet,
            n,
            period_ms,
            rounds(period_ms),
            grace,
            &mut raw,
        )
        .await?;
        let sustained = step.sustained();
        info!(step = %step.describe(), sustained, "upstream step");
        steps.push((step, true));
        // The last step's stragglers are not the next step's answers.
        tokio::time::sleep(Duration::from_secs(if sustained { 1 } else { 3 })).await;
        if !sustained {
            failed_ms = Some(period_ms);
            break;
        }
        sustained_ms = Some(period_ms);
        if period_ms / 2 < 10 {
            break;
        }
        period_ms /= 2;
    }
    // Between the two: the rate halfway (the harmonic mean of the periods), kept or refused.
    if let (Some(mut lo), Some(mut hi)) = (sustained_ms, failed_ms) {
        for _ in 0..UPSTREAM_BISECTIONS {
            let mid = 2 * lo * hi / (lo + hi);
            if mid == lo || mid == hi {
                break;
            }
            let step = upstream_step(cloud, fleet, n, mid, rounds(mid), grace, &mut raw).await?;
            let sustained = step.sustained();
            info!(step = %step.describe(), sustained, "upstream step (between)");
            steps.push((step, false));
            tokio::time::sleep(Duration::from_secs(if sustained { 1 } else { 3 })).await;
            if sustained {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    if let Some(dir) = cloud.log.parent() {
        std::fs::write(dir.join("upstream-answers.txt"), raw)?;
        // What the API server was asked meanwhile (every client), by verb and resource.
        let after = apiserver_requests(client).await;
        let text: String = requests_between(&requests_before, &after)
            .iter()
            .map(|(d, key)| format!("{d:.0} {key}\n"))
            .collect();
        std::fs::write(dir.join("upstream-apiserver-requests.txt"), text)?;
    }
    // Every step, for the script to pair the doubling steps of both sides.
    for (s, ladder) in &steps {
        report.line(format!(
            "step impl={} name=upstream offered={:.0} ladder={} sustained={} ok={} cpu={:.3}",
            report.imp,
            s.offered,
            u8::from(*ladder),
            u8::from(s.sustained()),
            s.ok,
            s.cpu
        ));
    }
    let ladder = steps
        .iter()
        .map(|(s, ladder)| {
            format!(
                "{}{}{}",
                if *ladder { "" } else { "between: " },
                s.describe(),
                if s.sustained() {
                    ""
                } else {
                    " (not sustained)"
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let best = steps
        .iter()
        .filter(|(s, _)| s.sustained())
        .map(|(s, _)| s.rate)
        .fold(0.0, f64::max);
    let first = &steps[0].0;
    report.result(
        "upstream_rate",
        best,
        "status/s",
        false,
        2.0,
        &format!(
            "highest rate sustained (95% answered OK, p99 <= {} ms): {ladder}",
            UPSTREAM_P99_BOUND.as_millis()
        ),
    );
    report.result(
        "upstream_p99",
        ms(first.p99),
        "ms",
        true,
        2.0,
        &format!("at edged's rate: {}", first.describe()),
    );
    // This side's own highest doubling step sustained (or the first step); the script puts
    // the highest one both sides sustained in its place.
    let own = steps
        .iter()
        .filter(|(s, ladder)| *ladder && s.sustained())
        .map(|(s, _)| s)
        .next_back()
        .unwrap_or(first);
    report.result(
        "upstream_cpu_per_status",
        if own.ok > 0 {
            own.cpu * 1000.0 / own.ok as f64
        } else {
            0.0
        },
        "ms",
        true,
        2.0,
        &format!(
            "cloudcore CPU {:.2} s over {} statuses answered OK at {:.0}/s offered",
            own.cpu, own.ok, own.offered
        ),
    );
    Ok(())
}

/// Every edge drops its session; one pod per edge changes meanwhile; every edge dials again at
/// the same moment: the time until all are back and have the new version.
#[allow(clippy::too_many_arguments)] // one phase, everything it measures with
async fn reconnect(
    args: &SideArgs,
    report: &mut Report,
    cloud: &mut Cloud,
    client: &kube::Client,
    fleet: &mut Fleet,
    prefix: &str,
    n: usize,
    has_pods: bool,
) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), NS);
    if !has_pods {
        // One pod per edge, delivered before the drop.
        for_each(n, |i| {
            let api = api.clone();
            let node = format!("{prefix}-{i}");
            async move {
                api.create(
                    &PostParams::default(),
                    &pod_object(&pod_name(&node, 0), &node)?,
                )
                .await?;
                Ok(())
            }
        })
        .await?;
        let t = Instant::now();
        while fleet.board.pod_messages() < n && t.elapsed() < args.limit() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    fleet.drop_all().await?;
    // Give cloudcore a moment to see the sessions end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let updated = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
    for_each(n, |i| {
        let (api, updated) = (api.clone(), updated.clone());
        let name = pod_name(&format!("{prefix}-{i}"), 0);
        async move {
            let patch = json!({"metadata": {"labels": {"bench": "v1"}}});
            let pod = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            updated
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((name, rv(&pod.metadata)));
            Ok(())
        }
    })
    .await?;
    let updated = std::mem::take(&mut *updated.lock().unwrap_or_else(|e| e.into_inner()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = Instant::now();
    fleet.command("dial")?;
    let back = fleet.wait_up(n, t, args.limit()).await?;
    let deadline = Instant::now() + args.limit();
    let mut missing;
    loop {
        missing = updated
            .iter()
            .filter(|(name, rv)| fleet.board.pod_arrival(name, *rv).is_none())
            .count();
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let caught_up = t.elapsed();
    cloud.alive()?;
    report.result(
        &format!("reconnect_{n}"),
        caught_up.as_secs_f64(),
        "s",
        true,
        2.0,
        &format!(
            "all {n} back in {:.2} s; {missing} of {n} pod updates made while away had not arrived {} s later",
            back.as_secs_f64(),
            args.limit().as_secs()
        ),
    );
    Ok(())
}
