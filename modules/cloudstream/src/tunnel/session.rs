//! One edge node's tunnel: the streams open on it, the reader that dispatches what the edge
//! sends, and the queue toward the writer task.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{SessionError, Shared};
use crate::frame::{FrameError, MessageType, TunnelMessage};
use crate::queue::{Inbound, QueueReceiver, QueueSender, StreamEnd, stream_queue};
use crate::ws::{Outgoing, WsMessage, WsReader};

/// A node's tunnel session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) node: String,
    pub(crate) ip: String,
    out: mpsc::Sender<Outgoing>,
    streams: Mutex<HashMap<u64, QueueSender>>,
    closed: CancellationToken,
    reason: OnceLock<Arc<str>>,
    shared: Arc<Shared>,
}

impl Session {
    /// A session not yet registered; the caller counts it open once registered, and
    /// [`Session::close`] counts it closed.
    pub(crate) fn new(
        node: String,
        ip: String,
        out: mpsc::Sender<Outgoing>,
        shared: Arc<Shared>,
    ) -> Arc<Self> {
        Arc::new(Session {
            node,
            ip,
            out,
            streams: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            reason: OnceLock::new(),
            shared,
        })
    }

    fn streams(&self) -> MutexGuard<'_, HashMap<u64, QueueSender>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn closed_error(&self) -> SessionError {
        SessionError::Closed {
            node: self.node.clone(),
            reason: self
                .reason
                .get()
                .cloned()
                .unwrap_or_else(|| Arc::from("closed")),
        }
    }

    /// True once [`Session::close`] ran.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves when the session closes.
    pub(crate) async fn wait_closed(&self) {
        self.closed.cancelled().await
    }

    /// Queues a message toward the edge, waiting for room; fails once the session closed.
    pub(crate) async fn send(&self, msg: TunnelMessage) -> Result<(), SessionError> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        tokio::select! {
            r = self.out.send(Outgoing::Tunnel(msg)) => r.map_err(|_| self.closed_error()),
            _ = self.closed.cancelled() => Err(self.closed_error()),
        }
    }

    /// Opens a stream: allocates a connect id, registers it, then sends the `*_CONNECT`
    /// message whose JSON `connect_json` builds for that id (its `MessID` must be the id).
    pub(crate) async fn open(
        self: &Arc<Self>,
        kind: MessageType,
        connect_json: impl FnOnce(u64) -> String,
    ) -> Result<ApiStream, SessionError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = stream_queue(self.shared.tuning.stream_queue_bytes);
        {
            let mut streams = self.streams();
            if self.is_closed() {
                return Err(self.closed_error());
            }
            streams.insert(id, tx);
        }
        self.shared.counters.stream_opened();
        let stream = ApiStream {
            id,
            session: self.clone(),
            rx,
        };
        let json = connect_json(id);
        debug!(node = %self.node, id, %kind, "open stream");
        self.send(TunnelMessage::new(id, kind, json)).await?;
        Ok(stream)
    }

    /// Closes the session once: every open stream ends with `TunnelClosed(reason)`, a Close
    /// frame is queued, and later sends fail.
    pub(crate) fn close(&self, reason: &str) {
        if self.reason.set(Arc::from(reason)).is_err() {
            return;
        }
        let reason: Arc<str> = self
            .reason
            .get()
            .cloned()
            .unwrap_or_else(|| Arc::from(reason));
        let streams: Vec<QueueSender> = {
            let mut map = self.streams();
            self.closed.cancel();
            map.drain().map(|(_, s)| s).collect()
        };
        info!(node = %self.node, ip = %self.ip, streams = streams.len(), %reason, "tunnel session closed");
        for s in streams {
            s.end(StreamEnd::TunnelClosed(reason.clone()));
        }
        let _ = self
            .out
            .try_send(Outgoing::Close(1001, "tunnel session closed"));
        self.shared.counters.session_closed();
    }

    /// Handles one message from the edge. DATA for a stream whose client is behind waits
    /// (paced) until it catches up or stalls.
    async fn dispatch(&self, msg: TunnelMessage) {
        match msg.kind {
            MessageType::Data => {
                self.shared.counters.received_from_edge(msg.data.len());
                let Some(stream) = self.streams().get(&msg.connect_id).cloned() else {
                    debug!(node = %self.node, id = msg.connect_id, "DATA for an unknown connection");
                    return;
                };
                let stall = self.shared.tuning.stream_stall_timeout;
                let pushed = tokio::select! {
                    r = stream.push_paced(msg.data, stall) => r,
                    _ = self.closed.cancelled() => return,
                };
                if pushed.is_err() {
                    warn!(node = %self.node, id = msg.connect_id, "stream client stalled past its queue budget; ending it");
                    self.streams().remove(&msg.connect_id);
                    let _ = self
                        .out
                        .try_send(Outgoing::Tunnel(TunnelMessage::remove(msg.connect_id)));
                }
            }
            MessageType::RemoveConnect => match self.streams().remove(&msg.connect_id) {
                Some(s) => s.end(StreamEnd::Removed),
                None => {
                    debug!(node = %self.node, id = msg.connect_id, "REMOVE_CONNECT for an unknown connection")
                }
            },
            other => {
                warn!(node = %self.node, id = msg.connect_id, kind = %other, "unexpected message from the edge; ignored")
            }
        }
    }

    /// Ends one stream whose message could not be taken (too large), telling the edge.
    fn refuse(&self, id: u64) {
        if let Some(s) = self.streams().remove(&id) {
            s.end(StreamEnd::TunnelClosed(Arc::from(
                "message over 1 MiB from the edge",
            )));
        }
        let _ = self
            .out
            .try_send(Outgoing::Tunnel(TunnelMessage::remove(id)));
    }

    /// Reads the edge's messages until the tunnel ends, then closes the session. Silence for
    /// the pong timeout ends it too (we ping; the edge answers).
    pub(crate) async fn serve<R: AsyncRead + Unpin>(self: Arc<Self>, mut reader: WsReader<R>) {
        let limit = self.shared.tuning.pong_timeout;
        let reason: String = loop {
            let next = tokio::select! {
                _ = self.closed.cancelled() => return,
                r = reader.next_within(limit) => r,
            };
            match next {
                Ok(Some(WsMessage::Text(payload))) => match TunnelMessage::decode(payload) {
                    Ok(m) => self.dispatch(m).await,
                    Err(FrameError::TooLarge {
                        connect_id, len, ..
                    }) => {
                        warn!(node = %self.node, id = connect_id, len, "tunnel message over 1 MiB; ending its stream");
                        self.refuse(connect_id);
                    }
                    Err(e) => break format!("malformed tunnel message: {e}"),
                },
                // Parity: upstream ends the session on any non-Text data message.
                Ok(Some(WsMessage::Binary(_))) => break "binary message from the edge".into(),
                Ok(Some(WsMessage::Ping(p))) => {
                    let _ = self.out.try_send(Outgoing::Pong(p));
                }
                Ok(Some(WsMessage::Pong(_))) => {}
                Ok(Some(WsMessage::Close(code, _))) => {
                    break format!("edge sent close ({})", code.unwrap_or(1005));
                }
                Ok(None) => break "edge closed the connection".into(),
                Err(e) => break e.to_string(),
            }
        };
        self.close(&reason);
    }

    /// Pings every `ping_interval` until the session closes.
    pub(crate) async fn keepalive(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.shared.tuning.ping_interval);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = self.closed.cancelled() => return,
                _ = tick.tick() => {
                    if self.out.try_send(Outgoing::Ping(Bytes::from_static(b"cloudstream"))).is_err() {
                        debug!(node = %self.node, "tunnel queue full; ping skipped");
                    }
                }
            }
        }
    }
}

/// One API connection's stream on a session. Dropping it unregisters the id and, unless the
/// edge ended it or the tunnel is gone, sends `REMOVE_CONNECT` exactly once.
#[derive(Debug)]
pub(crate) struct ApiStream {
    id: u64,
    session: Arc<Session>,
    rx: QueueReceiver,
}

impl ApiStream {
    /// The connect id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The next event from the edge.
    pub(crate) async fn recv(&mut self) -> Inbound {
        self.rx.recv().await
    }

    /// An event if one is queued now.
    pub(crate) fn try_recv(&mut self) -> Option<Inbound> {
        self.rx.try_recv()
    }

    /// A handle that sends on this stream while another task receives.
    pub(crate) fn sender(&self) -> StreamSender {
        StreamSender {
            id: self.id,
            session: self.session.clone(),
        }
    }
}

/// The sending side of an [`ApiStream`].
#[derive(Debug, Clone)]
pub(crate) struct StreamSender {
    id: u64,
    session: Arc<Session>,
}

impl StreamSender {
    /// Sends bytes to the edge as `DATA`, waiting for room in the tunnel queue.
    pub(crate) async fn send(&self, data: Bytes) -> Result<(), SessionError> {
        let n = data.len();
        self.session
            .send(TunnelMessage::data(self.id, data))
            .await?;
        self.session.shared.counters.sent_to_edge(n);
        Ok(())
    }
}

impl Drop for ApiStream {
    fn drop(&mut self) {
        // The entry is gone when the edge removed the stream, the session closed, or the
        // stream was refused or overflowed (those sent REMOVE_CONNECT already).
        let registered = self.session.streams().remove(&self.id).is_some();
        self.session.shared.counters.stream_closed();
        if !registered || self.session.is_closed() {
            return;
        }
        let msg = Outgoing::Tunnel(TunnelMessage::remove(self.id));
        if let Err(mpsc::error::TrySendError::Full(msg)) = self.session.out.try_send(msg) {
            let out = self.session.out.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = out.send(msg).await;
                });
            }
        }
    }
}
