//! The HTTP/1.1 upgrade: the server's checks (gorilla's, with its reason texts, since edges
//! log them) and the client's request and answer check, for every WebSocket client here.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::WsError;
use crate::http1::{self, RequestHead, ResponseHead};

/// How much of a refusal's body the client reads for its error.
const MAX_REFUSAL_BODY: usize = 4096;

const BAD_HANDSHAKE: &str = "websocket: the client is not using the websocket protocol: ";

/// Why an upgrade request is refused: the HTTP status and the reason text sent as body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 400 or 405.
    pub status: u16,
    /// gorilla's reason text.
    pub reason: String,
}

/// `Sec-WebSocket-Accept` for a client key.
pub fn accept_key(key: &[u8]) -> String {
    String::from_utf8_lossy(&actix_http::ws::hash_key(key)).into_owned()
}

/// gorilla's `Upgrader.Upgrade` checks, in its order; `Ok` carries the accept key.
pub fn check_upgrade_request(head: &RequestHead) -> Result<String, Refusal> {
    let refuse = |status: u16, reason: String| Err(Refusal { status, reason });
    let h = &head.headers;
    if !h.has_token("Connection", "upgrade") {
        return refuse(
            400,
            format!("{BAD_HANDSHAKE}'upgrade' token not found in 'Connection' header"),
        );
    }
    if !h.has_token("Upgrade", "websocket") {
        return refuse(
            400,
            format!("{BAD_HANDSHAKE}'websocket' token not found in 'Upgrade' header"),
        );
    }
    if head.method != "GET" {
        return refuse(405, format!("{BAD_HANDSHAKE}request method is not GET"));
    }
    if !h.has_token("Sec-Websocket-Version", "13") {
        return refuse(
            400,
            "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header".into(),
        );
    }
    let key = h.get("Sec-Websocket-Key").unwrap_or_default().trim_ascii();
    if STANDARD.decode(key).map(|k| k.len()) != Ok(16) {
        return refuse(
            400,
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length".into(),
        );
    }
    Ok(accept_key(key))
}

/// The `101` response head (no extensions, no subprotocol), with `extra` headers after the
/// standard ones.
pub fn switching_protocols(accept: &str, extra: &[(&str, &str)]) -> String {
    let mut out = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    push_headers(&mut out, extra);
    out
}

fn push_headers(out: &mut String, extra: &[(&str, &str)]) {
    for (n, v) in extra {
        out.push_str(n);
        out.push_str(": ");
        out.push_str(v);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
}

/// A fresh random client key.
pub fn new_client_key() -> String {
    STANDARD.encode(rand::random::<[u8; 16]>())
}

/// The client's upgrade request head, with `extra` headers after the standard ones (as
/// gorilla writes them).
pub fn client_request(host: &str, path: &str, key: &str, extra: &[(&str, &str)]) -> String {
    let mut out = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    );
    push_headers(&mut out, extra);
    out
}

/// Checks the server's answer to [`client_request`].
pub fn check_upgrade_response(head: &ResponseHead, key: &str) -> Result<(), WsError> {
    if head.status != 101 {
        return Err(WsError::Handshake(format!(
            "server answered {}",
            head.status
        )));
    }
    let h = &head.headers;
    if !h.has_token("Upgrade", "websocket") || !h.has_token("Connection", "upgrade") {
        return Err(WsError::Handshake(
            "101 without websocket upgrade headers".into(),
        ));
    }
    if h.get("Sec-Websocket-Accept").map(<[u8]>::trim_ascii)
        != Some(accept_key(key.as_bytes()).as_bytes())
    {
        return Err(WsError::Handshake("bad Sec-WebSocket-Accept".into()));
    }
    Ok(())
}

/// The client's side of the upgrade on a connected `io`: sends [`client_request`] for
/// `path` on `host` with `extra` headers, reads the answer and checks it. Returns the `101`
/// head (for the headers a server adds) and the bytes read past it, which belong to the
/// WebSocket stream. Any other status is [`WsError::Refused`] with the start of the body.
/// The caller bounds the whole exchange in time.
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    host: &str,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<(ResponseHead, BytesMut), WsError> {
    let key = new_client_key();
    io.write_all(client_request(host, path, &key, extra).as_bytes())
        .await?;
    io.flush().await?;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(io, &mut buf)
        .await
        .map_err(|e| WsError::Handshake(e.to_string()))?;
    if head.status != 101 {
        let want = head
            .headers
            .get_str("Content-Length")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0)
            .min(MAX_REFUSAL_BODY);
        // Best effort: a body that does not arrive leaves what did.
        while buf.len() < want {
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let body = &buf[..buf.len().min(MAX_REFUSAL_BODY)];
        return Err(WsError::Refused {
            status: head.status,
            body: String::from_utf8_lossy(body).into_owned(),
        });
    }
    check_upgrade_response(&head, &key)?;
    Ok((head, buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, headers: &[(&str, &str)]) -> RequestHead {
        RequestHead::with_headers(method, "/v1/kubeedge/connect", headers)
    }

    #[test]
    fn accept_key_should_match_rfc6455_example() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn upgrade_checks_should_follow_gorilla() {
        let ok = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        assert_eq!(
            check_upgrade_request(&head("GET", &ok)).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let r = check_upgrade_request(&head("GET", &ok[1..])).unwrap_err();
        assert_eq!(r.status, 400);
        assert!(
            r.reason
                .contains("'upgrade' token not found in 'Connection' header")
        );
        assert_eq!(
            check_upgrade_request(&head("POST", &ok))
                .unwrap_err()
                .status,
            405
        );
        let bad_key = [ok[0], ok[1], ok[2], ("sec-websocket-key", "short")];
        assert_eq!(
            check_upgrade_request(&head("GET", &bad_key))
                .unwrap_err()
                .status,
            400
        );
    }
}
