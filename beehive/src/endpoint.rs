//! The sending side of the bus: send, try-send, group send, sync request/response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, trace};

use crate::{Id, Message, Sender};
use crate::error::{Error, Result};
use crate::mailbox::{Mailbox, Offer};
use crate::registry::{LookupError, Offered, Shared};
use crate::stats::{BusStats, ModuleStats, inc};
use crate::waiters::RespOutcome;

/// A handle for sending on the bus as one named module. Cheap to clone, `Send + Sync`.
///
/// Every send into a mailbox respects its capacity: [`Endpoint::send`] waits for room
/// (back-pressure), [`Endpoint::try_send`] fails at once. Messages from one endpoint to one
/// module arrive in send order, also through group sends.
///
/// Every message sent through an endpoint (plain, group, sync and answers) is delivered with
/// this endpoint's name as its [`Message::sender`], replacing whatever it carried: the
/// receiver learns who sent it from the bus, not from the message.
#[derive(Clone)]
pub struct Endpoint {
    shared: Arc<Shared>,
    name: Arc<str>,
    sender: Sender,
    stats: Arc<ModuleStats>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .finish()
    }
}

/// Who got a group message: the result of [`Endpoint::send_to_group_within`]. Every member
/// of the group at the time of the send is in exactly one list, each list in member order.
#[derive(Debug, Default)]
pub struct GroupDelivery {
    /// Members that have the message.
    pub delivered: Vec<String>,
    /// Members whose mailbox stayed full until the deadline: they do not have it.
    pub timed_out: Vec<String>,
    /// Members that refused it (stopped meanwhile), with the error (which hands the copy back).
    pub refused: Vec<(String, Error)>,
}

impl GroupDelivery {
    /// True when every member got the message.
    pub fn is_complete(&self) -> bool {
        self.timed_out.is_empty() && self.refused.is_empty()
    }
}

/// Offers a copy to every member in member order, without waiting; the last member gets the
/// original (one clone fewer per group send).
fn offer_to_members(
    members: &[Arc<Mailbox>],
    message: Message,
    mut each: impl FnMut(usize, Offer),
) {
    let Some((last, rest)) = members.split_last() else {
        return;
    };
    for (i, mb) in rest.iter().enumerate() {
        each(i, mb.offer(message.clone()));
    }
    each(rest.len(), last.offer(message));
}

/// The outcome of delivering one message to each member of a group.
async fn deliver_to_members(
    members: &[Arc<Mailbox>],
    message: Message,
    deadline: Option<Instant>,
) -> Vec<(Arc<str>, Result<()>)> {
    // Offer to everyone first, so one full member does not hold the others back, then wait
    // (in member order) for the full ones.
    let mut results: Vec<(Arc<str>, Result<()>)> =
        members.iter().map(|mb| (mb.name.clone(), Ok(()))).collect();
    let mut waiting = Vec::new();
    offer_to_members(members, message, |i, offer| match offer {
        Offer::Queued => {}
        Offer::Full(message) => waiting.push((i, message)),
        Offer::Refused(e) => results[i].1 = Err(e),
    });
    for (i, message) in waiting {
        let mb = &members[i];
        let outcome = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, mb.send(message)).await {
                Ok(r) => r,
                Err(_) => Err(Error::EnqueueTimeout {
                    module: mb.name.to_string(),
                    id: String::new(),
                    timeout: Duration::ZERO,
                }),
            },
            None => mb.send(message).await,
        };
        results[i].1 = outcome;
    }
    results
}

impl Endpoint {
    pub(crate) fn new(shared: Arc<Shared>, name: &str) -> Self {
        let stats = shared.stats_for(name);
        Endpoint {
            shared,
            name: Arc::from(name),
            sender: Sender::named(name),
            stats,
        }
    }

    /// The name this endpoint sends as.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An endpoint of a part of this module that needs an identity of its own: it sends as
    /// `<this name>/<role>` (the [`Message::sender`] receivers see) and counts its sends on
    /// this endpoint's module. A module can only derive names under its own, so holding an
    /// endpoint never gives another module's name (module names have no `/`).
    ///
    /// ```
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let mut inbox = bus.register_inbox("controller", "controller", 0).unwrap();
    /// let relay = bus.endpoint("hub").sub("edge");
    /// relay.send("controller", beehive::Message::new()).await.unwrap();
    /// assert!(inbox.recv().await.unwrap().is_sent_by("hub/edge"));
    /// # });
    /// ```
    pub fn sub(&self, role: &str) -> Endpoint {
        let name = format!("{}/{role}", self.name);
        Endpoint {
            shared: self.shared.clone(),
            sender: Sender::named(&name),
            name: Arc::from(name),
            stats: self.stats.clone(),
        }
    }

    /// The [`Message::sender`] of every message sent through this endpoint.
    pub fn sender(&self) -> Sender {
        self.sender
    }

    /// The error for a send to `module` that its lookup refused, with the message handed
    /// back; counted on the module.
    fn refused(&self, module: &str, why: LookupError, message: Message) -> Error {
        self.shared.count_refused(module, &why);
        why.into_error(module, Some(message))
    }

    /// Sends to a module, waiting while its mailbox is full.
    ///
    /// Errors: [`Error::UnknownModule`], [`Error::ModuleDisabled`], [`Error::Stopped`] (also
    /// when the module stops while this send waits), [`Error::Shutdown`]. Each hands the
    /// message back.
    ///
    /// ```
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let mut hub = bus.register_inbox("cloudhub", "cloudhub", 0).unwrap();
    /// bus.endpoint("edgecontroller").send("cloudhub", beehive::Message::new()).await.unwrap();
    /// assert!(hub.recv().await.is_ok());
    /// # });
    /// ```
    pub async fn send(&self, module: &str, mut message: Message) -> Result<()> {
        message.header.sender = Some(self.sender);
        trace!(from = %self.name, to = module, msg_id = %message.header.id, "send");
        match self.shared.offer(module, message) {
            Offered::Queued => {}
            Offered::Refused(e) => return Err(e),
            Offered::Lookup(e, message) => return Err(self.refused(module, e, message)),
            // Waiting is boxed: it happens once per full mailbox, not once per message, and
            // keeps the future of every send small.
            Offered::Full(mailbox, message) => {
                Box::pin(mailbox.send_when_room(message)).await?;
            }
        }
        inc(&self.stats.sent);
        Ok(())
    }

    /// Sends to a module if its mailbox has room now; otherwise [`Error::MailboxFull`] at
    /// once (counted as a rejection on the destination), with the message handed back.
    ///
    /// ```
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let _slow = bus.register_inbox("slow", "g", 1).unwrap();
    /// let ep = bus.endpoint("me");
    /// ep.try_send("slow", beehive::Message::new()).unwrap();
    /// let err = ep.try_send("slow", beehive::Message::new()).unwrap_err();
    /// assert!(matches!(err, beehive::Error::MailboxFull { .. }));
    /// # });
    /// ```
    pub fn try_send(&self, module: &str, mut message: Message) -> Result<()> {
        message.header.sender = Some(self.sender);
        // Looked up without the message: a `Message` is 248 bytes, and every move is a copy.
        let mailbox = match self.shared.lookup(module) {
            Ok(mailbox) => mailbox,
            Err(e) => return Err(self.refused(module, e, message)),
        };
        mailbox.try_send(message)?;
        inc(&self.stats.sent);
        Ok(())
    }

    /// Sends a copy to every current member of `group` and returns how many took it. Members
    /// with room get it at once; then this waits for members that are full, one after the
    /// other in member order. One sender's group sends arrive in order at every member. A
    /// member that stopped is skipped.
    ///
    /// **Cancelling** this future (dropping it, for example under an outer timeout) while it
    /// waits for a full member does not take anything back: every member that had room, and
    /// the full members before the one it was waiting for (in member order), have the
    /// message; the others do not; and nothing reports which. To bound the wait and learn
    /// who got it, use [`Endpoint::send_to_group_within`].
    ///
    /// Errors: [`Error::EmptyGroup`] for an unknown group or one without members,
    /// [`Error::Shutdown`]; both hand the message back.
    ///
    /// ```
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let _a = bus.register_inbox("a", "controllers", 0).unwrap();
    /// let _b = bus.register_inbox("b", "controllers", 0).unwrap();
    /// let n = bus.endpoint("hub").send_to_group("controllers", beehive::Message::new()).await.unwrap();
    /// assert_eq!(n, 2);
    /// # });
    /// ```
    pub async fn send_to_group(&self, group: &str, mut message: Message) -> Result<usize> {
        message.header.sender = Some(self.sender);
        let members = match self.shared.group_members(group) {
            Ok(m) => m,
            Err(e) => return Err(group_error(e, group, Some(message))),
        };
        // Members with room get it now; then wait, in member order, for the full ones.
        let mut delivered = 0;
        let mut waiting = Vec::new();
        offer_to_members(&members, message, |i, offer| match offer {
            Offer::Queued => delivered += 1,
            Offer::Full(message) => waiting.push((i, message)),
            Offer::Refused(e) => {
                debug!(group, member = %members[i].name, error = %e, "group member skipped")
            }
        });
        for (i, message) in waiting {
            match Box::pin(members[i].send_when_room(message)).await {
                Ok(()) => delivered += 1,
                Err(e) => {
                    debug!(group, member = %members[i].name, error = %e, "group member skipped")
                }
            }
        }
        self.stats
            .sent
            .fetch_add(delivered as u64, Ordering::Relaxed);
        Ok(delivered)
    }

    /// Sends a copy to every current member of `group`, waiting at most `timeout` for members
    /// whose mailbox is full, and says who got it: a deadline in place of an outer timeout
    /// that would cancel the send half-way (see [`Endpoint::send_to_group`]).
    ///
    /// Members with room get the message at once; full members are then waited for in member
    /// order until the deadline. A member still full at the deadline is in
    /// [`GroupDelivery::timed_out`] and does not get the message (later, either): retrying
    /// exactly those members with [`Endpoint::send`] delivers each copy once. Stopped members
    /// are in [`GroupDelivery::refused`] with the error, which hands the copy back.
    ///
    /// Errors: [`Error::EmptyGroup`], [`Error::Shutdown`]; both hand the message back.
    ///
    /// ```
    /// use std::time::Duration;
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let _a = bus.register_inbox("a", "controllers", 1).unwrap();
    /// let _b = bus.register_inbox("b", "controllers", 1).unwrap();
    /// let hub = bus.endpoint("hub");
    /// hub.send("a", beehive::Message::new()).await.unwrap(); // `a` is now full
    /// let got = hub
    ///     .send_to_group_within("controllers", beehive::Message::new(), Duration::from_millis(10))
    ///     .await
    ///     .unwrap();
    /// assert_eq!(got.delivered, ["b"]);
    /// assert_eq!(got.timed_out, ["a"]);
    /// # });
    /// ```
    pub async fn send_to_group_within(
        &self,
        group: &str,
        mut message: Message,
        timeout: Duration,
    ) -> Result<GroupDelivery> {
        message.header.sender = Some(self.sender);
        let members = match self.shared.group_members(group) {
            Ok(m) => m,
            Err(e) => return Err(group_error(e, group, Some(message))),
        };
        let deadline = Instant::now() + timeout;
        let results = deliver_to_members(&members, message, Some(deadline)).await;
        let mut outcome = GroupDelivery::default();
        for (member, result) in results {
            match result {
                Ok(()) => outcome.delivered.push(member.to_string()),
                Err(Error::EnqueueTimeout { .. }) => outcome.timed_out.push(member.to_string()),
                Err(e) => outcome.refused.push((member.to_string(), e)),
            }
        }
        self.stats
            .sent
            .fetch_add(outcome.delivered.len() as u64, Ordering::Relaxed);
        Ok(outcome)
    }

    fn effective_timeout(&self, timeout: Duration) -> Duration {
        if timeout.is_zero() {
            self.shared.config.default_sync_timeout
        } else {
            timeout
        }
    }

    /// Sends a request and waits for the response whose parent id is the request id; any
    /// module may answer it with [`Endpoint::send_resp`]. The delivered copy has
    /// `header.sync = true`. A zero timeout means the bus default (30 s); the timeout covers
    /// both waiting for mailbox room and waiting for the answer.
    ///
    /// Errors: addressing errors at once (unknown, disabled or stopped module);
    /// [`Error::EmptyMessageId`] / [`Error::DuplicateMessageId`] when the id cannot key the
    /// answer; [`Error::EnqueueTimeout`] when the mailbox stayed full (the request is then
    /// never delivered); [`Error::ResponseTimeout`] (a later answer is dropped and counted as
    /// late); [`Error::Shutdown`] when the bus is shut down (the request is handed back) or
    /// shuts down meanwhile.
    ///
    /// ```
    /// use std::time::Duration;
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let mut meta = bus.register_inbox("meta", "meta", 0).unwrap();
    /// let responder = bus.endpoint("meta");
    /// actix_rt::spawn(async move {
    ///     let req = meta.recv().await.unwrap();
    ///     responder.send_resp(req.response(beehive::Content::string("OK")));
    /// });
    /// let req = beehive::Message::new();
    /// let resp = bus.endpoint("hub").send_sync("meta", req.clone(), Duration::from_secs(1)).await.unwrap();
    /// assert_eq!(resp.header.parent_id, req.header.id);
    /// # });
    /// ```
    pub async fn send_sync(
        &self,
        module: &str,
        mut message: Message,
        timeout: Duration,
    ) -> Result<Message> {
        message.header.sender = Some(self.sender);
        let timeout = self.effective_timeout(timeout);
        if self.shared.is_shutting_down() {
            return Err(Error::Shutdown {
                message: Some(Box::new(message)),
            });
        }
        // Looked up without the message: a `Message` is 248 bytes, and every move is a copy.
        let mailbox = match self.shared.lookup(module) {
            Ok(mailbox) => mailbox,
            Err(e) => return Err(self.refused(module, e, message)),
        };
        message.header.sync = true;
        let (registration, mut slot) = self
            .shared
            .waiters
            .register_one(&message.header.id, &self.stats)?;
        let began = Instant::now();
        let deadline = began + timeout;
        // Room now: no future and no timer for the enqueue. Waiting for room is boxed: it
        // happens once per full mailbox, and keeps the future of every call small.
        let enqueued = match mailbox.offer(message) {
            Offer::Queued => Ok(Ok(())),
            Offer::Refused(e) => Ok(Err(e)),
            Offer::Full(message) => {
                Box::pin(tokio::time::timeout_at(
                    deadline,
                    mailbox.send_when_room(message),
                ))
                .await
            }
        };
        match enqueued {
            Ok(Ok(())) => inc(&self.stats.sent),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let id = registration.id().to_string();
                registration.expire();
                return Err(Error::EnqueueTimeout {
                    module: module.to_owned(),
                    id,
                    timeout,
                });
            }
        }
        match wait_answer(&mut slot, deadline).await {
            Some(Ok(Ok(answer))) => {
                registration.answered();
                let waited = began.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
                self.stats.record_sync(waited);
                Ok(answer)
            }
            Some(Ok(Err(e))) => {
                registration.answered();
                Err(e)
            }
            Some(Err(_)) => Err(Error::Shutdown { message: None }),
            None => {
                let id = registration.id().to_string();
                match registration.expire_one(slot) {
                    Some(answer) => answer,
                    None => {
                        debug!(from = %self.name, to = module, msg_id = %id, "sync request timed out");
                        Err(Error::ResponseTimeout { id, timeout })
                    }
                }
            }
        }
    }

    /// Sends a request to every member of `group` and waits until each one has answered
    /// once (via [`Endpoint::send_resp`] on an endpoint named after the member), or until the
    /// timeout. Returns the answers by member. A member answering twice counts once; answers
    /// arrive here within one wake-up of the last one (no polling).
    ///
    /// Errors: [`Error::EmptyGroup`] for a group without members; [`Error::GroupTimeout`]
    /// naming who answered and who did not; [`Error::Shutdown`]; id errors as
    /// [`Endpoint::send_sync`].
    ///
    /// ```
    /// use std::time::Duration;
    /// # actix_rt::System::new().block_on(async {
    /// let bus = beehive::Bus::new();
    /// let err = bus.endpoint("hub")
    ///     .send_to_group_sync("nobody", beehive::Message::new(), Duration::from_millis(10))
    ///     .await
    ///     .unwrap_err();
    /// assert!(matches!(err, beehive::Error::EmptyGroup { .. }));
    /// # });
    /// ```
    #[tracing::instrument(level = "debug", name = "send_to_group_sync", skip_all, fields(from = %self.name, group, msg_id = %message.header.id))]
    pub async fn send_to_group_sync(
        &self,
        group: &str,
        mut message: Message,
        timeout: Duration,
    ) -> Result<Vec<(String, Message)>> {
        message.header.sender = Some(self.sender);
        let timeout = self.effective_timeout(timeout);
        if self.shared.is_shutting_down() {
            return Err(Error::Shutdown {
                message: Some(Box::new(message)),
            });
        }
        let members = match self.shared.group_members(group) {
            Ok(m) => m,
            Err(e) => return Err(group_error(e, group, Some(message))),
        };
        message.header.sync = true;
        let id = message.header.id.clone();
        let names = members.iter().map(|m| m.name.to_string());
        let (registration, waiter) =
            self.shared
                .waiters
                .register_group(&id, names, &self.stats)?;
        let deadline = Instant::now() + timeout;
        let results = deliver_to_members(&members, message, Some(deadline)).await;
        let delivered = results.iter().filter(|(_, r)| r.is_ok()).count();
        self.stats
            .sent
            .fetch_add(delivered as u64, Ordering::Relaxed);
        loop {
            let notified = waiter.done.notified();
            if waiter.is_complete() {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let (answered, missing, shutdown) = waiter.take();
        if shutdown {
            return Err(Error::Shutdown { message: None });
        }
        if missing.is_empty() {
            return Ok(answered);
        }
        registration.expire();
        Err(Error::GroupTimeout {
            group: group.to_owned(),
            answered,
            missing,
            timeout,
        })
    }

    /// Answers a sync request: delivers `resp` to the request whose id is
    /// `resp.header.parent_id`. Never fails: an answer nobody waits for is dropped and counted
    /// (as late for a request that timed out, as unmatched otherwise). The `type` header does
    /// not affect delivery.
    pub fn send_resp(&self, mut resp: Message) -> RespOutcome {
        resp.header.sender = Some(self.sender);
        // No copy of the parent id for the logs: a delivered answer is logged before the
        // hand-off, a dropped one comes back with its id.
        trace!(from = %self.name, parent = %resp.header.parent_id, "response");
        let (outcome, dropped) = self.shared.waiters.respond(&self.name, resp);
        let parent = dropped
            .as_ref()
            .map(|m| m.header.parent_id.clone())
            .unwrap_or_default();
        match outcome {
            RespOutcome::Delivered => trace!(from = %self.name, "response delivered"),
            RespOutcome::Late => {
                debug!(from = %self.name, %parent, "late response dropped")
            }
            RespOutcome::Unmatched => {
                inc_unmatched(&self.shared);
                debug!(from = %self.name, %parent, "unmatched response dropped");
            }
        }
        outcome
    }

    /// True when a sync request with this id is waiting for its answer.
    pub fn is_waiting(&self, request_id: &Id) -> bool {
        self.shared.waiters.contains(request_id)
    }

    /// Counters of every module and endpoint on this bus.
    pub fn stats(&self) -> BusStats {
        self.shared.stats()
    }
}

/// Waits for a single answer until `deadline`; `None` when the time is up.
///
/// The timer is armed only when the answer has not come after the caller's task yielded once:
/// a module that answers in its handler on the caller's thread has answered by then, and a
/// timer entry registered and cancelled per call (two locks on the runtime's timer wheel) cost
/// more than the rest of the caller's side. The deadline was fixed before the yield, so a
/// timeout fires when it would have.
async fn wait_answer(
    slot: &mut oneshot::Receiver<Result<Message>>,
    deadline: Instant,
) -> Option<std::result::Result<Result<Message>, oneshot::error::RecvError>> {
    let mut yielded = false;
    let early = std::future::poll_fn(|cx| match Pin::new(&mut *slot).poll(cx) {
        Poll::Ready(answer) => Poll::Ready(Some(answer)),
        Poll::Pending if !yielded => {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Poll::Pending => Poll::Ready(None),
    })
    .await;
    match early {
        Some(answer) => Some(answer),
        // Boxed, as the wait for room: the timer is large, and most calls never arm it.
        None => Box::pin(tokio::time::timeout_at(deadline, slot))
            .await
            .ok(),
    }
}

fn inc_unmatched(shared: &Shared) {
    shared.unmatched_responses.fetch_add(1, Ordering::Relaxed);
}

fn group_error(e: LookupError, group: &str, message: Option<Message>) -> Error {
    match e {
        LookupError::Shutdown => Error::Shutdown {
            message: message.map(Box::new),
        },
        _ => Error::EmptyGroup {
            group: group.to_owned(),
            message: message.map(Box::new),
        },
    }
}
