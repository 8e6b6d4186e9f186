//! Bounded request queues served with a concurrency limit, shared by the controllers'
//! upstream paths, so one slow kind of request never stalls the others (KubeEdge feeds all its
//! queues from one dispatcher with blocking sends).
//!
//! Enqueueing never waits: a full queue hands the request back at once (counted as
//! rejected), so the caller can answer it (`429`) instead of stalling every other kind behind
//! it. Each queue is served by one task that starts a handler per request while fewer than the
//! limit's permits are taken; several queues may share one [`Limit`]. On stop the task answers
//! what is still queued through the `refuse` callback and gives running handlers the drain
//! timeout to finish.
//!
//! A queue is shared by every edge node, so one node sending flat out could fill it and have
//! every other node refused. With a node share ([`QueueStats::with_node_share`]), requests
//! queued with [`Queue::try_enqueue_from`] are counted per node from the moment they are
//! queued until their handler ends, and a node already holding its share is refused (counted
//! apart from a full queue) while other nodes still get in.
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

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use beehive::Message;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::lifecycle::Lifecycle;
use crate::metrics::{KindLabels, QueueMetrics, RejectLabels};

/// Default divisor of [`node_share`]: one node may hold an eighth of a queue.
pub const DEFAULT_NODE_SHARE_DIVISOR: usize = 8;
/// Default floor of [`node_share`], so that small queues still take a node's ordinary burst.
pub const DEFAULT_NODE_SHARE_MIN: usize = 16;

/// The share of a queue of `capacity` one node may hold: `capacity / divisor`, never below
/// `min` (nor below 1); `None` (no per-node cap) when `divisor` is 0.
///
/// ```
/// use kubeedge_api::queue::node_share;
/// assert_eq!(node_share(1024, 8, 16), Some(128));
/// assert_eq!(node_share(64, 8, 16), Some(16));
/// assert_eq!(node_share(1024, 0, 16), None);
/// ```
pub fn node_share(capacity: usize, divisor: usize, min: usize) -> Option<usize> {
    (divisor > 0).then(|| (capacity / divisor).max(min).max(1))
}

/// Live counters of one queue.
#[derive(Debug)]
pub struct QueueStats {
    name: &'static str,
    capacity: usize,
    workers: usize,
    node_share: Option<usize>,
    depth: Gauge,
    in_flight: AtomicUsize,
    handled: Counter,
    failed: Counter,
    rejected: Counter,
    rejected_over_share: Counter,
}

impl QueueStats {
    /// Counters for a queue of `capacity` served by at most `workers` handlers (both at least
    /// 1), with no per-node share.
    pub fn new(name: &'static str, capacity: usize, workers: usize) -> Self {
        QueueStats {
            name,
            capacity: capacity.max(1),
            workers: workers.max(1),
            node_share: None,
            depth: Gauge::default(),
            in_flight: AtomicUsize::new(0),
            handled: Counter::default(),
            failed: Counter::default(),
            rejected: Counter::default(),
            rejected_over_share: Counter::default(),
        }
    }

    /// Counts into `metrics`' series labelled with this queue's kind (created at zero if
    /// new), so the queue shows in `/metrics`; call it before the queue is used (what was
    /// counted before is not carried over).
    pub fn counted_in(mut self, metrics: &QueueMetrics) -> Self {
        let kind = KindLabels { kind: self.name };
        let reason = |reason| RejectLabels {
            kind: self.name,
            reason,
        };
        self.depth = metrics.depth.get_or_create_owned(&kind);
        self.handled = metrics.handled.get_or_create_owned(&kind);
        self.failed = metrics.failed.get_or_create_owned(&kind);
        self.rejected = metrics.rejected.get_or_create_owned(&reason("queue_full"));
        self.rejected_over_share = metrics.rejected.get_or_create_owned(&reason("node_share"));
        self
    }

    /// Caps what one node may hold in the queue (requests queued with
    /// [`Queue::try_enqueue_from`], from enqueueing until their handler ends) at `share`
    /// entries (at least 1); `None` leaves nodes uncapped. See [`node_share`].
    pub fn with_node_share(mut self, share: Option<usize>) -> Self {
        self.node_share = share.map(|s| s.max(1));
        self
    }

    /// A point-in-time copy.
    pub fn snapshot(&self) -> QueueSnapshot {
        QueueSnapshot {
            kind: self.name,
            capacity: self.capacity,
            workers: self.workers,
            node_share: self.node_share,
            depth: usize::try_from(self.depth.get()).unwrap_or(0),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            handled: self.handled.get(),
            failed: self.failed.get(),
            rejected: self.rejected.get(),
            rejected_over_share: self.rejected_over_share.get(),
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
    /// Most entries (queued + being handled) one node may hold; `None` = no per-node cap.
    pub node_share: Option<usize>,
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
    /// Requests refused because their node already held its share of the queue (not counted
    /// in `rejected`).
    pub rejected_over_share: u64,
}

/// A concurrency limit: at most `n` handlers at once, across the queues sharing it.
#[derive(Debug, Clone)]
pub struct Limit {
    permits: Arc<Semaphore>,
}

impl Limit {
    /// At most `n` (at least 1) concurrent handlers.
    pub fn new(n: usize) -> Self {
        Limit {
            permits: Arc::new(Semaphore::new(n.max(1))),
        }
    }
}

/// A request the queue did not take, handed back.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The queue is at capacity (counted in `rejected`): answer `429`.
    #[error("queue is full")]
    Full(Box<Message>),
    /// The request's node already holds its share of the queue (counted in
    /// `rejected_over_share`): answer `429`; other nodes are still taken.
    #[error("node holds its share of the queue ({share} requests)")]
    OverShare {
        /// The request.
        msg: Box<Message>,
        /// The node's share, for the answer.
        share: usize,
    },
    /// The queue's server has stopped: answer `503`.
    #[error("queue has stopped")]
    Stopped(Box<Message>),
}

impl EnqueueError {
    /// The request that was not queued.
    pub fn into_message(self) -> Message {
        match self {
            EnqueueError::Full(m) | EnqueueError::Stopped(m) => *m,
            EnqueueError::OverShare { msg, .. } => *msg,
        }
    }
}

/// What each node holds now (only nodes holding something are listed, so the table is never
/// larger than the queue plus its running handlers).
#[derive(Debug, Default)]
struct Holdings {
    by_node: Mutex<HashMap<Box<str>, Holding>>,
}

#[derive(Debug)]
struct Holding {
    held: usize,
    /// This episode over the share was logged: one warning per episode, not per request.
    warned: bool,
}

/// One entry a node holds; released when dropped (the handler ended, or the entry was
/// refused or never queued), so a panicking handler cannot leak its node's share.
#[derive(Debug)]
struct Claim {
    holdings: Arc<Holdings>,
    node: Box<str>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut map = self
            .holdings
            .by_node
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = map.get_mut(&self.node) {
            h.held = h.held.saturating_sub(1);
            if h.held == 0 {
                map.remove(&self.node);
            }
        }
    }
}

/// A queued request and the share it takes.
#[derive(Debug)]
struct Entry {
    msg: Message,
    claim: Option<Claim>,
}

/// The sending side of a queue. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Queue {
    tx: mpsc::Sender<Entry>,
    stats: Arc<QueueStats>,
    holdings: Arc<Holdings>,
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
        life.spawn(server.serve(life.token().clone(), handler, refuse));
        Queue {
            tx,
            stats,
            holdings: Arc::default(),
        }
    }

    /// Queues `msg` without waiting, outside any node's share; hands it back when the queue
    /// is full (counted as rejected) or stopped.
    pub fn try_enqueue(&self, msg: Message) -> Result<(), EnqueueError> {
        self.send(Entry { msg, claim: None })
    }

    /// Queues `msg` of `node` without waiting; hands it back when the node already holds its
    /// share ([`QueueStats::with_node_share`]), when the queue is full, or stopped. The first
    /// refusal of a node over its share is logged at `warn` (then not again until the node
    /// holds nothing), so a flooding node cannot flood the log as well.
    pub fn try_enqueue_from(&self, node: &str, msg: Message) -> Result<(), EnqueueError> {
        let Some(share) = self.stats.node_share else {
            return self.try_enqueue(msg);
        };
        {
            let mut map = self
                .holdings
                .by_node
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let h = map.entry(node.into()).or_insert(Holding {
                held: 0,
                warned: false,
            });
            if h.held >= share {
                self.stats.rejected_over_share.inc();
                if !std::mem::replace(&mut h.warned, true) {
                    warn!(
                        queue = self.stats.name,
                        node,
                        share,
                        "node holds its whole share of the queue: its further requests are refused until some finish"
                    );
                }
                return Err(EnqueueError::OverShare {
                    msg: Box::new(msg),
                    share,
                });
            }
            h.held += 1;
        }
        let claim = Claim {
            holdings: self.holdings.clone(),
            node: node.into(),
        };
        self.send(Entry {
            msg,
            claim: Some(claim),
        })
    }

    fn send(&self, entry: Entry) -> Result<(), EnqueueError> {
        // Count first: the server may take the message before try_send returns.
        self.stats.depth.inc();
        // On failure the entry's claim is dropped here, giving the node's place back.
        self.tx.try_send(entry).map_err(|e| {
            self.stats.depth.dec();
            match e {
                mpsc::error::TrySendError::Full(e) => {
                    self.stats.rejected.inc();
                    EnqueueError::Full(Box::new(e.msg))
                }
                mpsc::error::TrySendError::Closed(e) => EnqueueError::Stopped(Box::new(e.msg)),
            }
        })
    }

    /// How many entries (queued + being handled) `node` holds now.
    pub fn held_by(&self, node: &str) -> usize {
        self.holdings
            .by_node
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
            .map_or(0, |h| h.held)
    }

    /// The queue's counters.
    pub fn stats(&self) -> &Arc<QueueStats> {
        &self.stats
    }
}

struct Server {
    rx: mpsc::Receiver<Entry>,
    stats: Arc<QueueStats>,
    limit: Limit,
    drain: Duration,
}

impl Server {
    async fn serve<H, HF, R, RF>(mut self, stop: CancellationToken, handler: H, refuse: R)
    where
        H: Fn(Message) -> HF,
        HF: Future<Output = bool> + Send + 'static,
        R: Fn(Message) -> RF,
        RF: Future<Output = ()>,
    {
        let stats = self.stats.clone();
        // This queue's running handlers, so that stop waits for them (and not for other
        // queues sharing the limit).
        let handlers = TaskTracker::new();
        loop {
            let Entry { msg, claim } = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                m = self.rx.recv() => match m {
                    Some(m) => m,
                    None => break,
                },
            };
            stats.depth.dec();
            let permit = tokio::select! {
                p = self.limit.permits.clone().acquire_owned() => p,
                _ = stop.cancelled() => {
                    refuse(msg).await;
                    drop(claim);
                    break;
                }
            };
            // The semaphore is never closed.
            let Ok(permit) = permit else { break };
            stats.in_flight.fetch_add(1, Ordering::Relaxed);
            let run = handler(msg);
            let stats = stats.clone();
            handlers.spawn(async move {
                let ok = run.await;
                stats.in_flight.fetch_sub(1, Ordering::Relaxed);
                let counter = if ok { &stats.handled } else { &stats.failed };
                counter.inc();
                drop(claim);
                drop(permit);
            });
        }
        self.rx.close();
        while let Ok(Entry { msg, claim }) = self.rx.try_recv() {
            stats.depth.dec();
            refuse(msg).await;
            drop(claim);
        }
        handlers.close();
        match tokio::time::timeout(self.drain, handlers.wait()).await {
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

    /// A queue of `capacity` with `workers` handlers that wait for `gate` before succeeding.
    fn gated(
        life: &Lifecycle,
        capacity: usize,
        workers: usize,
        share: Option<usize>,
    ) -> (Queue, Arc<QueueStats>, Arc<Semaphore>) {
        let stats = Arc::new(QueueStats::new("q", capacity, workers).with_node_share(share));
        let gate = Arc::new(Semaphore::new(0));
        let g = gate.clone();
        let q = Queue::start(
            stats.clone(),
            Limit::new(workers),
            life,
            Duration::from_secs(5),
            move |_m| {
                let g = g.clone();
                async move {
                    g.acquire().await.unwrap().forget();
                    true
                }
            },
            |_m| async {},
        );
        (q, stats, gate)
    }

    #[test]
    fn a_share_is_a_fraction_of_the_capacity_with_a_floor() {
        assert_eq!(node_share(1024, 8, 16), Some(128));
        assert_eq!(node_share(1274, 8, 16), Some(159));
        assert_eq!(node_share(10, 8, 16), Some(16), "the floor");
        assert_eq!(node_share(10, 8, 0), Some(1), "never below 1");
        assert_eq!(node_share(1024, 0, 16), None, "divisor 0: no cap");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_over_its_share_is_refused_while_another_node_still_gets_in() {
        let life = Lifecycle::new();
        let (q, stats, gate) = gated(&life, 8, 1, Some(3));
        for _ in 0..3 {
            q.try_enqueue_from("hostile", Message::new()).unwrap();
        }
        for _ in 0..5 {
            let refused = q.try_enqueue_from("hostile", Message::new()).unwrap_err();
            assert!(
                matches!(refused, EnqueueError::OverShare { share: 3, .. }),
                "{refused}"
            );
        }
        assert_eq!(q.held_by("hostile"), 3);
        for _ in 0..3 {
            q.try_enqueue_from("calm", Message::new())
                .expect("another node is still taken");
        }
        let s = stats.snapshot();
        assert_eq!((s.rejected_over_share, s.rejected), (5, 0));
        assert_eq!(s.node_share, Some(3));
        // Handled entries give the node's place back.
        gate.add_permits(6);
        while stats.snapshot().handled < 6 {
            tokio::task::yield_now().await;
        }
        assert_eq!((q.held_by("hostile"), q.held_by("calm")), (0, 0));
        q.try_enqueue_from("hostile", Message::new())
            .expect("taken again once its requests finished");
        life.stop();
        gate.add_permits(1);
        assert!(life.join(Duration::from_secs(10)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_is_counted_apart_from_a_node_over_its_share() {
        let life = Lifecycle::new();
        let (q, stats, gate) = gated(&life, 2, 1, Some(100));
        // One runs, one waits for the permit in the server, two are queued.
        q.try_enqueue_from("a", Message::new()).unwrap();
        tokio::task::yield_now().await;
        q.try_enqueue_from("b", Message::new()).unwrap();
        tokio::task::yield_now().await;
        q.try_enqueue_from("c", Message::new()).unwrap();
        q.try_enqueue_from("d", Message::new()).unwrap();
        let refused = q.try_enqueue_from("e", Message::new()).unwrap_err();
        assert!(matches!(refused, EnqueueError::Full(_)), "{refused}");
        assert_eq!(q.held_by("e"), 0, "a refused request holds nothing");
        let s = stats.snapshot();
        assert_eq!((s.rejected, s.rejected_over_share), (1, 0));
        life.stop();
        gate.add_permits(10);
        assert!(life.join(Duration::from_secs(10)).await);
        for node in ["a", "b", "c", "d"] {
            assert_eq!(q.held_by(node), 0, "{node}: released on stop");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_share_one_node_may_fill_the_queue() {
        let life = Lifecycle::new();
        let (q, stats, gate) = gated(&life, 4, 1, None);
        let taken = (0..10)
            .filter(|_| q.try_enqueue_from("n", Message::new()).is_ok())
            .count();
        assert_eq!(taken, 4);
        assert_eq!(stats.snapshot().rejected, 6);
        life.stop();
        gate.add_permits(10);
        assert!(life.join(Duration::from_secs(10)).await);
    }

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
