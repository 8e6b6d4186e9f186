//! PEM text and private keys in any of the formats KubeEdge deployments carry.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};

use crate::der;
use crate::error::{Error, Result};

/// One PEM block: its label (`CERTIFICATE`, `EC PRIVATE KEY`, …) and DER content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBlock {
    /// The word(s) after `BEGIN`.
    pub label: String,
    /// The decoded content.
    pub der: Vec<u8>,
}

/// Every PEM block in `text`, in order. Text outside blocks is ignored; a block with bad
/// base64 or no end line is an error.
pub fn pem_blocks(text: &str) -> Result<Vec<PemBlock>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            let l = l.trim();
            if l == end {
                closed = true;
                break;
            }
            // Encrypted-PEM headers ("Proc-Type: …") are not supported: they fail the decode.
            body.push_str(l);
        }
        if !closed {
            return Err(Error::Pem(format!("no end line for {label}")));
        }
        let der = STANDARD
            .decode(body.as_bytes())
            .map_err(|e| Error::Pem(format!("{label}: {e}")))?;
        blocks.push(PemBlock {
            label: label.to_owned(),
            der,
        });
    }
    Ok(blocks)
}

/// The DER content of the first PEM block of `text` (the label is not checked, as upstream).
pub fn first_pem_der(text: &str) -> Result<Vec<u8>> {
    pem_blocks(text)?
        .into_iter()
        .next()
        .map(|b| b.der)
        .ok_or_else(|| Error::Pem("no PEM block found".into()))
}

/// PEM text for `der` under `label`, 64 base64 characters a line.
pub fn to_pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Parses private key DER whatever its PEM label said: tries PKCS#8, then SEC1
/// (`EC PRIVATE KEY`), then PKCS#1 (`RSA PRIVATE KEY`), and returns the first form rustls can
/// sign with. Upstream stores SEC1 DER under the label `PRIVATE KEY`, so the label is no guide.
pub fn load_private_key(der: &[u8]) -> Result<PrivateKeyDer<'static>> {
    let candidates = [
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der.to_vec())),
        PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der.to_vec())),
        PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der.to_vec())),
    ];
    for key in candidates {
        if rustls::crypto::ring::sign::any_supported_type(&key).is_ok() {
            return Ok(key);
        }
    }
    Err(Error::Key(
        "not a PKCS#8, SEC1 or PKCS#1 key rustls can use".into(),
    ))
}

/// [`load_private_key`] on the first PEM block of `text`.
pub fn load_private_key_pem(text: &str) -> Result<PrivateKeyDer<'static>> {
    load_private_key(&first_pem_der(text)?)
}

/// An rcgen signing key from P-256 key DER in PKCS#8 or SEC1 form.
pub(crate) fn ec_key_pair(der: &[u8]) -> Result<rcgen::KeyPair> {
    let pkcs8 = match load_private_key(der)? {
        PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Sec1(k) => der::sec1_to_pkcs8(k.secret_sec1_der())?,
        _ => return Err(Error::Key("only ECDSA P-256 keys can sign here".into())),
    };
    let pkcs8 = PrivatePkcs8KeyDer::from(pkcs8);
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| Error::Key(format!("not an ECDSA P-256 key: {e}")))
}

/// A fresh ECDSA P-256 key as SEC1 DER (the form upstream stores).
pub fn generate_ec_key() -> Result<Vec<u8>> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    der::pkcs8_to_sec1(&key.serialize_der())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trips_and_ignores_the_label() {
        let sec1 = generate_ec_key().unwrap();
        // Upstream writes SEC1 DER under the PKCS#8 label.
        let text = to_pem("PRIVATE KEY", &sec1);
        let key = load_private_key_pem(&text).unwrap();
        assert!(matches!(key, PrivateKeyDer::Sec1(_)));
        assert!(ec_key_pair(&sec1).is_ok());
        let pkcs8 = rcgen::KeyPair::generate().unwrap().serialize_der();
        let text = to_pem("EC PRIVATE KEY", &pkcs8);
        assert!(matches!(
            load_private_key_pem(&text).unwrap(),
            PrivateKeyDer::Pkcs8(_)
        ));
        assert!(ec_key_pair(&pkcs8).is_ok());
    }

    #[test]
    fn bad_pem_and_bad_keys_are_errors() {
        assert!(first_pem_der("nothing here").is_err());
        assert!(pem_blocks("-----BEGIN X-----\nAAAA\n").is_err());
        assert!(pem_blocks("-----BEGIN X-----\n!!!\n-----END X-----\n").is_err());
        assert!(load_private_key(b"not a key").is_err());
        assert!(ec_key_pair(&[0x30, 0x00]).is_err());
    }
}
