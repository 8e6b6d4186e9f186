//! KubeEdge PKI: the CA, the cloudcore server certificate, edge certificates, the bootstrap
//! token and the rustls configurations of both ends. Shared by cloudhub, cloudstream and the
//! edge client.
//!
//! ```text
//! CertificateAuthority ──issue_server_cert──► cloudcore cert ──► tls::server_config_mutual
//!        │  └──sign_edge_csr (hardened) ◄── EdgeCsr ◄── edge bootstrap
//!        └──create_token ──► "<sha256(CA)>.<HS256 JWT>" ──verify_jwt──► /edge.crt
//! ```
//!
//! Start with [`CertificateAuthority`].
//!
//! ```
//! use std::time::Duration;
//! let ca = pki::CertificateAuthority::generate().unwrap();
//! let token = pki::create_token(&ca, Duration::from_secs(24 * 3600));
//! let (hash, jwt) = pki::split_token(&token).unwrap();
//! assert_eq!(hash, ca.cert_sha256_hex());
//! let csr = pki::EdgeCsr::generate("edge-1").unwrap();
//! pki::verify_jwt(jwt, ca.key_der()).unwrap();
//! let cert = ca.sign_edge_csr(&csr.csr_der, "edge-1", &[], &pki::SignPolicy::default()).unwrap();
//! assert!(ca.verify_client_cert(&cert, &[]).unwrap().is_node("edge-1"));
//! ```

mod ca;
mod csr;
mod der;
mod error;
mod files;
mod identity;
mod keys;
mod revocation;
pub mod stream_tls;
pub mod tls;
mod token;

pub use ca::{
    CA_SERIAL, CA_VALIDITY_DAYS, CertAndKey, CertificateAuthority, ExtKeyUsage, IssueOptions,
    KUBEEDGE_CN, SignPolicy,
};
pub use csr::EdgeCsr;
pub use error::{Error, Result};
pub use files::{read_pem_pair, write_file, write_pem_pair};
pub use identity::{
    NODE_CN_PREFIX, NODES_ORGANIZATION, PeerIdentity, ext_key_usages, not_before,
    parse as parse_identity,
};
pub use keys::{
    PemBlock, first_pem_der, generate_ec_key, load_certificates_pem_or_der, load_private_key,
    load_private_key_pem, load_private_key_pem_or_der, pem_blocks, to_pem,
};
pub use revocation::{Revocations, parse_time, rfc3339, unix_now};
pub use token::{
    create_jwt, create_jwt_expiring, create_token, create_token_of_generation, jwt_generation,
    sha256_hex, split_token, verify_jwt,
};
