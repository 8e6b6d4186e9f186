//! One edge node's tunnel: the streams open on it, the reader that dispatches what the edge
//! sends, and the queue toward the writer task.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::io::AsyncRead;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{SessionError, Shared};
use kubeedge_wire::tunnel::{
    Credit, FrameError, Inbound, MessageType, Pushed, QueueReceiver, StreamEnd, StreamTable,
    TunnelMessage, stream_queue,
};
use kubeedge_wire::ws::{Outgoing, WsMessage, WsReader};

/// A node's tunnel session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) node: String,
    pub(crate) ip: String,
    out: mpsc::Sender<Outgoing>,
    streams: StreamTable,
    /// Ids this session ended or answered with REMOVE_CONNECT, so late DATA for one of them
    /// gets at most one REMOVE_CONNECT.
    removed: Mutex<RecentIds>,
    /// The edge's send window per stream when it takes part in flow control (`WINDOW`
    /// messages); `None` for edges that do not (edgecore).
    window: Option<usize>,
    /// How many bytes of each stream the edge takes ahead of its local connection, when it
    /// reopens that window with `WINDOW` messages; `None` for edges that do not (edgecore).
    input_window: Option<usize>,
    closed: CancellationToken,
    reason: OnceLock<Arc<str>>,
    shared: Arc<Shared>,
    /// The notBefore (unix seconds) of the certificate the edge connected with, when known:
    /// a revocation of the node that covers it closes the session.
    issued: OnceLock<i64>,
    /// Its IP is the address the tunnel comes from (not only one its Node lists).
    peer_proven: std::sync::atomic::AtomicBool,
}

/// How many removed ids a session remembers: enough for the DATA still in flight when a
/// burst of streams ends, small enough not to matter per node.
const RECENT_IDS: usize = 1024;

/// A bounded set of recently removed stream ids; the oldest is forgotten first.
#[derive(Debug, Default)]
struct RecentIds {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl RecentIds {
    /// Remembers `id`; false when it was already known.
    fn insert(&mut self, id: u64) -> bool {
        if !self.set.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > RECENT_IDS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

impl Session {
    /// A session not yet registered; the caller counts it open once registered, and
    /// [`Session::close`] counts it closed. With `flow_control`, each stream's edge sends
    /// within a window of `stream_queue_bytes`, reopened by `WINDOW` messages as the API
    /// client takes the bytes. With `input_window`, each stream's DATA toward the edge stays
    /// within that many unacknowledged bytes, reopened by the edge's `WINDOW` messages.
    pub(crate) fn new(
        node: String,
        ip: String,
        out: mpsc::Sender<Outgoing>,
        shared: Arc<Shared>,
        flow_control: bool,
        input_window: Option<usize>,
    ) -> Arc<Self> {
        let window = flow_control.then_some(shared.tuning.stream_queue_bytes.max(1));
        let input_window = input_window
            .filter(|w| *w > 0)
            .map(|w| w.min(Semaphore::MAX_PERMITS));
        Arc::new(Session {
            node,
            ip,
            out,
            streams: StreamTable::new(),
            removed: Mutex::new(RecentIds::default()),
            window,
            input_window,
            closed: CancellationToken::new(),
            reason: OnceLock::new(),
            shared,
            issued: OnceLock::new(),
            peer_proven: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Marks the session's IP as the address its tunnel comes from.
    pub(crate) fn set_peer_proven(&self) {
        self.peer_proven.store(true, Ordering::Relaxed);
    }

    /// Whether the session's IP is the address its tunnel comes from.
    pub(crate) fn peer_proven(&self) -> bool {
        self.peer_proven.load(Ordering::Relaxed)
    }

    /// Records the notBefore of the certificate the edge connected with (once).
    pub(crate) fn set_issued(&self, not_before: i64) {
        let _ = self.issued.set(not_before);
    }

    /// The notBefore of the edge's certificate, when recorded.
    pub(crate) fn issued(&self) -> Option<i64> {
        self.issued.get().copied()
    }

    /// Remembers that stream `id` is over; false when it already was.
    fn forget(&self, id: u64) -> bool {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id)
    }

    /// The per-stream send window granted to the edge, if it takes part in flow control.
    pub(crate) fn window(&self) -> Option<usize> {
        self.window
    }

    /// The per-stream input window the edge granted, if it takes part in flow control of
    /// what the cloud sends it.
    pub(crate) fn input_window(&self) -> Option<usize> {
        self.input_window
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
        let credit = self.input_window.map(Credit::new);
        let limit = self.shared.tuning.max_streams_per_node;
        let admit = |open: usize| {
            if limit > 0 && open >= limit {
                Err(SessionError::TooManyStreams {
                    node: self.node.clone(),
                    limit,
                })
            } else {
                Ok(())
            }
        };
        match self.streams.insert(id, tx, credit.clone(), admit) {
            None => return Err(self.closed_error()),
            Some(Err(e)) => {
                self.shared.metrics.stream_refused_per_node();
                warn!(node = %self.node, limit, "node has its maximum of streams open; refusing another");
                return Err(e);
            }
            Some(Ok(_)) => {}
        }
        self.shared.metrics.stream_opened();
        let stream = ApiStream {
            id,
            session: self.clone(),
            rx,
            unacked: 0,
            credit,
        };
        let json = connect_json(id);
        debug!(node = %self.node, id, %kind, "open stream");
        self.send(TunnelMessage::new(id, kind, json)).await?;
        Ok(stream)
    }

    /// Closes the session once: every open stream ends with `TunnelClosed(reason)`, a Close
    /// frame (1001, going away) is queued, and later sends fail.
    pub(crate) fn close(&self, reason: &str) {
        self.close_with(reason, 1001);
    }

    /// [`Session::close`] with the Close frame's status `code`.
    fn close_with(&self, reason: &str, code: u16) {
        if self.reason.set(Arc::from(reason)).is_err() {
            return;
        }
        let reason: Arc<str> = self
            .reason
            .get()
            .cloned()
            .unwrap_or_else(|| Arc::from(reason));
        self.closed.cancel();
        let streams = self.streams.close(&StreamEnd::TunnelClosed(reason.clone()));
        info!(node = %self.node, ip = %self.ip, streams, %reason, "tunnel session closed");
        let _ = self
            .out
            .try_send(Outgoing::Close(code, "tunnel session closed"));
        self.shared.metrics.session_closed();
    }

    /// Ends stream `id` from this side: unregisters it and tells the edge, once.
    fn remove_stream(&self, id: u64, end: StreamEnd) {
        self.streams.end(id, end);
        if self.forget(id) {
            let _ = self
                .out
                .try_send(Outgoing::Tunnel(TunnelMessage::remove(id)));
        }
    }

    /// Handles one message from the edge. Never waits on a stream: DATA goes into that
    /// stream's bounded queue or ends that stream, so one slow API client cannot hold up the
    /// other streams of the node. True for DATA among a stream's first bytes
    /// ([`kubeedge_wire::tunnel::OPENING_BYTES`]): the caller lets that stream's relay run
    /// before it reads on, so they reach the API client without waiting for what arrived
    /// behind them.
    fn dispatch(&self, msg: TunnelMessage) -> bool {
        let id = msg.connect_id;
        match msg.kind {
            MessageType::Data => {
                self.shared.metrics.received_from_edge(msg.data.len());
                match self.streams.push(id, msg.data) {
                    Pushed::Queued { opening } => return opening,
                    // The edge still holds a connection for an id we no longer have (we ended
                    // it, or never had it): one REMOVE_CONNECT lets it close its side.
                    Pushed::Unknown => {
                        if self.forget(id) {
                            debug!(node = %self.node, id, "DATA for an unknown connection; removing it on the edge");
                            self.shared.metrics.remove_for_unknown();
                            let _ = self
                                .out
                                .try_send(Outgoing::Tunnel(TunnelMessage::remove(id)));
                        }
                    }
                    Pushed::Overflow => {
                        self.shared.metrics.stream_overflowed();
                        warn!(
                            node = %self.node,
                            id,
                            budget = self.shared.tuning.stream_queue_bytes,
                            flow_control = self.window.is_some(),
                            "stream's API client fell too far behind; ending the stream"
                        );
                        self.remove_stream(id, StreamEnd::Overflow);
                    }
                    // The relay is gone; its drop unregisters the stream and tells the edge.
                    Pushed::Gone => {}
                }
            }
            MessageType::RemoveConnect => {
                self.forget(id);
                if !self.streams.end(id, StreamEnd::Removed) {
                    debug!(node = %self.node, id, "REMOVE_CONNECT for an unknown connection")
                }
            }
            MessageType::Window if self.input_window.is_some() => {
                let Some(grant) = msg.window_grant() else {
                    warn!(node = %self.node, id, "malformed WINDOW from the edge; ignored");
                    return false;
                };
                self.streams.grant(id, grant);
            }
            other => {
                warn!(node = %self.node, id, kind = %other, "unexpected message from the edge; ignored")
            }
        }
        false
    }

    /// Ends one stream whose message could not be taken (too large), telling the edge.
    fn refuse(&self, id: u64) {
        self.remove_stream(
            id,
            StreamEnd::TunnelClosed(Arc::from("message over 1 MiB from the edge")),
        );
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
                    Ok(m) => {
                        if self.dispatch(m) {
                            tokio::task::yield_now().await;
                        }
                    }
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
                    // Answer with the edge's own code, as RFC 6455 asks of the endpoint
                    // that did not start the close.
                    let reason = format!("edge sent close ({})", code.unwrap_or(1005));
                    self.close_with(&reason, echo_code(code));
                    return;
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

/// The status to answer a Close frame with: the peer's code when it may be sent, else 1000
/// (no code, or one reserved for local use such as 1005/1006/1015).
fn echo_code(code: Option<u16>) -> u16 {
    code.filter(|c| matches!(c, 1000..=1003 | 1007..=1014 | 3000..=4999))
        .unwrap_or(1000)
}

/// One API connection's stream on a session. Dropping it unregisters the id and, unless the
/// edge ended it or the tunnel is gone, sends `REMOVE_CONNECT` exactly once.
/// With flow control, bytes taken count as granted back to the edge (`WINDOW`) once they
/// reach a quarter of the window, or before the stream waits with nothing queued.
#[derive(Debug)]
pub(crate) struct ApiStream {
    id: u64,
    session: Arc<Session>,
    rx: QueueReceiver,
    /// Bytes taken from the queue and not yet granted back to the edge.
    unacked: usize,
    /// With an input window: the credit DATA toward the edge draws on.
    credit: Option<Credit>,
}

impl ApiStream {
    /// The connect id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The next event from the edge. Cancel-safe: nothing is lost when the future is
    /// dropped before it resolves.
    pub(crate) async fn recv(&mut self) -> Inbound {
        if let Some(ev) = self.try_recv() {
            return ev;
        }
        // Nothing queued: the edge may be waiting for its window, so grant what was taken.
        if self.unacked > 0 {
            let grant = TunnelMessage::window(self.id, self.unacked as u64);
            if self.session.send(grant).await.is_ok() {
                self.unacked = 0;
            }
        }
        let ev = self.rx.recv().await;
        self.took(ev)
    }

    /// An event if one is queued now.
    pub(crate) fn try_recv(&mut self) -> Option<Inbound> {
        let ev = self.rx.try_recv()?;
        Some(self.took(ev))
    }

    fn took(&mut self, ev: Inbound) -> Inbound {
        if let (Some(window), Inbound::Data(d)) = (self.session.window, &ev) {
            self.unacked += d.len();
            if self.unacked >= window / 4 {
                let grant = TunnelMessage::window(self.id, self.unacked as u64);
                // A full tunnel queue keeps the grant for the next wait.
                if self.session.out.try_send(Outgoing::Tunnel(grant)).is_ok() {
                    self.unacked = 0;
                }
            }
        }
        ev
    }

    /// A handle that sends on this stream while another task receives.
    pub(crate) fn sender(&self) -> StreamSender {
        StreamSender {
            id: self.id,
            session: self.session.clone(),
            credit: self.credit.clone(),
        }
    }
}

/// The sending side of an [`ApiStream`].
#[derive(Debug, Clone)]
pub(crate) struct StreamSender {
    id: u64,
    session: Arc<Session>,
    credit: Option<Credit>,
}

impl StreamSender {
    /// Sends bytes to the edge as `DATA`, waiting for room in the tunnel queue. With an
    /// input window, first waits until the edge's local connection has taken enough of what
    /// was sent before, so a slow one holds back only this stream (and the API side is
    /// simply read later) instead of overrunning the edge's queue.
    pub(crate) async fn send(&self, data: Bytes) -> Result<(), SessionError> {
        let n = data.len();
        if let Some(credit) = &self.credit {
            // Closed when the stream ended or the tunnel closed.
            credit
                .take(n)
                .await
                .map_err(|_| self.session.closed_error())?;
        }
        self.session
            .send(TunnelMessage::data(self.id, data))
            .await?;
        self.session.shared.metrics.sent_to_edge(n);
        Ok(())
    }
}

impl Drop for ApiStream {
    fn drop(&mut self) {
        // The entry is gone when the edge removed the stream, the session closed, or the
        // stream was refused or overflowed (those sent REMOVE_CONNECT already).
        let registered = self.session.streams.unregister(self.id, None);
        let first = self.session.forget(self.id);
        self.session.shared.metrics.stream_closed();
        if !registered || !first || self.session.is_closed() {
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
