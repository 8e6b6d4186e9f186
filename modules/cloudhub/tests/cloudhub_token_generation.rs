//! Invalidating every outstanding bootstrap token: an operator sets a new value in the
//! annotation `kubeedge.io/token-generation` of Secret `kubeedge/tokensecret`; from then on the
//! certificate server refuses every token issued under the earlier generation, and the hub
//! issues (and stores in the Secret) a new token that works. Against the real API server.
//!
//! A test binary of its own: the generation is shared by every hub on one API server, so a
//! bump here would invalidate the tokens of the other cloudhub tests.

#[path = "cloudhub/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use support::*;

/// `GET /edge.crt` for `node` with `token`: the status and body.
async fn sign_with(h: &Harness, token: &str, node: &str) -> (u16, String) {
    let jwt = pki::split_token(token).expect("a token").1.to_owned();
    let csr = pki::EdgeCsr::generate(node).unwrap();
    let headers = vec![
        ("NodeName", node.to_owned()),
        ("Authorization", format!("Bearer {jwt}")),
    ];
    let (status, body) = https(
        h.https,
        h.tls(None),
        "GET",
        "/edge.crt",
        &headers,
        &csr.csr_der,
    )
    .await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[actix_rt::test]
async fn a_new_token_generation_refuses_every_earlier_token() {
    let client = k8s_testenv::client().await;
    let h = Harness::with_kube(
        client.clone(),
        Arc::new(cloudhub::MemoryStore::new()),
        Default::default(),
    )
    .await;
    let before = h.hub.token();
    let (status, body) = sign_with(&h, &before, "gen-edge-1").await;
    assert_eq!(status, 200, "{body}");

    // The operator's bump.
    let secrets = Api::<Secret>::namespaced(client.clone(), "kubeedge");
    let bump = serde_json::json!({"metadata": {"annotations": {
        cloudhub::TOKEN_GENERATION_ANNOTATION: "2"
    }}});
    secrets
        .patch("tokensecret", &PatchParams::default(), &Patch::Merge(&bump))
        .await
        .expect("annotate the token secret");
    let (status, body) = sign_with(&h, &before, "gen-edge-2").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("invalidated"), "{body}");
    assert_eq!(h.hub.cert_server_stats().unauthorized, 1);

    // A new token is issued and stored; it works, the old one still does not.
    let mut after = before.clone();
    for _ in 0..300 {
        after = h.hub.token();
        if after != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(after, before, "no new token within 30 s");
    // The hub takes the new token before its write to the Secret lands.
    let mut stored = String::new();
    for _ in 0..300 {
        let secret = secrets.get("tokensecret").await.unwrap();
        stored = String::from_utf8_lossy(&secret.data.unwrap_or_default()["tokendata"].0).into();
        if stored == after {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stored, after,
        "the Secret holds the new token (keadm gettoken reads it)"
    );
    let (status, body) = sign_with(&h, &after, "gen-edge-3").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sign_with(&h, &before, "gen-edge-4").await.0, 401);
    h.hub.shutdown().await;
}
