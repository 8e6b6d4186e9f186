//! Load test of cloudhub: N simulated edge nodes (the Rust edge client, real TLS WebSockets on
//! 127.0.0.1, each node dialing from its own loopback address `127.10.x.y`) against a cloudhub
//! running in a separate process (this example re-executed with `serve`). Every phase is
//! bounded in time.
//!
//! - default mode: connected nodes, server RSS per idle node, a message to every node, and R
//!   nodes reconnecting at once with nothing lost.
//! - `soak`: churn. For `--minutes`, every `--interval-secs` another `--churn` percent of the
//!   nodes drop their connection and reconnect, while the pods of those nodes and of another
//!   `--churn` percent change. The server's RSS, descriptors, threads and sessions are taken
//!   after a warm-up and again at the end, once the churn stopped and everything settled; a
//!   pod version is *lost* when it never reached its node or was never acknowledged into the
//!   hub's ObjectSync store. PASS/FAIL per target; the exit status is non-zero on FAIL.
//!
//! ```text
//! cargo run --release --example cloudhub_load -- --nodes 10000 --reconnect 1000
//! cargo run --release --example cloudhub_load -- soak --nodes 1000 --churn 10 --minutes 10
//! cargo run --release --example cloudhub_load -- serve --ws-port 10000 --https-port 10002 --dir /tmp/hub
//! ```
//!
//! `serve` alone is a standalone demo hub (in-memory ObjectSync store, no Kubernetes): it
//! prints its token and reads commands on stdin (`broadcast <tag> [<from> <to>]`, `stats`,
//! `check`, `quit`). A broadcast changes `--pods` pods (`default/pod/p<k>`) of each node. Its
//! sync loop re-sends the unacknowledged pods of a node when the node (re)connects and every
//! 5 s, standing in for synccontroller.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use beehive::{Bus, Content, Message};
use cloudhub::{CloudHub, CloudHubConfig, MemoryStore, SyncKey};
use edge::hub::{Backoff, HubClient, HubClientConfig, HubEvent};

#[path = "support/procstat.rs"]
mod procstat;

use procstat::{mib, open_fds, rss_kib, threads};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.windows(2)
        .find(|w| w[0] == name)
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match args.get(1).map(String::as_str) {
        Some("serve") => serve(&args),
        Some("soak") => soak(&args),
        _ => load(&args),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- server role

/// Pod `p<k>` of `node` at version `rv`, as edgecontroller sends it (uid `<node>-p<k>`).
fn update_for(node: &str, k: usize, rv: u64, tag: &str) -> Message {
    Message::new()
        .with_route("edgecontroller", "resource", format!("node/{node}/default/pod/p{k}"), "update")
        .with_resource_version(rv.to_string())
        .with_content(
            Content::from_json_text(format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p{k}","namespace":"default","uid":"{node}-p{k}","resourceVersion":"{rv}","annotations":{{"tag":"{tag}","sent_ms":"{}"}}}},"spec":{{"nodeName":"{node}","containers":[{{"name":"c","image":"nginx"}}]}}}}"#,
                beehive::now_millis()
            ))
            .unwrap_or_default(),
        )
}

fn sync_key(node: &str, k: usize) -> SyncKey {
    SyncKey {
        node: node.into(),
        namespace: "default".into(),
        uid: format!("{node}-p{k}"),
    }
}

fn serve(args: &[String]) -> anyhow::Result<()> {
    let dir: String = arg(args, "--dir", "/tmp/cloudhub-demo".to_owned());
    let pods: usize = arg(args, "--pods", 1usize).max(1);
    let mut config = CloudHubConfig::default();
    let dir = std::path::PathBuf::from(dir);
    config.advertise_address = vec!["127.0.0.1".into()];
    config.tls_ca_file = dir.join("ca/rootCA.crt");
    config.tls_ca_key_file = dir.join("ca/rootCA.key");
    config.tls_cert_file = dir.join("certs/server.crt");
    config.tls_private_key_file = dir.join("certs/server.key");
    config.websocket.address = "127.0.0.1".into();
    config.websocket.port = arg(args, "--ws-port", 10000);
    config.https.address = "127.0.0.1".into();
    config.https.port = arg(args, "--https-port", 10002);
    config.node_limit = arg(args, "--node-limit", 20_000);
    config.workers = arg(args, "--workers", 0);
    config.unixsocket.enable = false;
    actix_rt::System::new().block_on(async move {
        let bus = Bus::new();
        let store = MemoryStore::new();
        let hub = CloudHub::new(config, bus.endpoint("cloudhub"), None, Arc::new(store.clone())).await?;
        let handle = hub.handle();
        bus.register(hub)?;
        let mut events = bus.register_inbox("edgecontroller", "edgecontroller", 65_536)?;
        bus.start()?;
        let addrs = handle.start_servers()?;
        println!(
            "READY ws={} https={} pid={} token={}",
            addrs.websocket.map(|a| a.port()).unwrap_or(0),
            addrs.https.map(|a| a.port()).unwrap_or(0),
            std::process::id(),
            handle.token()
        );
        std::io::stdout().flush()?;
        let ep = bus.endpoint("edgecontroller");
        // Desired state per node: the last update of each pod (what synccontroller re-sends).
        let desired: Rc<RefCell<HashMap<String, Vec<Message>>>> = Rc::default();
        let unacked = {
            let (desired, store) = (desired.clone(), store.clone());
            move |node: &str| -> Vec<Message> {
                let desired = desired.borrow();
                let Some(msgs) = desired.get(node) else {
                    return Vec::new();
                };
                msgs.iter()
                    .enumerate()
                    .filter(|(k, msg)| {
                        let acked = store.record(&sync_key(node, *k)).map(|(_, rv)| rv).unwrap_or_default();
                        kubeedge_api::version::is_newer(&msg.header.resource_version, &acked)
                    })
                    .map(|(_, msg)| msg.clone())
                    .collect()
            }
        };
        let unacked = Rc::new(unacked);
        {
            let (unacked, ep) = (unacked.clone(), ep.clone());
            actix_rt::spawn(async move {
                while let Ok(ev) = events.recv().await {
                    if ev.route.operation == "connected"
                        && let Some(node) = ev.route.resource.strip_prefix("node/")
                    {
                        for msg in unacked(node) {
                            let _ = ep.send("cloudhub", msg).await;
                        }
                    }
                }
            });
        }
        {
            let (unacked, desired, ep) = (unacked.clone(), desired.clone(), ep.clone());
            actix_rt::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    let nodes: Vec<String> = desired.borrow().keys().cloned().collect();
                    for n in nodes {
                        for msg in unacked(&n) {
                            let _ = ep.send("cloudhub", msg).await;
                        }
                    }
                }
            });
        }
        let mut rv = 1u64;
        // Commands arrive on stdin; a plain thread reads them (tokio's stdin needs io-std).
        let (tx, mut lines) = tokio::sync::mpsc::channel::<String>(16);
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if tx.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        while let Some(line) = lines.recv().await {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["broadcast", tag, rest @ ..] => {
                    let range = match rest {
                        [from, to] => Some((from.parse::<usize>()?, to.parse::<usize>()?)),
                        _ => None,
                    };
                    let targets: Vec<String> = match range {
                        // Explicit nodes (connected or not): what the controllers would emit.
                        Some((a, b)) => (a..b).map(|i| format!("node-{i}")).collect(),
                        None => handle.nodes(),
                    };
                    rv += 1;
                    for node in &targets {
                        let msgs: Vec<Message> = (0..pods).map(|k| update_for(node, k, rv, tag)).collect();
                        desired.borrow_mut().insert(node.clone(), msgs.clone());
                        for msg in msgs {
                            ep.send("cloudhub", msg).await?;
                        }
                    }
                    println!("SENT {tag} {} rv={rv}", targets.len());
                }
                ["stats"] => {
                    let all = handle.all_node_stats();
                    let (sent, acked, retried) = all.iter().fold((0, 0, 0), |a, (_, s)| (a.0 + s.sent, a.1 + s.acked, a.2 + s.retried));
                    let s = handle.stats();
                    let pid = std::process::id();
                    println!(
                        "STATS nodes={} tasks={} rss_kib={} fds={} threads={} sent={sent} acked={acked} retried={retried} dropped_offline={} dropped_full={}",
                        s.connected_nodes,
                        s.connection_tasks,
                        rss_kib(pid),
                        open_fds(pid),
                        threads(pid),
                        s.dropped_offline,
                        s.dropped_full
                    );
                }
                ["check"] => {
                    // Acknowledgements are written to the store in batches: flush them first.
                    handle.flush_records().await;
                    let nodes: Vec<String> = desired.borrow().keys().cloned().collect();
                    let objects = desired.borrow().values().map(Vec::len).sum::<usize>();
                    let unacked: usize = nodes.iter().map(|n| unacked(n).len()).sum();
                    println!("CHECK objects={objects} unacked={unacked}");
                }
                ["quit"] => break,
                _ => println!("ERR unknown command {line:?}"),
            }
            std::io::stdout().flush()?;
        }
        handle.shutdown().await;
        bus.shutdown().await;
        anyhow::Ok(())
    })
}

// ---------------------------------------------------------------- the hub process

struct Server {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    pid: u32,
    ws_port: u16,
    dir: std::path::PathBuf,
}

impl Server {
    /// Starts `serve` in a child process (under `--wrap <profiler>` when given).
    fn start(args: &[String], pods: usize) -> anyhow::Result<Server> {
        let dir = std::env::temp_dir().join(format!("cloudhub-load-{}", std::process::id()));
        let exe = std::env::current_exe()?;
        let wrap: String = arg(args, "--wrap", String::new());
        let mut cmd = if wrap.is_empty() {
            Command::new(&exe)
        } else {
            let mut c = Command::new(&wrap);
            c.arg(&exe);
            c
        };
        let mut child = cmd
            .args(["serve", "--ws-port", "0", "--https-port", "0", "--dir"])
            .arg(&dir)
            .arg("--pods")
            .arg(pods.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().context("stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let mut ready = String::new();
        while !ready.starts_with("READY") {
            ready.clear();
            if stdout.read_line(&mut ready)? == 0 {
                bail!("the server exited before it was ready");
            }
        }
        let field = |k: &str| {
            ready
                .split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_owned)
        };
        let ws_port: u16 = field("ws=").context("READY line")?.parse()?;
        let pid: u32 = field("pid=").context("READY line")?.parse()?;
        println!("server pid {pid}, websocket 127.0.0.1:{ws_port}");
        Ok(Server {
            child,
            stdin,
            stdout,
            pid,
            ws_port,
            dir,
        })
    }

    fn command(&mut self, cmd: &str, expect: &str) -> anyhow::Result<String> {
        writeln!(self.stdin, "{cmd}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("server exited");
            }
            if line.starts_with(expect) {
                return Ok(line.trim().to_owned());
            }
        }
    }

    /// `broadcast` to nodes `from..to`; the resource version sent.
    fn broadcast(&mut self, tag: &str, from: usize, to: usize) -> anyhow::Result<u64> {
        sent_rv(&self.command(&format!("broadcast {tag} {from} {to}"), "SENT")?)
    }

    /// A numeric field of a `STATS` or `CHECK` line.
    fn field(line: &str, key: &str) -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Unacknowledged pod versions in the hub's store (after flushing it).
    fn unacked(&mut self) -> anyhow::Result<u64> {
        Ok(Self::field(&self.command("check", "CHECK")?, "unacked"))
    }

    fn stop(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sent_rv(line: &str) -> anyhow::Result<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("rv="))
        .context("SENT line without rv")?
        .parse()
        .context("rv")
}

fn wait_for(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    while !done() {
        if t0.elapsed() > limit {
            bail!("{what}: not reached within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(t0.elapsed())
}

// ---------------------------------------------------------------- simulated edges

/// The loopback address node `i` dials from: real edges have addresses of their own, and
/// per-source admission limits must see them apart.
fn node_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 10, (i / 250) as u8, (i % 250 + 1) as u8))
}

#[derive(Default)]
struct NodeState {
    connects: AtomicU64,
    /// Resource version of the last update received, and when (ms since start).
    last: Mutex<(u64, u128)>,
    /// Highest resource version received per pod `p<k>`.
    pods: Mutex<Vec<u64>>,
}

impl NodeState {
    /// Pods of this node whose received version is below `rv`.
    fn behind(&self, pods: usize, rv: u64) -> usize {
        let got = lock(&self.pods);
        (0..pods)
            .filter(|&k| got.get(k).copied().unwrap_or(0) < rv)
            .count()
    }
}

struct Fleet {
    nodes: Vec<Arc<NodeState>>,
    clients: Vec<HubClient>,
    /// Clients whose session is up (client side).
    connected: Arc<AtomicUsize>,
    start: Instant,
    stop: Arc<AtomicBool>,
    shards: Vec<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Fleet {
    /// Issues certificates and starts `n` clients on `--client-threads` current-thread
    /// runtimes (nodes dealt round-robin), at most `--connect-concurrency` connecting at once;
    /// returns once every client is started (not necessarily connected).
    fn start(args: &[String], server: &Server, n: usize) -> anyhow::Result<Fleet> {
        let concurrency: usize = arg(args, "--connect-concurrency", 200);
        let threads: usize = arg(args, "--client-threads", 2usize).max(1);
        let ca = pki::CertificateAuthority::from_pem(
            &std::fs::read_to_string(server.dir.join("ca/rootCA.crt"))?,
            &std::fs::read_to_string(server.dir.join("ca/rootCA.key"))?,
        )?;
        let t = Instant::now();
        let certs: Vec<pki::CertAndKey> = (0..n)
            .map(|i| ca.issue(&pki::IssueOptions::edge(&format!("node-{i}"))))
            .collect::<Result<_, _>>()?;
        println!("issued {n} edge certificates in {:?}", t.elapsed());
        let start = Instant::now();
        let nodes: Vec<Arc<NodeState>> = (0..n).map(|_| Arc::new(NodeState::default())).collect();
        let connected = Arc::new(AtomicUsize::new(0));
        let slots: Arc<Mutex<Vec<Option<HubClient>>>> = Arc::new(Mutex::new(vec![None; n]));
        let stop = Arc::new(AtomicBool::new(false));
        let certs = Arc::new(certs);
        let ca_der = Arc::new(ca.cert_der().to_vec());
        let ws_port = server.ws_port;
        let mut shards = Vec::new();
        for t in 0..threads {
            let (certs, ca_der, slots, stop) =
                (certs.clone(), ca_der.clone(), slots.clone(), stop.clone());
            let (nodes, connected) = (nodes.clone(), connected.clone());
            shards.push(std::thread::spawn(move || -> anyhow::Result<()> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.div_ceil(threads)));
                    for i in (t..n).step_by(threads) {
                        let node = format!("node-{i}");
                        let mut cfg = HubClientConfig::new(&node, format!("127.0.0.1:{ws_port}"));
                        cfg.queue_capacity = 8;
                        cfg.local_address = Some(node_ip(i));
                        cfg.backoff = Backoff {
                            initial: Duration::from_millis(500),
                            max: Duration::from_secs(5),
                        };
                        let cert = &certs[i];
                        let tls = Arc::new(pki::tls::client_config(
                            &ca_der,
                            Some((&cert.cert_der, &cert.key_der)),
                        )?);
                        let permit = sem.clone().acquire_owned().await?;
                        let (client, mut events) = HubClient::start(cfg, tls);
                        lock(&slots)[i] = Some(client);
                        let state = nodes[i].clone();
                        let connected = connected.clone();
                        tokio::spawn(async move {
                            let mut permit = Some(permit);
                            while let Some(ev) = events.recv().await {
                                match ev {
                                    HubEvent::Connected => {
                                        permit.take();
                                        state.connects.fetch_add(1, Ordering::Relaxed);
                                        connected.fetch_add(1, Ordering::Relaxed);
                                    }
                                    HubEvent::Disconnected { .. } => {
                                        connected.fetch_sub(1, Ordering::Relaxed);
                                    }
                                    HubEvent::Message(m) => {
                                        let Ok(rv) = m.header.resource_version.parse::<u64>()
                                        else {
                                            continue;
                                        };
                                        let at = start.elapsed().as_millis();
                                        {
                                            let mut last = lock(&state.last);
                                            if rv > last.0 {
                                                *last = (rv, at);
                                            }
                                        }
                                        let k = m
                                            .route
                                            .resource
                                            .rsplit_once("/pod/p")
                                            .and_then(|(_, k)| k.parse::<usize>().ok());
                                        if let Some(k) = k {
                                            let mut pods = lock(&state.pods);
                                            if pods.len() <= k {
                                                pods.resize(k + 1, 0);
                                            }
                                            pods[k] = pods[k].max(rv);
                                        }
                                    }
                                }
                            }
                        });
                    }
                    while !stop.load(Ordering::Acquire) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    anyhow::Ok(())
                })
            }));
        }
        wait_for("all clients started", Duration::from_secs(300), || {
            lock(&slots).iter().all(Option::is_some)
        })?;
        let clients = lock(&slots).iter().flatten().cloned().collect();
        Ok(Fleet {
            nodes,
            clients,
            connected,
            start,
            stop,
            shards,
        })
    }

    fn stop(self) {
        for c in &self.clients {
            c.stop();
        }
        self.stop.store(true, Ordering::Release);
        for shard in self.shards {
            let _ = shard.join();
        }
    }
}

// ---------------------------------------------------------------- load role

fn load(args: &[String]) -> anyhow::Result<()> {
    let n: usize = arg(args, "--nodes", 10_000);
    let reconnect: usize = arg(args, "--reconnect", 1_000).min(n);
    let mut server = Server::start(args, 1)?;
    let pid = server.pid;

    std::thread::sleep(Duration::from_millis(500));
    let rss_before = rss_kib(pid);
    let t_connect = Instant::now();
    let fleet = Fleet::start(args, &server, n)?;
    let connected = fleet.connected.clone();
    let took = wait_for("all nodes connected", Duration::from_secs(300), || {
        connected.load(Ordering::Relaxed) >= n
    })?;
    let connect_time = t_connect.elapsed();
    println!("connected {n} nodes in {connect_time:?} (last one {took:?} after the dialing loop)");

    std::thread::sleep(Duration::from_secs(5));
    let stats = server.command("stats", "STATS")?;
    let rss_after = rss_kib(pid);
    let per_node = (rss_after.saturating_sub(rss_before)) as f64 / n as f64;
    println!("{stats}");
    println!(
        "server RSS {rss_before} KiB before, {rss_after} KiB with {n} idle nodes: {per_node:.1} KiB per node"
    );

    // A message to every node.
    let sent_at = fleet.start.elapsed().as_millis();
    let rv = sent_rv(&server.command("broadcast b1", "SENT")?)?;
    let nodes = fleet.nodes.clone();
    let all = wait_for(
        "broadcast delivered to all",
        Duration::from_secs(60),
        || nodes.iter().all(|s| lock(&s.last).0 >= rv),
    )?;
    let mut lat: Vec<u128> = fleet
        .nodes
        .iter()
        .map(|s| lock(&s.last).1.saturating_sub(sent_at))
        .collect();
    lat.sort_unstable();
    println!(
        "broadcast to {n} nodes: all delivered in {all:?} (p50 {} ms, p99 {} ms, max {} ms after the command)",
        lat[n / 2],
        lat[(n * 99) / 100],
        lat[n - 1]
    );
    std::thread::sleep(Duration::from_secs(2));
    println!("{}", server.command("stats", "STATS")?);

    // R nodes drop their connection at once; an update for them is sent meanwhile.
    let before: Vec<u64> = fleet.nodes[..reconnect]
        .iter()
        .map(|s| s.connects.load(Ordering::Relaxed))
        .collect();
    for c in &fleet.clients[..reconnect] {
        c.drop_connection();
    }
    let rv = server.broadcast("r1", 0, reconnect)?;
    let nodes = fleet.nodes.clone();
    let back = wait_for("reconnected", Duration::from_secs(60), || {
        nodes[..reconnect]
            .iter()
            .zip(&before)
            .all(|(s, b)| s.connects.load(Ordering::Relaxed) > *b)
    })?;
    let delivered = wait_for(
        "update delivered after reconnect",
        Duration::from_secs(60),
        || nodes[..reconnect].iter().all(|s| lock(&s.last).0 >= rv),
    )?;
    println!(
        "{reconnect} nodes dropped at once: all back in {back:?}; the update sent meanwhile reached all {reconnect} by {:?}",
        back + delivered
    );
    std::thread::sleep(Duration::from_secs(3));
    println!("{}", server.command("stats", "STATS")?);
    println!("ok");
    fleet.stop();
    server.stop();
    Ok(())
}

// ---------------------------------------------------------------- soak role

/// The server process's gauges at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Gauges {
    rss_kib: u64,
    fds: usize,
    threads: u64,
    /// Sessions the hub has (its `connected_nodes` gauge).
    sessions: u64,
    /// Connection tasks the hub runs (one per upgraded WebSocket).
    tasks: u64,
    /// Clients whose session is up, as the clients see it.
    clients_up: usize,
}

impl Gauges {
    fn take(server: &mut Server, fleet: &Fleet) -> anyhow::Result<Gauges> {
        let stats = server.command("stats", "STATS")?;
        Ok(Gauges {
            rss_kib: rss_kib(server.pid),
            fds: open_fds(server.pid),
            threads: threads(server.pid),
            sessions: Server::field(&stats, "nodes"),
            tasks: Server::field(&stats, "tasks"),
            clients_up: fleet.connected.load(Ordering::Relaxed),
        })
    }
}

/// What the churn is doing: the version each node's pods must reach.
struct Soak {
    n: usize,
    pods: usize,
    /// Nodes per churn window.
    window: usize,
    /// Version every pod of node `i` must reach.
    expected: Vec<u64>,
    tick: usize,
}

impl Soak {
    /// Broadcasts to the `len` nodes from `from` (wrapping at `n`).
    fn change(
        &mut self,
        server: &mut Server,
        tag: &str,
        from: usize,
        len: usize,
    ) -> anyhow::Result<()> {
        let end = from + len;
        let mut spans = vec![(from, end.min(self.n))];
        if end > self.n {
            spans.push((0, end - self.n));
        }
        for (a, b) in spans {
            let rv = server.broadcast(tag, a, b)?;
            for e in &mut self.expected[a..b] {
                *e = rv;
            }
        }
        Ok(())
    }

    /// One churn step: a window of nodes drops its connections and gets its pods changed
    /// while reconnecting; the pods of the window opposite change too.
    fn step(&mut self, server: &mut Server, fleet: &Fleet) -> anyhow::Result<()> {
        let from = (self.tick * self.window) % self.n;
        for i in (from..from + self.window).map(|i| i % self.n) {
            fleet.clients[i].drop_connection();
        }
        let tag = format!("t{}", self.tick);
        self.change(server, &tag, from, self.window)?;
        self.change(server, &tag, (from + self.n / 2) % self.n, self.window)?;
        self.tick += 1;
        Ok(())
    }

    /// Pod versions not (yet) received by their node.
    fn behind(&self, fleet: &Fleet) -> usize {
        fleet
            .nodes
            .iter()
            .zip(&self.expected)
            .map(|(s, &rv)| s.behind(self.pods, rv))
            .sum()
    }

    /// Waits (up to `limit`) until every client is connected, the hub has every session,
    /// every pod version reached its node and the store has every acknowledgement. Returns
    /// (not received, not acknowledged) at the end.
    fn settle(
        &self,
        server: &mut Server,
        fleet: &Fleet,
        limit: Duration,
    ) -> anyhow::Result<(usize, u64)> {
        let deadline = Instant::now() + limit;
        loop {
            let behind = self.behind(fleet);
            let unacked = server.unacked()?;
            let sessions = Server::field(&server.command("stats", "STATS")?, "nodes");
            let up = fleet.connected.load(Ordering::Relaxed);
            if (behind == 0 && unacked == 0 && up == self.n && sessions == self.n as u64)
                || Instant::now() >= deadline
            {
                return Ok((behind, unacked));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn soak(args: &[String]) -> anyhow::Result<()> {
    let n: usize = arg(args, "--nodes", 1000usize).max(2);
    let churn: f64 = arg(args, "--churn", 10.0);
    let minutes: f64 = arg(args, "--minutes", 10.0);
    let interval = Duration::from_secs_f64(arg(args, "--interval-secs", 5.0));
    let pods: usize = arg(args, "--pods", 10usize).max(1);
    let warmup = Duration::from_secs(arg(args, "--warmup-secs", 30));
    let settle = Duration::from_secs(arg(args, "--settle-secs", 120));
    let window = ((n as f64 * churn / 100.0).round() as usize).clamp(1, n);
    println!(
        "soak: {n} nodes × {pods} pods, {window} nodes ({churn}%) drop and reconnect every {interval:?} for {minutes} min"
    );
    let mut server = Server::start(args, pods)?;
    let t = Instant::now();
    let fleet = Fleet::start(args, &server, n)?;
    let connected = fleet.connected.clone();
    wait_for("all nodes connected", Duration::from_secs(300), || {
        connected.load(Ordering::Relaxed) >= n
    })?;
    println!("connected {n} nodes in {:.1?}", t.elapsed());

    let mut soak = Soak {
        n,
        pods,
        window,
        expected: vec![0; n],
        tick: 0,
    };
    // Warm-up: every pod exists everywhere, and a few churn rounds have run, so allocator
    // pools and the hub's tables have reached their working size before the start is taken.
    soak.change(&mut server, "warm", 0, n)?;
    let t = Instant::now();
    while t.elapsed() < warmup {
        soak.step(&mut server, &fleet)?;
        std::thread::sleep(interval);
    }
    let (behind, unacked) = soak.settle(&mut server, &fleet, settle)?;
    if behind > 0 || unacked > 0 {
        println!(
            "  !! warm-up did not settle: {behind} pod versions not received, {unacked} not acknowledged"
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    let start = Gauges::take(&mut server, &fleet)?;
    println!(
        "start (after {:.0?} warm-up): RSS {:.1} MiB, {} fds, {} threads, {} sessions",
        warmup,
        mib(start.rss_kib),
        start.fds,
        start.threads,
        start.sessions
    );

    let duration = Duration::from_secs_f64(minutes * 60.0);
    let began = Instant::now();
    let first_tick = soak.tick;
    let mut peak = start;
    let mut last_print = Instant::now();
    while began.elapsed() < duration {
        let t = Instant::now();
        soak.step(&mut server, &fleet)?;
        let g = Gauges::take(&mut server, &fleet)?;
        peak.rss_kib = peak.rss_kib.max(g.rss_kib);
        peak.fds = peak.fds.max(g.fds);
        peak.threads = peak.threads.max(g.threads);
        if last_print.elapsed() >= Duration::from_secs(30) {
            last_print = Instant::now();
            println!(
                "  {:>5.0} s: RSS {:.1} MiB, {} fds, {} threads, {} sessions, {} clients up, {} pod versions in flight",
                began.elapsed().as_secs_f64(),
                mib(g.rss_kib),
                g.fds,
                g.threads,
                g.sessions,
                g.clients_up,
                soak.behind(&fleet)
            );
        }
        std::thread::sleep(interval.saturating_sub(t.elapsed()));
    }
    let ticks = soak.tick - first_tick;
    println!(
        "churn stopped after {:.1?}: {ticks} rounds, {} reconnects, {} pod versions sent",
        began.elapsed(),
        ticks * window,
        ticks * 2 * window * pods
    );

    let t = Instant::now();
    let (not_received, not_acked) = soak.settle(&mut server, &fleet, settle)?;
    println!("settled in {:.1?}", t.elapsed());
    // Closed sessions give their descriptors back asynchronously: a short grace.
    let grace = Instant::now() + Duration::from_secs(30);
    let mut end = Gauges::take(&mut server, &fleet)?;
    while (end.fds > start.fds || end.sessions != start.sessions) && Instant::now() < grace {
        std::thread::sleep(Duration::from_secs(1));
        end = Gauges::take(&mut server, &fleet)?;
    }
    let stats = server.command("stats", "STATS")?;

    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "\ncloudhub churn soak: {n} nodes × {pods} pods, {window} reconnecting every {interval:?}, {minutes} min"
    );
    println!(
        "{:<6} {:>9} {:>6} {:>8} {:>9} {:>11}",
        "", "RSS MiB", "fds", "threads", "sessions", "clients up"
    );
    for (name, g) in [("start", &start), ("peak", &peak), ("end", &end)] {
        println!(
            "{name:<6} {:>9.1} {:>6} {:>8} {:>9} {:>11}",
            mib(g.rss_kib),
            g.fds,
            g.threads,
            if name == "peak" {
                "-".to_owned()
            } else {
                g.sessions.to_string()
            },
            if name == "peak" {
                "-".to_owned()
            } else {
                g.clients_up.to_string()
            },
        );
    }
    println!("{stats}");
    let rss_ok = (end.rss_kib as f64 - start.rss_kib as f64).abs() <= start.rss_kib as f64 * 0.10;
    let sessions_ok =
        end.sessions == start.sessions && end.tasks == start.tasks && end.threads <= start.threads;
    let fds_ok = end.fds <= start.fds;
    // A version can be both unreceived and unacknowledged: the two are reported apart.
    let lost = not_received.max(not_acked as usize);
    println!("targets:");
    println!(
        "  RSS {:.1} MiB at the end within 10% of {:.1} MiB at the start ({:+.1}%): {}",
        mib(end.rss_kib),
        mib(start.rss_kib),
        (end.rss_kib as f64 / start.rss_kib.max(1) as f64 - 1.0) * 100.0,
        verdict(rss_ok)
    );
    println!(
        "  sessions {} → {}, connection tasks {} → {}, threads {} → {}: {}",
        start.sessions,
        end.sessions,
        start.tasks,
        end.tasks,
        start.threads,
        end.threads,
        verdict(sessions_ok)
    );
    println!("  fds {} → {}: {}", start.fds, end.fds, verdict(fds_ok));
    println!(
        "  lost pod versions (of the last {} sent): {not_received} never received, {not_acked} never acknowledged: {}",
        n * pods,
        verdict(lost == 0)
    );
    fleet.stop();
    server.stop();
    if !(rss_ok && sessions_ok && fds_ok && lost == 0) {
        bail!("soak targets failed");
    }
    Ok(())
}
