//! What each tier needs, looked up on this machine: `None` when it is there, else why not.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's `scripts/k8s-testenv`, which says whether it can start an API server here.
fn k8s_testenv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-testenv")
}

pub(crate) fn api_server() -> Option<String> {
    let script = k8s_testenv();
    match Command::new(&script).arg("check").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim().trim_start_matches("k8s-testenv: ");
            Some(if said.is_empty() {
                format!("{} check failed ({})", script.display(), out.status)
            } else {
                said.to_owned()
            })
        }
        Err(e) => Some(format!("cannot run {}: {e}", script.display())),
    }
}

pub(crate) fn helm() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/helm");
    match Command::new(&script).arg("path").output() {
        Ok(out) if out.status.success() => {
            Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        }
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim().trim_start_matches("helm: ");
            Err(if said.is_empty() {
                format!("{} path failed ({})", script.display(), out.status)
            } else {
                said.to_owned()
            })
        }
        Err(e) => Err(format!("cannot run {}: {e}", script.display())),
    }
}

pub(crate) fn root() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not running as root (network namespaces need it)".to_owned());
    }
    missing_commands(&[
        ("ip", "iproute2"),
        ("iptables", "iptables"),
        ("setpriv", "util-linux"),
    ])
}

pub(crate) fn edgecore() -> Option<String> {
    if let Some(why) = missing_commands(&[("xz", "xz-utils"), ("sqlite3", "sqlite3")]) {
        return Some(why);
    }
    crate::edgecore_source().err()
}

/// The first of `commands` not on `PATH`, with its Debian/Ubuntu package.
fn missing_commands(commands: &[(&str, &str)]) -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    commands.iter().find_map(|(command, package)| {
        let found = std::env::split_paths(&path).any(|dir| dir.join(command).is_file());
        (!found).then(|| format!("`{command}` is not installed (apt-get install {package})"))
    })
}
