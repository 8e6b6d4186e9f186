//! Relays a logs or metrics stream as a chunked `200` body: each batch of DATA goes out as
//! one chunk, written from the received buffers without gathering them and flushed at once
//! (`kubectl logs -f` sees lines as the edge sends them), `REMOVE_CONNECT` ends the body, and
//! a client that goes away ends the stream (its drop sends `REMOVE_CONNECT`).

use std::io::IoSlice;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tracing::debug;

use super::client_io::{Outcome, write_all_within, write_within};
use crate::tunnel::{ApiStream, Shared};
use kubeedge_wire::http1::{self, LAST_CHUNK};
use kubeedge_wire::tunnel::{Inbound, StreamEnd};

/// Flush when this much is batched even if more is queued.
const BATCH: usize = 256 * 1024;

/// Writes the response for `stream` on `conn`. Bytes the client sends meanwhile (a pipelined
/// request) are kept in `pending`. A client that takes nothing for `write_timeout` is
/// dropped; one that reads slowly only slows its own stream.
pub(crate) async fn relay_body<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    pending: &mut BytesMut,
    mut stream: ApiStream,
    keep_alive: bool,
    shared: &Shared,
) -> Outcome {
    // Upstream commits 200 before the edge answers; kubelet statuses are not relayed.
    let head: &[u8] = if keep_alive {
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    } else {
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    };
    if !write_within(conn, head, shared).await {
        return Outcome::Close;
    }
    // What the edge sent since the last write, written as one chunk without copying.
    let mut pieces: Vec<Bytes> = Vec::new();
    loop {
        let ev = tokio::select! {
            ev = stream.recv() => ev,
            r = conn.read_buf(pending), if pending.len() < http1::MAX_HEAD_LEN => match r {
                Ok(0) | Err(_) => {
                    debug!(id = stream.id(), "client went away; ending the stream");
                    return Outcome::Close;
                }
                Ok(_) => continue,
            },
        };
        let mut end = None;
        let mut batched = 0;
        let mut next = Some(ev);
        while let Some(ev) = next.take() {
            match ev {
                Inbound::Data(d) => {
                    if !d.is_empty() {
                        batched += d.len();
                        pieces.push(d);
                    }
                }
                Inbound::End(e) => {
                    end = Some(e);
                    break;
                }
            }
            if batched < BATCH {
                next = stream.try_recv();
            }
        }
        let head = http1::ChunkHead::new(batched);
        let mut slices = Vec::with_capacity(pieces.len() + 3);
        if batched > 0 {
            slices.push(IoSlice::new(head.as_bytes()));
            slices.extend(pieces.iter().map(|p| IoSlice::new(p)));
            slices.push(IoSlice::new(http1::CHUNK_END));
        }
        if end == Some(StreamEnd::Removed) {
            slices.push(IoSlice::new(LAST_CHUNK));
        }
        if !slices.is_empty() && !write_all_within(conn, &mut slices, shared).await {
            return Outcome::Close;
        }
        drop(slices);
        pieces.clear();
        match end {
            None => {}
            Some(StreamEnd::Removed) => {
                return if keep_alive {
                    Outcome::KeepAlive
                } else {
                    Outcome::Close
                };
            }
            Some(e) => {
                // No last chunk: the client must see a broken body, not a complete one.
                debug!(id = stream.id(), reason = ?e, "stream failed; aborting the response");
                return Outcome::Close;
            }
        }
    }
}
