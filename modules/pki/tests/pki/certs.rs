//! Certificate shapes and the CSR signing policy.

use pki::{CertificateAuthority, EdgeCsr, Error, ExtKeyUsage, SignPolicy};
use x509_parser::prelude::{FromDer, X509Certificate};

fn parse(der: &[u8]) -> X509Certificate<'_> {
    X509Certificate::from_der(der).unwrap().1
}

#[test]
fn generated_ca_has_the_upstream_shape() {
    let ca = CertificateAuthority::generate().unwrap();
    let cert = parse(ca.cert_der());
    assert_eq!(cert.raw_serial(), &[0x04, 0x00]); // 1024
    let cn: Vec<_> = cert
        .subject()
        .iter_common_name()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cn, ["KubeEdge"]);
    assert_eq!(cert.subject(), cert.issuer());
    let days =
        (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) / 86_400;
    assert_eq!(days, 36_400);
    assert!(cert.basic_constraints().unwrap().unwrap().value.ca);
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.digital_signature() && ku.key_encipherment());
    assert_eq!(pki::ext_key_usages(ca.cert_der()).unwrap(), [1, 2]);
    // Stored as SEC1 DER, like upstream's casecret.cakeydata.
    assert!(matches!(
        pki::load_private_key(ca.key_der()).unwrap(),
        rustls_pki_types::PrivateKeyDer::Sec1(_)
    ));
    // Loading it back gives the same CA.
    let again = CertificateAuthority::from_pem(&ca.cert_pem(), &ca.key_pem()).unwrap();
    assert_eq!(again.cert_der(), ca.cert_der());
    assert_eq!(again.key_der(), ca.key_der());
}

#[test]
fn server_cert_sans_come_from_advertise_address_and_skip_empty_dns_names() {
    let ca = CertificateAuthority::generate().unwrap();
    let pair = ca
        .issue_server_cert(
            &["127.0.0.1".into(), "10.0.0.7".into()],
            &["".into(), "cloud.example".into()],
        )
        .unwrap();
    let cert = parse(&pair.cert_der);
    let san = cert.subject_alternative_name().unwrap().unwrap().value;
    let names: Vec<String> = san.general_names.iter().map(|n| n.to_string()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(san.general_names.iter().any(|n| matches!(n, x509_parser::extensions::GeneralName::IPAddress(ip) if *ip == [127, 0, 0, 1])));
    assert!(names.iter().any(|n| n.contains("cloud.example")));
    assert_eq!(pki::ext_key_usages(&pair.cert_der).unwrap(), [1]);
    let id = pki::parse_identity(&pair.cert_der).unwrap();
    assert_eq!(id.common_name.as_deref(), Some("KubeEdge"));
    assert_eq!(id.organizations, ["KubeEdge"]);
}

#[test]
fn edge_csr_is_signed_with_cn_o_and_client_auth_only() {
    let ca = CertificateAuthority::generate().unwrap();
    let csr = EdgeCsr::generate("edge-1").unwrap();
    let policy = SignPolicy {
        validity_days: 10,
        ..SignPolicy::default()
    };
    let der = ca
        .sign_edge_csr(&csr.csr_der, "edge-1", &[], &policy)
        .unwrap();
    let id = ca.verify_client_cert(&der, &[]).unwrap();
    assert_eq!(id.common_name.as_deref(), Some("system:node:edge-1"));
    assert_eq!(id.organizations, ["system:nodes"]);
    assert_eq!(pki::ext_key_usages(&der).unwrap(), [2]);
    let cert = parse(&der);
    assert!(cert.subject_alternative_name().unwrap().is_none());
    let days =
        (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) / 86_400;
    assert_eq!(days, 10);
    // The subject's C/ST/L are dropped, as upstream.
    assert_eq!(cert.subject().iter_country().count(), 0);
}

#[test]
fn csr_for_another_node_or_group_is_refused() {
    let ca = CertificateAuthority::generate().unwrap();
    let policy = SignPolicy::default();
    let other = EdgeCsr::generate("edge-2").unwrap();
    assert!(matches!(
        ca.sign_edge_csr(&other.csr_der, "edge-1", &[], &policy),
        Err(Error::Refused(_))
    ));
    let admin = EdgeCsr::with_subject("system:node:edge-1", &["system:masters"]).unwrap();
    assert!(matches!(
        ca.sign_edge_csr(&admin.csr_der, "edge-1", &[], &policy),
        Err(Error::Refused(_))
    ));
    let no_o = EdgeCsr::with_subject("system:node:edge-1", &[]).unwrap();
    assert!(matches!(
        ca.sign_edge_csr(&no_o.csr_der, "edge-1", &[], &policy),
        Err(Error::Refused(_))
    ));
    let cloud = EdgeCsr::with_subject("KubeEdge", &["system:nodes"]).unwrap();
    assert!(matches!(
        ca.sign_edge_csr(&cloud.csr_der, "edge-1", &[], &policy),
        Err(Error::Refused(_))
    ));
    assert!(matches!(
        ca.sign_edge_csr(b"garbage", "edge-1", &[], &policy),
        Err(Error::Csr(_))
    ));
}

#[test]
fn csr_with_a_broken_signature_is_refused() {
    let ca = CertificateAuthority::generate().unwrap();
    let mut csr = EdgeCsr::generate("edge-1").unwrap().csr_der;
    let last = csr.len() - 1;
    csr[last] ^= 0x55;
    assert!(matches!(
        ca.sign_edge_csr(&csr, "edge-1", &[], &SignPolicy::default()),
        Err(Error::Csr(_))
    ));
}

#[test]
fn server_auth_is_granted_only_when_configured() {
    let ca = CertificateAuthority::generate().unwrap();
    let csr = EdgeCsr::generate("edge-1").unwrap();
    let strict = SignPolicy::default();
    assert!(matches!(
        ca.sign_edge_csr(&csr.csr_der, "edge-1", &[1, 2], &strict),
        Err(Error::Refused(_))
    ));
    let open = SignPolicy {
        allowed_ext_key_usages: vec![ExtKeyUsage::ServerAuth],
        ..SignPolicy::default()
    };
    let der = ca
        .sign_edge_csr(&csr.csr_der, "edge-1", &[1, 2], &open)
        .unwrap();
    let mut ekus = pki::ext_key_usages(&der).unwrap();
    ekus.sort();
    assert_eq!(ekus, [1, 2]);
    // Explicit clientAuth is always fine; unknown numbers are refused.
    assert!(
        ca.sign_edge_csr(&csr.csr_der, "edge-1", &[2], &strict)
            .is_ok()
    );
    assert!(
        ca.sign_edge_csr(&csr.csr_der, "edge-1", &[77], &open)
            .is_err()
    );
}

#[test]
fn client_certs_of_another_ca_or_without_client_auth_do_not_verify() {
    let ca = CertificateAuthority::generate().unwrap();
    let other = CertificateAuthority::generate().unwrap();
    let foreign = other.issue(&pki::IssueOptions::edge("edge-1")).unwrap();
    assert!(matches!(
        ca.verify_client_cert(&foreign.cert_der, &[]),
        Err(Error::Unauthorized(_))
    ));
    let mut opts = pki::IssueOptions::edge("edge-1");
    opts.ext_key_usages = vec![ExtKeyUsage::ServerAuth];
    let server_only = ca.issue(&opts).unwrap();
    assert!(ca.verify_client_cert(&server_only.cert_der, &[]).is_err());
    assert!(ca.verify_client_cert(b"junk", &[]).is_err());
}
