//! cloudcore as a Kubernetes component, through the binary and without a cluster: its version
//! names the build, its logs are plain or JSON lines with colour only on a terminal, it says
//! what it starts, `/metrics` exports `cloudcore_build_info`, and a failure prints its whole
//! cause chain.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cloudcore_server::build_info;
use cloudcore_server::config::CloudCoreConfig;

use crate::support::binary;

const WAIT: Duration = Duration::from_secs(30);

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("cloudcore-component-{}", beehive::new_id()));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// cloudhub alone on loopback, without Kubernetes (its records then live in memory).
fn hub_only(dir: &Path, websocket: u16, https: u16, monitor: u16) -> PathBuf {
    let mut c = CloudCoreConfig::default();
    c.kube_api_config.kube_config = dir.join("no-kubeconfig").display().to_string();
    c.common_config.monitor_server.bind_address = format!("127.0.0.1:{monitor}");
    let m = &mut c.modules;
    m.edge_controller.enable = false;
    m.device_controller.enable = false;
    m.sync_controller.enable = false;
    m.dynamic_controller.enable = false;
    m.cloud_stream.enable = false;
    let hub = &mut m.cloud_hub;
    hub.advertise_address = vec!["127.0.0.1".into()];
    hub.websocket.address = "127.0.0.1".into();
    hub.websocket.port = websocket;
    hub.https.address = "127.0.0.1".into();
    hub.https.port = https;
    hub.tls_ca_file = dir.join("ca/rootCA.crt");
    hub.tls_ca_key_file = dir.join("ca/rootCA.key");
    hub.tls_cert_file = dir.join("certs/server.crt");
    hub.tls_private_key_file = dir.join("certs/server.key");
    hub.unixsocket.enable = false;
    let path = dir.join("cloudcore.yaml");
    std::fs::write(&path, serde_saphyr::to_string(&c).expect("yaml")).expect("write config");
    path
}

/// The binary with no way to a cluster: no `KUBECONFIG`, a `HOME` without `.kube`, not in a
/// pod.
fn command(dir: &Path) -> Command {
    let mut cmd = Command::new(binary());
    cmd.env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .env("HOME", dir)
        .stdin(Stdio::null());
    cmd
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, out.split_once("\r\n\r\n")?.1.to_owned()))
}

/// A running hub-only cloudcore with its output in `out.log`, stopped on drop.
struct Running {
    child: Child,
    log: PathBuf,
    monitor: u16,
}

impl Running {
    fn start(dir: &Path, args: &[&str]) -> Running {
        let p = edgecore_interop::listen_ports(3).expect("free ports");
        let config = hub_only(dir, p[0], p[1], p[2]);
        let log = dir.join("out.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = command(dir)
            .args(args)
            .arg("--config")
            .arg(&config)
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start cloudcore");
        Running {
            child,
            log,
            monitor: p[2],
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let began = Instant::now();
        while began.elapsed() < WAIT {
            if matches!(get(self.monitor, "/readyz"), Some((200, _))) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("cloudcore exited with {status}:\n{}", self.output());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cloudcore not ready within {WAIT:?}:\n{}", self.output());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_version_names_the_commit_the_build_date_and_the_compiler() {
    let out = Command::new(binary()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, format!("cloudcore {}\n", build_info::LONG_VERSION));
    assert!(text.contains(&format!(
        "{} (git {}, built {}, rustc ",
        build_info::VERSION,
        build_info::GIT_COMMIT,
        build_info::BUILD_DATE
    )));
    // Built from a checkout: the commit is the checkout's, not `unknown`.
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(head) = head {
        assert_eq!(
            build_info::GIT_COMMIT,
            String::from_utf8_lossy(&head.stdout).trim()
        );
    }
}

#[test]
fn a_port_in_use_is_reported_with_its_cause() {
    let dir = TempDir::new();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let p = edgecore_interop::listen_ports(2).expect("free ports");
    let config = hub_only(&dir.0, port, p[0], p[1]);
    let out = command(&dir.0)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let want =
        format!("cloudcore failed: cloudhub: listener 127.0.0.1:{port}: Address already in use");
    assert!(stderr.contains(&want), "{want:?} not in:\n{stderr}");
}

#[test]
fn a_missing_kubeconfig_is_named_when_no_other_configuration_is_found() {
    let dir = TempDir::new();
    let p = edgecore_interop::listen_ports(3).expect("free ports");
    let config = hub_only(&dir.0, p[0], p[1], p[2]);
    // The edgecontroller needs the API server; `hub_only` names a kubeconfig that is not
    // there, and `command` leaves no in-cluster environment and an empty HOME.
    let yaml = std::fs::read_to_string(&config).unwrap();
    let mut c = CloudCoreConfig::from_yaml(&yaml).unwrap();
    c.modules.edge_controller.enable = true;
    std::fs::write(&config, serde_saphyr::to_string(&c).unwrap()).unwrap();
    let out = command(&dir.0)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let want = format!(
        "cloudcore failed: kubernetes client: kubeAPIConfig.kubeConfig {} does not exist, and no other configuration was found",
        c.kube_api_config.kube_config
    );
    assert!(stderr.contains(&want), "{want:?} not in:\n{stderr}");
}

#[tokio::test]
async fn json_logs_say_what_starts_and_text_logs_carry_no_colour_off_a_terminal() {
    let dir = TempDir::new();
    let mut json = Running::start(&dir.0, &["--logging-format=json"]);
    json.wait_ready().await;
    let output = json.output();
    let lines: Vec<serde_json::Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    let start = lines
        .iter()
        .find(|l| l["message"] == "starting cloudcore")
        .unwrap_or_else(|| panic!("no start line in:\n{output}"));
    assert_eq!(start["level"], "INFO");
    assert_eq!(start["version"], build_info::VERSION);
    assert_eq!(start["git_commit"], build_info::GIT_COMMIT);
    assert_eq!(start["build_date"], build_info::BUILD_DATE);
    assert_eq!(start["modules"], "cloudHub");
    assert!(lines.iter().all(|l| l["timestamp"].is_string()));

    let (status, metrics) = get(json.monitor, "/metrics").expect("metrics");
    assert_eq!(status, 200, "{metrics}");
    let info = format!(
        "cloudcore_build_info{{version=\"{}\",git_commit=\"{}\",build_date=\"{}\",rust_version=\"{}\"}} 1",
        build_info::VERSION,
        build_info::GIT_COMMIT,
        build_info::BUILD_DATE,
        build_info::RUSTC_VERSION
    );
    assert!(metrics.contains(&info), "{info} not in:\n{metrics}");
    drop(json);

    let text_dir = TempDir::new();
    let mut text = Running::start(&text_dir.0, &[]);
    text.wait_ready().await;
    let output = text.output();
    assert!(output.contains("starting cloudcore"), "{output}");
    assert!(!output.contains('\u{1b}'), "escape codes in:\n{output}");
}
