//! The stream server authenticates the API server by its client certificate.

use std::sync::Arc;

use crate::support::{self, Cloud, Eku, Pki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn try_get(cloud: &Cloud, config: Arc<rustls::ClientConfig>) -> std::io::Result<Vec<u8>> {
    let mut c = support::tls_connect(cloud.handle.stream_addr().port(), config).await?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:10351\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    c.read_to_end(&mut out).await?;
    Ok(out)
}

#[actix_rt::test]
async fn stream_server_should_refuse_api_clients_with_a_foreign_or_no_certificate() {
    let cloud = Cloud::start().await;
    let foreign = Pki::new("elsewhere").client("kube-apiserver-kubelet-client", Eku::ClientAuth);
    let config = pki::stream_tls::client_config(
        foreign.cert_chain.clone(),
        foreign.key.clone_key(),
        Some(&[cloud.stream_ca.ca()]),
    )
    .unwrap();
    let r = try_get(&cloud, config).await;
    assert!(
        r.is_err() || r.as_ref().unwrap().is_empty(),
        "foreign certificate got an answer: {r:?}"
    );

    let anonymous = rustls::ClientConfig::builder_with_provider(pki::stream_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates({
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cloud.stream_ca.ca()).unwrap();
            roots
        })
        .with_no_client_auth();
    let r = try_get(&cloud, Arc::new(anonymous)).await;
    assert!(
        r.is_err() || r.as_ref().unwrap().is_empty(),
        "anonymous client got an answer: {r:?}"
    );

    // The right certificate gets an HTTP answer (no tunnel for that node: 503).
    let good = cloud
        .stream_ca
        .client("kube-apiserver-kubelet-client", Eku::ClientAuth);
    let config = pki::stream_tls::client_config(
        good.cert_chain.clone(),
        good.key.clone_key(),
        Some(&[cloud.stream_ca.ca()]),
    )
    .unwrap();
    let mut c = support::tls_connect(cloud.handle.stream_addr().port(), config)
        .await
        .unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:10351\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(support::read_response(&mut c).await.0.status, 503);
}
