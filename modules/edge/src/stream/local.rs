//! Request heads for the local kubelet, built from CONNECT JSON that may be hostile: names
//! and values are checked, and the target is rebuilt with Go's escaping.

use std::fmt::Write as _;
use std::net::SocketAddr;

use kubeedge_wire::tunnel::ConnectRequest;

/// Why a CONNECT could not become a local request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalError {
    /// The URL cannot be a request target.
    #[error("bad url: {0}")]
    Url(#[from] kubeedge_wire::gourl::UrlError),
    /// A header name or value could smuggle lines.
    #[error("header {0:?} is not allowed on a request line")]
    Header(String),
    /// The method is not a token.
    #[error("method {0:?} is not allowed")]
    Method(String),
}

fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn value_ok(v: &str) -> bool {
    !v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

/// Headers a relayed GET does not pass on: hop-by-hop ones and those the agent sets.
const GET_SKIP: [&str; 11] = [
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "accept-encoding",
    "expect",
];

/// Headers Go's `Request.Write` writes itself (`reqWriteExcludeHeader`).
const RAW_SKIP: [&str; 5] = [
    "host",
    "user-agent",
    "content-length",
    "transfer-encoding",
    "trailer",
];

fn headers(out: &mut String, req: &ConnectRequest, skip: &[&str]) -> Result<(), LocalError> {
    for (name, values) in &req.header {
        if !token(name) {
            return Err(LocalError::Header(name.clone()));
        }
        if skip.iter().any(|s| name.eq_ignore_ascii_case(s)) {
            continue;
        }
        for v in values {
            if !value_ok(v) {
                return Err(LocalError::Header(name.clone()));
            }
            let _ = write!(out, "{name}: {v}\r\n");
        }
    }
    Ok(())
}

/// A GET for logs and metrics. `Accept-Encoding: identity` always (upstream sets it for
/// metrics; logs get it too because no response header reaches the API server, so a
/// compressed body would arrive as garbage), and `Connection: close`.
pub(crate) fn get_head(req: &ConnectRequest, kubelet: SocketAddr) -> Result<String, LocalError> {
    let mut out = format!(
        "GET {} HTTP/1.1\r\nHost: {kubelet}\r\n",
        req.url.request_target()?
    );
    headers(&mut out, req, &GET_SKIP)?;
    out.push_str("Accept-Encoding: identity\r\nConnection: close\r\n\r\n");
    Ok(out)
}

/// The upgrade request for exec/attach, as Go's `Request.Write` lays it out: request line,
/// `Host`, `User-Agent`, `Content-Length: 0` for POST, then the headers sorted by name.
pub(crate) fn raw_head(req: &ConnectRequest, kubelet: SocketAddr) -> Result<String, LocalError> {
    let method = req
        .method
        .as_deref()
        .filter(|m| !m.is_empty())
        .unwrap_or("GET");
    if !token(method) {
        return Err(LocalError::Method(method.to_owned()));
    }
    let agent = req
        .header
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
        .and_then(|(_, v)| v.first())
        .map(String::as_str)
        .unwrap_or("Go-http-client/1.1");
    if !value_ok(agent) {
        return Err(LocalError::Header("User-Agent".into()));
    }
    let mut out = format!(
        "{method} {} HTTP/1.1\r\nHost: {kubelet}\r\nUser-Agent: {agent}\r\n",
        req.url.request_target()?
    );
    if matches!(method, "POST" | "PUT" | "PATCH") {
        out.push_str("Content-Length: 0\r\n");
    }
    headers(&mut out, req, &RAW_SKIP)?;
    out.push_str("\r\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeedge_wire::gourl::GoUrl;

    fn req(headers: &[(&str, &str)], method: Option<&str>) -> ConnectRequest {
        let url =
            GoUrl::from_request_target("/exec/ns/p/c?command=sh&stdin=1", "http", "10.9.9.9:1")
                .unwrap();
        let mut r = ConnectRequest::new(1, url, [], method);
        for (n, v) in headers {
            r.header
                .entry((*n).to_owned())
                .or_default()
                .push((*v).to_owned());
        }
        r
    }

    #[test]
    fn raw_head_should_look_like_go_request_write() {
        let r = req(
            &[
                ("Upgrade", "SPDY/3.1"),
                ("Connection", "Upgrade"),
                ("User-Agent", "kube"),
            ],
            Some("POST"),
        );
        let head = raw_head(&r, "127.0.0.1:10350".parse().unwrap()).unwrap();
        assert_eq!(
            head,
            "POST /exec/ns/p/c?command=sh&stdin=1 HTTP/1.1\r\nHost: 127.0.0.1:10350\r\nUser-Agent: kube\r\nContent-Length: 0\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
        );
    }

    #[test]
    fn get_head_should_force_identity_and_ignore_the_cloud_host() {
        let r = req(&[("Accept-Encoding", "gzip"), ("Host", "evil:1")], None);
        let head = get_head(&r, "127.0.0.1:10350".parse().unwrap()).unwrap();
        assert!(head.contains("Host: 127.0.0.1:10350\r\n"));
        assert!(head.contains("Accept-Encoding: identity\r\n"));
        assert!(!head.contains("gzip"));
        assert!(!head.contains("evil"));
    }

    #[test]
    fn smuggled_lines_should_be_refused() {
        let r = req(&[("X-A", "1\r\nHost: evil")], None);
        assert!(get_head(&r, "127.0.0.1:1".parse().unwrap()).is_err());
        let r = req(&[("X A", "1")], None);
        assert!(raw_head(&r, "127.0.0.1:1".parse().unwrap()).is_err());
        let r = req(&[], Some("GET / HTTP/1.1\r\n"));
        assert!(raw_head(&r, "127.0.0.1:1".parse().unwrap()).is_err());
    }
}
