//! Our cloudcore as a process: the `cloudcore` binary ([`binary::cloudcore`]) with a CloudCore
//! YAML written here (free loopback ports, its own certificate folder, the test API server).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::binary;
use crate::error::{Error, Result};
use crate::http;
use crate::process::Process;

/// The ports one cloudcore listens on (all on 127.0.0.1, except cloudstream's, which bind
/// every address as upstream does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudPorts {
    /// cloudhub WebSocket.
    pub websocket: u16,
    /// cloudhub certificate server.
    pub https: u16,
    /// cloudstream tunnel.
    pub tunnel: u16,
    /// cloudstream stream server (what the API server dials as the kubelet).
    pub stream: u16,
    /// The monitor server (`/readyz`, `/metrics`).
    pub monitor: u16,
}

/// `n` distinct ports free on 127.0.0.1 a moment ago, for a server process to listen on.
///
/// They come from 20000–32767, below Linux's ephemeral range (32768–60999): a port the OS picked
/// with `bind(:0)` is also one it hands out as the source port of outgoing connections, so under
/// load (thousands of test connections) another process could take it before the server binds
/// it. A random starting point keeps concurrent test processes apart.
pub fn listen_ports(n: usize) -> Result<Vec<u16>> {
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_768;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let mut ports = Vec::with_capacity(n);
    for step in 0..SPAN {
        if ports.len() == n {
            break;
        }
        let port = (FIRST + (seed.wrapping_add(step.wrapping_mul(7_919))) % SPAN) as u16;
        if !ports.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    if ports.len() < n {
        return Err(Error::io(
            "127.0.0.1",
            std::io::Error::new(std::io::ErrorKind::AddrInUse, "no free port in 20000-32767"),
        ));
    }
    Ok(ports)
}

impl CloudPorts {
    /// Five ports that were free a moment ago, from [`listen_ports`].
    pub fn free() -> Result<CloudPorts> {
        let ports = listen_ports(5)?;
        Ok(CloudPorts {
            websocket: ports[0],
            https: ports[1],
            tunnel: ports[2],
            stream: ports[3],
            monitor: ports[4],
        })
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// The WebSocket address edges dial.
    pub fn websocket_addr(&self) -> SocketAddr {
        Self::addr(self.websocket)
    }

    /// The certificate server address.
    pub fn https_addr(&self) -> SocketAddr {
        Self::addr(self.https)
    }

    /// The tunnel address.
    pub fn tunnel_addr(&self) -> SocketAddr {
        Self::addr(self.tunnel)
    }

    /// The monitor server address.
    pub fn monitor_addr(&self) -> SocketAddr {
        Self::addr(self.monitor)
    }
}

/// How to run one cloudcore. The same spec restarts the same cloud (same ports, same folder).
#[derive(Debug, Clone)]
pub struct CloudSpec {
    /// The folder for its certificates (`ca/`, `certs/`), config and log.
    pub dir: PathBuf,
    /// Its ports.
    pub ports: CloudPorts,
    /// The API server's kubeconfig.
    pub kubeconfig: PathBuf,
    /// The folder with `ca.crt` and `stream.crt/.key` for the stream server.
    pub stream_pki: PathBuf,
    /// `modules.cloudHub.keepaliveInterval` in seconds (KubeEdge default 30).
    pub keepalive_interval: u32,
    /// Log filter (`--log-level`).
    pub log_level: String,
    /// `modules.cloudHub.authorization` `enable: true, debug: false`: edge requests also go
    /// to the API server impersonating the node.
    pub impersonate: bool,
    /// `modules.dynamicController.enable` (the edge metaServer's cloud side; default on).
    pub dynamic_controller: bool,
    /// `modules.taskManager.enable` (node jobs with their job controller; on, as the manifests
    /// deploy cloudcore).
    pub task_manager: bool,
    /// `replicas.address`: this replica's own address when several serve the edge together
    /// (the Nodes' `cloudcore` annotation and the `cloudcore@<address>` User-Agent). `None`:
    /// not rendered (the advertised address is used).
    pub replica_address: Option<String>,
    /// Settings merged over the rendered configuration, key by key (objects merge, anything
    /// else replaces), e.g. `{"featureGates": {"requireAuthorization": true}}` or
    /// `{"modules": {"router": {"enable": true, "port": 9443}}}`. `Null`: nothing.
    pub extra: serde_json::Value,
}

impl CloudSpec {
    /// A spec for the test API server of this binary, with free ports, in `dir`.
    pub fn for_testenv(dir: &Path) -> Result<CloudSpec> {
        let env = k8s_testenv::env();
        Ok(CloudSpec {
            dir: dir.to_path_buf(),
            ports: CloudPorts::free()?,
            kubeconfig: env.kubeconfig(),
            stream_pki: env.pki(),
            keepalive_interval: 30,
            log_level:
                "info,cloudhub=debug,cloudstream=debug,edgecontroller=debug,dynamiccontroller=debug,taskmanager=debug"
                    .into(),
            impersonate: false,
            dynamic_controller: true,
            task_manager: true,
            replica_address: None,
            extra: serde_json::Value::Null,
        })
    }

    /// The CA certificate file (PEM; cloudhub writes it when it has none, or uses it).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca/rootCA.crt")
    }

    /// Where cloudhub writes the current bootstrap token (`tokendata` beside the CA file).
    pub fn token_file(&self) -> PathBuf {
        self.dir.join("ca/tokendata")
    }

    /// The config file.
    pub fn config_file(&self) -> PathBuf {
        self.dir.join("cloudcore.yaml")
    }

    /// The log file (every run, appended).
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("cloudcore.log")
    }

    /// The CloudCore YAML (KubeEdge's keys).
    pub fn render(&self) -> Result<String> {
        let d = |p: &str| self.dir.join(p).display().to_string();
        let pki = |p: &str| self.stream_pki.join(p).display().to_string();
        let p = self.ports;
        let mut doc = json!({
            "apiVersion": "cloudcore.config.kubeedge.io/v1alpha2",
            "kind": "CloudCore",
            "kubeAPIConfig": {"kubeConfig": self.kubeconfig.display().to_string()},
            // On loopback and read without credentials by the scenarios and load tools (the
            // default with a cluster is Webhook: a bearer token reviewed by the API server).
            "commonConfig": {"monitorServer": {
                "bindAddress": format!("127.0.0.1:{}", p.monitor),
                "authorization": {"mode": "AlwaysAllow"},
            }},
            "modules": {
                "cloudHub": {
                    "advertiseAddress": ["127.0.0.1"],
                    "keepaliveInterval": self.keepalive_interval,
                    "tlsCAFile": d("ca/rootCA.crt"),
                    "tlsCAKeyFile": d("ca/rootCA.key"),
                    "tlsCertFile": d("certs/server.crt"),
                    "tlsPrivateKeyFile": d("certs/server.key"),
                    "websocket": {"address": "127.0.0.1", "port": p.websocket},
                    "https": {"address": "127.0.0.1", "port": p.https},
                    "unixsocket": {"enable": false},
                    "authorization": {"enable": self.impersonate, "debug": !self.impersonate},
                    // The scenarios follow their nodes' counters (`Metrics::node_counter`).
                    "perNodeMetrics": true,
                },
                "dynamicController": {"enable": self.dynamic_controller},
                "taskManager": {"enable": self.task_manager},
                "cloudStream": {
                    "enable": true,
                    "tunnelPort": p.tunnel,
                    "streamPort": p.stream,
                    // KubeEdge's defaults point at cloudhub's files; absent, cloudhub's
                    // material (from its Secrets) is used.
                    "tlsTunnelCAFile": d("ca/rootCA.crt"),
                    "tlsTunnelCertFile": d("certs/server.crt"),
                    "tlsTunnelPrivateKeyFile": d("certs/server.key"),
                    "tlsStreamCAFile": pki("ca.crt"),
                    "tlsStreamCertFile": pki("stream.crt"),
                    "tlsStreamPrivateKeyFile": pki("stream.key"),
                },
                // The Node reports the stream port itself (no DNAT rules on a test machine).
                "iptablesManager": {"enable": false},
            },
        });
        if let Some(address) = &self.replica_address {
            doc["replicas"] = json!({"address": address});
        }
        merge(&mut doc, &self.extra);
        serde_saphyr::to_string(&doc).map_err(|e| Error::Config(e.to_string()))
    }
}

/// Merges `extra` into `doc`: objects key by key, anything else replaces (`null` leaves `doc`).
fn merge(doc: &mut serde_json::Value, extra: &serde_json::Value) {
    match (doc, extra) {
        (_, serde_json::Value::Null) => {}
        (serde_json::Value::Object(d), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge(d.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (d, e) => *d = e.clone(),
    }
}

/// A running cloudcore; stopped (SIGKILL to its group) on drop, its log tail printed when the
/// test is failing.
#[derive(Debug)]
pub struct Cloudcore {
    process: Process,
    spec: CloudSpec,
}

impl Cloudcore {
    /// Writes the config and starts the binary; returns once `/readyz` answers 200.
    ///
    /// # Errors
    /// [`Error::CloudcoreMissing`] when the binary is not built; [`Error::Process`] with its
    /// log tail when it exits or is not ready within 60 s.
    pub async fn start(spec: &CloudSpec) -> Result<Cloudcore> {
        let bin = binary::cloudcore()?;
        std::fs::create_dir_all(&spec.dir).map_err(|e| Error::io(&spec.dir, e))?;
        let config = spec.config_file();
        std::fs::write(&config, spec.render()?).map_err(|e| Error::io(&config, e))?;
        // The ports were free when chosen; another test's outgoing connection may hold one for
        // a moment since (its ephemeral port). The same ports are tried again a few times, as
        // the edges of a scenario may already point at them.
        let mut attempt = 1;
        loop {
            let mut cmd = Command::new(&bin);
            cmd.arg("--config")
                .arg(&config)
                .arg("--log-level")
                .arg(&spec.log_level)
                .env_remove("RUST_LOG")
                // Plain text in the log file.
                .env("NO_COLOR", "1")
                .current_dir(&spec.dir);
            let process = Process::spawn("cloudcore", cmd, &spec.log_file())?;
            let mut core = Cloudcore {
                process,
                spec: spec.clone(),
            };
            match core.wait_ready(Duration::from_secs(60)).await {
                Ok(()) => return Ok(core),
                Err(Error::Process { log, .. })
                    if attempt < 5 && log.contains("Address already in use") =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.process.try_wait() {
                return Err(Error::Process {
                    what: format!("cloudcore exited during start-up: {status}"),
                    log: self.process.log_tail(40),
                });
            }
            let ready = http::get(
                self.spec.ports.monitor_addr(),
                "/readyz",
                Duration::from_secs(2),
            )
            .await;
            if matches!(&ready, Ok(r) if r.status == 200) && self.spec.token_file().is_file() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Process {
                    what: format!("cloudcore not ready within {limit:?}: {ready:?}"),
                    log: self.process.log_tail(40),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The spec it runs with.
    pub fn spec(&self) -> &CloudSpec {
        &self.spec
    }

    /// The bootstrap token cloudhub wrote (`<sha256 hex of CA DER>.<JWT>`).
    pub fn token(&self) -> Result<String> {
        let path = self.spec.token_file();
        std::fs::read_to_string(&path)
            .map(|t| t.trim().to_owned())
            .map_err(|e| Error::io(&path, e))
    }

    /// The current `/metrics`.
    pub async fn metrics(&self) -> Result<Metrics> {
        let r = http::get(
            self.spec.ports.monitor_addr(),
            "/metrics",
            Duration::from_secs(5),
        )
        .await?;
        Ok(Metrics(r.text()))
    }

    /// The supervised process.
    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// Its whole log.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Graceful stop (SIGTERM, as an operator would); SIGKILL after 20 s. Returns whether it
    /// stopped by itself with status 0.
    pub async fn stop(&mut self) -> bool {
        let (status, graceful) = self.process.terminate(Duration::from_secs(20)).await;
        graceful && status.is_some_and(|s| s.success())
    }
}

impl Drop for Cloudcore {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- cloudcore log tail ({}) ---\n{}\n--- end of cloudcore log ---",
                self.process.log_path().display(),
                self.process.log_tail(60)
            );
        }
    }
}

/// A Prometheus text exposition.
#[derive(Debug, Clone)]
pub struct Metrics(pub String);

impl Metrics {
    /// The sample `name` whose labels include all of `labels`; `None` when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0.lines().find_map(|line| {
            let line = line.trim();
            if line.starts_with('#') {
                return None;
            }
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, label_text) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let all = labels
                .iter()
                .all(|(k, v)| label_text.split(',').any(|p| p == format!("{k}=\"{v}\"")));
            all.then(|| value.parse().ok()).flatten()
        })
    }

    /// `KubeEdge_CloudHub_connected_nodes`.
    pub fn connected_nodes(&self) -> f64 {
        self.value("KubeEdge_CloudHub_connected_nodes", &[])
            .unwrap_or(0.0)
    }

    /// A per-node cloudhub counter (`cloudhub_node_messages_<what>_total{node}`), 0 when absent.
    pub fn node_counter(&self, what: &str, node: &str) -> f64 {
        self.value(
            &format!("cloudhub_node_messages_{what}_total"),
            &[("node", node)],
        )
        .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_found_by_name_and_labels() {
        let m = Metrics(
            "# TYPE x gauge\nKubeEdge_CloudHub_connected_nodes 1\n\
             cloudhub_node_messages_received_total{node=\"a\"} 3\n\
             cloudhub_node_messages_received_total{node=\"b\"} 7\n"
                .into(),
        );
        assert_eq!(m.connected_nodes(), 1.0);
        assert_eq!(m.node_counter("received", "b"), 7.0);
        assert_eq!(m.node_counter("received", "c"), 0.0);
        assert_eq!(m.value("missing", &[]), None);
    }

    #[test]
    fn the_config_uses_kubeedge_keys() {
        let spec = CloudSpec {
            dir: "/c".into(),
            ports: CloudPorts {
                websocket: 1,
                https: 2,
                tunnel: 3,
                stream: 4,
                monitor: 5,
            },
            kubeconfig: "/k".into(),
            stream_pki: "/p".into(),
            keepalive_interval: 9,
            log_level: "info".into(),
            impersonate: true,
            dynamic_controller: false,
            task_manager: true,
            replica_address: Some("127.0.0.11".into()),
            extra: json!({"featureGates": {"requireAuthorization": true},
                          "modules": {"cloudHub": {"keepaliveInterval": 7},
                                      "dynamicController": {"listenerReviewSeconds": 2}}}),
        };
        let v: serde_json::Value = serde_saphyr::from_str(&spec.render().unwrap()).unwrap();
        assert_eq!(
            v["modules"]["dynamicController"]["listenerReviewSeconds"],
            2
        );
        assert_eq!(v["modules"]["cloudHub"]["keepaliveInterval"], 7);
        assert_eq!(
            v["modules"]["cloudHub"]["websocket"]["port"], 1,
            "merged, not replaced"
        );
        let hub = &v["modules"]["cloudHub"];
        assert_eq!(hub["websocket"]["port"], 1);
        assert_eq!(hub["authorization"]["enable"], true);
        assert_eq!(hub["authorization"]["debug"], false);
        assert_eq!(hub["keepaliveInterval"], 7, "extra wins");
        assert_eq!(hub["websocket"]["port"], 1, "extra merges, keeps the rest");
        assert_eq!(v["featureGates"]["requireAuthorization"], true);
        assert_eq!(hub["perNodeMetrics"], true);
        assert_eq!(
            v["commonConfig"]["monitorServer"]["authorization"]["mode"],
            "AlwaysAllow"
        );
        assert_eq!(v["modules"]["dynamicController"]["enable"], false);
        assert_eq!(v["modules"]["taskManager"]["enable"], true);
        assert_eq!(hub["tlsCAFile"], "/c/ca/rootCA.crt");
        assert_eq!(v["modules"]["cloudStream"]["streamPort"], 4);
        assert_eq!(
            v["modules"]["cloudStream"]["tlsStreamCertFile"],
            "/p/stream.crt"
        );
        assert_eq!(v["kubeAPIConfig"]["kubeConfig"], "/k");
        assert_eq!(v["replicas"]["address"], "127.0.0.11");
        assert_eq!(spec.token_file(), PathBuf::from("/c/ca/tokendata"));
    }
}
