//! One tunnel session on the edge: reads the cloud's messages, starts a relay per CONNECT, feeds
//! DATA/REMOVE_CONNECT to the relays without ever waiting on one (upstream's reader blocks on a
//! full stream queue and stalls the whole tunnel), and pings. When the cloud granted a per-stream
//! window, each stream sends only what the window allows and `WINDOW` messages reopen it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use kubeedge_wire::tunnel::{
    ConnectRequest, FrameError, MessageType, QueueReceiver, QueueSender, StreamEnd, TunnelMessage,
    stream_queue,
};
use kubeedge_wire::ws::{Outgoing, Role, WsMessage, WsReader, write_loop};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::agent::Stats;
use super::config::AgentOptions;
use super::dial::Dialed;
use super::{exec, get};

/// What a relay needs from its session.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) options: AgentOptions,
    pub(crate) read: Duration,
    pub(crate) write: Duration,
    pub(crate) stats: Arc<Stats>,
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The local side finished or failed: tell the cloud.
    Local,
    /// The cloud sent REMOVE_CONNECT: nothing to tell.
    CloudRemoved,
    /// The tunnel is gone: nobody to tell.
    TunnelGone,
}

/// The sending side of one stream.
#[derive(Debug, Clone)]
pub(crate) struct Up {
    pub(crate) id: u64,
    out: mpsc::Sender<Outgoing>,
    /// With flow control: bytes the cloud lets this stream send now, and the whole window.
    credit: Option<(Arc<Semaphore>, usize)>,
    /// With flow control of what the cloud sends: the window it keeps each stream within.
    pub(crate) input_window: Option<usize>,
}

impl Up {
    /// Sends DATA; `Err` when the tunnel or the stream is gone. With flow control, first
    /// waits until the cloud's client has taken enough of what was sent before, so a slow
    /// client holds back only this stream (its local connection is simply read later).
    pub(crate) async fn data(&self, data: Bytes) -> Result<(), End> {
        if let Some((credit, window)) = &self.credit {
            // A piece larger than the window needs the whole window, not more.
            let need = data.len().min(*window).min(u32::MAX as usize) as u32;
            match credit.acquire_many(need).await {
                Ok(permit) => permit.forget(),
                // Closed when the cloud removed the stream or the tunnel ended.
                Err(_) => return Err(End::CloudRemoved),
            }
        }
        self.out
            .send(Outgoing::Tunnel(TunnelMessage::data(self.id, data)))
            .await
            .map_err(|_| End::TunnelGone)
    }

    /// Tells the cloud the local connection took `taken` more bytes of this stream, so it
    /// may send that many more; false when the tunnel queue had no room (keep the count).
    pub(crate) fn grant(&self, taken: usize) -> bool {
        self.out
            .try_send(Outgoing::Tunnel(TunnelMessage::window(
                self.id,
                taken as u64,
            )))
            .is_ok()
    }

    /// [`Up::grant`] that waits for room in the tunnel queue.
    pub(crate) async fn grant_wait(&self, taken: usize) -> Result<(), End> {
        self.out
            .send(Outgoing::Tunnel(TunnelMessage::window(
                self.id,
                taken as u64,
            )))
            .await
            .map_err(|_| End::TunnelGone)
    }
}

/// Maps a queue end to a relay end.
pub(crate) fn end_of(e: StreamEnd) -> End {
    match e {
        StreamEnd::Removed => End::CloudRemoved,
        // An overflow already sent REMOVE_CONNECT from the reader.
        StreamEnd::Overflow | StreamEnd::TunnelClosed(_) => End::TunnelGone,
    }
}

/// One stream's entry: its generation, its inbound queue and, with flow control, its
/// send credit (closed when the stream ends, so a relay waiting for credit wakes up).
#[derive(Debug)]
struct Entry {
    generation: u64,
    queue: QueueSender,
    credit: Option<Arc<Semaphore>>,
}

impl Entry {
    fn end(self, why: StreamEnd) {
        if let Some(c) = &self.credit {
            c.close();
        }
        self.queue.end(why);
    }
}

type Streams = Arc<Mutex<HashMap<u64, Entry>>>;

fn lock(s: &Streams) -> MutexGuard<'_, HashMap<u64, Entry>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves a dialed tunnel until it ends or `stop` fires; returns why it ended.
pub(crate) async fn serve(dialed: Dialed, ctx: Arc<Ctx>, stop: CancellationToken) -> String {
    let (rd, wr) = tokio::io::split(dialed.stream);
    let (out, rx) = mpsc::channel::<Outgoing>(1024);
    let writer = tokio::spawn(write_loop(wr, Role::Client, rx, ctx.write));
    let session = CancellationToken::new();
    tokio::spawn(ping(
        out.clone(),
        ctx.options.ping_interval,
        session.clone(),
    ));
    let window = dialed.window;
    let input_window = dialed
        .input_window
        .then_some(ctx.options.stream_queue_bytes);
    let mut reader = WsReader::new(rd, Role::Client, dialed.leftover);
    let streams: Streams = Arc::default();
    let generation = AtomicU64::new(0);
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
                if let Some(e) = lock(&streams).remove(&connect_id) {
                    e.end(StreamEnd::Overflow);
                }
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
                let g = generation.fetch_add(1, Ordering::Relaxed);
                let credit = window.map(|w| {
                    let w = w.min(Semaphore::MAX_PERMITS);
                    (Arc::new(Semaphore::new(w)), w)
                });
                let entry = Entry {
                    generation: g,
                    queue: tx,
                    credit: credit.as_ref().map(|(c, _)| c.clone()),
                };
                if let Some(old) = lock(&streams).insert(id, entry) {
                    // A live id reused by the cloud: the old stream yields to the new one.
                    old.end(StreamEnd::Removed);
                }
                let up = Up {
                    id,
                    out: out.clone(),
                    credit,
                    input_window,
                };
                tokio::spawn(run_stream(
                    kind,
                    msg.data,
                    g,
                    up,
                    qrx,
                    streams.clone(),
                    ctx.clone(),
                ));
            }
            MessageType::Data => {
                let refused = match lock(&streams).get(&id) {
                    Some(e) => e.queue.push(msg.data).is_err(),
                    None => false,
                };
                if refused {
                    warn!(
                        id,
                        "local connection fell behind its queue budget; ending the stream"
                    );
                    if let Some(e) = lock(&streams).remove(&id) {
                        e.end(StreamEnd::Overflow);
                    }
                    let _ = out.try_send(Outgoing::Tunnel(TunnelMessage::remove(id)));
                }
            }
            MessageType::RemoveConnect => {
                if let Some(e) = lock(&streams).remove(&id) {
                    e.end(StreamEnd::Removed);
                }
            }
            MessageType::Window => {
                let streams = lock(&streams);
                let credit = streams.get(&id).and_then(|e| e.credit.as_ref());
                if let (Some(credit), Some(grant), Some(window)) =
                    (credit, msg.window_grant(), window)
                {
                    // Never more than the whole window, whatever the cloud says.
                    let room = window
                        .min(Semaphore::MAX_PERMITS)
                        .saturating_sub(credit.available_permits());
                    credit.add_permits(usize::try_from(grant).unwrap_or(usize::MAX).min(room));
                }
            }
            other => warn!(id, kind = %other, "Wrong message type"),
        }
    };
    session.cancel();
    let ended: Arc<str> = Arc::from(reason.as_str());
    for (_, e) in lock(&streams).drain() {
        e.end(StreamEnd::TunnelClosed(ended.clone()));
    }
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
    streams: Streams,
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
    {
        let mut map = lock(&streams);
        if map.get(&id).is_some_and(|e| e.generation == generation) {
            map.remove(&id);
        }
    }
    if end == End::Local {
        let _ = up
            .out
            .send(Outgoing::Tunnel(TunnelMessage::remove(id)))
            .await;
    }
    ctx.stats.stream_ended();
    info!(id, %kind, ?end, "stream ended");
}
