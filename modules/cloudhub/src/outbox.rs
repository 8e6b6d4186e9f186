//! What a session actor and its socket driver share (same thread): the outbound frame queue
//! and its backlog, the closed flag, the wakers, the time of the last keepalive.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Poll, Waker};

use actix_http::ws::CloseCode;
use beehive::Message;
use bytes::{Bytes, BytesMut};
use kubeedge_wire::hub as wire;
use tokio::time::Instant;

use crate::metrics::NodeCounters;

/// Bytes the writer coalesces into one TLS write.
const WRITE_CHUNK: usize = 64 * 1024;
/// Outbound bytes (queued or being written) at which the connection stops taking more: the
/// session writes no further downstream messages and the reader handles no further frame (so
/// pongs and other replies cannot pile up) until the writer drains below it. A peer that
/// never reads is then cut off by the write deadline.
pub(crate) const BACKLOG_HIGH: usize = 1024 * 1024;
/// State shared by the session actor and the connection task (same thread).
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: RefCell<VecDeque<Bytes>>,
    /// Bytes queued or taken by the writer and not yet written.
    queued: Cell<usize>,
    closed: Cell<bool>,
    writer: RefCell<Option<Waker>>,
    reader: RefCell<Option<Waker>>,
    /// The reader waiting for the backlog to drain below [`BACKLOG_HIGH`].
    drained: RefCell<Option<Waker>>,
    /// The node's counters, for the backlog gauge (set by the session before any push).
    gauge: RefCell<Option<Arc<NodeCounters>>>,
    /// When the last keepalive arrived (only keepalives count, as in KubeEdge).
    pub(crate) last_keepalive: Cell<Instant>,
}

impl Outbox {
    pub(crate) fn new() -> Rc<Self> {
        Rc::new(Outbox {
            queue: RefCell::new(VecDeque::new()),
            queued: Cell::new(0),
            closed: Cell::new(false),
            writer: RefCell::new(None),
            reader: RefCell::new(None),
            drained: RefCell::new(None),
            gauge: RefCell::new(None),
            last_keepalive: Cell::new(Instant::now()),
        })
    }

    /// Reports this connection's backlog into `counters` (added to what the node's other
    /// connections report, so a replaced connection draining does not hide the new one).
    pub(crate) fn attach(&self, counters: Arc<NodeCounters>) {
        let queued = self.queued.get() as u64;
        counters.backlog.fetch_add(queued, Ordering::Relaxed);
        if let Some(old) = self.gauge.borrow_mut().replace(counters) {
            old.backlog.fetch_sub(queued, Ordering::Relaxed);
        }
    }

    /// Queues one encoded frame; ignored once closed.
    pub(crate) fn push(&self, frame: Bytes) {
        if self.closed.get() {
            return;
        }
        let queued = self.queued.get() + frame.len();
        self.queued.set(queued);
        if let Some(c) = &*self.gauge.borrow() {
            c.backlog.fetch_add(frame.len() as u64, Ordering::Relaxed);
            c.backlog_peak.fetch_max(queued as u64, Ordering::Relaxed);
        }
        self.queue.borrow_mut().push_back(frame);
        if let Some(w) = self.writer.borrow_mut().take() {
            w.wake();
        }
    }

    /// The writer finished writing `n` bytes taken with [`Outbox::next_chunk`].
    pub(crate) fn written(&self, n: usize) {
        let queued = self.queued.get().saturating_sub(n);
        self.queued.set(queued);
        if let Some(c) = &*self.gauge.borrow() {
            c.backlog.fetch_sub(n as u64, Ordering::Relaxed);
        }
        if queued < BACKLOG_HIGH
            && let Some(w) = self.drained.borrow_mut().take()
        {
            w.wake();
        }
    }

    /// Resolves `true` once the backlog is below [`BACKLOG_HIGH`], `false` once closed.
    pub(crate) async fn room(&self) -> bool {
        poll_fn(|cx| {
            if self.closed.get() {
                return Poll::Ready(false);
            }
            if self.queued.get() < BACKLOG_HIGH {
                return Poll::Ready(true);
            }
            *self.drained.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Queues `msg` as a server frame with its resource trimmed to the edge's view.
    pub(crate) fn push_message(&self, msg: &Message) {
        if kubeedge_api::trim_node(&msg.route.resource).len() == msg.route.resource.len() {
            self.push(wire::server_frame(msg));
        } else {
            self.push_owned(msg.clone());
        }
    }

    /// [`Outbox::push_message`] for a message the caller no longer needs: its resource is
    /// replaced by its trimmed form instead of the whole message being copied (the session's
    /// writes are copies already, one per write, taken from its delivery state).
    pub(crate) fn push_owned(&self, mut msg: Message) {
        let trimmed = kubeedge_api::trim_node(&msg.route.resource);
        if trimmed.len() != msg.route.resource.len() {
            msg.route.resource = trimmed.into();
        }
        self.push(wire::server_frame(&msg));
    }

    /// Bytes queued or being written (every reply counted).
    pub(crate) fn backlog(&self) -> usize {
        self.queued.get()
    }

    /// Stops accepting frames; the writer flushes what is queued, then the socket closes.
    pub(crate) fn close(&self) {
        self.closed.set(true);
        for w in [&self.writer, &self.reader, &self.drained] {
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

    /// The next bytes to write (frames coalesced), or `None` once closed and drained. They
    /// stay counted in the backlog until [`Outbox::written`].
    pub(crate) async fn next_chunk(&self) -> Option<Bytes> {
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
    pub(crate) async fn closed(&self) {
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

impl Drop for Outbox {
    fn drop(&mut self) {
        // What was never written leaves the node's gauge with the connection.
        if let Some(c) = self.gauge.get_mut().take() {
            c.backlog
                .fetch_sub(self.queued.get() as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_counts_frames_until_written_and_the_gauge_follows_it() {
        let counters = Arc::new(NodeCounters::default());
        let outbox = Outbox::new();
        outbox.attach(counters.clone());
        outbox.push(Bytes::from(vec![0u8; 300]));
        outbox.push(Bytes::from(vec![0u8; 200]));
        assert_eq!(outbox.backlog(), 500);
        let chunk = futures::executor::block_on(outbox.next_chunk()).unwrap();
        assert_eq!(chunk.len(), 500, "coalesced");
        assert_eq!(outbox.backlog(), 500, "still counted while being written");
        outbox.written(chunk.len());
        assert_eq!(outbox.backlog(), 0);
        outbox.push(Bytes::from(vec![0u8; 100]));
        let s = counters.snapshot();
        assert_eq!((s.backlog, s.backlog_peak), (100, 500));
        drop(outbox);
        assert_eq!(
            counters.snapshot().backlog,
            0,
            "released with the connection"
        );
    }
}
