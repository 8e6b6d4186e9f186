//! TLS material (PEM or DER, any key format) and the rustls configurations of cloudstream's
//! tunnel and stream server and of the edge's tunnel client. Unlike [`crate::tls`] (the hub's
//! ECDSA-only configurations) these take any certificate the API server or an operator's files
//! hold.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};

use crate::tls::{any_server_cert_verifier, root_store};

/// Errors loading TLS material or building a configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No certificate in the given input (upstream panics on this).
    #[error("no certificate found in the {0}")]
    NoCertificate(&'static str),
    /// No usable private key (tried PKCS#8, SEC1 and PKCS#1).
    #[error("no usable private key found")]
    NoKey,
    /// rustls refused the material.
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built (e.g. an empty CA).
    #[error("client verifier: {0}")]
    Verifier(String),
}

/// A certificate chain, its key and the CA that verifies peers.
pub struct TlsMaterial {
    /// Leaf first.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
    /// Trust anchors for peer certificates.
    pub ca: Vec<CertificateDer<'static>>,
}

impl Clone for TlsMaterial {
    fn clone(&self) -> Self {
        TlsMaterial {
            cert_chain: self.cert_chain.clone(),
            key: self.key.clone_key(),
            ca: self.ca.clone(),
        }
    }
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("cert_chain", &self.cert_chain.len())
            .field("ca", &self.ca.len())
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// From bytes that are each PEM or DER (detected by the `-----BEGIN` marker).
    pub fn from_bytes(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<Self, TlsError> {
        Ok(TlsMaterial {
            cert_chain: certificates(cert, "certificate")?,
            key: private_key(key)?,
            ca: certificates(ca, "CA")?,
        })
    }

    /// From three files, each PEM or DER.
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TlsError> {
        TlsMaterial::from_bytes(&read(cert)?, &read(key)?, &read(ca)?)
    }
}

/// Server TLS as the composer hands it over: material, or a ready configuration.
#[derive(Debug, Clone)]
pub enum ServerTls {
    /// Build the configuration from this material (client certificates verified against
    /// its CA when the server asks for verification).
    Material(TlsMaterial),
    /// Use this configuration as is.
    Config(Arc<ServerConfig>),
}

/// Reads a file.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Certificates from PEM (every `CERTIFICATE` block) or one DER certificate; `what` names
/// the input in the error when there is none.
pub fn certificates(
    data: &[u8],
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    match crate::load_certificates_pem_or_der(data) {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        _ => Err(TlsError::NoCertificate(what)),
    }
}

/// A private key from PEM (any key block, whatever its label says) or DER, trying PKCS#8,
/// then SEC1, then PKCS#1: cloudhub writes SEC1 DER under a `PRIVATE KEY` label.
pub fn private_key(data: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    crate::load_private_key_pem_or_der(data).map_err(|_| TlsError::NoKey)
}

/// The crypto provider every configuration here uses (ring with all its suites, unlike
/// [`crate::tls::provider`], since the API server's certificates need not be ECDSA), chosen
/// explicitly so that no process-wide default is needed. AES-128-GCM comes first, as in Go's
/// own order on CPUs with AES instructions (what edgecore and the API server offer): every
/// relayed byte is encrypted and decrypted twice, and it takes 10 AES rounds to AES-256's 14.
pub fn provider() -> Arc<CryptoProvider> {
    use rustls::CipherSuite as C;
    let mut p = rustls::crypto::ring::default_provider();
    // Stable: the other suites keep their order.
    p.cipher_suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            C::TLS13_AES_128_GCM_SHA256
                | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    });
    Arc::new(p)
}

/// A server configuration: TLS 1.2 and 1.3, ALPN `http/1.1` only, and client certificates
/// required and verified against `material.ca` (chain and EKU clientAuth-or-none, as Go's
/// `RequireAndVerifyClientCert`) when `verify_clients` is set.
pub fn server_config(
    material: &TlsMaterial,
    verify_clients: bool,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = if verify_clients {
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(root_store(&material.ca)?),
            provider,
        )
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config =
        builder.with_single_cert(material.cert_chain.clone(), material.key.clone_key())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The subject common name of a DER certificate when its subject has exactly one (a
/// certificate with several CNs names no one: Go's x509 reads the last, others the first).
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    crate::parse_identity(cert.as_ref()).ok()?.common_name
}

/// A client configuration presenting `cert_chain`/`key`, with no ALPN (as gorilla). With
/// `server_ca` the server is verified against it; without, any server certificate is taken
/// (upstream edgestream's `InsecureSkipVerify`), though handshake signatures are still checked.
pub fn client_config(
    cert_chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    server_ca: Option<&[CertificateDer<'static>]>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match server_ca {
        Some(ca) => builder.with_root_certificates(root_store(ca)?),
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(any_server_cert_verifier()),
    };
    Ok(Arc::new(builder.with_client_auth_cert(cert_chain, key)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::CipherSuite as C;

    #[test]
    fn provider_should_prefer_aes_128_gcm_and_keep_every_suite() {
        let ours: Vec<_> = provider().cipher_suites.iter().map(|s| s.suite()).collect();
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(ours[0], C::TLS13_AES_128_GCM_SHA256);
        assert_eq!(ours.len(), ring.cipher_suites.len());
        for s in &ring.cipher_suites {
            assert!(ours.contains(&s.suite()), "{:?} dropped", s.suite());
        }
    }
}
