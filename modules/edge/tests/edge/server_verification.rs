//! The edge verifies the cloud by default: the tunnel TLS the stream agent dials with refuses
//! a server certificate its CA did not sign, and takes it only when told `InsecureSkipVerify`.

use std::net::SocketAddr;
use std::sync::Arc;

use edge::ServerVerification;
use edge::stream::{client_tls, client_tls_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TLS server on 127.0.0.1 with a certificate for 127.0.0.1 signed by `ca`; answers each
/// connection with one byte.
async fn server(ca: &pki::CertificateAuthority) -> SocketAddr {
    let cert = ca
        .issue_server_cert(&["127.0.0.1".to_owned()], &[])
        .unwrap();
    let config = pki::tls::server_config_optional_client(&cert.cert_der, &cert.key_der).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(b"k").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

fn material(node_ca: &pki::CertificateAuthority, trusted: &[u8]) -> pki::stream_tls::TlsMaterial {
    let node = node_ca.issue(&pki::IssueOptions::edge("edge-1")).unwrap();
    pki::stream_tls::TlsMaterial::from_bytes(&node.cert_der, &node.key_der, trusted).unwrap()
}

async fn talk(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Result<(), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut s = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.map_err(|e| e.to_string())?;
    Ok(())
}

#[tokio::test]
async fn tunnel_tls_refuses_a_server_outside_its_ca_unless_told_insecure() {
    let cloud = pki::CertificateAuthority::generate().unwrap();
    let other = pki::CertificateAuthority::generate().unwrap();
    let addr = server(&cloud).await;

    let wrong = material(&cloud, other.cert_der());
    let err = talk(addr, client_tls(&wrong).unwrap()).await.unwrap_err();
    assert!(err.contains("invalid peer certificate"), "{err}");
    talk(
        addr,
        client_tls_with(&wrong, ServerVerification::InsecureSkipVerify).unwrap(),
    )
    .await
    .unwrap();

    let right = material(&cloud, cloud.cert_der());
    talk(addr, client_tls(&right).unwrap()).await.unwrap();
    assert_eq!(
        ServerVerification::default(),
        ServerVerification::VerifyWithCa
    );
}
