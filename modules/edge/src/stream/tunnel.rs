//! One tunnel session on the edge: reads the cloud's messages, starts a relay per CONNECT, feeds
//! DATA/REMOVE_CONNECT to the relays without ever waiting on one (upstream's reader blocks on a
//! full stream queue and stalls the whole tunnel), and pings. When the cloud granted a per-stream
//! window, each stream sends only what the window allows and `WINDOW` messages reopen it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kubeedge_wire::tunnel::{
    ConnectRequest, Credit, FrameError, MessageType, Pushed, QueueReceiver, StreamEnd, StreamTable,
    TunnelMessage, stream_queue,
};
use kubeedge_wire::ws::{Outgoing, Role, WsMessage, WsReader, write_loop};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::dial::Dialed;
use super::link::{Ctx, End, Up};
use super::{exec, get};

/// Serves a dialed tunnel until it ends or `stop` fires; returns why it ended.
pub(crate) async fn serve(dialed: Dialed, ctx: Arc<Ctx>, stop: CancellationToken) -> String {
    let (rd, wr) = tokio::io::split(dialed.stream);
    let (out, rx) = mpsc::channel::<Outgoing>(1024);
    let writer = ctx.tasks.spawn(write_loop(wr, Role::Client, rx, ctx.write));
    let session = CancellationToken::new();
    ctx.tasks.spawn(ping(
        out.clone(),
        ctx.options.ping_interval,
        session.clone(),
    ));
    let window = dialed.window;
    let input_window = dialed
        .input_window
        .then_some(ctx.options.stream_queue_bytes);
    let mut reader = WsReader::new(rd, Role::Client, dialed.leftover);
    let streams = Arc::new(StreamTable::new());
    let reason: String = loop {
        let next = tokio::select! {
            _ = stop.cancelled() => break "agent stopping".into(),
            r = reader.next_within(ctx.read) => r,
        };
        let payload = match next {
            // The Go edge ignores the opcode; so do we.
            Ok(Some(WsMessage::Text(p) | WsMessage::Binary(p))) => p,
            Ok(Some(WsMessage::Ping(p))) => {
                let _ = out.try_send(Outgoing::Pong(p));
                continue;
            }
            Ok(Some(WsMessage::Pong(_))) => continue,
            Ok(Some(WsMessage::Close(code, _))) => {
                break format!("cloud sent close ({})", code.unwrap_or(1005));
            }
            Ok(None) => break "cloud closed the connection".into(),
            Err(e) => break e.to_string(),
        };
        let msg = match TunnelMessage::decode(payload) {
            Ok(m) => m,
            Err(FrameError::TooLarge { connect_id, .. }) => {
                warn!(
                    id = connect_id,
                    "tunnel message over 1 MiB; ending its stream"
                );
                streams.end(connect_id, StreamEnd::Overflow);
                let _ = out.try_send(Outgoing::Tunnel(TunnelMessage::remove(connect_id)));
                continue;
            }
            Err(e) => break format!("malformed tunnel message: {e}"),
        };
        let id = msg.connect_id;
        match msg.kind {
            MessageType::CloseConnect => {
                break format!(
                    "close tunnel stream connection, error:{}",
                    String::from_utf8_lossy(&msg.data)
                );
            }
            kind if kind.is_connect() => {
                let (tx, qrx) = stream_queue(ctx.options.stream_queue_bytes);
                let credit = window.map(Credit::new);
                // A live id reused by the cloud: the old stream yields to the new one.
                let Some(Ok(g)) = streams.insert(id, tx, credit.clone(), |_| Ok::<_, ()>(()))
                else {
                    // Only closed below, after this loop.
                    continue;
                };
                let up = Up {
                    id,
                    out: out.clone(),
                    credit,
                    input_window,
                };
                ctx.tasks.spawn(run_stream(
                    kind,
                    msg.data,
                    g,
                    up,
                    qrx,
                    streams.clone(),
                    ctx.clone(),
                ));
            }
            MessageType::Data => match streams.push(id, msg.data) {
                Pushed::Queued { .. } | Pushed::Unknown => {}
                Pushed::Overflow | Pushed::Gone => {
                    warn!(
                        id,
                        "local connection fell behind its queue budget; ending the stream"
                    );
                    streams.end(id, StreamEnd::Overflow);
                    let _ = out.try_send(Outgoing::Tunnel(TunnelMessage::remove(id)));
                }
            },
            MessageType::RemoveConnect => {
                streams.end(id, StreamEnd::Removed);
            }
            // Never more than the whole window, whatever the cloud says.
            MessageType::Window => {
                if let Some(grant) = msg.window_grant() {
                    streams.grant(id, grant);
                }
            }
            other => warn!(id, kind = %other, "Wrong message type"),
        }
    };
    session.cancel();
    streams.close(&StreamEnd::TunnelClosed(Arc::from(reason.as_str())));
    let _ = out.try_send(Outgoing::Close(1000, "edge stream closing"));
    drop(out);
    let abort = writer.abort_handle();
    if tokio::time::timeout(ctx.write, writer).await.is_err() {
        abort.abort();
    }
    reason
}

async fn ping(out: mpsc::Sender<Outgoing>, every: Duration, session: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = session.cancelled() => return,
            _ = tick.tick() => {
                if out.try_send(Outgoing::Ping(Bytes::from_static(b"ping you"))).is_err() {
                    debug!("tunnel queue full; ping skipped");
                }
            }
        }
    }
}

/// Runs one stream's relay, then unregisters it and, when the end was local, sends
/// REMOVE_CONNECT once (always, unlike upstream: bad JSON and dial failures included, so
/// the cloud's request never hangs).
async fn run_stream(
    kind: MessageType,
    json: Bytes,
    generation: u64,
    up: Up,
    rx: QueueReceiver,
    streams: Arc<StreamTable>,
    ctx: Arc<Ctx>,
) {
    ctx.stats.stream_started();
    let id = up.id;
    let end = match ConnectRequest::from_json(&json) {
        Err(e) => {
            warn!(id, %kind, error = %e, "bad CONNECT JSON; removing the stream");
            End::Local
        }
        Ok(req) => {
            if req.mess_id != id {
                debug!(
                    id,
                    mess_id = req.mess_id,
                    "MessID differs from the frame id; answering with the frame id"
                );
            }
            debug!(id, %kind, url = %req.url.to_go_string(), "stream");
            match kind {
                MessageType::LogsConnect => get::relay(&req, up.clone(), rx, &ctx, false).await,
                MessageType::MetricConnect => get::relay(&req, up.clone(), rx, &ctx, true).await,
                _ => exec::relay(&req, up.clone(), rx, &ctx).await,
            }
        }
    };
    streams.unregister(id, Some(generation));
    if end == End::Local {
        let _ = up
            .out
            .send(Outgoing::Tunnel(TunnelMessage::remove(id)))
            .await;
    }
    ctx.stats.stream_ended();
    info!(id, %kind, ?end, "stream ended");
}
