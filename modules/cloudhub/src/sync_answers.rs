//! Which node each synchronous request was sent to, so that only that node can answer it. An
//! edge's answer carries the request's id as its parent; without this table any connected
//! edge that learned or guessed the id could answer a request meant for another node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use beehive::Id;

/// Requests remembered at once before entries whose caller stopped waiting are dropped.
const PRUNE_ABOVE: usize = 4096;

/// Whether an answer may be delivered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The request went to this node: deliver the answer (the entry is removed).
    Mine,
    /// The request went to another node: drop the answer.
    OtherNode(Arc<str>),
    /// No request with this id was sent to an edge (or its answer came already).
    Unknown,
}

/// Request id → the node it was sent to.
#[derive(Debug, Default)]
pub(crate) struct SyncAnswers {
    sent: Mutex<HashMap<Id, Arc<str>>>,
}

impl SyncAnswers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Id, Arc<str>>> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Request `id` is on its way to `node`. Past [`PRUNE_ABOVE`] entries, those for which
    /// `waiting` is false (answered, timed out) are forgotten first, so the table holds about
    /// as many entries as callers are waiting.
    pub(crate) fn sent(&self, id: &Id, node: &str, waiting: impl Fn(&Id) -> bool) {
        let mut sent = self.lock();
        if sent.len() >= PRUNE_ABOVE {
            sent.retain(|id, _| waiting(id));
        }
        sent.insert(id.clone(), Arc::from(node));
    }

    /// Whether `node` may answer request `parent`; an answer from the node it went to takes
    /// the entry.
    pub(crate) fn claim(&self, parent: &Id, node: &str) -> Claim {
        let mut sent = self.lock();
        match sent.get(parent) {
            None => Claim::Unknown,
            Some(to) if &**to == node => {
                sent.remove(parent);
                Claim::Mine
            }
            Some(to) => Claim::OtherNode(to.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_node_a_request_went_to_answers_it_and_only_once() {
        let t = SyncAnswers::default();
        let id = Id::new_v4();
        t.sent(&id, "edge-a", |_| true);
        assert_eq!(
            t.claim(&id, "edge-b"),
            Claim::OtherNode(Arc::from("edge-a"))
        );
        assert_eq!(t.claim(&id, "edge-a"), Claim::Mine);
        assert_eq!(t.claim(&id, "edge-a"), Claim::Unknown);
        assert_eq!(t.claim(&Id::new_v4(), "edge-a"), Claim::Unknown);
    }

    #[test]
    fn entries_nobody_waits_for_are_dropped_when_the_table_is_full() {
        let t = SyncAnswers::default();
        let ids: Vec<Id> = (0..PRUNE_ABOVE).map(|_| Id::new_v4()).collect();
        for id in &ids {
            t.sent(id, "edge-a", |_| true);
        }
        let keep = ids[7].clone();
        t.sent(&Id::new_v4(), "edge-a", |id| *id == keep);
        assert_eq!(t.lock().len(), 2);
        assert_eq!(t.claim(&keep, "edge-a"), Claim::Mine);
    }
}
