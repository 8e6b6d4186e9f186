//! A minimal HTTPS/1.1 client for the certificate server (one request per connection; the
//! edge sends a GET with a body, which common clients refuse).

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::HubError;

/// Largest response body accepted.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// `https://host:port` split into (host, port).
pub(crate) fn host_port(base: &str) -> Result<(String, u16), HubError> {
    let rest = base.strip_prefix("https://").ok_or_else(|| {
        HubError::transport("http server", format!("{base:?} is not an https:// URL"))
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
            h,
            p.parse()
                .map_err(|_| HubError::transport("http server", format!("bad port in {base:?}")))?,
        ),
        _ => (authority, 443),
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

/// Sends one request and reads the whole response (`Connection: close`).
pub(crate) async fn request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
    tls: Arc<ClientConfig>,
    timeout: Duration,
) -> Result<Response, HubError> {
    let (host, port) = host_port(base)?;
    tokio::time::timeout(timeout, async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| HubError::transport("connect to the certificate server", e))?;
        let name = ServerName::try_from(host.clone()).map_err(|e| HubError::transport("server name", e))?;
        let mut s = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| HubError::transport("tls to the certificate server", e))?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).await.map_err(|e| HubError::transport("send request", e))?;
        s.write_all(body).await.map_err(|e| HubError::transport("send request", e))?;
        s.flush().await.map_err(|e| HubError::transport("send request", e))?;
        let mut raw = Vec::new();
        loop {
            let mut chunk = [0u8; 8192];
            match s.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
                // Servers often drop TLS without close_notify after Connection: close.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(HubError::transport("read response", e)),
            }
            if raw.len() > MAX_BODY + 16 * 1024 {
                return Err(HubError::transport("read response", "response too large"));
            }
            if let Some(resp) = parse(&raw, false)? {
                return Ok(resp);
            }
        }
        parse(&raw, true)?.ok_or_else(|| HubError::transport("read response", "truncated response"))
    })
    .await
    .map_err(|_| HubError::transport("certificate server", "timed out"))?
}

/// A complete response from `raw`, or `None` when more bytes are needed.
fn parse(raw: &[u8], eof: bool) -> Result<Option<Response>, HubError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let start = match resp
        .parse(raw)
        .map_err(|e| HubError::transport("parse response", e))?
    {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let status = resp.code.unwrap_or(0);
    let length = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let body = &raw[start..];
    match length {
        Some(n) if body.len() >= n => Ok(Some(Response {
            status,
            body: body[..n].to_vec(),
        })),
        Some(_) => Ok(None),
        None if eof => Ok(Some(Response {
            status,
            body: body.to_vec(),
        })),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_responses_parse() {
        assert_eq!(
            host_port("https://127.0.0.1:10002").unwrap(),
            ("127.0.0.1".into(), 10002)
        );
        assert_eq!(
            host_port("https://cloud.example").unwrap(),
            ("cloud.example".into(), 443)
        );
        assert!(host_port("http://x").is_err());
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
            .unwrap()
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", false)
                .unwrap()
                .is_none()
        );
        assert_eq!(
            parse(b"HTTP/1.1 404 Not Found\r\n\r\nnope", true)
                .unwrap()
                .unwrap()
                .body,
            b"nope"
        );
    }
}
