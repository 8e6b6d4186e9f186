//! The hub's framing, as edgecore speaks it: one JSON message per WebSocket data message, text
//! opcode, JSON followed by `\n`; text or binary accepted, fragments reassembled, size capped;
//! plus the two messages every edge sends (the keepalive and the acknowledgement).
//!
//! The one definition both ends use: cloudhub's socket driver and the `edge` crate's hub client.

use beehive::constants::{SUCCESS_CONTENT, operation as op};
use beehive::{Content, Message};
use bytes::{Bytes, BytesMut};

use crate::ws::{self, Decoder, Refused, Role, WsMessage};

/// The opcode and close code types of this module's signatures, so callers need not depend on
/// actix-http themselves.
pub use actix_http::ws::{CloseCode, OpCode};

/// The close reason's limit and the character-boundary cut, defined with the frame writer.
pub use crate::ws::{MAX_CLOSE_REASON, cut};

/// Why a WebSocket message was refused.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The payload is not a JSON message (Go's `ReadJSON` would fail the same way).
    #[error("invalid message: {0}")]
    Json(#[from] beehive::json::DecodeError),
    /// The message (all its fragments together) is larger than the limit.
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Bytes received so far.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A WebSocket protocol violation (unmasked client frame, bad opcode, fragment order…).
    #[error("websocket protocol error: {0}")]
    Protocol(String),
}

impl WireError {
    /// The close code to send before closing for this error (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> CloseCode {
        match self {
            WireError::Json(_) => CloseCode::Invalid,
            WireError::TooLarge { .. } => CloseCode::Size,
            WireError::Protocol(_) => CloseCode::Protocol,
        }
    }

    /// What the decoder's refusal is to the hub: the size it saw, or the codec's complaint
    /// (reserved bits included) as a protocol error.
    fn refused(e: Refused) -> Self {
        match e {
            Refused::TooLarge { size, limit } => WireError::TooLarge { size, limit },
            Refused::Codec(e) => WireError::Protocol(e.to_string()),
        }
    }
}

/// Encodes a message for the wire exactly as gorilla's `WriteJSON` after viaduct forced
/// `sync=false`: Go-compatible JSON plus one `\n`.
pub fn encode_json(msg: &Message) -> Vec<u8> {
    let mut out = if msg.header.sync {
        let mut m = msg.clone();
        m.header.sync = false;
        m.to_json()
    } else {
        msg.to_json()
    };
    out.push(b'\n');
    out
}

/// Decodes one message from a WebSocket payload: the first JSON value; anything after it
/// (the trailing newline, or garbage) is ignored, as Go's `ReadJSON` does.
pub fn decode_json(payload: &[u8]) -> Result<Message, WireError> {
    let mut values = serde_json::Deserializer::from_slice(payload).into_iter::<Message>();
    match values.next() {
        Some(Ok(m)) => Ok(m),
        Some(Err(e)) => Err(WireError::Json(e.into())),
        None => Err(WireError::Json(
            serde_json::Error::io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "empty message",
            ))
            .into(),
        )),
    }
}

/// One unmasked (server-side) text frame carrying `msg`.
pub fn server_frame(msg: &Message) -> Bytes {
    frame(&encode_json(msg), OpCode::Text, false)
}

/// One masked (client-side) text frame carrying `msg`.
pub fn client_frame(msg: &Message) -> Bytes {
    frame(&encode_json(msg), OpCode::Text, true)
}

/// One complete frame with `payload` (FIN set), written by [`ws::put_frame`].
pub fn frame(payload: &[u8], op: OpCode, mask: bool) -> Bytes {
    let mut dst = BytesMut::with_capacity(payload.len() + 14);
    ws::put_frame(&mut dst, payload, op, mask);
    dst.freeze()
}

/// A close frame with `code` and `reason`, written by [`ws::put_close`]: the reason cut to
/// [`MAX_CLOSE_REASON`] bytes on a character boundary.
pub fn close_frame(code: CloseCode, reason: &str, mask: bool) -> Bytes {
    let mut dst = BytesMut::new();
    ws::put_close(&mut dst, code, reason, mask);
    dst.freeze()
}

/// The keepalive edgecore sends: source `websocket`, group `resource`, resource `node`,
/// operation `keepalive`, content `"ping"`.
pub fn keepalive() -> Message {
    Message::new()
        .with_route("websocket", "resource", "node", "keepalive")
        .with_content(Content::string("ping"))
}

/// True for the downstream messages edgecore's metamanager acknowledges: insert, update,
/// delete, and responses other than a plain `"OK"` (an OK is never acknowledged).
pub fn needs_ack(msg: &Message) -> bool {
    match msg.route.operation.as_str() {
        op::INSERT | op::UPDATE | op::DELETE => true,
        op::RESPONSE => msg.content.as_string().as_deref() != Some(SUCCESS_CONTENT),
        _ => false,
    }
}

/// The acknowledgement of `msg` as edgecore's metamanager sends it: operation `response`,
/// content `"OK"`, parent id = `msg`'s id, route copied.
pub fn ack_for(msg: &Message) -> Message {
    msg.response(Content::string(SUCCESS_CONTENT))
}

/// What a complete frame (or fragment sequence) amounted to.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A complete data message (text or binary), reassembled.
    Data(Bytes),
    /// A ping; answer with a pong carrying the same bytes.
    Ping(Bytes),
    /// A pong.
    Pong,
    /// The peer is closing.
    Close,
}

/// Splits a byte stream into frames and reassembles fragmented messages, enforcing one size
/// limit on frames and whole messages: [`ws::Decoder`] (so the hub and the tunnel refuse the
/// same bytes alike), reporting as the hub does. Holds no buffer while no fragment is pending.
#[derive(Debug)]
pub struct Reassembler(Decoder);

impl Reassembler {
    /// A server-side reassembler (client frames must be masked) with the message size limit.
    pub fn server(limit: usize) -> Self {
        Reassembler(Decoder::new(Role::Server, limit))
    }

    /// A client-side reassembler (server frames must not be masked).
    pub fn client(limit: usize) -> Self {
        Reassembler(Decoder::new(Role::Client, limit))
    }

    /// Decodes at most one complete item from the front of `buf`, consuming its bytes;
    /// `Ok(None)` when more bytes are needed. A frame announcing more than the limit is
    /// refused from its header ([`WireError::TooLarge`] with the announced length).
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        Ok(self
            .0
            .next_message(buf)
            .map_err(WireError::refused)?
            .map(|m| match m {
                WsMessage::Text(b) | WsMessage::Binary(b) => Incoming::Data(b),
                WsMessage::Ping(b) => Incoming::Ping(b),
                WsMessage::Pong(_) => Incoming::Pong,
                WsMessage::Close(..) => Incoming::Close,
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_codec::Decoder as _;
    use actix_http::ws::{CloseReason, Codec, Frame, Parser};

    #[test]
    fn an_oversized_frame_is_refused_from_its_header() {
        let limit = 64 * 1024;
        // FIN + binary, masked, 64-bit length 16 MiB, mask key: no payload yet.
        let header = [0x82, 0xff, 0, 0, 0, 0, 0x01, 0, 0, 0, 1, 2, 3, 4];
        let mut r = Reassembler::server(limit);
        let mut buf = BytesMut::from(&header[..]);
        assert!(matches!(
            r.next(&mut buf),
            Err(WireError::TooLarge { size: 0x0100_0000, limit: l }) if l == limit
        ));
        // 16-bit length one over the limit, before its payload.
        let mut r = Reassembler::server(1000);
        let mut buf = BytesMut::from(&[0x81, 0xfe, 0x03, 0xe9][..]);
        assert!(matches!(r.next(&mut buf), Err(WireError::TooLarge { .. })));
        // A frame at the limit is still waited for and delivered.
        let mut r = Reassembler::server(1000);
        let whole = frame(&[b'x'; 1000], OpCode::Binary, true);
        let mut buf = BytesMut::from(&whole[..8]);
        assert_eq!(r.next(&mut buf).unwrap(), None);
        buf.extend_from_slice(&whole[8..]);
        assert!(matches!(r.next(&mut buf), Ok(Some(Incoming::Data(d))) if d.len() == 1000));
    }

    #[test]
    fn keepalive_vector_is_byte_exact() {
        // A real edge's keepalive: 196 bytes ending with a newline.
        let wire = "{\"header\":{\"msg_id\":\"5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b01\",\"timestamp\":1700000000000},\"route\":{\"source\":\"websocket\",\"group\":\"resource\",\"operation\":\"keepalive\",\"resource\":\"node\"},\"content\":\"ping\"}\n";
        assert_eq!(wire.len(), 196);
        let m = decode_json(wire.as_bytes()).unwrap();
        assert_eq!(m.route.operation, "keepalive");
        assert_eq!(m.content.as_string().as_deref(), Some("ping"));
        assert_eq!(encode_json(&m), wire.as_bytes());
    }

    #[test]
    fn the_keepalive_is_the_edgecore_message_on_the_wire() {
        let mut k = keepalive();
        k.header.id = "5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b01".into();
        k.header.timestamp = 1_700_000_000_000;
        let wire = "{\"header\":{\"msg_id\":\"5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b01\",\"timestamp\":1700000000000},\"route\":{\"source\":\"websocket\",\"group\":\"resource\",\"operation\":\"keepalive\",\"resource\":\"node\"},\"content\":\"ping\"}\n";
        assert_eq!(encode_json(&k), wire.as_bytes());
        assert_eq!(decode_json(wire.as_bytes()).unwrap(), k);
    }

    #[test]
    fn acks_copy_the_route_and_answer_the_message() {
        let m = Message::new().with_route("edgecontroller", "resource", "default/pod/p", "update");
        assert!(needs_ack(&m));
        let a = ack_for(&m);
        assert_eq!(a.header.parent_id, m.header.id);
        assert_eq!(
            (a.route.source.as_str(), a.route.operation.as_str()),
            ("edgecontroller", "response")
        );
        assert_eq!(a.content.as_string().as_deref(), Some("OK"));
        assert!(!needs_ack(&a), "an OK is never acknowledged");
        assert!(!needs_ack(&Message::new().with_route(
            "x",
            "twin",
            "membership",
            "keepalive"
        )));
    }

    #[test]
    fn sync_is_forced_false_on_the_wire() {
        let mut m =
            Message::new().with_route("edgecontroller", "resource", "default/pod/a", "update");
        m.header.sync = true;
        assert!(!String::from_utf8(encode_json(&m)).unwrap().contains("sync"));
    }

    #[test]
    fn trailing_bytes_after_the_first_value_are_ignored() {
        let m = decode_json(b"{\"header\":{\"msg_id\":\"a\",\"timestamp\":1},\"route\":{},\"content\":null}\n garbage").unwrap();
        assert_eq!(m.header.id, "a");
        assert!(decode_json(b"").is_err());
        assert!(decode_json(b"not json").is_err());
        assert!(decode_json(b"{\"header\":{\"timestamp\":1.5}}").is_err());
    }

    #[test]
    fn fragments_are_reassembled_and_limited() {
        let mut r = Reassembler::server(10);
        let mut buf = BytesMut::new();
        let mut first = BytesMut::new();
        Parser::write_message(&mut first, b"01234", OpCode::Text, false, true);
        let mut last = BytesMut::new();
        Parser::write_message(&mut last, b"5678", OpCode::Continue, true, true);
        buf.extend_from_slice(&first);
        assert_eq!(r.next(&mut buf).unwrap(), None);
        buf.extend_from_slice(&last);
        assert_eq!(
            r.next(&mut buf).unwrap(),
            Some(Incoming::Data(Bytes::from_static(b"012345678")))
        );
        // Too large across fragments.
        buf.extend_from_slice(&first);
        buf.extend_from_slice(&first);
        let mut more = BytesMut::new();
        Parser::write_message(&mut more, b"0123456", OpCode::Continue, false, true);
        buf.extend_from_slice(&more);
        assert!(r.next(&mut buf).is_err());
    }

    /// Decodes a close frame written by [`close_frame`] as a peer would.
    fn read_close(frame: &[u8], masked: bool) -> (usize, Option<CloseReason>) {
        let mut codec = if masked {
            Codec::new()
        } else {
            Codec::new().client_mode()
        };
        let mut buf = BytesMut::from(frame);
        match codec.decode(&mut buf) {
            Ok(Some(Frame::Close(reason))) => (frame.len(), reason),
            other => panic!("not a close frame: {other:?}"),
        }
    }

    #[test]
    fn close_reasons_are_cut_to_123_bytes_on_a_character_boundary() {
        for (reason, want_bytes) in [
            ("short".to_owned(), 5),
            ("a".repeat(123), 123),
            ("a".repeat(124), 123),
            // 2-byte characters: 61 fit (122 bytes), the 62nd would need bytes 122..124.
            ("é".repeat(100), 122),
            // 3-byte and 4-byte characters, and a mix that ends mid-character at byte 123.
            ("€".repeat(60), 123),
            ("🦀".repeat(40), 120),
            (format!("{}{}", "a".repeat(121), "🦀"), 121),
        ] {
            for masked in [false, true] {
                let frame = close_frame(CloseCode::Policy, &reason, masked);
                let (len, got) = read_close(&frame, masked);
                let got = got.expect("a reason");
                let text = got.description.expect("a description");
                assert_eq!(got.code, CloseCode::Policy);
                assert_eq!(text.len(), want_bytes, "{reason:?}");
                assert!(reason.starts_with(&text), "a prefix of the reason");
                // Payload = 2-byte code + reason; header 2 bytes (+4 mask).
                assert!(len - 2 - if masked { 4 } else { 0 } <= 125, "{len}");
            }
        }
    }

    #[test]
    fn unmasked_client_frames_and_oversized_single_frames_are_refused() {
        let mut r = Reassembler::server(8);
        let mut buf = BytesMut::from(&frame(b"x", OpCode::Text, false)[..]);
        assert!(matches!(r.next(&mut buf), Err(WireError::Protocol(_))));
        let mut r = Reassembler::server(8);
        let mut buf = BytesMut::from(&frame(b"0123456789", OpCode::Binary, true)[..]);
        assert!(matches!(r.next(&mut buf), Err(WireError::TooLarge { .. })));
    }

    /// Feeds `stream` in two reads split at `at` to a fresh hub reassembler and a fresh tunnel
    /// decoder (both server side, limit `limit`); how each refused it, if it did.
    fn refusals(
        stream: &[u8],
        at: usize,
        limit: usize,
    ) -> (Option<WireError>, Option<ws::WsError>) {
        let mut hub = Reassembler::server(limit);
        let mut tunnel = Decoder::new(Role::Server, limit);
        let (mut hub_buf, mut tunnel_buf) = (BytesMut::new(), BytesMut::new());
        let (mut hub_err, mut tunnel_err) = (None, None);
        for read in [&stream[..at], &stream[at..]] {
            hub_buf.extend_from_slice(read);
            tunnel_buf.extend_from_slice(read);
            while hub_err.is_none() {
                match hub.next(&mut hub_buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => hub_err = Some(e),
                }
            }
            while tunnel_err.is_none() {
                match tunnel.decode(&mut tunnel_buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => tunnel_err = Some(e),
                }
            }
        }
        (hub_err, tunnel_err)
    }

    /// Hostile streams split at every byte boundary: the hub and the tunnel refuse each the
    /// same way (too large, with the announced size, or a protocol error, whichever the
    /// header earns first), whatever the split, and an oversized frame before its payload.
    #[test]
    fn hostile_frames_split_anywhere_are_refused_alike_by_the_hub_and_the_tunnel() {
        const LIMIT: usize = 1000;
        let mask = [1, 2, 3, 4];
        let with_mask = |header: &[u8], payload: usize| {
            let mut v = header.to_vec();
            v.extend_from_slice(&mask);
            v.extend(std::iter::repeat_n(0u8, payload));
            v
        };
        let piece = |op: OpCode, fin: bool, len: usize| {
            let mut v = BytesMut::new();
            Parser::write_message(&mut v, vec![b'x'; len], op, fin, true);
            v.to_vec()
        };
        let mut fragments = piece(OpCode::Text, false, 600);
        fragments.extend(piece(OpCode::Continue, true, 600));
        let mut data_inside = piece(OpCode::Text, false, 10);
        data_inside.extend(piece(OpCode::Binary, true, 10));
        // (what, stream, refused as too large with this size, or else as a protocol error)
        let cases: Vec<(&str, Vec<u8>, Option<usize>)> = vec![
            (
                "16-bit length one over",
                with_mask(&[0x82, 0xfe, 0x03, 0xe9], 8),
                Some(1001),
            ),
            (
                "64-bit length 16 MiB",
                with_mask(&[0x82, 0xff, 0, 0, 0, 0, 1, 0, 0, 0], 8),
                Some(1 << 24),
            ),
            (
                "64-bit length, top bit set",
                with_mask(&[0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1], 8),
                Some(0x8000_0000_0000_0001),
            ),
            (
                "ping over the limit",
                with_mask(&[0x89, 0xfe, 0x07, 0xd0], 8),
                Some(2000),
            ),
            ("pieces over the limit together", fragments, Some(1200)),
            (
                "reserved bits, huge length",
                with_mask(&[0xc2, 0xff, 0, 0, 0, 0, 1, 0, 0, 0], 8),
                None,
            ),
            (
                "unmasked, huge length",
                vec![0x82, 0x7f, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
                None,
            ),
            (
                "unknown opcode, huge length",
                with_mask(&[0x83, 0xff, 0, 0, 0, 0, 1, 0, 0, 0], 8),
                None,
            ),
            (
                "ping of 126 bytes",
                with_mask(&[0x89, 0xfe, 0, 126], 126),
                None,
            ),
            ("data frame inside a fragmented message", data_inside, None),
        ];
        for (what, stream, too_large) in cases {
            let (hub, tunnel) = refusals(&stream, 0, LIMIT);
            let (hub, tunnel) = (hub.expect(what), tunnel.expect(what));
            match too_large {
                Some(size) => {
                    assert!(
                        matches!(hub, WireError::TooLarge { size: s, limit: LIMIT } if s == size),
                        "{what}: hub {hub:?}"
                    );
                    assert!(
                        matches!(tunnel, ws::WsError::TooLarge(LIMIT)),
                        "{what}: tunnel {tunnel:?}"
                    );
                }
                None => {
                    assert!(matches!(hub, WireError::Protocol(_)), "{what}: hub {hub:?}");
                    assert!(
                        matches!(tunnel, ws::WsError::Protocol(_) | ws::WsError::Io(_)),
                        "{what}: tunnel {tunnel:?}"
                    );
                }
            }
            for at in 1..=stream.len() {
                let (h, t) = refusals(&stream, at, LIMIT);
                assert_eq!(
                    h.map(|e| e.to_string()),
                    Some(hub.to_string()),
                    "{what}, split at {at}"
                );
                assert_eq!(
                    t.map(|e| e.to_string()),
                    Some(tunnel.to_string()),
                    "{what}, split at {at}"
                );
            }
        }
    }
}
