//! The edge side: a home folder with edgecore's config (from the peer template), its
//! certificates and database, and the running edgecore process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use serde_json::Value;

use crate::binary;
use crate::error::{Error, Result};
use crate::process::Process;

/// Where edgecore's edgestream relays kubelet requests (edged's read-only port; fixed in
/// edgecore, so [`crate::KubeletPort`] orders who listens there).
pub const KUBELET: &str = "127.0.0.1:10350";

/// What goes into one edgecore config; everything else is the peer template.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// `modules.edged.hostnameOverride`: the node name everywhere.
    pub node: String,
    /// `modules.edgeHub.token`: `<sha256 hex of the CA DER>.<JWT>`.
    pub token: String,
    /// The certificate server (`modules.edgeHub.httpServer` is `https://<this>`).
    pub cert_server: SocketAddr,
    /// The cloudhub WebSocket server.
    pub hub_server: SocketAddr,
    /// `modules.edgeHub.heartbeat` in seconds (template: 15).
    pub heartbeat: u32,
    /// The cloudstream tunnel; `None` disables edgeStream.
    pub tunnel_server: Option<SocketAddr>,
    /// Where the metaServer serves (`modules.metaManager.metaServer.server`; edgecore's own
    /// default is 127.0.0.1:10550); `None` turns it off.
    pub meta_server: Option<SocketAddr>,
    /// `modules.taskManager.enable`: the edge runs node jobs (template: off, edgecore's
    /// default).
    pub task_manager: bool,
    /// `modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint`: the CRI socket the
    /// task manager pulls images through (edgecore reads it whether edged runs or not);
    /// `None` keeps edgecore's default.
    pub container_runtime_endpoint: Option<String>,
    /// The MQTT broker edgecore's eventBus uses (`modules.eventBus`, external broker mode 2,
    /// `mqttServerExternal: tcp://<this>`); `None` turns eventBus off.
    pub event_bus: Option<SocketAddr>,
    /// Where edgecore's serviceBus serves edge applications (`modules.serviceBus.server` and
    /// `port`; edgecore's default is 127.0.0.1:9060); `None` turns serviceBus off.
    pub service_bus: Option<SocketAddr>,
}

impl EdgeConfig {
    /// The template's settings for `node` against the given cloud addresses, with the
    /// metaServer on a free loopback port of its own.
    ///
    /// # Panics
    /// When no port in 20000–32767 is free.
    pub fn new(node: &str, token: &str, cert_server: SocketAddr, hub_server: SocketAddr) -> Self {
        EdgeConfig {
            node: node.to_owned(),
            token: token.to_owned(),
            cert_server,
            hub_server,
            heartbeat: 15,
            tunnel_server: None,
            meta_server: Some(meta_server_port()),
            task_manager: false,
            container_runtime_endpoint: None,
            event_bus: None,
            service_bus: None,
        }
    }

    /// The config file text for `home`: the template with its placeholders filled and these
    /// fields set.
    pub fn render(&self, template: &str, home: &Path) -> Result<String> {
        let filled = template
            .replace("@EDGECORE_HOME@", &home.display().to_string())
            .replace("@TOKEN@", &self.token);
        let mut doc: Value =
            serde_saphyr::from_str(&filled).map_err(|e| Error::Config(format!("template: {e}")))?;
        let modules = &mut doc["modules"];
        if !modules.is_object() {
            return Err(Error::Config("template has no modules".into()));
        }
        set(modules, &["edged", "hostnameOverride"], self.node.as_str())?;
        set(modules, &["edged", "nodeIP"], "127.0.0.1")?;
        let hub = ["edgeHub"];
        set(
            modules,
            &[hub[0], "httpServer"],
            format!("https://{}", self.cert_server),
        )?;
        set(modules, &[hub[0], "heartbeat"], u64::from(self.heartbeat))?;
        set(modules, &[hub[0], "token"], self.token.as_str())?;
        set(
            modules,
            &[hub[0], "websocket", "server"],
            self.hub_server.to_string(),
        )?;
        set(
            modules,
            &["metaManager", "metaServer", "enable"],
            self.meta_server.is_some(),
        )?;
        if let Some(addr) = self.meta_server {
            set(
                modules,
                &["metaManager", "metaServer", "server"],
                addr.to_string(),
            )?;
        }
        set(modules, &["taskManager", "enable"], self.task_manager)?;
        if let Some(endpoint) = &self.container_runtime_endpoint {
            set(
                modules,
                &["edged", "tailoredKubeletConfig", "containerRuntimeEndpoint"],
                endpoint.as_str(),
            )?;
        }
        match self.tunnel_server {
            Some(addr) => {
                set(modules, &["edgeStream", "enable"], true)?;
                set(modules, &["edgeStream", "server"], addr.to_string())?;
            }
            None => set(modules, &["edgeStream", "enable"], false)?,
        }
        set(modules, &["eventBus", "enable"], self.event_bus.is_some())?;
        if let Some(broker) = self.event_bus {
            set(modules, &["eventBus", "mqttMode"], 2u64)?;
            set(
                modules,
                &["eventBus", "mqttServerExternal"],
                format!("tcp://{broker}"),
            )?;
        }
        set(
            modules,
            &["serviceBus", "enable"],
            self.service_bus.is_some(),
        )?;
        if let Some(addr) = self.service_bus {
            set(modules, &["serviceBus", "server"], addr.ip().to_string())?;
            set(modules, &["serviceBus", "port"], u64::from(addr.port()))?;
        }
        serde_saphyr::to_string(&doc).map_err(|e| Error::Config(e.to_string()))
    }
}

/// PEM text of one DER block (`label` e.g. `CERTIFICATE`, `PRIVATE KEY`, `EC PRIVATE KEY`).
pub fn pem(label: &str, der: &[u8]) -> String {
    let config = ::pem::EncodeConfig::new().set_line_ending(::pem::LineEnding::LF);
    ::pem::encode_config(&::pem::Pem::new(label, der), config)
}

fn set(root: &mut Value, path: &[&str], value: impl Into<Value>) -> Result<()> {
    let mut node = root;
    for key in path {
        let map = node
            .as_object_mut()
            .ok_or_else(|| Error::Config(format!("{path:?}: not a mapping at {key}")))?;
        node = map
            .entry(*key)
            .or_insert_with(|| Value::Object(Default::default()));
    }
    *node = value.into();
    Ok(())
}

/// A fresh folder for one edgecore: config, `run/` (certificates, database) and the log.
/// Removed on drop unless the test is failing (then kept, and its path printed).
#[derive(Debug)]
pub struct EdgeHome {
    dir: PathBuf,
    keep: bool,
}

impl EdgeHome {
    /// A new empty folder under the temp dir, named after `node`.
    pub fn new(node: &str) -> Result<EdgeHome> {
        let dir = std::env::temp_dir().join(format!(
            "edgecore-{node}-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(dir.join("run")).map_err(|e| Error::io(&dir, e))?;
        Ok(EdgeHome { dir, keep: false })
    }

    /// Keeps the folder when dropped (for a failed scenario).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The config file edgecore is started with (and rewrites).
    pub fn config_file(&self) -> PathBuf {
        self.dir.join("edgecore.yaml")
    }

    /// edgecore's sqlite database (`database.dataSource`).
    pub fn database(&self) -> PathBuf {
        self.dir.join("run/edgecore.db")
    }

    /// The CA edgecore downloaded (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("run/ca/rootCA.crt")
    }

    /// The node certificate edgecore obtained (PEM).
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join("run/certs/server.crt")
    }

    /// The node key (PEM).
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("run/certs/server.key")
    }

    /// edgecore's log (every run in this folder, appended).
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("edgecore.log")
    }

    /// Writes the config for `config` from the peer template.
    pub fn write_config(&self, config: &EdgeConfig) -> Result<()> {
        let text = config.render(&binary::config_template()?, &self.dir)?;
        let path = self.config_file();
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }

    /// Puts a CA and a node certificate in place (PEM text) so edgecore skips the bootstrap.
    pub fn install_certificates(&self, ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<()> {
        for (path, text) in [
            (self.ca_file(), ca_pem),
            (self.cert_file(), cert_pem),
            (self.key_file(), key_pem),
        ] {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }
}

impl Drop for EdgeHome {
    fn drop(&mut self) {
        if self.keep || std::thread::panicking() {
            eprintln!("edgecore home kept for inspection: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A free loopback address for an edgecore's metaServer.
pub(crate) fn meta_server_port() -> SocketAddr {
    let port = crate::cloud::listen_ports(1).expect("a free port for the metaServer")[0];
    SocketAddr::from(([127, 0, 0, 1], port))
}

pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (u64::from(nanos) << 16) | N.fetch_add(1, Ordering::Relaxed)
}

/// A running edgecore (`CHECK_EDGECORE_ENVIRONMENT=false edgecore --config … --v=4`), its output
/// appended to the home's log. Killed (with its process group) on drop; when a test panics,
/// its log tail is printed first.
#[derive(Debug)]
pub struct Edgecore {
    process: Process,
}

impl Edgecore {
    /// Starts edgecore on `home`'s config (written beforehand with [`EdgeHome::write_config`]).
    pub fn start(home: &EdgeHome) -> Result<Edgecore> {
        let bin = binary::edgecore()?;
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(home.config_file())
            .arg("--v=4")
            // Skips its scan for a running kubelet.
            .env("CHECK_EDGECORE_ENVIRONMENT", "false")
            .current_dir(home.path());
        Ok(Edgecore {
            process: Process::spawn("edgecore", cmd, &home.log_file())?,
        })
    }

    /// The supervised process (signals, exit status, log).
    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Its whole log.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// SIGKILL: it gets no chance to say goodbye; the kernel closes its sockets.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.process.kill()
    }

    /// SIGSTOP: the process freezes with its connections open.
    pub fn pause(&self) {
        self.process.pause();
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.process.resume();
    }

    /// Waits up to `limit` for edgecore to exit by itself.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.process.wait_exit(limit).await
    }

    /// The exit status if it has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.process.try_wait()
    }
}

impl Drop for Edgecore {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- edgecore log tail ({}) ---\n{}\n--- end of edgecore log ---",
                self.process.log_path().display(),
                self.process.log_tail(60)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "apiVersion: edgecore.config.kubeedge.io/v1alpha2
kind: EdgeCore
database:
  dataSource: @EDGECORE_HOME@/run/edgecore.db
modules:
  edged:
    enable: false
    hostnameOverride: edge-node-1
  edgeHub:
    heartbeat: 15
    httpServer: https://127.0.0.1:10002
    token: \"@TOKEN@\"
    tlsCaFile: @EDGECORE_HOME@/run/ca/rootCA.crt
    websocket:
      enable: true
      server: 127.0.0.1:10000
  metaManager:
    metaServer:
      enable: true
  edgeStream:
    enable: true
    server: 127.0.0.1:10004
";

    #[test]
    fn pem_wraps_base64_at_64_columns() {
        let text = pem("CERTIFICATE", &[0u8; 60]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2], "AAAAAAAAAAAAAAAA");
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
    }

    #[test]
    fn render_fills_placeholders_and_sets_addresses() {
        let mut c = EdgeConfig::new(
            "n1",
            "abc.def.ghi.jkl",
            "127.0.0.1:4002".parse().unwrap(),
            "127.0.0.1:4000".parse().unwrap(),
        );
        c.heartbeat = 4;
        let text = c.render(TEMPLATE, Path::new("/h")).unwrap();
        let v: Value = serde_saphyr::from_str(&text).unwrap();
        let m = &v["modules"];
        assert_eq!(v["database"]["dataSource"], "/h/run/edgecore.db");
        assert_eq!(m["edged"]["hostnameOverride"], "n1");
        assert_eq!(m["edged"]["nodeIP"], "127.0.0.1");
        assert_eq!(m["edgeHub"]["token"], "abc.def.ghi.jkl");
        assert_eq!(m["edgeHub"]["heartbeat"], 4);
        assert_eq!(m["edgeHub"]["httpServer"], "https://127.0.0.1:4002");
        assert_eq!(m["edgeHub"]["tlsCaFile"], "/h/run/ca/rootCA.crt");
        assert_eq!(m["edgeHub"]["websocket"]["server"], "127.0.0.1:4000");
        assert_eq!(m["edgeStream"]["enable"], false);
        // A port of its own, so edgecores of separate test binaries run side by side.
        let meta = c.meta_server.unwrap();
        assert_ne!(meta.port(), 10550);
        assert_eq!(m["metaManager"]["metaServer"]["enable"], true);
        assert_eq!(m["metaManager"]["metaServer"]["server"], meta.to_string());
        assert_eq!(m["taskManager"]["enable"], false);
        c.task_manager = true;
        c.container_runtime_endpoint = Some("unix:///tmp/c.sock".into());
        let on: Value =
            serde_saphyr::from_str(&c.render(TEMPLATE, Path::new("/h")).unwrap()).unwrap();
        assert_eq!(on["modules"]["taskManager"]["enable"], true);
        assert_eq!(
            on["modules"]["edged"]["tailoredKubeletConfig"]["containerRuntimeEndpoint"],
            "unix:///tmp/c.sock"
        );
        assert_eq!(m["eventBus"]["enable"], false);
        assert_eq!(m["serviceBus"]["enable"], false);
        c.meta_server = None;
        c.event_bus = Some("127.0.0.1:21883".parse().unwrap());
        c.service_bus = Some("127.0.0.1:29060".parse().unwrap());
        let v: Value =
            serde_saphyr::from_str(&c.render(TEMPLATE, Path::new("/h")).unwrap()).unwrap();
        let m = &v["modules"];
        assert_eq!(m["metaManager"]["metaServer"]["enable"], false);
        assert_eq!(m["eventBus"]["enable"], true);
        assert_eq!(m["eventBus"]["mqttMode"], 2);
        assert_eq!(m["eventBus"]["mqttServerExternal"], "tcp://127.0.0.1:21883");
        assert_eq!(m["serviceBus"]["enable"], true);
        assert_eq!(m["serviceBus"]["port"], 29060);
    }

    #[test]
    fn the_peer_template_renders() {
        // The real template beside the archive; fails (not skips) when it is missing.
        let template = binary::config_template().unwrap();
        let mut c = EdgeConfig::new(
            "n1",
            "t",
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        c.tunnel_server = Some("127.0.0.1:3".parse().unwrap());
        let v: Value =
            serde_saphyr::from_str(&c.render(&template, Path::new("/h")).unwrap()).unwrap();
        assert_eq!(v["modules"]["edgeStream"]["server"], "127.0.0.1:3");
        assert_eq!(
            v["modules"]["edgeHub"]["tlsCertFile"],
            "/h/run/certs/server.crt"
        );
        assert_eq!(v["edgecoreVersion"], binary::EDGECORE_VERSION);
    }
}
