//! Relays a logs or metrics stream as a chunked `200` body: each batch of DATA is flushed at
//! once (`kubectl logs -f` sees lines as the edge sends them), `REMOVE_CONNECT` ends the body,
//! and a client that goes away ends the stream (its drop sends `REMOVE_CONNECT`).

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tracing::debug;

use super::Outcome;
use super::server::write_within;
use crate::http1::{self, LAST_CHUNK};
use crate::queue::{Inbound, StreamEnd};
use crate::tunnel::{ApiStream, Shared};

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
    let mut out = BytesMut::with_capacity(16 * 1024);
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
        let mut next = Some(ev);
        while let Some(ev) = next.take() {
            match ev {
                Inbound::Data(d) => http1::put_chunk(&mut out, &d),
                Inbound::End(e) => {
                    end = Some(e);
                    break;
                }
            }
            if out.len() < BATCH {
                next = stream.try_recv();
            }
        }
        if end == Some(StreamEnd::Removed) {
            out.extend_from_slice(LAST_CHUNK);
        }
        if !out.is_empty() {
            if !write_within(conn, &out, shared).await {
                return Outcome::Close;
            }
            out.clear();
        }
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
