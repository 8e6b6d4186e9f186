//! Test certificates made with rcgen: a CA, servers, and clients with chosen CN and EKU.

use cloudstream::TlsMaterial;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA that signs test certificates.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// Which EKU a client certificate carries.
#[derive(Clone, Copy)]
pub enum Eku {
    ClientAuth,
    ServerAuthOnly,
}

impl Pki {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca }
    }

    pub fn ca(&self) -> CertificateDer<'static> {
        self.ca.der().clone()
    }

    fn issue(&self, params: CertificateParams) -> TlsMaterial {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        TlsMaterial {
            cert_chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            ca: vec![self.ca()],
        }
    }

    /// A serving certificate for 127.0.0.1 (and localhost).
    pub fn server(&self) -> TlsMaterial {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "cloudcore");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate with `cn` (and `O=system:nodes`).
    pub fn client(&self, cn: &str, eku: Eku) -> TlsMaterial {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = match eku {
            Eku::ClientAuth => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Eku::ServerAuthOnly => vec![ExtendedKeyUsagePurpose::ServerAuth],
        };
        self.issue(params)
    }

    /// A client certificate (EKU clientAuth) for user `cn` in group `org`, if any.
    pub fn user(&self, cn: &str, org: Option<&str>) -> TlsMaterial {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(org) = org {
            params
                .distinguished_name
                .push(DnType::OrganizationName, org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// A client certificate (EKU clientAuth) whose subject holds two CNs, `first` then
    /// `last` (rcgen keeps one value per attribute type: the second goes in as a custom type
    /// with the CN's OID).
    pub fn user_with_two_common_names(&self, first: &str, last: &str) -> TlsMaterial {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, first);
        params
            .distinguished_name
            .push(DnType::CustomDnType(vec![2, 5, 4, 3]), last);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// An edge node's certificate, as cloudhub issues it.
    pub fn node(&self, node: &str) -> TlsMaterial {
        self.client(&format!("system:node:{node}"), Eku::ClientAuth)
    }
}
