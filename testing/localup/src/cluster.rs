//! Starting, operating and taking down one cluster through `scripts/local-up`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};

/// `scripts/local-up` in this checkout.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/local-up")
}

/// How to start a cluster: `scripts/local-up up` with these options. The cluster goes down
/// when the [`Cluster`] is dropped, and when the owner process exits (by default the calling
/// process), whichever comes first, so a test that panics or is killed leaves nothing behind.
#[derive(Debug, Clone)]
pub struct LocalUp {
    edges: usize,
    impersonate: bool,
    dir: Option<PathBuf>,
    owner: u32,
    cloudcore: Option<PathBuf>,
    log_level: Option<String>,
    go: bool,
    require_authorization: bool,
}

impl Default for LocalUp {
    fn default() -> Self {
        LocalUp {
            edges: 1,
            impersonate: false,
            dir: None,
            owner: std::process::id(),
            cloudcore: None,
            log_level: None,
            go: false,
            require_authorization: false,
        }
    }
}

impl LocalUp {
    /// One edge, KubeEdge's default authorization (off), a fresh folder under the temp dir.
    pub fn new() -> Self {
        LocalUp::default()
    }

    /// `--edges n`: nodes `edge-node-1` … `edge-node-n`.
    pub fn edges(mut self, n: usize) -> Self {
        self.edges = n;
        self
    }

    /// `--impersonate`: cloudcore with `authorization.enable: true, debug: false`.
    pub fn impersonate(mut self, on: bool) -> Self {
        self.impersonate = on;
        self
    }

    /// `--dir`: the cluster's folder (default: a new one under the temp dir).
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// `--owner-pid`: the process whose exit takes the cluster down (default: this one).
    pub fn owner_pid(mut self, pid: u32) -> Self {
        self.owner = pid;
        self
    }

    /// The cloudcore binary (`CLOUDCORE_BIN`); default: `CLOUDCORE_BIN` or
    /// `CARGO_BIN_EXE_cloudcore` when set, else the newest build beside the running
    /// executable (as the edgecore harness finds it), else local-up builds one.
    pub fn cloudcore(mut self, bin: impl Into<PathBuf>) -> Self {
        self.cloudcore = Some(bin.into());
        self
    }

    /// cloudcore's `--log-level` (`LOCALUP_LOG_LEVEL`, a tracing filter such as
    /// `info,edgecontroller::upstream=debug`); kept for restarts.
    pub fn log_level(mut self, filter: impl Into<String>) -> Self {
        self.log_level = Some(filter.into());
        self
    }

    /// `--require-authorization`: KubeEdge's `featureGates.requireAuthorization` on cloudcore
    /// and every edge. Each edge's metaServer requests a kubelet-serving certificate (a CSR
    /// through cloudcore), cloudcore's CSR approver approves it, kube-controller-manager signs
    /// it, and the metaServer serves HTTPS with it on the edge's `127.0.0.1:10550`.
    pub fn require_authorization(mut self, on: bool) -> Self {
        self.require_authorization = on;
        self
    }

    /// `--cloud go`: KubeEdge's own cloudcore instead of ours (side-by-side measurements;
    /// local-up finds it as `CLOUDCORE_GO_BIN`, `CLOUDCORE_GO_XZ` or the peer archive).
    pub fn kubeedge_cloudcore(mut self, on: bool) -> Self {
        self.go = on;
        self
    }

    /// Runs `local-up up` and waits for it (every edge Node Ready, about 40 s; longer when the
    /// control plane or cloudcore must be built first).
    ///
    /// # Errors
    /// [`Error::Script`] with local-up's stderr (a missing prerequisite names its package).
    pub fn start(self) -> Result<Cluster> {
        let dir = self.dir.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("local-up-{}-{}", std::process::id(), unique()))
        });
        let mut cmd = Command::new(script());
        cmd.arg("up")
            .arg("--edges")
            .arg(self.edges.to_string())
            .arg("--dir")
            .arg(&dir)
            .arg("--owner-pid")
            .arg(self.owner.to_string());
        if self.impersonate {
            cmd.arg("--impersonate");
        }
        if self.go {
            cmd.args(["--cloud", "go"]);
        }
        if self.require_authorization {
            cmd.arg("--require-authorization");
        }
        let cloudcore = self.cloudcore.or_else(|| {
            std::env::var_os("CLOUDCORE_BIN")
                .or_else(|| std::env::var_os("CARGO_BIN_EXE_cloudcore"))
                .map(PathBuf::from)
                .or_else(|| edgecore_interop::binary::cloudcore().ok())
        });
        if let Some(bin) = cloudcore.filter(|_| !self.go) {
            cmd.env("CLOUDCORE_BIN", bin);
        }
        if let Some(filter) = &self.log_level {
            cmd.env("LOCALUP_LOG_LEVEL", filter);
        }
        let what = format!("{cmd:?}");
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io(&what, e))?;
        if !out.status.success() {
            return Err(script_error(what, &out));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = |key: &'static str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_owned)
                .ok_or(Error::MissingLine(key))
        };
        let monitor = line("MONITOR")?;
        let monitor = monitor
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| Error::Parse {
                what: "MONITOR".into(),
                message: format!("not http://<ip>:<port>: {monitor}"),
            })?;
        Ok(Cluster {
            kubeconfig: PathBuf::from(line("KUBECONFIG")?),
            nodes: line("NODES")?.split(',').map(str::to_owned).collect(),
            image: line("IMAGE")?,
            monitor,
            dir: PathBuf::from(line("DIR")?),
            kubectl: kubectl_path(),
            down_on_drop: true,
        })
    }
}

fn unique() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn script_error(command: String, out: &Output) -> Error {
    Error::Script {
        command,
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The kubectl local-up uses: the one on PATH, else the one `scripts/k8s-testenv build` made.
fn kubectl_path() -> PathBuf {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-testenv"))
        .arg("kubectl-path")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// A running cluster: what `local-up up` printed, and its operations. Dropping it runs
/// `local-up down` (unless [`Cluster::keep`] was called).
#[derive(Debug)]
pub struct Cluster {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) nodes: Vec<String>,
    pub(crate) image: String,
    pub(crate) monitor: std::net::SocketAddr,
    pub(crate) dir: PathBuf,
    pub(crate) kubectl: PathBuf,
    down_on_drop: bool,
}

impl Cluster {
    /// The admin kubeconfig (`KUBECONFIG=`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The edge node names (`NODES=`), in order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The workload image (`IMAGE=`): use with `imagePullPolicy: Never`.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// cloudcore's monitor server (`MONITOR=`): `/metrics`, `/readyz`.
    pub fn monitor(&self) -> std::net::SocketAddr {
        self.monitor
    }

    /// The cluster's folder (`DIR=`): `logs/` stays after down.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kubectl program the cluster is driven with (`kubectl` on PATH, else the one
    /// `scripts/k8s-testenv build` made).
    pub fn kubectl_program(&self) -> &Path {
        &self.kubectl
    }

    /// The log of a component (`cloudcore`, an edge node name, `containerd-<node>`).
    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Leaves the cluster running when dropped (the owner process's exit still ends it).
    pub fn keep(mut self) -> Self {
        self.down_on_drop = false;
        self
    }

    /// `local-up ARGS… --dir DIR`, waiting at most `limit`; returns stdout.
    ///
    /// # Errors
    /// [`Error::Script`] with its stderr, [`Error::Timeout`].
    pub async fn run(&self, args: &[&str], limit: Duration) -> Result<String> {
        let mut cmd = tokio::process::Command::new(script());
        cmd.args(args)
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let what = format!("local-up {} --dir {}", args.join(" "), self.dir.display());
        let out = match tokio::time::timeout(limit, cmd.output()).await {
            Ok(out) => out.map_err(|e| Error::io(&what, e))?,
            Err(_) => return Err(Error::Timeout(what)),
        };
        if !out.status.success() {
            return Err(script_error(what, &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `local-up stop NAME`: SIGTERM to `cloudcore` or an edge node's edgecore (its pods keep
    /// running).
    ///
    /// # Errors
    /// As [`Cluster::run`].
    pub async fn stop(&self, name: &str) -> Result<()> {
        self.run(&["stop", name], Duration::from_secs(30))
            .await
            .map(drop)
    }

    /// `local-up kill NAME`: SIGKILL, as a crash.
    ///
    /// # Errors
    /// As [`Cluster::run`].
    pub async fn kill(&self, name: &str) -> Result<()> {
        self.run(&["kill", name], Duration::from_secs(30))
            .await
            .map(drop)
    }

    /// `local-up start NAME`: starts it again with its configuration; for cloudcore, returns
    /// once `/readyz` answers.
    ///
    /// # Errors
    /// As [`Cluster::run`].
    pub async fn start(&self, name: &str) -> Result<()> {
        self.run(&["start", name], Duration::from_secs(90))
            .await
            .map(drop)
    }

    /// `local-up disconnect NODE`: the edge loses its network to the cloud.
    ///
    /// # Errors
    /// As [`Cluster::run`].
    pub async fn disconnect(&self, node: &str) -> Result<()> {
        self.run(&["disconnect", node], Duration::from_secs(30))
            .await
            .map(drop)
    }

    /// `local-up reconnect NODE`.
    ///
    /// # Errors
    /// As [`Cluster::run`].
    pub async fn reconnect(&self, node: &str) -> Result<()> {
        self.run(&["reconnect", node], Duration::from_secs(30))
            .await
            .map(drop)
    }

    /// `ctr ARGS…` against `node`'s containerd (namespace `k8s.io`); returns stdout.
    ///
    /// # Errors
    /// As [`Cluster::run`].
    pub async fn ctr(&self, node: &str, args: &[&str]) -> Result<String> {
        self.on_edge("ctr", node, args).await
    }

    /// `ARGS…` run in `node`'s network namespace, where its edged and metaServer listen on
    /// `127.0.0.1` (`local-up netns`); returns stdout.
    ///
    /// # Errors
    /// As [`Cluster::run`]; [`Error::Script`] when the command fails.
    pub async fn netns(&self, node: &str, args: &[&str]) -> Result<String> {
        self.on_edge("netns", node, args).await
    }

    /// `local-up VERB NODE --dir DIR -- ARGS…`, for at most 30 s; its stdout.
    async fn on_edge(&self, verb: &str, node: &str, args: &[&str]) -> Result<String> {
        let mut all = vec![verb, node, "--dir"];
        let dir = self.dir.display().to_string();
        all.push(&dir);
        all.push("--");
        all.extend_from_slice(args);
        let mut cmd = tokio::process::Command::new(script());
        cmd.args(&all).stdin(Stdio::null()).kill_on_drop(true);
        let what = format!("local-up {}", all.join(" "));
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .map_err(|_| Error::Timeout(what.clone()))?
            .map_err(|e| Error::io(&what, e))?;
        if !out.status.success() {
            return Err(script_error(what, &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The containers (sandboxes included) `node`'s containerd holds for pods of namespace
    /// `ns`: their ids.
    ///
    /// # Errors
    /// As [`Cluster::ctr`].
    pub async fn containers(&self, node: &str, ns: &str) -> Result<Vec<String>> {
        let filter = format!("labels.\"io.kubernetes.pod.namespace\"=={ns}");
        let out = self.ctr(node, &["containers", "ls", "-q", &filter]).await?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// The running tasks of `node`'s containerd: their container ids.
    ///
    /// # Errors
    /// As [`Cluster::ctr`].
    pub async fn running_tasks(&self, node: &str) -> Result<Vec<String>> {
        let out = self.ctr(node, &["tasks", "ls"]).await?;
        Ok(out
            .lines()
            .skip(1)
            .filter(|l| l.split_whitespace().nth(2) == Some("RUNNING"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect())
    }

    /// `local-up down` now; the error says what it could not do.
    ///
    /// # Errors
    /// [`Error::Script`].
    pub fn down(mut self) -> Result<()> {
        self.down_on_drop = false;
        down(&self.dir)
    }
}

fn down(dir: &Path) -> Result<()> {
    let mut cmd = Command::new(script());
    cmd.arg("down").arg("--dir").arg(dir).stdin(Stdio::null());
    let what = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::io(&what, e))?;
    if !out.status.success() {
        return Err(script_error(what, &out));
    }
    Ok(())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.down_on_drop
            && let Err(e) = down(&self.dir)
        {
            eprintln!("local-up: {e}");
        }
    }
}
