//! The per-stream inbound queue both ends use. A byte budget bounds its memory; over budget,
//! [`QueueSender::push`] ends that stream at once and never waits, so one slow consumer
//! never stalls the tunnel reader that feeds every stream of its node.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

/// Why a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// The peer sent `REMOVE_CONNECT`: a normal end.
    Removed,
    /// The tunnel carrying the stream closed (the reason says why): an error.
    TunnelClosed(Arc<str>),
    /// More than the budget was queued toward a consumer that did not keep up: an error.
    Overflow,
}

/// One event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// Bytes from the peer, in order.
    Data(Bytes),
    /// The stream is over; nothing follows.
    End(StreamEnd),
}

/// Why [`QueueSender::push`] refused data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The budget is spent; the stream has been ended with [`StreamEnd::Overflow`].
    #[error("stream queue over its byte budget")]
    Overflow,
    /// The consumer is gone.
    #[error("stream consumer is gone")]
    Gone,
}

/// The producer half (held by the tunnel reader).
#[derive(Debug, Clone)]
pub struct QueueSender {
    tx: mpsc::UnboundedSender<Inbound>,
    queued: Arc<AtomicUsize>,
    budget: usize,
}

/// The consumer half (held by the stream's relay).
#[derive(Debug)]
pub struct QueueReceiver {
    rx: mpsc::UnboundedReceiver<Inbound>,
    queued: Arc<AtomicUsize>,
}

/// A queue that holds at most `budget` bytes of undelivered data.
pub fn stream_queue(budget: usize) -> (QueueSender, QueueReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        QueueSender {
            tx,
            queued: queued.clone(),
            budget,
        },
        QueueReceiver { rx, queued },
    )
}

impl QueueSender {
    /// Queues `data` without waiting. Over budget the stream is ended with
    /// [`StreamEnd::Overflow`] and the data dropped; a message larger than the whole budget
    /// is still taken when the queue is empty.
    pub fn push(&self, data: Bytes) -> Result<(), PushError> {
        let len = data.len();
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if before > 0 && before + len > self.budget {
            self.end(StreamEnd::Overflow);
            return Err(PushError::Overflow);
        }
        self.tx
            .send(Inbound::Data(data))
            .map_err(|_| PushError::Gone)
    }

    /// Bytes queued and not yet taken by the consumer.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Ends the stream; the consumer sees `End(reason)` after the data queued before it.
    pub fn end(&self, reason: StreamEnd) {
        let _ = self.tx.send(Inbound::End(reason));
    }
}

impl QueueReceiver {
    /// The next event; `End(TunnelClosed)` if the producer vanished without saying why.
    pub async fn recv(&mut self) -> Inbound {
        match self.rx.recv().await {
            Some(ev) => self.account(ev),
            None => Inbound::End(StreamEnd::TunnelClosed(Arc::from("tunnel reader gone"))),
        }
    }

    /// The next event if one is queued now.
    pub fn try_recv(&mut self) -> Option<Inbound> {
        self.rx.try_recv().ok().map(|ev| self.account(ev))
    }

    fn account(&self, ev: Inbound) -> Inbound {
        if let Inbound::Data(d) = &ev {
            self.queued.fetch_sub(d.len(), Ordering::AcqRel);
        }
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queue_should_end_the_stream_past_its_budget() {
        let (tx, mut rx) = stream_queue(10);
        tx.push(Bytes::from_static(b"123456")).unwrap();
        assert_eq!(
            rx.recv().await,
            Inbound::Data(Bytes::from_static(b"123456"))
        );
        tx.push(Bytes::from_static(b"123456")).unwrap();
        assert_eq!(
            tx.push(Bytes::from_static(b"123456")),
            Err(PushError::Overflow)
        );
        assert_eq!(
            rx.recv().await,
            Inbound::Data(Bytes::from_static(b"123456"))
        );
        assert_eq!(rx.recv().await, Inbound::End(StreamEnd::Overflow));
    }

    #[tokio::test]
    async fn dropped_sender_should_read_as_tunnel_closed() {
        let (tx, mut rx) = stream_queue(10);
        drop(tx);
        assert!(matches!(
            rx.recv().await,
            Inbound::End(StreamEnd::TunnelClosed(_))
        ));
    }
}
