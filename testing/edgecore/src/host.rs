//! An edge host in a box: containerd and a real edgecore (edged off, taskManager on) in mount
//! and PID namespaces of their own, so that what node jobs do to "the host" stays inside.
//!
//! ```text
//! unshare --mount --pid --fork --mount-proc   (PID 1: a shell that keeps the namespace)
//!   overlays: /etc, /usr/local, /var/log → writes land in <dir>/upper/…, the real ones untouched
//!   containerd  (root, state, socket under <dir>/containerd; registries on loopback over HTTP)
//!   edgecore --config /etc/kubeedge/config/edgecore.yaml  (a copy of /usr/local/bin/edgecore)
//! ```
//!
//! KubeEdge's edge is laid out this way on a real host, and its node jobs rely on it: an
//! upgrade copies `keadm` out of the installation-package image into `/usr/local/bin` (through
//! a privileged CRI container, so containerd must see the same `/usr/local/bin`), `keadm
//! backup` reads `/etc/kubeedge/config/edgecore.yaml`, and `keadm upgrade` stops edgecore with
//! `pkill edgecore` and starts `/usr/local/bin/edgecore` in the background (without systemd; a
//! `/run/systemd` is hidden). In the PID namespace that `pkill` reaches only this edgecore.
//! The kernel ends every process of the box when the harness kills its first process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::binary;
use crate::edge::{EdgeConfig, EdgeHome};
use crate::error::{Error, Result};
use crate::process::Process;
use crate::store::EdgeStore;
use crate::tools::{require, run};

/// What goes into an [`EdgeHost`].
#[derive(Debug, Clone)]
pub struct EdgeHostSpec {
    /// The edge's configuration (node, token, cloud addresses); the host sets the CRI
    /// endpoint and turns the taskManager on.
    pub config: EdgeConfig,
    /// Registries containerd pulls from over plain HTTP.
    pub registries: Vec<SocketAddr>,
    /// containerd's pod sandbox ("pause") image, pulled when a job needs a container.
    pub sandbox_image: String,
    /// Installs keadm at `/usr/local/bin/keadm` before the start (a KubeEdge edge host has it;
    /// an upgrade replaces it from its image).
    pub keadm: bool,
}

/// A running edge host; killed (with everything in it) on drop.
#[derive(Debug)]
pub struct EdgeHost {
    dir: PathBuf,
    home: EdgeHome,
    process: Process,
    node: String,
}

/// Folders of the host system the box overlays, and where their writes land.
const OVERLAYS: [(&str, &str); 3] = [
    ("/etc", "etc"),
    ("/usr/local", "usr-local"),
    ("/var/log", "var-log"),
];

fn short() -> String {
    format!("{:x}", crate::edge::unique() & 0xffff_ffff)
}

impl EdgeHost {
    /// Builds the box in a fresh folder and starts it; returns once edgecore runs.
    ///
    /// # Errors
    /// [`Error::ToolMissing`] for `unshare`, `containerd`, `ctr` or `runc`; the binaries'
    /// errors; [`Error::Process`] with the log when containerd or edgecore does not start.
    pub async fn start(spec: &EdgeHostSpec) -> Result<EdgeHost> {
        require(
            "unshare",
            "util-linux",
            "to give the edge host its own namespaces",
        )?;
        require(
            "containerd",
            "containerd",
            "as the edge's container runtime",
        )?;
        require("ctr", "containerd", "to list the images the edge pulled")?;
        require("runc", "runc", "as containerd's runtime")?;
        let node = spec.config.node.clone();
        // Short: the containerd socket path must fit a unix socket address (108 bytes).
        let dir = std::env::temp_dir().join(format!("eh-{}", short()));
        for (_, upper) in OVERLAYS {
            for d in ["upper", "work"] {
                let p = dir.join(d).join(upper);
                std::fs::create_dir_all(&p).map_err(|e| Error::io(&p, e))?;
            }
        }
        let ctrd = dir.join("containerd");
        for d in ["cni", "certs.d"] {
            std::fs::create_dir_all(ctrd.join(d)).map_err(|e| Error::io(ctrd.join(d), e))?;
        }
        let socket = ctrd.join("containerd.sock");
        write(&ctrd.join("config.toml"), &containerd_config(&ctrd, spec))?;
        for r in &spec.registries {
            let d = ctrd.join("certs.d").join(r.to_string());
            std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
            write(
                &d.join("hosts.toml"),
                &format!(
                    "server = \"http://{r}\"\n[host.\"http://{r}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
                ),
            )?;
        }
        // What the host has before the box starts: edgecore (and keadm) in /usr/local/bin,
        // its config in /etc/kubeedge/config.
        let bin = dir.join("upper/usr-local/bin");
        std::fs::create_dir_all(&bin).map_err(|e| Error::io(&bin, e))?;
        copy_exe(&binary::edgecore()?, &bin.join("edgecore"))?;
        // The first edgecore runs from a copy of its own: keadm stops it with `pkill`, which
        // does not wait, and then overwrites /usr/local/bin/edgecore, which would still be
        // busy (ETXTBSY) if the dying process ran from it. A host with systemd waits in
        // `systemctl stop` instead.
        let running = dir.join("bin");
        std::fs::create_dir_all(&running).map_err(|e| Error::io(&running, e))?;
        copy_exe(&binary::edgecore()?, &running.join("edgecore"))?;
        if spec.keadm {
            copy_exe(&binary::keadm()?, &bin.join("keadm"))?;
        }
        let home = EdgeHome::new(&node)?;
        let mut config = spec.config.clone();
        config.task_manager = true;
        config.container_runtime_endpoint = Some(format!("unix://{}", socket.display()));
        let text = config.render(&binary::config_template()?, home.path())?;
        let mut doc: serde_json::Value =
            serde_saphyr::from_str(&text).map_err(|e| Error::Config(e.to_string()))?;
        doc["modules"]["edged"]["tailoredKubeletConfig"]["cgroupDriver"] = "cgroupfs".into();
        let text = serde_saphyr::to_string(&doc).map_err(|e| Error::Config(e.to_string()))?;
        let cfg = dir.join("upper/etc/kubeedge/config");
        std::fs::create_dir_all(&cfg).map_err(|e| Error::io(&cfg, e))?;
        write(&cfg.join("edgecore.yaml"), &text)?;
        write(&dir.join("box.sh"), &script(&dir, &socket))?;
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
        ])
        .arg(dir.join("box.sh"));
        let mut process = Process::spawn("edge host", cmd, &dir.join("box.log"))?;
        let host = loop {
            if let Some(status) = process.try_wait() {
                return Err(Error::Process {
                    what: format!("the edge host of {node} ended: {status}"),
                    log: format!(
                        "{}\n--- containerd ---\n{}",
                        process.log_tail(20),
                        crate::process::tail(&dir.join("containerd.log"), 20)
                    ),
                });
            }
            if process.log().contains("edgecore started") {
                break EdgeHost {
                    dir,
                    home,
                    process,
                    node,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        Ok(host)
    }

    /// The node name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The box's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a file the box wrote under `/etc`, `/usr/local` or `/var/log` is, seen from
    /// outside (`None` for any other path).
    pub fn written(&self, path: &str) -> Option<PathBuf> {
        OVERLAYS.iter().find_map(|(root, upper)| {
            let rest = path.strip_prefix(root)?.strip_prefix('/')?;
            Some(self.dir.join("upper").join(upper).join(rest))
        })
    }

    /// containerd's socket.
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    /// The images in the edge's containerd (CRI namespace `k8s.io`), by reference.
    pub fn images(&self) -> Result<Vec<String>> {
        let mut c = Command::new("ctr");
        c.arg("-a")
            .arg(self.containerd_socket())
            .args(["-n", "k8s.io", "images", "ls", "-q"]);
        let out = run(c)?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect())
    }

    /// edgecore's store.
    pub fn store(&self) -> EdgeStore {
        EdgeStore::new(&self.home.database())
    }

    /// The logs of the edgecore the box started and of one keadm started (appended).
    pub fn edgecore_log(&self) -> String {
        let mut log = std::fs::read_to_string(self.dir.join("edgecore.log")).unwrap_or_default();
        if let Some(p) = self.written("/var/log/kubeedge/edgecore.log") {
            log += &std::fs::read_to_string(p).unwrap_or_default();
        }
        log
    }

    /// Fails when the box has ended.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.process.try_wait() {
            Some(status) => Err(Error::Process {
                what: format!("the edge host of {} ended: {status}", self.node),
                log: self.process.log_tail(20),
            }),
            None => Ok(()),
        }
    }

    /// Waits until `check` holds for the edgecore log, at most `limit`.
    pub async fn wait_log(
        &mut self,
        limit: Duration,
        what: &str,
        check: impl Fn(&str) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            self.check_alive()?;
            if check(&self.edgecore_log()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!("{}: {what}", self.node)));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for EdgeHost {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        self.process.kill();
        if panicking || std::env::var_os("INTEROP_KEEP").is_some() {
            self.home.keep();
            eprintln!(
                "--- edge host {} kept: {} ---\n{}\n--- end ---",
                self.node,
                self.dir.display(),
                tail_text(&self.edgecore_log(), 40)
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn tail_text(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

fn copy_exe(src: &Path, dest: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // A copy, never a link: an upgrade overwrites /usr/local/bin/edgecore in place.
    std::fs::copy(src, dest).map_err(|e| Error::io(src, e))?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(dest, e))
}

fn containerd_config(d: &Path, spec: &EdgeHostSpec) -> String {
    let d = d.display();
    let sandbox = &spec.sandbox_image;
    format!(
        r#"# Written by the edge host harness: every path under {d}, never the machine's containerd.
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  # Lowering oom_score_adj needs CAP_SYS_RESOURCE, which root may lack here.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "{d}/runc"
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#
    )
}

fn script(dir: &Path, socket: &Path) -> String {
    let d = dir.display();
    let s = socket.display();
    let mut mounts = String::new();
    for (root, upper) in OVERLAYS {
        mounts += &format!(
            "mount -t overlay overlay -o lowerdir={root},upperdir={d}/upper/{upper},workdir={d}/work/{upper} {root}\n"
        );
    }
    format!(
        r#"# PID 1 of the edge host box (see testing/edgecore/src/host.rs).
set -eu
{mounts}# keadm starts edgecore through systemd when it sees one; here it is a background process.
# keadm decides by `file /sbin/init` succeeding, which it does wherever `file` is installed,
# so `file` here fails, and /run/systemd (its other sign) is hidden.
mkdir -p {d}/nosystemd
printf '#!/bin/sh\nexit 1\n' >{d}/nosystemd/file
chmod +x {d}/nosystemd/file
export PATH="{d}/nosystemd:$PATH"
if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; fi
mkdir -p /var/log/kubeedge /etc/kubeedge/config
containerd --config {d}/containerd/config.toml >>{d}/containerd.log 2>&1 &
i=0
until ctr -a {s} version >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -gt 240 ]; then echo "containerd did not answer within 60 s"; exit 1; fi
  sleep 0.25
done
echo "containerd ready"
CHECK_EDGECORE_ENVIRONMENT=false {d}/bin/edgecore --config /etc/kubeedge/config/edgecore.yaml --v=4 >>{d}/edgecore.log 2>&1 &
echo "edgecore started"
# Stays, so the namespace does, when keadm stops and restarts edgecore; reaps orphans.
while :; do wait || true; sleep 1; done
"#
    )
}
