//! The HTTPS client for the certificate server: hyper's HTTP/1.1 client over one rustls
//! connection per request (the edge sends a GET with a body, which pooled clients refuse).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use super::dial::dial;
use super::error::HubError;

/// Largest response body accepted.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// `https://host:port` split into (host, port); the port defaults to 443.
pub(crate) fn host_port(base: &str) -> Result<(String, u16), HubError> {
    let bad = |why: &str| HubError::transport("http server", format!("{base:?} {why}"));
    let uri: http::Uri = base.parse().map_err(|_| bad("is not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("is not an https:// URL"));
    }
    let (Some(authority), Some(host)) = (uri.authority(), uri.host()) else {
        return Err(bad("has no host"));
    };
    let port = match uri.port_u16() {
        Some(port) => port,
        None if authority.as_str() == host => 443,
        None => return Err(bad("has a bad port")),
    };
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port,
    ))
}

/// A response: status and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// Sends one request from `local` (the OS picks when `None`) and reads the whole response
/// (`Connection: close`), all within `timeout`; a body over [`MAX_BODY`] is an error.
#[allow(clippy::too_many_arguments)] // one private call shape: the request and how to dial it
pub(crate) async fn request(
    base: &str,
    local: Option<std::net::IpAddr>,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
    tls: Arc<ClientConfig>,
    timeout: Duration,
) -> Result<Response, HubError> {
    let (host, port) = host_port(base)?;
    let send = |e: hyper::Error| HubError::transport("send request", e);
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::CONNECTION, "close");
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let request = builder
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| HubError::transport("build request", e))?;
    tokio::time::timeout(timeout, async {
        let server = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        let tcp = dial(&server, local)
            .await
            .map_err(|e| HubError::transport("connect to the certificate server", e))?;
        let name = ServerName::try_from(host.clone())
            .map_err(|e| HubError::transport("server name", e))?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| HubError::transport("tls to the certificate server", e))?;
        let (mut sender, connection) =
            http1::handshake(TokioIo::new(stream)).await.map_err(send)?;
        let exchange = async move {
            let response = sender.send_request(request).await.map_err(send)?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| HubError::transport("read response", e))?
                .to_bytes();
            Ok(Response {
                status,
                body: body.to_vec(),
            })
        };
        // The connection does the I/O of the exchange; it ends when the response is read.
        tokio::pin!(exchange);
        tokio::select! {
            response = &mut exchange => response,
            done = connection => {
                done.map_err(|e| HubError::transport("read response", e))?;
                exchange.await
            }
        }
    })
    .await
    .map_err(|_| HubError::transport("certificate server", "timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_and_port() {
        assert_eq!(
            host_port("https://127.0.0.1:10002").unwrap(),
            ("127.0.0.1".into(), 10002)
        );
        assert_eq!(
            host_port("https://cloud.example").unwrap(),
            ("cloud.example".into(), 443)
        );
        assert_eq!(
            host_port("https://[::1]:10002/").unwrap(),
            ("::1".into(), 10002)
        );
        assert!(host_port("http://x").is_err());
        assert!(host_port("https://x:port").is_err());
    }
}
