//! What the scenarios share: namespaces, manifests, waits on pods, and the two checks every
//! run ends with (cloudcore refused nothing; `down` left nothing behind).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use local_up::{Cluster, Metrics, eventually};
use serde_json::{Value, json};

/// How often the waits ask the API server (each ask starts a kubectl).
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// Label kubelet sets on every pod's containers in containerd.
const NODE_LABEL: &str = "kubernetes.io/hostname";

/// Creates namespace `name` and waits for its `default` ServiceAccount (pods need it; the
/// controller manager makes it).
pub(crate) async fn namespace(c: &Cluster, name: &str) -> Result<String> {
    c.kubectl_ok(&["create", "namespace", name]).await?;
    eventually(
        Duration::from_secs(60),
        POLL,
        "ServiceAccount default",
        || async {
            c.kubectl_ok(&["-n", name, "get", "serviceaccount", "default"])
                .await
                .ok()
        },
    )
    .await?;
    Ok(name.to_owned())
}

/// Deletes a namespace without waiting (its pods go through the edge as any deletion).
pub(crate) async fn drop_namespace(c: &Cluster, name: &str) {
    let _ = c
        .kubectl_ok(&["delete", "namespace", name, "--wait=false"])
        .await;
}

/// A container of the workload image running `script` under `sh -c`, stopping at once on
/// SIGTERM (a shell as PID 1 otherwise ignores it and takes the whole grace period).
pub(crate) fn container(c: &Cluster, script: &str) -> Value {
    json!({
        "name": "main",
        "image": c.image(),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", format!("trap 'exit 0' TERM; {script}")],
    })
}

/// A pod spec on `node`, chosen by kube-scheduler through a node selector.
pub(crate) fn pod_spec(node: &str, containers: Vec<Value>) -> Value {
    json!({
        "nodeSelector": {NODE_LABEL: node},
        "terminationGracePeriodSeconds": 5,
        "containers": containers,
    })
}

/// A Deployment of `replicas` pods labelled `app: name` with `spec`.
pub(crate) fn deployment(name: &str, ns: &str, replicas: u32, spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    })
}

/// A bare pod labelled `app: name`.
pub(crate) fn pod(name: &str, ns: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": spec,
    })
}

/// `kubectl apply` of a JSON object.
pub(crate) async fn apply(c: &Cluster, object: &Value) -> Result<()> {
    c.apply(&object.to_string()).await?;
    Ok(())
}

/// The pods of `ns` matching `selector`.
pub(crate) async fn pods(c: &Cluster, ns: &str, selector: &str) -> Result<Vec<Value>> {
    let list = c
        .kubectl_json(&["-n", ns, "get", "pods", "-l", selector])
        .await?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// Whether a pod runs with every container ready and is not being deleted.
pub(crate) fn running_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["metadata"]["deletionTimestamp"].is_null()
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|c| c["ready"] == true))
}

/// Waits until exactly `n` pods of `selector` exist and all run ready; returns them.
pub(crate) async fn wait_running(
    c: &Cluster,
    ns: &str,
    selector: &str,
    n: usize,
) -> Result<Vec<Value>> {
    let last = std::sync::Mutex::new(Vec::new());
    let found = eventually(Duration::from_secs(180), POLL, "pods running", || async {
        let pods = pods(c, ns, selector).await.ok()?;
        *last.lock().unwrap() = pods.clone();
        (pods.len() == n && pods.iter().all(running_ready)).then_some(pods)
    })
    .await;
    found.with_context(|| {
        format!(
            "{n} pods {selector} in {ns} running; last seen: {}",
            summary(&last.lock().unwrap())
        )
    })
}

/// Waits until no pod of `selector` is left in the API.
pub(crate) async fn wait_no_pods(c: &Cluster, ns: &str, selector: &str) -> Result<()> {
    eventually(Duration::from_secs(120), POLL, "pods gone", || async {
        pods(c, ns, selector)
            .await
            .ok()
            .filter(|p| p.is_empty())
            .map(drop)
    })
    .await
    .with_context(|| format!("pods {selector} in {ns} deleted"))
}

/// One line per pod: name, phase, node, container states (for failure messages).
pub(crate) fn summary(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {} on {} {}",
                p["metadata"]["name"].as_str().unwrap_or("?"),
                p["status"]["phase"].as_str().unwrap_or("?"),
                p["spec"]["nodeName"].as_str().unwrap_or("-"),
                p["status"]["containerStatuses"]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The pod's name.
pub(crate) fn name(p: &Value) -> String {
    p["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The containerd id of the pod's first container (`containerd://<id>`).
pub(crate) fn container_id(p: &Value) -> Option<String> {
    p["status"]["containerStatuses"][0]["containerID"]
        .as_str()?
        .strip_prefix("containerd://")
        .map(str::to_owned)
}

/// `kubectl exec POD -- CMD…`; its stdout.
pub(crate) async fn exec(c: &Cluster, ns: &str, pod: &str, cmd: &[&str]) -> Result<String> {
    let mut args = vec!["-n", ns, "exec", pod, "--"];
    args.extend_from_slice(cmd);
    Ok(c.kubectl_ok(&args).await?)
}

/// The Node as the API server has it.
pub(crate) async fn node(c: &Cluster, name: &str) -> Result<Value> {
    Ok(c.kubectl_json(&["get", "node", name]).await?)
}

/// The status (`True`, `False`, `Unknown`) of the Node's Ready condition.
pub(crate) fn ready_status(node: &Value) -> String {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .unwrap_or("absent")
        .to_owned()
}

/// Waits until the Node's Ready condition has `status`.
pub(crate) async fn wait_ready_status(
    c: &Cluster,
    node_name: &str,
    status: &str,
    limit: Duration,
) -> Result<()> {
    eventually(limit, POLL, "node condition", || async {
        let n = node(c, node_name).await.ok()?;
        (ready_status(&n) == status).then_some(())
    })
    .await
    .with_context(|| format!("{node_name} Ready={status}"))
}

/// The counters that grow when cloudcore refuses an edge request or a stream (its error
/// replies are read from its log: [`error_replies`]): every sample of them, as a map
/// `name{labels}` → value.
pub(crate) fn refusals(m: &Metrics) -> BTreeMap<String, f64> {
    const ERRORS: &[&str] = &[
        "cloudcore_node_authorization_denied_total",
        "edgecontroller_requests_rejected_total",
        "edgecontroller_pod_status_lists_refused_total",
        "devicecontroller_requests_failed_total",
        "devicecontroller_requests_rejected_total",
        "cloudstream_requests_refused_total",
        "cloudstream_tunnels_refused_total",
        "cloudstream_tunnel_identity_refused_total",
        "cloudstream_stream_authorization_denied_total",
        "cloudstream_streams_refused_per_node_total",
        "cloudhub_token_refused_connected_total",
    ];
    let mut out = BTreeMap::new();
    for s in &m.samples {
        let dropped = s.name == "cloudhub_messages_dropped_total"
            && matches!(
                s.label("reason"),
                Some("refused" | "malformed" | "unroutable")
            );
        if ERRORS.contains(&s.name.as_str()) || dropped {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.insert(format!("{}{{{}}}", s.name, labels.join(",")), s.value);
        }
    }
    out
}

/// Fails naming every refusal counter that grew since `baseline` (empty: since cloudcore
/// started).
pub(crate) fn no_refusals_since(now: &Metrics, baseline: &BTreeMap<String, f64>) -> Result<()> {
    let grown: Vec<String> = refusals(now)
        .into_iter()
        .filter(|(k, v)| *v > baseline.get(k).copied().unwrap_or(0.0))
        .map(|(k, v)| format!("{k} {v} (was {})", baseline.get(&k).copied().unwrap_or(0.0)))
        .collect();
    ensure!(
        grown.is_empty(),
        "cloudcore refused or failed requests of the real edges: {}",
        grown.join(", ")
    );
    Ok(())
}

/// The filter local-up gives cloudcore: its edge request failures are logged at debug.
pub(crate) const LOG_LEVEL: &str = "info,edgecontroller::upstream=debug";

/// The error replies cloudcore sent to edge requests (its `request failed` log lines) other
/// than the API server's own NotFound, AlreadyExists and Conflict: a kubelet talking to the
/// API server directly gets those too (it asks for its Lease before creating it, creates its
/// Node again after a restart, updates with a stale version).
pub(crate) fn error_replies(c: &Cluster) -> Result<Vec<String>> {
    let log = std::fs::read_to_string(c.log("cloudcore"))
        .with_context(|| c.log("cloudcore").display().to_string())?;
    Ok(log
        .lines()
        .filter(|l| l.contains("request failed"))
        .filter(|l| {
            let reason = l
                .split_once("error=")
                .and_then(|(_, e)| e.split_once(' '))
                .map(|(r, _)| r);
            !matches!(reason, Some("NotFound" | "AlreadyExists" | "Conflict"))
        })
        .map(str::to_owned)
        .collect())
}

/// The edges whose edgecore died of a Go panic (not one it recovered from), with the panic
/// line and the frames below it.
pub(crate) fn edge_crashes(c: &Cluster) -> Vec<String> {
    let mut crashes = Vec::new();
    for node in c.nodes() {
        let log = std::fs::read_to_string(c.log(node)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.starts_with("panic: ") || l.starts_with("fatal error: ") {
                let frames = lines[i..lines.len().min(i + 6)].join(" | ");
                crashes.push(format!("edgecore of {node} crashed: {frames}"));
            }
        }
    }
    crashes
}

/// Everything `local-up up` made for one cluster, read from its state before `down`.
#[derive(Debug, Clone)]
pub(crate) struct Footprint {
    dir: String,
    slot: String,
    /// The machine-wide record of the host before the first cluster (sysctl lines).
    host_before: String,
}

impl Footprint {
    /// Reads the cluster's slot and the host record.
    pub(crate) fn of(c: &Cluster) -> Result<Footprint> {
        let state = std::fs::read_to_string(c.dir().join("state"))
            .with_context(|| format!("{}/state", c.dir().display()))?;
        let slot = state
            .lines()
            .find_map(|l| l.strip_prefix("slot="))
            .context("no slot in the state")?
            .to_owned();
        let host_before = std::fs::read_to_string(host_record()).unwrap_or_default();
        Ok(Footprint {
            dir: c.dir().display().to_string(),
            slot,
            host_before,
        })
    }

    /// What is left of the cluster on the host: each item names a leftover.
    pub(crate) fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let prefix = format!("lu{}-", self.slot);
        if let Ok(links) = std::fs::read_dir("/sys/class/net") {
            for l in links.flatten() {
                let name = l.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) {
                    left.push(format!("network interface {name}"));
                }
            }
        }
        let netns = format!("local-up{}-", self.slot);
        if let Ok(entries) = std::fs::read_dir("/run/netns") {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&netns) {
                    left.push(format!("network namespace {name}"));
                }
            }
        }
        if let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") {
            for c in controllers.flatten() {
                let dir = c.path().join(format!("local-up{}", self.slot));
                if dir.exists() {
                    left.push(format!("cgroup {}", dir.display()));
                }
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        for m in mounts.lines() {
            if let Some(target) = m.split(' ').nth(1)
                && target.starts_with(&format!("{}/", self.dir))
            {
                left.push(format!("mount {target}"));
            }
        }
        let nat = std::process::Command::new("iptables")
            .args(["-t", "nat", "-S"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let tag = format!("name: \\\"local-up{}\\\"", self.slot);
        for rule in nat.lines().filter(|l| l.contains(&tag)) {
            left.push(format!("iptables rule {rule}"));
        }
        for p in processes_mentioning(&self.dir) {
            left.push(format!("process {p}"));
        }
        if let Ok(links) = std::fs::read_dir("/var/log/containers") {
            for l in links.flatten() {
                let target = std::fs::read_link(l.path()).unwrap_or_default();
                if target.starts_with(&self.dir) {
                    left.push(format!("log link {}", l.path().display()));
                }
            }
        }
        left
    }

    /// When no other cluster runs on the machine, the sysctls edged changed must be back at
    /// the values the host record had; `Ok(false)` when another cluster still holds a slot
    /// (the last one down restores them).
    pub(crate) fn sysctls_restored(&self) -> Result<bool> {
        if other_slots_held(&self.slot) {
            return Ok(false);
        }
        ensure!(
            !self.host_before.is_empty(),
            "no host record was kept while the cluster ran"
        );
        ensure!(
            !host_record().exists(),
            "the host record is still there after the last cluster went down"
        );
        for line in self.host_before.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("sysctl") {
                continue;
            }
            let (Some(key), Some(before)) = (words.next(), words.next()) else {
                bail!("unreadable host record line {line:?}");
            };
            let path = Path::new("/proc/sys").join(key.replace('.', "/"));
            let now = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
            ensure!(
                now.trim() == before,
                "{key} is {} after down, was {before} before the clusters",
                now.trim()
            );
        }
        Ok(true)
    }
}

fn cache_dir() -> std::path::PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cloudcore-local-up")
}

fn host_record() -> std::path::PathBuf {
    cache_dir().join("host.orig")
}

/// Whether a local-up cluster other than slot `ours` holds its machine-wide lock.
fn other_slots_held(ours: &str) -> bool {
    (0..4).filter(|k| k.to_string() != ours).any(|k| {
        std::fs::File::options()
            .append(true)
            .open(cache_dir().join(format!("slot-{k}.lock")))
            .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
    })
}

/// `pid: argv` of every process whose command line mentions `text`.
fn processes_mentioning(text: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let argv = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            (argv.contains(text) && pid != std::process::id()).then(|| format!("{pid}: {argv}"))
        })
        .collect()
}

/// Takes the cluster down and fails naming whatever it left behind.
pub(crate) fn down_and_check(c: Cluster) -> Result<()> {
    let footprint = Footprint::of(&c)?;
    c.down()?;
    let left = footprint.leftovers();
    ensure!(left.is_empty(), "local-up down left: {}", left.join("; "));
    if !footprint.sysctls_restored()? {
        eprintln!(
            "realedge: another local-up cluster runs; the last one down restores the sysctls"
        );
    }
    Ok(())
}

/// Runs the scenario, timing it on stderr; its error is prefixed with its name.
pub(crate) async fn scenario(name: &str, f: impl Future<Output = Result<()>>) -> Result<()> {
    let began = std::time::Instant::now();
    eprintln!("realedge: {name}: started");
    let result = f.await.with_context(|| format!("scenario {name}"));
    eprintln!(
        "realedge: {name}: {} after {:.0} s",
        if result.is_ok() { "passed" } else { "FAILED" },
        began.elapsed().as_secs_f64()
    );
    result
}
