//! The messages a session actor takes, and the address it is reached by: the module
//! delivers downstream messages, the socket driver hands over acknowledgements, and the
//! registry, the listener and the handle stop sessions. Nothing here knows the session type.

use std::sync::Arc;

use actix::{Actor, Addr, Handler, Recipient};
use beehive::Message;
use tracing::debug;

use crate::metrics::{DropReason, HubMetrics, NodeCounters};
use crate::persist::Persister;

/// A downstream message for this node (from the cloudhub module).
///
/// Accounts for itself: dropped unhandled (left in the mailbox of a session that ended), it
/// counts as a [`DropReason::SessionEnded`] drop and leaves the record the sync loop
/// redelivers from, so a message accepted into a mailbox is never lost silently.
#[derive(Debug)]
pub(crate) struct Deliver {
    msg: Option<Message>,
    persister: Arc<Persister>,
    metrics: Arc<HubMetrics>,
    counters: Arc<NodeCounters>,
}

impl Deliver {
    /// `msg` for the node whose counters are `counters`; `persister` and `metrics` take
    /// it over should it be dropped unhandled.
    pub(crate) fn new(
        msg: Message,
        persister: Arc<Persister>,
        metrics: Arc<HubMetrics>,
        counters: Arc<NodeCounters>,
    ) -> Self {
        Deliver {
            msg: Some(msg),
            persister,
            metrics,
            counters,
        }
    }

    /// The message, taken out for handling (a `Deliver` left empty accounts for nothing).
    pub(crate) fn take(&mut self) -> Option<Message> {
        self.msg.take()
    }

    /// Takes the message back (a refused send); the caller accounts for it.
    pub(crate) fn into_inner(mut self) -> Message {
        self.msg.take().unwrap_or_default()
    }
}

impl Drop for Deliver {
    fn drop(&mut self) {
        let Some(msg) = self.msg.take() else { return };
        let node = kubeedge_api::node_of(&msg.route.resource).unwrap_or_default();
        self.metrics
            .count_drop(Some(&self.counters), DropReason::SessionEnded, 1);
        let recorded = self.persister.record_undelivered(node, &msg);
        debug!(node, resource = %msg.route.resource, redelivered_by_sync_loop = recorded, "downstream message dropped: its session ended before handling it");
    }
}

impl actix::Message for Deliver {
    type Result = ();
}

/// An upstream `response`: maybe the acknowledgement of an in-flight message.
#[derive(Debug)]
pub(crate) struct Acked(pub(crate) Message);

impl actix::Message for Acked {
    type Result = ();
}

/// Why a session ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// A newer connection for the same node took over.
    Replaced,
    /// The hub is shutting down: write what is queued, then close.
    Shutdown,
    /// The node's Node object was deleted and its certificates revoked.
    NodeDeleted,
    /// The socket side ended (EOF, error, write timeout, bad input).
    ConnectionClosed(String),
}

/// Ends the session.
#[derive(Debug)]
pub(crate) struct Stop(pub(crate) StopReason);

impl actix::Message for Stop {
    type Result = ();
}

/// How a session is reached, without naming its type.
#[derive(Debug)]
pub(crate) struct SessionAddr {
    /// Downstream messages (bounded mailbox: `try_send` refuses when full).
    pub(crate) deliver: Recipient<Deliver>,
    /// Acknowledgements from the socket driver.
    pub(crate) acked: Recipient<Acked>,
    /// Control: always queued, even past the mailbox capacity.
    pub(crate) stop: Recipient<Stop>,
}

impl SessionAddr {
    /// The recipients of a running session actor.
    pub(crate) fn of<A>(addr: Addr<A>) -> Self
    where
        A: Actor<Context = actix::Context<A>> + Handler<Deliver> + Handler<Acked> + Handler<Stop>,
    {
        SessionAddr {
            deliver: addr.clone().recipient(),
            acked: addr.clone().recipient(),
            stop: addr.recipient(),
        }
    }
}
