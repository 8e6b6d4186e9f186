//! The table that matches responses to waiting sync requests by parent id.
//!
//! A waiter is registered *before* its request is enqueued and holds a one-shot slot that keeps
//! the value, so an answer that arrives before the caller starts waiting is never lost (Go's
//! unbuffered hand-off loses ≈0.1% of prompt answers).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::mapref::entry::Entry;
use tokio::sync::{Notify, oneshot};

use crate::{Id, Message};
use crate::error::{Error, Result};
use crate::stats::{ModuleStats, inc};

/// How many expired request ids are remembered so that late answers can be told apart from
/// answers to unknown requests.
const EXPIRED_MEMORY: usize = 4096;

/// What [`crate::Endpoint::send_resp`] did with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespOutcome {
    /// Handed to the waiting request.
    Delivered,
    /// The request had already timed out; dropped and counted as late for its sender.
    Late,
    /// No request with that id is waiting; dropped and counted.
    Unmatched,
}

#[derive(Debug)]
enum Waiter {
    One {
        slot: oneshot::Sender<Result<Message>>,
    },
    Group(Arc<GroupWaiter>),
}

#[derive(Debug)]
pub(crate) struct GroupWaiter {
    state: Mutex<GroupState>,
    pub(crate) done: Notify,
}

#[derive(Debug)]
struct GroupState {
    expected: HashSet<String>,
    answers: Vec<(String, Message)>,
    shutdown: bool,
}

impl GroupWaiter {
    /// True once every expected member has answered (or the bus shut down).
    pub(crate) fn is_complete(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.shutdown || s.answers.len() == s.expected.len()
    }

    /// The answers so far, and the members still missing (sorted).
    pub(crate) fn take(&self) -> (Vec<(String, Message)>, Vec<String>, bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let answers = std::mem::take(&mut s.answers);
        let answered: HashSet<&str> = answers.iter().map(|(m, _)| m.as_str()).collect();
        let mut missing: Vec<String> = s
            .expected
            .iter()
            .filter(|m| !answered.contains(m.as_str()))
            .cloned()
            .collect();
        missing.sort();
        (answers, missing, s.shutdown)
    }
}

/// Concurrent request-id → waiter table.
/// One table entry: the waiter, the stats of the module waiting, and a token that tells this
/// registration apart from a later one that reuses the id.
#[derive(Debug)]
struct Slot {
    waiter: Waiter,
    owner: Arc<ModuleStats>,
    token: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Waiters {
    /// Keyed by request id; the key is shared with the [`Registration`] (one allocation per
    /// request, not two).
    table: crate::FastMap<Id, Slot>,
    expired: Mutex<Expired>,
    next_token: AtomicU64,
}

#[derive(Debug, Default)]
struct Expired {
    order: VecDeque<Id>,
    owners: HashMap<Id, Arc<ModuleStats>>,
}

/// Removes its entry when the request finishes in any way (answer, timeout, cancellation).
#[derive(Debug)]
pub(crate) struct Registration<'a> {
    waiters: &'a Waiters,
    id: Id,
    token: u64,
    owner: &'a Arc<ModuleStats>,
    /// The entry is known to be gone (taken by the answer, or removed here already): nothing
    /// to remove on drop.
    removed: bool,
}

impl Registration<'_> {
    /// The request id.
    pub(crate) fn id(&self) -> &Id {
        &self.id
    }

    /// The single waiter got a value through its slot: whoever sent it (the answer or the
    /// shutdown) took the entry out of the table first, so dropping this skips a second
    /// lookup.
    pub(crate) fn answered(mut self) {
        self.removed = true;
    }

    /// The request's time is up. Remembers the id as expired, then removes the waiter, so an
    /// answer arriving meanwhile finds one or the other (delivered, or counted as late, never
    /// as unmatched); then takes an answer that slipped in at the last moment. Without one the
    /// request counts as timed out.
    pub(crate) fn expire_one(
        mut self,
        mut slot: oneshot::Receiver<Result<Message>>,
    ) -> Option<Result<Message>> {
        self.remember_expired();
        self.remove();
        if let Ok(answer) = slot.try_recv() {
            self.forget_expired();
            return Some(answer);
        }
        inc(&self.owner.sync_timeouts);
        None
    }

    /// Takes this registration's entry out of the table (not a later registration's that
    /// reuses the id).
    fn remove(&mut self) {
        if !self.removed {
            self.removed = true;
            let token = self.token;
            self.waiters
                .table
                .remove_if(&self.id, |_, slot| slot.token == token);
        }
    }

    /// The request expired: count it, forget the waiter, and remember the id so that a late
    /// answer is counted as late rather than unmatched.
    pub(crate) fn expire(self) {
        inc(&self.owner.sync_timeouts);
        self.remember_expired();
        // `drop` removes the entry, after the id is remembered: an answer in between is late.
    }

    fn remember_expired(&self) {
        let mut expired = self
            .waiters
            .expired
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if expired.order.len() >= EXPIRED_MEMORY
            && let Some(old) = expired.order.pop_front()
        {
            expired.owners.remove(&old);
        }
        expired.order.push_back(self.id.clone());
        expired.owners.insert(self.id.clone(), self.owner.clone());
    }

    /// The request was answered after all: a repeated answer is unmatched, not late.
    fn forget_expired(&self) {
        self.waiters
            .expired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .owners
            .remove(&self.id);
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.remove();
    }
}

impl Waiters {
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn contains(&self, id: &Id) -> bool {
        self.table.contains_key(id)
    }

    fn check_id(id: &Id) -> Result<()> {
        if id.is_empty() {
            Err(Error::EmptyMessageId)
        } else {
            Ok(())
        }
    }

    /// Registers a single-answer waiter for request `id`.
    pub(crate) fn register_one<'a>(
        &'a self,
        id: &Id,
        owner: &'a Arc<ModuleStats>,
    ) -> Result<(Registration<'a>, oneshot::Receiver<Result<Message>>)> {
        Self::check_id(id)?;
        let (tx, rx) = oneshot::channel();
        let registration = self.insert(id, Waiter::One { slot: tx }, owner)?;
        Ok((registration, rx))
    }

    /// Registers a waiter that needs one answer from each of `members`.
    pub(crate) fn register_group<'a>(
        &'a self,
        id: &Id,
        members: impl IntoIterator<Item = String>,
        owner: &'a Arc<ModuleStats>,
    ) -> Result<(Registration<'a>, Arc<GroupWaiter>)> {
        Self::check_id(id)?;
        let waiter = Arc::new(GroupWaiter {
            state: Mutex::new(GroupState {
                expected: members.into_iter().collect(),
                answers: Vec::new(),
                shutdown: false,
            }),
            done: Notify::new(),
        });
        let registration = self.insert(id, Waiter::Group(waiter.clone()), owner)?;
        Ok((registration, waiter))
    }

    fn insert<'a>(
        &'a self,
        id: &Id,
        waiter: Waiter,
        owner: &'a Arc<ModuleStats>,
    ) -> Result<Registration<'a>> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let key = id.clone();
        match self.table.entry(key.clone()) {
            Entry::Occupied(_) => Err(Error::DuplicateMessageId(id.to_string())),
            Entry::Vacant(v) => {
                v.insert(Slot {
                    waiter,
                    owner: owner.clone(),
                    token,
                });
                Ok(Registration {
                    waiters: self,
                    id: key,
                    token,
                    owner,
                    removed: false,
                })
            }
        }
    }

    /// Delivers `resp` to the waiter of `resp.header.parent_id`; `responder` names the module
    /// answering (group waiters count each member once).
    pub(crate) fn respond(&self, responder: &str, resp: Message) -> (RespOutcome, Option<Message>) {
        if resp.header.parent_id.is_empty() {
            return (RespOutcome::Unmatched, Some(resp));
        }
        // Single waiters are removed atomically with the hand-off; group waiters stay until
        // every member answered.
        let single = self
            .table
            .remove_if(&resp.header.parent_id, |_, slot| {
                matches!(slot.waiter, Waiter::One { .. })
            });
        if let Some((
            _,
            Slot {
                waiter: Waiter::One { slot },
                owner,
                ..
            },
        )) = single
        {
            return match slot.send(Ok(resp)) {
                Ok(()) => (RespOutcome::Delivered, None),
                // The caller gave up between its timeout and the removal of its entry.
                Err(returned) => {
                    inc(&owner.late_responses);
                    (RespOutcome::Late, returned.ok())
                }
            };
        }
        let group = self
            .table
            .get(&resp.header.parent_id)
            .and_then(|e| match &e.value().waiter {
                Waiter::Group(g) => Some(g.clone()),
                Waiter::One { .. } => None,
            });
        if let Some(group) = group {
            let mut s = group.state.lock().unwrap_or_else(|e| e.into_inner());
            let fresh =
                s.expected.contains(responder) && !s.answers.iter().any(|(m, _)| m == responder);
            if !fresh {
                return (RespOutcome::Unmatched, Some(resp));
            }
            s.answers.push((responder.to_owned(), resp));
            if s.answers.len() == s.expected.len() {
                drop(s);
                group.done.notify_one();
            }
            return (RespOutcome::Delivered, None);
        }
        let expired = self.expired.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(owner) = expired.owners.get(&resp.header.parent_id) {
            inc(&owner.late_responses);
            (RespOutcome::Late, Some(resp))
        } else {
            (RespOutcome::Unmatched, Some(resp))
        }
    }

    /// Wakes every waiter with [`Error::Shutdown`].
    pub(crate) fn shutdown(&self) {
        let ids: Vec<Id> = self.table.iter().map(|e| e.key().clone()).collect();
        for id in ids {
            match self
                .table
                .remove_if(&id, |_, slot| matches!(slot.waiter, Waiter::One { .. }))
            {
                Some((
                    _,
                    Slot {
                        waiter: Waiter::One { slot },
                        ..
                    },
                )) => {
                    let _ = slot.send(Err(Error::Shutdown { message: None }));
                }
                _ => {
                    if let Some(e) = self.table.get(&id)
                        && let Waiter::Group(g) = &e.value().waiter
                    {
                        g.state.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
                        g.done.notify_one();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer_to(id: &Id) -> Message {
        let mut m = Message::new();
        m.header.parent_id = id.clone();
        m
    }

    /// The interleaving a timeout races with an answer from another thread: the answer comes
    /// after the id is remembered as expired and the waiter is gone, before the timeout is
    /// counted.
    #[test]
    fn an_answer_while_a_timeout_is_processed_is_late_not_unmatched() {
        let waiters = Waiters::default();
        let owner = Arc::new(ModuleStats::default());
        let id = Message::new().header.id;
        let (mut registration, _slot) = waiters.register_one(&id, &owner).unwrap();
        registration.remember_expired();
        registration.remove();
        let (outcome, _) = waiters.respond("meta", answer_to(&id));
        assert_eq!(outcome, RespOutcome::Late);
        assert_eq!(owner.late_responses.load(Ordering::Relaxed), 1);
    }

    /// `expire_one` takes the waiter out of the table only once its id is remembered as
    /// expired: held at the memory's lock, it has not removed the waiter yet.
    #[test]
    fn a_timeout_remembers_its_id_before_it_removes_the_waiter() {
        let waiters = Arc::new(Waiters::default());
        let owner = Arc::new(ModuleStats::default());
        let id = Message::new().header.id;
        let memory = waiters.expired.lock().unwrap();
        let expiring = {
            let (waiters, owner, id) = (waiters.clone(), owner.clone(), id.clone());
            std::thread::spawn(move || {
                let (registration, slot) = waiters.register_one(&id, &owner).unwrap();
                registration.expire_one(slot).is_none()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            waiters.table.contains_key(&id),
            "the waiter was removed before its id was remembered: an answer now is unmatched"
        );
        drop(memory);
        assert!(expiring.join().unwrap());
        assert!(!waiters.table.contains_key(&id));
        assert_eq!(waiters.respond("meta", answer_to(&id)).0, RespOutcome::Late);
    }

    #[test]
    fn an_answer_that_slipped_in_before_the_timeout_is_taken_and_not_remembered_as_expired() {
        let waiters = Waiters::default();
        let owner = Arc::new(ModuleStats::default());
        let id = Message::new().header.id;
        let (registration, slot) = waiters.register_one(&id, &owner).unwrap();
        assert_eq!(
            waiters.respond("meta", answer_to(&id)).0,
            RespOutcome::Delivered
        );
        assert!(registration.expire_one(slot).is_some());
        assert_eq!(owner.sync_timeouts.load(Ordering::Relaxed), 0);
        // A second answer to the same request is unknown, not late.
        assert_eq!(
            waiters.respond("meta", answer_to(&id)).0,
            RespOutcome::Unmatched
        );
    }

    #[test]
    fn a_timeout_with_no_answer_is_counted_once_and_its_late_answer_is_late() {
        let waiters = Waiters::default();
        let owner = Arc::new(ModuleStats::default());
        let id = Message::new().header.id;
        let (registration, slot) = waiters.register_one(&id, &owner).unwrap();
        assert!(registration.expire_one(slot).is_none());
        assert_eq!(owner.sync_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(waiters.respond("meta", answer_to(&id)).0, RespOutcome::Late);
    }
}
