//! Load test of cloudhub: N simulated edge nodes (the Rust edge client, real TLS WebSockets on
//! 127.0.0.1, each node dialing from its own loopback address `127.10.x.y`, past 64,000 nodes
//! `127.11.x.y`) against a cloudhub running in a separate process (this example re-executed
//! with `serve`). Every phase is bounded in time.
//!
//! - default mode: one hub process holding `--nodes` (default 19,000) edges, run by simulator
//!   processes (this example re-executed with `sim`, at most `--nodes-per-sim` 10,000 each: a
//!   process may hold 20,000 descriptors, and the hub needs one per edge). Measured from the
//!   hub process only: the time until every edge is connected, RSS per idle edge, descriptors,
//!   CPU per idle edge over `--idle-secs` (keepalives only), a message to every edge delivered
//!   and acknowledged into the store, and `--reconnect` (default 5,000) edges dropping their
//!   sessions at once while an update for them is sent, then dialing again all at the same
//!   moment (edgecore waits a fixed 2 × heartbeat after a lost connection, without jitter),
//!   back within 5 s of that moment, nothing lost. PASS/FAIL per target; non-zero exit on
//!   FAIL.
//! - `soak` (its edges run in this process): churn. For `--minutes`, every `--interval-secs` another `--churn` percent of the
//!   nodes drop their connection and reconnect, while the pods of those nodes and of another
//!   `--churn` percent change. The server's RSS, descriptors, threads and sessions are taken
//!   after a warm-up and again at the end, once the churn stopped and everything settled; a
//!   pod version is *lost* when it never reached its node or was never acknowledged into the
//!   hub's ObjectSync store. PASS/FAIL per target; the exit status is non-zero on FAIL.
//! - `replicas-sim`: `--replicas` cloudhub processes (one CA, `nodeLimit` `--node-limit`,
//!   default 19,000) and `--nodes` edges per replica, run by simulator processes (this example
//!   re-executed with `sim`, at most `--nodes-per-sim` 17,000 edges each: a process may hold
//!   20,000 descriptors). Each edge knows every replica's port: it dials its home replica, and
//!   when its session ends or an attempt fails it dials the next one in turn. The figures:
//!   time until every edge is connected and each replica's RSS per node; a message to every
//!   edge, delivered and acknowledged into the stores; one replica killed with SIGKILL and how
//!   many of its edges come back on the others (as many as their `nodeLimit` leaves room for,
//!   the rest keep trying); the replica restarted on its port, every edge connected again and
//!   a second message to all, nothing lost. PASS/FAIL per target; non-zero exit on FAIL.
//!
//! ```text
//! cargo run --release --example cloudhub_load -- --nodes 19000
//! cargo run --release --example cloudhub_load -- soak --nodes 1000 --churn 10 --minutes 10
//! cargo run --release --example cloudhub_load -- replicas-sim --replicas 6 --nodes 17000
//! cargo run --release --example cloudhub_load -- serve --ws-port 10000 --https-port 10002 --dir /tmp/hub
//! ```
//!
//! `serve` alone is a standalone demo hub (in-memory ObjectSync store, no Kubernetes): it
//! prints its token and reads commands on stdin (`broadcast <tag> [<from> <to> [connected]]`,
//! `stats`, `check [connected]`, `quit`). A broadcast changes `--pods` pods
//! (`default/pod/p<k>`) of each node (its connected nodes, or nodes `from..to`), at a resource
//! version that is wall-clock milliseconds (so those of several hubs compare); with
//! `connected` it sends only to those of them connected now. Its sync loop re-sends the
//! unacknowledged pods of a node when the node (re)connects and every 5 s while it is
//! connected, standing in for synccontroller. `check` counts the unacknowledged pods of every
//! node changed so far (`connected`: of those connected now).

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
use beehive::{Backoff, Bus, Content, Message};
use cloudhub::{CloudHub, CloudHubConfig, MemoryStore, SyncKey};
use edge::hub::{HubClient, HubClientConfig, HubEvent};

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
        Some("replicas-sim") => replicas_sim(&args),
        Some("sim") => sim(&args),
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

/// What a node's pods should be: the version and tag of their last update.
type Desired = (u64, Rc<str>);

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
    config.websocket.limits.max_connections = arg(
        args,
        "--max-connections",
        config.websocket.limits.max_connections,
    );
    config.websocket.limits.max_handshakes = arg(
        args,
        "--max-handshakes",
        config.websocket.limits.max_handshakes,
    );
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
        // Desired state per node: the version and tag of the last update of its pods (what
        // synccontroller re-sends).
        let desired: Rc<RefCell<HashMap<String, Desired>>> = Rc::default();
        let unacked = {
            let (desired, store) = (desired.clone(), store.clone());
            move |node: &str| -> Vec<Message> {
                let Some((rv, tag)) = desired.borrow().get(node).cloned() else {
                    return Vec::new();
                };
                (0..pods)
                    .filter(|&k| {
                        let acked = store.record(&sync_key(node, k)).map(|(_, rv)| rv).unwrap_or_default();
                        kubeedge_api::version::is_newer(&rv.to_string(), &acked)
                    })
                    .map(|k| update_for(node, k, rv, &tag))
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
            let (unacked, handle, ep) = (unacked.clone(), handle.clone(), ep.clone());
            actix_rt::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    // A node without a session here gets its pods when it connects.
                    for n in handle.nodes() {
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
                    let (range, only_connected) = match rest {
                        [from, to] => (Some((from.parse::<usize>()?, to.parse::<usize>()?)), false),
                        [from, to, "connected"] => (Some((from.parse::<usize>()?, to.parse::<usize>()?)), true),
                        _ => (None, false),
                    };
                    let targets: Vec<String> = match range {
                        // Explicit nodes (connected or not): what the controllers would emit.
                        Some((a, b)) => (a..b).map(|i| format!("node-{i}")).collect(),
                        None => handle.nodes(),
                    };
                    // Wall-clock milliseconds (at least one more than the last): the versions
                    // of several hubs compare, so an edge that moved counts them right.
                    rv = (rv + 1).max(u64::try_from(beehive::now_millis()).unwrap_or(0));
                    let tag: Rc<str> = Rc::from(*tag);
                    {
                        let mut desired = desired.borrow_mut();
                        for node in &targets {
                            desired.insert(node.clone(), (rv, tag.clone()));
                        }
                    }
                    // `connected`: only the nodes with a session here now; the others get
                    // theirs when they connect here.
                    let send: Vec<String> = if only_connected { handle.nodes() } else { targets };
                    for node in &send {
                        if only_connected && !desired.borrow().contains_key(node) {
                            continue;
                        }
                        for k in 0..pods {
                            ep.send("cloudhub", update_for(node, k, rv, &tag)).await?;
                        }
                    }
                    println!("SENT {tag} {} rv={rv}", send.len());
                }
                ["stats"] => {
                    let all = handle.all_node_stats();
                    let (sent, acked, retried) = all.iter().fold((0, 0, 0), |a, (_, s)| (a.0 + s.sent, a.1 + s.acked, a.2 + s.retried));
                    let s = handle.stats();
                    let pid = std::process::id();
                    // The WebSocket listener's admission: connections it refused (every
                    // reason) and those that did not authenticate in time.
                    let (refused, timed_out) = handle
                        .listener_stats()
                        .iter()
                        .filter(|l| l.listener.contains("websocket"))
                        .fold((0, 0), |a, l| {
                            let refused = l.refused_connections + l.refused_handshakes + l.refused_per_ip + l.refused_files;
                            (a.0 + refused, a.1 + l.timed_out)
                        });
                    println!(
                        "STATS nodes={} tasks={} rss_kib={} fds={} threads={} sent={sent} acked={acked} retried={retried} dropped_offline={} dropped_full={} ws_refused={refused} ws_timed_out={timed_out}",
                        s.connected_nodes,
                        s.connection_tasks,
                        rss_kib(pid),
                        open_fds(pid),
                        threads(pid),
                        s.dropped_offline,
                        s.dropped_full
                    );
                }
                ["check", rest @ ..] => {
                    // Acknowledgements are written to the store in batches: flush them first.
                    handle.flush_records().await;
                    // `connected`: only the nodes with a session here now.
                    let nodes: Vec<String> = if rest == ["connected"] {
                        let desired = desired.borrow();
                        handle.nodes().into_iter().filter(|n| desired.contains_key(n)).collect()
                    } else {
                        desired.borrow().keys().cloned().collect()
                    };
                    let objects = nodes.len() * pods;
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
        let pods = pods.to_string();
        Self::spawn(
            args,
            dir,
            &["--ws-port", "0", "--https-port", "0", "--pods", &pods],
        )
    }

    /// Starts `serve --dir <dir> <serve_args>` in a child process.
    fn spawn(
        args: &[String],
        dir: std::path::PathBuf,
        serve_args: &[&str],
    ) -> anyhow::Result<Server> {
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
            .arg("serve")
            .arg("--dir")
            .arg(&dir)
            .args(serve_args)
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
        reply(&mut self.stdout, expect).context("server exited")
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

    /// SIGKILL, like a crashed replica: no session is closed, no record flushed. The
    /// directory stays for a restart.
    fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
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

/// The next line of a child's stdout that starts with `expect`.
fn reply(stdout: &mut impl BufRead, expect: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            bail!("the child exited");
        }
        if line.starts_with(expect) {
            return Ok(line.trim().to_owned());
        }
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
/// per-source admission limits must see them apart. `127.10.x.y` for the first 64,000 nodes,
/// then `127.11.x.y`, and so on.
fn node_ip(i: usize) -> IpAddr {
    let (block, j) = (i / 64_000, i % 64_000);
    IpAddr::V4(Ipv4Addr::new(
        127,
        10 + block as u8,
        (j / 250) as u8,
        (j % 250 + 1) as u8,
    ))
}

#[derive(Default)]
struct NodeState {
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

/// CPU time (user + system) the process `pid` used so far, in seconds; 0 when unreadable.
fn cpu_seconds(pid: u32) -> f64 {
    // Fields 14 and 15 of /proc/<pid>/stat, counted after the command name's `)`, in
    // USER_HZ ticks (100 per second on Linux).
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?) as f64 / 100.0)
        })
        .unwrap_or(0.0)
}

/// The machine's 1-minute load average (`/proc/loadavg`), as text; `?` when unreadable.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The machine's count of connections dropped because a listen queue was full
/// (`TcpExt: ListenOverflows` in `/proc/net/netstat`; every process's listeners); 0 when
/// unreadable.
fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(k, _)| *k == "ListenOverflows")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The default mode: one hub process holding `--nodes` edges run by simulator processes (at
/// most `--nodes-per-sim` each, so no process nears its open-file limit), measured from the
/// hub process only.
fn load(args: &[String]) -> anyhow::Result<()> {
    let n: usize = arg(args, "--nodes", 19_000usize).max(1);
    let reconnect: usize = arg(args, "--reconnect", 5_000usize).min(n);
    let idle = Duration::from_secs(arg(args, "--idle-secs", 30));
    let options = SimOptions {
        per_replica: n,
        per_sim: arg(args, "--nodes-per-sim", 10_000usize).clamp(1, 19_000),
        concurrency: arg(args, "--connect-concurrency", 300usize).max(1),
        threads: arg(args, "--client-threads", 1usize).max(1),
    };
    let (limit, max_conn) = (n.to_string(), (n + 500).to_string());
    // `maxHandshakes`: the hub's default unless given.
    let max_handshakes = arg(
        args,
        "--max-handshakes",
        kubeedge_api::listener::ListenerLimits::default().max_handshakes,
    )
    .to_string();
    let dir = std::env::temp_dir().join(format!("cloudhub-load-{}", std::process::id()));
    let mut server = Server::spawn(
        args,
        dir.clone(),
        &[
            "--ws-port",
            "0",
            "--https-port",
            "0",
            "--pods",
            "1",
            "--node-limit",
            &limit,
            "--max-connections",
            &max_conn,
            "--max-handshakes",
            &max_handshakes,
        ],
    )?;
    let pid = server.pid;
    let mut sims = spawn_sims(&dir, n, &[server.ws_port], &options)?;
    std::thread::sleep(Duration::from_millis(500));
    let (rss_before, fds_before) = (rss_kib(pid), open_fds(pid));

    // 1. Every edge connects.
    let (overflows, cpu0) = (listen_overflows(), cpu_seconds(pid));
    let (status, connect) = connect_fleet(&mut sims, n)?;
    println!(
        "connected {} of {n} edges in {} ({} attempts failed, hub CPU {:.1} s, {} listen queue overflows on the machine)",
        status.up(),
        secs(connect),
        status.failed,
        cpu_seconds(pid) - cpu0,
        listen_overflows() - overflows
    );
    if connect.is_none() {
        bail!("not every edge connected");
    }
    std::thread::sleep(Duration::from_secs(5));
    let stats = server.command("stats", "STATS")?;
    let sessions = Server::field(&stats, "nodes");
    let (rss_idle, fds_idle) = (rss_kib(pid), open_fds(pid));
    let kib_idle = rss_idle.saturating_sub(rss_before) as f64 / n as f64;
    println!("{stats}");
    println!(
        "hub RSS {:.1} MiB before, {:.1} MiB with {n} idle edges: {kib_idle:.1} KiB per edge; descriptors {fds_before} → {fds_idle}",
        mib(rss_before),
        mib(rss_idle)
    );

    // 2. Idle: only keepalives (one per edge every 15 s). The hub's CPU time over the window.
    let lost_before = fleet_status(&mut sims, u64::MAX)?.lost;
    let cpu0 = cpu_seconds(pid);
    let t = Instant::now();
    std::thread::sleep(idle);
    let cpu = cpu_seconds(pid) - cpu0;
    let window = t.elapsed().as_secs_f64();
    let status = fleet_status(&mut sims, u64::MAX)?;
    let idle_ended = status.lost - lost_before;
    let us_per_edge = cpu / window / n as f64 * 1e6;
    println!(
        "idle {window:.0} s: hub CPU {:.2} s ({:.2}% of one core), {us_per_edge:.2} µs per second per edge; {idle_ended} sessions ended meanwhile",
        cpu,
        cpu / window * 100.0
    );

    // 3. One message to every edge, delivered and acknowledged into the hub's store.
    let sims_cpu = |sims: &[Sim]| sims.iter().map(|s| cpu_seconds(s.child.id())).sum::<f64>();
    let (cpu0, sims0) = (cpu_seconds(pid), sims_cpu(&sims));
    let b1 = broadcast_all(std::slice::from_mut(&mut server), &mut sims, "b1", n)?;
    println!(
        "broadcast b1 to {} edges (handed to cloudhub in {:.2} s): delivered to {} of {n} in {}, acknowledged in {}, {} unacknowledged (hub CPU {:.2} s, simulators' {:.2} s; load average {})",
        b1.targets,
        b1.handed.as_secs_f64(),
        b1.reached,
        secs(b1.delivered),
        secs(b1.acked),
        b1.unacked,
        cpu_seconds(pid) - cpu0,
        sims_cpu(&sims) - sims0,
        load_average()
    );
    std::thread::sleep(Duration::from_secs(2));
    let rss_acked = rss_kib(pid);
    let kib_acked = rss_acked.saturating_sub(rss_before) as f64 / n as f64;
    println!(
        "hub RSS {:.1} MiB after one acknowledged update each: {kib_acked:.1} KiB per edge",
        mib(rss_acked)
    );

    // 4. `reconnect` edges drop their sessions at once; an update for them is sent while they
    // are away; then they all dial again at the same moment (edgecore's pause after a lost
    // connection is fixed, so edges that lost it together come back together).
    let lost_before = fleet_status(&mut sims, u64::MAX)?;
    let refused_before = Server::field(&server.command("stats", "STATS")?, "ws_refused");
    let (overflows, cpu0, sims0) = (listen_overflows(), cpu_seconds(pid), sims_cpu(&sims));
    send_all(&mut sims, &format!("drop 0 {reconnect}"))?;
    for s in &mut sims {
        reply(&mut s.stdout, "DROPPED").context("a simulator exited")?;
    }
    let t = Instant::now();
    poll_until(Duration::from_secs(10), || {
        Ok(fleet_status(&mut sims, u64::MAX)?.up() <= n - reconnect)
    })?;
    let rv = server.broadcast("r1", 0, reconnect)?;
    let away = t.elapsed();
    let redial = Instant::now();
    send_all(&mut sims, "redial")?;
    for s in &mut sims {
        reply(&mut s.stdout, "REDIAL").context("a simulator exited")?;
    }
    let mut status = FleetStatus::default();
    let back = poll_until(Duration::from_secs(120), || {
        status = fleet_status(&mut sims, rv)?;
        Ok(status.dropped == 0 && status.up() >= n)
    })?
    .map(|_| redial.elapsed());
    let (failed, refused) = (
        status.failed - lost_before.failed,
        Server::field(&server.command("stats", "STATS")?, "ws_refused") - refused_before,
    );
    let lost_before = lost_before.lost;
    let reached = poll_until(Duration::from_secs(120), || {
        status = fleet_status(&mut sims, rv)?;
        Ok(status.reached >= reconnect)
    })?
    .map(|_| t.elapsed());
    let mut unacked = 0;
    let acked = poll_until(Duration::from_secs(120), || {
        unacked = server.unacked()?;
        Ok(unacked == 0)
    })?
    .map(|_| t.elapsed());
    let ended = status.lost - lost_before;
    println!(
        "{reconnect} edges dropped at once, away {:.1} s: all back {} after they dialed again together ({failed} attempts failed, {refused} refused by the hub's admission, {} listen queue overflows on the machine, hub CPU {:.1} s, simulators' {:.1} s); the update sent meanwhile reached {} of {reconnect} in {}, acknowledged in {} (from the drop), {unacked} unacknowledged; {ended} sessions ended ({reconnect} dropped); load average {}",
        away.as_secs_f64(),
        secs(back),
        listen_overflows() - overflows,
        cpu_seconds(pid) - cpu0,
        sims_cpu(&sims) - sims0,
        status.reached,
        secs(reached),
        secs(acked),
        load_average()
    );
    std::thread::sleep(Duration::from_secs(3));
    let end = server.command("stats", "STATS")?;
    println!("{end}");

    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let under = |d: Option<Duration>, limit: f64| d.is_some_and(|d| d.as_secs_f64() < limit);
    let connected_ok = sessions == n as u64;
    let memory_ok = kib_idle <= 13.0;
    let b1_ok = b1.lost(n) == 0 && under(b1.delivered, 1.0) && under(b1.acked, 1.0);
    let back_ok = under(back, 5.0);
    let r1_lost = (reconnect - status.reached.min(reconnect)).max(unacked as usize);
    let r1_ok = r1_lost == 0 && acked.is_some() && ended == reconnect as u64;
    println!(
        "\ncloudhub: {n} edges in one hub process, simulators in {} others",
        sims.len()
    );
    println!("targets:");
    println!(
        "  {n} connected in {}, {sessions} sessions, {fds_idle} descriptors: {}",
        secs(connect),
        verdict(connected_ok)
    );
    println!(
        "  memory per idle edge {kib_idle:.1} KiB (≤ 13 KiB): {}",
        verdict(memory_ok)
    );
    println!(
        "  CPU per idle edge {us_per_edge:.2} µs/s ({:.2}% of one core for all {n}), {idle_ended} sessions ended while idle: {}",
        cpu / window * 100.0,
        verdict(idle_ended == 0)
    );
    println!(
        "  one message to all {n}: delivered in {}, acknowledged in {} (< 1 s), lost {}: {}",
        secs(b1.delivered),
        secs(b1.acked),
        b1.lost(n),
        verdict(b1_ok)
    );
    println!(
        "  {reconnect} dialing again at once: back in {} (< 5 s): {}",
        secs(back),
        verdict(back_ok)
    );
    println!(
        "  the update sent while they were away: lost {r1_lost}, {} sessions ended besides the {reconnect} dropped: {}",
        ended.saturating_sub(reconnect as u64),
        verdict(r1_ok)
    );
    quit_all(sims);
    server.stop();
    if !(connected_ok && memory_ok && idle_ended == 0 && b1_ok && back_ok && r1_ok) {
        bail!("targets failed");
    }
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

// ---------------------------------------------------------------- replicas-sim role

/// `SimEdge::on` of an edge without a session.
const OFF: usize = usize::MAX;

/// One simulated edge of a `sim` process, as its supervisor sees it.
struct SimEdge {
    /// The replica it has a session with, [`OFF`] while it has none.
    on: AtomicUsize,
    /// Highest resource version received, and when (wall-clock ms).
    rv: AtomicU64,
    at_ms: AtomicU64,
    /// Told to drop its session (`drop` command); it then waits for `redial` (see
    /// [`supervise`]).
    kick: tokio::sync::Notify,
    /// Told to dial again after a drop (`redial` command).
    redial: tokio::sync::Notify,
    /// Dropped by a `drop` command and not connected again since.
    dropped: AtomicBool,
}

impl SimEdge {
    fn record(&self, m: &Message) {
        let Ok(rv) = m.header.resource_version.parse::<u64>() else {
            return;
        };
        if rv > self.rv.load(Ordering::Acquire) {
            let now = u64::try_from(beehive::now_millis()).unwrap_or(0);
            self.at_ms.store(now, Ordering::Relaxed);
            self.rv.store(rv, Ordering::Release);
        }
    }
}

/// What a simulator process counts, besides its edges.
struct SimCounts {
    /// Sessions per replica.
    per: Vec<AtomicUsize>,
    /// Sessions that ended (the edge then dials the next replica).
    lost: AtomicU64,
    /// Attempts to connect that failed (refused, unreachable, timed out).
    failed: AtomicU64,
}

/// Runs edge `i` for good: dials its home replica first; when the session ends or an attempt
/// fails, it stops that client and starts one on the next replica of its list (round-robin).
/// The list is the home replica, then the others rotated by `i`: the edges of a lost replica
/// spread over the others instead of all trying the same one first. A lost session is
/// followed by a jittered pause (0.5–1 s), failures by a jittered, growing one (at most 6 s),
/// so edges that find every replica full retry at a modest rate. A session dropped on command
/// is followed by edgecore's pause after a lost connection, fixed (2 × heartbeat, 30 s, no
/// jitter), cut short by `redial`: the edges dropped together dial again together, at a moment
/// the load tool knows.
async fn supervise(
    i: usize,
    home: usize,
    ports: Arc<Vec<u16>>,
    tls: Arc<rustls::ClientConfig>,
    edge: Arc<SimEdge>,
    counts: Arc<SimCounts>,
    sem: Arc<tokio::sync::Semaphore>,
) {
    let node = format!("node-{i}");
    let pause = Backoff {
        initial: Duration::from_millis(250),
        max: Duration::from_secs(6),
    };
    let (replicas, others) = (ports.len(), ports.len().saturating_sub(1).max(1));
    let replica = |step: usize| match step % replicas {
        0 => home,
        s => (home + 1 + (s - 1 + i) % others) % replicas,
    };
    let (mut step, mut r) = (0, home);
    let mut failed = 0u32;
    let mut kicked = false;
    // The first connection waits for a permit: the fleet starts at a bounded dialing rate.
    let mut permit = sem.acquire_owned().await.ok();
    loop {
        let mut cfg = HubClientConfig::new(&node, format!("127.0.0.1:{}", ports[r]));
        cfg.queue_capacity = 8;
        cfg.local_address = Some(node_ip(i));
        cfg.handshake_timeout = Duration::from_secs(20);
        // One attempt per client: after a failure the supervisor moves on, not the client.
        cfg.backoff = Backoff {
            initial: Duration::from_secs(600),
            max: Duration::from_secs(600),
        };
        let (client, mut events) = HubClient::start(cfg, tls.clone());
        let up = loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(HubEvent::Connected) => break true,
                    Some(HubEvent::Message(m)) => edge.record(&m),
                    Some(HubEvent::Disconnected { .. }) | None => break false,
                },
                _ = tokio::time::sleep(Duration::from_millis(250)) => {
                    if client.connect_failures() > 0 {
                        break false;
                    }
                }
            }
        };
        if up {
            permit.take();
            failed = 0;
            edge.on.store(r, Ordering::Release);
            edge.dropped.store(false, Ordering::Release);
            counts.per[r].fetch_add(1, Ordering::AcqRel);
            loop {
                tokio::select! {
                    ev = events.recv() => match ev {
                        Some(HubEvent::Message(m)) => edge.record(&m),
                        Some(HubEvent::Disconnected { .. }) | None => break,
                        Some(HubEvent::Connected) => {}
                    },
                    // Dropped: the client closes the connection; what it received (and
                    // acknowledged) before is still recorded, until it reports the end.
                    _ = edge.kick.notified(), if !kicked => {
                        kicked = true;
                        client.stop();
                    }
                }
            }
            counts.per[r].fetch_sub(1, Ordering::AcqRel);
            edge.on.store(OFF, Ordering::Release);
            counts.lost.fetch_add(1, Ordering::Relaxed);
        } else {
            failed += 1;
            counts.failed.fetch_add(1, Ordering::Relaxed);
        }
        client.stop();
        step += 1;
        r = replica(step);
        if std::mem::take(&mut kicked) {
            // Back to the same replica, as edgecore (one server address) does.
            (step, r) = (0, home);
            tokio::select! {
                () = edge.redial.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            continue;
        }
        let wait = if failed > 0 {
            pause.delay(failed)
        } else {
            Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(1),
            }
            .delay(1)
        };
        tokio::time::sleep(wait).await;
    }
}

/// `sim`: a simulator process of the default mode and `replicas-sim`. Issues certificates
/// for nodes `--from` .. `--to` from the CA in `--dir`, prints `READY`, and on `go` starts one
/// supervised edge per node (home replica `i / --per-replica`, then the others of `--ports` in
/// turn). Answers `status <rv>` with its sessions per replica, how many of its edges reached
/// version `rv` and how many dropped edges are not back yet; `drop <from> <to>` drops the
/// sessions of its edges among nodes `from..to` at once, and `redial` has the dropped edges
/// that are not back dial again at once (they do after 30 s without it); exits on `quit` or
/// when stdin closes.
fn sim(args: &[String]) -> anyhow::Result<()> {
    let dir = std::path::PathBuf::from(arg(args, "--dir", String::new()));
    let from: usize = arg(args, "--from", 0);
    let to: usize = arg(args, "--to", 0);
    let per_replica: usize = arg(args, "--per-replica", 17_000usize).max(1);
    let concurrency: usize = arg(args, "--connect-concurrency", 50usize).max(1);
    let threads: usize = arg(args, "--client-threads", 1usize).max(1);
    let ports: Vec<u16> = arg(args, "--ports", String::new())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("--ports")?;
    let ports = Arc::new(ports);
    let ca = pki::CertificateAuthority::from_pem(
        &std::fs::read_to_string(dir.join("ca/rootCA.crt"))?,
        &std::fs::read_to_string(dir.join("ca/rootCA.key"))?,
    )?;
    let t = Instant::now();
    let tls: Vec<Arc<rustls::ClientConfig>> = (from..to)
        .map(|i| -> anyhow::Result<_> {
            let cert = ca.issue(&pki::IssueOptions::edge(&format!("node-{i}")))?;
            Ok(Arc::new(pki::tls::client_config(
                ca.cert_der(),
                Some((&cert.cert_der, &cert.key_der)),
            )?))
        })
        .collect::<Result<_, _>>()?;
    let edges: Vec<Arc<SimEdge>> = (from..to)
        .map(|_| {
            Arc::new(SimEdge {
                on: AtomicUsize::new(OFF),
                rv: AtomicU64::new(0),
                at_ms: AtomicU64::new(0),
                kick: tokio::sync::Notify::new(),
                redial: tokio::sync::Notify::new(),
                dropped: AtomicBool::new(false),
            })
        })
        .collect();
    let counts = Arc::new(SimCounts {
        per: ports.iter().map(|_| AtomicUsize::new(0)).collect(),
        lost: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    println!("READY issued={} in {:?}", to - from, t.elapsed());
    std::io::stdout().flush()?;
    let mut lines = std::io::stdin().lines();
    if !matches!(lines.next(), Some(Ok(l)) if l.trim() == "go") {
        return Ok(());
    }
    let tls = Arc::new(tls);
    for t in 0..threads {
        let (ports, tls, edges, counts) =
            (ports.clone(), tls.clone(), edges.clone(), counts.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.div_ceil(threads)));
                for k in (t..edges.len()).step_by(threads) {
                    let i = from + k;
                    tokio::spawn(supervise(
                        i,
                        (i / per_replica) % ports.len(),
                        ports.clone(),
                        tls[k].clone(),
                        edges[k].clone(),
                        counts.clone(),
                        sem.clone(),
                    ));
                }
                std::future::pending::<()>().await;
            });
            Ok(())
        });
    }
    for line in lines {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["status", rv] => {
                let rv: u64 = rv.parse()?;
                let (mut reached, mut last_ms, mut dropped) = (0usize, 0u64, 0usize);
                for e in &edges {
                    if e.rv.load(Ordering::Acquire) >= rv {
                        reached += 1;
                        last_ms = last_ms.max(e.at_ms.load(Ordering::Relaxed));
                    }
                    dropped += usize::from(e.dropped.load(Ordering::Acquire));
                }
                let per: Vec<String> = counts
                    .per
                    .iter()
                    .map(|c| c.load(Ordering::Acquire).to_string())
                    .collect();
                println!(
                    "STATUS per={} reached={reached} last_ms={last_ms} lost={} failed={} dropped={dropped}",
                    per.join(","),
                    counts.lost.load(Ordering::Relaxed),
                    counts.failed.load(Ordering::Relaxed)
                );
            }
            ["drop", a, b] => {
                let (a, b): (usize, usize) = (a.parse()?, b.parse()?);
                let mut count = 0;
                for i in a.max(from)..b.min(to) {
                    let e = &edges[i - from];
                    // Marked before the kick: the mark clears only on the next session.
                    e.dropped.store(true, Ordering::Release);
                    e.kick.notify_one();
                    count += 1;
                }
                println!("DROPPED {count}");
            }
            ["redial"] => {
                let mut count = 0;
                for e in edges.iter().filter(|e| e.dropped.load(Ordering::Acquire)) {
                    e.redial.notify_one();
                    count += 1;
                }
                println!("REDIAL {count}");
            }
            ["quit"] => break,
            _ => println!("ERR unknown command {line:?}"),
        }
        std::io::stdout().flush()?;
    }
    // The sockets close with the process, abruptly, like edges that lost power.
    std::process::exit(0)
}

/// A simulator child process.
struct Sim {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

/// How [`spawn_sims`] deals the edges out.
struct SimOptions {
    /// Edges per replica: edge `i` starts on replica `i / per_replica`.
    per_replica: usize,
    /// Edges per simulator process at most (a process may hold 20,000 descriptors).
    per_sim: usize,
    /// Edges connecting at once, over all simulators.
    concurrency: usize,
    /// Client threads per simulator.
    threads: usize,
}

/// Starts simulator processes (this example re-executed with `sim`) for nodes `0..n`, at
/// most `per_sim` each, with certificates from the CA in `dir`; returns once every one has
/// issued its certificates. Their edges start on `go`.
fn spawn_sims(
    dir: &std::path::Path,
    n: usize,
    ports: &[u16],
    o: &SimOptions,
) -> anyhow::Result<Vec<Sim>> {
    let n_sims = n.div_ceil(o.per_sim.max(1));
    let chunk = n.div_ceil(n_sims);
    let exe = std::env::current_exe()?;
    let port_list = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let t = Instant::now();
    let mut sims = Vec::new();
    for s in 0..n_sims {
        let (a, b) = (s * chunk, ((s + 1) * chunk).min(n));
        let mut child = Command::new(&exe)
            .arg("sim")
            .arg("--dir")
            .arg(dir)
            .args(["--from", &a.to_string(), "--to", &b.to_string()])
            .args([
                "--per-replica",
                &o.per_replica.to_string(),
                "--ports",
                &port_list,
            ])
            .args([
                "--connect-concurrency",
                &o.concurrency.div_ceil(n_sims).to_string(),
                "--client-threads",
                &o.threads.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        sims.push(Sim {
            stdin: child.stdin.take().context("stdin")?,
            stdout: BufReader::new(child.stdout.take().context("stdout")?),
            child,
        });
    }
    for s in &mut sims {
        reply(&mut s.stdout, "READY").context("a simulator exited")?;
    }
    println!(
        "{n_sims} simulator processes issued {n} edge certificates in {:.1?}",
        t.elapsed()
    );
    Ok(sims)
}

/// Sends one command line to every simulator.
/// Tells every simulator to connect its edges and waits (up to 10 min) until `n` are up: the
/// fleet's status then, and how long it took (`None`: not all within the limit).
fn connect_fleet(sims: &mut [Sim], n: usize) -> anyhow::Result<(FleetStatus, Option<Duration>)> {
    let t = Instant::now();
    send_all(sims, "go")?;
    let mut status = FleetStatus::default();
    let connect = poll_until(Duration::from_secs(600), || {
        status = fleet_status(sims, u64::MAX)?;
        Ok(status.up() >= n)
    })?
    .map(|_| t.elapsed());
    Ok((status, connect))
}

fn send_all(sims: &mut [Sim], line: &str) -> anyhow::Result<()> {
    for s in sims.iter_mut() {
        writeln!(s.stdin, "{line}")?;
        s.stdin.flush()?;
    }
    Ok(())
}

/// Tells every simulator to quit and waits for it.
fn quit_all(sims: Vec<Sim>) {
    for mut s in sims {
        let _ = writeln!(s.stdin, "quit");
        let _ = s.stdin.flush();
        let _ = s.child.wait();
    }
}

/// The simulators' counts together.
#[derive(Debug, Default)]
struct FleetStatus {
    /// Sessions per replica, as the edges see them.
    per: Vec<usize>,
    /// Edges that received the version asked about.
    reached: usize,
    /// When the last of them received it (wall-clock ms).
    last_ms: u64,
    lost: u64,
    failed: u64,
    /// Edges dropped by a `drop` command and not connected again yet.
    dropped: u64,
}

impl FleetStatus {
    fn up(&self) -> usize {
        self.per.iter().sum()
    }

    fn per(&self) -> String {
        self.per
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// Asks every simulator for its status (all at once, then the answers).
fn fleet_status(sims: &mut [Sim], rv: u64) -> anyhow::Result<FleetStatus> {
    for s in sims.iter_mut() {
        writeln!(s.stdin, "status {rv}")?;
        s.stdin.flush()?;
    }
    let mut total = FleetStatus::default();
    for s in sims.iter_mut() {
        let line = reply(&mut s.stdout, "STATUS").context("a simulator exited")?;
        let per = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("per="))
            .unwrap_or_default();
        for (r, c) in per.split(',').enumerate() {
            if total.per.len() <= r {
                total.per.resize(r + 1, 0);
            }
            total.per[r] += c.parse::<usize>().unwrap_or(0);
        }
        total.reached += Server::field(&line, "reached") as usize;
        total.last_ms = total.last_ms.max(Server::field(&line, "last_ms"));
        total.lost += Server::field(&line, "lost");
        total.failed += Server::field(&line, "failed");
        total.dropped += Server::field(&line, "dropped");
    }
    Ok(total)
}

/// Polls `check` until `done` or `limit` passed; the time it took, or `None`.
fn poll_until(
    limit: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Option<Duration>> {
    let t0 = Instant::now();
    loop {
        if check()? {
            return Ok(Some(t0.elapsed()));
        }
        if t0.elapsed() > limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a broadcast to every edge through every live replica came to.
struct Delivery {
    targets: u64,
    /// Until every hub had handed its messages to cloudhub (its `SENT` answer).
    handed: Duration,
    reached: usize,
    delivered: Option<Duration>,
    acked: Option<Duration>,
    unacked: u64,
}

impl Delivery {
    fn lost(&self, n: usize) -> usize {
        (n - self.reached.min(n)).max(self.unacked as usize)
    }
}

/// Sends `broadcast <tag> 0 <n> connected` to every hub: each takes the change of every
/// node's pod as its desired state (like synccontroller, which every replica shares in
/// KubeEdge) and sends it to the nodes connected to it; a node that moves meanwhile gets it
/// from the replica it connects to. Then waits until every edge received it and every hub's
/// store holds the acknowledgements of the nodes connected to it.
fn broadcast_all(
    hubs: &mut [Server],
    sims: &mut [Sim],
    tag: &str,
    n: usize,
) -> anyhow::Result<Delivery> {
    let sent_ms = u64::try_from(beehive::now_millis()).unwrap_or(0);
    let t0 = Instant::now();
    for h in hubs.iter_mut() {
        writeln!(h.stdin, "broadcast {tag} 0 {n} connected")?;
        h.stdin.flush()?;
    }
    let (mut rv, mut targets) = (u64::MAX, 0);
    for h in hubs.iter_mut() {
        let line = reply(&mut h.stdout, "SENT").context("a hub exited")?;
        rv = rv.min(sent_rv(&line)?);
        targets += line
            .split_whitespace()
            .nth(2)
            .and_then(|c| c.parse::<u64>().ok())
            .unwrap_or(0);
    }
    let handed = t0.elapsed();
    // The versions are wall-clock ms: an edge at or above the lowest of this round got it.
    let mut status = FleetStatus::default();
    let got_all = poll_until(Duration::from_secs(120), || {
        status = fleet_status(sims, rv)?;
        Ok(status.reached >= n)
    })?;
    let delivered = got_all.map(|_| Duration::from_millis(status.last_ms.saturating_sub(sent_ms)));
    let mut unacked = 0;
    let acked = poll_until(Duration::from_secs(120), || {
        unacked = 0;
        for h in hubs.iter_mut() {
            unacked += Server::field(&h.command("check connected", "CHECK")?, "unacked");
        }
        Ok(unacked == 0)
    })?
    .map(|_| t0.elapsed());
    Ok(Delivery {
        targets,
        handed,
        reached: status.reached,
        delivered,
        acked,
        unacked,
    })
}

/// Copies the files of `from` into `to` (created), not recursing.
fn copy_files(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || "never".to_owned(),
        |d| format!("{:.1} s", d.as_secs_f64()),
    )
}

fn replicas_sim(args: &[String]) -> anyhow::Result<()> {
    let replicas: usize = arg(args, "--replicas", 6usize).max(2);
    let per: usize = arg(args, "--nodes", 17_000usize).max(1);
    let limit: usize = arg(args, "--node-limit", 19_000usize).max(per);
    // Every process may hold 20,000 descriptors: at most ~19,000 sockets in any of them.
    let per_sim: usize = arg(args, "--nodes-per-sim", 17_000usize).clamp(1, 19_000);
    let kill: usize = arg(args, "--kill", 0usize).min(replicas - 1);
    let concurrency: usize = arg(args, "--connect-concurrency", 300usize).max(1);
    let threads: usize = arg(args, "--client-threads", 1usize).max(1);
    let n = replicas * per;
    println!(
        "replicas-sim: {replicas} cloudhub replicas × {per} edges = {n}, nodeLimit {limit} each"
    );
    let root = std::env::temp_dir().join(format!("cloudhub-replicas-{}", std::process::id()));
    let hub_dir = |r: usize| root.join(format!("hub-{r}"));
    let (limit_s, max_conn) = (limit.to_string(), (limit + 500).to_string());
    let serve_args = |port: &str| -> Vec<String> {
        [
            "--ws-port",
            port,
            "--https-port",
            "0",
            "--pods",
            "1",
            "--node-limit",
            &limit_s,
            "--max-connections",
            &max_conn,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let spawn_hub = |r: usize, port: &str| {
        let a = serve_args(port);
        Server::spawn(
            args,
            hub_dir(r),
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };

    // The first hub creates the CA and the server certificate; the others get copies, so an
    // edge's certificate is good at every replica.
    let mut hubs = vec![spawn_hub(0, "0")?];
    for r in 1..replicas {
        for sub in ["ca", "certs"] {
            copy_files(&hub_dir(0).join(sub), &hub_dir(r).join(sub))?;
        }
        hubs.push(spawn_hub(r, "0")?);
    }
    let ports: Vec<u16> = hubs.iter().map(|h| h.ws_port).collect();
    std::thread::sleep(Duration::from_millis(500));
    let rss_before: Vec<u64> = hubs.iter().map(|h| rss_kib(h.pid)).collect();

    let mut sims = spawn_sims(
        &hub_dir(0),
        n,
        &ports,
        &SimOptions {
            per_replica: per,
            per_sim,
            concurrency,
            threads,
        },
    )?;

    // 1. Every edge connects to its home replica.
    let (status, connect) = connect_fleet(&mut sims, n)?;
    println!(
        "connected {} of {n} edges in {} ({})",
        status.up(),
        secs(connect),
        status.per()
    );
    if connect.is_none() {
        bail!("not every edge connected");
    }
    std::thread::sleep(Duration::from_secs(5));
    let mut kib_per_node = Vec::new();
    let mut sessions = 0;
    for (r, h) in hubs.iter_mut().enumerate() {
        let stats = h.command("stats", "STATS")?;
        let nodes = Server::field(&stats, "nodes");
        sessions += nodes;
        let rss = rss_kib(h.pid);
        let per_node = rss.saturating_sub(rss_before[r]) as f64 / nodes.max(1) as f64;
        kib_per_node.push(per_node);
        println!(
            "  replica {r} (:{}): {nodes} sessions, RSS {:.1} MiB ({:.1} MiB idle), {per_node:.1} KiB per node, {} fds",
            h.ws_port,
            mib(rss),
            mib(rss_before[r]),
            open_fds(h.pid)
        );
    }
    let kib_max = kib_per_node.iter().copied().fold(0.0, f64::max);

    // 2. One message to every edge.
    let b1 = broadcast_all(&mut hubs, &mut sims, "b1", n)?;
    println!(
        "broadcast b1 to {} nodes: delivered to {} of {n} in {}, acknowledged into every hub's store in {}, {} unacknowledged",
        b1.targets,
        b1.reached,
        secs(b1.delivered),
        secs(b1.acked),
        b1.unacked
    );

    // 3. A replica dies; its edges move to the others as far as their nodeLimit lets them.
    // Every edge connected first, so that the count of the killed replica's edges is exact.
    let mut status = FleetStatus::default();
    poll_until(Duration::from_secs(120), || {
        status = fleet_status(&mut sims, u64::MAX)?;
        Ok(status.up() >= n)
    })?;
    let orphans = status.per[kill];
    let survivors_hold = ((replicas - 1) * limit).min(n);
    let expected_back = survivors_hold.saturating_sub(status.up() - orphans);
    let spare = expected_back;
    let t_kill = Instant::now();
    hubs[kill].kill()?;
    println!(
        "replica {kill} (:{}) killed with SIGKILL, {orphans} edges on it; room on the {} others: {spare}",
        ports[kill],
        replicas - 1
    );
    let mut status = FleetStatus::default();
    let moved = poll_until(Duration::from_secs(180), || {
        status = fleet_status(&mut sims, u64::MAX)?;
        Ok(status.per[kill] == 0 && status.up() >= survivors_hold)
    })?;
    // Those that found no room keep trying: none more may get in while the survivors are full.
    std::thread::sleep(Duration::from_secs(10));
    let status = fleet_status(&mut sims, u64::MAX)?;
    let back = status.up().saturating_sub(n - orphans);
    let waiting = n - status.up();
    println!(
        "  {back} of {orphans} back on the {} survivors in {} ({}); {waiting} waiting: the survivors hold at most {} ({} × nodeLimit {limit})",
        replicas - 1,
        secs(moved),
        status.per(),
        (replicas - 1) * limit,
        replicas - 1
    );
    let t_restart = Instant::now();
    let port = ports[kill].to_string();
    hubs[kill] = spawn_hub(kill, &port)?;
    let mut status = FleetStatus::default();
    let all_back = poll_until(Duration::from_secs(300), || {
        status = fleet_status(&mut sims, u64::MAX)?;
        Ok(status.up() >= n)
    })?
    .map(|_| t_restart.elapsed());
    println!(
        "replica {kill} restarted: {} of {n} connected {} after the restart ({:.1} s after the kill) ({})",
        status.up(),
        secs(all_back),
        t_kill.elapsed().as_secs_f64(),
        status.per()
    );
    std::thread::sleep(Duration::from_secs(5));
    let b2 = broadcast_all(&mut hubs, &mut sims, "b2", n)?;
    println!(
        "broadcast b2 to {} nodes: delivered to {} of {n} in {}, acknowledged into every hub's store in {}, {} unacknowledged",
        b2.targets,
        b2.reached,
        secs(b2.delivered),
        secs(b2.acked),
        b2.unacked
    );
    let status = fleet_status(&mut sims, u64::MAX)?;
    let mut stats = Vec::new();
    for h in hubs.iter_mut() {
        stats.push(h.command("stats", "STATS")?);
    }

    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let connected_ok = connect.is_some() && sessions == n as u64;
    let b1_ok = b1.lost(n) == 0 && b1.delivered.is_some() && b1.acked.is_some();
    let moved_ok = moved.is_some() && back == expected_back;
    let back_ok = all_back.is_some();
    let b2_ok = b2.lost(n) == 0 && b2.delivered.is_some() && b2.acked.is_some();
    println!(
        "\ncloudhub replicas: {replicas} replicas × {per} edges = {n}, nodeLimit {limit}, one machine"
    );
    for s in &stats {
        println!("  {s}");
    }
    println!("targets:");
    println!(
        "  {n} edges connected in {}, {sessions} sessions on the hubs; at most {kib_max:.1} KiB per node on a replica: {}",
        secs(connect),
        verdict(connected_ok)
    );
    println!(
        "  broadcast to all {n}: delivered in {}, acknowledged in {}, lost {}: {}",
        secs(b1.delivered),
        secs(b1.acked),
        b1.lost(n),
        verdict(b1_ok)
    );
    println!(
        "  replica {kill} SIGKILLed: {back} of its {orphans} edges back on {} survivors in {}, {waiting} waiting for room (expected {expected_back} back): {}",
        replicas - 1,
        secs(moved),
        verdict(moved_ok)
    );
    println!(
        "  replica {kill} restarted: all {n} connected {} later ({}): {}",
        secs(all_back),
        status.per(),
        verdict(back_ok)
    );
    println!(
        "  second broadcast to all {n}: delivered in {}, acknowledged in {}, lost {}: {}",
        secs(b2.delivered),
        secs(b2.acked),
        b2.lost(n),
        verdict(b2_ok)
    );
    quit_all(sims);
    for h in hubs {
        h.stop();
    }
    let _ = std::fs::remove_dir_all(&root);
    if !(connected_ok && b1_ok && moved_ok && back_ok && b2_ok) {
        bail!("replicas-sim targets failed");
    }
    Ok(())
}
