//! Node names from the wire: only a name Kubernetes accepts for a Node (a DNS-1123
//! subdomain) ever becomes a certificate, a hub session or a tunnel. A name such as
//! `victim?` would otherwise reach API paths as `/api/v1/nodes/victim?` — the Node `victim`
//! — and let one node rewrite another's records. A certificate for such a name, signed
//! before names were checked, is refused at the WebSocket and at the tunnel, and the Node it
//! points at is left alone.

use super::*;
use edge::hub::{EdgeCerts, HubError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The names no certificate is issued for, each for its own reason.
const BAD_NAMES: [&str; 6] = [
    "victim?x=1",
    "victim?",
    "victim#frag",
    "Victim",
    "victim/status",
    "..",
];

/// A certificate for `node` signed with the cloud's CA (Secret `kubeedge/casecret`) directly,
/// as a cloudcore that did not check names could have issued it.
async fn signed_by_the_cloud_ca(node: &str) -> EdgeCerts {
    // The cloud stores its CA when it starts.
    cloud();
    let client = k8s_testenv::client().await;
    let secret = Api::<Secret>::namespaced(client, "kubeedge")
        .get("casecret")
        .await
        .expect("the cloud's CA secret");
    let data = secret.data.expect("CA secret data");
    let (cert, key) = (data["cadata"].0.clone(), data["cakeydata"].0.clone());
    let authority = pki::CertificateAuthority::from_der(cert.clone(), key).expect("the CA");
    let csr = pki::EdgeCsr::generate(node).expect("a CSR");
    let cert_der = authority
        .sign_edge_csr(&csr.csr_der, node, &[], &pki::SignPolicy::default())
        .expect("the CA signs any CSR whose CN matches");
    EdgeCerts {
        ca_der: cert,
        cert_der,
        key_der: csr.key_der,
    }
}

/// The whole answer to a WebSocket upgrade of `path` on `addr`, presenting `certs` and
/// sending `headers`.
async fn upgrade(
    certs: &EdgeCerts,
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> String {
    let config = Arc::new(certs.client_tls().expect("client TLS"));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("dial");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("TLS");
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    tls.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    // A refusal closes the connection after its text; an upgrade leaves it open.
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_node_name_that_is_not_a_node_name_should_get_no_certificate() {
    let core = cloud();
    let url = format!("https://{}", core.spec().ports.https_addr());
    let token = core.token().expect("bootstrap token");
    for bad in BAD_NAMES {
        match edge::hub::bootstrap(&url, &token, bad).await {
            Err(HubError::Http { status, body }) => {
                assert_eq!(status, 400, "{bad:?}: {body}");
                assert!(body.contains("NodeName header"), "{bad:?}: {body}");
                assert!(body.contains("DNS-1123 subdomain"), "{bad:?}: {body}");
            }
            Err(e) => panic!("{bad:?}: refused for another reason: {e}"),
            Ok(_) => panic!("a certificate was issued for node name {bad:?}"),
        }
    }
    // The same token still issues a valid name's certificate.
    edge::hub::bootstrap(&url, &token, &unique("valid"))
        .await
        .expect("a valid name is signed");
}

#[tokio::test]
async fn a_certificate_for_a_name_with_a_query_should_neither_connect_nor_touch_the_node_it_names()
{
    let client = k8s_testenv::client().await;
    let victim = unique("victim");
    edge_node(&client, &victim).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let before = nodes.get(&victim).await.expect("the victim Node");
    let bad = format!("{victim}?");
    let certs = signed_by_the_cloud_ca(&bad).await;

    // The WebSocket: refused before the upgrade, with the reason.
    let ports = cloud().spec().ports;
    let answer = upgrade(
        &certs,
        ports.websocket_addr(),
        &format!("/e632aba927ea4ac2b575ec1603d56f10/{bad}/events"),
        &[("Node_id", &bad), ("Connectionuse", "msg")],
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("invalid Node_id header"), "{answer}");

    // The tunnel: refused before the upgrade too.
    let answer = upgrade(
        &certs,
        ports.tunnel_addr(),
        "/v1/kubeedge/connect",
        &[
            ("SessionHostNameOverride", &bad),
            ("SessionInternalIP", "127.0.0.1"),
        ],
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("DNS-1123 subdomain"), "{answer}");

    // Nothing was written to the Node the name points at (a connected session would have
    // set its `cloudcore` annotation; a tunnel its kubelet port).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = nodes.get(&victim).await.expect("the victim Node");
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "the victim Node changed: {:?}",
        after.metadata.annotations
    );
}
