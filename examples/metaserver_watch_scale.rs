//! Scale figure for dynamiccontroller: N Rust edges each register two metaServer watches
//! (services and endpointslices, all namespaces) on a cloudcore running as its own process
//! (the `cloudcore` example binary) against the test API server (k8s-testenv). Reports
//!
//! - cloudcore's RSS per watch listener: (RSS after the 2N watches − RSS with N idle edges) / 2N;
//! - the API server's watch count for services and endpointslices before and after (one shared
//!   cache per type: it must not grow with N);
//! - for M changes of one service, made one at a time, the delivery time of the `update` to
//!   each edge (p50/p99 over all edges and changes) and the time until all N edges had it,
//!   beside a kube-rs `watcher` on services straight against the API server;
//! - lost updates (an edge that never got a change), which must be 0.
//!
//! Every phase is bounded in time. Build the cloudcore binary first (the example finds it
//! beside itself, `target/release/examples/cloudcore`, or at `CLOUDCORE_BIN`):
//!
//! ```text
//! cargo build --release --example cloudcore --example metaserver_watch_scale
//! target/release/examples/metaserver_watch_scale --nodes 1000 --changes 20
//! ```

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::{Content, Message};
use clap::Parser;
use edge::hub::{EdgeCerts, HubClient, HubClientConfig, HubEvent, bootstrap};
use edgecore_interop::{CloudSpec, http_get};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kubeedge_api::application::Application;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

#[path = "support/cloudcore.rs"]
mod cloudcore_process;
#[path = "support/latency.rs"]
mod latency;
#[path = "support/procstat.rs"]
mod procstat;

use cloudcore_process::{settled_rss, start_cloudcore, wait_ready};
use latency::{ms, percentile};
use procstat::{mib, open_fds, rss_kib, threads};

/// Edge metaServer watches through cloudcore at scale.
#[derive(Debug, Parser)]
struct Args {
    /// Rust edges (each bootstraps its own certificate and registers 2 watches).
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Changes of the watched service, one at a time.
    #[arg(long, default_value_t = 20)]
    changes: usize,
    /// Certificate bootstraps at once.
    #[arg(long, default_value_t = 16)]
    bootstrap_concurrency: usize,
    /// Watch registrations in flight at once (all edges together).
    #[arg(long, default_value_t = 200)]
    register_concurrency: usize,
    /// Seconds one change may take to reach every edge before it counts as lost there.
    #[arg(long, default_value_t = 60)]
    change_timeout: u64,
    /// cloudcore's log filter (its log is `<dir>/cloudcore.log`).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Keep cloudcore's folder (config, certificates, log) after a clean run too.
    #[arg(long)]
    keep: bool,
    /// cloudcore with `modules.cloudHub.authorization` `enable: true, debug: false`: the
    /// edges' requests also go to the API server as `system:node:<name>` (the default decides
    /// them in-process only).
    #[arg(long)]
    impersonate: bool,
}

/// What every edge records: answers to its requests and the `update`s of the watched service.
#[derive(Default)]
struct Board {
    /// First arrival per change (resource version) and edge.
    updates: Mutex<HashMap<String, HashMap<usize, Instant>>>,
    /// Updates of the watched service that arrived again at the same edge.
    duplicates: AtomicUsize,
    /// `insert`s of the watched service (one per edge expected after registering).
    inserts: Mutex<HashMap<usize, Instant>>,
    /// Every other push (other services, endpointslices, the edge's own objects).
    other_pushes: AtomicUsize,
    connected: AtomicUsize,
    disconnects: AtomicUsize,
    changed: Notify,
}

type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Message>>>>;

struct Edge {
    client: HubClient,
    waiting: Waiting,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Edge `i` dials from its own loopback address, as real edges have their own (cloudhub
/// limits handshakes in progress per source address).
fn node_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 10, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// A watch Application as edgecore's metaServer writes it.
fn watch_application(key: &str) -> Value {
    let option = json!({"watch": true, "allowWatchBookmarks": true, "timeoutSeconds": 431});
    let mut app = Application::request(beehive::new_id().replace('-', ""), "watch", key);
    app.option = Some(option.to_string().into_bytes());
    serde_json::to_value(app).expect("an Application encodes")
}

impl Edge {
    /// Sends `app` as the metaServer does and waits (at most `limit`) for the answer.
    async fn apply(&self, app: &Value, limit: Duration) -> anyhow::Result<Value> {
        let mut msg = Message::new()
            .with_route("metaserver", "dynamiccontroller", "null", "null")
            .with_content(Content::json(app)?);
        msg.header.sync = true;
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(msg.header.id.to_string(), tx);
        self.client.send(msg).await?;
        let answer = tokio::time::timeout(limit, rx)
            .await
            .context("no answer in time")?
            .context("edge stopped")?;
        Ok(serde_json::from_str(answer.content.as_json())?)
    }
}

/// Starts edge `i`, whose events are recorded on `board`.
fn start_edge(
    i: usize,
    node: &str,
    certs: &EdgeCerts,
    ws: &str,
    board: &Arc<Board>,
    target: &str,
) -> anyhow::Result<Edge> {
    let mut config = HubClientConfig::new(node, ws);
    config.local_address = Some(node_ip(i));
    let (client, mut events) = HubClient::start(config, Arc::new(certs.client_tls()?));
    let waiting: Waiting = Arc::default();
    let (w, b, target) = (waiting.clone(), board.clone(), target.to_owned());
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            let m = match ev {
                HubEvent::Connected => {
                    b.connected.fetch_add(1, Ordering::Relaxed);
                    b.changed.notify_waiters();
                    continue;
                }
                HubEvent::Disconnected { .. } => {
                    b.disconnects.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                HubEvent::Message(m) => m,
            };
            let now = Instant::now();
            if !m.header.parent_id.is_empty() {
                if let Some(tx) = lock(&w).remove(&*m.header.parent_id.as_str()) {
                    let _ = tx.send(m);
                }
                continue;
            }
            if m.route.resource != target {
                b.other_pushes.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match m.route.operation.as_str() {
                "update" => {
                    let mut updates = lock(&b.updates);
                    let at = updates
                        .entry(m.header.resource_version.to_string())
                        .or_default();
                    match at.entry(i) {
                        std::collections::hash_map::Entry::Occupied(_) => {
                            b.duplicates.fetch_add(1, Ordering::Relaxed);
                        }
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(now);
                        }
                    }
                }
                "insert" => {
                    lock(&b.inserts).entry(i).or_insert(now);
                }
                _ => {}
            }
            b.changed.notify_waiters();
        }
    });
    Ok(Edge { client, waiting })
}

/// Waits until `done()` holds, at most `limit`; returns whether it did.
async fn wait_until(board: &Board, limit: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let changed = board.changed.notified();
        if done() {
            return true;
        }
        // Also poll: a notify between the check and the wait is not lost for long.
        let step = tokio::time::sleep(Duration::from_millis(50));
        tokio::select! {
            _ = changed => {}
            _ = step => {}
            _ = tokio::time::sleep_until(deadline) => return done(),
        }
    }
}

/// The API server's long-running WATCH requests and registered watchers per resource.
#[derive(Debug, Default, Clone)]
struct WatchCounts {
    longrunning: BTreeMap<String, f64>,
    registered: BTreeMap<String, f64>,
}

/// Label `key` of a Prometheus series' label text.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

/// Read as admin with `kubectl get --raw /metrics` (this package has no `http` dependency for
/// `kube::Client::request_text`).
fn watch_counts(env: &k8s_testenv::TestEnv) -> anyhow::Result<WatchCounts> {
    let out = env.kubectl().args(["get", "--raw", "/metrics"]).output()?;
    if !out.status.success() {
        bail!(
            "kubectl get --raw /metrics: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut c = WatchCounts::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let labels = labels.trim_end_matches('}');
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        match name {
            "apiserver_longrunning_requests" if label(labels, "verb") == Some("WATCH") => {
                let r = label(labels, "resource").unwrap_or("").to_owned();
                *c.longrunning.entry(r).or_default() += v;
            }
            "apiserver_registered_watchers" => {
                let k = label(labels, "kind").unwrap_or("").to_owned();
                *c.registered.entry(k).or_default() += v;
            }
            _ => {}
        }
    }
    Ok(c)
}

impl WatchCounts {
    fn services(&self) -> f64 {
        self.longrunning.get("services").copied().unwrap_or(0.0)
    }

    fn endpointslices(&self) -> f64 {
        self.longrunning
            .get("endpointslices")
            .copied()
            .unwrap_or(0.0)
    }

    fn nodes(&self) -> f64 {
        self.longrunning.get("nodes").copied().unwrap_or(0.0)
    }

    fn registered(&self, kind: &str) -> Option<f64> {
        self.registered.get(kind).copied()
    }
}

/// cloudcore's own dynamiccontroller gauges and counters (`/metrics` of its monitor server).
async fn dc_metrics(spec: &CloudSpec) -> BTreeMap<String, f64> {
    let Ok(r) = http_get(
        spec.ports.monitor_addr(),
        "/metrics",
        Duration::from_secs(5),
    )
    .await
    else {
        return BTreeMap::new();
    };
    let m = edgecore_interop::Metrics(r.text());
    [
        "dynamiccontroller_listeners",
        "dynamiccontroller_listener_nodes",
        "dynamiccontroller_informers",
        "dynamiccontroller_events_sent_total",
        "dynamiccontroller_events_failed_total",
    ]
    .into_iter()
    .filter_map(|k| {
        Some((
            k.trim_start_matches("dynamiccontroller_").to_owned(),
            m.value(k, &[])?,
        ))
    })
    .collect()
}

fn summary_ms(sorted: &[Duration]) -> (f64, f64, f64) {
    if sorted.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (
        ms(percentile(sorted, 0.5)),
        ms(percentile(sorted, 0.99)),
        ms(sorted[sorted.len() - 1]),
    )
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // One thread for this side (the edges, the patches): this package's tokio has no
    // multi-thread runtime. The direct watcher runs on a thread of its own.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

/// The baseline: a kube-rs `watcher` on services straight against the API server, on its own
/// thread and runtime so the edges' work does not delay it; records when each version of a
/// service in `ns` arrived. Returns once its first list completed.
async fn start_direct_watcher(ns: String) -> anyhow::Result<Arc<Mutex<HashMap<String, Instant>>>> {
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (ready_tx, ready_rx) = oneshot::channel();
    let out = seen.clone();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(_) => return,
        };
        rt.block_on(async move {
            let api: Api<Service> = Api::all(k8s_testenv::client().await);
            let mut ready = Some(ready_tx);
            let mut s = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Ok(Some(ev)) = s.try_next().await {
                match ev {
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Apply(svc)
                        if svc.metadata.namespace.as_deref() == Some(&ns) =>
                    {
                        if let Some(rv) = svc.metadata.resource_version {
                            lock(&out).entry(rv).or_insert_with(Instant::now);
                        }
                    }
                    _ => {}
                }
            }
        });
    });
    tokio::time::timeout(Duration::from_secs(30), ready_rx)
        .await
        .context("the direct watcher did not sync within 30 s")?
        .context("the direct watcher stopped")?;
    Ok(seen)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let n = args.nodes;
    let run_started = Instant::now();

    // 1. API server, CRDs, the optional readers binding, cloudcore as its own process.
    let t = Instant::now();
    let env = k8s_testenv::env();
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let readers = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/optional/metaserver-readers.yaml");
    let out = env
        .kubectl()
        .arg("apply")
        .arg("-f")
        .arg(&readers)
        .output()?;
    if !out.status.success() {
        bail!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dir = std::env::temp_dir().join(format!("cloudcore-mswatch-{}", std::process::id()));
    let mut spec = CloudSpec::for_testenv(&dir)?;
    spec.impersonate = args.impersonate;
    // nodeLimit for N edges.
    let (mut core, bin) = start_cloudcore(&spec, &args.log_level, |config| {
        config["modules"]["cloudHub"]["nodeLimit"] =
            serde_json::Value::from(n.max(500) as u64 + 100);
    })?;
    wait_ready(&mut core, &spec).await?;
    let pid = core.id();
    let token = std::fs::read_to_string(spec.token_file())?
        .trim()
        .to_owned();
    println!(
        "cloudcore {} (pid {pid}) ready in {:.1} s, log {}",
        bin.display(),
        t.elapsed().as_secs_f64(),
        spec.log_file().display()
    );

    // The watched service, in a namespace of its own, before any watch.
    let ns = k8s_testenv::namespace("mswatch").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "watched", "namespace": ns},
        "spec": {"ports": [{"port": 80}]}
    }))?;
    services.create(&PostParams::default(), &svc).await?;
    let target = format!("{ns}/service/watched");

    // The baseline, started before the "before" watch counts.
    let direct = start_direct_watcher(ns.clone()).await?;

    // 2. N certificates from the bootstrap token (GET /edge.crt, as edgecore's first start).
    let t = Instant::now();
    let https = format!("https://{}", spec.ports.https_addr());
    let prefix = format!("msw-{}", &beehive::new_id().replace('-', "")[..6]);
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let certs: Vec<EdgeCerts> = tokio::time::timeout(
        Duration::from_secs(600),
        futures::stream::iter(names.iter().map(|name| {
            let (https, token) = (https.clone(), token.clone());
            async move { bootstrap(&https, &token, name).await }
        }))
        .buffered(args.bootstrap_concurrency.max(1))
        .try_collect(),
    )
    .await
    .context("bootstraps took over 600 s")??;
    let bootstrap_secs = t.elapsed().as_secs_f64();
    println!("bootstrapped {n} edge certificates in {bootstrap_secs:.1} s");

    // 3. N edges connected; cloudcore's RSS with them idle.
    let t = Instant::now();
    let board = Arc::new(Board::default());
    let ws = spec.ports.websocket_addr().to_string();
    let mut edges = Vec::with_capacity(n);
    for (i, (name, c)) in names.iter().zip(&certs).enumerate() {
        edges.push(start_edge(i, name, c, &ws, &board, &target)?);
    }
    drop(certs);
    let all_connected = wait_until(&board, Duration::from_secs(180), || {
        board.connected.load(Ordering::Relaxed) >= n
    })
    .await;
    let connect_secs = t.elapsed().as_secs_f64();
    let connected = board.connected.load(Ordering::Relaxed);
    println!("{connected}/{n} edges connected in {connect_secs:.1} s");
    if !all_connected {
        bail!(
            "only {connected}/{n} edges connected\n{}",
            core.log_tail(30)
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle = settled_rss(pid).await;
    let watches_before = watch_counts(env)?;
    println!(
        "cloudcore with {n} idle edges: RSS {:.1} MiB, {} threads, {} fds; \
         API server WATCH requests: services {}, endpointslices {}",
        mib(rss_idle),
        threads(pid),
        open_fds(pid),
        watches_before.services(),
        watches_before.endpointslices()
    );

    // 4. Every edge registers 2 watches: services and endpointslices, all namespaces.
    let t = Instant::now();
    let limit = Duration::from_secs(120);
    let keys = [
        "/core/v1/services/null/null",
        "/discovery.k8s.io/v1/endpointslices/null/null",
    ];
    let answers: Vec<anyhow::Result<Value>> = tokio::time::timeout(
        Duration::from_secs(600),
        futures::stream::iter(edges.iter().flat_map(|e| keys.iter().map(move |k| (e, *k))))
            .map(|(e, k)| async move { e.apply(&watch_application(k), limit).await })
            .buffer_unordered(args.register_concurrency.max(1))
            .collect(),
    )
    .await
    .context("watch registration took over 600 s")?;
    let register_secs = t.elapsed().as_secs_f64();
    let mut approved = 0;
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    for a in &answers {
        match a {
            Ok(app) if app["Status"] == "Approved" => approved += 1,
            Ok(app) => {
                *refusals
                    .entry(format!("{} {}", app["Status"], app["Reason"]))
                    .or_default() += 1
            }
            Err(e) => *refusals.entry(e.to_string()).or_default() += 1,
        }
    }
    println!(
        "{approved}/{} watches approved in {register_secs:.1} s; refused or failed: {refusals:?}",
        answers.len()
    );
    if approved != 2 * n {
        bail!(
            "not every watch was approved: {refusals:?}\n{}",
            core.log_tail(30)
        );
    }
    // Registration sends what a listener selects: the watched service reaches every edge.
    let all_inserted = wait_until(&board, Duration::from_secs(120), || {
        lock(&board.inserts).len() >= n
    })
    .await;
    let initial_secs = t.elapsed().as_secs_f64();
    let inserted = lock(&board.inserts).len();
    println!(
        "the watched service reached {inserted}/{n} edges \
         {initial_secs:.1} s after the first registration"
    );
    if !all_inserted {
        println!("WARNING: not every edge got the initial insert");
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_watching = settled_rss(pid).await;
    let watches_after = watch_counts(env)?;
    let per_listener = (rss_watching as f64 - rss_idle as f64) * 1024.0 / (2 * n) as f64;
    println!(
        "cloudcore with {} listeners: RSS {:.1} MiB (+{:.1} MiB), \
         {per_listener:.0} bytes per listener",
        2 * n,
        mib(rss_watching),
        (rss_watching as f64 - rss_idle as f64) / 1024.0
    );
    let dc_after_register = dc_metrics(&spec).await;
    println!(
        "cloudcore dynamiccontroller: {dc_after_register:?}; API server WATCH requests on nodes \
         {} → {} (the topology cache of the filter)",
        watches_before.nodes(),
        watches_after.nodes()
    );
    let svc_growth = watches_after.services() - watches_before.services();
    let eps_growth = watches_after.endpointslices() - watches_before.endpointslices();
    println!(
        "API server WATCH requests after: services {} ({svc_growth:+}), \
         endpointslices {} ({eps_growth:+}); apiserver_registered_watchers \
         Service {:?} → {:?}, EndpointSlice {:?} → {:?}",
        watches_after.services(),
        watches_after.endpointslices(),
        watches_before.registered("Service"),
        watches_after.registered("Service"),
        watches_before.registered("EndpointSlice"),
        watches_after.registered("EndpointSlice"),
    );

    // 5. M changes, one at a time: delivery to every edge, and to the direct watcher.
    let mut per_edge: Vec<Duration> = Vec::with_capacity(n * args.changes);
    let mut to_all: Vec<Duration> = Vec::with_capacity(args.changes);
    let mut direct_lat: Vec<Duration> = Vec::with_capacity(args.changes);
    let mut lost = 0usize;
    let mut direct_lost = 0usize;
    let mut incomplete_changes = 0usize;
    let change_limit = Duration::from_secs(args.change_timeout);
    for k in 0..args.changes {
        let patch = json!({"metadata": {"annotations": {"scale.test/change": k.to_string()}}});
        let began = Instant::now();
        let patched = services
            .patch("watched", &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        let rv = patched
            .metadata
            .resource_version
            .context("no resourceVersion")?;
        let complete = wait_until(&board, change_limit, || {
            lock(&board.updates).get(&rv).is_some_and(|m| m.len() >= n)
        })
        .await;
        let got: Vec<Duration> = lock(&board.updates)
            .get(&rv)
            .map(|m| m.values().map(|at| at.duration_since(began)).collect())
            .unwrap_or_default();
        lost += n - got.len();
        if complete {
            to_all.push(got.iter().copied().max().unwrap_or_default());
        } else {
            incomplete_changes += 1;
        }
        per_edge.extend(got);
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(at) = lock(&direct).get(&rv) {
                    return *at;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        match seen {
            Ok(at) => direct_lat.push(at.duration_since(began)),
            Err(_) => direct_lost += 1,
        }
    }
    // Late arrivals or re-sends would show up as duplicates: give them a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    per_edge.sort();
    to_all.sort();
    direct_lat.sort();
    let (e50, e99, emax) = summary_ms(&per_edge);
    let (a50, a99, amax) = summary_ms(&to_all);
    let (d50, d99, dmax) = summary_ms(&direct_lat);
    println!(
        "{} changes × {n} edges: per-edge delivery p50 {e50:.2} ms, p99 {e99:.2} ms, \
         max {emax:.2} ms; time to all {n}: p50 {a50:.2} ms, p99 {a99:.2} ms, max {amax:.2} ms",
        args.changes
    );
    println!(
        "direct kube-rs watcher: p50 {d50:.2} ms, p99 {d99:.2} ms, max {dmax:.2} ms; \
         ratio ours/direct p50 {:.2}, p99 {:.2}",
        e50 / d50,
        e99 / d99
    );
    let expected = n * args.changes;
    let delivered = per_edge.len();
    let duplicates = board.duplicates.load(Ordering::Relaxed);
    println!(
        "delivered {delivered}/{expected} updates, lost {lost}, duplicates {duplicates}, \
         direct watcher missed {direct_lost}"
    );
    let rss_end = rss_kib(pid);
    let dc_end = dc_metrics(&spec).await;
    println!("cloudcore dynamiccontroller at the end: {dc_end:?}");
    // What cloudcore complained about meanwhile (WARN/ERROR lines, first of each kind).
    let log = core.log();
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for l in &complaints {
        // Drop the timestamp; keep the level, target and message start.
        let text = l.split_once(' ').map_or(*l, |(_, rest)| rest);
        *kinds.entry(text.chars().take(140).collect()).or_default() += 1;
    }
    if !kinds.is_empty() {
        println!("cloudcore log: {} WARN/ERROR lines", complaints.len());
        for (k, c) in kinds.iter().take(10) {
            println!("  {c} × {k}");
        }
    }
    let disconnects = board.disconnects.load(Ordering::Relaxed);

    // 6. One machine-readable block.
    println!("--- metaserver_watch_scale summary ---");
    let summary = json!({
        "cloudcore": "separate process (examples/cloudcore binary)",
        "nodes": n,
        "changes": args.changes,
        "bootstrap_secs": bootstrap_secs,
        "connect_secs": connect_secs,
        "register_secs": register_secs,
        "initial_insert_secs": initial_secs,
        "watches_approved": approved,
        "rss_idle_kib": rss_idle,
        "rss_watching_kib": rss_watching,
        "rss_end_kib": rss_end,
        "bytes_per_listener": per_listener.round(),
        "apiserver_watch_services_before": watches_before.services(),
        "apiserver_watch_services_after": watches_after.services(),
        "apiserver_watch_endpointslices_before": watches_before.endpointslices(),
        "apiserver_watch_endpointslices_after": watches_after.endpointslices(),
        "apiserver_watch_nodes_before": watches_before.nodes(),
        "apiserver_watch_nodes_after": watches_after.nodes(),
        "dynamiccontroller_after_register": dc_after_register,
        "dynamiccontroller_end": dc_end,
        "apiserver_watches_grow_with_n": svc_growth > 1.0 || eps_growth > 1.0,
        "edge_delivery_p50_ms": e50,
        "edge_delivery_p99_ms": e99,
        "edge_delivery_max_ms": emax,
        "time_to_all_p50_ms": a50,
        "time_to_all_p99_ms": a99,
        "time_to_all_max_ms": amax,
        "direct_p50_ms": d50,
        "direct_p99_ms": d99,
        "ratio_p50": e50 / d50,
        "ratio_p99": e99 / d99,
        "updates_expected": expected,
        "updates_delivered": delivered,
        "updates_lost": lost,
        "changes_incomplete": incomplete_changes,
        "duplicates": duplicates,
        "direct_missed": direct_lost,
        "edge_disconnects": disconnects,
        "cloudcore_log_warn_error_lines": complaints.len(),
        "other_pushes": board.other_pushes.load(Ordering::Relaxed),
        "total_secs": run_started.elapsed().as_secs_f64(),
    });
    let mut summary = summary;
    summary["node_authorization"] = json!(if args.impersonate {
        "impersonation"
    } else {
        "in-process"
    });
    println!("{summary}");
    println!("--- end ---");

    for e in &edges {
        e.client.stop();
    }
    let (_, graceful) = core.terminate(Duration::from_secs(20)).await;
    if lost == 0 && graceful && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("cloudcore folder kept: {}", dir.display());
    }
    if lost > 0 {
        bail!("{lost} updates never reached their edge");
    }
    Ok(())
}
