//! The approver against the real API server: real CertificateSigningRequests, created as an
//! administrator (standing in for cloudcore without impersonation) or as a node
//! (impersonated, as cloudcore creates them with impersonation on), approved or left pending
//! exactly by the rules, read back from the API server.
//!
//! One approver runs for the whole binary and the scenarios take turns, so its counters move
//! only for the request being decided: a request left pending is known to be decided (not
//! just not yet seen) when the counter of its reason moves.

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use csrapprover::rules::{APPROVED_MESSAGE, APPROVED_REASON, KUBELET_SERVING_SIGNER};
use csrapprover::{CsrApprover, CsrApproverMetrics};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use serde_json::json;

const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";
const ALL_USAGES: &[&str] = &["digital signature", "key encipherment", "server auth"];
const WAIT: Duration = Duration::from_secs(20);

/// The approver of this binary, on a bus in an actix system of its own thread.
fn approver() -> &'static CsrApproverMetrics {
    static METRICS: OnceLock<CsrApproverMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let approver = CsrApprover::new(k8s_testenv::client().await);
                tx.send(approver.metrics()).unwrap();
                let bus = beehive::Bus::new();
                bus.register(approver).unwrap();
                bus.start().unwrap();
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("the approver started")
    })
}

/// The scenarios take turns: each reads the counters before its request is created.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id()[..8])
}

async fn node(name: &str, edge: bool) {
    let mut labels = std::collections::BTreeMap::new();
    if edge {
        labels.insert(EDGE_LABEL.to_owned(), String::new());
    }
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Node>::all(k8s_testenv::client().await)
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

/// A PEM certificate request with this subject and these SANs.
fn request(cn: &str, orgs: &[&str], ips: &[&str], dns: &[&str]) -> Vec<u8> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.subject_alt_names = ips
        .iter()
        .map(|ip| SanType::IpAddress(ip.parse::<IpAddr>().unwrap()))
        .chain(
            dns.iter()
                .map(|d| SanType::DnsName((*d).try_into().unwrap())),
        )
        .collect();
    let key = KeyPair::generate().unwrap();
    params
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap()
        .into_bytes()
}

/// What the edge's metaServer requests for `node`: CN `system:node:<node>`, O `system:nodes`,
/// its two default addresses.
fn metaserver_request(node: &str) -> Vec<u8> {
    request(
        &format!("system:node:{node}"),
        &["system:nodes"],
        &["127.0.0.1", "169.254.30.10"],
        &[],
    )
}

fn csr(name: &str, request: Vec<u8>, signer: &str, usages: &[&str]) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A client acting as `system:node:<node>` (as cloudcore does with impersonation on).
async fn as_node(node: &str) -> kube::Client {
    impersonating(&format!("system:node:{node}"), "system:nodes").await
}

/// A client acting as the user `name`, whom the test binding lets create CSRs.
async fn as_user(name: &str) -> kube::Client {
    impersonating(name, "csrapprover-test-requesters").await
}

async fn impersonating(user: &str, group: &str) -> kube::Client {
    let mut config = k8s_testenv::config().await;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups =
        Some(vec![group.to_owned(), "system:authenticated".into()]);
    kube::Client::try_from(config).expect("impersonating client")
}

/// Lets nodes (and the test's other requesters) create CSRs as kubelets do: the Node
/// authorizer leaves CSRs to RBAC, and the default `system:node` role is bound to nobody.
async fn nodes_may_create_csrs() {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "csrapprover-test-node-csrs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:nodes"},
                     {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "csrapprover-test-requesters"}]
    }))
    .unwrap();
    let api = Api::<ClusterRoleBinding>::all(k8s_testenv::client().await);
    match api.create(&PostParams::default(), &binding).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("bind system:node: {e}"),
    }
}

async fn create_as(client: kube::Client, csr: &CertificateSigningRequest) {
    // RBAC learns of a new binding from its informer: retry a refusal for a while.
    let deadline = Instant::now() + WAIT;
    loop {
        match Api::<CertificateSigningRequest>::all(client.clone())
            .create(&PostParams::default(), csr)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 403 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("create CSR {:?}: {e}", csr.metadata.name),
        }
    }
}

async fn read(name: &str) -> CertificateSigningRequest {
    Api::<CertificateSigningRequest>::all(k8s_testenv::client().await)
        .get(name)
        .await
        .expect("read CSR")
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<CertificateSigningRequestCondition> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// Waits until `name` carries an `Approved` condition and checks its text.
async fn approved(name: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let c = conditions(&read(name).await);
        if let Some(a) = c.iter().find(|c| c.type_ == "Approved") {
            assert_eq!(
                (a.status.as_str(), a.reason.as_deref(), a.message.as_deref()),
                ("True", Some(APPROVED_REASON), Some(APPROVED_MESSAGE))
            );
            assert_eq!(c.len(), 1, "one condition: {c:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not approved within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the approver counted `reason` once more than `before`, then checks `name`
/// carries no `Approved` condition.
async fn left_pending(name: &str, reason: &'static str, before: u64) {
    let m = approver();
    let deadline = Instant::now() + WAIT;
    while m.left_pending(reason) == before {
        assert!(
            Instant::now() < deadline,
            "{name}: no decision for reason {reason} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(m.left_pending(reason), before + 1, "{name}: decided once");
    let c = conditions(&read(name).await);
    assert!(
        c.iter().all(|c| c.type_ != "Approved"),
        "{name} must stay pending: {c:?}"
    );
}

async fn admin() -> kube::Client {
    k8s_testenv::client().await
}

#[tokio::test]
async fn the_metaserver_request_of_an_edge_node_is_approved_whoever_of_node_and_cloudcore_created_it()
 {
    let m = approver();
    let _turn = TURN.lock().await;
    let edge = unique("edge");
    node(&edge, true).await;
    nodes_may_create_csrs().await;

    // Created by cloudcore's own identity (no impersonation).
    let name = unique("by-cloudcore");
    let before = m.approved();
    create_as(
        admin().await,
        &csr(
            &name,
            metaserver_request(&edge),
            KUBELET_SERVING_SIGNER,
            ALL_USAGES,
        ),
    )
    .await;
    approved(&name).await;
    // The counter moves after the approval is written: let the approver finish that event.
    caught_up(&edge).await;
    assert_eq!(m.approved(), before + 1);

    // Created by the node itself (impersonation on), with the two-usage set.
    let name = unique("by-node");
    create_as(
        as_node(&edge).await,
        &csr(
            &name,
            metaserver_request(&edge),
            KUBELET_SERVING_SIGNER,
            &["digital signature", "server auth"],
        ),
    )
    .await;
    approved(&name).await;
    assert_eq!(
        read(&name).await.spec.username.as_deref(),
        Some(format!("system:node:{edge}").as_str())
    );
}

#[tokio::test]
async fn requests_outside_the_kubelet_serving_rules_stay_pending() {
    let m = approver();
    let _turn = TURN.lock().await;
    let edge = unique("edge");
    node(&edge, true).await;
    let cn = format!("system:node:{edge}");
    let cases: Vec<(&str, CertificateSigningRequest, &'static str)> = vec![
        (
            "client-auth",
            csr(
                "",
                metaserver_request(&edge),
                KUBELET_SERVING_SIGNER,
                &["digital signature", "server auth", "client auth"],
            ),
            "usages",
        ),
        (
            "no-sans",
            csr(
                "",
                request(&cn, &["system:nodes"], &[], &[]),
                KUBELET_SERVING_SIGNER,
                ALL_USAGES,
            ),
            "no_address",
        ),
        (
            "client-signer",
            csr(
                "",
                metaserver_request(&edge),
                "kubernetes.io/kube-apiserver-client-kubelet",
                &["digital signature", "client auth"],
            ),
            "other_signer",
        ),
        (
            "wrong-org",
            csr(
                "",
                request(&cn, &["system:masters"], &["127.0.0.1"], &[]),
                KUBELET_SERVING_SIGNER,
                ALL_USAGES,
            ),
            "organization",
        ),
        // Beyond KubeEdge: what an edge metaServer never asks for.
        (
            "routable-ip",
            csr(
                "",
                request(&cn, &["system:nodes"], &["127.0.0.1", "10.1.2.3"], &[]),
                KUBELET_SERVING_SIGNER,
                ALL_USAGES,
            ),
            "address",
        ),
        (
            "dns-name",
            csr(
                "",
                request(
                    &cn,
                    &["system:nodes"],
                    &["127.0.0.1"],
                    &["kubernetes.default"],
                ),
                KUBELET_SERVING_SIGNER,
                ALL_USAGES,
            ),
            "dns_name",
        ),
    ];
    for (prefix, mut c, reason) in cases {
        let name = unique(prefix);
        c.metadata.name = Some(name.clone());
        let before = m.left_pending(reason);
        create_as(admin().await, &c).await;
        left_pending(&name, reason, before).await;
    }
}

#[tokio::test]
async fn a_node_cannot_get_a_certificate_for_another_node_or_for_a_node_that_is_not_an_edge() {
    let m = approver();
    let _turn = TURN.lock().await;
    let (e1, e2, plain) = (unique("edge"), unique("edge"), unique("plain"));
    node(&e1, true).await;
    node(&e2, true).await;
    node(&plain, false).await;
    nodes_may_create_csrs().await;

    // e1 asks for e2's serving certificate: the API server itself refuses a node that.
    let refused = Api::<CertificateSigningRequest>::all(as_node(&e1).await)
        .create(
            &PostParams::default(),
            &csr(
                &unique("for-other"),
                metaserver_request(&e2),
                KUBELET_SERVING_SIGNER,
                ALL_USAGES,
            ),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403),
        "{refused:?}"
    );
    // Any other user allowed to create CSRs asks for e2's: left pending.
    let name = unique("by-other-user");
    let before = m.left_pending("requester");
    create_as(
        as_user("mallory").await,
        &csr(
            &name,
            metaserver_request(&e2),
            KUBELET_SERVING_SIGNER,
            ALL_USAGES,
        ),
    )
    .await;
    left_pending(&name, "requester", before).await;

    // A node that is not an edge node, and one that does not exist.
    for target in [plain, unique("missing")] {
        let name = unique("not-edge");
        let before = m.left_pending("not_edge_node");
        create_as(
            admin().await,
            &csr(
                &name,
                metaserver_request(&target),
                KUBELET_SERVING_SIGNER,
                ALL_USAGES,
            ),
        )
        .await;
        left_pending(&name, "not_edge_node", before).await;
    }
}

/// Creates a request of another signer (decided at once, without an API call) and waits for
/// its decision: the approver's reconciles of requests changed before it have run by then
/// (watch events arrive in order and a settled request is decided without awaiting anything).
async fn caught_up(edge: &str) {
    let m = approver();
    let marker = unique("marker");
    let before = m.left_pending("other_signer");
    create_as(
        admin().await,
        &csr(
            &marker,
            metaserver_request(edge),
            "example.com/other",
            ALL_USAGES,
        ),
    )
    .await;
    left_pending(&marker, "other_signer", before).await;
}

async fn touch(name: &str) {
    let patch = json!({"metadata": {"labels": {"touched": beehive::new_id()}}});
    Api::<CertificateSigningRequest>::all(admin().await)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("label the request");
}

#[tokio::test]
async fn a_denied_request_is_not_approved_and_an_approved_one_not_approved_again() {
    let m = approver();
    let _turn = TURN.lock().await;
    let api = Api::<CertificateSigningRequest>::all(admin().await);

    // A request for a node that does not exist yet stays pending; an administrator denies
    // it; the node then appears and the request changes: the approver leaves it denied.
    let edge = unique("edge");
    let name = unique("denied");
    let before = m.left_pending("not_edge_node");
    create_as(
        admin().await,
        &csr(
            &name,
            metaserver_request(&edge),
            KUBELET_SERVING_SIGNER,
            ALL_USAGES,
        ),
    )
    .await;
    left_pending(&name, "not_edge_node", before).await;
    let mut c = api.get(&name).await.unwrap();
    c.status.get_or_insert_default().conditions = Some(vec![CertificateSigningRequestCondition {
        type_: "Denied".into(),
        status: "True".into(),
        reason: Some("ByAdmin".into()),
        ..Default::default()
    }]);
    api.replace_subresource("approval", &name, &PostParams::default(), &c)
        .await
        .expect("deny");
    node(&edge, true).await;
    let (approved_before, errors_before) = (m.approved(), m.errors());
    touch(&name).await;
    caught_up(&edge).await;
    let denied = conditions(&read(&name).await);
    assert_eq!(
        denied.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        ["Denied"]
    );
    assert_eq!((m.approved(), m.errors()), (approved_before, errors_before));

    // Approved once; a later change of the request does not approve it again.
    let name = unique("once");
    create_as(
        admin().await,
        &csr(
            &name,
            metaserver_request(&edge),
            KUBELET_SERVING_SIGNER,
            ALL_USAGES,
        ),
    )
    .await;
    approved(&name).await;
    // The counter moves after the approval is written: let the approver finish that event.
    caught_up(&edge).await;
    let (approved_before, errors_before) = (m.approved(), m.errors());
    touch(&name).await;
    caught_up(&edge).await;
    assert_eq!(
        (m.approved(), m.errors()),
        (approved_before, errors_before),
        "not approved twice"
    );
    approved(&name).await;
}
