//! The module trait and restart policy.

use std::time::Duration;

use actix::{Actor, Handler};

use crate::{Backoff, Message};
use crate::mailbox::DEFAULT_MAILBOX_CAPACITY;

/// A module: an actix actor with a name, a group and an enabled flag, fed by a bounded
/// mailbox on the [`crate::Bus`].
///
/// # Lifecycle
/// * **Registration** ([`crate::Bus::register`]) creates the mailbox at once, so messages can
///   be queued before the module runs. A disabled module gets no mailbox and is never started;
///   sending to it fails with [`crate::Error::ModuleDisabled`].
/// * **Start** ([`crate::Bus::start`]) starts the modules in registration order, after every
///   mailbox exists. A module registered after `start` starts at once.
/// * **Delivery**: messages reach [`Handler<Message>`] one at a time, in each sender's order.
/// * **Shutdown** ([`crate::Bus::shutdown`]) stops modules in reverse registration order. For
///   each: its mailbox stops accepting, the messages already queued are still handled, then
///   [`Module::shutdown`] runs exactly once and the actor stops (actix's `stopping` and
///   `stopped` follow).
/// * A module that stops on its own (its handler panicked, or it called `ctx.stop()`) is
///   logged as failed and, if it was registered with a [`RestartPolicy`], recreated after a
///   growing back-off; its mailbox, with what is queued, is kept.
pub trait Module: Actor<Context = actix::Context<Self>> + Handler<Message, Result = ()> {
    /// The unique module name messages are addressed to.
    fn name(&self) -> &str;

    /// The group the module belongs to (more can be joined with [`crate::Bus::join_group`]).
    fn group(&self) -> &str;

    /// Disabled modules are registered as such but never started.
    fn enabled(&self) -> bool {
        true
    }

    /// Mailbox capacity; senders wait (or `try_send` fails) when it is reached.
    fn mailbox_capacity(&self) -> usize {
        DEFAULT_MAILBOX_CAPACITY
    }

    /// Runs once during bus shutdown, after the mailbox is drained and before the actor stops.
    fn shutdown(&mut self, _ctx: &mut Self::Context) {}
}

/// When and how a module that stopped on its own is started again.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    /// Give up after this many restarts (`None`: never give up).
    pub max_restarts: Option<u32>,
    /// The wait before each restart: doubling from the first (`initial == max` keeps it
    /// constant).
    pub backoff: Backoff,
}

impl Default for RestartPolicy {
    /// KubeEdge's defaults: 1 s, doubling, at most 30 s, unlimited restarts.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: None,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
        }
    }
}

impl RestartPolicy {
    /// The wait before restart number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        self.backoff.delay(attempt)
    }
}
