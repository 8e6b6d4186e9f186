//! Container images built on this machine, for node jobs to pull: an OCI layout made with
//! `umoci` from the static busybox (a shell and its applets), with extra files of the host
//! copied in (keadm and edgecore for an installation package).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};
use crate::tools::{require, run};

/// An OCI image layout on disk with one tag.
#[derive(Debug, Clone)]
pub struct OciImage {
    /// The layout folder.
    pub layout: PathBuf,
    /// The tag in it.
    pub tag: String,
}

impl OciImage {
    /// The `skopeo` source name: `oci:<layout>:<tag>`.
    pub fn reference(&self) -> String {
        format!("oci:{}:{}", self.layout.display(), self.tag)
    }
}

/// Builds an image in `dir` (a fresh folder): busybox with its applets under `/bin`, `PATH=/bin`,
/// `cmd` as its command, and each `(host file, path in the image)` of `files` copied in
/// (executable). Needs `umoci` and the static busybox.
pub fn busybox_image(
    dir: &Path,
    tag: &str,
    files: &[(&Path, &str)],
    cmd: &[&str],
) -> Result<OciImage> {
    require("umoci", "umoci", "to build the test images")?;
    let busybox = Path::new("/bin/busybox");
    if !busybox.is_file() {
        return Err(Error::ToolMissing {
            tool: "/bin/busybox".into(),
            package: "busybox-static".into(),
            why: "as the content of the test images".into(),
        });
    }
    let linked = Command::new("ldd")
        .arg(busybox)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if linked {
        return Err(Error::ToolMissing {
            tool: "/bin/busybox (static)".into(),
            package: "busybox-static".into(),
            why: "statically linked: the test images have no libc".into(),
        });
    }
    let layout = dir.join("oci");
    let bundle = dir.join("bundle");
    let image = format!("{}:{tag}", layout.display());
    let umoci = |args: &[&str]| {
        let mut c = Command::new("umoci");
        c.args(args);
        run(c)
    };
    umoci(&["init", "--layout", &layout.display().to_string()])?;
    umoci(&["new", "--image", &image])?;
    umoci(&[
        "unpack",
        "--rootless",
        "--image",
        &image,
        &bundle.display().to_string(),
    ])?;
    let root = bundle.join("rootfs");
    for d in [
        "bin",
        "etc",
        "tmp",
        "proc",
        "sys",
        "dev",
        "root",
        "usr/local/bin",
    ] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| Error::io(root.join(d), e))?;
    }
    copy(busybox, &root.join("bin/busybox"))?;
    let list = run({
        let mut c = Command::new(busybox);
        c.arg("--list");
        c
    })?;
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let link = root.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link).map_err(|e| Error::io(&link, e))?;
        }
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
        .map_err(|e| Error::io(root.join("etc/passwd"), e))?;
    std::fs::write(root.join("etc/group"), "root:x:0:\n")
        .map_err(|e| Error::io(root.join("etc/group"), e))?;
    for (src, dest) in files {
        copy(src, &root.join(dest.trim_start_matches('/')))?;
    }
    umoci(&["repack", "--image", &image, &bundle.display().to_string()])?;
    let mut config = vec![
        "config",
        "--image",
        &image,
        "--config.env",
        "PATH=/bin:/usr/local/bin",
        "--config.workingdir",
        "/",
    ];
    for c in cmd {
        config.extend(["--config.cmd", c]);
    }
    umoci(&config)?;
    let _ = std::fs::remove_dir_all(&bundle);
    Ok(OciImage {
        layout,
        tag: tag.to_owned(),
    })
}

fn copy(src: &Path, dest: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    std::fs::copy(src, dest).map_err(|e| Error::io(src, e))?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(dest, e))
}
