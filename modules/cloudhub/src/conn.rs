//! The socket side of one session: a reader that turns frames into routed messages and a
//! writer that drains the session's outbox under the write deadline. Both run in the
//! connection's task; the session actor only touches the shared [`Conn`].

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use actix::Addr;
use actix_http::ws::{CloseCode, OpCode};
use beehive::Message;
use bytes::{Bytes, BytesMut};
use futures::future::{Either, select};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::hub::Hub;
use crate::registry::NodeCounters;
use crate::session::{Acked, Session, Stop, StopReason};
use crate::upstream::{self, Upstream};
use crate::wire::{self, Incoming, Reassembler, WireError};

/// Bytes the writer coalesces into one TLS write.
const WRITE_CHUNK: usize = 64 * 1024;
/// Read buffer growth step (small: an idle edge only sends ~200-byte keepalives; larger
/// messages grow the buffer geometrically).
const READ_STEP: usize = 512;
/// An empty read buffer larger than this is released (after a large message).
const READ_KEEP: usize = 16 * 1024;

/// State shared by the session actor and the connection task (same thread).
#[derive(Debug)]
pub(crate) struct Conn {
    queue: RefCell<VecDeque<Bytes>>,
    queued: Cell<usize>,
    closed: Cell<bool>,
    writer: RefCell<Option<Waker>>,
    reader: RefCell<Option<Waker>>,
    /// When the last keepalive arrived (spec §2.3: only keepalives count).
    pub(crate) last_keepalive: Cell<Instant>,
}

impl Conn {
    pub(crate) fn new() -> Rc<Self> {
        Rc::new(Conn {
            queue: RefCell::new(VecDeque::new()),
            queued: Cell::new(0),
            closed: Cell::new(false),
            writer: RefCell::new(None),
            reader: RefCell::new(None),
            last_keepalive: Cell::new(Instant::now()),
        })
    }

    /// Queues one encoded frame; ignored once closed.
    pub(crate) fn push(&self, frame: Bytes) {
        if self.closed.get() {
            return;
        }
        self.queued.set(self.queued.get() + frame.len());
        self.queue.borrow_mut().push_back(frame);
        if let Some(w) = self.writer.borrow_mut().take() {
            w.wake();
        }
    }

    /// Queues `msg` as a server frame with its resource trimmed to the edge's view.
    pub(crate) fn push_message(&self, msg: &Message) {
        let trimmed = kubeedge_api::trim_node(&msg.route.resource);
        if trimmed.len() == msg.route.resource.len() {
            self.push(wire::server_frame(msg));
        } else {
            let mut wire_msg = msg.clone();
            wire_msg.route.resource = trimmed.to_owned();
            self.push(wire::server_frame(&wire_msg));
        }
    }

    /// Bytes queued and not yet taken by the writer.
    pub(crate) fn backlog(&self) -> usize {
        self.queued.get()
    }

    /// Stops accepting frames; the writer flushes what is queued, then the socket closes.
    pub(crate) fn close(&self) {
        self.closed.set(true);
        for w in [&self.writer, &self.reader] {
            if let Some(w) = w.borrow_mut().take() {
                w.wake();
            }
        }
    }

    /// Sends a close frame, then closes.
    pub(crate) fn close_with(&self, code: CloseCode, reason: &str) {
        self.push(wire::close_frame(code, reason, false));
        self.close();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// The next bytes to write (frames coalesced), or `None` once closed and drained.
    async fn next_chunk(&self) -> Option<Bytes> {
        poll_fn(|cx| {
            let mut q = self.queue.borrow_mut();
            if let Some(first) = q.pop_front() {
                let mut chunk = first;
                if q.front()
                    .is_some_and(|f| chunk.len() + f.len() <= WRITE_CHUNK)
                {
                    let mut buf = BytesMut::from(&chunk[..]);
                    while let Some(f) = q.front() {
                        if buf.len() + f.len() > WRITE_CHUNK {
                            break;
                        }
                        buf.extend_from_slice(f);
                        q.pop_front();
                    }
                    chunk = buf.freeze();
                }
                self.queued
                    .set(self.queued.get().saturating_sub(chunk.len()));
                return Poll::Ready(Some(chunk));
            }
            if self.closed.get() {
                return Poll::Ready(None);
            }
            *self.writer.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Resolves once the connection is closed from the session side.
    async fn closed(&self) {
        poll_fn(|cx| {
            if self.closed.get() {
                return Poll::Ready(());
            }
            *self.reader.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// Everything the connection task needs.
pub(crate) struct Link {
    pub(crate) hub: Arc<Hub>,
    pub(crate) node: Arc<str>,
    pub(crate) addr: Addr<Session>,
    pub(crate) conn: Rc<Conn>,
    pub(crate) counters: Arc<NodeCounters>,
}

/// Runs the connection until either side ends it; then tells the session.
pub(crate) async fn run<IO>(io: IO, read_buf: BytesMut, link: Link)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(io);
    let write_deadline = link.hub.config.write_deadline();
    let reader = std::pin::pin!(read_loop(&mut rd, read_buf, &link));
    let writer = std::pin::pin!(write_loop(&mut wr, &link.conn, write_deadline));
    let reason = match select(reader, writer).await {
        Either::Left((reason, writer)) => {
            // Let the writer flush what is queued (a close frame, a last message).
            link.conn.close();
            let _ = tokio::time::timeout(write_deadline, writer).await;
            reason
        }
        Either::Right((reason, _reader)) => reason,
    };
    debug!(node = %link.node, reason = %reason, "connection ended");
    let _ = link
        .addr
        .send(Stop(StopReason::ConnectionClosed(reason)))
        .await;
}

async fn write_loop<W: AsyncWrite + Unpin>(wr: &mut W, conn: &Conn, deadline: Duration) -> String {
    loop {
        let Some(chunk) = conn.next_chunk().await else {
            let _ = tokio::time::timeout(Duration::from_secs(1), wr.shutdown()).await;
            return "closed by the hub".into();
        };
        let write = async {
            wr.write_all(&chunk).await?;
            wr.flush().await
        };
        match tokio::time::timeout(deadline, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return format!("write failed: {e}"),
            Err(_) => return format!("write timed out after {deadline:?}"),
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(rd: &mut R, mut buf: BytesMut, link: &Link) -> String {
    let mut frames = Reassembler::server(link.hub.config.max_message_size);
    loop {
        loop {
            match frames.next(&mut buf) {
                Ok(Some(item)) => {
                    if let Some(end) = Box::pin(handle(item, link)).await {
                        return end;
                    }
                }
                Ok(None) => break,
                Err(e) => return refuse(link, &e),
            }
        }
        if link.conn.is_closed() {
            return "closed by the hub".into();
        }
        if buf.is_empty() && buf.capacity() > READ_KEEP {
            buf = BytesMut::new();
        }
        if buf.capacity() - buf.len() < READ_STEP / 4 {
            buf.reserve(READ_STEP.max(buf.len()));
        }
        let read = std::pin::pin!(rd.read_buf(&mut buf));
        let closed = std::pin::pin!(link.conn.closed());
        match select(read, closed).await {
            Either::Left((Ok(0), _)) => return "connection closed by the edge".into(),
            Either::Left((Ok(_), _)) => {}
            Either::Left((Err(e), _)) => return format!("read failed: {e}"),
            Either::Right(((), _)) => return "closed by the hub".into(),
        }
    }
}

/// Logs the violation, sends a close frame with the matching code and ends the reader.
fn refuse(link: &Link, e: &WireError) -> String {
    warn!(node = %link.node, error = %e, "closing connection: bad input from edge");
    link.conn.close_with(e.close_code(), &e.to_string());
    e.to_string()
}

/// Handles one complete frame; `Some(reason)` ends the connection.
async fn handle(item: Incoming, link: &Link) -> Option<String> {
    let payload = match item {
        Incoming::Data(payload) => payload,
        Incoming::Ping(data) => {
            link.conn.push(wire::frame(&data, OpCode::Pong, false));
            return None;
        }
        Incoming::Pong => return None,
        Incoming::Close => return Some("close frame from the edge".into()),
    };
    let msg = match wire::decode_json(&payload) {
        Ok(m) => m,
        Err(e) => return Some(refuse(link, &e)),
    };
    NodeCounters::add(&link.counters.received, 1);
    let hub = &link.hub;
    match upstream::route(&link.node, msg) {
        Upstream::Keepalive => link.conn.last_keepalive.set(Instant::now()),
        Upstream::Answer(reply) => link.conn.push_message(&reply),
        Upstream::VolumeReply(reply) => {
            hub.endpoint.send_resp(reply);
        }
        Upstream::Ack(resp) => {
            if hub.endpoint.is_waiting(&resp.header.parent_id) {
                hub.endpoint.send_resp(resp.clone());
            }
            // Ordered with the session's other work; waits only when its mailbox is full.
            // (Boxed here and below: an idle connection should not carry the largest future.)
            if let Err(actix::dev::SendError::Full(msg)) = link.addr.try_send(Acked(resp)) {
                let _ = Box::pin(link.addr.send(msg)).await;
            }
        }
        Upstream::EdgeError(msg) => {
            info!(node = %link.node, msg = %msg, content = ?msg.content, "edge reported an error")
        }
        Upstream::ToModule(module, msg) => {
            Box::pin(forward(link, msg, Target::Module(module))).await
        }
        Upstream::ToGroup(group, msg) => Box::pin(forward(link, msg, Target::Group(group))).await,
        Upstream::CaQuery(query) => {
            let answer = upstream::ca_answer(&link.node, &query, &hub.kube_ca_pem());
            link.conn.push_message(&answer);
        }
        Upstream::Drop(reason) => debug!(node = %link.node, reason, "upstream message dropped"),
    }
    None
}

enum Target {
    Module(&'static str),
    Group(&'static str),
}

/// Sends upstream with back-pressure. A `query` nobody can take gets an `error` reply at once
/// (spec §9.17) instead of leaving the edge waiting 60 s.
async fn forward(link: &Link, msg: Message, target: Target) {
    let is_query = msg.route.operation == beehive::constants::operation::QUERY;
    let id = msg.header.id.clone();
    let resource = msg.route.resource.clone();
    let result = match target {
        Target::Module(m) => link.hub.endpoint.send(m, msg).await.map(|_| ()),
        Target::Group(g) => link.hub.endpoint.send_to_group(g, msg).await.map(|_| ()),
    };
    if let Err(e) = result {
        link.hub
            .counters
            .upstream_unroutable
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        debug!(node = %link.node, error = %e, "upstream message not deliverable");
        if is_query {
            let mut err = Message::with_parent(id).with_route(
                kubeedge_api::names::CLOUDHUB,
                kubeedge_api::names::GROUP_RESOURCE,
                resource,
                beehive::constants::operation::RESPONSE_ERROR,
            );
            err.content = beehive::Content::string(format!("cloud cannot serve this request: {e}"));
            link.conn.push_message(&err);
        }
    }
}
