//! The two halves of a WebSocket connection: a reader that yields whole messages and a
//! writer task that batches queued frames into few socket writes.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::WsError;
use super::codec::{Decoder, OpCode, Role, WsMessage, encode_frame};
use crate::frame::{MAX_DATA_LEN, TunnelMessage};

/// Largest WebSocket message accepted: room for a tunnel message over 1 MiB, so that one
/// is refused for its own stream only; anything bigger ends the tunnel.
pub const MAX_MESSAGE_LEN: usize = 4 * MAX_DATA_LEN;

/// Bytes the reader makes room for when its buffer is (nearly) full.
const READ_SIZE: usize = 32 * 1024;
/// Below this much free room the reader grows its buffer before reading.
const MIN_READ: usize = 4 * 1024;

/// Flush after this many queued bytes even if more are waiting.
const BATCH_BYTES: usize = 256 * 1024;

/// What the writer task sends.
#[derive(Debug)]
pub enum Outgoing {
    /// A tunnel message, as one Text frame.
    Tunnel(TunnelMessage),
    /// A ping with this payload.
    Ping(Bytes),
    /// A pong answering a ping.
    Pong(Bytes),
    /// A close frame; the writer then shuts the socket down and stops.
    Close(u16, &'static str),
}

/// Reads whole messages from one half of a connection.
#[derive(Debug)]
pub struct WsReader<R> {
    io: R,
    buf: BytesMut,
    decoder: Decoder,
}

impl<R: AsyncRead + Unpin> WsReader<R> {
    /// A reader for `role`, starting with bytes already read past the handshake.
    pub fn new(io: R, role: Role, leftover: BytesMut) -> Self {
        WsReader {
            io,
            buf: leftover,
            decoder: Decoder::new(role, MAX_MESSAGE_LEN),
        }
    }

    /// The next message, or `None` when the peer closed the socket.
    pub async fn next(&mut self) -> Result<Option<WsMessage>, WsError> {
        loop {
            if let Some(m) = self.decoder.decode(&mut self.buf)? {
                return Ok(Some(m));
            }
            // Only grow when there is little room left: the decoder has already made room
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

fn encode(out: &mut BytesMut, role: Role, item: &Outgoing) {
    let mask = (role == Role::Client).then(rand::random::<[u8; 4]>);
    match item {
        Outgoing::Tunnel(m) => {
            let (head, n) = m.header();
            encode_frame(out, OpCode::Text, true, &[&head[..n], &m.data], mask);
        }
        Outgoing::Ping(p) => encode_frame(out, OpCode::Ping, true, &[p], mask),
        Outgoing::Pong(p) => encode_frame(out, OpCode::Pong, true, &[p], mask),
        Outgoing::Close(code, reason) => {
            let code = code.to_be_bytes();
            encode_frame(out, OpCode::Close, true, &[&code, reason.as_bytes()], mask)
        }
    }
}

/// Writes what arrives on `rx` until a [`Outgoing::Close`] is sent or every sender is gone,
/// then shuts the socket down. Frames queued together go out in one write; each write must
/// finish within `write_timeout`.
pub async fn write_loop<W: AsyncWrite + Unpin>(
    mut io: W,
    role: Role,
    mut rx: mpsc::Receiver<Outgoing>,
    write_timeout: Duration,
) -> Result<(), WsError> {
    let mut out = BytesMut::with_capacity(64 * 1024);
    while let Some(first) = rx.recv().await {
        let mut closing = matches!(first, Outgoing::Close(..));
        encode(&mut out, role, &first);
        while !closing && out.len() < BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => {
                    closing = matches!(item, Outgoing::Close(..));
                    encode(&mut out, role, &item);
                }
                Err(_) => break,
            }
        }
        let write = async {
            io.write_all(&out).await?;
            io.flush().await
        };
        tokio::time::timeout(write_timeout, write)
            .await
            .map_err(|_| WsError::Timeout("write"))??;
        out.clear();
        if closing {
            break;
        }
    }
    let _ = tokio::time::timeout(write_timeout, io.shutdown()).await;
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
}
