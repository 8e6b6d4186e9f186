//! An RFC 6455 implementation written independently of the one the project ships
//! (`actix_http::ws::Codec`, used through `kubeedge_wire::ws`), for tests only: tests talk
//! to our servers and clients through this one, so a bug shared by both ends of a test
//! cannot hide. Frames and message reassembly, no extensions, no UTF-8 checks (the tunnel
//! carries binary data in Text messages); frames can be written unmasked, masked, fragmented
//! or malformed on purpose.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Errors decoding frames.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// The peer broke RFC 6455.
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
    /// A message or frame over the limit.
    #[error("websocket message larger than {0} bytes")]
    TooLarge(usize),
}

/// Which end of the connection we are: clients mask what they send, servers must not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The dialing side (the edge): sends masked frames, expects unmasked ones.
    Client,
    /// The accepting side (the cloud): sends unmasked frames, expects masked ones.
    Server,
}

/// Frame opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCode {
    /// 0x0: continues a fragmented message.
    Continuation,
    /// 0x1: a text message (the tunnel's, whatever the bytes).
    Text,
    /// 0x2: a binary message.
    Binary,
    /// 0x8: close.
    Close,
    /// 0x9: ping.
    Ping,
    /// 0xA: pong.
    Pong,
}

impl OpCode {
    fn bits(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    fn from_bits(b: u8) -> Option<Self> {
        Some(match b {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            _ => return None,
        })
    }

    fn is_control(self) -> bool {
        matches!(self, OpCode::Close | OpCode::Ping | OpCode::Pong)
    }
}

/// A complete message (fragments joined) or a control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsMessage {
    /// A Text message; the bytes are not checked for UTF-8.
    Text(Bytes),
    /// A Binary message.
    Binary(Bytes),
    /// A ping with its payload.
    Ping(Bytes),
    /// A pong with its payload.
    Pong(Bytes),
    /// A close frame: status code (if any) and reason bytes.
    Close(Option<u16>, Bytes),
}

/// Appends one frame to `dst`. The payload is the concatenation of `parts`, so a tunnel
/// header and its data go out without an intermediate copy; `mask` is required for clients.
pub fn encode_frame(
    dst: &mut BytesMut,
    opcode: OpCode,
    fin: bool,
    parts: &[&[u8]],
    mask: Option<[u8; 4]>,
) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    dst.reserve(len + 14);
    dst.put_u8(if fin { 0x80 } else { 0 } | opcode.bits());
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    if len < 126 {
        dst.put_u8(mask_bit | len as u8);
    } else if len <= usize::from(u16::MAX) {
        dst.put_u8(mask_bit | 126);
        dst.put_u16(len as u16);
    } else {
        dst.put_u8(mask_bit | 127);
        dst.put_u64(len as u64);
    }
    match mask {
        None => {
            for p in parts {
                dst.put_slice(p);
            }
        }
        Some(key) => {
            dst.put_slice(&key);
            let mut phase = 0;
            for p in parts {
                // Masked a few KiB at a time right after the copy, while those bytes are
                // still in the L1 cache: close to one pass over the payload.
                for piece in p.chunks(MASK_STEP) {
                    let at = dst.len();
                    dst.put_slice(piece);
                    apply_mask(&mut dst[at..], rotate(key, phase));
                }
                phase = (phase + p.len()) & 3;
            }
        }
    }
}

/// Bytes copied before they are masked (a multiple of 4, so the key phase holds).
const MASK_STEP: usize = 4096;

/// The key as seen from byte `phase` of it.
fn rotate(key: [u8; 4], phase: usize) -> [u8; 4] {
    [
        key[phase & 3],
        key[(phase + 1) & 3],
        key[(phase + 2) & 3],
        key[(phase + 3) & 3],
    ]
}

/// XORs `buf` with the repeating 4-byte `key`, eight bytes at a time (masking is on every
/// byte the edge sends, so it shows in throughput).
fn apply_mask(buf: &mut [u8], key: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(w) ^ wide).to_ne_bytes());
    }
    // The tail starts at a multiple of 8, so the key phase is unchanged.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i & 3];
    }
}

/// Incremental decoder: frames in, whole messages out. Control frames may come between the
/// fragments of a message (RFC 6455 §5.4) and are returned at once.
#[derive(Debug)]
pub struct Decoder {
    role: Role,
    max_message: usize,
    partial: Option<(OpCode, BytesMut)>,
}

impl Decoder {
    /// A decoder for the given end, refusing messages larger than `max_message` bytes.
    pub fn new(role: Role, max_message: usize) -> Self {
        Decoder {
            role,
            max_message,
            partial: None,
        }
    }

    /// The next message whose bytes are all in `src` (consumed), or `None` for more input.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<WsMessage>, WsError> {
        loop {
            let Some((fin, opcode, payload)) = self.frame(src)? else {
                return Ok(None);
            };
            if opcode.is_control() {
                return Ok(Some(match opcode {
                    OpCode::Ping => WsMessage::Ping(payload),
                    OpCode::Pong => WsMessage::Pong(payload),
                    _ => close_message(payload)?,
                }));
            }
            match (opcode, self.partial.take()) {
                (OpCode::Continuation, None) => {
                    return Err(WsError::Protocol("continuation without a first frame"));
                }
                (OpCode::Continuation, Some((first, mut buf))) => {
                    if buf.len() + payload.len() > self.max_message {
                        return Err(WsError::TooLarge(self.max_message));
                    }
                    buf.extend_from_slice(&payload);
                    if fin {
                        return Ok(Some(data_message(first, buf.freeze())));
                    }
                    self.partial = Some((first, buf));
                }
                (_, Some(_)) => {
                    return Err(WsError::Protocol("new message inside a fragmented one"));
                }
                (first, None) if fin => return Ok(Some(data_message(first, payload))),
                (first, None) => self.partial = Some((first, BytesMut::from(&payload[..]))),
            }
        }
    }

    /// One frame from the front of `src`, unmasked.
    fn frame(&self, src: &mut BytesMut) -> Result<Option<(bool, OpCode, Bytes)>, WsError> {
        if src.len() < 2 {
            return Ok(None);
        }
        let (b0, b1) = (src[0], src[1]);
        if b0 & 0x70 != 0 {
            return Err(WsError::Protocol(
                "reserved bits set (no extension was agreed)",
            ));
        }
        let fin = b0 & 0x80 != 0;
        let opcode = OpCode::from_bits(b0 & 0x0f).ok_or(WsError::Protocol("unknown opcode"))?;
        let masked = b1 & 0x80 != 0;
        if masked != (self.role == Role::Server) {
            return Err(WsError::Protocol(if masked {
                "masked frame from a server"
            } else {
                "unmasked frame from a client"
            }));
        }
        let (len, mut at) = match b1 & 0x7f {
            126 => {
                if src.len() < 4 {
                    return Ok(None);
                }
                (u64::from(u16::from_be_bytes([src[2], src[3]])), 4)
            }
            127 => {
                if src.len() < 10 {
                    return Ok(None);
                }
                let mut b = [0u8; 8];
                b.copy_from_slice(&src[2..10]);
                (u64::from_be_bytes(b), 10)
            }
            n => (u64::from(n), 2),
        };
        if opcode.is_control() && (len > 125 || !fin) {
            return Err(WsError::Protocol("control frame too long or fragmented"));
        }
        if len > self.max_message as u64 {
            return Err(WsError::TooLarge(self.max_message));
        }
        let len = len as usize;
        let key = if masked {
            if src.len() < at + 4 {
                return Ok(None);
            }
            let k = [src[at], src[at + 1], src[at + 2], src[at + 3]];
            at += 4;
            Some(k)
        } else {
            None
        };
        if src.len() < at + len {
            // Room for the rest of the frame in one step, so the reader does not grow the
            // buffer (copying the partial frame) twice.
            src.reserve(at + len - src.len());
            return Ok(None);
        }
        src.advance(at);
        let mut payload = src.split_to(len);
        if let Some(k) = key {
            apply_mask(&mut payload, k);
        }
        Ok(Some((fin, opcode, payload.freeze())))
    }
}

fn data_message(opcode: OpCode, payload: Bytes) -> WsMessage {
    if opcode == OpCode::Binary {
        WsMessage::Binary(payload)
    } else {
        WsMessage::Text(payload)
    }
}

fn close_message(payload: Bytes) -> Result<WsMessage, WsError> {
    match payload.len() {
        0 => Ok(WsMessage::Close(None, Bytes::new())),
        1 => Err(WsError::Protocol("close frame with a one-byte payload")),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            Ok(WsMessage::Close(Some(code), payload.slice(2..)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn frames_should_match_the_spec_worked_bytes() {
        let mut out = BytesMut::new();
        encode_frame(&mut out, OpCode::Text, true, &[&[0xac, 0x02, 0x04]], None);
        assert_eq!(hex(&out), "81 03 ac 02 04");
        let mut out = BytesMut::new();
        encode_frame(
            &mut out,
            OpCode::Text,
            true,
            &[&[0x01, 0x03], b"ls\n"],
            Some([0x11, 0x22, 0x33, 0x44]),
        );
        assert_eq!(hex(&out), "81 85 11 22 33 44 10 21 5f 37 1b");
        let mut out = BytesMut::new();
        encode_frame(&mut out, OpCode::Text, true, &[&[0u8; 305]], None);
        assert_eq!(hex(&out[..4]), "81 7e 01 31");
    }

    #[test]
    fn wide_mask_should_equal_the_bytewise_definition() {
        let key = [0x11, 0x22, 0x33, 0x44];
        for len in 0..40 {
            let data: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            let mut masked = data.clone();
            apply_mask(&mut masked, key);
            let want: Vec<u8> = data
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            assert_eq!(masked, want, "length {len}");
        }
    }

    #[test]
    fn masked_parts_should_equal_the_bytewise_definition_across_copy_steps() {
        let key = [0x9a, 0x01, 0x7c, 0xe3];
        let parts: Vec<Vec<u8>> = [3usize, MASK_STEP + 5, 1, 2 * MASK_STEP - 1]
            .iter()
            .enumerate()
            .map(|(n, len)| (0..*len).map(|i| (i * 31 + n * 7) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let mut out = BytesMut::new();
        encode_frame(&mut out, OpCode::Text, true, &refs, Some(key));
        let plain = parts.concat();
        let body = &out[out.len() - plain.len()..];
        for (i, (got, want)) in body.iter().zip(&plain).enumerate() {
            assert_eq!(*got, want ^ key[i % 4], "byte {i}");
        }
        let mut d = Decoder::new(Role::Server, 1 << 20);
        assert_eq!(
            d.decode(&mut out).unwrap(),
            Some(WsMessage::Text(Bytes::from(plain)))
        );
    }

    #[test]
    fn server_should_decode_masked_invalid_utf8_text() {
        let mut buf = BytesMut::new();
        encode_frame(
            &mut buf,
            OpCode::Text,
            true,
            &[&[0xff, 0xfe, 0x00]],
            Some([9, 8, 7, 6]),
        );
        let mut d = Decoder::new(Role::Server, 1 << 20);
        assert_eq!(
            d.decode(&mut buf).unwrap(),
            Some(WsMessage::Text(Bytes::from_static(&[0xff, 0xfe, 0x00])))
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn fragments_should_join_around_an_interleaved_ping() {
        let first = vec![1u8; 4096];
        let rest = vec![2u8; 904];
        let mut buf = BytesMut::new();
        let m = Some([1, 2, 3, 4]);
        encode_frame(&mut buf, OpCode::Text, false, &[&first], m);
        encode_frame(&mut buf, OpCode::Ping, true, &[b"ping you"], m);
        encode_frame(&mut buf, OpCode::Continuation, true, &[&rest], m);
        let mut d = Decoder::new(Role::Server, 1 << 20);
        assert_eq!(
            d.decode(&mut buf).unwrap(),
            Some(WsMessage::Ping(Bytes::from_static(b"ping you")))
        );
        match d.decode(&mut buf).unwrap() {
            Some(WsMessage::Text(t)) => {
                assert_eq!(t.len(), 5000);
                assert_eq!(&t[..4096], &first[..]);
                assert_eq!(&t[4096..], &rest[..]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn partial_input_should_wait_for_more_bytes() {
        let mut whole = BytesMut::new();
        encode_frame(&mut whole, OpCode::Text, true, &[&[5u8; 300]], None);
        let mut d = Decoder::new(Role::Client, 1 << 20);
        let mut buf = BytesMut::new();
        for (i, b) in whole.iter().enumerate() {
            buf.put_u8(*b);
            let got = d.decode(&mut buf).unwrap();
            assert_eq!(got.is_some(), i == whole.len() - 1);
        }
    }

    #[test]
    fn hostile_frames_should_be_errors_not_panics() {
        let mut d = Decoder::new(Role::Server, 1024);
        // unmasked from a client
        let mut b = BytesMut::from(&[0x81u8, 0x01, 0x41][..]);
        assert!(d.decode(&mut b).is_err());
        // reserved bit
        let mut b = BytesMut::from(&[0xc1u8, 0x80, 0, 0, 0, 0][..]);
        assert!(d.decode(&mut b).is_err());
        // huge length
        let mut b =
            BytesMut::from(&[0x81u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(d.decode(&mut b), Err(WsError::TooLarge(_))));
        // fragmented ping
        let mut b = BytesMut::new();
        encode_frame(&mut b, OpCode::Ping, false, &[b"x"], Some([0; 4]));
        assert!(d.decode(&mut b).is_err());
        // stray continuation
        let mut b = BytesMut::new();
        encode_frame(&mut b, OpCode::Continuation, true, &[b"x"], Some([0; 4]));
        assert!(Decoder::new(Role::Server, 1024).decode(&mut b).is_err());
    }
}
