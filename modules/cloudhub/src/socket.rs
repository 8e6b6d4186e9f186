//! The socket driver of one session: a reader that turns frames into routed messages and a
//! writer that drains the session's outbox under the write deadline. Both run in the
//! connection's task; the session actor only touches the shared [`Outbox`].

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_http::ws::OpCode;
use beehive::Message;
use bytes::BytesMut;
use futures::future::{Either, select};
use kubeedge_wire::hub::{self as wire, Incoming, Reassembler, WireError, cut};
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::messages::{Acked, SessionAddr, Stop, StopReason};
use crate::metrics::{DropReason, NodeCounters};
use crate::outbox::{BACKLOG_HIGH, Outbox};
use crate::state::Hub;
use crate::sync_answers::Claim;
use crate::throttle::Throttle;
use crate::upstream::{self, Upstream};

/// The per-thread buffer every connection of a thread reads into; what a read returns is
/// copied into the connection's own buffer, which is released whenever it is empty. An idle
/// connection thus holds no read buffer (an edge sends a ~200-byte keepalive every 15 s).
/// 16 KiB: one TLS record's plaintext at most.
const READ_SCRATCH: usize = 16 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; READ_SCRATCH].into_boxed_slice());
}

/// Reads what `rd` has into `buf` through the thread's scratch buffer; the bytes read.
async fn read_some<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> std::io::Result<usize> {
    poll_fn(|cx| {
        SCRATCH.with_borrow_mut(|scratch| {
            let mut read = ReadBuf::new(scratch);
            match Pin::new(&mut *rd).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    buf.extend_from_slice(read.filled());
                    Poll::Ready(Ok(read.filled().len()))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
    })
    .await
}
/// At most one `error` report from an edge is logged per connection in this period.
const EDGE_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);
/// Bytes of an edge error's content (and of each route field) that are logged.
const EDGE_ERROR_EXCERPT: usize = 256;

/// Everything the connection task needs.
pub(crate) struct Link {
    pub(crate) hub: Arc<Hub>,
    pub(crate) node: Arc<str>,
    pub(crate) session: Arc<SessionAddr>,
    pub(crate) outbox: Rc<Outbox>,
    /// The node's counters: they outlive connections and add up over reconnections.
    pub(crate) counters: Arc<NodeCounters>,
}

/// Runs the connection until either side ends it; then tells the session.
pub(crate) fn run<IO>(io: IO, read_buf: BytesMut, link: Link) -> impl Future<Output = ()>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    // Split before the future is made: an async fn keeps room for its arguments as long as
    // it lives, and the TLS stream (over a kilobyte) would then be held twice per edge.
    let (rd, wr) = tokio::io::split(io);
    drive(rd, wr, read_buf, link)
}

async fn drive<R, W>(mut rd: R, mut wr: W, read_buf: BytesMut, link: Link)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let _running = TaskGauge::enter(&link.hub.metrics.connection_tasks);
    let write_deadline = link.hub.config.write_deadline();
    let reader = std::pin::pin!(read_loop(&mut rd, read_buf, &link));
    let writer = std::pin::pin!(write_loop(&mut wr, &link, write_deadline));
    let reason = match select(reader, writer).await {
        Either::Left((reason, writer)) => {
            // Let the writer flush what is queued (a close frame, a last message).
            link.outbox.close();
            let _ = tokio::time::timeout(write_deadline, writer).await;
            reason
        }
        Either::Right((reason, _reader)) => reason,
    };
    debug!(node = %link.node, reason = %reason, "connection ended");
    let _ = link
        .session
        .stop
        .send(Stop(StopReason::ConnectionClosed(reason)))
        .await;
}

/// Counts a running task in a gauge for as long as it lives (however it ends).
struct TaskGauge<'a>(&'a Gauge);

impl<'a> TaskGauge<'a> {
    fn enter(gauge: &'a Gauge) -> Self {
        gauge.inc();
        TaskGauge(gauge)
    }
}

impl Drop for TaskGauge<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Writes what the session and the reader queue. A write that makes no progress for
/// `deadline` (`writeTimeout`) ends the connection: the peer is not reading.
async fn write_loop<W: AsyncWrite + Unpin>(wr: &mut W, link: &Link, deadline: Duration) -> String {
    let conn = &link.outbox;
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
            Ok(Ok(())) => conn.written(chunk.len()),
            Ok(Err(e)) => return format!("write failed: {e}"),
            Err(_) => {
                warn!(
                    node = %link.node,
                    backlog_bytes = conn.backlog(),
                    write_timeout_s = deadline.as_secs(),
                    "edge is not reading: write timed out, closing connection"
                );
                return format!("write timed out after {deadline:?}");
            }
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(rd: &mut R, mut buf: BytesMut, link: &Link) -> String {
    let mut frames = Reassembler::server(link.hub.config.max_message_size);
    let mut errors = Throttle::new(EDGE_ERROR_LOG_EVERY);
    loop {
        loop {
            // Back-pressure, checked before every frame (a large read buffer can hold many
            // small pings): each frame may queue a reply, so the backlog stays below the limit
            // plus one reply.
            if link.outbox.backlog() >= BACKLOG_HIGH {
                debug!(node = %link.node, backlog_bytes = link.outbox.backlog(), "outbound backlog over its limit: reading paused");
                if !link.outbox.room().await {
                    return "closed by the hub".into();
                }
            }
            match frames.next(&mut buf) {
                Ok(Some(item)) => {
                    if let Some(end) = Box::pin(handle(item, link, &mut errors)).await {
                        return end;
                    }
                }
                Ok(None) => break,
                Err(e) => return refuse(link, &e),
            }
        }
        if link.outbox.is_closed() {
            return "closed by the hub".into();
        }
        if buf.is_empty() {
            buf = BytesMut::new();
        }
        let read = std::pin::pin!(read_some(rd, &mut buf));
        let closed = std::pin::pin!(link.outbox.closed());
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
    link.hub
        .count_drop(Some(&link.counters), DropReason::Malformed, 1);
    warn!(node = %link.node, error = %e, "closing connection: bad input from edge");
    link.outbox.close_with(e.close_code(), &e.to_string());
    e.to_string()
}

/// Whether `reply` answers a synchronous request that was sent to this link's node (which
/// then takes it); an answer to another node's request is logged and goes nowhere.
fn answers(link: &Link, reply: &Message) -> bool {
    match link
        .hub
        .sync_answers
        .claim(&reply.header.parent_id, &link.node)
    {
        Claim::Mine => true,
        Claim::Unknown => false,
        Claim::OtherNode(to) => {
            warn!(node = %link.node, request_node = %to, parent = %reply.header.parent_id, "answer to another node's request dropped");
            false
        }
    }
}

/// Handles one complete frame; `Some(reason)` ends the connection.
async fn handle(item: Incoming, link: &Link, errors: &mut Throttle) -> Option<String> {
    let payload = match item {
        Incoming::Data(payload) => payload,
        Incoming::Ping(data) => {
            link.outbox.push(wire::frame(&data, OpCode::Pong, false));
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
        Upstream::Keepalive => link.outbox.last_keepalive.set(Instant::now()),
        Upstream::Answer(reply) => link.outbox.push_message(&reply),
        Upstream::VolumeReply(reply) => {
            let delivered = answers(link, &reply)
                && matches!(hub.edge.send_resp(reply), beehive::RespOutcome::Delivered);
            if !delivered {
                hub.count_drop(Some(&link.counters), DropReason::Unroutable, 1);
            }
        }
        Upstream::Ack(resp) => {
            if answers(link, &resp) {
                hub.edge.send_resp(resp.clone());
            }
            // Ordered with the session's other work; waits only when its mailbox is full.
            // (Boxed here and below: an idle connection should not carry the largest future.)
            if let Err(actix::dev::SendError::Full(msg)) = link.session.acked.try_send(Acked(resp))
            {
                let _ = Box::pin(link.session.acked.send(msg)).await;
            }
        }
        Upstream::EdgeError(msg) => log_edge_error(link, &msg, errors),
        Upstream::ToModule(module, msg) => {
            Box::pin(forward(link, msg, Target::Module(module))).await
        }
        Upstream::ToGroup(group, msg) => Box::pin(forward(link, msg, Target::Group(group))).await,
        Upstream::CaQuery(query) => {
            let answer = upstream::ca_answer(&link.node, &query, &hub.kube_ca_pem());
            link.outbox.push_message(&answer);
        }
        Upstream::Drop(reason) => {
            hub.count_drop(Some(&link.counters), DropReason::Refused, 1);
            warn!(node = %link.node, reason, "upstream message dropped");
        }
        Upstream::Ignore(reason) => debug!(node = %link.node, reason, "upstream message ignored"),
    }
    None
}

/// Logs an `error` report from the edge: the edge controls its size and rate, so only an
/// excerpt of each field is logged, and at most one report per connection and period.
fn log_edge_error(link: &Link, msg: &Message, errors: &mut Throttle) {
    let Some(suppressed) = errors.allow(Instant::now()) else {
        return;
    };
    let content = msg.content.as_json();
    warn!(
        node = %link.node,
        msg_id = cut(&msg.header.id.as_str(), 64),
        parent_id = cut(&msg.header.parent_id.as_str(), 64),
        source = cut(&msg.route.source, 64),
        resource = cut(&msg.route.resource, EDGE_ERROR_EXCERPT),
        content = cut(content, EDGE_ERROR_EXCERPT),
        content_bytes = content.len(),
        suppressed,
        "edge reported an error"
    );
}

enum Target {
    Module(&'static str),
    Group(&'static str),
}

/// Sends upstream with back-pressure. A `query` nobody can take gets an `error` reply at once
/// (the edge's meta manager handles it) instead of leaving the edge waiting out its 60 s
/// remote-query timeout, as KubeEdge's silent drop does.
async fn forward(link: &Link, msg: Message, target: Target) {
    let is_query = msg.route.operation == beehive::constants::operation::QUERY;
    let id = msg.header.id.clone();
    let resource = msg.route.resource.clone();
    let result = match target {
        Target::Module(m) => link.hub.edge.send(m, msg).await.map(|_| ()),
        Target::Group(g) => link.hub.edge.send_to_group(g, msg).await.map(|_| ()),
    };
    if let Err(e) = result {
        link.hub.metrics.upstream_unroutable.inc();
        link.hub
            .count_drop(Some(&link.counters), DropReason::Unroutable, 1);
        debug!(node = %link.node, error = %e, "upstream message not deliverable");
        if is_query {
            let mut err = Message::with_parent(id).with_route(
                kubeedge_api::names::CLOUDHUB,
                kubeedge_api::names::GROUP_RESOURCE,
                resource,
                beehive::constants::operation::RESPONSE_ERROR,
            );
            err.content = beehive::Content::string(format!("cloud cannot serve this request: {e}"));
            link.outbox.push_message(&err);
        }
    }
}
