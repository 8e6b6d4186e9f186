//! The KubeEdge CA: generation, loading, and the certificates it issues.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls_pki_types::{CertificateDer, CertificateSigningRequestDer, UnixTime};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::identity::{self, NODE_CN_PREFIX, NODES_ORGANIZATION, PeerIdentity};
use crate::keys;

/// Validity of the generated CA and cloudcore certificates (upstream: 36 400 days).
pub const CA_VALIDITY_DAYS: i64 = 36_400;
/// Serial number of a generated CA (upstream constant).
pub const CA_SERIAL: u64 = 1024;
/// Common name of the generated CA and server certificate.
pub const KUBEEDGE_CN: &str = "KubeEdge";

/// An extended key usage as Go's `x509.ExtKeyUsage` number (the `ExtKeyUsages` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtKeyUsage {
    /// 0
    Any,
    /// 1
    ServerAuth,
    /// 2
    ClientAuth,
    /// 3
    CodeSigning,
    /// 4
    EmailProtection,
    /// 8
    TimeStamping,
    /// 9
    OcspSigning,
}

impl ExtKeyUsage {
    /// The usage for Go's number; `None` for numbers rcgen cannot encode (IPsec 5–7, vendor).
    pub fn from_go(n: i64) -> Option<Self> {
        Some(match n {
            0 => ExtKeyUsage::Any,
            1 => ExtKeyUsage::ServerAuth,
            2 => ExtKeyUsage::ClientAuth,
            3 => ExtKeyUsage::CodeSigning,
            4 => ExtKeyUsage::EmailProtection,
            8 => ExtKeyUsage::TimeStamping,
            9 => ExtKeyUsage::OcspSigning,
            _ => return None,
        })
    }

    fn to_rcgen(self) -> ExtendedKeyUsagePurpose {
        match self {
            ExtKeyUsage::Any => ExtendedKeyUsagePurpose::Any,
            ExtKeyUsage::ServerAuth => ExtendedKeyUsagePurpose::ServerAuth,
            ExtKeyUsage::ClientAuth => ExtendedKeyUsagePurpose::ClientAuth,
            ExtKeyUsage::CodeSigning => ExtendedKeyUsagePurpose::CodeSigning,
            ExtKeyUsage::EmailProtection => ExtendedKeyUsagePurpose::EmailProtection,
            ExtKeyUsage::TimeStamping => ExtendedKeyUsagePurpose::TimeStamping,
            ExtKeyUsage::OcspSigning => ExtendedKeyUsagePurpose::OcspSigning,
        }
    }
}

/// What the CA allows when signing an edge CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignPolicy {
    /// Validity of issued certificates in days (`edgeCertSigningDuration`, default 365);
    /// a notAfter beyond 9999-12-31 (what X.509 can express) is clamped to it.
    pub validity_days: u32,
    /// Extended key usages a request may ask for besides clientAuth. Empty (the default)
    /// means every certificate gets clientAuth only, whatever the request says.
    pub allowed_ext_key_usages: Vec<ExtKeyUsage>,
}

impl Default for SignPolicy {
    fn default() -> Self {
        SignPolicy {
            validity_days: 365,
            allowed_ext_key_usages: Vec::new(),
        }
    }
}

/// A certificate and its private key, both DER (the key as SEC1 `EC PRIVATE KEY`).
#[derive(Clone, PartialEq, Eq)]
pub struct CertAndKey {
    /// The certificate.
    pub cert_der: Vec<u8>,
    /// The private key (SEC1 DER).
    pub key_der: Vec<u8>,
}

impl fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert_der", &format_args!("{} bytes", self.cert_der.len()))
            .finish_non_exhaustive()
    }
}

/// Subject and usages of a certificate issued directly (tests, load tools, own clients).
#[derive(Debug, Clone)]
pub struct IssueOptions {
    /// Subject common name.
    pub common_name: String,
    /// Subject organisations (empty: none).
    pub organizations: Vec<String>,
    /// Extended key usages (empty: no EKU extension at all).
    pub ext_key_usages: Vec<ExtKeyUsage>,
    /// Validity in days.
    pub validity_days: u32,
}

impl IssueOptions {
    /// What a real edge's certificate looks like: `CN=system:node:<node>`, `O=system:nodes`,
    /// clientAuth.
    pub fn edge(node: &str) -> Self {
        IssueOptions {
            common_name: format!("{NODE_CN_PREFIX}{node}"),
            organizations: vec![NODES_ORGANIZATION.to_owned()],
            ext_key_usages: vec![ExtKeyUsage::ClientAuth],
            validity_days: 365,
        }
    }
}

/// The KubeEdge certificate authority. Cheap to clone; safe to share between threads.
#[derive(Clone)]
pub struct CertificateAuthority {
    inner: Arc<Inner>,
}

struct Inner {
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("sha256", &self.cert_sha256_hex())
            .finish_non_exhaustive()
    }
}

fn random_serial() -> SerialNumber {
    // Upstream: random in [0, 2^63).
    SerialNumber::from(rand::random::<u64>() >> 1)
}

/// The latest notAfter X.509 can express, 9999-12-31T23:59:59Z (RFC 5280's "no
/// well-defined expiration date"), as a Unix timestamp.
const LATEST_NOT_AFTER: i64 = 253_402_300_799;

/// `now + days`, clamped to what X.509 can encode: a huge configured duration yields a
/// certificate valid until 9999-12-31 instead of an arithmetic overflow.
fn not_after(now: OffsetDateTime, days: i64) -> OffsetDateTime {
    let end = now
        .unix_timestamp()
        .saturating_add(days.max(0).saturating_mul(86_400))
        .min(LATEST_NOT_AFTER);
    // In range by construction (between now and year 9999); `now` is a harmless fallback.
    OffsetDateTime::from_unix_timestamp(end).unwrap_or(now)
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = not_after(now, days);
}

fn dn(common_name: &str, organizations: &[String]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in organizations {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

impl CertificateAuthority {
    /// Generates a CA exactly as upstream: ECDSA P-256, self-signed, serial 1024,
    /// `CN=KubeEdge`, valid 36 400 days from now, key usages certSign, digitalSignature and
    /// keyEncipherment, EKU serverAuth and clientAuth, `CA:true`.
    pub fn generate() -> Result<Self> {
        let key_der = keys::generate_ec_key()?;
        let key = keys::ec_key_pair(&key_der)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(KUBEEDGE_CN, &[]);
        params.serial_number = Some(SerialNumber::from(CA_SERIAL));
        validity(&mut params, CA_VALIDITY_DAYS);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key)?;
        let cert_der = cert.der().to_vec();
        Self::from_der(cert_der, key_der)
    }

    /// A CA from certificate DER and key DER (PKCS#8 or SEC1; P-256 only, as upstream).
    /// The key bytes are kept exactly as given: they are the bootstrap token's HMAC secret.
    pub fn from_der(cert_der: Vec<u8>, key_der: Vec<u8>) -> Result<Self> {
        let key = keys::ec_key_pair(&key_der)?;
        identity::parse(&cert_der)?;
        let issuer = Issuer::from_ca_cert_der(&CertificateDer::from(cert_der.as_slice()), key)
            .map_err(|e| Error::Certificate(format!("CA certificate: {e}")))?;
        Ok(CertificateAuthority {
            inner: Arc::new(Inner {
                cert_der,
                key_der,
                issuer,
            }),
        })
    }

    /// A CA from PEM text of the certificate and of the key (first block of each).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self> {
        Self::from_der(
            keys::first_pem_der(cert_pem)?,
            keys::first_pem_der(key_pem)?,
        )
    }

    /// The CA certificate DER (what `GET /ca.crt` serves).
    pub fn cert_der(&self) -> &[u8] {
        &self.inner.cert_der
    }

    /// The CA certificate as PEM.
    pub fn cert_pem(&self) -> String {
        keys::to_pem("CERTIFICATE", &self.inner.cert_der)
    }

    /// The CA key DER exactly as stored; also the bootstrap token's HMAC secret.
    pub fn key_der(&self) -> &[u8] {
        &self.inner.key_der
    }

    /// The CA key as PEM (`EC PRIVATE KEY` for SEC1, `PRIVATE KEY` otherwise).
    pub fn key_pem(&self) -> String {
        let label = match keys::load_private_key(&self.inner.key_der) {
            Ok(rustls_pki_types::PrivateKeyDer::Sec1(_)) => "EC PRIVATE KEY",
            _ => "PRIVATE KEY",
        };
        keys::to_pem(label, &self.inner.key_der)
    }

    /// Lowercase hex SHA-256 of the CA certificate DER: the first part of a token.
    pub fn cert_sha256_hex(&self) -> String {
        hex::encode(Sha256::digest(&self.inner.cert_der))
    }

    fn sign(&self, params: &CertificateParams, key: &KeyPair) -> Result<Vec<u8>> {
        Ok(params.signed_by(key, &self.inner.issuer)?.der().to_vec())
    }

    /// The cloudcore server certificate with a fresh key: `CN=KubeEdge, O=KubeEdge`, EKU
    /// serverAuth, valid 36 400 days. Each entry of `addresses` that parses as an IP becomes an
    /// IP SAN, any other non-empty one a DNS SAN; non-empty `dns_names` become DNS SANs (empty
    /// strings are skipped: upstream's default `[""]` would yield an empty SAN).
    pub fn issue_server_cert(
        &self,
        addresses: &[String],
        dns_names: &[String],
    ) -> Result<CertAndKey> {
        let key_der = keys::generate_ec_key()?;
        let key = keys::ec_key_pair(&key_der)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(KUBEEDGE_CN, &[KUBEEDGE_CN.to_owned()]);
        params.serial_number = Some(random_serial());
        validity(&mut params, CA_VALIDITY_DAYS);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        for a in addresses.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            match a.parse::<IpAddr>() {
                Ok(ip) => params.subject_alt_names.push(SanType::IpAddress(ip)),
                Err(_) => params.subject_alt_names.push(dns_san(a)?),
            }
        }
        for d in dns_names.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            params.subject_alt_names.push(dns_san(d)?);
        }
        let cert_der = self.sign(&params, &key)?;
        Ok(CertAndKey { cert_der, key_der })
    }

    /// A certificate with a fresh key for any subject and usages: for Rust edge clients
    /// that skip the CSR round trip, tests and load tools. Not reachable from the network.
    pub fn issue(&self, options: &IssueOptions) -> Result<CertAndKey> {
        let key_der = keys::generate_ec_key()?;
        let key = keys::ec_key_pair(&key_der)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&options.common_name, &options.organizations);
        params.serial_number = Some(random_serial());
        validity(&mut params, i64::from(options.validity_days));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = options
            .ext_key_usages
            .iter()
            .map(|u| u.to_rcgen())
            .collect();
        let cert_der = self.sign(&params, &key)?;
        Ok(CertAndKey { cert_der, key_der })
    }

    /// Signs an edge CSR for `node_name` under `policy`:
    /// the CSR must parse and its self-signature verify; its subject must be exactly
    /// `CN=system:node:<node_name>` with the single organisation `system:nodes` (other subject
    /// parts are dropped, as upstream); requested SANs are dropped; the certificate gets
    /// clientAuth, plus the `requested` usages only when every one of them is allowed by
    /// `policy` (otherwise the request is refused). Never panics on odd subjects or huge
    /// validities (notAfter is clamped to 9999-12-31).
    ///
    /// Errors: [`Error::Csr`] (malformed, bad signature), [`Error::Refused`] (subject or usages).
    pub fn sign_edge_csr(
        &self,
        csr_der: &[u8],
        node_name: &str,
        requested: &[i64],
        policy: &SignPolicy,
    ) -> Result<Vec<u8>> {
        let parsed =
            CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(csr_der))
                .map_err(|e| Error::Csr(e.to_string()))?;
        let subject = identity::parse_csr_subject(csr_der)?;
        let want_cn = format!("{NODE_CN_PREFIX}{node_name}");
        if node_name.is_empty() || subject.common_name.as_deref() != Some(want_cn.as_str()) {
            return Err(Error::Refused(format!(
                "CSR common name {:?} is not {want_cn:?}",
                subject.common_name.unwrap_or_default()
            )));
        }
        if subject.organizations != [NODES_ORGANIZATION] {
            return Err(Error::Refused(format!(
                "CSR organisation {:?} is not [\"{NODES_ORGANIZATION}\"]",
                subject.organizations
            )));
        }
        let mut usages = vec![ExtKeyUsage::ClientAuth];
        for n in requested {
            let usage = ExtKeyUsage::from_go(*n)
                .ok_or_else(|| Error::Refused(format!("unknown extended key usage {n}")))?;
            if usage != ExtKeyUsage::ClientAuth && !policy.allowed_ext_key_usages.contains(&usage) {
                return Err(Error::Refused(format!(
                    "extended key usage {n} is not allowed by configuration"
                )));
            }
            if !usages.contains(&usage) {
                usages.push(usage);
            }
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&want_cn, &[NODES_ORGANIZATION.to_owned()]);
        params.serial_number = Some(random_serial());
        validity(&mut params, i64::from(policy.validity_days));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages.iter().map(|u| u.to_rcgen()).collect();
        let request = CertificateSigningRequestParams {
            params,
            public_key: parsed.public_key,
        };
        Ok(request.signed_by(&self.inner.issuer)?.der().to_vec())
    }

    /// Verifies `cert_der` (with optional intermediates) as a client certificate issued by
    /// this CA: chain, validity period and clientAuth usage (webpki), then returns its subject.
    pub fn verify_client_cert(
        &self,
        cert_der: &[u8],
        intermediates: &[Vec<u8>],
    ) -> Result<PeerIdentity> {
        let verifier = crate::tls::client_verifier(self.cert_der())?;
        let inter: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        verifier
            .verify_client_cert(&CertificateDer::from(cert_der), &inter, UnixTime::now())
            .map_err(|e| Error::Unauthorized(e.to_string()))?;
        identity::parse(cert_der)
    }
}

fn dns_san(name: &str) -> Result<SanType> {
    name.to_owned()
        .try_into()
        .map(SanType::DnsName)
        .map_err(|_| Error::Certificate(format!("{name:?} is not a valid DNS name")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::{FromDer, X509Certificate};

    fn not_after_of(der: &[u8]) -> i64 {
        let (_, cert) = X509Certificate::from_der(der).unwrap();
        cert.validity().not_after.timestamp()
    }

    #[test]
    fn a_huge_signing_duration_is_clamped_to_the_year_9999_instead_of_panicking() {
        let ca = CertificateAuthority::generate().unwrap();
        let csr = crate::EdgeCsr::generate("edge-1").unwrap();
        let policy = SignPolicy {
            validity_days: u32::MAX,
            ..SignPolicy::default()
        };
        let der = ca
            .sign_edge_csr(&csr.csr_der, "edge-1", &[], &policy)
            .unwrap();
        assert_eq!(not_after_of(&der), LATEST_NOT_AFTER);
        assert!(ca.verify_client_cert(&der, &[]).is_ok());
        let issued = ca
            .issue(&IssueOptions {
                validity_days: u32::MAX,
                ..IssueOptions::edge("edge-2")
            })
            .unwrap();
        assert_eq!(not_after_of(&issued.cert_der), LATEST_NOT_AFTER);
    }

    #[test]
    fn not_after_adds_whole_days_and_saturates() {
        let now = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        assert_eq!(
            not_after(now, 30).unix_timestamp(),
            1_700_000_000 + 30 * 86_400
        );
        assert_eq!(not_after(now, i64::MAX).unix_timestamp(), LATEST_NOT_AFTER);
        assert_eq!(not_after(now, -5), now);
    }
}
