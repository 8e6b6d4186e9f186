//! Key files in every PEM form operators have (what openssl, cert-manager and older KubeEdge
//! releases write): PKCS#1, PKCS#8 and SEC1; RSA, ECDSA P-256/P-384 and Ed25519. Each pair
//! made by the real `openssl` loads through `read_pem_pair` and serves a TLS handshake.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Completes a TLS handshake in memory between `server` and a client that accepts any
/// certificate (signatures are still checked, so the key must match the certificate).
fn handshake(server: rustls::ServerConfig) -> Result<(), String> {
    let client = pki::tls::insecure_client_config();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut c = rustls::ClientConnection::new(Arc::new(client), name).map_err(|e| e.to_string())?;
    let mut s = rustls::ServerConnection::new(Arc::new(server)).map_err(|e| e.to_string())?;
    for _ in 0..10 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).map_err(|e| e.to_string())?;
        s.read_tls(&mut &buf[..]).map_err(|e| e.to_string())?;
        s.process_new_packets().map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.write_tls(&mut buf).map_err(|e| e.to_string())?;
        c.read_tls(&mut &buf[..]).map_err(|e| e.to_string())?;
        c.process_new_packets().map_err(|e| e.to_string())?;
        if !c.is_handshaking() && !s.is_handshaking() {
            return Ok(());
        }
    }
    Err("handshake did not finish".into())
}

#[test]
fn every_key_form_openssl_writes_loads_and_serves_tls() {
    let dir = Dir(std::env::temp_dir().join(format!("pki-keys-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    // (name, PEM label the file must carry, openssl arguments writing the key to `-out`)
    let forms: [(&str, &str, &[&str]); 7] = [
        (
            "rsa-pkcs1",
            "RSA PRIVATE KEY",
            &["genrsa", "-traditional", "2048"],
        ),
        (
            "rsa-pkcs8",
            "PRIVATE KEY",
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ],
        ),
        (
            "p256-sec1",
            "EC PRIVATE KEY",
            &["ecparam", "-name", "prime256v1", "-genkey"],
        ),
        (
            "p256-pkcs8",
            "PRIVATE KEY",
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ],
        ),
        (
            "p384-sec1",
            "EC PRIVATE KEY",
            &["ecparam", "-name", "secp384r1", "-genkey", "-noout"],
        ),
        (
            "p384-pkcs8",
            "PRIVATE KEY",
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-384",
            ],
        ),
        (
            "ed25519-pkcs8",
            "PRIVATE KEY",
            &["genpkey", "-algorithm", "ed25519"],
        ),
    ];
    for (name, label, args) in forms {
        let key = dir.0.join(format!("{name}.key"));
        let cert = dir.0.join(format!("{name}.crt"));
        // `-out` right after the command: genrsa takes the key size last.
        let mut cmd: Vec<&str> = vec![args[0], "-out", path(&key)];
        cmd.extend(&args[1..]);
        openssl(&cmd);
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            path(&key),
            "-subj",
            "/CN=localhost",
            "-days",
            "1",
            "-out",
            path(&cert),
        ]);
        let text = std::fs::read_to_string(&key).unwrap();
        assert!(
            text.contains(&format!("-----BEGIN {label}-----")),
            "{name}: {text}"
        );
        let pair = pki::read_pem_pair(&cert, &key)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .expect("both files exist");
        assert!(
            pki::load_private_key_pem_or_der(text.as_bytes()).is_ok(),
            "{name}"
        );
        let server = pki::tls::server_config_optional_client(&pair.cert_der, &pair.key_der)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        handshake(server).unwrap_or_else(|e| panic!("{name}: handshake: {e}"));
        // Written back and read again, the key keeps its form.
        let copy = (
            dir.0.join(format!("{name}-2.crt")),
            dir.0.join(format!("{name}-2.key")),
        );
        pki::write_pem_pair(&copy.0, &copy.1, &pair).unwrap();
        let again = pki::read_pem_pair(&copy.0, &copy.1).unwrap().unwrap();
        assert_eq!(again, pair, "{name}");
    }
}

#[test]
fn a_key_that_does_not_parse_is_refused_naming_its_file() {
    let dir = Dir(std::env::temp_dir().join(format!("pki-badkey-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (cert, key) = (dir.0.join("c.crt"), dir.0.join("c.key"));
    let ca = pki::CertificateAuthority::generate().unwrap();
    std::fs::write(&cert, ca.cert_pem()).unwrap();
    std::fs::write(&key, pki::to_pem("PRIVATE KEY", b"not a key")).unwrap();
    let err = pki::read_pem_pair(&cert, &key).unwrap_err().to_string();
    assert!(err.contains(path(&key)), "{err}");
    // A certificate without its key (and the reverse) is an error, not a fallback.
    std::fs::remove_file(&key).unwrap();
    assert!(pki::read_pem_pair(&cert, &key).is_err());
    assert!(pki::read_pem_pair(&key, &cert).is_err());
}
