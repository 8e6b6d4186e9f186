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

/// Reads a certificate and key pair of PEM files (first block of each, labels ignored).
/// `Ok(None)` when neither file exists; an error when only one exists (upstream: fatal) or
/// when a file is unreadable or holds no PEM block.
pub fn read_pem_pair(cert: &Path, key: &Path) -> Result<Option<CertAndKey>> {
    match (cert.exists(), key.exists()) {
        (false, false) => Ok(None),
        (true, true) => {
            let cert_text = fs::read_to_string(cert).map_err(io(cert))?;
            let key_text = fs::read_to_string(key).map_err(io(key))?;
            Ok(Some(CertAndKey {
                cert_der: keys::first_pem_der(&cert_text)?,
                key_der: keys::first_pem_der(&key_text)?,
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
