//! Exec and attach: the upgrade request written on a raw socket to the local kubelet, then
//! bytes both ways; the kubelet's `101` head is relayed as the first DATA, untouched.

use bytes::BytesMut;
use kubeedge_wire::tunnel::{ConnectRequest, Inbound, QueueReceiver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::info;

use super::link::{Ctx, End, Opening, Up, end_of};
use super::local;

/// Relays one exec/attach connection until either side ends it.
pub(crate) async fn relay(req: &ConnectRequest, up: Up, mut rx: QueueReceiver, ctx: &Ctx) -> End {
    let head = match local::raw_head(req, ctx.options.kubelet) {
        Ok(h) => h,
        Err(e) => {
            info!(id = up.id, error = %e, "refusing a stream request");
            return End::Local;
        }
    };
    let sock = match TcpStream::connect(ctx.options.kubelet).await {
        Ok(s) => s,
        Err(e) => {
            info!(id = up.id, kubelet = %ctx.options.kubelet, error = %e, "local kubelet unreachable");
            return End::Local;
        }
    };
    let _ = sock.set_nodelay(true);
    let (mut rd, mut wr) = sock.into_split();
    if wr.write_all(head.as_bytes()).await.is_err() {
        return End::Local;
    }
    let buffer = ctx.options.relay_buffer;
    // Both directions run at once, so a peer that is not reading cannot stall the other way.
    let upward = async {
        let mut buf = BytesMut::with_capacity(buffer);
        let mut opening = Opening::new();
        loop {
            buf.reserve(buffer);
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return End::Local,
                Ok(n) => {
                    if let Err(e) = up.data(buf.split().freeze()).await {
                        return e;
                    }
                    opening.sent(n).await;
                }
            }
        }
    };
    let downward = async {
        // Bytes written locally and not yet granted back to the cloud (with an input window).
        let mut taken = 0;
        loop {
            let ev = match rx.try_recv() {
                Some(ev) => ev,
                None => {
                    // Nothing queued: the cloud may be waiting for its window.
                    if taken > 0 {
                        if let Err(e) = up.grant_wait(taken).await {
                            return e;
                        }
                        taken = 0;
                    }
                    rx.recv().await
                }
            };
            match ev {
                Inbound::Data(d) => {
                    if wr.write_all(&d).await.is_err() {
                        return End::Local;
                    }
                    if let Some(window) = up.input_window {
                        taken += d.len();
                        if taken >= window / 4 && up.grant(taken) {
                            taken = 0;
                        }
                    }
                }
                Inbound::End(e) => {
                    let _ = wr.shutdown().await;
                    return end_of(e);
                }
            }
        }
    };
    tokio::select! {
        e = upward => e,
        e = downward => e,
    }
}
