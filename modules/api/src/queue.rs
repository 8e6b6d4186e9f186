//! Bounded request queues served with a concurrency limit, shared by the controllers'
//! upstream paths (spec §8 W1).
//!
//! Enqueueing never waits: a full queue hands the request back at once (counted as
//! rejected), so the caller can answer it (`429`) instead of stalling every other kind behind
//! it. Each queue is served by one task that starts a handler per request while fewer than the
//! limit's permits are taken; several queues may share one [`Limit`]. On stop the task answers
//! what is still queued through the `refuse` callback and gives running handlers the drain
//! timeout to finish.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use kubeedge_api::lifecycle::Lifecycle;
//! use kubeedge_api::queue::{Limit, Queue, QueueStats};
//! let life = Lifecycle::new();
//! let stats = Arc::new(QueueStats::new("demo", 2, 1));
//! let q = Queue::start(stats.clone(), Limit::new(1), &life, Duration::from_secs(1),
//!     |_msg| async { true }, |_msg| async {});
//! q.try_enqueue(beehive::Message::new()).unwrap();
//! life.stop();
//! assert!(life.join(Duration::from_secs(1)).await);
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use beehive::Message;
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

use crate::lifecycle::{Lifecycle, StopSignal};

/// Live counters of one queue.
#[derive(Debug)]
pub struct QueueStats {
    name: &'static str,
    capacity: usize,
    workers: usize,
    depth: AtomicUsize,
    in_flight: AtomicUsize,
    handled: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
}

impl QueueStats {
    /// Counters for a queue of `capacity` served by at most `workers` handlers (both at least 1).
    pub fn new(name: &'static str, capacity: usize, workers: usize) -> Self {
        QueueStats {
            name,
            capacity: capacity.max(1),
            workers: workers.max(1),
            depth: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// A point-in-time copy.
    pub fn snapshot(&self) -> QueueSnapshot {
        QueueSnapshot {
            kind: self.name,
            capacity: self.capacity,
            workers: self.workers,
            depth: self.depth.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            handled: self.handled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// Counters of one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// The request kind, named after its `buffer.*` config key.
    pub kind: &'static str,
    /// Queue capacity.
    pub capacity: usize,
    /// Maximum concurrent handlers (of the limit serving this queue).
    pub workers: usize,
    /// Requests waiting now.
    pub depth: usize,
    /// Handlers of this queue running now.
    pub in_flight: usize,
    /// Requests handled successfully.
    pub handled: u64,
    /// Requests that failed (answered with an error, or dropped for kinds never answered).
    pub failed: u64,
    /// Requests refused because the queue was full.
    pub rejected: u64,
}

/// A concurrency limit: at most `n` handlers at once, across the queues sharing it.
#[derive(Debug, Clone)]
pub struct Limit {
    permits: Arc<Semaphore>,
    n: usize,
}

impl Limit {
    /// At most `n` (at least 1) concurrent handlers.
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        Limit {
            permits: Arc::new(Semaphore::new(n)),
            n,
        }
    }
}

/// A request the queue did not take, handed back.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The queue is at capacity (counted as rejected): answer `429`.
    #[error("queue is full")]
    Full(Box<Message>),
    /// The queue's server has stopped: answer `503`.
    #[error("queue has stopped")]
    Stopped(Box<Message>),
}

impl EnqueueError {
    /// The request that was not queued.
    pub fn into_message(self) -> Message {
        match self {
            EnqueueError::Full(m) | EnqueueError::Stopped(m) => *m,
        }
    }
}

/// The sending side of a queue. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Queue {
    tx: mpsc::Sender<Message>,
    stats: Arc<QueueStats>,
}

impl Queue {
    /// Creates the queue and spawns its server on `life`. `handler` runs once per request
    /// (returning whether it succeeded) under a permit of `limit`; `refuse` answers requests
    /// still queued when stop is requested.
    pub fn start<H, HF, R, RF>(
        stats: Arc<QueueStats>,
        limit: Limit,
        life: &Lifecycle,
        drain: Duration,
        handler: H,
        refuse: R,
    ) -> Queue
    where
        H: Fn(Message) -> HF + Send + Sync + 'static,
        HF: Future<Output = bool> + Send + 'static,
        R: Fn(Message) -> RF + Send + Sync + 'static,
        RF: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(stats.capacity);
        let server = Server {
            rx,
            stats: stats.clone(),
            limit,
            drain,
        };
        life.spawn(server.serve(life.stop_signal(), handler, refuse));
        Queue { tx, stats }
    }

    /// Queues `msg` without waiting; hands it back when the queue is full (counted as
    /// rejected) or stopped.
    pub fn try_enqueue(&self, msg: Message) -> Result<(), EnqueueError> {
        // Count first: the server may take the message before try_send returns.
        self.stats.depth.fetch_add(1, Ordering::Relaxed);
        self.tx.try_send(msg).map_err(|e| {
            self.stats.depth.fetch_sub(1, Ordering::Relaxed);
            match e {
                mpsc::error::TrySendError::Full(m) => {
                    self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    EnqueueError::Full(Box::new(m))
                }
                mpsc::error::TrySendError::Closed(m) => EnqueueError::Stopped(Box::new(m)),
            }
        })
    }

    /// The queue's counters.
    pub fn stats(&self) -> &Arc<QueueStats> {
        &self.stats
    }
}

struct Server {
    rx: mpsc::Receiver<Message>,
    stats: Arc<QueueStats>,
    limit: Limit,
    drain: Duration,
}

impl Server {
    async fn serve<H, HF, R, RF>(mut self, mut stop: StopSignal, handler: H, refuse: R)
    where
        H: Fn(Message) -> HF,
        HF: Future<Output = bool> + Send + 'static,
        R: Fn(Message) -> RF,
        RF: Future<Output = ()>,
    {
        let stats = self.stats.clone();
        loop {
            let msg = tokio::select! {
                biased;
                _ = stop.wait() => break,
                m = self.rx.recv() => match m {
                    Some(m) => m,
                    None => break,
                },
            };
            stats.depth.fetch_sub(1, Ordering::Relaxed);
            let permit = tokio::select! {
                p = self.limit.permits.clone().acquire_owned() => p,
                _ = stop.wait() => {
                    refuse(msg).await;
                    break;
                }
            };
            // The semaphore is never closed.
            let Ok(permit) = permit else { break };
            stats.in_flight.fetch_add(1, Ordering::Relaxed);
            let run = handler(msg);
            let stats = stats.clone();
            tokio::spawn(async move {
                let ok = run.await;
                stats.in_flight.fetch_sub(1, Ordering::Relaxed);
                let counter = if ok { &stats.handled } else { &stats.failed };
                counter.fetch_add(1, Ordering::Relaxed);
                drop(permit);
            });
        }
        self.rx.close();
        while let Ok(msg) = self.rx.try_recv() {
            stats.depth.fetch_sub(1, Ordering::Relaxed);
            refuse(msg).await;
        }
        let drained = async {
            while stats.in_flight.load(Ordering::Relaxed) > 0 {
                // A permit comes back when a handler of any queue sharing the limit ends.
                let all = u32::try_from(self.limit.n).unwrap_or(u32::MAX);
                if let Ok(p) = self.limit.permits.acquire_many(all).await {
                    drop(p);
                } else {
                    break;
                }
            }
        };
        match tokio::time::timeout(self.drain, drained).await {
            Ok(()) => debug!(queue = stats.name, "queue stopped"),
            Err(_) => warn!(
                queue = stats.name,
                in_flight = stats.in_flight.load(Ordering::Relaxed),
                "handlers still running after the drain timeout"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_at_once_and_stop_answers_the_rest() {
        let life = Lifecycle::new();
        let stats = Arc::new(QueueStats::new("q", 1, 1));
        let refused = Arc::new(AtomicUsize::new(0));
        let r = refused.clone();
        let q = Queue::start(
            stats.clone(),
            Limit::new(1),
            &life,
            Duration::from_secs(5),
            |_m| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                true
            },
            move |_m| {
                r.fetch_add(1, Ordering::SeqCst);
                async {}
            },
        );
        q.try_enqueue(Message::new()).unwrap();
        tokio::task::yield_now().await; // the server takes it and starts the handler
        q.try_enqueue(Message::new()).unwrap(); // held by the server, waiting for the permit
        tokio::task::yield_now().await;
        q.try_enqueue(Message::new()).unwrap(); // in the queue (capacity 1)
        assert!(
            q.try_enqueue(Message::new()).is_err(),
            "full: refused at once"
        );
        assert_eq!(stats.snapshot().rejected, 1);
        life.stop();
        assert!(life.join(Duration::from_secs(10)).await);
        let s = stats.snapshot();
        assert_eq!(
            (s.handled, s.in_flight, s.depth),
            (1, 0, 0),
            "the running handler finished"
        );
        assert_eq!(
            refused.load(Ordering::SeqCst),
            2,
            "the waiting and the queued were refused"
        );
    }
}
