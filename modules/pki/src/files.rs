//! Key material on disk: PEM pairs, written once and reused.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::ca::CertAndKey;
use crate::error::{Error, Result};
use crate::keys;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads a certificate and key pair of PEM files: the first `CERTIFICATE` block and the first
/// private key block (`PRIVATE KEY`, `EC PRIVATE KEY` or `RSA PRIVATE KEY`, so that the `EC
/// PARAMETERS` block `openssl ecparam -genkey` writes first is skipped), else the first block
/// of each, since upstream ignores labels. The key may be PKCS#8, SEC1 or PKCS#1, RSA, ECDSA
/// or Ed25519; one rustls cannot use is an error naming the file.
/// `Ok(None)` when neither file exists; an error when only one exists (upstream: fatal) or
/// when a file is unreadable or holds no PEM block.
pub fn read_pem_pair(cert: &Path, key: &Path) -> Result<Option<CertAndKey>> {
    match (cert.exists(), key.exists()) {
        (false, false) => Ok(None),
        (true, true) => {
            let cert_text = fs::read_to_string(cert).map_err(io(cert))?;
            let key_text = fs::read_to_string(key).map_err(io(key))?;
            let key_der = labelled_or_first(&key_text, &keys::KEY_LABELS)?;
            keys::load_private_key(&key_der)
                .map_err(|e| Error::Key(format!("{}: {e}", key.display())))?;
            Ok(Some(CertAndKey {
                cert_der: labelled_or_first(&cert_text, &["CERTIFICATE"])?,
                key_der,
            }))
        }
        (true, false) => Err(Error::Io {
            path: key.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "certificate exists but its key does not",
            ),
        }),
        (false, true) => Err(Error::Io {
            path: cert.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "key exists but its certificate does not",
            ),
        }),
    }
}

/// The first block with one of `labels`, else the first block.
fn labelled_or_first(text: &str, labels: &[&str]) -> Result<Vec<u8>> {
    let mut blocks = keys::pem_blocks(text)?;
    let at = blocks
        .iter()
        .position(|b| labels.contains(&b.label.as_str()))
        .unwrap_or(0);
    if blocks.is_empty() {
        return Err(Error::Pem("no PEM block found".into()));
    }
    Ok(blocks.swap_remove(at).der)
}

/// Writes `text` to `path` atomically (temp file + rename), creating parent directories;
/// `private` files get mode 0600.
pub fn write_file(path: &Path, text: &str, private: bool) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = path.with_extension("tmp");
    {
        let mut options = fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = options.open(&tmp).map_err(io(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io(path))
}

/// Writes a pair as PEM: the certificate as `CERTIFICATE`, the key as `EC PRIVATE KEY` when it
/// is SEC1 DER (`PRIVATE KEY` otherwise), the key with mode 0600.
pub fn write_pem_pair(cert: &Path, key: &Path, pair: &CertAndKey) -> Result<()> {
    let label = match keys::load_private_key(&pair.key_der)? {
        rustls_pki_types::PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
        rustls_pki_types::PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
        _ => "PRIVATE KEY",
    };
    write_file(key, &keys::to_pem(label, &pair.key_der), true)?;
    write_file(cert, &keys::to_pem("CERTIFICATE", &pair.cert_der), false)
}
