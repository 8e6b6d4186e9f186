//! What makes a CertificateSigningRequest one to approve: Kubernetes' kubelet-serving rules (as
//! KubeEdge's approver applies them) and the edge-specific checks on top, as pure functions.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// The signer whose requests are approved (edged's metaServer serving certificate).
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// `reason` of the approval condition (KubeEdge's text).
pub const APPROVED_REASON: &str = "AutoApproved";
/// `message` of the approval condition (KubeEdge's text).
pub const APPROVED_MESSAGE: &str = "Auto approving MetaServer serving certificate.";
/// The common name prefix of a node identity.
pub const NODE_PREFIX: &str = "system:node:";
const NODES_ORGANIZATION: &str = "system:nodes";

/// The two usage sets Kubernetes accepts for a kubelet-serving certificate.
const SERVING_USAGES: [&[&str]; 2] = [
    &["digital signature", "key encipherment", "server auth"],
    &["digital signature", "server auth"],
];

/// Why a request is not approved. Every variant leaves the request pending for an
/// administrator (or kube-controller-manager) to decide; none is retried, since nothing of a
/// request's spec can change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Another signer than `kubernetes.io/kubelet-serving`: not this approver's business.
    #[error("signer {0:?} is not {KUBELET_SERVING_SIGNER}")]
    OtherSigner(String),
    /// `spec.request` is not a PEM certificate request.
    #[error("the request does not parse: {0}")]
    Unparsable(String),
    /// The subject's organizations are not exactly `[system:nodes]`.
    #[error("subject organization {0:?} is not [system:nodes]")]
    Organization(Vec<String>),
    /// The common name does not start `system:node:` (or names no node).
    #[error("common name {0:?} is not system:node:<name>")]
    CommonName(String),
    /// Neither a DNS nor an IP subject alternative name.
    #[error("no DNS or IP subject alternative name")]
    NoAddress,
    /// An email or URI subject alternative name.
    #[error("email or URI subject alternative names are not allowed")]
    EmailOrUri,
    /// The usages are not one of Kubernetes' two kubelet-serving sets.
    #[error("usages {0:?} are not [digital signature, (key encipherment,) server auth]")]
    Usages(Vec<String>),
    /// A DNS name: the edge's metaServer asks for IP addresses only.
    #[error("DNS name {0:?} requested: an edge metaServer asks for IP addresses only")]
    DnsName(String),
    /// An IP address that is neither loopback nor link-local (where the metaServer serves).
    #[error("IP address {0} is neither loopback nor link-local")]
    Address(IpAddr),
    /// Created by someone who is neither the node named in the common name nor cloudcore.
    #[error("requested by {requester:?}, neither system:node:{node} nor cloudcore")]
    Requester {
        /// `spec.username`.
        requester: String,
        /// The node the common name names.
        node: String,
    },
    /// The node named in the common name is not an edge node (or does not exist).
    #[error("node {0:?} is not an edge node")]
    NotEdgeNode(String),
}

impl Refusal {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::OtherSigner(_) => "other_signer",
            Refusal::Unparsable(_) => "unparsable",
            Refusal::Organization(_) => "organization",
            Refusal::CommonName(_) => "common_name",
            Refusal::NoAddress => "no_address",
            Refusal::EmailOrUri => "email_or_uri",
            Refusal::Usages(_) => "usages",
            Refusal::DnsName(_) => "dns_name",
            Refusal::Address(_) => "address",
            Refusal::Requester { .. } => "requester",
            Refusal::NotEdgeNode(_) => "not_edge_node",
        }
    }

    /// Every reason label, for exposing each series from the start.
    pub const REASONS: [&'static str; 11] = [
        "other_signer",
        "unparsable",
        "organization",
        "common_name",
        "no_address",
        "email_or_uri",
        "usages",
        "dns_name",
        "address",
        "requester",
        "not_edge_node",
    ];
}

/// True when the request needs no decision: already approved or denied, or already issued.
pub fn is_settled(csr: &CertificateSigningRequest) -> bool {
    let Some(status) = &csr.status else {
        return false;
    };
    status.certificate.as_ref().is_some_and(|c| !c.0.is_empty())
        || status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Approved" || c.type_ == "Denied")
}

/// What a request that passes Kubernetes' kubelet-serving rules asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingRequest {
    /// The node of the common name (`system:node:<node>`).
    pub node: String,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
}

/// Kubernetes' rules for a kubelet-serving request (`ValidateKubeletServingCSR`) on the signer,
/// the parsed request and the usages, the only rules KubeEdge's approver applies.
pub fn kubelet_serving(csr: &CertificateSigningRequest) -> Result<ServingRequest, Refusal> {
    let spec = &csr.spec;
    if spec.signer_name != KUBELET_SERVING_SIGNER {
        return Err(Refusal::OtherSigner(spec.signer_name.clone()));
    }
    let parsed = parse(&spec.request.0)?;
    if parsed.organizations != [NODES_ORGANIZATION] {
        return Err(Refusal::Organization(parsed.organizations));
    }
    if parsed.dns_names.is_empty() && parsed.ips.is_empty() {
        return Err(Refusal::NoAddress);
    }
    if parsed.email_or_uri {
        return Err(Refusal::EmailOrUri);
    }
    let usages: BTreeSet<&str> = spec.usages.iter().flatten().map(String::as_str).collect();
    if !SERVING_USAGES
        .iter()
        .any(|set| set.iter().copied().collect::<BTreeSet<_>>() == usages)
    {
        return Err(Refusal::Usages(spec.usages.clone().unwrap_or_default()));
    }
    let node = match parsed.common_name.strip_prefix(NODE_PREFIX) {
        Some(node) if !node.is_empty() => node.to_owned(),
        _ => return Err(Refusal::CommonName(parsed.common_name)),
    };
    Ok(ServingRequest {
        node,
        dns_names: parsed.dns_names,
        ips: parsed.ips,
    })
}

/// The checks beyond Kubernetes' rules that every request an edge's metaServer makes passes:
/// no DNS names, only loopback and link-local addresses (the metaServer's `server` and
/// `dummyServer` hosts, `127.0.0.1` and `169.254.30.10` by default), and created by the node
/// itself or by cloudcore (`cloudcore_user`, which creates them for edges when it does not
/// impersonate them, after checking the common name names the edge).
pub fn edge_request(
    req: &ServingRequest,
    requester: &str,
    cloudcore_user: Option<&str>,
) -> Result<(), Refusal> {
    if let Some(name) = req.dns_names.first() {
        return Err(Refusal::DnsName(name.clone()));
    }
    if let Some(ip) = req.ips.iter().find(|ip| !loopback_or_link_local(ip)) {
        return Err(Refusal::Address(*ip));
    }
    let own = requester.strip_prefix(NODE_PREFIX) == Some(req.node.as_str());
    if !own && cloudcore_user != Some(requester) {
        return Err(Refusal::Requester {
            requester: requester.to_owned(),
            node: req.node.clone(),
        });
    }
    Ok(())
}

fn loopback_or_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unicast_link_local()
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| loopback_or_link_local(&IpAddr::V4(v4)))
        }
    }
}

/// The fields of a certificate request the rules read.
#[derive(Debug, Default)]
struct Parsed {
    organizations: Vec<String>,
    common_name: String,
    dns_names: Vec<String>,
    ips: Vec<IpAddr>,
    email_or_uri: bool,
}

/// Parses the PEM `CERTIFICATE REQUEST` block of `spec.request`.
fn parse(request: &[u8]) -> Result<Parsed, Refusal> {
    let bad = |e: &dyn std::fmt::Display| Refusal::Unparsable(e.to_string());
    let block = pem::parse(request).map_err(|e| bad(&e))?;
    if block.tag() != "CERTIFICATE REQUEST" {
        return Err(bad(&format_args!("PEM block {:?}", block.tag())));
    }
    let (_, csr) = X509CertificationRequest::from_der(block.contents()).map_err(|e| bad(&e))?;
    let subject = &csr.certification_request_info.subject;
    let mut parsed = Parsed::default();
    for o in subject.iter_organization() {
        parsed
            .organizations
            .push(o.as_str().map_err(|e| bad(&e))?.to_owned());
    }
    // Go's pkix.Name keeps the last common name.
    if let Some(cn) = subject.iter_common_name().last() {
        parsed.common_name = cn.as_str().map_err(|e| bad(&e))?.to_owned();
    }
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else {
            continue;
        };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(d) => parsed.dns_names.push((*d).to_owned()),
                GeneralName::IPAddress(bytes) => {
                    parsed.ips.push(ip(bytes).ok_or_else(|| {
                        bad(&format_args!("an IP address of {} bytes", bytes.len()))
                    })?)
                }
                GeneralName::RFC822Name(_) | GeneralName::URI(_) => parsed.email_or_uri = true,
                _ => {}
            }
        }
    }
    Ok(parsed)
}

fn ip(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    use super::*;

    fn pem_request(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap()
            .into_bytes()
    }

    fn csr(request: Vec<u8>, signer: &str, usages: &[&str]) -> CertificateSigningRequest {
        CertificateSigningRequest {
            spec: CertificateSigningRequestSpec {
                request: ByteString(request),
                signer_name: signer.into(),
                usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn loopback() -> Vec<SanType> {
        vec![SanType::IpAddress("127.0.0.1".parse().unwrap())]
    }

    const USAGES: &[&str] = &["digital signature", "key encipherment", "server auth"];

    #[test]
    fn the_edge_metaserver_request_passes_both_rule_sets() {
        let sans = vec![
            SanType::IpAddress("127.0.0.1".parse().unwrap()),
            SanType::IpAddress("169.254.30.10".parse().unwrap()),
        ];
        let c = csr(
            pem_request("system:node:e1", &["system:nodes"], sans),
            KUBELET_SERVING_SIGNER,
            USAGES,
        );
        let req = kubelet_serving(&c).unwrap();
        assert_eq!(req.node, "e1");
        assert_eq!(req.ips.len(), 2);
        assert_eq!(edge_request(&req, "system:node:e1", None), Ok(()));
        assert_eq!(edge_request(&req, "cloudcore", Some("cloudcore")), Ok(()));
    }

    #[test]
    fn kubernetes_rules_refuse_what_kubelet_serving_does_not_allow() {
        let ok = || pem_request("system:node:e1", &["system:nodes"], loopback());
        let two_usages = csr(
            ok(),
            KUBELET_SERVING_SIGNER,
            &["digital signature", "server auth"],
        );
        assert!(kubelet_serving(&two_usages).is_ok());
        let cases = [
            (
                csr(
                    ok(),
                    KUBELET_SERVING_SIGNER,
                    &["digital signature", "server auth", "client auth"],
                ),
                "usages",
            ),
            (
                csr(
                    pem_request("system:node:e1", &["system:nodes"], vec![]),
                    KUBELET_SERVING_SIGNER,
                    USAGES,
                ),
                "no_address",
            ),
            (
                csr(ok(), "kubernetes.io/kube-apiserver-client-kubelet", USAGES),
                "other_signer",
            ),
            (
                csr(
                    pem_request("system:node:e1", &["system:nodes", "x"], loopback()),
                    KUBELET_SERVING_SIGNER,
                    USAGES,
                ),
                "organization",
            ),
            (
                csr(
                    pem_request("e1", &["system:nodes"], loopback()),
                    KUBELET_SERVING_SIGNER,
                    USAGES,
                ),
                "common_name",
            ),
            (
                csr(
                    pem_request(
                        "system:node:e1",
                        &["system:nodes"],
                        vec![
                            SanType::IpAddress("127.0.0.1".parse().unwrap()),
                            SanType::Rfc822Name("a@b.c".try_into().unwrap()),
                        ],
                    ),
                    KUBELET_SERVING_SIGNER,
                    USAGES,
                ),
                "email_or_uri",
            ),
            (
                csr(b"not pem".to_vec(), KUBELET_SERVING_SIGNER, USAGES),
                "unparsable",
            ),
        ];
        for (c, reason) in cases {
            assert_eq!(kubelet_serving(&c).unwrap_err().reason(), reason);
        }
    }

    #[test]
    fn edge_checks_refuse_names_routable_addresses_and_other_requesters() {
        let req = |dns: &[&str], ips: &[&str]| ServingRequest {
            node: "e1".into(),
            dns_names: dns.iter().map(|d| (*d).to_owned()).collect(),
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
        };
        let me = Some("cloudcore");
        assert_eq!(
            edge_request(&req(&["e1.example"], &["127.0.0.1"]), "system:node:e1", me)
                .unwrap_err()
                .reason(),
            "dns_name"
        );
        assert_eq!(
            edge_request(&req(&[], &["10.0.0.5"]), "system:node:e1", me),
            Err(Refusal::Address("10.0.0.5".parse().unwrap()))
        );
        assert!(edge_request(&req(&[], &["::1", "fe80::1"]), "system:node:e1", me).is_ok());
        assert_eq!(
            edge_request(&req(&[], &["127.0.0.1"]), "system:node:e2", me)
                .unwrap_err()
                .reason(),
            "requester"
        );
        assert_eq!(
            edge_request(&req(&[], &["127.0.0.1"]), "mallory", me)
                .unwrap_err()
                .reason(),
            "requester"
        );
        assert_eq!(
            edge_request(&req(&[], &["127.0.0.1"]), "cloudcore", None)
                .unwrap_err()
                .reason(),
            "requester",
            "cloudcore's identity is trusted only once it is known"
        );
    }

    #[test]
    fn approved_denied_or_issued_requests_are_settled() {
        let mut c = csr(vec![], KUBELET_SERVING_SIGNER, USAGES);
        assert!(!is_settled(&c));
        let cond = |t: &str| CertificateSigningRequestCondition {
            type_: t.into(),
            status: "True".into(),
            ..Default::default()
        };
        c.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![cond("Failed")]),
            ..Default::default()
        });
        assert!(!is_settled(&c));
        for t in ["Approved", "Denied"] {
            c.status.as_mut().unwrap().conditions = Some(vec![cond(t)]);
            assert!(is_settled(&c), "{t}");
        }
        c.status = Some(CertificateSigningRequestStatus {
            certificate: Some(ByteString(b"x".to_vec())),
            ..Default::default()
        });
        assert!(is_settled(&c));
    }
}
