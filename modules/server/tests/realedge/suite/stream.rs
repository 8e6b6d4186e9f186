//! kubectl logs, exec, attach and port-forward against real containers, through cloudstream
//! and the edge's tunnel to its kubelet.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use local_up::{Cluster, eventually};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::{Baseline, STEADY, unique};
use crate::support::{self, POLL, apply, container, exec, pod, pod_spec};

/// `logs` returns what the container wrote; `logs -f` streams lines as they are written;
/// `logs --previous` returns the output of the container before its restart.
pub(super) async fn logs(c: &Cluster) -> Result<()> {
    let ns = support::namespace(c, &unique("logs")).await?;
    let talker = container(
        c,
        "echo line-one; echo line-two; i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done",
    );
    apply(c, &pod("talker", &ns, pod_spec(STEADY, vec![talker]))).await?;
    // Restarts after each run: its runs count in a file that outlives the container.
    let mut crasher = container(
        c,
        "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo run-$n; sleep 2; exit 7",
    );
    crasher["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    let mut spec = pod_spec(STEADY, vec![crasher]);
    spec["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    apply(c, &pod("crasher", &ns, spec)).await?;
    support::wait_running(c, &ns, "app=talker", 1).await?;

    let all = c.kubectl_ok(&["-n", &ns, "logs", "talker"]).await?;
    ensure!(
        all.starts_with("line-one\nline-two\ntick-1\n"),
        "logs {all:?}"
    );

    // -f: lines keep arriving after the command started, one a second.
    let mut follow = c.kubectl_spawn(&["-n", &ns, "logs", "-f", "--tail=1", "talker"])?;
    let stdout = follow.stdout.take().context("logs -f stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut ticks = Vec::new();
    let read = async {
        while ticks.len() < 4 {
            match lines.next_line().await? {
                Some(l) => ticks.push(l),
                None => bail!("logs -f ended after {ticks:?}"),
            }
        }
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .context("logs -f: no new lines within 30 s")??;
    let numbers: Vec<u64> = ticks
        .iter()
        .map(|t| t.strip_prefix("tick-").and_then(|n| n.parse().ok()))
        .collect::<Option<_>>()
        .with_context(|| format!("logs -f lines {ticks:?}"))?;
    ensure!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "logs -f lines out of order or missing: {ticks:?}"
    );
    let _ = follow.kill().await;

    // --previous: the last run that ended, read while the container's status stays put. The
    // kubelet answers it from the status's `lastState.terminated`: while a run is going or has
    // just ended that is the run before it (`run-<restartCount>`); while the container waits
    // out its crash back-off, the run that just ended (`run-<restartCount + 1>`). The container
    // runs for 2 s and waits 10, 20, 40, 80 s between runs, so most polls land in a wait.
    eventually(
        Duration::from_secs(120),
        POLL,
        "the previous run's logs",
        || async {
            let before = crash_status(c, &ns, "crasher").await?;
            let expected = match before.state.as_str() {
                "waiting" => before.restarts + 1,
                _ => before.restarts,
            };
            if expected == 0 {
                return None;
            }
            let previous = c
                .kubectl_ok(&["-n", &ns, "logs", "crasher", "--previous"])
                .await
                .ok()?;
            let after = crash_status(c, &ns, "crasher").await?;
            (before == after)
                .then_some(())
                .filter(|()| previous == format!("run-{expected}\n"))
        },
    )
    .await?;
    let p = c
        .kubectl_json(&["-n", &ns, "get", "pod", "crasher"])
        .await?;
    let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
    ensure!(last["exitCode"] == 7, "crasher's last state {last}");
    support::drop_namespace(c, &ns).await;
    Ok(())
}

/// What decides which run `logs --previous` shows: the restart count, the state the container
/// is in (`running`, `terminated` or `waiting`), and the container of `lastState.terminated`.
#[derive(Debug, PartialEq)]
struct CrashStatus {
    restarts: u64,
    state: String,
    last_terminated: String,
}

async fn crash_status(c: &Cluster, ns: &str, name: &str) -> Option<CrashStatus> {
    let p = c.kubectl_json(&["-n", ns, "get", "pod", name]).await.ok()?;
    let status = &p["status"]["containerStatuses"][0];
    Some(CrashStatus {
        restarts: status["restartCount"].as_u64()?,
        state: status["state"].as_object()?.keys().next()?.clone(),
        last_terminated: status["lastState"]["terminated"]["containerID"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    })
}

/// exec passes stdin through (100 KiB of it too) and the exit code back, and gives the
/// command a terminal with `-t`; attach reaches a running container's stdin and stdout;
/// port-forward is refused, as the edge cannot relay it (edgestream carries logs, exec,
/// attach and metrics only), and exec keeps working after it.
pub(super) async fn exec_attach_port_forward(c: &Cluster, baseline: &Baseline) -> Result<()> {
    let ns = support::namespace(c, &unique("exec")).await?;
    let mut listener = container(c, "echo ready; while read l; do echo got:$l; done");
    listener["stdin"] = json!(true);
    let server = container(
        c,
        "mkdir -p /www; echo pf-ok > /www/index.html; httpd -f -p 8080 -h /www",
    );
    apply(c, &pod("listener", &ns, pod_spec(STEADY, vec![listener]))).await?;
    apply(c, &pod("server", &ns, pod_spec(STEADY, vec![server]))).await?;
    support::wait_running(c, &ns, "app=listener", 1).await?;
    support::wait_running(c, &ns, "app=server", 1).await?;

    let echoed = c
        .kubectl_stdin(
            &["-n", &ns, "exec", "-i", "server", "--", "cat"],
            Some(b"some input\nwith two lines\n"),
        )
        .await?;
    ensure!(
        echoed == "some input\nwith two lines\n",
        "exec -i cat gave {echoed:?}"
    );
    let big = vec![b'x'; 100 * 1024];
    let counted = c
        .kubectl_stdin(
            &["-n", &ns, "exec", "-i", "server", "--", "wc", "-c"],
            Some(&big),
        )
        .await?;
    ensure!(counted.trim() == "102400", "exec -i wc -c gave {counted:?}");
    let out = c
        .kubectl_output(
            &["-n", &ns, "exec", "server", "--", "sh", "-c", "exit 3"],
            None,
        )
        .await?;
    ensure!(
        out.status.code() == Some(3),
        "exec exit 3 ended {}",
        out.status
    );

    // -t needs a terminal on kubectl's side: script(1) gives it one.
    let line = format!(
        "{} --kubeconfig {} -n {ns} exec -it server -- sh -c '[ -t 0 ] && tty && echo stdin-is-a-tty'",
        c.kubectl_program().display(),
        c.kubeconfig().display()
    );
    let out = tokio::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .context("exec -it did not end")?
        .context("script (util-linux) runs kubectl in a terminal")?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        text.contains("/dev/pts/") && text.contains("stdin-is-a-tty"),
        "exec -it saw no terminal: {text:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut attach = c.kubectl_spawn(&["-n", &ns, "attach", "-i", "listener", "-c", "main"])?;
    let mut stdin = attach.stdin.take().context("attach stdin")?;
    let mut stdout = attach.stdout.take().context("attach stdout")?;
    let talk = async {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // Until the answer arrives: the first line may be written before the stream is up.
        loop {
            stdin.write_all(b"hello\n").await?;
            let n = tokio::time::timeout(Duration::from_secs(2), stdout.read(&mut buf)).await;
            if let Ok(n) = n {
                let n = n?;
                ensure!(n > 0, "attach ended: {}", String::from_utf8_lossy(&seen));
                seen.extend_from_slice(&buf[..n]);
            }
            if String::from_utf8_lossy(&seen).contains("got:hello") {
                return Ok(());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), talk)
        .await
        .context("attach: no answer within 60 s")??;
    let _ = attach.kill().await;

    const REFUSED: &str = "cloudstream_requests_refused_total";
    let refused_before = c.metrics().await?.sum(REFUSED);
    let args = ["-n", &ns, "port-forward", "pod/server", ":8080"];
    let out = tokio::time::timeout(Duration::from_secs(60), c.kubectl_output(&args, None))
        .await
        .context("port-forward neither forwarded nor failed within 60 s")??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains("error upgrading connection"),
        "port-forward: expected the upgrade to be refused, got {}: {stderr}",
        out.status
    );
    // Refused by cloudstream's stream server (404: no such kubelet path through the tunnel),
    // once per protocol kubectl tries; expected, so not counted against the run.
    let refused = c.metrics().await?.sum(REFUSED) - refused_before;
    ensure!(
        refused >= 1.0,
        "port-forward did not reach cloudstream's stream server"
    );
    baseline.expect(&format!("{REFUSED}{{}}"), refused);
    let after = exec(
        c,
        &ns,
        "server",
        &["wget", "-qO-", "http://127.0.0.1:8080/"],
    )
    .await?;
    ensure!(after == "pf-ok\n", "exec after port-forward: {after:?}");
    support::drop_namespace(c, &ns).await;
    Ok(())
}
