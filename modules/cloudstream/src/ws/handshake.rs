//! The HTTP/1.1 upgrade, server side (gorilla's checks and reason texts) and client side.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha1::{Digest, Sha1};

use super::WsError;
use crate::http1::{RequestHead, ResponseHead};

const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
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
    let mut h = Sha1::new();
    h.update(key);
    h.update(GUID);
    STANDARD.encode(h.finalize())
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

/// The `101` response head (no extensions, no subprotocol).
pub fn switching_protocols(accept: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    )
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
    for (n, v) in extra {
        out.push_str(n);
        out.push_str(": ");
        out.push_str(v);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, headers: &[(&str, &str)]) -> RequestHead {
        RequestHead::for_test(method, "/v1/kubeedge/connect", headers)
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
