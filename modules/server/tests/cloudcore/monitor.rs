//! Who may read the monitor server, against the real API server: `/metrics` and `/debug` need a
//! bearer token the API server accepts (TokenReview) whose user RBAC lets `get` the path
//! (SubjectAccessReview), with the ClusterRoles `manifests/monitor.yaml` ships; the health
//! endpoints stay open; `/debug` answers loopback only.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use cloudcore_server::config::MonitorAuthorization;
use cloudcore_server::ops::{Access, Ops, serve};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

/// The ClusterRoles of `manifests/monitor.yaml`, applied as they are.
async fn apply_monitor_roles(client: &kube::Client) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/monitor.yaml");
    let text = std::fs::read_to_string(path).expect("manifests/monitor.yaml");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for doc in docs.into_iter().filter(|d| d["kind"] == "ClusterRole") {
        let role: ClusterRole = serde_json::from_value(doc).expect("ClusterRole");
        let name = role.metadata.name.clone().expect("named");
        roles
            .patch(
                &name,
                &PatchParams::apply("monitor-test").force(),
                &Patch::Apply(&role),
            )
            .await
            .expect("apply ClusterRole");
    }
}

/// A ServiceAccount in `ns` bound to `role` (when given), and a token for it.
async fn account(client: &kube::Client, ns: &str, name: &str, role: Option<&str>) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    accounts
        .create(&PostParams::default(), &sa)
        .await
        .expect("create ServiceAccount");
    if let Some(role) = role {
        let binding = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(format!("{ns}-{name}")),
                ..ObjectMeta::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "ClusterRole".to_owned(),
                name: role.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: name.to_owned(),
                namespace: Some(ns.to_owned()),
                ..Subject::default()
            }]),
        };
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("create ClusterRoleBinding");
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("token")
        .status
        .and_then(|s| s.token)
        .expect("a token")
}

/// Waits until RBAC's informers know `user` may `get` `path` (the monitor server remembers a
/// denial for a while, so it must not be asked before).
async fn until_allowed(client: &kube::Client, ns: &str, name: &str, path: &str) {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{ns}:{name}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ]),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some("get".to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .expect("SubjectAccessReview");
        if answer.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never allowed {path}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A blocking GET: status, headers (lowercase names) and body.
fn get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> (u16, BTreeMap<String, String>, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (status.parse().unwrap(), headers, body.to_owned())
}

async fn get_async(
    addr: SocketAddr,
    path: &'static str,
    token: Option<String>,
) -> (u16, BTreeMap<String, String>, String) {
    tokio::task::spawn_blocking(move || get(addr, path, token.as_deref()))
        .await
        .unwrap()
}

/// This host's address on a non-loopback interface, if it has one (no packet is sent).
fn outward_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[actix_rt::test]
async fn metrics_and_debug_need_a_reviewed_token_with_rbac_for_the_path() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("monitor").await;
    apply_monitor_roles(&client).await;
    let reader = account(&client, &ns, "reader", Some("cloudcore-metrics-reader")).await;
    let debugger = account(&client, &ns, "debugger", Some("cloudcore-debug")).await;
    let nobody = account(&client, &ns, "nobody", None).await;
    until_allowed(&client, &ns, "reader", "/metrics").await;
    until_allowed(&client, &ns, "debugger", "/debug/nodes/edge-1").await;

    let access = Access::webhook(&MonitorAuthorization::default());
    access.set_client(client.clone());
    let ops = Ops {
        access: access.clone(),
        ..Ops::default()
    };
    let (addr, server) = serve("0.0.0.0:0", ops).expect("monitor server");
    let handle = server.handle();
    actix_rt::spawn(server);
    let local = SocketAddr::from(([127, 0, 0, 1], addr.port()));

    // Probes need nothing.
    for path in ["/healthz", "/livez"] {
        assert_eq!(get_async(local, path, None).await.0, 200, "{path}");
    }
    // No token, a token that is not one, a token for a user RBAC does not let in.
    let (status, headers, _) = get_async(local, "/metrics", None).await;
    assert_eq!(status, 401);
    assert_eq!(
        headers.get("www-authenticate").map(String::as_str),
        Some("Bearer realm=\"cloudcore\"")
    );
    let (status, _, body) = get_async(local, "/metrics", Some("not-a-token".into())).await;
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = get_async(local, "/metrics", Some(nobody.clone())).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:nobody")),
        "{body}"
    );
    // The reader reads /metrics and nothing else; the debugger diagnoses (nothing runs here,
    // so past the authorizer it is told the modules are not running).
    let (status, _, body) = get_async(local, "/metrics", Some(reader.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(
        get_async(local, "/debug/nodes/edge-1", Some(reader))
            .await
            .0,
        403
    );
    assert_eq!(
        get_async(local, "/debug/nodes/edge-1", Some(nobody))
            .await
            .0,
        403
    );
    let (status, _, body) = get_async(local, "/debug/nodes/edge-1", Some(debugger.clone())).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("modules not running"), "{body}");
    assert_eq!(
        get_async(local, "/metrics", Some(debugger.clone())).await.0,
        403
    );
    // Answers are remembered: two tokens known, three users' decisions on two paths at most.
    let (tokens, decisions) = access.cached();
    assert!(tokens >= 3 && decisions >= 4, "{tokens} {decisions}");

    // /debug is for callers on this host's loopback only, token or not.
    if let Some(ip) = outward_address() {
        let outside = SocketAddr::new(ip, addr.port());
        let (status, _, body) = get_async(outside, "/debug/nodes/edge-1", Some(debugger)).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("loopback"), "{body}");
    }
    handle.stop(true).await;
}

#[tokio::test]
async fn the_binary_reviews_tokens_by_default_with_a_cluster() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("monitor-bin").await;
    apply_monitor_roles(&client).await;
    let reader = account(&client, &ns, "reader", Some("cloudcore-metrics-reader")).await;
    until_allowed(&client, &ns, "reader", "/metrics").await;
    // No authorization mode set: with a cluster, Webhook.
    let cloud = crate::binary::Cloudcore::start_with(|c| {
        c.common_config.monitor_server.authorization.mode = None;
    })
    .await;
    assert_eq!(cloud.get_as("/readyz", None).map(|r| r.0), Some(200));
    assert_eq!(cloud.get_as("/metrics", None).map(|r| r.0), Some(401));
    let (status, body) = cloud.get_as("/metrics", Some(&reader)).expect("metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("cloudcore_build_info{"), "{body}");
}
