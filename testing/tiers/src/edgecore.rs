//! Where the real edgecore comes from: the one lookup the tier check and the edgecore
//! harness share.

use std::path::{Path, PathBuf};

/// The KubeEdge release whose archive carries an `edgecore` a user can take (the patch release
/// of the line the suite is written against), and where to download it.
const RELEASE_HINT: &str = "KubeEdge's release archive has one: \
    https://github.com/kubeedge/kubeedge/releases/download/v1.23.1/kubeedge-v1.23.1-linux-amd64.tar.gz \
    holds kubeedge-v1.23.1-linux-amd64/edge/edgecore (check the archive against \
    checksum_kubeedge-v1.23.1-linux-amd64.tar.gz.txt, its sha512, on the same page); set \
    EDGECORE_BIN to it (CONTRIBUTING.md, \"The real edgecore\")";

/// Where the edgecore binary comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgecoreSource {
    /// `$EDGECORE_BIN`: an unpacked binary, used as it is.
    Binary(PathBuf),
    /// An xz-compressed binary: `$EDGECORE_XZ`, else the newest `edgecore-*.xz` in
    /// [`peer_dir`].
    Archive(PathBuf),
}

/// The repository root, from this crate's manifest folder.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where peer files live: the folder of `$EDGECORE_XZ`, else `shared/peers/edgecore` beside the
/// repository (where the project's development machines keep the build the suite is written
/// against; a clone has no such folder).
pub fn peer_dir() -> PathBuf {
    match std::env::var_os("EDGECORE_XZ") {
        Some(xz) => PathBuf::from(xz)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        None => repo_root().join("../shared/peers/edgecore"),
    }
}

/// The edgecore to use: `$EDGECORE_BIN` (an executable file), else [`edgecore_archive`].
///
/// # Errors
/// Why none is there, and how to get one.
pub fn edgecore_source() -> Result<EdgecoreSource, String> {
    let Some(bin) = std::env::var_os("EDGECORE_BIN") else {
        return edgecore_archive().map(EdgecoreSource::Archive);
    };
    use std::os::unix::fs::PermissionsExt;
    let bin = PathBuf::from(bin);
    match std::fs::metadata(&bin) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {
            Ok(EdgecoreSource::Binary(bin))
        }
        Ok(_) => Err(format!(
            "EDGECORE_BIN={} is not an executable file",
            bin.display()
        )),
        Err(e) => Err(format!("EDGECORE_BIN={}: {e}", bin.display())),
    }
}

/// An xz-compressed edgecore: `$EDGECORE_XZ`, else the newest `edgecore-*.xz` in [`peer_dir`].
///
/// # Errors
/// Why none is there, and how to get an edgecore instead.
pub fn edgecore_archive() -> Result<PathBuf, String> {
    if let Some(xz) = std::env::var_os("EDGECORE_XZ") {
        let xz = PathBuf::from(xz);
        return match xz.is_file() {
            true => Ok(xz),
            false => Err(format!("EDGECORE_XZ={} is not a file", xz.display())),
        };
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(peer_dir())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("edgecore-") && n.ends_with(".xz"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .ok_or_else(|| format!("no edgecore binary (EDGECORE_BIN unset); {RELEASE_HINT}"))
}
