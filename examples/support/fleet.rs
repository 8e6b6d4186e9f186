//! Simulated edges in child processes, for the load tools that measure a cloudcore from outside
//! (each includes this file with `#[path]`; cargo does not build `examples/support/` as an
//! example of its own). The tool re-executes itself with `edges …` ([`EdgesArgs`]); each child
//! runs a share of the edges (the Rust edge client, `edge::hub`), each edge dialing from a
//! loopback address of its own (`127.20.x.y` and up), as real edges have their own.
//!
//! Children take commands on stdin, one a line, and report on stdout (times are Unix µs):
//!
//! | command | what the edges do | lines |
//! |---|---|---|
//! | `go` | bootstrap with the token (`/ca.crt`, `/edge.crt`), then connect | `B <i> <µs>` bootstrapped, `X <i> <why>` bootstrap failed (retried), `C <i> <µs>` connected |
//! | `drop` | every edge closes its session at once, no reconnect | `D <i> <µs>` per edge, then `DROPPED` |
//! | `dial` | every edge dials again at the same moment, with the certificate it has | `C` |
//! | `status <period ms> <rounds>` | every connected edge sends `rounds` node and pod status patches, one pair per period | `U <i> <kind> <ok> <sent µs> <answered µs>` per answer |
//! | (closed stdin) | the child exits | |
//!
//! A pod of the run's namespace reaching an edge is reported as `P <i> <name> <op> <rv> <µs>`.
//! Edges acknowledge what needs it, as edgecore's metamanager does.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::{Backoff, Content, Message};
use edge::hub::{EdgeCerts, HubClient, HubClientConfig, HubEvent, bootstrap_from};

/// What a child runs.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EdgesArgs {
    /// cloudhub's WebSocket address.
    #[arg(long)]
    hub: SocketAddr,
    /// The certificate server (`https://ip:port`).
    #[arg(long)]
    https: String,
    /// The bootstrap token (`<sha256 of the CA>.<JWT>`).
    #[arg(long)]
    token: String,
    /// Node names are `<prefix>-<i>`.
    #[arg(long)]
    prefix: String,
    #[arg(long)]
    from: usize,
    #[arg(long)]
    to: usize,
    /// Pods of this namespace are reported.
    #[arg(long)]
    ns: String,
    /// Current-thread runtimes the edges are dealt over.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Edges bootstrapping or connecting at once (per child).
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
}

/// Unix time in µs.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Edge `i` dials from its own loopback address.
fn node_ip(i: usize) -> IpAddr {
    let (a, b, c) = (i / 62_500, (i / 250) % 250, i % 250 + 1);
    IpAddr::V4(Ipv4Addr::new(127, 20 + a as u8, b as u8, c as u8))
}

/// One edge as its child holds it.
struct Sim {
    i: usize,
    node: String,
    certs: Mutex<Option<Arc<rustls::ClientConfig>>>,
    client: Mutex<Option<HubClient>>,
    /// Status requests in flight: message id → (kind, sent µs).
    pending: Mutex<HashMap<String, (&'static str, u64)>>,
}

type Out = std::sync::mpsc::Sender<String>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The child: runs until stdin closes.
pub(crate) fn edges(args: EdgesArgs) -> anyhow::Result<()> {
    let sims: Vec<Arc<Sim>> = (args.from..args.to)
        .map(|i| {
            Arc::new(Sim {
                i,
                node: format!("{}-{i}", args.prefix),
                certs: Mutex::new(None),
                client: Mutex::new(None),
                pending: Mutex::new(HashMap::new()),
            })
        })
        .collect();
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
    let threads = args.threads.max(1);
    let mut shards: Vec<tokio::sync::mpsc::UnboundedSender<String>> = Vec::new();
    for t in 0..threads {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        shards.push(tx);
        let mine: Vec<Arc<Sim>> = sims.iter().skip(t).step_by(threads).cloned().collect();
        let (args, out) = (args.clone(), out.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(shard(args, mine, rx, out, threads));
        });
    }
    let _ = out.send(format!("READY {}", sims.len()));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        for s in &shards {
            let _ = s.send(line.clone());
        }
    }
    std::process::exit(0);
}

async fn shard(
    args: EdgesArgs,
    sims: Vec<Arc<Sim>>,
    mut commands: tokio::sync::mpsc::UnboundedReceiver<String>,
    out: Out,
    threads: usize,
) {
    let per_shard = args.concurrency.div_ceil(threads).max(1);
    while let Some(cmd) = commands.recv().await {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["go"] | ["dial"] => {
                let sem = Arc::new(tokio::sync::Semaphore::new(per_shard));
                for sim in &sims {
                    let permit = sem.clone().acquire_owned().await.expect("open");
                    let (sim, args, out) = (sim.clone(), args.clone(), out.clone());
                    tokio::spawn(async move {
                        start_edge(&sim, &args, &out, permit).await;
                    });
                }
            }
            ["drop"] => {
                for sim in &sims {
                    if let Some(c) = lock(&sim.client).take() {
                        c.stop();
                    }
                    let _ = out.send(format!("D {} {}", sim.i, now_us()));
                }
                let _ = out.send("DROPPED".to_owned());
            }
            ["status", period, rounds] => {
                let period = Duration::from_millis(period.parse().unwrap_or(1000));
                let rounds: u64 = rounds.parse().unwrap_or(1);
                for (k, sim) in sims.iter().enumerate() {
                    let (sim, args) = (sim.clone(), args.clone());
                    // Spread the edges' first sends over the period.
                    let offset = period.mul_f64(k as f64 / sims.len().max(1) as f64);
                    tokio::spawn(async move {
                        tokio::time::sleep(offset).await;
                        let mut tick = tokio::time::interval(period);
                        for seq in 0..rounds {
                            tick.tick().await;
                            send_status(&sim, &args, seq).await;
                        }
                    });
                }
            }
            _ => {}
        }
    }
}

/// Bootstraps when the edge has no certificate yet (retrying every second), then connects and
/// reports what it receives.
async fn start_edge(
    sim: &Arc<Sim>,
    args: &EdgesArgs,
    out: &Out,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let existing = lock(&sim.certs).clone();
    let tls = match existing {
        Some(tls) => tls,
        None => {
            let mut tries = 0;
            let certs: EdgeCerts = loop {
                match bootstrap_from(&args.https, &args.token, &sim.node, Some(node_ip(sim.i)))
                    .await
                {
                    Ok(c) => break c,
                    Err(e) => {
                        tries += 1;
                        let why = e.to_string().replace(char::is_whitespace, "_");
                        let _ = out.send(format!("X {} {why}", sim.i));
                        if tries >= 30 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            };
            let _ = out.send(format!("B {} {}", sim.i, now_us()));
            let tls = match certs.client_tls() {
                Ok(t) => Arc::new(t),
                Err(e) => {
                    let _ = out.send(format!("X {} tls:{e}", sim.i));
                    return;
                }
            };
            *lock(&sim.certs) = Some(tls.clone());
            tls
        }
    };
    let mut cfg = HubClientConfig::new(&sim.node, args.hub.to_string());
    cfg.queue_capacity = 64;
    cfg.local_address = Some(node_ip(sim.i));
    cfg.backoff = Backoff {
        initial: Duration::from_millis(500),
        max: Duration::from_secs(5),
    };
    let (client, mut events) = HubClient::start(cfg, tls);
    *lock(&sim.client) = Some(client);
    let (sim, out) = (sim.clone(), out.clone());
    let prefix = format!("{}/pod/", args.ns);
    tokio::spawn(async move {
        let mut permit = Some(permit);
        while let Some(ev) = events.recv().await {
            let line = match ev {
                HubEvent::Connected => {
                    permit.take();
                    format!("C {} {}", sim.i, now_us())
                }
                HubEvent::Disconnected { .. } => continue,
                HubEvent::Message(m) => {
                    let parent = m.header.parent_id.to_string();
                    if !parent.is_empty()
                        && let Some((kind, sent)) = lock(&sim.pending).remove(&parent)
                    {
                        let ok = answer_ok(&m);
                        format!("U {} {kind} {} {sent} {}", sim.i, u8::from(ok), now_us())
                    } else if let Some(pod) = m.route.resource.strip_prefix(&prefix) {
                        format!(
                            "P {} {pod} {} {} {}",
                            sim.i,
                            m.route.operation,
                            m.header.resource_version,
                            now_us()
                        )
                    } else {
                        continue;
                    }
                }
            };
            if out.send(line).is_err() {
                break;
            }
        }
    });
}

/// Whether a status answer reports success: an ObjectResp whose `Err` is null or absent.
fn answer_ok(m: &Message) -> bool {
    let v: serde_json::Value = match serde_json::from_str(m.content.as_json()) {
        Ok(v) => v,
        Err(_) => return false,
    };
    // A Go edge gets the ObjectResp as an object, or as a JSON string holding one.
    let v = match v {
        serde_json::Value::String(s) => serde_json::from_str(&s).unwrap_or_default(),
        other => other,
    };
    v.get("Object").is_some_and(|o| !o.is_null())
        && v.get("Err").is_none_or(|e| {
            e.is_null()
                || e.as_object()
                    .is_some_and(|o| o.is_empty() || o.get("code").is_none())
        })
}

/// One node status and one pod status patch, as edged sends them through its metamanager
/// (`null/nodepatch/<node>` and `<ns>/podpatch/<pod>`, operation `patch`, the patch as a JSON
/// string, answered by the cloud).
async fn send_status(sim: &Arc<Sim>, args: &EdgesArgs, seq: u64) {
    let Some(client) = lock(&sim.client).clone() else {
        return;
    };
    let now = chrono_like_now();
    let node_patch = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "EdgeReady",
        "message": format!("bench seq {seq}"),
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    // The harness names pod k of node n `<n>-p<k>`.
    let pod = format!("{}-p0", sim.node);
    let pod_patch = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "message": format!("bench seq {seq}"),
        "lastTransitionTime": now,
    }]}});
    for (kind, resource, patch) in [
        ("node", format!("null/nodepatch/{}", sim.node), node_patch),
        ("pod", format!("{}/podpatch/{pod}", args.ns), pod_patch),
    ] {
        let mut m = Message::new()
            .with_route("edged", "meta", resource, "patch")
            .with_content(Content::string(patch.to_string()));
        m.header.sync = true;
        lock(&sim.pending).insert(m.header.id.to_string(), (kind, now_us()));
        if client.try_send(m).is_err() {
            continue;
        }
    }
}

/// RFC 3339 UTC time, whole seconds, as Kubernetes writes it.
fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    // Days to a civil date (Howard Hinnant's algorithm).
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ------------------------------------------------------------------------- the parent's side

/// One answered status request: kind, success, round trip.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) node: bool,
    pub(crate) ok: bool,
    pub(crate) sent_us: u64,
    pub(crate) rtt_us: u64,
}

/// What the children reported.
#[derive(Default)]
pub(crate) struct Board {
    up: AtomicUsize,
    bootstrapped: AtomicUsize,
    bootstrap_failures: AtomicUsize,
    dropped_children: AtomicUsize,
    state: Mutex<BoardState>,
}

#[derive(Default)]
struct BoardState {
    connected: Vec<bool>,
    /// Pod name → (operation, resource version, µs) of each receipt.
    pods: HashMap<String, Vec<(String, u64, u64)>>,
    answers: Vec<Answer>,
    last_failure: String,
}

impl Board {
    fn record(&self, line: &str, n: usize) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        match w.as_slice() {
            ["C", i, _] => {
                let mut s = lock(&self.state);
                if s.connected.len() < n {
                    s.connected.resize(n, false);
                }
                let i = num(i) as usize;
                if i < n && !s.connected[i] {
                    s.connected[i] = true;
                    self.up.fetch_add(1, Ordering::Relaxed);
                }
            }
            ["D", i, _] => {
                let mut s = lock(&self.state);
                let i = num(i) as usize;
                if i < s.connected.len() && s.connected[i] {
                    s.connected[i] = false;
                    self.up.fetch_sub(1, Ordering::Relaxed);
                }
            }
            ["DROPPED"] => {
                self.dropped_children.fetch_add(1, Ordering::Relaxed);
            }
            ["B", _, _] => {
                self.bootstrapped.fetch_add(1, Ordering::Relaxed);
            }
            ["X", _, why] => {
                self.bootstrap_failures.fetch_add(1, Ordering::Relaxed);
                lock(&self.state).last_failure = (*why).to_owned();
            }
            ["P", _, pod, op, rv, at] => {
                lock(&self.state)
                    .pods
                    .entry((*pod).to_owned())
                    .or_default()
                    .push(((*op).to_owned(), num(rv), num(at)));
            }
            ["U", _, kind, ok, sent, at] => {
                lock(&self.state).answers.push(Answer {
                    node: *kind == "node",
                    ok: *ok == "1",
                    sent_us: num(sent),
                    rtt_us: num(at).saturating_sub(num(sent)),
                });
            }
            _ => {}
        }
    }

    /// Edges whose session is up.
    pub(crate) fn up(&self) -> usize {
        self.up.load(Ordering::Relaxed)
    }

    /// Failed bootstrap attempts so far, and the last reason.
    pub(crate) fn bootstrap_failures(&self) -> (usize, String) {
        (
            self.bootstrap_failures.load(Ordering::Relaxed),
            lock(&self.state).last_failure.clone(),
        )
    }

    /// The first time `pod` arrived at (or after) resource version `rv`, in Unix µs.
    pub(crate) fn pod_arrival(&self, pod: &str, rv: u64) -> Option<u64> {
        lock(&self.state)
            .pods
            .get(pod)?
            .iter()
            .filter(|(_, v, _)| *v >= rv)
            .map(|(_, _, at)| *at)
            .min()
    }

    /// Pod messages received so far (duplicates included).
    pub(crate) fn pod_messages(&self) -> usize {
        lock(&self.state).pods.values().map(Vec::len).sum()
    }

    /// The status answers received so far, taken out.
    pub(crate) fn take_answers(&self) -> Vec<Answer> {
        std::mem::take(&mut lock(&self.state).answers)
    }
}

/// A child process of the tool; closing its stdin ends it, then SIGKILL after a grace.
struct Child_ {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Drop for Child_ {
    fn drop(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Edges `<prefix>-0` … `<prefix>-<n-1>` in child processes of at most `per_child` each.
pub(crate) struct Fleet {
    children: Vec<Child_>,
    pub(crate) board: Arc<Board>,
}

/// Where the edges go and who they are.
pub(crate) struct FleetSpec<'a> {
    pub(crate) hub: SocketAddr,
    pub(crate) https: String,
    pub(crate) token: &'a str,
    pub(crate) prefix: &'a str,
    pub(crate) ns: &'a str,
    pub(crate) n: usize,
    pub(crate) per_child: usize,
}

impl Fleet {
    /// Starts the children (the edges wait for `go`).
    pub(crate) fn start(spec: &FleetSpec<'_>) -> anyhow::Result<Fleet> {
        let board = Arc::new(Board::default());
        let mut children = Vec::new();
        for from in (0..spec.n).step_by(spec.per_child.max(1)) {
            let to = (from + spec.per_child).min(spec.n);
            let mut child = Command::new(std::env::current_exe()?)
                .args([
                    "edges",
                    "--hub",
                    &spec.hub.to_string(),
                    "--https",
                    &spec.https,
                    "--token",
                    spec.token,
                    "--prefix",
                    spec.prefix,
                    "--from",
                    &from.to_string(),
                    "--to",
                    &to.to_string(),
                    "--ns",
                    spec.ns,
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("start an edge simulator")?;
            let stdin = child.stdin.take();
            let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
            let mut line = String::new();
            loop {
                line.clear();
                if stdout.read_line(&mut line)? == 0 {
                    bail!("an edge simulator exited before it was ready");
                }
                if line.starts_with("READY") {
                    break;
                }
            }
            let (b, n) = (board.clone(), spec.n);
            std::thread::spawn(move || {
                for line in stdout.lines() {
                    let Ok(line) = line else { break };
                    b.record(&line, n);
                }
            });
            children.push(Child_ { child, stdin });
        }
        Ok(Fleet { children, board })
    }

    /// The children's process ids (their CPU is the simulators' own work).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.child.id()).collect()
    }

    /// Sends `command` to every child.
    pub(crate) fn command(&mut self, command: &str) -> anyhow::Result<()> {
        for c in &mut self.children {
            let stdin = c.stdin.as_mut().context("stdin closed")?;
            writeln!(stdin, "{command}")?;
            stdin.flush()?;
        }
        Ok(())
    }

    /// Waits until `want` edges are connected (at most `limit`); the time it took from `since`.
    pub(crate) async fn wait_up(
        &self,
        want: usize,
        since: Instant,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        while self.board.up() < want {
            if since.elapsed() > limit {
                let (failures, why) = self.board.bootstrap_failures();
                bail!(
                    "only {}/{want} edges connected within {limit:?} ({failures} failed bootstraps, last: {why})",
                    self.board.up()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(since.elapsed())
    }

    /// Drops every session and waits until every child confirmed.
    pub(crate) async fn drop_all(&mut self) -> anyhow::Result<()> {
        let before = self.board.dropped_children.load(Ordering::Relaxed);
        self.command("drop")?;
        let want = before + self.children.len();
        let t = Instant::now();
        while self.board.dropped_children.load(Ordering::Relaxed) < want {
            if t.elapsed() > Duration::from_secs(30) {
                bail!("edge simulators did not drop their sessions");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}
