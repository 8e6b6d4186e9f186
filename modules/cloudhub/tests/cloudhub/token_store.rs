//! The bootstrap token's two homes are written independently: a token file that cannot be
//! written (a read-only Secret mount in a pod) does not keep the token from Secret
//! `kubeedge/tokensecret`, and an unreachable API server does not keep it from the file.

use std::sync::Arc;

use crate::support::{TempDir, config, init_tracing};
use cloudhub::{CloudHub, HubOptions, MemoryStore, NAMESPACE, TOKEN_SECRET};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

async fn secret_token(client: &kube::Client) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get_opt(TOKEN_SECRET)
        .await
        .unwrap()?;
    let data = secret.data.unwrap_or_default();
    data.get("tokendata")
        .map(|b| String::from_utf8(b.0.clone()).unwrap())
}

#[actix_rt::test]
async fn an_unwritable_token_file_does_not_skip_the_secret() {
    test_tiers::require!(ApiServer);
    init_tracing();
    let client = k8s_testenv::client().await;
    let dir = TempDir::new("cloudhub-token");
    // A parent that is a regular file: unwritable for root too, unlike a chmod'ed directory.
    let blocker = dir.0.join("not-a-dir");
    std::fs::write(&blocker, "x").unwrap();
    let mut c = config(&dir.0);
    c.tls_ca_file = blocker.join("rootCA.crt");
    c.tls_ca_key_file = blocker.join("rootCA.key");
    assert!(std::fs::create_dir_all(c.token_file().parent().unwrap()).is_err());

    let direct = cloudhub::store_token(&c, Some(&client), "direct-token").await;
    assert!(direct.is_ok(), "the Secret was stored: {direct:?}");
    assert_eq!(secret_token(&client).await.as_deref(), Some("direct-token"));

    let bus = beehive::Bus::new();
    let hub = CloudHub::with_options(
        c.clone(),
        bus.endpoint("cloudhub"),
        Some(client.clone()),
        Arc::new(MemoryStore::new()),
        HubOptions::default(),
    )
    .await
    .expect("cloudhub starts without a writable token file");
    let token = hub.handle().token();
    assert!(!token.is_empty());
    assert_eq!(secret_token(&client).await, Some(token));
    assert!(!c.token_file().exists());

    // Without Kubernetes the file is the only home: its failure is the result.
    assert!(cloudhub::store_token(&c, None, "t").await.is_err());
}

#[actix_rt::test]
async fn an_unreachable_api_server_does_not_skip_the_file() {
    init_tracing();
    let dir = TempDir::new("cloudhub-token");
    let c = config(&dir.0);
    // Nothing listens on port 1 of loopback.
    let kube_config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    let client = kube::Client::try_from(kube_config).unwrap();
    let result = cloudhub::store_token(&c, Some(&client), "file-token").await;
    assert!(result.is_err(), "the Secret could not be stored");
    assert_eq!(
        std::fs::read_to_string(c.token_file()).unwrap(),
        "file-token"
    );
}
