//! One edge cannot hold every permit of the metaServer: a flood of watches on a type the
//! cluster lets nodes watch but cloudcore may not list (certificate signing requests, as
//! `manifests/rbac.yaml` grants) is answered at once, and while it is in flight another
//! edge's request is served.
//!
//! This test runs its own cloudcore, with an identity that has what cloudcore's ClusterRole
//! grants on certificate signing requests (`get`, `create`: no `list`) and a small
//! `concurrency`, so the flood is larger than all the permits there are.

use super::metaserver::application;
use super::*;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

/// Running permits of this test's cloudcore (a node's share: 2).
const CONCURRENCY: usize = 8;
/// Watches the attacker sends at once: five times the permits.
const FLOOD: usize = 40;
/// How long the other edge's request may take while the flood is in flight.
const SERVED_WITHIN: Duration = Duration::from_secs(5);

/// A kubeconfig for a ServiceAccount that may do everything cloudcore does, with
/// cloudcore's grant on certificate signing requests (not `list` or `watch`).
async fn cloudcore_identity(client: &kube::Client, ns: &str, dir: &Path) -> std::path::PathBuf {
    let name = unique("cloudcore-no-csr-list");
    let sa: ServiceAccount = from(json!({"metadata": {"name": name, "namespace": ns}}));
    create(Api::namespaced(client.clone(), ns), &sa).await;
    let groups = [
        "",
        "apps",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "storage.k8s.io",
        "authorization.k8s.io",
        "authentication.k8s.io",
        "networking.k8s.io",
        "policy",
        "apiextensions.k8s.io",
        "devices.kubeedge.io",
        "reliablesyncs.kubeedge.io",
        "rules.kubeedge.io",
        "operations.kubeedge.io",
    ];
    let role: ClusterRole = from(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": groups, "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
                "verbs": ["get", "create"]},
            {"nonResourceURLs": ["*"], "verbs": ["get"]}
        ]
    }));
    create(Api::all(client.clone()), &role).await;
    let binding: ClusterRoleBinding = from(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    }));
    create(Api::all(client.clone()), &binding).await;
    let token = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(
            &name,
            &PostParams::default(),
            &from::<TokenRequest>(json!({"spec": {"audiences": [], "expirationSeconds": 3600}})),
        )
        .await
        .expect("a token for the ServiceAccount")
        .status
        .expect("token status")
        .token;
    let admin = kube::config::Kubeconfig::read_from(k8s_testenv::env().kubeconfig())
        .expect("the test API server's kubeconfig");
    let cluster = admin.clusters[0].cluster.clone().expect("a cluster");
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "cloudcore", "context": {"cluster": "testenv", "user": name}}],
        "current-context": "cloudcore"
    });
    std::fs::create_dir_all(dir).expect("cloudcore folder");
    let path = dir.join("restricted.kubeconfig");
    std::fs::write(&path, config.to_string()).expect("write the kubeconfig");
    path
}

/// A cloudcore of a test's own (the test configuration with `overrides` merged over it), in
/// `dir`, with `kubeconfig` when given; stopped when this test binary exits at the latest.
pub(super) async fn own_cloudcore(
    dir: &Path,
    kubeconfig: Option<std::path::PathBuf>,
    overrides: Value,
) -> Cloudcore {
    let mut spec = CloudSpec::for_testenv(dir).expect("cloud spec");
    if let Some(k) = kubeconfig {
        spec.kubeconfig = k;
    }
    spec.impersonate = super::super::IMPERSONATE;
    spec.replica_address = Some(crate::support::replica_address());
    spec.extra = overrides;
    let mut core = Cloudcore::start(&spec)
        .await
        .unwrap_or_else(|e| panic!("cloudcore did not start: {e}"));
    stop_with_this_binary(core.process().id(), dir);
    core
}

#[tokio::test]
async fn one_edge_cannot_hold_every_permit() {
    test_tiers::require!(ApiServer);
    let _ = cloud();
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("n9").await;
    let dir = std::env::temp_dir().join(format!("cloudcore-permits-{}", short_id()));
    let kubeconfig = cloudcore_identity(&client, &ns, &dir).await;
    let overrides = json!({"modules": {"dynamicController": {"concurrency": CONCURRENCY}}});
    let mut core = own_cloudcore(&dir, Some(kubeconfig), overrides).await;

    let (attacker, victim) = (unique("edge-n9-flood"), unique("edge-n9-victim"));
    edge_node(&client, &attacker).await;
    edge_node(&client, &victim).await;
    let attacker = Edge::connect_to(&core, &attacker).await;
    let victim = Edge::connect_to(&core, &victim).await;

    let csrs = "/certificates.k8s.io/v1/certificatesigningrequests/null/null";
    let flood = futures::future::join_all((0..FLOOD).map(|i| {
        let mut app = application("watch", csrs, Some(json!({"watch": true})), None);
        app["ID"] = json!(format!("flood-{i}"));
        attacker.apply(app)
    }));
    let served = async {
        // The flood first: its watches are queued before this request.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = tokio::time::Instant::now();
        let own = application(
            "get",
            &format!("/core/v1/nodes/null/{}", victim.node),
            Some(json!({})),
            None,
        );
        let node = victim.apply(own).await.approved();
        (node, started.elapsed())
    };
    let (answers, (node, took)) = tokio::join!(flood, served);
    assert_eq!(
        node["metadata"]["name"].as_str(),
        Some(victim.node.as_str())
    );
    assert!(
        took < SERVED_WITHIN,
        "another edge's request waited {took:?} behind one edge's flood"
    );
    // Every watch of the flood is answered (cloudcore may not list the type), none left
    // holding a permit.
    for a in &answers {
        a.rejected(403);
        // Refused to cloudcore, not to the node: the node may watch them.
        let why = a.app["Reason"].as_str().unwrap_or_default();
        assert!(
            why.contains("cloudcore-no-csr-list") && why.contains("cannot list"),
            "{why}"
        );
    }
    drop((attacker, victim));
    core.stop().await;
}
