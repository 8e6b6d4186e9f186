//! PEM text and private keys in any of the formats KubeEdge deployments carry.

use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};

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

/// Every PEM block in `text`, in order, whatever its label. Text outside blocks is ignored,
/// and so is a block with no end line (as upstream's decoder skips it); a block with bad
/// base64 or an end label that differs from its begin label is an error.
pub fn pem_blocks(text: &str) -> Result<Vec<PemBlock>> {
    let blocks = pem::parse_many(text).map_err(|e| Error::Pem(e.to_string()))?;
    Ok(blocks
        .into_iter()
        .map(|block| PemBlock {
            label: block.tag().to_owned(),
            der: block.into_contents(),
        })
        .collect())
}

/// The DER content of the first PEM block of `text` (the label is not checked, as upstream).
pub fn first_pem_der(text: &str) -> Result<Vec<u8>> {
    pem_blocks(text)?
        .into_iter()
        .next()
        .map(|b| b.der)
        .ok_or_else(|| Error::Pem("no PEM block found".into()))
}

/// PEM text for `der` under `label`, 64 base64 characters a line, `\n` line ends.
pub fn to_pem(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(label, der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
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

/// The PEM labels a private key block can carry (encrypted keys are not supported).
pub(crate) const KEY_LABELS: [&str; 3] = ["PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"];

/// True when `data` is PEM text rather than DER (it has a `-----BEGIN` marker).
fn is_pem(data: &[u8]) -> bool {
    data.windows(10).any(|w| w == b"-----BEGIN")
}

/// The PEM blocks of `data`, which must be UTF-8 text.
fn pem_blocks_of(data: &[u8]) -> Result<Vec<PemBlock>> {
    let text = std::str::from_utf8(data).map_err(|e| Error::Pem(format!("not text: {e}")))?;
    pem_blocks(text)
}

/// Certificates from PEM (every `CERTIFICATE` block, in order) or DER (`data` is one
/// certificate), told apart by the `-----BEGIN` marker. Empty input, or PEM without a
/// certificate block, gives an empty list; callers decide whether that is an error.
pub fn load_certificates_pem_or_der(data: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    if !is_pem(data) {
        return Ok(if data.is_empty() {
            Vec::new()
        } else {
            vec![CertificateDer::from(data.to_vec())]
        });
    }
    Ok(pem_blocks_of(data)?
        .into_iter()
        .filter(|b| b.label == "CERTIFICATE")
        .map(|b| CertificateDer::from(b.der))
        .collect())
}

/// [`load_private_key`] on PEM (the first private key block, whatever form its label names)
/// or on DER, told apart by the `-----BEGIN` marker.
pub fn load_private_key_pem_or_der(data: &[u8]) -> Result<PrivateKeyDer<'static>> {
    if !is_pem(data) {
        return load_private_key(data);
    }
    let der = pem_blocks_of(data)?
        .into_iter()
        .find(|b| KEY_LABELS.contains(&b.label.as_str()))
        .ok_or_else(|| Error::Pem("no private key block found".into()))?
        .der;
    load_private_key(&der)
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
        // An unclosed block is no block.
        assert!(pem_blocks("-----BEGIN X-----\nAAAA\n").unwrap().is_empty());
        assert!(first_pem_der("-----BEGIN X-----\nAAAA\n").is_err());
        assert!(pem_blocks("-----BEGIN X-----\n!!!\n-----END X-----\n").is_err());
        assert!(pem_blocks("-----BEGIN X-----\nAAAA\n-----END Y-----\n").is_err());
        assert!(load_private_key(b"not a key").is_err());
        assert!(ec_key_pair(&[0x30, 0x00]).is_err());
    }

    #[test]
    fn pem_or_der_input_is_told_apart() {
        let ca = crate::CertificateAuthority::generate().unwrap();
        let cert_pem = to_pem("CERTIFICATE", ca.cert_der());
        let key_der = generate_ec_key().unwrap();
        // A key file may start with other blocks (parameters) before the key.
        let key_pem = to_pem("EC PARAMETERS", &[6, 0]) + &to_pem("PRIVATE KEY", &key_der);
        let both = cert_pem.clone() + &cert_pem;
        assert_eq!(
            load_certificates_pem_or_der(both.as_bytes()).unwrap().len(),
            2
        );
        let der = load_certificates_pem_or_der(ca.cert_der()).unwrap();
        assert_eq!(der[0].as_ref(), ca.cert_der());
        assert!(load_certificates_pem_or_der(b"").unwrap().is_empty());
        assert!(
            load_certificates_pem_or_der(key_pem.as_bytes())
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            load_private_key_pem_or_der(key_pem.as_bytes()).unwrap(),
            PrivateKeyDer::Sec1(_)
        ));
        assert!(load_private_key_pem_or_der(&key_der).is_ok());
        assert!(load_private_key_pem_or_der(cert_pem.as_bytes()).is_err());
        assert!(load_private_key_pem_or_der(b"").is_err());
    }
}
