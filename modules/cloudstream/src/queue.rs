//! The per-stream inbound queue both ends use. A byte budget bounds its memory. Over budget,
//! [`QueueSender::push`] ends the stream at once (one slow stream never stalls its tunnel,
//! W14/W15), while [`QueueSender::push_paced`] waits for the consumer to catch up and ends the
//! stream only when it makes no progress for a while.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};

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
    drained: Arc<Notify>,
    budget: usize,
}

/// The consumer half (held by the stream's relay).
#[derive(Debug)]
pub struct QueueReceiver {
    rx: mpsc::UnboundedReceiver<Inbound>,
    queued: Arc<AtomicUsize>,
    drained: Arc<Notify>,
}

/// A queue that holds at most `budget` bytes of undelivered data.
pub fn stream_queue(budget: usize) -> (QueueSender, QueueReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(Notify::new());
    (
        QueueSender {
            tx,
            queued: queued.clone(),
            drained: drained.clone(),
            budget,
        },
        QueueReceiver {
            rx,
            queued,
            drained,
        },
    )
}

impl QueueSender {
    /// Queues `data` without waiting. Over budget, the stream is ended with
    /// [`StreamEnd::Overflow`] and the data dropped.
    pub fn push(&self, data: Bytes) -> Result<(), PushError> {
        let len = data.len();
        if self.queued.fetch_add(len, Ordering::AcqRel) + len > self.budget {
            self.end(StreamEnd::Overflow);
            return Err(PushError::Overflow);
        }
        self.tx
            .send(Inbound::Data(data))
            .map_err(|_| PushError::Gone)
    }

    /// Queues `data`, first waiting while the budget is spent (back-pressure toward whoever
    /// feeds the tunnel). If the consumer takes nothing for `stall`, the stream is ended with
    /// [`StreamEnd::Overflow`] instead. A message larger than the whole budget waits for an
    /// empty queue.
    pub async fn push_paced(&self, data: Bytes, stall: Duration) -> Result<(), PushError> {
        let len = data.len();
        loop {
            // Registered before the check, so a drain in between is not missed.
            let drained = self.drained.notified();
            let queued = self.queued.load(Ordering::Acquire);
            if queued == 0 || queued + len <= self.budget {
                break;
            }
            if self.tx.is_closed() {
                return Err(PushError::Gone);
            }
            if tokio::time::timeout(stall, drained).await.is_err() {
                self.end(StreamEnd::Overflow);
                return Err(PushError::Overflow);
            }
        }
        self.queued.fetch_add(len, Ordering::AcqRel);
        self.tx
            .send(Inbound::Data(data))
            .map_err(|_| PushError::Gone)
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
            self.drained.notify_waiters();
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

    #[tokio::test(start_paused = true)]
    async fn paced_push_should_wait_for_a_slow_consumer_and_end_a_stuck_one() {
        let (tx, mut rx) = stream_queue(10);
        tx.push_paced(Bytes::from_static(b"12345678"), Duration::from_secs(5))
            .await
            .unwrap();
        // Over budget: waits until the consumer takes something.
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move {
                tx.push_paced(Bytes::from_static(b"abcdefgh"), Duration::from_secs(5))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!waiting.is_finished());
        assert_eq!(
            rx.recv().await,
            Inbound::Data(Bytes::from_static(b"12345678"))
        );
        waiting.await.unwrap().unwrap();
        assert_eq!(
            rx.recv().await,
            Inbound::Data(Bytes::from_static(b"abcdefgh"))
        );
        // A consumer that takes nothing for the stall time loses the stream.
        tx.push_paced(Bytes::from_static(b"12345678"), Duration::from_secs(5))
            .await
            .unwrap();
        let r = tx
            .push_paced(Bytes::from_static(b"abcdefgh"), Duration::from_secs(5))
            .await;
        assert_eq!(r, Err(PushError::Overflow));
        assert_eq!(
            rx.recv().await,
            Inbound::Data(Bytes::from_static(b"12345678"))
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
