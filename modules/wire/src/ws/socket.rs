//! The two halves of a WebSocket connection on `actix_http::ws::Codec`: a reader that yields
//! whole messages (fragments joined, within a size limit) and a writer that encodes into one
//! buffer, so frames queued together go out in one socket write.

use std::time::Duration;

use actix_codec::Decoder as _;
use actix_http::ws::{CloseCode, CloseReason, Codec, Frame, Item, OpCode, Parser, ProtocolError};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::WsError;
use crate::tunnel::{MAX_DATA_LEN, TunnelMessage};

/// Largest tunnel WebSocket message accepted: room for a tunnel message over 1 MiB, so that
/// one is refused for its own stream only; anything bigger ends the tunnel.
pub const MAX_MESSAGE_LEN: usize = 4 * MAX_DATA_LEN;

/// Bytes the reader makes room for when its buffer is (nearly) full.
const READ_SIZE: usize = 32 * 1024;
/// Below this much free room the reader grows its buffer before reading.
const MIN_READ: usize = 4 * 1024;

/// Flush after this many queued bytes even if more are waiting.
const BATCH_BYTES: usize = 256 * 1024;

/// Which end of the connection we are: clients mask what they send, servers must not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The dialing side (the edge): sends masked frames, expects unmasked ones.
    Client,
    /// The accepting side (the cloud): sends unmasked frames, expects masked ones.
    Server,
}

impl Role {
    fn codec(self, max_frame: usize) -> Codec {
        let codec = Codec::new().max_size(max_frame);
        match self {
            Role::Client => codec.client_mode(),
            Role::Server => codec,
        }
    }
}

/// A whole message as received. Text is not checked for UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsMessage {
    /// A Text message's bytes.
    Text(Bytes),
    /// A Binary message's bytes.
    Binary(Bytes),
    /// A ping's payload.
    Ping(Bytes),
    /// A pong's payload.
    Pong(Bytes),
    /// A close: its status code, if any, and its reason.
    Close(Option<u16>, Bytes),
}

/// What the writer sends.
#[derive(Debug)]
pub enum Outgoing {
    /// A tunnel message, as one Text frame.
    Tunnel(TunnelMessage),
    /// These bytes as one Text frame, whatever they are.
    Text(Bytes),
    /// A ping with this payload.
    Ping(Bytes),
    /// A pong answering a ping.
    Pong(Bytes),
    /// A close frame; [`write_loop`] then shuts the socket down and stops.
    Close(u16, &'static str),
}

/// Why a [`Decoder`] refused its input, before either end's error type: the tunnel reports it
/// as a [`WsError`], the hub as a `hub::WireError`.
#[derive(Debug)]
pub(crate) enum Refused {
    /// A frame, or a fragmented message's pieces together, over the limit.
    TooLarge {
        /// The length the frame announced, or the message's length with its next piece.
        size: usize,
        /// The decoder's limit.
        limit: usize,
    },
    /// The codec refused a frame.
    Codec(ProtocolError),
}

impl Refused {
    /// What the refusal is to the tunnel and the hub client.
    fn into_ws(self) -> WsError {
        match self {
            Refused::TooLarge { limit, .. } => WsError::TooLarge(limit),
            Refused::Codec(ProtocolError::Io(e)) => WsError::Io(e),
            Refused::Codec(other) => WsError::Protocol(other.to_string()),
        }
    }
}

/// The payload length the frame header at the front of `buf` announces, once that much of
/// the header is here, for a header the codec would accept: reserved bits clear, masked if
/// and only if `masked`, a known opcode. (Others are left to the codec, so an error does
/// not depend on how the bytes were split into reads.)
fn announced_len(buf: &[u8], masked: bool) -> Option<u64> {
    let (b0, b1) = (*buf.first()?, *buf.get(1)?);
    let known = matches!(b0 & 0x0f, 0x0..=0x2 | 0x8..=0xa);
    if b0 & 0x70 != 0 || (b1 & 0x80 != 0) != masked || !known {
        return None;
    }
    match b1 & 0x7f {
        126 => Some(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?]).into()),
        127 => Some(u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?)),
        n => Some(n.into()),
    }
}

/// Whole messages from bytes, without IO: `actix_http::ws::Codec` for the frames, fragments
/// joined, and every frame and message held to a size limit. The one reassembler of both the
/// tunnel and the hub (`hub::Reassembler` reports its refusals as the hub does). Holds no
/// buffer while no fragmented message is pending.
#[derive(Debug)]
pub struct Decoder {
    codec: Codec,
    /// Whether the peer's frames are masked (we are the server).
    masked: bool,
    limit: usize,
    /// A fragmented message being joined: whether it is Text, and its bytes so far.
    partial: Option<(bool, BytesMut)>,
}

impl Decoder {
    /// A decoder for `role` taking messages (and frames) up to `limit` bytes.
    pub fn new(role: Role, limit: usize) -> Self {
        Decoder {
            codec: role.codec(limit),
            masked: role == Role::Server,
            limit,
            partial: None,
        }
    }

    /// The next whole message from the front of `src`, consuming its frames; `None` until
    /// one is complete. A frame announcing more than the limit is refused from its header,
    /// before its payload arrives, whatever the split of the bytes into reads.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<WsMessage>, WsError> {
        self.next_message(src).map_err(Refused::into_ws)
    }

    /// [`Decoder::decode`] with the refusal as it is, for each end to report in its terms.
    pub(crate) fn next_message(
        &mut self,
        src: &mut BytesMut,
    ) -> Result<Option<WsMessage>, Refused> {
        loop {
            // The codec checks a frame's length once all of it is here; refusing it from
            // its header keeps a peer from making us buffer up to the limit first.
            let announced = announced_len(src, self.masked);
            let too_large = |n: u64| Refused::TooLarge {
                size: usize::try_from(n).unwrap_or(usize::MAX),
                limit: self.limit,
            };
            if let Some(n) = announced.filter(|&n| n > self.limit as u64) {
                return Err(too_large(n));
            }
            let frame = match self.codec.decode(src) {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(None),
                // Past the check above only a length no `usize` holds overflows.
                Err(ProtocolError::Overflow) => {
                    return Err(too_large(announced.unwrap_or(u64::MAX)));
                }
                Err(e) => return Err(Refused::Codec(e)),
            };
            if let Some(m) = self.take(frame)? {
                return Ok(Some(m));
            }
        }
    }

    /// Joins fragments; a whole message when one is complete.
    fn take(&mut self, frame: Frame) -> Result<Option<WsMessage>, Refused> {
        let piece = match frame {
            Frame::Text(b) => return Ok(Some(WsMessage::Text(b))),
            Frame::Binary(b) => return Ok(Some(WsMessage::Binary(b))),
            Frame::Ping(b) => return Ok(Some(WsMessage::Ping(b))),
            Frame::Pong(b) => return Ok(Some(WsMessage::Pong(b))),
            Frame::Close(reason) => {
                let (code, text) = match reason {
                    Some(r) => (
                        Some(u16::from(r.code)),
                        Bytes::from(r.description.unwrap_or_default()),
                    ),
                    None => (None, Bytes::new()),
                };
                return Ok(Some(WsMessage::Close(code, text)));
            }
            Frame::Continuation(item) => item,
        };
        // The codec itself refuses a data frame or a first fragment inside a fragmented
        // message, and a continuation outside one.
        let (last, data) = match piece {
            Item::FirstText(b) => {
                self.partial = Some((true, BytesMut::new()));
                (false, b)
            }
            Item::FirstBinary(b) => {
                self.partial = Some((false, BytesMut::new()));
                (false, b)
            }
            Item::Continue(b) => (false, b),
            Item::Last(b) => (true, b),
        };
        let Some((_, joined)) = self.partial.as_mut() else {
            return Err(Refused::Codec(ProtocolError::ContinuationNotStarted));
        };
        let size = joined.len() + data.len();
        if size > self.limit {
            self.partial = None;
            return Err(Refused::TooLarge {
                size,
                limit: self.limit,
            });
        }
        joined.extend_from_slice(&data);
        if !last {
            return Ok(None);
        }
        Ok(self.partial.take().map(|(text, joined)| {
            let joined = joined.freeze();
            if text {
                WsMessage::Text(joined)
            } else {
                WsMessage::Binary(joined)
            }
        }))
    }
}

/// Reads whole messages from one half of a connection.
#[derive(Debug)]
pub struct WsReader<R> {
    io: R,
    buf: BytesMut,
    decoder: Decoder,
}

impl<R: AsyncRead + Unpin> WsReader<R> {
    /// A reader for `role` taking messages up to [`MAX_MESSAGE_LEN`], starting with bytes
    /// already read past the handshake.
    pub fn new(io: R, role: Role, leftover: BytesMut) -> Self {
        Self::with_limit(io, role, leftover, MAX_MESSAGE_LEN)
    }

    /// [`WsReader::new`] taking messages (and frames) up to `limit` bytes.
    pub fn with_limit(io: R, role: Role, leftover: BytesMut, limit: usize) -> Self {
        WsReader {
            io,
            buf: leftover,
            decoder: Decoder::new(role, limit),
        }
    }

    /// The next message, or `None` when the peer closed the socket.
    pub async fn next(&mut self) -> Result<Option<WsMessage>, WsError> {
        loop {
            if let Some(m) = self.decoder.decode(&mut self.buf)? {
                return Ok(Some(m));
            }
            // Only grow when there is little room left: the codec has already made room
            // for a frame that is partly here, and growing again would copy it again.
            if self.buf.capacity() - self.buf.len() < MIN_READ {
                self.buf.reserve(READ_SIZE);
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// [`WsReader::next`] that fails with [`WsError::Timeout`] when nothing arrives within
    /// `limit` (the pong timeout: the peer answers our pings, so silence means it is gone).
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<WsMessage>, WsError> {
        tokio::time::timeout(limit, self.next())
            .await
            .map_err(|_| WsError::Timeout("read"))?
    }
}

/// Appends one whole frame (FIN set) carrying `payload` to `dst`, masked when `mask` (a
/// client's frames are, a server's are not). Every frame the tunnel, the hub and the hub
/// client send is written here or by [`put_close`].
pub fn put_frame(dst: &mut BytesMut, payload: &[u8], op: OpCode, mask: bool) {
    // Raw bytes for Text too: the codec's `Message::Text` would want UTF-8.
    Parser::write_message(dst, payload, op, true, mask);
}

/// Longest close reason in bytes: a control frame's payload is at most 125 bytes, two of them
/// the close code.
pub const MAX_CLOSE_REASON: usize = 123;

/// Appends a close frame with `code` and `reason` to `dst`, the reason cut to
/// [`MAX_CLOSE_REASON`] bytes on a character boundary (so the payload stays valid UTF-8 and
/// the frame a valid control frame).
pub fn put_close(dst: &mut BytesMut, code: CloseCode, reason: &str, mask: bool) {
    Parser::write_close(
        dst,
        Some(CloseReason {
            code,
            description: Some(cut(reason, MAX_CLOSE_REASON).to_owned()),
        }),
        mask,
    );
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

/// Writes frames to one half of a connection: [`WsWriter::queue`] encodes into a buffer,
/// [`WsWriter::flush_within`] writes it out within a deadline.
#[derive(Debug)]
pub struct WsWriter<W> {
    io: W,
    mask: bool,
    out: BytesMut,
    /// A tunnel message's header and data joined, for the frame's one-slice payload.
    scratch: BytesMut,
}

impl<W: AsyncWrite + Unpin> WsWriter<W> {
    /// A writer for `role` (a client masks its frames).
    pub fn new(io: W, role: Role) -> Self {
        WsWriter {
            io,
            mask: role == Role::Client,
            out: BytesMut::with_capacity(64 * 1024),
            scratch: BytesMut::new(),
        }
    }

    /// Encodes `item` after what is already queued.
    pub fn queue(&mut self, item: Outgoing) {
        let (out, mask) = (&mut self.out, self.mask);
        match item {
            Outgoing::Tunnel(m) => {
                self.scratch.clear();
                m.encode_into(&mut self.scratch);
                put_frame(out, &self.scratch, OpCode::Text, mask);
            }
            Outgoing::Text(b) => put_frame(out, &b, OpCode::Text, mask),
            Outgoing::Ping(p) => put_frame(out, &p, OpCode::Ping, mask),
            Outgoing::Pong(p) => put_frame(out, &p, OpCode::Pong, mask),
            Outgoing::Close(code, reason) => put_close(out, code.into(), reason, mask),
        }
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.out.len()
    }

    /// Writes everything queued; the write must finish within `limit`.
    pub async fn flush_within(&mut self, limit: Duration) -> Result<(), WsError> {
        let write = async {
            self.io.write_all(&self.out).await?;
            self.io.flush().await
        };
        tokio::time::timeout(limit, write)
            .await
            .map_err(|_| WsError::Timeout("write"))??;
        self.out.clear();
        Ok(())
    }

    /// Queues `item` and writes it out within `limit`.
    pub async fn send_within(&mut self, item: Outgoing, limit: Duration) -> Result<(), WsError> {
        self.queue(item);
        self.flush_within(limit).await
    }

    /// Shuts the socket's write side down, giving up after `limit`.
    pub async fn shutdown_within(&mut self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.io.shutdown()).await;
    }
}

/// Writes what arrives on `rx` until a [`Outgoing::Close`] is sent or every sender is gone,
/// then shuts the socket down. Frames queued together go out in one write; each write must
/// finish within `write_timeout`.
pub async fn write_loop<W: AsyncWrite + Unpin>(
    io: W,
    role: Role,
    mut rx: mpsc::Receiver<Outgoing>,
    write_timeout: Duration,
) -> Result<(), WsError> {
    let mut writer = WsWriter::new(io, role);
    while let Some(first) = rx.recv().await {
        let mut closing = matches!(first, Outgoing::Close(..));
        writer.queue(first);
        while !closing && writer.queued() < BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => {
                    closing = matches!(item, Outgoing::Close(..));
                    writer.queue(item);
                }
                Err(_) => break,
            }
        }
        writer.flush_within(write_timeout).await?;
        if closing {
            break;
        }
    }
    writer.shutdown_within(write_timeout).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writer_and_reader_should_round_trip_tunnel_messages() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (tx, rx) = mpsc::channel(8);
        let writer = tokio::spawn(write_loop(client, Role::Client, rx, Duration::from_secs(5)));
        let mut reader = WsReader::new(server, Role::Server, BytesMut::new());
        tx.send(Outgoing::Tunnel(TunnelMessage::data(
            5,
            vec![0xffu8; 70_000],
        )))
        .await
        .unwrap();
        tx.send(Outgoing::Ping(Bytes::from_static(b"ping you")))
            .await
            .unwrap();
        tx.send(Outgoing::Close(1000, "bye")).await.unwrap();
        match reader.next().await.unwrap() {
            Some(WsMessage::Text(t)) => {
                let m = TunnelMessage::decode(t).unwrap();
                assert_eq!(m.connect_id, 5);
                assert_eq!(m.data.len(), 70_000);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            reader.next().await.unwrap(),
            Some(WsMessage::Ping(Bytes::from_static(b"ping you")))
        );
        assert_eq!(
            reader.next().await.unwrap(),
            Some(WsMessage::Close(Some(1000), Bytes::from_static(b"bye")))
        );
        writer.await.unwrap().unwrap();
        assert_eq!(reader.next().await.unwrap(), None);
    }

    /// Frames from the independent test peer: fragments joined into one message (with a
    /// ping between them), non-UTF-8 Text kept as is, limits enforced.
    #[tokio::test]
    async fn reader_should_join_fragments_and_keep_binary_text() {
        use ws_peer::{OpCode as Op, encode_frame};
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut bytes = BytesMut::new();
        let mask = Some([1, 2, 3, 4]);
        encode_frame(&mut bytes, Op::Text, false, &[&[0xff, 0xfe]], mask);
        encode_frame(&mut bytes, Op::Ping, true, &[b"p"], mask);
        encode_frame(&mut bytes, Op::Continuation, false, &[&[0x00]], mask);
        encode_frame(&mut bytes, Op::Continuation, true, &[&[0x80, 0x81]], mask);
        encode_frame(&mut bytes, Op::Binary, true, &[&[7u8; 100]], mask);
        client.write_all(&bytes).await.unwrap();
        drop(client);
        let mut reader = WsReader::with_limit(server, Role::Server, BytesMut::new(), 64);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(WsMessage::Ping(Bytes::from_static(b"p")))
        );
        assert_eq!(
            reader.next().await.unwrap(),
            Some(WsMessage::Text(Bytes::from_static(&[
                0xff, 0xfe, 0x00, 0x80, 0x81
            ])))
        );
        assert!(matches!(reader.next().await, Err(WsError::TooLarge(64))));
    }

    #[tokio::test]
    async fn reader_should_refuse_an_oversized_frame_from_its_header() {
        use ws_peer::{OpCode as Op, encode_frame};
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut bytes = BytesMut::new();
        encode_frame(
            &mut bytes,
            Op::Binary,
            true,
            &[&vec![0u8; 10_000]],
            Some([9; 4]),
        );
        // Its header only: the reader must not wait for (or buffer) the rest.
        client.write_all(&bytes[..4]).await.unwrap();
        let mut reader = WsReader::with_limit(server, Role::Server, BytesMut::new(), 1_000);
        let r = tokio::time::timeout(Duration::from_secs(5), reader.next()).await;
        assert!(matches!(r, Ok(Err(WsError::TooLarge(1_000)))), "{r:?}");
    }

    /// A header the codec refuses (reserved bits set) that also announces more than the
    /// limit: the same error whether the bytes come at once or one by one.
    #[test]
    fn errors_should_not_depend_on_how_reads_split_the_bytes() {
        let header = [0xc1u8, 0xff, 0, 0, 0, 0, 0, 0x40, 0, 0, 1, 2, 3, 4];
        let whole = Decoder::new(Role::Server, 1024)
            .decode(&mut BytesMut::from(&header[..]))
            .unwrap_err()
            .to_string();
        let mut d = Decoder::new(Role::Server, 1024);
        let mut buf = BytesMut::new();
        let split = header
            .iter()
            .find_map(|b| {
                buf.extend_from_slice(&[*b]);
                d.decode(&mut buf).err()
            })
            .map(|e| e.to_string());
        assert_eq!(split.as_deref(), Some(whole.as_str()));
        assert!(whole.contains("reserved bits"), "{whole}");
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

    #[tokio::test]
    async fn client_frames_should_be_masked_and_server_frames_not() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut w = WsWriter::new(a, Role::Client);
        w.send_within(
            Outgoing::Text(Bytes::from_static(&[0xff])),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        // A client reading a masked frame is a protocol error: the frame was masked.
        let mut r = WsReader::new(b, Role::Client, BytesMut::new());
        assert!(matches!(r.next().await, Err(WsError::Protocol(_))));
    }
}
