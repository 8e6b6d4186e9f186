//! Edge-side key and certificate request, shaped like the real edge's.

use rcgen::{CertificateParams, DistinguishedName, DnType};

use crate::error::Result;
use crate::identity::{NODE_CN_PREFIX, NODES_ORGANIZATION};
use crate::keys;

/// A fresh edge key and a CSR for it: ECDSA P-256, subject `C=CN, ST=Zhejiang, L=Hangzhou,
/// O=system:nodes, CN=system:node:<node>`, no SANs (exactly what edgecore sends).
#[derive(Clone)]
pub struct EdgeCsr {
    /// The private key, SEC1 DER (edgecore stores it as `EC PRIVATE KEY`).
    pub key_der: Vec<u8>,
    /// The CSR, DER (the body of `GET /edge.crt`).
    pub csr_der: Vec<u8>,
}

impl std::fmt::Debug for EdgeCsr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeCsr")
            .field("csr_der", &format_args!("{} bytes", self.csr_der.len()))
            .finish_non_exhaustive()
    }
}

impl EdgeCsr {
    /// Generates the key and the CSR for `node`.
    pub fn generate(node: &str) -> Result<Self> {
        Self::with_subject(&format!("{NODE_CN_PREFIX}{node}"), &[NODES_ORGANIZATION])
    }

    /// A CSR with any common name and organisations (for refusal tests).
    pub fn with_subject(common_name: &str, organizations: &[&str]) -> Result<Self> {
        let key_der = keys::generate_ec_key()?;
        let key = keys::ec_key_pair(&key_der)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CountryName, "CN");
        dn.push(DnType::StateOrProvinceName, "Zhejiang");
        dn.push(DnType::LocalityName, "Hangzhou");
        for o in organizations {
            dn.push(DnType::OrganizationName, *o);
        }
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        let csr = params.serialize_request(&key)?;
        Ok(EdgeCsr {
            key_der,
            csr_der: csr.der().to_vec(),
        })
    }
}
