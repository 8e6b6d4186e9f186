//! `scripts/local-up` itself: a missing prerequisite stops it at once with the package to
//! install; when the owner process exits, everything goes and the host is as it was.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use local_up::{LocalUp, eventually, script};

use crate::support::{self, Footprint, POLL};

/// A folder of links to every program on PATH except `hidden`.
fn path_without(hidden: &str, root: &Path) -> Result<PathBuf> {
    let bin = root.join(format!("without-{hidden}"));
    std::fs::create_dir_all(&bin)?;
    let path = std::env::var("PATH").unwrap_or_default();
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let link = bin.join(&name);
            if name != hidden && !link.exists() {
                std::os::unix::fs::symlink(e.path(), &link)?;
            }
        }
    }
    Ok(bin)
}

/// Runs `local-up up` as `cmd` sets it up; returns its exit status and stderr once it ends
/// (within 30 s: a missing prerequisite must not hang).
fn refused(mut cmd: Command, dir: &Path) -> Result<(bool, String)> {
    cmd.arg("up").arg("--dir").arg(dir).stdin(Stdio::null());
    let began = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .context("stderr")?
                .read_to_string(&mut err)?;
            return Ok((status.success(), err));
        }
        if began.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            anyhow::bail!("local-up up still runs after 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_missing_prerequisite_stops_up_and_names_its_package() {
    test_tiers::require!(Root);
    let root = std::env::temp_dir().join(format!("local-up-prereq-{}", std::process::id()));
    let dir = root.join("cluster");
    for (program, package) in [
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("umoci", "umoci"),
        ("nsenter", "util-linux"),
        ("ip", "iproute2"),
        ("iptables", "iptables"),
    ] {
        let bin = path_without(program, &root).unwrap();
        let mut cmd = Command::new(script());
        cmd.env("PATH", &bin);
        let (ok, err) = refused(cmd, &dir).unwrap();
        assert!(!ok, "up succeeded without {program}");
        assert!(
            err.contains(&format!(
                "{program} is not installed (apt-get install {package})"
            )),
            "without {program}: {err}"
        );
    }
    let mut cmd = Command::new(script());
    cmd.env("EDGECORE_BIN", root.join("no-such-edgecore"));
    let (ok, err) = refused(cmd, &dir).unwrap();
    assert!(
        !ok && err.contains("EDGECORE_BIN="),
        "with a missing EDGECORE_BIN: {err}"
    );
    // Not root: setpriv (util-linux) runs it as nobody, from a copy nobody can read.
    let copy = root.join("local-up");
    std::fs::copy(script(), &copy).unwrap();
    for d in [&root, &copy] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&copy);
    let (ok, err) = refused(cmd, &dir).unwrap();
    assert!(!ok && err.contains("must run as root"), "as nobody: {err}");
    // Nothing was started: no slot taken, no state written.
    assert!(!dir.join("state").exists(), "state written by a refused up");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn when_the_owner_exits_down_leaves_the_host_as_it_was() {
    test_tiers::require!(ApiServer, Root, Edgecore);
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    let cluster = LocalUp::new()
        .owner_pid(owner.id())
        .start()
        .unwrap_or_else(|e| panic!("{e}"))
        .keep();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = cluster.nodes()[0].clone();
    // A pod makes everything down must undo: its network (bridge, NAT rules), mounts,
    // cgroups, containers.
    rt.block_on(async {
        let ns = support::namespace(&cluster, "residue").await?;
        let spec = support::pod_spec(
            &node,
            vec![support::container(&cluster, "while true; do sleep 1; done")],
        );
        support::apply(&cluster, &support::pod("p", &ns, spec)).await?;
        support::wait_running(&cluster, &ns, "app=p", 1).await?;
        let tasks = cluster.running_tasks(&node).await?;
        ensure!(tasks.len() == 2, "pause and workload running: {tasks:?}");
        Ok::<_, anyhow::Error>(())
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    let footprint = Footprint::of(&cluster).unwrap();
    assert!(
        !footprint.leftovers().is_empty(),
        "a running cluster shows no footprint"
    );

    owner.kill().unwrap();
    owner.wait().unwrap();
    let state = cluster.dir().join("state");
    rt.block_on(eventually(
        Duration::from_secs(120),
        POLL,
        "down after the owner exit",
        || async { (!state.exists()).then_some(()) },
    ))
    .unwrap_or_else(|e| {
        panic!(
            "{e}: {}",
            std::fs::read_to_string(cluster.log("watchdog")).unwrap_or_default()
        )
    });
    // The state goes last but the watchdog running down (its command line names the folder)
    // ends a moment later.
    rt.block_on(eventually(
        Duration::from_secs(30),
        POLL,
        "nothing left",
        || async { footprint.leftovers().is_empty().then_some(()) },
    ))
    .unwrap_or_else(|_| panic!("down left: {}", footprint.leftovers().join("; ")));
    if !footprint.sysctls_restored().unwrap() {
        eprintln!(
            "realedge: another local-up cluster runs; the last one down restores the sysctls"
        );
    }
    let status = Command::new(script())
        .args(["status", "--dir"])
        .arg(cluster.dir())
        .output()
        .unwrap();
    assert!(
        !status.status.success(),
        "status after down: {}",
        String::from_utf8_lossy(&status.stdout)
    );
}
