//! The stream server authorizes its callers as a kubelet does: a SubjectAccessReview against
//! the real API server (Node,RBAC) for the certificate's user and groups on
//! `nodes/<subresource>`, with allowed and denied answers cached.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, FakeKubelet, Pki, kubelet};
use beehive::Bus;
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamHandle, CloudStreamTls, ServerTls, StaticPods,
    StreamAuthorizationConfig, StreamAuthorizationMode, TlsMaterial,
};
use edge::stream::AgentHandle;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use tokio::io::AsyncWriteExt;

pub(crate) struct Env {
    client: kube::Client,
    pub(crate) ns: String,
    node: String,
    pub(crate) handle: CloudStreamHandle,
    pub(crate) stream_ca: Pki,
    _kubelet: FakeKubelet,
    _edge: AgentHandle,
    _bus: Bus,
}

/// cloudstream with a Kubernetes client and the given authorization settings, a Node and
/// its edge agent relaying to a fake kubelet, and pod `web` placed on that node.
pub(crate) async fn setup(authz: StreamAuthorizationConfig) -> Env {
    support::init_tracing();
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("csauthz").await;
    let node = format!("edge-{ns}");
    let edge_ca = Pki::new("kubeedge-ca");
    let stream_ca = Pki::new("kubernetes-ca");
    let pods = StaticPods::new();
    pods.place(&ns, "web", &node);
    let bus = Bus::new();
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        stream_authorization: authz,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(edge_ca.server()),
        stream: Some(ServerTls::Material(stream_ca.server())),
    };
    let cs = CloudStream::new(
        config,
        bus.endpoint("cloudStream"),
        Some(client.clone()),
        tls,
    )
    .unwrap()
    .with_pod_locator(Arc::new(pods));
    let handle = cs.handle();
    bus.register(cs).unwrap();
    bus.start().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let n: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": node, "labels": {"node-role.kubernetes.io/edge": ""}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
    let kubelet = FakeKubelet::start().await;
    let edge = support::start_agent(
        format!("127.0.0.1:{}", handle.tunnel_addr().port()),
        &node,
        "127.0.0.1",
        kubelet.addr,
        &edge_ca.node(&node),
    );
    assert!(edge.wait_connected(Duration::from_secs(10)).await);
    assert!(
        handle
            .wait_for_session(&node, Duration::from_secs(10))
            .await
    );
    Env {
        client,
        ns,
        node,
        handle,
        stream_ca,
        _kubelet: kubelet,
        _edge: edge,
        _bus: bus,
    }
}

impl Env {
    /// GET `target` as `cert`; the status and body (lossy text).
    pub(crate) async fn get_as(
        &self,
        cert: &TlsMaterial,
        target: &str,
        extra: &str,
    ) -> (u16, String) {
        let (status, body) = self.get_bytes_as(cert, target, extra).await;
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// GET `target` as `cert`; the status and body.
    async fn get_bytes_as(&self, cert: &TlsMaterial, target: &str, extra: &str) -> (u16, Vec<u8>) {
        let config = pki::stream_tls::client_config(
            cert.cert_chain.clone(),
            cert.key.clone_key(),
            Some(&[self.stream_ca.ca()]),
        )
        .unwrap();
        let mut conn = support::tls_connect(self.handle.stream_addr().port(), config)
            .await
            .unwrap();
        let req = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1:10351\r\n{extra}\r\n");
        conn.write_all(req.as_bytes()).await.unwrap();
        let (head, body) = support::read_response(&mut conn).await;
        (head.status, body)
    }

    fn logs(&self) -> String {
        format!("/containerLogs/{}/web/app", self.ns)
    }

    fn metrics_extra(&self) -> String {
        format!(
            "X-Forwarded-Uri: /api/v1/nodes/{}/proxy/metrics\r\n",
            self.node
        )
    }

    /// A ClusterRole with `rules` bound to user `user`; returns the binding's name.
    async fn grant(&self, user: &str, rules: serde_json::Value) -> String {
        let name = format!("cs-authz-{user}");
        let role: ClusterRole =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "rules": rules}))
                .unwrap();
        Api::<ClusterRole>::all(self.client.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        self.bind(user, &name, &name).await;
        self.wait_effective(user, &rules[0]).await;
        name
    }

    /// Waits until the API server's authorizer applies a new grant (its RBAC caches follow
    /// the objects within moments), so the stream server's first review cannot race it.
    async fn wait_effective(&self, user: &str, rule: &serde_json::Value) {
        use k8s_openapi::api::authorization::v1::SubjectAccessReview;
        let first = |k: &str| rule[k][0].as_str().unwrap_or("").to_owned();
        let resource = first("resources");
        let (resource, subresource) = resource.split_once('/').unwrap_or((&resource, ""));
        let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
            "spec": {"user": user, "resourceAttributes": {
                "verb": first("verbs"), "group": first("apiGroups"),
                "resource": resource, "subresource": subresource, "name": first("resourceNames")}}
        }))
        .unwrap();
        let api = Api::<SubjectAccessReview>::all(self.client.clone());
        for _ in 0..100 {
            let answer = api.create(&PostParams::default(), &review).await.unwrap();
            if answer.status.is_some_and(|s| s.allowed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the grant to {user} did not take effect within 5 s");
    }

    async fn bind(&self, user: &str, role: &str, name: &str) {
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    async fn unbind(&self, name: &str) {
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

fn assert_forbidden(status: u16, body: &str, node: &str) {
    assert_eq!(status, 403, "{body}");
    let s: serde_json::Value = serde_json::from_str(body).expect("a Status body");
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["reason"], "Forbidden");
    assert_eq!(s["code"], 403);
    assert_eq!(s["details"]["kind"], "nodes");
    assert_eq!(s["details"]["name"], node);
    assert!(
        s["message"].as_str().unwrap().contains("resource=nodes"),
        "{body}"
    );
}

#[actix_rt::test]
async fn the_api_servers_identity_and_users_with_rbac_should_pass_and_others_get_403() {
    test_tiers::require!(ApiServer);
    let env = setup(StreamAuthorizationConfig::default()).await;
    let logs = env.logs();

    // The API server's kubelet-client identity, granted as kubeadm clusters do.
    let apiserver = format!("kube-apiserver-kubelet-client-{}", env.ns);
    env.bind(
        &apiserver,
        "system:kubelet-api-admin",
        &format!("cs-authz-{apiserver}"),
    )
    .await;
    let cert = env.stream_ca.user(&apiserver, None);
    let (status, body) = env.get_bytes_as(&cert, &logs, "").await;
    assert_eq!(status, 200);
    assert_eq!(body, kubelet::log_body());
    let (status, _) = env.get_as(&cert, "/metrics", &env.metrics_extra()).await;
    assert_eq!(status, 200);
    let denied_before = env.handle.counters().authz_denied;

    // A kubelet's certificate, its own node's or another's: no nodes/proxy.
    for cn in [
        format!("system:node:{}", env.node),
        "system:node:other".into(),
    ] {
        let cert = env.stream_ca.user(&cn, Some("system:nodes"));
        let (status, body) = env.get_as(&cert, &logs, "").await;
        assert_forbidden(status, &body, &env.node);
    }
    // A plain user.
    let alice = format!("alice-{}", env.ns);
    let cert = env.stream_ca.user(&alice, Some("dev"));
    let (status, body) = env.get_as(&cert, &logs, "").await;
    assert_forbidden(status, &body, &env.node);
    assert!(body.contains(&format!("user={alice}")), "{body}");
    let (status, body) = env.get_as(&cert, "/metrics", &env.metrics_extra()).await;
    assert_forbidden(status, &body, &env.node);
    // Unknown paths and pods say nothing to a caller without rights on every node.
    let (status, _) = env.get_as(&cert, "/pods", "").await;
    assert_eq!(status, 403);
    let (status, _) = env
        .get_as(&cert, &format!("/containerLogs/{}/nope/app", env.ns), "")
        .await;
    assert_eq!(status, 403);
    assert_eq!(env.handle.counters().authz_denied, denied_before + 6);

    // A user granted nodes/proxy (logs, exec, attach) but not nodes/metrics.
    let bob = format!("bob-{}", env.ns);
    env.grant(
        &bob,
        serde_json::json!([{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get", "create"]}]),
    )
    .await;
    let cert = env.stream_ca.user(&bob, Some("dev"));
    let (status, body) = env.get_bytes_as(&cert, &logs, "").await;
    assert_eq!(status, 200);
    assert_eq!(body, kubelet::log_body());
    let (status, body) = env.get_as(&cert, "/metrics", &env.metrics_extra()).await;
    assert_forbidden(status, &body, &env.node);
    assert!(body.contains("subresource=metrics"), "{body}");
    // nodes/proxy on all nodes lets bob see that a pod does not exist.
    let (status, _) = env
        .get_as(&cert, &format!("/containerLogs/{}/nope/app", env.ns), "")
        .await;
    assert_eq!(status, 404);

    // A grant limited to another node's name does not reach this one.
    let carol = format!("carol-{}", env.ns);
    env.grant(
        &carol,
        serde_json::json!([{"apiGroups": [""], "resources": ["nodes/proxy"], "resourceNames": ["other"], "verbs": ["get"]}]),
    )
    .await;
    let cert = env.stream_ca.user(&carol, None);
    let (status, body) = env.get_as(&cert, &logs, "").await;
    assert_forbidden(status, &body, &env.node);
}

#[actix_rt::test]
async fn answers_should_be_cached_for_their_ttl() {
    test_tiers::require!(ApiServer);
    let env = setup(StreamAuthorizationConfig {
        mode: Some(StreamAuthorizationMode::Webhook),
        cache_authorized_ttl_seconds: 300,
        cache_unauthorized_ttl_seconds: 2,
        ..StreamAuthorizationConfig::default()
    })
    .await;
    let logs = env.logs();
    let dave = format!("dave-{}", env.ns);
    let cert = env.stream_ca.user(&dave, None);
    let reviews = env.handle.counters().authz_reviews;
    let (status, _) = env.get_as(&cert, &logs, "").await;
    assert_eq!(status, 403);
    assert_eq!(env.handle.counters().authz_reviews, reviews + 1);

    // Granted now, but the denial is remembered for its TTL without asking again.
    let binding = env
        .grant(
            &dave,
            serde_json::json!([{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]),
        )
        .await;
    let (status, _) = env.get_as(&cert, &logs, "").await;
    assert_eq!(status, 403, "the denial must come from the cache");
    assert_eq!(env.handle.counters().authz_reviews, reviews + 1);

    // After the TTL the API server is asked again.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let allowed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let (status, _) = env.get_as(&cert, &logs, "").await;
            if status == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert!(allowed.is_ok(), "the grant was never seen");
    let after_grant = env.handle.counters().authz_reviews;
    assert!(after_grant > reviews + 1);

    // Revoked now, but the allowed answer lasts its (longer) TTL.
    env.unbind(&binding).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, _) = env.get_as(&cert, &logs, "").await;
    assert_eq!(status, 200, "the allowed answer must come from the cache");
    assert_eq!(env.handle.counters().authz_reviews, after_grant);
}

#[actix_rt::test]
async fn always_allow_should_be_explicit_and_webhook_should_need_a_client() {
    test_tiers::require!(ApiServer);
    let env = setup(StreamAuthorizationConfig {
        mode: Some(StreamAuthorizationMode::AlwaysAllow),
        ..StreamAuthorizationConfig::default()
    })
    .await;
    let cert = env.stream_ca.user(&format!("erin-{}", env.ns), None);
    let (status, body) = env.get_as(&cert, &env.logs(), "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(env.handle.counters().authz_reviews, 0);

    let pki = Pki::new("kubernetes-ca");
    let config = CloudStreamConfig {
        enable: false,
        stream_authorization: StreamAuthorizationConfig {
            mode: Some(StreamAuthorizationMode::Webhook),
            ..StreamAuthorizationConfig::default()
        },
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(pki.server()),
        stream: Some(ServerTls::Material(pki.server())),
    };
    let bus = Bus::new();
    let err = CloudStream::new(config, bus.endpoint("cloudStream"), None, tls).unwrap_err();
    assert!(
        matches!(err, cloudstream::Error::WebhookWithoutClient),
        "{err}"
    );
}

#[actix_rt::test]
async fn a_certificate_with_two_common_names_should_be_refused_before_any_review() {
    let env = setup(StreamAuthorizationConfig::default()).await;
    // The first CN may read logs; Go's x509 authenticator would see the last one, who may not.
    let first = format!("first-cn-{}", env.ns);
    env.grant(
        &first,
        serde_json::json!([{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]),
    )
    .await;
    let granted = env.stream_ca.user(&first, None);
    let (status, _) = env.get_as(&granted, &env.logs(), "").await;
    assert_eq!(status, 200, "the first CN alone is allowed");
    let reviews = env.handle.counters().authz_reviews;

    let two = env
        .stream_ca
        .user_with_two_common_names(&first, &format!("last-cn-{}", env.ns));
    let (status, body) = env.get_as(&two, &env.logs(), "").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("exactly one common name"), "{body}");
    assert_eq!(
        env.handle.counters().authz_reviews,
        reviews,
        "no review was made for a certificate that names no one"
    );
}
