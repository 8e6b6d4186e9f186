//! An MQTT broker for edgecore's eventBus: Debian's `mosquitto` on a free loopback port, with
//! `mosquitto_sub` and `mosquitto_pub` as the edge applications that use it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::process::Process;

/// A running `mosquitto` (anonymous access, no persistence, 127.0.0.1 only) in a folder of its
/// own; killed and removed on drop.
#[derive(Debug)]
pub struct Mosquitto {
    process: Process,
    addr: SocketAddr,
    dir: PathBuf,
}

/// A `mosquitto_sub` subscribed to one topic (filter); each message it gets is a line
/// `<topic> <payload>` in its output file. Killed on drop.
#[derive(Debug)]
pub struct Subscriber {
    process: Process,
}

fn missing(tool: &str, e: impl std::fmt::Display) -> Error {
    Error::Process {
        what: format!(
            "cannot run {tool} ({e}); the eventBus scenarios need it: apt-get install mosquitto mosquitto-clients"
        ),
        log: String::new(),
    }
}

fn tool(name: &str) -> Result<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| missing(name, "not found"))
}

impl Mosquitto {
    /// Starts a broker and waits (up to 10 s) until it accepts connections.
    ///
    /// # Errors
    /// `mosquitto` is not installed (the message names the package), or it did not start.
    pub async fn start() -> Result<Mosquitto> {
        let bin = tool("mosquitto")?;
        let port = crate::cloud::listen_ports(1)?[0];
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let dir = std::env::temp_dir().join(format!(
            "mosquitto-{}-{}",
            std::process::id(),
            crate::edge::unique()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let conf = dir.join("mosquitto.conf");
        let text = format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n");
        std::fs::write(&conf, text).map_err(|e| Error::io(&conf, e))?;
        let mut cmd = Command::new(bin);
        cmd.arg("-c").arg(&conf);
        let mut process = Process::spawn("mosquitto", cmd, &dir.join("mosquitto.log"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Some(status) = process.try_wait() {
                return Err(Error::Process {
                    what: format!("mosquitto exited: {status}"),
                    log: process.log_tail(20),
                });
            }
            if Instant::now() > deadline {
                return Err(Error::Process {
                    what: format!("mosquitto not listening on {addr} within 10 s"),
                    log: process.log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Mosquitto { process, addr, dir })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Subscribes `topic` (an MQTT filter); returns once the subscription is made (the broker
    /// logs it).
    pub async fn subscribe(&self, topic: &str) -> Result<Subscriber> {
        let bin = tool("mosquitto_sub")?;
        let mut cmd = Command::new(bin);
        let id = format!("sub-{}", crate::edge::unique());
        cmd.args(["-h", "127.0.0.1", "-p", &self.addr.port().to_string()])
            .args(["-i", &id, "-v", "-t", topic]);
        let out = self.dir.join(format!("{id}.out"));
        let process = Process::spawn("mosquitto_sub", cmd, &out)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        // The broker logs "New client connected ... as <id>" once it connected.
        while !self.process.log().contains(&id) {
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "mosquitto_sub {id} did not connect"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Its SUBSCRIBE follows the connection at once; give it the broker's round trip.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(Subscriber { process })
    }

    /// Publishes `payload` on `topic` (QoS 0) and waits for `mosquitto_pub` to finish.
    pub async fn publish(&self, topic: &str, payload: &str) -> Result<()> {
        let bin = tool("mosquitto_pub")?;
        let status = tokio::process::Command::new(bin)
            .args(["-h", "127.0.0.1", "-p", &self.addr.port().to_string()])
            .args(["-t", topic, "-m", payload])
            .status()
            .await
            .map_err(|e| missing("mosquitto_pub", e))?;
        if !status.success() {
            return Err(Error::Process {
                what: format!("mosquitto_pub -t {topic} failed: {status}"),
                log: self.process.log_tail(20),
            });
        }
        Ok(())
    }

    /// The broker's log (connections, subscriptions).
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.process.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Subscriber {
    /// The messages received so far, `(topic, payload)`.
    pub fn received(&self) -> Vec<(String, String)> {
        self.process
            .log()
            .lines()
            .filter(|l| !l.starts_with("===== edgecore-interop"))
            .filter_map(|l| l.split_once(' '))
            .map(|(t, p)| (t.to_owned(), p.to_owned()))
            .collect()
    }

    /// Waits (up to `limit`) for a message on `topic`; returns its payload.
    pub async fn wait_for(&self, topic: &str, limit: Duration) -> Result<String> {
        crate::eventually(limit, &format!("an MQTT message on {topic}"), || async {
            self.received()
                .into_iter()
                .find(|(t, _)| t == topic)
                .map(|(_, p)| p)
        })
        .await
    }
}
