//! `kubectl` against the test API server, as a user would run it.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use crate::error::{Error, Result};

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::from(k8s_testenv::env().kubectl());
    cmd.args(args).kill_on_drop(true);
    cmd
}

/// Runs `kubectl args…`, feeding `stdin` (then closing it), and returns its output; killed
/// after `limit`.
pub async fn kubectl(args: &[&str], stdin: Option<&[u8]>, limit: Duration) -> Result<Output> {
    let what = format!("kubectl {}", args.join(" "));
    let mut cmd = command(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Error::io(&what, e))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input)
            .await
            .map_err(|e| Error::io(&what, e))?;
        drop(pipe);
    }
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => out.map_err(|e| Error::io(&what, e)),
        Err(_) => Err(Error::Timeout(what)),
    }
}

/// [`kubectl`] that must succeed; returns stdout.
pub async fn kubectl_ok(args: &[&str], stdin: Option<&[u8]>) -> Result<Vec<u8>> {
    let out = kubectl(args, stdin, Duration::from_secs(60)).await?;
    if !out.status.success() {
        return Err(Error::Process {
            what: format!("kubectl {} failed: {}", args.join(" "), out.status),
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out.stdout)
}

/// Starts `kubectl args…` with stdout piped (for `logs -f`); killed when dropped.
pub fn kubectl_spawn(args: &[&str]) -> Result<Child> {
    let what = format!("kubectl {}", args.join(" "));
    command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(&what, e))
}
