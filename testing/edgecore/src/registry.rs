//! A container registry on loopback: Debian's `docker-registry` (the CNCF distribution
//! registry, v2 API) over plain HTTP, optionally behind a user and password (htpasswd), with
//! images copied in by `skopeo`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::images::OciImage;
use crate::process::Process;
use crate::tools::{require, run};

/// A running registry; killed on drop.
#[derive(Debug)]
pub struct Registry {
    addr: SocketAddr,
    credentials: Option<(String, String)>,
    process: Process,
    dir: PathBuf,
}

impl Registry {
    /// Starts a registry with its storage under `dir`, on a free loopback port; with
    /// `credentials`, every request needs them (basic auth).
    ///
    /// # Errors
    /// [`Error::ToolMissing`] for `docker-registry` or `htpasswd`; [`Error::Process`] when it
    /// does not answer within 30 s.
    pub async fn start(dir: &Path, credentials: Option<(&str, &str)>) -> Result<Registry> {
        let bin = require(
            "docker-registry",
            "docker-registry",
            "as the image registry node jobs pull from",
        )?;
        std::fs::create_dir_all(dir.join("data")).map_err(|e| Error::io(dir, e))?;
        let port = crate::cloud::listen_ports(1)?[0];
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            dir.join("data").display()
        );
        if let Some((user, password)) = credentials {
            require("htpasswd", "apache2-utils", "for the registry's user file")?;
            let out = run({
                let mut c = Command::new("htpasswd");
                c.args(["-Bbn", user, password]);
                c
            })?;
            let file = dir.join("htpasswd");
            std::fs::write(&file, &out.stdout).map_err(|e| Error::io(&file, e))?;
            config += &format!(
                "auth:\n  htpasswd:\n    realm: node-jobs\n    path: {}\n",
                file.display()
            );
        }
        let file = dir.join("config.yml");
        std::fs::write(&file, config).map_err(|e| Error::io(&file, e))?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve").arg(&file);
        let mut process = Process::spawn("docker-registry", cmd, &dir.join("registry.log"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = process.try_wait() {
                return Err(Error::Process {
                    what: format!("docker-registry exited: {status}"),
                    log: process.log_tail(20),
                });
            }
            if let Ok(r) = crate::http::get(addr, "/v2/", Duration::from_secs(2)).await
                && (r.status == 200 || r.status == 401)
            {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Error::Process {
                    what: format!("docker-registry did not answer on {addr} within 30 s"),
                    log: process.log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Registry {
            addr,
            credentials: credentials.map(|(u, p)| (u.to_owned(), p.to_owned())),
            process,
            dir: dir.to_path_buf(),
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `<addr>/<name>`: a full image reference for `name` (`repo:tag`).
    pub fn image(&self, name: &str) -> String {
        format!("{}/{name}", self.addr)
    }

    /// Copies `image` into the registry as `name` (`repo:tag`) with `skopeo`.
    ///
    /// # Errors
    /// [`Error::ToolMissing`] for `skopeo`; [`Error::Process`] when the copy fails.
    pub fn push(&self, image: &OciImage, name: &str) -> Result<String> {
        require(
            "skopeo",
            "skopeo",
            "to copy the test images into the registry",
        )?;
        let dest = format!("docker://{}", self.image(name));
        let mut c = Command::new("skopeo");
        c.args(["copy", "--insecure-policy", "--dest-tls-verify=false"]);
        if let Some((u, p)) = &self.credentials {
            c.arg("--dest-creds").arg(format!("{u}:{p}"));
        }
        c.arg(image.reference()).arg(&dest);
        // skopeo keeps a temporary copy beside its cache; this folder is ours.
        c.env("TMPDIR", &self.dir);
        run(c)?;
        Ok(self.image(name))
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}
