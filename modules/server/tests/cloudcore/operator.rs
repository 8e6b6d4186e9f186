//! What a KubeEdge operator does on day one, through the binary: klog's `-v`/`--v=N`, settings
//! that load but do nothing are named in one warning each, the edge's `k8s/ca.crt` query gets
//! the CA of the API server cloudcore talks to, a PKCS#8 server key works for the hub and the
//! tunnel, and a tunnel certificate without its key is refused naming the setting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use beehive::Message;
use cloudcore_server::config::CloudCoreConfig;
use edge::hub::{HubClient, HubClientConfig, HubEvent};

use crate::support::binary;

const WAIT: Duration = Duration::from_secs(30);

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("cloudcore-op-{}", beehive::new_id()));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Free ports: websocket, https, tunnel, stream, monitor.
fn ports() -> Vec<u16> {
    edgecore_interop::listen_ports(5).expect("free ports")
}

/// The test configuration: the test API server, loopback listeners, certificates under `dir`,
/// cloudstream on with the test environment's stream certificate and no tunnel files.
fn config(dir: &Path, p: &[u16], adjust: impl FnOnce(&mut CloudCoreConfig)) -> PathBuf {
    let env = k8s_testenv::env();
    let pki = env.pki();
    let mut c = CloudCoreConfig::default();
    c.kube_api_config.kube_config = env.kubeconfig().display().to_string();
    c.common_config.monitor_server.bind_address = format!("127.0.0.1:{}", p[4]);
    c.replicas.address = crate::support::replica_address();
    let hub = &mut c.modules.cloud_hub;
    hub.advertise_address = vec!["127.0.0.1".into()];
    hub.websocket.address = "127.0.0.1".into();
    hub.websocket.port = p[0];
    hub.https.address = "127.0.0.1".into();
    hub.https.port = p[1];
    hub.tls_ca_file = dir.join("ca/rootCA.crt");
    hub.tls_ca_key_file = dir.join("ca/rootCA.key");
    hub.tls_cert_file = dir.join("certs/server.crt");
    hub.tls_private_key_file = dir.join("certs/server.key");
    hub.unixsocket.enable = false;
    let s = &mut c.modules.cloud_stream;
    s.enable = true;
    s.tunnel_port = u32::from(p[2]);
    s.stream_port = u32::from(p[3]);
    let none = dir.join("none").display().to_string();
    s.tls_tunnel_ca_file = none.clone();
    s.tls_tunnel_cert_file = none.clone();
    s.tls_tunnel_private_key_file = none;
    s.tls_stream_ca_file = pki.join("ca.crt").display().to_string();
    s.tls_stream_cert_file = pki.join("stream.crt").display().to_string();
    s.tls_stream_private_key_file = pki.join("stream.key").display().to_string();
    c.modules.iptables_manager.enable = false;
    adjust(&mut c);
    let path = dir.join("cloudcore.yaml");
    std::fs::write(&path, serde_saphyr::to_string(&c).expect("yaml")).expect("write config");
    path
}

/// A running cloudcore, killed on drop.
struct Running {
    child: Child,
    log: PathBuf,
    monitor: u16,
}

impl Running {
    fn start(config: &Path, args: &[&str], monitor: u16) -> Running {
        let log = config.with_file_name("cloudcore.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(binary())
            .args(args)
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start cloudcore");
        Running {
            child,
            log,
            monitor,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn ready(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.monitor)) else {
            return false;
        };
        let _ = write!(
            s,
            "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.starts_with("HTTP/1.1 200")
    }

    async fn wait_ready(&mut self) {
        let began = Instant::now();
        while began.elapsed() < WAIT {
            if self.ready() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("cloudcore exited with {status}:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cloudcore not ready within {WAIT:?}:\n{}", self.log());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to its end; returns its exit code and output.
fn run_to_end(args: &[&str]) -> (i32, String) {
    let out = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Asks the hub for `k8s/ca.crt` as edgecore's metamanager does and returns the answer.
async fn ask_kube_ca(https: u16, websocket: u16, token: &str, node: &str) -> String {
    let certs = edge::hub::bootstrap(&format!("https://127.0.0.1:{https}"), token, node)
        .await
        .expect("bootstrap");
    let tls = Arc::new(certs.client_tls().expect("client TLS"));
    let (client, mut events) = HubClient::start(
        HubClientConfig::new(node, format!("127.0.0.1:{websocket}")),
        tls,
    );
    let query = Message::new().with_route("metamanager", "resource", "k8s/ca.crt", "query");
    let id = query.header.id.clone();
    let answer = tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await.expect("hub client running") {
                HubEvent::Connected => client.send(query.clone()).await.expect("send query"),
                HubEvent::Message(m) if m.header.parent_id == id => return m,
                _ => {}
            }
        }
    })
    .await
    .expect("k8s/ca.crt answered");
    client.stop();
    assert!(
        answer.route.resource.ends_with("k8s/ca.crt"),
        "{:?}",
        answer.route
    );
    answer.content.as_string().unwrap_or_default()
}

fn der_certs(pem: &[u8]) -> Vec<Vec<u8>> {
    pki::load_certificates_pem_or_der(pem)
        .expect("PEM")
        .into_iter()
        .map(|c| c.to_vec())
        .collect()
}

#[tokio::test]
async fn klog_verbosity_ignored_settings_and_the_kube_ca_through_the_binary() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let dir = TempDir::new();
    let p = ports();
    let path = config(&dir.0, &p, |c| {
        // A gate of KubeEdge's that changes nothing here (requireAuthorization does).
        c.feature_gates.insert("moduleRestart".into(), true);
        c.kube_api_config.qps = 50.0;
        c.modules.cloud_hub.quic.enable = true;
    });
    let mut core = Running::start(&path, &["--v=4"], p[4]);
    core.wait_ready().await;
    let log = core.log();
    for field in ["featureGates", "kubeAPIConfig.qps", "modules.cloudHub.quic"] {
        let line = log
            .lines()
            .find(|l| {
                l.contains("setting accepted but not supported; ignored") && l.contains(field)
            })
            .unwrap_or_else(|| panic!("no warning for {field}:\n{log}"));
        assert!(line.contains("WARN"), "{line}");
    }
    let warnings = log
        .matches("setting accepted but not supported; ignored")
        .count();
    assert_eq!(warnings, 3, "one warning per ignored setting:\n{log}");
    assert!(log.contains("DEBUG"), "--v=4 logs at debug:\n{log}");

    // The edge's k8s/ca.crt query gets the CA of the kubeconfig in use.
    let token = std::fs::read_to_string(dir.0.join("ca/tokendata")).expect("token file");
    let answer = ask_kube_ca(p[1], p[0], token.trim(), "edge-ca").await;
    let expected = std::fs::read(k8s_testenv::env().pki().join("ca.crt")).unwrap();
    assert!(!answer.is_empty(), "empty k8s/ca.crt answer");
    assert_eq!(der_certs(answer.as_bytes()), der_certs(&expected));
}

#[tokio::test]
async fn short_v_starts_and_a_pkcs8_server_key_serves_hub_and_tunnel() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let dir = TempDir::new();
    // The server certificate and a PKCS#8 key as `openssl genpkey` (and cert-manager) write it;
    // with no tunnel files the tunnel uses them too.
    let certs = dir.0.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let (key, cert) = (certs.join("server.key"), certs.join("server.crt"));
    for args in [
        vec![
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ],
        vec![
            "req",
            "-x509",
            "-new",
            "-subj",
            "/CN=KubeEdge",
            "-days",
            "1",
            "-key",
        ],
    ] {
        let mut cmd = Command::new("openssl");
        cmd.args(&args).arg(&key);
        if args[0] == "req" {
            cmd.arg("-out").arg(&cert);
        }
        let out = cmd.output().expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        std::fs::read_to_string(&key)
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    let p = ports();
    let path = config(&dir.0, &p, |_| {});
    let mut core = Running::start(&path, &["-v", "4"], p[4]);
    core.wait_ready().await;
    assert!(core.log().contains("cloudcore started"), "{}", core.log());
    assert!(
        !core.log().contains("setting accepted but not supported"),
        "{}",
        core.log()
    );
    drop(core);

    // A tunnel certificate without its key is refused, naming the setting.
    let p = ports();
    let path = config(&dir.0, &p, |c| {
        c.modules.cloud_stream.tls_tunnel_cert_file = cert.display().to_string();
    });
    let path = path.display().to_string();
    let (code, out) = run_to_end(&["--config", &path]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("modules.cloudStream.tlsTunnelPrivateKeyFile"),
        "{out}"
    );
}
