//! Exec and attach: after the request head, the API server's connection is a byte pipe to
//! the kubelet through the tunnel. The kubelet's own `101` head comes back as the first DATA;
//! nothing is synthesised here, except a `504` when the edge never answers.

use std::io::IoSlice;

use bytes::BytesMut;
use futures::FutureExt as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::client_io::{write_all_within, write_within};
use crate::tunnel::{ApiStream, Shared};
use kubeedge_wire::http1;
use kubeedge_wire::tunnel::{Inbound, StreamEnd};

/// Bytes of API-side input held while the edge has not answered yet; past it the API side
/// is not read until the edge answers (the edge deadline still runs).
const EARLY_INPUT_LIMIT: usize = 64 * 1024;
/// Bytes from the edge written toward the API server in one go when that much is queued.
const BATCH: usize = 256 * 1024;

/// Pipes `conn` and `stream` until either side ends. `leftover` holds bytes that arrived
/// with the request head (upstream drops them). The API side's EOF sends
/// `REMOVE_CONNECT` once (by dropping the stream); the edge's `REMOVE_CONNECT` closes the API
/// connection at once (upstream waits for the next API read).
///
/// Nothing goes toward the edge before the edge's first DATA (the kubelet's `101` head): a
/// Go edge registers the connection in a goroutine after the CONNECT, so DATA sent right
/// behind the CONNECT can reach it before the connection exists and be dropped. The API side
/// is read from the start all the same (into a bounded buffer), so a client that goes away
/// is noticed at once. An edge that has not answered within `edge_response_timeout` gets
/// the API server a `504` and the stream removed. Every write toward the API server must
/// finish within `write_timeout`.
pub(crate) async fn pipe<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    leftover: BytesMut,
    mut stream: ApiStream,
    shared: &Shared,
) {
    let id = stream.id();
    let buffer = shared.tuning.relay_buffer;
    let sender = stream.sender();
    let edge_ready = Notify::new();
    let (mut rd, mut wr) = tokio::io::split(conn);
    // Both directions run at once, so a peer that is not reading cannot stall the other way.
    let upward = async {
        let mut early = leftover;
        // Until the edge answers: hold what the client sends, watching for its end.
        loop {
            if early.len() >= EARLY_INPUT_LIMIT {
                edge_ready.notified().await;
                break;
            }
            early.reserve(buffer);
            tokio::select! {
                () = edge_ready.notified() => break,
                r = rd.read_buf(&mut early) => match r {
                    Ok(0) => {
                        debug!(id, "API side closed before the edge answered; removing the stream");
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        debug!(id, error = %e, "API side failed before the edge answered");
                        return;
                    }
                },
            }
        }
        if !early.is_empty() && sender.send(early.freeze()).await.is_err() {
            return;
        }
        let mut inbound = BytesMut::with_capacity(buffer);
        loop {
            inbound.reserve(buffer);
            let mut closed = match rd.read_buf(&mut inbound).await {
                Ok(0) => {
                    debug!(id, "API side closed; removing the stream");
                    return;
                }
                Ok(_) => false,
                Err(e) => {
                    debug!(id, error = %e, "API side failed");
                    return;
                }
            };
            // Take what else is readable now (a TLS read yields one record, 16 KiB at
            // most), so that a fast client's bytes travel in few large DATA messages.
            while inbound.len() < buffer {
                match rd.read_buf(&mut inbound).now_or_never() {
                    None => break,
                    Some(Ok(0) | Err(_)) => {
                        closed = true;
                        break;
                    }
                    Some(Ok(_)) => {}
                }
            }
            if sender.send(inbound.split().freeze()).await.is_err() {
                debug!(id, "tunnel closed during exec");
                return;
            }
            if closed {
                debug!(id, "API side closed or failed; removing the stream");
                return;
            }
        }
    };
    let downward = async {
        let limit = shared.tuning.edge_response_timeout;
        let first = match tokio::time::timeout(limit, stream.recv()).await {
            Ok(ev) => ev,
            Err(_) => {
                shared.metrics.edge_response_timeout();
                shared.metrics.request_refused();
                warn!(
                    id,
                    timeout_s = limit.as_secs_f64(),
                    "edge did not answer the exec/attach request; answering 504"
                );
                let text = "the edge did not answer in time (its kubelet may be down)";
                let _ = write_within(&mut wr, &http1::text_response(504, text, true), shared).await;
                return;
            }
        };
        let mut ev = Some(first);
        loop {
            let mut pieces = Vec::new();
            let mut batched = 0;
            let mut end = None;
            while let Some(e) = ev.take() {
                match e {
                    Inbound::Data(d) => {
                        batched += d.len();
                        if !d.is_empty() {
                            pieces.push(d);
                        }
                        // Stores a permit: only the first one matters.
                        edge_ready.notify_one();
                        if batched < BATCH {
                            ev = stream.try_recv();
                        }
                    }
                    Inbound::End(e) => end = Some(e),
                }
            }
            let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
            if !slices.is_empty() && !write_all_within(&mut wr, &mut slices, shared).await {
                return;
            }
            match end {
                None => {}
                Some(StreamEnd::Removed) => return,
                Some(e) => {
                    debug!(id, reason = ?e, "exec stream failed; dropping the API connection");
                    return;
                }
            }
            ev = Some(stream.recv().await);
        }
    };
    tokio::select! {
        () = upward => {}
        () = downward => {}
    }
    let _ = tokio::time::timeout(shared.tuning.write_timeout, wr.shutdown()).await;
    // Dropping the stream unregisters it and sends REMOVE_CONNECT once, unless the edge
    // ended it.
    drop(stream);
}
