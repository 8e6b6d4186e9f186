//! The rustls configurations, through real handshakes on loopback.

use std::sync::Arc;

use pki::{CertificateAuthority, ExtKeyUsage, IssueOptions, tls};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Server {
    addr: std::net::SocketAddr,
}

/// A TLS echo-one-byte server; returns whether each handshake succeeded through the channel.
async fn serve(
    config: rustls::ServerConfig,
) -> (Server, tokio::sync::mpsc::UnboundedReceiver<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(mut s) => {
                        let _ = tx.send(true);
                        let mut b = [0u8; 1];
                        if s.read_exact(&mut b).await.is_ok() {
                            let _ = s.write_all(&b).await;
                        }
                    }
                    Err(_) => {
                        let _ = tx.send(false);
                    }
                }
            });
        }
    });
    (Server { addr }, rx)
}

async fn talk(server: &Server, config: rustls::ClientConfig) -> bool {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let Ok(mut s) = connector.connect(name, tcp).await else {
        return false;
    };
    if s.write_all(b"x").await.is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.is_ok()
}

fn material() -> (CertificateAuthority, pki::CertAndKey) {
    let ca = CertificateAuthority::generate().unwrap();
    let server = ca.issue_server_cert(&["127.0.0.1".into()], &[]).unwrap();
    (ca, server)
}

#[tokio::test]
async fn mutual_tls_accepts_an_edge_certificate() {
    let (ca, server) = material();
    let (srv, mut results) =
        serve(tls::server_config_mutual(ca.cert_der(), &server.cert_der, &server.key_der).unwrap())
            .await;
    let edge = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
    let client = tls::client_config(ca.cert_der(), Some((&edge.cert_der, &edge.key_der))).unwrap();
    assert!(talk(&srv, client).await);
    assert_eq!(results.recv().await, Some(true));
}

#[tokio::test]
async fn mutual_tls_refuses_no_cert_foreign_ca_and_server_auth_only() {
    let (ca, server) = material();
    let (srv, mut results) =
        serve(tls::server_config_mutual(ca.cert_der(), &server.cert_der, &server.key_der).unwrap())
            .await;
    assert!(!talk(&srv, tls::client_config(ca.cert_der(), None).unwrap()).await);
    assert_eq!(results.recv().await, Some(false));
    let other = CertificateAuthority::generate().unwrap();
    let foreign = other.issue(&IssueOptions::edge("edge-1")).unwrap();
    assert!(
        !talk(
            &srv,
            tls::client_config(ca.cert_der(), Some((&foreign.cert_der, &foreign.key_der))).unwrap()
        )
        .await
    );
    assert_eq!(results.recv().await, Some(false));
    let mut opts = IssueOptions::edge("edge-1");
    opts.ext_key_usages = vec![ExtKeyUsage::ServerAuth];
    let wrong_eku = ca.issue(&opts).unwrap();
    assert!(
        !talk(
            &srv,
            tls::client_config(
                ca.cert_der(),
                Some((&wrong_eku.cert_der, &wrong_eku.key_der))
            )
            .unwrap()
        )
        .await
    );
    assert_eq!(results.recv().await, Some(false));
}

#[tokio::test]
async fn client_refuses_a_server_of_another_ca_but_insecure_bootstrap_accepts_it() {
    let (_, server) = material();
    let other = CertificateAuthority::generate().unwrap();
    let (srv, _results) =
        serve(tls::server_config_optional_client(&server.cert_der, &server.key_der).unwrap()).await;
    assert!(!talk(&srv, tls::client_config(other.cert_der(), None).unwrap()).await);
    assert!(talk(&srv, tls::insecure_client_config()).await);
}

#[tokio::test]
async fn optional_client_auth_accepts_with_and_without_a_certificate() {
    let (ca, server) = material();
    let (srv, _results) =
        serve(tls::server_config_optional_client(&server.cert_der, &server.key_der).unwrap()).await;
    assert!(talk(&srv, tls::client_config(ca.cert_der(), None).unwrap()).await);
    let other = CertificateAuthority::generate().unwrap();
    let foreign = other.issue(&IssueOptions::edge("x")).unwrap();
    assert!(
        talk(
            &srv,
            tls::client_config(ca.cert_der(), Some((&foreign.cert_der, &foreign.key_der))).unwrap()
        )
        .await
    );
}

#[tokio::test]
async fn tls12_with_ecdsa_suites_works_and_rsa_suites_are_not_offered() {
    let (ca, server) = material();
    let (srv, _r) =
        serve(tls::server_config_mutual(ca.cert_der(), &server.cert_der, &server.key_der).unwrap())
            .await;
    let edge = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
    let tls12 = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates({
            let mut r = rustls::RootCertStore::empty();
            r.add(ca.cert_der().to_vec().into()).unwrap();
            r
        })
        .with_client_auth_cert(
            vec![edge.cert_der.clone().into()],
            pki::load_private_key(&edge.key_der).unwrap(),
        )
        .unwrap();
    assert!(talk(&srv, tls12).await);
    assert!(
        tls::provider()
            .cipher_suites
            .iter()
            .all(|s| !format!("{:?}", s.suite()).contains("RSA"))
    );
}

#[tokio::test]
async fn revocable_mutual_tls_refuses_a_revoked_node_from_the_next_handshake_on() {
    let (ca, server) = material();
    let revocations = pki::Revocations::new();
    let config = tls::server_config_mutual_revocable(
        ca.cert_der(),
        &server.cert_der,
        &server.key_der,
        &revocations,
    )
    .unwrap();
    let (srv, mut results) = serve(config).await;
    let edge = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
    // One configuration (and so one session cache) for both: no resumption past the revocation.
    let client = tls::client_config(ca.cert_der(), Some((&edge.cert_der, &edge.key_der))).unwrap();
    assert!(talk(&srv, client.clone()).await);
    assert_eq!(results.recv().await, Some(true));

    revocations.revoke("edge-1", pki::unix_now());
    assert!(!talk(&srv, client).await);
    assert_eq!(results.recv().await, Some(false));
    assert_eq!(revocations.refused(), 1);
    // Another node, and a certificate issued after the revocation, pass.
    let other = ca.issue(&IssueOptions::edge("edge-2")).unwrap();
    let other_client =
        tls::client_config(ca.cert_der(), Some((&other.cert_der, &other.key_der))).unwrap();
    assert!(talk(&srv, other_client).await);
    assert_eq!(results.recv().await, Some(true));
    tokio::time::sleep(revocations.issue_delay("edge-1")).await;
    let fresh = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
    let fresh_client =
        tls::client_config(ca.cert_der(), Some((&fresh.cert_der, &fresh.key_der))).unwrap();
    assert!(talk(&srv, fresh_client).await);
    assert_eq!(results.recv().await, Some(true));
}
