//! Who a certificate or CSR names: its subject, read defensively.

use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::error::{Error, Result};

/// Organisation every edge certificate must carry.
pub const NODES_ORGANIZATION: &str = "system:nodes";
/// Common-name prefix of edge certificates: `system:node:<nodeName>`.
pub const NODE_CN_PREFIX: &str = "system:node:";

/// The subject of a certificate or CSR. Missing attributes are empty, never a panic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The common name, when there is exactly one readable CN.
    pub common_name: Option<String>,
    /// Every organisation, in order.
    pub organizations: Vec<String>,
}

impl PeerIdentity {
    /// The node this identity is for when it has the edge shape
    /// (`CN=system:node:<node>` and `O=system:nodes`).
    pub fn node_name(&self) -> Option<&str> {
        if !self.organizations.iter().any(|o| o == NODES_ORGANIZATION) {
            return None;
        }
        self.common_name
            .as_deref()?
            .strip_prefix(NODE_CN_PREFIX)
            .filter(|n| !n.is_empty())
    }

    /// True when the identity is the certificate of edge node `node`.
    pub fn is_node(&self, node: &str) -> bool {
        self.node_name() == Some(node)
    }
}

pub(crate) fn from_name(name: &X509Name<'_>) -> PeerIdentity {
    let cns: Vec<String> = name
        .iter_common_name()
        .filter_map(|a| a.as_str().ok().map(str::to_owned))
        .collect();
    PeerIdentity {
        common_name: (cns.len() == 1).then(|| cns[0].clone()),
        organizations: name
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_owned))
            .collect(),
    }
}

/// The subject of certificate DER.
pub fn parse(cert_der: &[u8]) -> Result<PeerIdentity> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| Error::Certificate(format!("cannot parse: {e}")))?;
    Ok(from_name(cert.subject()))
}

/// The notBefore of certificate DER, in unix seconds.
pub fn not_before(cert_der: &[u8]) -> Result<i64> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| Error::Certificate(format!("cannot parse: {e}")))?;
    Ok(cert.validity().not_before.timestamp())
}

/// The subject of CSR DER (the signature is not checked here).
pub(crate) fn parse_csr_subject(csr_der: &[u8]) -> Result<PeerIdentity> {
    let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(csr_der)
        .map_err(|e| Error::Csr(format!("cannot parse: {e}")))?;
    Ok(from_name(&csr.certification_request_info.subject))
}

/// Extended key usages of certificate DER as Go numbers (1 serverAuth, 2 clientAuth, …);
/// empty when the certificate has no EKU extension.
pub fn ext_key_usages(cert_der: &[u8]) -> Result<Vec<i64>> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| Error::Certificate(format!("cannot parse: {e}")))?;
    let Some(eku) = cert
        .extended_key_usage()
        .map_err(|e| Error::Certificate(e.to_string()))?
    else {
        return Ok(Vec::new());
    };
    let eku = eku.value;
    let mut out = Vec::new();
    for (set, n) in [
        (eku.any, 0),
        (eku.server_auth, 1),
        (eku.client_auth, 2),
        (eku.code_signing, 3),
        (eku.email_protection, 4),
        (eku.time_stamping, 8),
        (eku.ocsp_signing, 9),
    ] {
        if set {
            out.push(n);
        }
    }
    Ok(out)
}
