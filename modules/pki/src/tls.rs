//! rustls configurations for the hub (server) and the edge (client) sides.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::error::{Error, Result};
use crate::keys;
use crate::revocation::Revocations;

/// The ring provider restricted to what upstream allows: the TLS 1.3 suites and, for TLS 1.2,
/// only ECDHE-ECDSA with AES-GCM or ChaCha20 (the generated keys are ECDSA P-256).
/// TLS_AES_128_GCM_SHA256 is offered first, as Go's edgecore does: SHA-256 runs on the
/// CPU's SHA instructions where SHA-384 does not, which makes every handshake cheaper on
/// both sides (ring's default offers TLS_AES_256_GCM_SHA384 first).
pub fn provider() -> Arc<CryptoProvider> {
    use rustls::CipherSuite as C;
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.retain(|s: &SupportedCipherSuite| match s {
        SupportedCipherSuite::Tls13(_) => true,
        SupportedCipherSuite::Tls12(_) => matches!(
            s.suite(),
            C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
                | C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        ),
    });
    p.cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// A root store of `ca` (every certificate a trust anchor); shared with cloudstream, whose
/// CA files may hold several.
pub fn root_store(
    ca: &[CertificateDer<'static>],
) -> std::result::Result<RootCertStore, rustls::Error> {
    let mut store = RootCertStore::empty();
    for c in ca {
        store.add(c.clone())?;
    }
    Ok(store)
}

fn roots(ca_der: &[u8]) -> Result<Arc<RootCertStore>> {
    root_store(&chain(ca_der))
        .map(Arc::new)
        .map_err(|e| Error::Certificate(format!("CA: {e}")))
}

/// webpki verification of client certificates against `ca_der` (chain, validity, clientAuth).
pub(crate) fn client_verifier(ca_der: &[u8]) -> Result<Arc<dyn ClientCertVerifier>> {
    WebPkiClientVerifier::builder_with_provider(roots(ca_der)?, provider())
        .build()
        .map_err(|e| Error::Certificate(format!("client verifier: {e}")))
}

/// A verifier that takes any server certificate but still checks handshake signatures (with
/// ring's algorithms), so the peer holds the key it presents.
pub fn any_server_cert_verifier() -> Arc<dyn ServerCertVerifier> {
    Arc::new(AnyCert::new())
}

fn chain(cert_der: &[u8]) -> Vec<CertificateDer<'static>> {
    vec![CertificateDer::from(cert_der.to_vec())]
}

fn server_builder() -> Result<rustls::ConfigBuilder<ServerConfig, rustls::WantsVerifier>> {
    ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(Error::Tls)
}

fn client_builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>> {
    ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(Error::Tls)
}

/// The WebSocket listener's TLS: TLS 1.2+, the server certificate, and a client certificate
/// that is **required** and verified against the CA (chain, validity, clientAuth EKU) during
/// the handshake; without one the handshake fails and no HTTP is ever spoken. No ALPN.
pub fn server_config_mutual(
    ca_der: &[u8],
    cert_der: &[u8],
    key_der: &[u8],
) -> Result<ServerConfig> {
    let config = server_builder()?
        .with_client_cert_verifier(client_verifier(ca_der)?)
        .with_single_cert(chain(cert_der), keys::load_private_key(key_der)?)
        .map_err(Error::Tls)?;
    Ok(config)
}

/// [`server_config_mutual`] that also refuses client certificates revoked in `revocations`
/// (read at every handshake, so later revocations apply to new connections at once). A
/// revoked certificate fails the handshake with the `certificate_revoked` alert. Session
/// resumption is off: a resumed session skips certificate verification, so it could
/// outlive a revocation.
pub fn server_config_mutual_revocable(
    ca_der: &[u8],
    cert_der: &[u8],
    key_der: &[u8],
    revocations: &Revocations,
) -> Result<ServerConfig> {
    let verifier = revocation_checking_verifier(client_verifier(ca_der)?, revocations.clone());
    let mut config = server_builder()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain(cert_der), keys::load_private_key(key_der)?)
        .map_err(Error::Tls)?;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(config)
}

/// Wraps `inner` so that a client certificate it accepts is then checked against
/// `revocations` ([`Revocations::check`]); a revoked one fails with
/// `CertificateError::Revoked` (alert `certificate_revoked`) and a warning log naming the
/// node; while `revocations` is pending, every one fails (alert `access_denied`). Resumed
/// sessions are not verified again: turn resumption off where this matters (as
/// [`server_config_mutual_revocable`] does) or check the peer certificate after the
/// handshake too. For any listener that accepts edge certificates (hub, tunnel).
pub fn revocation_checking_verifier(
    inner: Arc<dyn ClientCertVerifier>,
    revocations: Revocations,
) -> Arc<dyn ClientCertVerifier> {
    Arc::new(RevocationChecking { inner, revocations })
}

#[derive(Debug)]
struct RevocationChecking {
    inner: Arc<dyn ClientCertVerifier>,
    revocations: Revocations,
}

impl ClientCertVerifier for RevocationChecking {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if let Err(e) = self.revocations.check(end_entity) {
            tracing::warn!(error = %e, "tls handshake refused: client certificate revoked or revocations unknown");
            return Err(rustls::Error::InvalidCertificate(match e {
                Error::Revoked { .. } => rustls::CertificateError::Revoked,
                _ => rustls::CertificateError::ApplicationVerificationFailure,
            }));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The certificate server's TLS: a client certificate is requested but neither required nor
/// checked against any CA here (handshake signatures still are, so the peer holds the key);
/// handlers verify it with [`crate::CertificateAuthority::verify_client_cert`], so an
/// untrusted certificate gets HTTP 401 instead of a TLS alert.
pub fn server_config_optional_client(cert_der: &[u8], key_der: &[u8]) -> Result<ServerConfig> {
    server_builder()?
        .with_client_cert_verifier(Arc::new(AnyCert::new()))
        .with_single_cert(chain(cert_der), keys::load_private_key(key_der)?)
        .map_err(Error::Tls)
}

/// An edge client's TLS: verifies the server against `ca_der` (as the real edge does, by the
/// host of the address it dials) and presents `client` (certificate DER, key DER) if given.
pub fn client_config(ca_der: &[u8], client: Option<(&[u8], &[u8])>) -> Result<ClientConfig> {
    let builder = client_builder()?.with_root_certificates(roots(ca_der)?);
    match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(chain(cert), keys::load_private_key(key)?)
            .map_err(Error::Tls),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A client TLS that accepts any server certificate (handshake signatures are still checked).
/// **Insecure**: anyone on the network path can pose as the server. Meant for `GET /ca.crt`
/// during bootstrap, whose answer is then checked against the token's CA hash (as the real
/// edge), and for callers that explicitly opt out of verification.
pub fn insecure_client_config() -> ClientConfig {
    client_builder()
        .unwrap_or_else(|_| unreachable!("the ring provider supports TLS 1.2 and 1.3"))
        .dangerous()
        .with_custom_certificate_verifier(any_server_cert_verifier())
        .with_no_client_auth()
}

/// [`insecure_client_config`] presenting `client` (certificate DER, key DER) if given.
/// **Insecure**: the server is not verified; only for callers that explicitly opt out.
pub fn insecure_client_config_with(client: Option<(&[u8], &[u8])>) -> Result<ClientConfig> {
    let builder = client_builder()?
        .dangerous()
        .with_custom_certificate_verifier(any_server_cert_verifier());
    match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(chain(cert), keys::load_private_key(key)?)
            .map_err(Error::Tls),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Accepts any certificate chain, from a client or a server; handshake signatures are still
/// checked, so the peer holds the key of the certificate it presents.
#[derive(Debug)]
struct AnyCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl AnyCert {
    fn new() -> Self {
        AnyCert {
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

/// The signature checks both verifier traits declare, done for real with `self.algorithms`.
macro_rules! real_signature_checks {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
}

impl ClientCertVerifier for AnyCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    real_signature_checks!();
}

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    real_signature_checks!();
}
