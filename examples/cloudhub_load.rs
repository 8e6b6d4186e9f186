//! Load test of cloudhub: N simulated edge nodes (the Rust edge client, real TLS WebSockets on
//! 127.0.0.1) against a cloudhub running in a separate process (this example re-executed with
//! `serve`). Measures connected nodes, server RSS per idle node, a message to every node, and
//! R nodes reconnecting at once with nothing lost. Every phase is bounded in time.
//!
//! ```text
//! cargo run --release --example cloudhub_load -- --nodes 10000 --reconnect 1000
//! cargo run --release --example cloudhub_load -- serve --ws-port 10000 --https-port 10002 --dir /tmp/hub
//! ```
//!
//! `serve` alone is a standalone demo hub (in-memory ObjectSync store, no Kubernetes): it
//! prints its token and reads commands on stdin (`broadcast <tag> [<from> <to>]`, `stats`,
//! `quit`). Its sync loop re-sends the last update of a node when the node (re)connects and
//! every 5 s, standing in for synccontroller.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use beehive::{Bus, Content, Message};
use cloudhub::{CloudHub, CloudHubConfig, MemoryStore, SyncKey};
use edge::hub::{Backoff, HubClient, HubClientConfig, HubEvent};

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
    if args.get(1).map(String::as_str) == Some("serve") {
        return serve(&args);
    }
    load(&args)
}

// ---------------------------------------------------------------- server role

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The object the hub keeps updating on each node: `default/configmap/load` of uid `<node>-load`.
fn update_for(node: &str, rv: u64, tag: &str) -> Message {
    Message::new()
        .with_route("edgecontroller", "resource", format!("node/{node}/default/configmap/load"), "update")
        .with_resource_version(rv.to_string())
        .with_content(
            Content::from_json_text(format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"load","namespace":"default","uid":"{node}-load","resourceVersion":"{rv}"}},"data":{{"tag":"{tag}","sent_ms":"{}"}}}}"#,
                beehive::now_millis()
            ))
            .unwrap_or_default(),
        )
}

fn serve(args: &[String]) -> anyhow::Result<()> {
    let dir: String = arg(args, "--dir", "/tmp/cloudhub-demo".to_owned());
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
        // Desired state per node: the last update sent (what synccontroller would re-send).
        let desired: Rc<RefCell<HashMap<String, Message>>> = Rc::default();
        let resend = {
            let (desired, store, ep) = (desired.clone(), store.clone(), ep.clone());
            move |node: &str| {
                let msg = desired.borrow().get(node).cloned()?;
                let key = SyncKey { node: node.into(), namespace: "default".into(), uid: format!("{node}-load") };
                let acked = store.record(&key).map(|(_, rv)| rv).unwrap_or_default();
                kubeedge_api::version::is_newer(&msg.header.resource_version, &acked).then(|| (ep.clone(), msg))
            }
        };
        let resend = Rc::new(resend);
        {
            let resend = resend.clone();
            actix_rt::spawn(async move {
                while let Ok(ev) = events.recv().await {
                    if ev.route.operation == "connected"
                        && let Some(node) = ev.route.resource.strip_prefix("node/")
                        && let Some((ep, msg)) = resend(node)
                    {
                        let _ = ep.send("cloudhub", msg).await;
                    }
                }
            });
        }
        {
            let (resend, desired) = (resend.clone(), desired.clone());
            actix_rt::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    let nodes: Vec<String> = desired.borrow().keys().cloned().collect();
                    for n in nodes {
                        if let Some((ep, msg)) = resend(&n) {
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
                        let msg = update_for(node, rv, tag);
                        desired.borrow_mut().insert(node.clone(), msg.clone());
                        ep.send("cloudhub", msg).await?;
                    }
                    println!("SENT {tag} {} rv={rv}", targets.len());
                }
                ["stats"] => {
                    let all = handle.all_node_stats();
                    let (sent, acked, retried) = all.iter().fold((0, 0, 0), |a, (_, s)| (a.0 + s.sent, a.1 + s.acked, a.2 + s.retried));
                    let s = handle.stats();
                    println!(
                        "STATS nodes={} rss_kib={} sent={sent} acked={acked} retried={retried} dropped_offline={} dropped_full={}",
                        s.connected_nodes,
                        rss_kib(std::process::id()),
                        s.dropped_offline,
                        s.dropped_full
                    );
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

// ---------------------------------------------------------------- load role

struct Server {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
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
}

#[derive(Default)]
struct NodeState {
    connects: AtomicU64,
    /// Resource version of the last update received, and when (ms since start).
    last: Mutex<(u64, u128)>,
}

struct Fleet {
    nodes: Vec<Arc<NodeState>>,
    clients: Vec<HubClient>,
    connected: Arc<AtomicUsize>,
    start: Instant,
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

fn load(args: &[String]) -> anyhow::Result<()> {
    let n: usize = arg(args, "--nodes", 10_000);
    let reconnect: usize = arg(args, "--reconnect", 1_000).min(n);
    let concurrency: usize = arg(args, "--connect-concurrency", 200);
    let dir = std::env::temp_dir().join(format!("cloudhub-load-{}", std::process::id()));
    let exe = std::env::current_exe()?;
    // `--wrap heaptrack` runs the server under a profiler.
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
    let mut server = Server {
        child,
        stdin,
        stdout,
    };
    println!("server pid {pid}, websocket 127.0.0.1:{ws_port}");

    let ca = pki::CertificateAuthority::from_pem(
        &std::fs::read_to_string(dir.join("ca/rootCA.crt"))?,
        &std::fs::read_to_string(dir.join("ca/rootCA.key"))?,
    )?;
    let t = Instant::now();
    let certs: Vec<pki::CertAndKey> = (0..n)
        .map(|i| ca.issue(&pki::IssueOptions::edge(&format!("node-{i}"))))
        .collect::<Result<_, _>>()?;
    println!("issued {n} edge certificates in {:?}", t.elapsed());

    std::thread::sleep(Duration::from_millis(500));
    let rss_before = rss_kib(pid);
    let threads: usize = arg(args, "--client-threads", 2);
    let mut fleet = Fleet {
        nodes: (0..n).map(|_| Arc::new(NodeState::default())).collect(),
        clients: Vec::new(),
        connected: Arc::new(AtomicUsize::new(0)),
        start: Instant::now(),
    };
    let slots: Arc<Mutex<Vec<Option<HubClient>>>> = Arc::new(Mutex::new(vec![None; n]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let certs = Arc::new(certs);
    let ca_der = Arc::new(ca.cert_der().to_vec());
    let t_connect = Instant::now();
    // The clients run on `threads` current-thread runtimes, nodes dealt round-robin.
    let mut shards = Vec::new();
    for t in 0..threads {
        let (certs, ca_der, slots, stop) =
            (certs.clone(), ca_der.clone(), slots.clone(), stop.clone());
        let (nodes, connected, start) = (fleet.nodes.clone(), fleet.connected.clone(), fleet.start);
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
                    slots.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(client);
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
                                    if let Ok(rv) = m.header.resource_version.parse::<u64>() {
                                        let mut last =
                                            state.last.lock().unwrap_or_else(|e| e.into_inner());
                                        if rv > last.0 {
                                            *last = (rv, start.elapsed().as_millis());
                                        }
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
        slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .all(Option::is_some)
    })?;
    fleet.clients = slots
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .flatten()
        .cloned()
        .collect();
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
        || {
            nodes
                .iter()
                .all(|s| s.last.lock().unwrap_or_else(|e| e.into_inner()).0 >= rv)
        },
    )?;
    let mut lat: Vec<u128> = fleet
        .nodes
        .iter()
        .map(|s| {
            s.last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .1
                .saturating_sub(sent_at)
        })
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
    let t_drop = Instant::now();
    for c in &fleet.clients[..reconnect] {
        c.drop_connection();
    }
    let rv = sent_rv(&server.command(&format!("broadcast r1 0 {reconnect}"), "SENT")?)?;
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
        || {
            nodes[..reconnect]
                .iter()
                .all(|s| s.last.lock().unwrap_or_else(|e| e.into_inner()).0 >= rv)
        },
    )?;
    println!(
        "{reconnect} nodes dropped at once: all back in {back:?}; the update sent meanwhile reached all {reconnect} by {:?}",
        back + delivered
    );
    let _ = t_drop;
    std::thread::sleep(Duration::from_secs(3));
    println!("{}", server.command("stats", "STATS")?);
    println!("ok");
    for c in &fleet.clients {
        c.stop();
    }
    stop.store(true, Ordering::Release);
    for shard in shards {
        let _ = shard.join();
    }
    writeln!(server.stdin, "quit")?;
    let _ = server.child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
