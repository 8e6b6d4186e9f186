//! The edge's kubelet-serving certificate requests (featureGates.requireAuthorization): what
//! an edge metaServer asks for its own node is approved; a request of the same shape that
//! would let the edge serve as anything else (a routable address, a DNS name) is created as
//! asked but left pending, counted by reason, never approved.

use super::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition;

/// A kubelet-serving request for `system:node:<node>` with these IP and DNS SANs, as an edge
/// metaServer builds it.
fn serving_csr(name: &str, node: &str, ips: &[&str], dns: &[&str]) -> Value {
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    params.subject_alt_names = ips
        .iter()
        .map(|ip| rcgen::SanType::IpAddress(ip.parse().expect("IP")))
        .chain(
            dns.iter()
                .map(|d| rcgen::SanType::DnsName((*d).try_into().expect("DNS name"))),
        )
        .collect();
    let key = rcgen::KeyPair::generate().expect("key");
    let pem = params
        .serialize_request(&key)
        .expect("CSR")
        .pem()
        .expect("PEM");
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": ["digital signature", "key encipherment", "server auth"]}})
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<CertificateSigningRequestCondition> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

async fn left_pending(reason: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value("csrapprover_left_pending_total", &[("reason", reason)])
        .unwrap_or(0.0)
}

/// Tests that count pending decisions take turns, so the counter moves only for theirs.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Scenario {
    /// Sends the request as the edge's metaServer does and expects it created.
    async fn request_serving_certificate(&self, csr: Value) -> String {
        let name = csr["metadata"]["name"].as_str().unwrap().to_owned();
        self.edge
            .ask_json(
                &format!("default/certificatesigningrequest/{name}"),
                "insert",
                csr,
            )
            .await
            .object_resp_ok();
        name
    }
}

#[tokio::test]
async fn an_edges_metaserver_certificate_request_for_its_own_node_is_approved() {
    let s = Scenario::new("serving").await;
    let name = unique("serving");
    s.request_serving_certificate(serving_csr(
        &name,
        &s.node,
        &["127.0.0.1", "169.254.30.10"],
        &[],
    ))
    .await;
    let csrs = s.all::<CertificateSigningRequest>();
    let approved = eventually(WAIT, "the CSR approved", || async {
        let csr = s.get(&csrs, &name).await?;
        conditions(&csr).into_iter().find(|c| c.type_ == "Approved")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(approved.reason.as_deref(), Some("AutoApproved"));
}

#[tokio::test]
async fn an_edge_cannot_get_a_serving_certificate_for_a_routable_address_or_a_name() {
    let s = Scenario::new("servingx").await;
    let _turn = TURN.lock().await;
    let csrs = s.all::<CertificateSigningRequest>();
    for (ips, dns, reason) in [
        (&["127.0.0.1", "10.96.0.1"][..], &[][..], "address"),
        (
            &["127.0.0.1"][..],
            &["kubernetes.default.svc"][..],
            "dns_name",
        ),
    ] {
        let before = left_pending(reason).await;
        let name = unique("servingx");
        s.request_serving_certificate(serving_csr(&name, &s.node, ips, dns))
            .await;
        let now = eventually(WAIT, "the request decided", || async {
            let now = left_pending(reason).await;
            (now > before).then_some(now)
        })
        .await
        .unwrap_or_else(|e| panic!("{reason}: {e}"));
        assert_eq!(now, before + 1.0, "{reason}: decided once");
        let csr = s.get(&csrs, &name).await.expect("the request exists");
        assert!(
            conditions(&csr).iter().all(|c| c.type_ != "Approved"),
            "{reason}: {:?}",
            conditions(&csr)
        );
    }
}
