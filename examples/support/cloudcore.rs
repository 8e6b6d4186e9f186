//! cloudcore as a process for the load tools that measure it from outside (each includes this
//! file with `#[path]`; cargo does not build `examples/support/` as an example of its own): the
//! `cloudcore` example binary with an interop spec's configuration, edited by the tool.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use edgecore_interop::{CloudSpec, Process, http_get};

use crate::procstat::rss_kib;

/// Starts the cloudcore binary (`CLOUDCORE_BIN`, else the newer of `target/<profile>/cloudcore`
/// and `target/<profile>/examples/cloudcore`) with `spec`'s configuration after `edit` changed
/// it; killed (its process group) on drop.
/// Returns the process and the binary's path.
pub(crate) fn start_cloudcore(
    spec: &CloudSpec,
    log_level: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> anyhow::Result<(Process, std::path::PathBuf)> {
    let mut config: serde_json::Value = serde_saphyr::from_str(&spec.render()?)?;
    edit(&mut config);
    std::fs::create_dir_all(&spec.dir)?;
    let file = spec.config_file();
    std::fs::write(&file, serde_saphyr::to_string(&config)?)?;
    let bin = edgecore_interop::binary::cloudcore()?;
    let mut cmd = Command::new(&bin);
    cmd.arg("--config")
        .arg(&file)
        .arg("--log-level")
        .arg(log_level)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .current_dir(&spec.dir);
    Ok((Process::spawn("cloudcore", cmd, &spec.log_file())?, bin))
}

/// Waits (at most 60 s) until cloudcore answers `/readyz` with 200 and wrote its token.
pub(crate) async fn wait_ready(core: &mut Process, spec: &CloudSpec) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = core.try_wait() {
            bail!("cloudcore exited: {status}\n{}", core.log_tail(40));
        }
        let ready = http_get(spec.ports.monitor_addr(), "/readyz", Duration::from_secs(2)).await;
        if matches!(&ready, Ok(r) if r.status == 200) && spec.token_file().is_file() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("cloudcore not ready within 60 s\n{}", core.log_tail(40));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A process's RSS once it stopped moving (three reads 1 s apart within 2%), at most 15 s.
pub(crate) async fn settled_rss(pid: u32) -> u64 {
    let mut last = rss_kib(pid);
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = rss_kib(pid);
        if now.abs_diff(last) * 50 <= last {
            return now;
        }
        last = now;
    }
    last
}
