//! Exec and attach: after the request head, the API server's connection is a byte pipe to
//! the kubelet through the tunnel. The kubelet's own `101` head comes back as the first DATA;
//! nothing is synthesised here.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tracing::debug;

use crate::queue::{Inbound, StreamEnd};
use crate::tunnel::ApiStream;

/// Pipes `conn` and `stream` until either side ends. `leftover` holds bytes that arrived
/// with the request head (upstream drops them, W11). The API side's EOF sends
/// `REMOVE_CONNECT` once (by dropping the stream); the edge's `REMOVE_CONNECT` closes the API
/// connection at once (upstream waits for the next API read, W10).
///
/// Nothing goes toward the edge before the edge's first DATA (the kubelet's `101` head): a
/// Go edge registers the connection in a goroutine after the CONNECT, so DATA sent right
/// behind the CONNECT can reach it before the connection exists and be dropped. Clients do
/// not send protocol bytes before the `101` anyway, except pipelined ones, which wait.
pub(crate) async fn pipe<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    leftover: BytesMut,
    mut stream: ApiStream,
    buffer: usize,
) {
    let id = stream.id();
    let sender = stream.sender();
    let edge_ready = Notify::new();
    let (mut rd, mut wr) = tokio::io::split(conn);
    // Both directions run at once, so a peer that is not reading cannot stall the other way.
    let upward = async {
        edge_ready.notified().await;
        if !leftover.is_empty() && sender.send(leftover.freeze()).await.is_err() {
            return;
        }
        let mut inbound = BytesMut::with_capacity(buffer);
        loop {
            inbound.reserve(buffer);
            match rd.read_buf(&mut inbound).await {
                Ok(0) => debug!(id, "API side closed; removing the stream"),
                Ok(_) => {
                    if sender.send(inbound.split().freeze()).await.is_ok() {
                        continue;
                    }
                    debug!(id, "tunnel closed during exec");
                }
                Err(e) => debug!(id, error = %e, "API side failed"),
            }
            return;
        }
    };
    let downward = async {
        loop {
            let mut ev = Some(stream.recv().await);
            while let Some(e) = ev.take() {
                match e {
                    Inbound::Data(d) => {
                        if wr.write_all(&d).await.is_err() {
                            return;
                        }
                        // Stores a permit: only the first one matters.
                        edge_ready.notify_one();
                        ev = stream.try_recv();
                    }
                    Inbound::End(StreamEnd::Removed) => {
                        let _ = wr.flush().await;
                        return;
                    }
                    Inbound::End(e) => {
                        debug!(id, reason = ?e, "exec stream failed; dropping the API connection");
                        return;
                    }
                }
            }
            if wr.flush().await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = upward => {}
        () = downward => {}
    }
    let _ = wr.shutdown().await;
    drop(stream);
}
