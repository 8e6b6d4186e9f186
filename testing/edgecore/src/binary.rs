//! Finding, unpacking and verifying the edgecore binary, and finding our cloudcore binary.
//!
//! The edgecore is, in order: `$EDGECORE_BIN` (an unpacked binary, e.g. `edge/edgecore` from
//! KubeEdge's official release archive), `$EDGECORE_XZ`, or the newest `edgecore-*.xz` in the
//! `shared/peers/edgecore` folder beside the repository (where the project's development
//! machines keep the build the suite is written against); the lookup is
//! [`test_tiers::edgecore_source`], which the tests' tier check uses too.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// sha256 of the unpacked edgecore the suite is written against (KubeEdge v1.23.0-beta.0 +150,
/// commit `16cd8548`); `EDGECORE_SHA256` overrides it for another build. A binary given by
/// `EDGECORE_BIN` is checked only against `EDGECORE_SHA256`, when that is set.
pub const EDGECORE_SHA256: &str =
    "b50771d1923c464e63fcc797c87e07048f888f3c19b3043ccf5bf19e0cd8c28a";

/// The edgecore version string that binary reports (`edgecoreVersion` in its config).
pub const EDGECORE_VERSION: &str = "v1.23.0-beta.0.150+16cd8548eedb81";

/// Where peer files live: the folder of `$EDGECORE_XZ`, else `shared/peers/edgecore` beside
/// the repository ([`test_tiers::peer_dir`]).
pub fn peer_dir() -> PathBuf {
    test_tiers::peer_dir()
}

/// The compressed binary: `$EDGECORE_XZ`, else the newest `edgecore-*.xz` in [`peer_dir`]
/// ([`test_tiers::edgecore_archive`]).
///
/// # Errors
/// [`Error::EdgecoreMissing`] saying where to get one.
pub fn archive() -> Result<PathBuf> {
    test_tiers::edgecore_archive().map_err(Error::EdgecoreMissing)
}

/// The config template (`edgecore.yaml`, with `@EDGECORE_HOME@` and `@TOKEN@`): the one beside
/// the archive when there is one, else this crate's copy.
pub fn config_template() -> Result<String> {
    let beside = std::env::var_os("EDGECORE_BIN")
        .is_none()
        .then(|| archive().ok())
        .flatten()
        .and_then(|a| a.parent().map(|d| d.join("edgecore.yaml")))
        .filter(|t| t.is_file());
    let path =
        beside.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("edgecore.yaml"));
    std::fs::read_to_string(&path)
        .map_err(|e| Error::EdgecoreMissing(format!("template {}: {e}", path.display())))
}

/// `$EDGECORE_BIN`, checked: a file, executable, and matching `$EDGECORE_SHA256` when set.
fn given_binary(bin: PathBuf) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&bin)
        .map_err(|e| Error::EdgecoreMissing(format!("EDGECORE_BIN={}: {e}", bin.display())))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(Error::EdgecoreMissing(format!(
            "EDGECORE_BIN={} is not an executable file",
            bin.display()
        )));
    }
    if let Ok(expected) = std::env::var("EDGECORE_SHA256") {
        let actual = sha256_file(&bin).map_err(|e| Error::io(&bin, e))?;
        if actual != expected {
            return Err(Error::Checksum {
                file: bin.display().to_string(),
                expected,
                actual,
            });
        }
    }
    Ok(bin)
}

/// The cache folder for the unpacked binary, outside the repository:
/// `$XDG_CACHE_HOME/cloudcore-edgecore`, else `$HOME/.cache/cloudcore-edgecore`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cloudcore-edgecore")
}

fn expected_sha256() -> String {
    std::env::var("EDGECORE_SHA256").unwrap_or_else(|_| EDGECORE_SHA256.to_owned())
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn unpack(archive: &Path, cache: &Path, target: &Path, sha: &str) -> Result<()> {
    std::fs::create_dir_all(cache).map_err(|e| Error::io(cache, e))?;
    let stem = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("binary");
    let tmp = cache.join(format!("{stem}.{}.tmp", std::process::id()));
    let out = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let status = Command::new("xz")
        .arg("-dc")
        .arg(archive)
        .stdout(out)
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::XzMissing(e.to_string())
        })?;
    if !status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::XzFailed(format!(
            "xz -dc {} {status}",
            archive.display()
        )));
    }
    let actual = sha256_file(&tmp).map_err(|e| Error::io(&tmp, e))?;
    if actual != sha {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Checksum {
            file: archive.display().to_string(),
            expected: sha.to_owned(),
            actual,
        });
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(&tmp, e))?;
    // Atomic: a concurrent test binary either sees no file or the whole verified one.
    std::fs::rename(&tmp, target).map_err(|e| Error::io(target, e))
}

/// The edgecore binary: `$EDGECORE_BIN` as it is, else unpacked from [`archive`] into
/// [`cache_dir`] on first use and verified against [`EDGECORE_SHA256`]. The cached file is
/// named by its hash, so a cache hit is the verified binary; later calls in the same process
/// return the same path.
///
/// # Errors
/// [`Error::EdgecoreMissing`], [`Error::XzMissing`], [`Error::XzFailed`] or
/// [`Error::Checksum`], each naming what is missing or wrong.
pub fn edgecore() -> Result<PathBuf> {
    static BIN: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("EDGECORE_BIN") {
            return given_binary(PathBuf::from(bin)).map_err(|e| e.to_string());
        }
        let sha = expected_sha256();
        let cache = cache_dir();
        let target = cache.join(format!("edgecore-{}", &sha[..sha.len().min(16)]));
        if target.is_file() {
            return Ok(target);
        }
        let archive = archive().map_err(|e| e.to_string())?;
        unpack(&archive, &cache, &target, &sha).map_err(|e| e.to_string())?;
        Ok(target)
    })
    .clone()
    .map_err(Error::Unpack)
}

/// sha256 of the unpacked keadm the node-job tests are written against (the same KubeEdge
/// commit as [`EDGECORE_SHA256`]); `KEADM_SHA256` overrides it.
pub const KEADM_SHA256: &str = "bb24d61a5c21185a1f51afa777a1b9dda15916a70f96b3691fc4f5324dba7e51";

/// The keadm binary (node jobs run it on the edge): `$KEADM_BIN` as it is, else unpacked from
/// `$KEADM_XZ`, or the one `keadm-*.xz` in `shared/peers/keadm` beside the repository, into
/// [`cache_dir`] on first use and verified against [`KEADM_SHA256`].
///
/// # Errors
/// [`Error::KeadmMissing`], [`Error::XzMissing`], [`Error::XzFailed`] or [`Error::Checksum`].
pub fn keadm() -> Result<PathBuf> {
    static BIN: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("KEADM_BIN") {
            let bin = PathBuf::from(bin);
            return match bin.is_file() {
                true => Ok(bin),
                false => Err(format!("KEADM_BIN={} is not a file", bin.display())),
            };
        }
        let sha = std::env::var("KEADM_SHA256").unwrap_or_else(|_| KEADM_SHA256.to_owned());
        let cache = cache_dir();
        let target = cache.join(format!("keadm-{}", &sha[..sha.len().min(16)]));
        if target.is_file() {
            return Ok(target);
        }
        let archive = keadm_archive().map_err(|e| e.to_string())?;
        unpack(&archive, &cache, &target, &sha).map_err(|e| e.to_string())?;
        Ok(target)
    })
    .clone()
    .map_err(Error::Unpack)
}

fn keadm_archive() -> Result<PathBuf> {
    if let Some(xz) = std::env::var_os("KEADM_XZ") {
        return Ok(PathBuf::from(xz));
    }
    // The peers live side by side: edgecore/ and keadm/.
    let dir = peer_dir()
        .parent()
        .map(|p| p.join("keadm"))
        .unwrap_or_default();
    let found = std::fs::read_dir(&dir)
        .map_err(|e| {
            Error::KeadmMissing(format!(
                "{}: {e} (set KEADM_BIN to a keadm binary, or KEADM_XZ to a keadm-*.xz)",
                dir.display()
            ))
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("keadm-") && n.ends_with(".xz"))
        })
        .max();
    found.ok_or_else(|| {
        Error::KeadmMissing(format!(
            "no keadm-*.xz in {} (set KEADM_BIN or KEADM_XZ)",
            dir.display()
        ))
    })
}

/// Our cloudcore binary: `CLOUDCORE_BIN` when set; else `CARGO_BIN_EXE_cloudcore`, which
/// `cargo test` sets for the tests of crate `cloudcore-server` (the binary it has just built);
/// else the newer of the two builds of the same program beside the running executable:
/// `target/<profile>/cloudcore` (`cargo build -p cloudcore-server`) and
/// `target/<profile>/examples/cloudcore` (`cargo build --example cloudcore`). Each is built
/// from the sources of its time, so the newer one is the current code.
///
/// # Errors
/// [`Error::CloudcoreMissing`] with the command that builds it.
pub fn cloudcore() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("CLOUDCORE_BIN") {
        let bin = PathBuf::from(bin);
        return match bin.is_file() {
            true => Ok(bin),
            false => Err(Error::CloudcoreMissing(bin.display().to_string())),
        };
    }
    if let Some(bin) = std::env::var_os("CARGO_BIN_EXE_cloudcore") {
        return Ok(PathBuf::from(bin));
    }
    // target/<profile>/deps/<test> or target/<profile>/examples/<tool> → target/<profile>
    let exe = std::env::current_exe().map_err(|e| Error::CloudcoreMissing(e.to_string()))?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Error::CloudcoreMissing(exe.display().to_string()))?;
    let candidates = [
        profile.join("cloudcore"),
        profile.join("examples/cloudcore"),
    ];
    candidates
        .iter()
        .filter_map(|bin| {
            let modified = std::fs::metadata(bin).ok()?.modified().ok()?;
            bin.is_file().then_some((modified, bin))
        })
        .max()
        .map(|(_, bin)| bin.clone())
        .ok_or_else(|| {
            Error::CloudcoreMissing(format!(
                "{} or {}",
                candidates[0].display(),
                candidates[1].display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_file() {
        let dir = std::env::temp_dir().join(format!("edgecore-interop-sha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("abc");
        std::fs::write(&f, b"abc").unwrap();
        assert_eq!(
            sha256_file(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_peer_archive_unpacks_to_the_expected_binary() {
        test_tiers::require!(Edgecore);
        let dir =
            std::env::temp_dir().join(format!("edgecore-interop-real-{}", std::process::id()));
        let target = match std::env::var_os("EDGECORE_BIN") {
            // A binary given as it is: check that one instead.
            Some(_) => edgecore().unwrap_or_else(|e| panic!("{e}")),
            None => {
                let archive = archive().unwrap_or_else(|e| panic!("{e}"));
                let target = dir.join("edgecore");
                unpack(&archive, &dir, &target, EDGECORE_SHA256).unwrap_or_else(|e| panic!("{e}"));
                target
            }
        };
        // It runs: `--version` wants a config file, `--defaultconfig` does not.
        let out = Command::new(&target)
            .arg("--defaultconfig")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("kind: EdgeCore"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_wrong_checksum_is_refused_and_leaves_no_file() {
        test_tiers::require!(Edgecore);
        let dir = std::env::temp_dir().join(format!("edgecore-interop-xz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("bin");
        std::fs::write(&plain, b"not edgecore").unwrap();
        let status = Command::new("xz")
            .arg("-kf")
            .arg(&plain)
            .status()
            .expect("run xz (apt-get install xz-utils)");
        assert!(status.success());
        let target = dir.join("edgecore-x");
        let err = unpack(&dir.join("bin.xz"), &dir, &target, EDGECORE_SHA256).unwrap_err();
        assert!(matches!(err, Error::Checksum { .. }), "{err}");
        assert!(!target.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
