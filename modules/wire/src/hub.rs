//! The hub's framing, as edgecore speaks it: one JSON message per WebSocket data message, text
//! opcode, JSON followed by `\n`; text or binary accepted, fragments reassembled, size capped;
//! plus the two messages every edge sends (the keepalive and the acknowledgement).
//!
//! The one definition both ends use: cloudhub's socket driver and the `edge` crate's hub client.

use actix_codec::Decoder;
use actix_http::ws::{CloseReason, Codec, Frame, Item, Parser, ProtocolError};
use beehive::constants::{SUCCESS_CONTENT, operation as op};
use beehive::{Content, Message};
use bytes::{Bytes, BytesMut};

/// The opcode and close code types of this module's signatures, so callers need not depend on
/// actix-http themselves.
pub use actix_http::ws::{CloseCode, OpCode};

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
}

impl From<ProtocolError> for WireError {
    fn from(e: ProtocolError) -> Self {
        match e {
            ProtocolError::Overflow => WireError::TooLarge { size: 0, limit: 0 },
            other => WireError::Protocol(other.to_string()),
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

/// One complete frame with `payload` (FIN set).
pub fn frame(payload: &[u8], op: OpCode, mask: bool) -> Bytes {
    let mut dst = BytesMut::with_capacity(payload.len() + 14);
    Parser::write_message(&mut dst, payload, op, true, mask);
    dst.freeze()
}

/// Longest close reason in bytes: a control frame's payload is at most 125 bytes, two of them
/// the close code.
pub const MAX_CLOSE_REASON: usize = 123;

/// A close frame with `code` and `reason`, the reason cut to [`MAX_CLOSE_REASON`] bytes on a
/// character boundary (so the payload stays valid UTF-8 and the frame a valid control frame).
pub fn close_frame(code: CloseCode, reason: &str, mask: bool) -> Bytes {
    let mut dst = BytesMut::new();
    Parser::write_close(
        &mut dst,
        Some(CloseReason {
            code,
            description: Some(cut(reason, MAX_CLOSE_REASON).to_owned()),
        }),
        mask,
    );
    dst.freeze()
}

/// `text` cut to at most `max` bytes, on a character boundary.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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
/// limit on whole messages. Holds no buffer while no fragment is pending.
#[derive(Debug)]
pub struct Reassembler {
    codec: Codec,
    partial: Option<BytesMut>,
    limit: usize,
}

impl Reassembler {
    /// A server-side reassembler (client frames must be masked) with the message size limit.
    pub fn server(limit: usize) -> Self {
        Reassembler {
            codec: Codec::new().max_size(limit),
            partial: None,
            limit,
        }
    }

    /// A client-side reassembler (server frames must not be masked).
    pub fn client(limit: usize) -> Self {
        Reassembler {
            codec: Codec::new().max_size(limit).client_mode(),
            partial: None,
            limit,
        }
    }

    /// Decodes at most one complete item from the front of `buf`, consuming its bytes;
    /// `Ok(None)` when more bytes are needed.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        loop {
            let frame = match self.codec.decode(buf) {
                Ok(Some(f)) => f,
                // The codec compares a frame with the limit only once all of it has arrived, so
                // an oversized frame would be buffered whole first: refuse it from its header
                // (checked after the codec's own header checks, so that how the bytes were
                // split never changes which error a stream gets).
                Ok(None) => match announced_len(buf) {
                    Some(len) if len > self.limit as u64 => {
                        return Err(WireError::TooLarge {
                            size: usize::try_from(len).unwrap_or(usize::MAX),
                            limit: self.limit,
                        });
                    }
                    _ => return Ok(None),
                },
                Err(ProtocolError::Overflow) => {
                    return Err(WireError::TooLarge {
                        size: buf.len(),
                        limit: self.limit,
                    });
                }
                Err(e) => return Err(e.into()),
            };
            match frame {
                Frame::Text(b) | Frame::Binary(b) => {
                    if self.partial.is_some() {
                        return Err(WireError::Protocol(
                            "data frame inside a fragmented message".into(),
                        ));
                    }
                    return Ok(Some(Incoming::Data(b)));
                }
                Frame::Ping(b) => return Ok(Some(Incoming::Ping(b))),
                Frame::Pong(_) => return Ok(Some(Incoming::Pong)),
                Frame::Close(_) => return Ok(Some(Incoming::Close)),
                Frame::Continuation(item) => match item {
                    Item::FirstText(b) | Item::FirstBinary(b) => {
                        if self.partial.is_some() {
                            return Err(WireError::Protocol("fragment started twice".into()));
                        }
                        self.partial = Some(BytesMut::from(&b[..]));
                    }
                    item @ (Item::Continue(_) | Item::Last(_)) => {
                        let (b, last) = match item {
                            Item::Last(b) => (b, true),
                            Item::Continue(b) | Item::FirstText(b) | Item::FirstBinary(b) => {
                                (b, false)
                            }
                        };
                        let Some(acc) = self.partial.as_mut() else {
                            return Err(WireError::Protocol(
                                "continuation without a first fragment".into(),
                            ));
                        };
                        if acc.len() + b.len() > self.limit {
                            let size = acc.len() + b.len();
                            self.partial = None;
                            return Err(WireError::TooLarge {
                                size,
                                limit: self.limit,
                            });
                        }
                        acc.extend_from_slice(&b);
                        if last {
                            let whole = self.partial.take().unwrap_or_default();
                            return Ok(Some(Incoming::Data(whole.freeze())));
                        }
                    }
                },
            }
        }
    }
}

/// The payload length announced by the frame header at the front of `buf`, once its length
/// field has arrived.
fn announced_len(buf: &[u8]) -> Option<u64> {
    match *buf.get(1)? & 0x7f {
        126 => Some(u64::from(u16::from_be_bytes(
            buf.get(2..4)?.try_into().ok()?,
        ))),
        127 => Some(u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?)),
        n => Some(u64::from(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cut_never_splits_a_character() {
        let s = "aé€🦀";
        let cuts: Vec<&str> = (0..=s.len() + 1).map(|n| cut(s, n)).collect();
        assert_eq!(
            cuts,
            [
                "",
                "a",
                "a",
                "aé",
                "aé",
                "aé",
                "aé€",
                "aé€",
                "aé€",
                "aé€",
                "aé€🦀",
                "aé€🦀"
            ]
        );
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
}
