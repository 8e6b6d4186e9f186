//! `kubectl` against a cluster, as a user runs it.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// How long one kubectl call may take before it counts as hung.
const LIMIT: Duration = Duration::from_secs(120);

impl Cluster {
    /// `kubectl --kubeconfig <admin>` with `args`, killed when dropped.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl, feeding `stdin` (then closing it); its output whatever its exit status.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot run, [`Error::Timeout`] after two minutes.
    pub async fn kubectl_output(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Output> {
        let what = format!("kubectl {}", args.join(" "));
        let mut child = self
            .kubectl(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(&what, e))?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input)
                .await
                .map_err(|e| Error::io(&what, e))?;
        }
        match tokio::time::timeout(LIMIT, child.wait_with_output()).await {
            Ok(out) => out.map_err(|e| Error::io(&what, e)),
            Err(_) => Err(Error::Timeout(what)),
        }
    }

    /// Runs kubectl, which must succeed; its stdout.
    ///
    /// # Errors
    /// [`Error::Kubectl`] with its stderr, or as [`Cluster::kubectl_output`].
    pub async fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        self.kubectl_stdin(args, None).await
    }

    /// [`Cluster::kubectl_ok`] with `stdin`.
    ///
    /// # Errors
    /// As [`Cluster::kubectl_ok`].
    pub async fn kubectl_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<String> {
        let out = self.kubectl_output(args, stdin).await?;
        if !out.status.success() {
            return Err(Error::Kubectl {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl ARGS… -o json`, parsed.
    ///
    /// # Errors
    /// As [`Cluster::kubectl_ok`], or [`Error::Parse`].
    pub async fn kubectl_json(&self, args: &[&str]) -> Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl_ok(&all).await?;
        serde_json::from_str(&text).map_err(|e| Error::Parse {
            what: format!("kubectl {}", all.join(" ")),
            message: e.to_string(),
        })
    }

    /// `kubectl apply -f -` of `yaml` (one or more documents).
    ///
    /// # Errors
    /// As [`Cluster::kubectl_ok`].
    pub async fn apply(&self, yaml: &str) -> Result<()> {
        self.kubectl_stdin(&["apply", "-f", "-"], Some(yaml.as_bytes()))
            .await
            .map(drop)
    }

    /// Starts kubectl with stdin, stdout and stderr piped (`logs -f`, `attach`,
    /// `port-forward`); killed when dropped.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn kubectl_spawn(&self, args: &[&str]) -> Result<Child> {
        let what = format!("kubectl {}", args.join(" "));
        self.kubectl(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(&what, e))
    }
}

/// Polls `check` every `every` until it returns `Some`, for at most `limit` (each kubectl call
/// costs a process start, so not in a tight loop).
///
/// # Errors
/// [`Error::Timeout`] naming `what`.
pub async fn eventually<T, F, Fut>(
    limit: Duration,
    every: Duration,
    what: &str,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout(format!("{what} (waited {limit:?})")));
        }
        tokio::time::sleep(every).await;
    }
}
