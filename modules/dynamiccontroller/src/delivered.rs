//! What each node's watches delivered: per node, the objects its edge was sent (type, namespace,
//! name, uid, resource version), bounded in bytes per node and in all.
//!
//! edgecore serves its watches from its own store and replays them on every re-watch, so an
//! object deleted while the edge (or cloudcore) was away would stay at the edge for good. On
//! reconnect and on restore the controller compares this record with the objects the node's
//! listeners select now and sends a `delete` for each one missing; the record also spares a
//! reconnected edge the objects it already holds at their version.
//!
//! An entry goes through three states: *pending* (sent while the node was away, or sent in a
//! session that ended before it was confirmed: sent again on reconnect), *sent* (written in the
//! current session: cloudhub retries it until the edge acknowledges or the session ends) and
//! *confirmed* (the session outlived the send by [`CONFIRM_AFTER`]). A delete is kept as a
//! tombstone until it is confirmed, then forgotten.
//!
//! At the bound an object is delivered but not recorded (counted, logged once per node): a
//! delete of it missed while the edge was away is then not sent, as with no record at all.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use tracing::warn;

/// How long a session must outlive a send for the send to count as delivered (cloudhub
/// resends every few seconds until the edge acknowledges).
pub(crate) const CONFIRM_AFTER: Duration = Duration::from_secs(60);

/// Bytes an entry costs beyond its strings (map slots, state).
const ENTRY_OVERHEAD: usize = 64;

/// One delivered object, as persisted (short keys: the record shares a ConfigMap with the
/// node's watches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The type key (`<apiVersion>/<plural>`).
    #[serde(rename = "t")]
    pub type_key: String,
    /// Namespace, empty for cluster-scoped objects.
    #[serde(rename = "ns", default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(rename = "n")]
    pub name: String,
    /// The version last sent; empty when unknown.
    #[serde(rename = "rv", default, skip_serializing_if = "String::is_empty")]
    pub rv: String,
    /// A delete was sent and is not confirmed yet.
    #[serde(rename = "d", default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    #[serde(skip)]
    state: State,
    /// Added since the record was last confirmed: its confirmation is worth a write.
    #[serde(skip)]
    fresh: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// To be sent (again) when the node is connected.
    #[default]
    Pending,
    /// Written in the current session at this time.
    Sent(Instant),
    /// Delivered.
    Confirmed,
}

impl Entry {
    fn cost(&self, uid: &str) -> usize {
        ENTRY_OVERHEAD
            + uid.len()
            + self.type_key.len()
            + self.namespace.len()
            + self.name.len()
            + self.rv.len()
    }
}

/// An object to delete at the edge: it was delivered and no listener selects it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missed {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Default)]
struct NodeObjects {
    by_uid: HashMap<String, Entry>,
    bytes: usize,
    /// The bound was reached (logged once).
    full: bool,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: HashMap<String, NodeObjects>,
    connected: HashSet<String>,
    bytes: usize,
    objects: usize,
}

/// The record of every node (see the module documentation).
#[derive(Debug)]
pub(crate) struct Delivered {
    inner: Mutex<Inner>,
    per_node: usize,
    total: usize,
}

/// What [`Delivered::sent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// The set of objects changed (a new object or a new tombstone): persist it.
    Changed,
    /// Only the version or state of a known object changed.
    Updated,
    /// Beyond the bound: delivered, not recorded.
    Untracked,
    /// Nothing to record (a delete of an object never delivered, or no uid).
    Nothing,
}

impl Delivered {
    /// A record holding at most `per_node` bytes for one node and `total` for all.
    pub(crate) fn new(per_node: usize, total: usize) -> Self {
        Delivered {
            inner: Mutex::new(Inner::default()),
            per_node,
            total,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `node` was sent the object `meta` of type `type_key`: an `insert` or `update`, or a
    /// `delete` when `delete`.
    pub(crate) fn sent(
        &self,
        node: &str,
        type_key: &str,
        meta: &ObjectMeta,
        delete: bool,
    ) -> Recorded {
        let (Some(uid), Some(name)) = (meta.uid.as_deref(), meta.name.as_deref()) else {
            return Recorded::Nothing;
        };
        let namespace = meta.namespace.as_deref().unwrap_or("");
        let rv = meta.resource_version.as_deref().unwrap_or("");
        if uid.is_empty() {
            return Recorded::Nothing;
        }
        let mut inner = self.lock();
        let state = match inner.connected.contains(node) {
            true => State::Sent(Instant::now()),
            false => State::Pending,
        };
        let Inner {
            nodes,
            bytes,
            objects,
            ..
        } = &mut *inner;
        let objs = nodes.entry(node.to_owned()).or_default();
        if let Some(e) = objs.by_uid.get_mut(uid) {
            let before = e.cost(uid);
            let was_deleted = e.deleted;
            e.deleted = delete;
            e.rv = rv.to_owned();
            e.state = state;
            let after = e.cost(uid);
            objs.bytes = objs.bytes + after - before;
            *bytes = *bytes + after - before;
            return match delete != was_deleted {
                true => Recorded::Changed,
                false => Recorded::Updated,
            };
        }
        if delete {
            if objs.by_uid.is_empty() {
                nodes.remove(node);
            }
            return Recorded::Nothing;
        }
        let e = Entry {
            type_key: type_key.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            rv: rv.to_owned(),
            deleted: false,
            state,
            fresh: true,
        };
        let cost = e.cost(uid);
        if objs.bytes + cost > self.per_node || *bytes + cost > self.total {
            if !objs.full {
                objs.full = true;
                warn!(
                    node,
                    bytes = objs.bytes,
                    "the record of what the node's watches delivered is full (maxDeliveredBytesPerNode, maxDeliveredBytes): \
                     further objects are delivered unrecorded, and their deletes missed while the edge is away are not sent"
                );
            }
            if objs.by_uid.is_empty() {
                nodes.remove(node);
            }
            return Recorded::Untracked;
        }
        objs.bytes += cost;
        objs.by_uid.insert(uid.to_owned(), e);
        *bytes += cost;
        *objects += 1;
        Recorded::Changed
    }

    /// Whether `node` holds object `uid` at `rv` already (sent in this session or confirmed):
    /// sending it again would change nothing at the edge.
    pub(crate) fn holds(&self, node: &str, uid: &str, rv: &str) -> bool {
        let inner = self.lock();
        inner
            .nodes
            .get(node)
            .and_then(|o| o.by_uid.get(uid))
            .is_some_and(|e| {
                !e.deleted && e.state != State::Pending && !rv.is_empty() && e.rv == rv
            })
    }

    /// The objects of type `type_key` delivered to `node` that are not in `selected` (uids the
    /// node's listeners select now), and the deletes not confirmed since they were last sent
    /// while the node was away. The caller sends each a delete and records it.
    pub(crate) fn missed(
        &self,
        node: &str,
        type_key: &str,
        selected: &HashSet<String>,
    ) -> Vec<Missed> {
        let inner = self.lock();
        let Some(objs) = inner.nodes.get(node) else {
            return Vec::new();
        };
        objs.by_uid
            .iter()
            .filter(|(uid, e)| {
                e.type_key == type_key
                    && match e.deleted {
                        true => e.state == State::Pending,
                        false => !selected.contains(*uid),
                    }
            })
            .map(|(uid, e)| Missed {
                uid: uid.clone(),
                namespace: e.namespace.clone(),
                name: e.name.clone(),
            })
            .collect()
    }

    /// `node` connected: what is sent from now on is written.
    pub(crate) fn connected(&self, node: &str) {
        self.lock().connected.insert(node.to_owned());
    }

    /// `node` disconnected: what was sent in its session and not confirmed is pending again.
    pub(crate) fn disconnected(&self, node: &str) {
        let mut inner = self.lock();
        inner.connected.remove(node);
        if let Some(objs) = inner.nodes.get_mut(node) {
            for e in objs.by_uid.values_mut() {
                if matches!(e.state, State::Sent(_)) {
                    e.state = State::Pending;
                }
            }
        }
    }

    /// Confirms what connected nodes were sent [`CONFIRM_AFTER`] ago or earlier and forgets
    /// their confirmed deletes; returns the nodes whose persisted record is worth writing (a
    /// delete forgotten or a new object confirmed; a new version of a known object is not:
    /// after a restart it is merely sent once more).
    pub(crate) fn confirm(&self) -> Vec<String> {
        let mut inner = self.lock();
        let Inner {
            nodes,
            connected,
            bytes,
            objects,
        } = &mut *inner;
        let mut changed = Vec::new();
        for (node, objs) in nodes.iter_mut() {
            if !connected.contains(node) {
                continue;
            }
            let mut gone = 0;
            let mut freed = 0;
            let mut confirmed_fresh = false;
            objs.by_uid.retain(|uid, e| {
                if let State::Sent(at) = e.state
                    && at.elapsed() >= CONFIRM_AFTER
                {
                    e.state = State::Confirmed;
                    confirmed_fresh |= std::mem::take(&mut e.fresh);
                }
                let keep = !(e.deleted && e.state == State::Confirmed);
                if !keep {
                    gone += 1;
                    freed += e.cost(uid);
                }
                keep
            });
            if gone > 0 {
                objs.bytes -= freed;
                objs.full = false;
                *bytes -= freed;
                *objects -= gone;
            }
            if gone > 0 || confirmed_fresh {
                changed.push(node.clone());
            }
        }
        nodes.retain(|_, o| !o.by_uid.is_empty());
        changed
    }

    /// Takes `entries` read from `node`'s persisted record, unless this process has a record
    /// of its own for the node (then it is newer). Loaded entries with a version count as
    /// delivered; tombstones and entries without a version are pending. Entries beyond the
    /// bound are left out.
    pub(crate) fn load(&self, node: &str, entries: BTreeMap<String, Entry>) {
        let mut inner = self.lock();
        if inner.nodes.contains_key(node) {
            return;
        }
        let mut objs = NodeObjects::default();
        let mut added = 0;
        let mut cost_all = 0;
        for (uid, mut e) in entries {
            if uid.is_empty() || e.name.is_empty() {
                continue;
            }
            let cost = e.cost(&uid);
            if objs.bytes + cost > self.per_node || inner.bytes + cost_all + cost > self.total {
                objs.full = true;
                break;
            }
            e.state = match e.deleted || e.rv.is_empty() {
                true => State::Pending,
                false => State::Confirmed,
            };
            objs.bytes += cost;
            cost_all += cost;
            added += 1;
            objs.by_uid.insert(uid, e);
        }
        if added > 0 {
            inner.bytes += cost_all;
            inner.objects += added;
            inner.nodes.insert(node.to_owned(), objs);
        }
    }

    /// `node`'s record as persisted: entries not known to be delivered carry no version, so
    /// a restored record sends them again.
    pub(crate) fn snapshot(&self, node: &str) -> BTreeMap<String, Entry> {
        let inner = self.lock();
        let Some(objs) = inner.nodes.get(node) else {
            return BTreeMap::new();
        };
        objs.by_uid
            .iter()
            .map(|(uid, e)| {
                let mut e = e.clone();
                if e.state != State::Confirmed {
                    e.rv.clear();
                }
                (uid.clone(), e)
            })
            .collect()
    }

    /// Forgets object `uid` of `node` without a delete (its name now holds another object,
    /// which the edge is sent instead).
    pub(crate) fn remove(&self, node: &str, uid: &str) {
        let mut inner = self.lock();
        let Inner {
            nodes,
            bytes,
            objects,
            ..
        } = &mut *inner;
        let Some(objs) = nodes.get_mut(node) else {
            return;
        };
        if let Some(e) = objs.by_uid.remove(uid) {
            let cost = e.cost(uid);
            objs.bytes -= cost;
            *bytes -= cost;
            *objects -= 1;
        }
        if objs.by_uid.is_empty() {
            nodes.remove(node);
        }
    }

    /// Forgets `node` (the Node is gone).
    pub(crate) fn forget(&self, node: &str) {
        let mut inner = self.lock();
        inner.connected.remove(node);
        if let Some(objs) = inner.nodes.remove(node) {
            inner.bytes -= objs.bytes;
            inner.objects -= objs.by_uid.len();
        }
    }

    /// (objects, bytes) recorded, all nodes.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.objects, inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str = "v1/services";

    fn sent(d: &Delivered, node: &str, uid: &str, rv: &str, delete: bool) -> Recorded {
        let meta = ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(format!("s-{uid}")),
            uid: Some(uid.into()),
            resource_version: (!rv.is_empty()).then(|| rv.to_owned()),
            ..ObjectMeta::default()
        };
        d.sent(node, SVC, &meta, delete)
    }

    fn uids(m: Vec<Missed>) -> Vec<String> {
        let mut v: Vec<String> = m.into_iter().map(|m| m.uid).collect();
        v.sort();
        v
    }

    #[test]
    fn objects_no_longer_selected_are_missed_deletes() {
        let d = Delivered::new(1 << 20, 1 << 20);
        d.connected("a");
        assert_eq!(sent(&d, "a", "u1", "1", false), Recorded::Changed);
        assert_eq!(sent(&d, "a", "u2", "2", false), Recorded::Changed);
        assert_eq!(sent(&d, "a", "u2", "3", false), Recorded::Updated);
        let selected: HashSet<String> = ["u1".to_owned()].into();
        assert_eq!(uids(d.missed("a", SVC, &selected)), ["u2"]);
        assert!(d.missed("a", "v1/endpoints", &HashSet::new()).is_empty());
        assert!(d.missed("b", SVC, &HashSet::new()).is_empty());
        // A delete never delivered records nothing.
        assert_eq!(sent(&d, "b", "u9", "", true), Recorded::Nothing);
        assert_eq!(d.sizes().0, 2);
    }

    #[test]
    fn a_delete_sent_while_away_or_in_a_session_that_ended_is_sent_again() {
        let d = Delivered::new(1 << 20, 1 << 20);
        sent(&d, "a", "u1", "1", false);
        // Away: pending; nothing counts as held.
        assert!(!d.holds("a", "u1", "1"));
        assert_eq!(sent(&d, "a", "u1", "", true), Recorded::Changed);
        let none = HashSet::new();
        assert_eq!(uids(d.missed("a", SVC, &none)), ["u1"]);
        // Sent again in a session: not missed while the session lives...
        d.connected("a");
        sent(&d, "a", "u1", "", true);
        assert!(d.missed("a", SVC, &none).is_empty());
        // ...and missed again once it ended unconfirmed.
        d.disconnected("a");
        assert_eq!(uids(d.missed("a", SVC, &none)), ["u1"]);
        assert!(d.confirm().is_empty(), "nothing confirmed for a node away");
    }

    #[test]
    fn confirmed_deletes_are_forgotten_and_versions_held() {
        let d = Delivered::new(1 << 20, 1 << 20);
        d.connected("a");
        sent(&d, "a", "u1", "5", false);
        assert!(d.holds("a", "u1", "5"));
        assert!(!d.holds("a", "u1", "6"));
        sent(&d, "a", "u2", "5", false);
        sent(&d, "a", "u2", "", true);
        // Confirmation needs CONFIRM_AFTER: pretend the sends are old.
        for e in d.lock().nodes.get_mut("a").unwrap().by_uid.values_mut() {
            e.state = State::Sent(Instant::now() - CONFIRM_AFTER);
        }
        assert_eq!(d.confirm(), ["a"]);
        assert_eq!(d.sizes().0, 1, "the confirmed delete is forgotten");
        d.disconnected("a");
        assert!(
            d.holds("a", "u1", "5"),
            "confirmed stays held across sessions"
        );
    }

    #[test]
    fn the_record_is_bounded_per_node_and_in_all() {
        let one = Entry {
            type_key: SVC.into(),
            namespace: "ns".into(),
            name: "s-u00".into(),
            rv: "1".into(),
            deleted: false,
            state: State::Pending,
            fresh: false,
        }
        .cost("u00");
        let d = Delivered::new(10 * one, 15 * one);
        d.connected("a");
        let mut untracked = 0;
        for i in 0..20 {
            if sent(&d, "a", &format!("u{i:02}"), "1", false) == Recorded::Untracked {
                untracked += 1;
            }
        }
        assert_eq!((d.sizes().0, untracked), (10, 10));
        for i in 0..20 {
            sent(&d, "b", &format!("u{i:02}"), "1", false);
        }
        assert_eq!(d.sizes(), (15, 15 * one), "the global bound holds");
        d.forget("a");
        assert_eq!(d.sizes(), (5, 5 * one));
    }

    #[test]
    fn a_persisted_record_round_trips_without_unconfirmed_versions() {
        let d = Delivered::new(1 << 20, 1 << 20);
        d.connected("a");
        sent(&d, "a", "u1", "7", false);
        d.lock()
            .nodes
            .get_mut("a")
            .unwrap()
            .by_uid
            .get_mut("u1")
            .unwrap()
            .state = State::Confirmed;
        sent(&d, "a", "u2", "8", false);
        let snap = d.snapshot("a");
        assert_eq!(snap["u1"].rv, "7");
        assert_eq!(
            snap["u2"].rv, "",
            "sent, not confirmed: sent again after a restart"
        );
        let text = serde_json::to_string(&snap).unwrap();
        let back: BTreeMap<String, Entry> = serde_json::from_str(&text).unwrap();
        let restarted = Delivered::new(1 << 20, 1 << 20);
        restarted.load("a", back);
        assert!(restarted.holds("a", "u1", "7"));
        assert!(!restarted.holds("a", "u2", "8"));
        assert_eq!(
            uids(restarted.missed("a", SVC, &HashSet::new())),
            ["u1", "u2"]
        );
    }
}
