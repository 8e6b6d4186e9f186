//! REST calls waiting for their edge service's answer, by request id, each tied to the node the
//! request was sent to: an answer is taken only from that node.

use std::collections::HashMap;
use std::sync::Mutex;

use beehive::{Id, Message};
use tokio::sync::oneshot;

/// What became of an answer handed to [`Waiters::answer`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    /// Given to the waiting call.
    Delivered,
    /// Nobody waits for this id (never asked, or the call ended).
    Unmatched,
    /// The id is waited for, but the request went to another node: left waiting.
    OtherNode,
}

#[derive(Debug)]
struct Waiter {
    node: String,
    tx: oneshot::Sender<Message>,
}

/// The table of waiting calls.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    waiting: Mutex<HashMap<Id, Waiter>>,
}

/// A registration; dropping it removes it (the call ended, answered or not).
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    waiters: &'a Waiters,
    id: Id,
    rx: Option<oneshot::Receiver<Message>>,
}

impl Waiting<'_> {
    /// The answer; `None` when the table was dropped.
    pub(crate) async fn answer(&mut self) -> Option<Message> {
        self.rx.as_mut()?.await.ok()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waiters
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Waiters {
    /// Waits for the answer to request `id` sent to `node`.
    pub(crate) fn wait(&self, id: Id, node: &str) -> Waiting<'_> {
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id.clone(),
                Waiter {
                    node: node.to_owned(),
                    tx,
                },
            );
        Waiting {
            waiters: self,
            id,
            rx: Some(rx),
        }
    }

    /// Hands `msg` (whose parent id names the request) from `node` to its waiting call.
    pub(crate) fn answer(&self, node: &str, msg: Message) -> Answered {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        match waiting.get(&msg.header.parent_id) {
            None => return Answered::Unmatched,
            Some(w) if w.node != node => return Answered::OtherNode,
            Some(_) => {}
        }
        let Some(w) = waiting.remove(&msg.header.parent_id) else {
            return Answered::Unmatched;
        };
        match w.tx.send(msg) {
            Ok(()) => Answered::Delivered,
            Err(_) => Answered::Unmatched,
        }
    }

    /// Calls waiting now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_is_taken_only_from_the_node_asked() {
        let w = Waiters::default();
        let id = Id::new_v4();
        let mut waiting = w.wait(id.clone(), "e1");
        let answer = Message::with_parent(id.clone());
        assert_eq!(w.answer("e2", answer.clone()), Answered::OtherNode);
        assert_eq!(w.answer("e1", answer.clone()), Answered::Delivered);
        assert_eq!(waiting.answer().await.unwrap().header.parent_id, id);
        assert_eq!(w.answer("e1", answer), Answered::Unmatched, "answered once");
        let other = w.wait(Id::new_v4(), "e1");
        assert_eq!(w.len(), 1);
        drop(other);
        assert_eq!(w.len(), 0, "an ended call leaves nothing behind");
    }
}
