//! Logs and metrics: a GET to the local kubelet whose body goes back as DATA (logs: bytes as
//! they come; metrics: one line per DATA with `\n`, as upstream).

use bytes::{Bytes, BytesMut};
use kubeedge_wire::http1::{self, BodyReader};
use kubeedge_wire::tunnel::{ConnectRequest, Inbound, MAX_DATA_LEN, QueueReceiver};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, info};

use super::link::{Ctx, End, Opening, Up, end_of};
use super::local;

/// Relays one GET. The kubelet's status is not relayed (the protocol has no place for it);
/// its body is, error text included, as upstream.
pub(crate) async fn relay(
    req: &ConnectRequest,
    up: Up,
    mut rx: QueueReceiver,
    ctx: &Ctx,
    lines: bool,
) -> End {
    let head = match local::get_head(req, ctx.options.kubelet) {
        Ok(h) => h,
        Err(e) => {
            info!(id = up.id, error = %e, "refusing a stream request");
            return End::Local;
        }
    };
    let mut sock = match TcpStream::connect(ctx.options.kubelet).await {
        Ok(s) => s,
        Err(e) => {
            info!(id = up.id, kubelet = %ctx.options.kubelet, error = %e, "local kubelet unreachable");
            return End::Local;
        }
    };
    if sock.write_all(head.as_bytes()).await.is_err() {
        return End::Local;
    }
    let max = ctx.options.relay_buffer.min(MAX_DATA_LEN - 1);
    let mut buf = BytesMut::new();
    let resp = tokio::select! {
        r = http1::read_response_head(&mut sock, &mut buf) => r,
        ev = wait_end(&mut rx) => return ev,
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            info!(id = up.id, error = %e, "local kubelet answered no HTTP response");
            return End::Local;
        }
    };
    debug!(id = up.id, status = resp.status, "local kubelet answered");
    let mut body = BodyReader::new(&resp);
    let mut partial = BytesMut::new();
    let mut opening = Opening::new();
    loop {
        let piece = tokio::select! {
            p = body.next(&mut sock, &mut buf, max) => p,
            ev = wait_end(&mut rx) => return ev,
        };
        match piece {
            Ok(Some(p)) if !lines => {
                let len = p.len();
                if let Err(e) = up.data(p).await {
                    return e;
                }
                opening.sent(len).await;
            }
            Ok(Some(p)) => {
                partial.extend_from_slice(&p);
                while let Some(line) = next_line(&mut partial, max) {
                    if let Err(e) = up.data(line).await {
                        return e;
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                debug!(id = up.id, error = %e, "local body ended with an error");
                break;
            }
        }
    }
    if lines && !partial.is_empty() {
        // Upstream appends the newline to a last line that lacks one.
        partial.extend_from_slice(b"\n");
        let _ = up.data(partial.freeze()).await;
    }
    End::Local
}

/// A complete line (with its `\n`) from the front of `partial`; a line longer than `max`
/// goes out in `max`-byte pieces rather than being cut (upstream truncates at 64 KiB).
fn next_line(partial: &mut BytesMut, max: usize) -> Option<Bytes> {
    match partial.iter().position(|b| *b == b'\n') {
        Some(i) if i < max => Some(partial.split_to(i + 1).freeze()),
        _ if partial.len() >= max => Some(partial.split_to(max).freeze()),
        _ => None,
    }
}

/// Resolves when the cloud ends the stream; DATA toward a GET is ignored.
async fn wait_end(rx: &mut QueueReceiver) -> End {
    loop {
        if let Inbound::End(e) = rx.recv().await {
            return end_of(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_should_split_at_newlines_and_long_ones_in_pieces() {
        let mut p = BytesMut::from(&b"a\nbb\ncc"[..]);
        assert_eq!(next_line(&mut p, 10).as_deref(), Some(&b"a\n"[..]));
        assert_eq!(next_line(&mut p, 10).as_deref(), Some(&b"bb\n"[..]));
        assert_eq!(next_line(&mut p, 10), None);
        let mut p = BytesMut::from(&b"0123456789abc"[..]);
        assert_eq!(next_line(&mut p, 5).as_deref(), Some(&b"01234"[..]));
    }
}
