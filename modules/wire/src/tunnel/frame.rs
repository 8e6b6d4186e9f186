//! Tunnel messages: `uvarint(connect id) ‖ uvarint(type) ‖ data`, one per WebSocket message
//! (KubeEdge `pkg/stream/message.go`).

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

/// Largest data part a tunnel message may carry (Go reads at most `MaxRespBodyLength`, 1 MiB).
pub const MAX_DATA_LEN: usize = 1 << 20;

/// Longest uvarint (a `u64` takes at most 10 bytes).
const MAX_VARINT_LEN: usize = 10;

/// Errors decoding a tunnel message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The WebSocket message was empty (fatal for the tunnel, as upstream).
    #[error("empty tunnel message")]
    Empty,
    /// The message ended inside a varint (fatal for the tunnel, as upstream).
    #[error("tunnel message truncated in its {0}")]
    Truncated(&'static str),
    /// A varint did not fit 64 bits (Go: `binary: varint overflows a 64-bit integer`).
    #[error("varint overflows a 64-bit integer")]
    Overflow,
    /// The data part is over [`MAX_DATA_LEN`]. Go silently truncates; we refuse the message
    /// but keep the id and type so the caller can end only that stream.
    #[error("tunnel message data of {len} bytes exceeds 1 MiB (connection {connect_id}, {kind})")]
    TooLarge {
        /// The connect id of the oversized message.
        connect_id: u64,
        /// Its type.
        kind: MessageType,
        /// Its data length.
        len: usize,
    },
}

/// Upgrade header in which an edge offers per-stream flow control (any value; the Rust edge
/// sends `1`) and in which the cloud's `101` answers with the window in bytes. Only then
/// does the edge keep each stream's unacknowledged DATA within the window and the cloud send
/// [`MessageType::Window`]; edges that do not send it (edgecore) never see one. Go spells
/// header names this way on the wire.
pub const WINDOW_HEADER: &str = "Sessionstreamwindow";

/// Upgrade header in which an edge offers flow control of what the cloud sends it: the value
/// is how many bytes of each stream the edge takes ahead of its local connection. A cloud
/// that keeps each stream's unacknowledged DATA within that echoes the header in its `101`;
/// the edge then sends [`MessageType::Window`] as its local connection takes the bytes.
pub const INPUT_WINDOW_HEADER: &str = "Sessionstreaminputwindow";

/// Wire value of [`MessageType::Window`]: far from KubeEdge's `iota` values, so a type
/// upstream adds later does not collide with it.
const WINDOW_CODE: u64 = 64;

/// The type of a tunnel message (`pkg/stream/constants.go`, an `iota` from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// 0: cloud→edge, JSON of a logs connection.
    LogsConnect,
    /// 1: cloud→edge, JSON of an exec connection.
    ExecConnect,
    /// 2: cloud→edge, JSON of a metrics connection.
    MetricConnect,
    /// 3: both ways, raw bytes of a connection.
    Data,
    /// 4: both ways, the connection ends; no data.
    RemoveConnect,
    /// 5: cloud→edge with id 0, the tunnel ends; data is the reason.
    CloseConnect,
    /// 6: cloud→edge, JSON of an attach connection.
    AttachConnect,
    /// 64 (Rust only): the receiver's side took this many more bytes of the stream (data:
    /// one uvarint), so the sender may send that many more. Cloud→edge for an edge that
    /// asked for per-stream flow control in its upgrade request ([`WINDOW_HEADER`]);
    /// edge→cloud once the cloud accepted [`INPUT_WINDOW_HEADER`]. KubeEdge never uses the
    /// value.
    Window,
    /// Any other value (printed `UNKNOWN`, as upstream).
    Unknown(u64),
}

impl MessageType {
    /// The numeric value on the wire.
    pub fn code(self) -> u64 {
        match self {
            MessageType::LogsConnect => 0,
            MessageType::ExecConnect => 1,
            MessageType::MetricConnect => 2,
            MessageType::Data => 3,
            MessageType::RemoveConnect => 4,
            MessageType::CloseConnect => 5,
            MessageType::AttachConnect => 6,
            MessageType::Window => WINDOW_CODE,
            MessageType::Unknown(v) => v,
        }
    }

    /// The type for a wire value; never fails (unknown values are kept).
    pub fn from_code(code: u64) -> Self {
        match code {
            0 => MessageType::LogsConnect,
            1 => MessageType::ExecConnect,
            2 => MessageType::MetricConnect,
            3 => MessageType::Data,
            4 => MessageType::RemoveConnect,
            5 => MessageType::CloseConnect,
            6 => MessageType::AttachConnect,
            WINDOW_CODE => MessageType::Window,
            v => MessageType::Unknown(v),
        }
    }

    /// True for the four `*_CONNECT` types that open a connection on the edge.
    pub fn is_connect(self) -> bool {
        matches!(
            self,
            MessageType::LogsConnect
                | MessageType::ExecConnect
                | MessageType::MetricConnect
                | MessageType::AttachConnect
        )
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MessageType::LogsConnect => "LOGS_CONNECT",
            MessageType::ExecConnect => "EXEC_CONNECT",
            MessageType::MetricConnect => "METRIC_CONNECT",
            MessageType::Data => "DATA",
            MessageType::RemoveConnect => "REMOVE_CONNECT",
            MessageType::CloseConnect => "CLOSE_CONNECT",
            MessageType::AttachConnect => "ATTACH_CONNECT",
            MessageType::Window => "WINDOW",
            MessageType::Unknown(_) => "UNKNOWN",
        })
    }
}

/// One tunnel message. Its encoding has no length field: it is the whole WebSocket message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelMessage {
    /// The virtual connection (0 only for `CLOSE_CONNECT`).
    pub connect_id: u64,
    /// What the message is.
    pub kind: MessageType,
    /// The payload (JSON, raw bytes, a reason, or empty).
    pub data: Bytes,
}

impl TunnelMessage {
    /// A message of any type.
    pub fn new(connect_id: u64, kind: MessageType, data: impl Into<Bytes>) -> Self {
        TunnelMessage {
            connect_id,
            kind,
            data: data.into(),
        }
    }

    /// A `DATA` message.
    pub fn data(connect_id: u64, data: impl Into<Bytes>) -> Self {
        TunnelMessage::new(connect_id, MessageType::Data, data)
    }

    /// A `REMOVE_CONNECT` message (empty data).
    pub fn remove(connect_id: u64) -> Self {
        TunnelMessage::new(connect_id, MessageType::RemoveConnect, Bytes::new())
    }

    /// A `CLOSE_CONNECT` message (id 0) carrying `reason`.
    pub fn close(reason: &str) -> Self {
        TunnelMessage::new(
            0,
            MessageType::CloseConnect,
            Bytes::copy_from_slice(reason.as_bytes()),
        )
    }

    /// A `WINDOW` message granting `bytes` more to stream `connect_id`.
    pub fn window(connect_id: u64, bytes: u64) -> Self {
        let mut out = [0u8; MAX_VARINT_LEN];
        let n = put_uvarint(&mut out, bytes);
        TunnelMessage::new(
            connect_id,
            MessageType::Window,
            Bytes::copy_from_slice(&out[..n]),
        )
    }

    /// The grant of a `WINDOW` message; `None` for another type or when the data is not
    /// one uvarint.
    pub fn window_grant(&self) -> Option<u64> {
        if self.kind != MessageType::Window {
            return None;
        }
        match read_uvarint(&self.data) {
            Ok((v, n)) if n == self.data.len() => Some(v),
            _ => None,
        }
    }

    /// Bytes of the id and type varints (the header before the data).
    pub fn header(&self) -> ([u8; 2 * MAX_VARINT_LEN], usize) {
        let mut out = [0u8; 2 * MAX_VARINT_LEN];
        let mut n = put_uvarint(&mut out, self.connect_id);
        n += put_uvarint(&mut out[n..], self.kind.code());
        (out, n)
    }

    /// Length of the encoded message.
    pub fn encoded_len(&self) -> usize {
        self.header().1 + self.data.len()
    }

    /// Appends the encoding (`Message.Bytes` in Go) to `dst`.
    pub fn encode_into(&self, dst: &mut BytesMut) {
        let (head, n) = self.header();
        dst.reserve(n + self.data.len());
        dst.put_slice(&head[..n]);
        dst.put_slice(&self.data);
    }

    /// The encoding as one buffer.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out.freeze()
    }

    /// Decodes one WebSocket message. Data over [`MAX_DATA_LEN`] is refused with
    /// [`FrameError::TooLarge`] (strict mode); every other error means the peer is broken.
    pub fn decode(payload: Bytes) -> Result<Self, FrameError> {
        if payload.is_empty() {
            return Err(FrameError::Empty);
        }
        let (connect_id, a) = read_uvarint(&payload).map_err(|e| e.field("connect id"))?;
        let (code, b) = read_uvarint(&payload[a..]).map_err(|e| e.field("type"))?;
        let kind = MessageType::from_code(code);
        let data = payload.slice(a + b..);
        if data.len() > MAX_DATA_LEN {
            return Err(FrameError::TooLarge {
                connect_id,
                kind,
                len: data.len(),
            });
        }
        Ok(TunnelMessage {
            connect_id,
            kind,
            data,
        })
    }
}

impl fmt::Display for TunnelMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MessageID {} MessageType {} Data len {}",
            self.connect_id,
            self.kind,
            self.data.len()
        )
    }
}

/// Writes `v` as a Go `binary.PutUvarint` into `out` (≥ 10 bytes) and returns the length.
pub fn put_uvarint(out: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

enum VarintError {
    Truncated,
    Overflow,
}

impl VarintError {
    fn field(self, name: &'static str) -> FrameError {
        match self {
            VarintError::Truncated => FrameError::Truncated(name),
            VarintError::Overflow => FrameError::Overflow,
        }
    }
}

/// Reads a Go `binary.ReadUvarint` from the front of `buf`: the value and bytes used.
fn read_uvarint(buf: &[u8]) -> Result<(u64, usize), VarintError> {
    let mut x: u64 = 0;
    let mut shift = 0u32;
    for (i, &b) in buf.iter().enumerate() {
        if i == MAX_VARINT_LEN {
            return Err(VarintError::Overflow);
        }
        if b < 0x80 {
            // Go: the 10th byte may only hold the top bit of the value.
            if i == MAX_VARINT_LEN - 1 && b > 1 {
                return Err(VarintError::Overflow);
            }
            return Ok((x | (u64::from(b) << shift), i + 1));
        }
        x |= u64::from(b & 0x7f) << shift;
        shift += 7;
    }
    Err(VarintError::Truncated)
}

/// Bytes as spaced lowercase hex (`81 03 ac`), as docs/tunnel-protocol.md writes its examples.
#[cfg(test)]
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_should_prefix_id_and_type_varints() {
        let m = TunnelMessage::new(1, MessageType::LogsConnect, "test_data");
        let mut want = vec![0x01, 0x00];
        want.extend_from_slice(b"test_data");
        assert_eq!(m.encode(), Bytes::from(want));
    }

    #[test]
    fn uvarints_should_match_go_worked_bytes() {
        let cases: [(u64, &str); 6] = [
            (1, "01"),
            (127, "7f"),
            (128, "80 01"),
            (300, "ac 02"),
            (16384, "80 80 01"),
            (u64::MAX, "ff ff ff ff ff ff ff ff ff 01"),
        ];
        for (v, want) in cases {
            let mut out = [0u8; 10];
            let n = put_uvarint(&mut out, v);
            assert_eq!(hex(&out[..n]), want, "value {v}");
        }
    }

    #[test]
    fn worked_messages_should_encode_as_in_the_spec() {
        assert_eq!(hex(&TunnelMessage::remove(300).encode()), "ac 02 04");
        assert_eq!(
            hex(&TunnelMessage::data(1, &b"ls\n"[..]).encode()),
            "01 03 6c 73 0a"
        );
        let close = TunnelMessage::close("failed to Update KubeletEndpoint Port").encode();
        assert_eq!(&close[..2], &[0x00, 0x05]);
        assert_eq!(&close[2..], b"failed to Update KubeletEndpoint Port");
    }

    #[test]
    fn round_trip_should_keep_every_id_and_type() {
        let ids = [0u64, 127, 128, 300, 16384, 1 << 63, u64::MAX];
        for id in ids {
            for code in 0..=6u64 {
                let m = TunnelMessage::new(id, MessageType::from_code(code), &b"\x00\xff xyz"[..]);
                let back = TunnelMessage::decode(m.encode()).unwrap();
                assert_eq!(back, m);
                assert_eq!(back.kind.code(), code);
            }
        }
    }

    #[test]
    fn remove_connect_300_should_decode_from_three_bytes() {
        let m = TunnelMessage::decode(Bytes::from_static(&[0xac, 0x02, 0x04])).unwrap();
        assert_eq!(m.connect_id, 300);
        assert_eq!(m.kind, MessageType::RemoveConnect);
        assert!(m.data.is_empty());
    }

    #[test]
    fn empty_message_should_be_an_error() {
        assert_eq!(TunnelMessage::decode(Bytes::new()), Err(FrameError::Empty));
    }

    #[test]
    fn message_with_only_the_id_should_be_an_error() {
        assert_eq!(
            TunnelMessage::decode(Bytes::from_static(&[0xac, 0x02])),
            Err(FrameError::Truncated("type"))
        );
        assert_eq!(
            TunnelMessage::decode(Bytes::from_static(&[0x80])),
            Err(FrameError::Truncated("connect id"))
        );
    }

    #[test]
    fn eleven_byte_varint_should_overflow() {
        let mut b = vec![0xff; 10];
        b.push(0x01);
        b.push(0x03);
        assert_eq!(
            TunnelMessage::decode(Bytes::from(b)),
            Err(FrameError::Overflow)
        );
        // Ten bytes whose last one holds more than the top bit also overflow (Go parity).
        let mut b = vec![0xff; 9];
        b.push(0x02);
        b.push(0x03);
        assert_eq!(
            TunnelMessage::decode(Bytes::from(b)),
            Err(FrameError::Overflow)
        );
    }

    #[test]
    fn one_mib_of_data_should_be_kept_and_one_more_byte_refused() {
        let ok = TunnelMessage::data(9, vec![7u8; MAX_DATA_LEN]);
        assert_eq!(
            TunnelMessage::decode(ok.encode()).unwrap().data.len(),
            MAX_DATA_LEN
        );
        let big = TunnelMessage::data(9, vec![7u8; MAX_DATA_LEN + 1]);
        assert_eq!(
            TunnelMessage::decode(big.encode()),
            Err(FrameError::TooLarge {
                connect_id: 9,
                kind: MessageType::Data,
                len: MAX_DATA_LEN + 1
            })
        );
    }

    #[test]
    fn type_values_should_match_upstream_and_print_unknown_otherwise() {
        let names = [
            "LOGS_CONNECT",
            "EXEC_CONNECT",
            "METRIC_CONNECT",
            "DATA",
            "REMOVE_CONNECT",
            "CLOSE_CONNECT",
            "ATTACH_CONNECT",
        ];
        for (code, name) in names.iter().enumerate() {
            assert_eq!(MessageType::from_code(code as u64).to_string(), *name);
        }
        assert_eq!(MessageType::from_code(7).to_string(), "UNKNOWN");
        assert_eq!(MessageType::from_code(7).code(), 7);
    }

    #[test]
    fn window_messages_should_carry_one_uvarint() {
        let w = TunnelMessage::window(300, 1 << 20);
        let back = TunnelMessage::decode(w.encode()).unwrap();
        assert_eq!(back.kind, MessageType::Window);
        assert_eq!(back.kind.code(), 64);
        assert_eq!(back.window_grant(), Some(1 << 20));
        assert_eq!(TunnelMessage::data(1, &b"x"[..]).window_grant(), None);
        assert_eq!(
            TunnelMessage::new(1, MessageType::Window, &b"\x01\x02"[..]).window_grant(),
            None
        );
    }
}
