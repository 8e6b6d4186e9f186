//! One bounded queue per request kind with its own concurrency limit, built on
//! [`kubeedge_api::queue`]: a full queue refuses at once (answered `429` by the dispatcher),
//! so a saturated kind never holds up another; each request counts against its node's share
//! of the queue, so one node cannot fill it for all; on stop, queued requests are answered
//! `503`.

use std::sync::Arc;
use std::time::Duration;

use beehive::Message;
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::queue::{EnqueueError, Limit, Queue, QueueStats};
use kubeedge_api::status::StatusError;

use super::{Kind, Outcome, Upstream};

/// The queues of every kind.
#[derive(Debug)]
pub(crate) struct Queues {
    queues: Vec<(Kind, Queue)>,
}

impl Queues {
    /// A queue per kind, in the order of `stats` (one entry per [`Kind::ALL`]).
    pub(crate) fn start(
        up: Arc<Upstream>,
        stats: &[Arc<QueueStats>],
        life: &Lifecycle,
        drain: Duration,
    ) -> Queues {
        let queues = Kind::ALL
            .iter()
            .zip(stats)
            .map(|(&kind, s)| {
                let workers = s.snapshot().workers;
                let (handler_up, refuse_up) = (up.clone(), up.clone());
                let queue = Queue::start(
                    s.clone(),
                    Limit::new(workers),
                    life,
                    drain,
                    move |msg| {
                        let up = handler_up.clone();
                        async move { up.handle(kind, msg).await == Outcome::Ok }
                    },
                    move |msg| {
                        let up = refuse_up.clone();
                        async move { refuse(&up, kind, msg).await }
                    },
                );
                (kind, queue)
            })
            .collect();
        Queues { queues }
    }

    /// Queues `msg` for `kind` without waiting, within the share of the node it came from
    /// (the `node/<id>/` prefix cloudhub sets from the connection); hands it back when the
    /// node holds its share, or the queue is full or stopped.
    pub(crate) fn try_enqueue(&self, kind: Kind, msg: Message) -> Result<(), EnqueueError> {
        let Some((_, q)) = self.queues.iter().find(|(k, _)| *k == kind) else {
            return Err(EnqueueError::Stopped(Box::new(msg)));
        };
        match kubeedge_api::node_of(&msg.route.resource) {
            Some(node) => {
                let node = node.to_owned();
                q.try_enqueue_from(&node, msg)
            }
            None => q.try_enqueue(msg),
        }
    }
}

async fn refuse(up: &Upstream, kind: Kind, msg: Message) {
    let err = StatusError::new(503, "ServiceUnavailable", "edgecontroller is shutting down");
    if let Some(resp) = Upstream::error_reply(kind, &msg, &err) {
        up.out.send(resp).await;
    }
}
