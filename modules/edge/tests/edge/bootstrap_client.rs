//! The bootstrap's HTTPS client against a scripted certificate server on 127.0.0.1: the CA is
//! read to the end of a response without a length, the signing request is a GET whose body is
//! the CSR and whose server is verified against the downloaded CA, and an oversized answer is
//! refused.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request as the server read it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads one request: the head up to the blank line, then `Content-Length` bytes of body.
async fn read_request<S: AsyncReadExt + Unpin>(s: &mut S) -> Seen {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).await.expect("request head");
        raw.push(byte[0]);
    }
    let mut seen = Seen {
        head: String::from_utf8(raw).expect("text head"),
        body: Vec::new(),
    };
    let length: usize = seen
        .header("content-length")
        .map_or(0, |v| v.parse().expect("a length"));
    seen.body = vec![0; length];
    s.read_exact(&mut seen.body).await.expect("request body");
    seen
}

/// A TLS certificate server with a certificate for 127.0.0.1 signed by `ca`; answers each
/// request with `answer(path)` as raw bytes, then closes the connection.
async fn server(
    ca: &pki::CertificateAuthority,
    answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let cert = ca
        .issue_server_cert(&["127.0.0.1".to_owned()], &[])
        .unwrap();
    let config = pki::tls::server_config_optional_client(&cert.cert_der, &cert.key_der).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (log, answer) = (seen.clone(), Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, log, answer) = (acceptor.clone(), log.clone(), answer.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let request = read_request(&mut tls).await;
                let path = request
                    .head
                    .split(' ')
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                log.lock().unwrap().push(request);
                let _ = tls.write_all(&answer(&path)).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn bootstrap_reads_an_unsized_ca_and_sends_the_csr_as_the_body_of_a_get() {
    let ca = pki::CertificateAuthority::generate().unwrap();
    let ca_der = ca.cert_der().to_vec();
    let (addr, seen) = server(&ca, move |path| match path {
        // No Content-Length: the body ends where the connection does.
        "/ca.crt" => [
            &b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"[..],
            &ca_der,
        ]
        .concat(),
        _ => b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied".to_vec(),
    })
    .await;
    let token = format!("{}.h.c.s", pki::sha256_hex(ca.cert_der()));
    let err = edge::hub::bootstrap(&format!("https://{addr}"), &token, "edge-1")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, edge::hub::HubError::Http { status: 403, body } if body == "denied"),
        "{err:?}"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen[0].head.starts_with("GET /ca.crt HTTP/1.1\r\n"),
        "{seen:?}"
    );
    let sign = &seen[1];
    assert!(
        sign.head.starts_with("GET /edge.crt HTTP/1.1\r\n"),
        "{sign:?}"
    );
    assert_eq!(sign.header("host"), Some(addr.to_string().as_str()));
    assert_eq!(sign.header("nodename"), Some("edge-1"));
    assert_eq!(sign.header("authorization"), Some("Bearer h.c.s"));
    ca.sign_edge_csr(&sign.body, "edge-1", &[], &pki::SignPolicy::default())
        .expect("the body is this node's CSR");
}

#[tokio::test]
async fn a_ca_answer_over_the_size_limit_is_refused() {
    let ca = pki::CertificateAuthority::generate().unwrap();
    let big = 5 * 1024 * 1024;
    let (addr, _) = server(&ca, move |_| {
        let mut answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {big}\r\n\r\n").into_bytes();
        answer.resize(answer.len() + big, b'x');
        answer
    })
    .await;
    let err = edge::hub::bootstrap(&format!("https://{addr}"), "aa.h.c.s", "edge-1")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("read response: "), "{err}");
}
