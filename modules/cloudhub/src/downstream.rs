//! Per-node delivery state (docs/hub-protocol.md, a window per node instead of KubeEdge's one
//! blocking sender): a paced no-ACK
//! FIFO, and an ACK store keyed by object UID (coalescing) feeding a bounded window of
//! in-flight messages that are re-sent every 5 s, 5 writes in all, then re-queued with
//! back-off. At most one version of an object is in flight: edgecore handles messages
//! concurrently, so two versions written back to back can be applied in either order (an
//! update applied after its delete brings the object back). Pure state: the session actor
//! feeds it and writes what it returns.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use beehive::constants::operation as op;
use beehive::{Backoff, Message};
use kubeedge_api::version::is_newer;
use tokio::time::Instant;

use crate::classify::{ObjectInfo, is_delete, object_info};
use crate::metrics::DropReason;

/// Re-send period and writes per round, as KubeEdge's: every 5 s, 5 writes.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(5);
pub(crate) const WRITES_PER_ROUND: u32 = 5;
/// KubeEdge's back-off of a key after an unacknowledged round: 5 ms doubling, at most 1000 s.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(1000));
/// Objects whose delete the edge acknowledged, remembered per node so that a version still on
/// its way (a watch event or a sync pass that read it before the delete) cannot bring them
/// back. UIDs are never reused; late versions arrive within seconds, so a short list does.
const GONE_REMEMBERED: usize = 64;

/// Limits of one node's delivery.
#[derive(Debug, Clone)]
pub(crate) struct DownConfig {
    pub(crate) window: usize,
    pub(crate) queue_limit: usize,
    pub(crate) retry_interval: Duration,
    pub(crate) burst: f64,
    pub(crate) rate: f64,
}

/// An ACK-class message the node's delivery state did not take, handed back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// [`DropReason::Stale`] (superseded: nothing is lost), [`DropReason::QueueFull`] (the
    /// caller must leave a record for the sync loop) or [`DropReason::Malformed`].
    pub(crate) reason: DropReason,
    /// The detail, for the log.
    pub(crate) why: &'static str,
    pub(crate) msg: Box<Message>,
}

/// What happened to an ACK-class message offered to the node.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Intake {
    /// Waiting to be written.
    Queued,
    /// Not delivered.
    Dropped(Dropped),
    /// The acknowledgement record must be read first (first sight of this UID); call
    /// [`Downstream::lookup_done`] with the result.
    Lookup { key: String, info: ObjectInfo },
    /// A record lookup for this UID is already running; the message waits for it.
    Waiting,
}

/// A message the edge acknowledged.
#[derive(Debug)]
pub(crate) struct Acked {
    pub(crate) msg: Message,
    pub(crate) info: Option<ObjectInfo>,
    pub(crate) delete: bool,
}

/// What to do now.
#[derive(Debug, Default)]
pub(crate) struct Pump {
    /// Messages to write, in order (new ACK-class messages, re-sends, no-ACK messages).
    pub(crate) writes: Vec<Message>,
    /// How many of `writes` are re-sends.
    pub(crate) resends: u64,
    /// When to pump again.
    pub(crate) next: Option<Instant>,
}

/// What a node's delivery state still held when its session ended.
#[derive(Debug, Default)]
pub(crate) struct Abandoned {
    /// No-ACK messages never written (lost: nothing redelivers them).
    pub(crate) no_ack: usize,
    /// ACK-class messages never written (queued, or waiting on a record lookup).
    pub(crate) ack: usize,
    /// ACK-class messages written but not acknowledged: the edge may have them; the sync
    /// loop re-sends them if it does not.
    pub(crate) unacked: usize,
    /// ACK-class messages (written or not) whose key may have no ObjectSync record (its
    /// lookup failed or was running): the caller makes sure one exists so the sync loop
    /// redelivers them.
    pub(crate) unrecorded: Vec<Message>,
}

#[derive(Debug)]
struct Entry {
    msg: Message,
    info: Option<ObjectInfo>,
    delete: bool,
    queued: bool,
    /// Id of the in-flight write: of `msg`, or of an older version `msg` waits behind.
    flight: Option<String>,
    /// `msg` was written before (a back-off round re-sends it).
    written: bool,
    /// The key's ObjectSync record is known to exist (found, created, or acknowledged).
    recorded: bool,
}

#[derive(Debug)]
struct Flight {
    key: String,
    writes: u32,
    next: Instant,
    /// The written version's resource version (the acknowledged one once its ACK arrives).
    rv: String,
}

/// One node's downstream state. Empty collections do not allocate, so an idle node costs
/// only this struct.
#[derive(Debug)]
pub(crate) struct Downstream {
    cfg: DownConfig,
    no_ack: VecDeque<Message>,
    tokens: f64,
    refilled: Instant,
    entries: HashMap<String, Entry>,
    queue: VecDeque<String>,
    inflight: HashMap<String, Flight>,
    /// Last resource version the edge acknowledged (or the record holds), per key.
    acked: HashMap<String, String>,
    lookups: HashMap<String, Message>,
    delayed: Vec<(Instant, String)>,
    backoff: HashMap<String, u32>,
    /// Keys whose delete was acknowledged, oldest first (at most [`GONE_REMEMBERED`]).
    gone: VecDeque<String>,
}

fn rv(msg: &Message) -> &str {
    &msg.header.resource_version
}

impl Downstream {
    pub(crate) fn new(cfg: DownConfig, now: Instant) -> Self {
        Downstream {
            tokens: cfg.burst,
            cfg,
            no_ack: VecDeque::new(),
            refilled: now,
            entries: HashMap::new(),
            queue: VecDeque::new(),
            inflight: HashMap::new(),
            acked: HashMap::new(),
            lookups: HashMap::new(),
            delayed: Vec::new(),
            backoff: HashMap::new(),
            gone: VecDeque::new(),
        }
    }

    /// Queues a no-ACK message; hands it back when the queue is full.
    pub(crate) fn push_no_ack(&mut self, msg: Message) -> Result<(), Box<Message>> {
        if self.no_ack.len() >= self.cfg.queue_limit {
            return Err(Box::new(msg));
        }
        self.no_ack.push_back(msg);
        Ok(())
    }

    fn put(&mut self, key: String, msg: Message, info: Option<ObjectInfo>, recorded: bool) {
        let delete = is_delete(&msg, info.as_ref());
        let entry = self.entries.entry(key.clone()).or_insert_with(|| Entry {
            msg: Message::default(),
            info: None,
            delete: false,
            queued: false,
            flight: None,
            written: false,
            recorded: false,
        });
        entry.recorded |= recorded;
        entry.msg = msg;
        entry.written = false;
        entry.info = info;
        entry.delete = delete;
        // With a version in flight, this one waits for its ACK (or the end of its round).
        if !entry.queued && entry.flight.is_none() {
            entry.queued = true;
            self.queue.push_back(key);
        }
    }

    fn full(&self) -> bool {
        self.entries.len() + self.lookups.len() >= self.cfg.queue_limit
    }

    /// Offers an ACK-class message (KubeEdge's rules; here a message without a UID is keyed by
    /// its id and delivered without a record; unparsable versions count as newer).
    pub(crate) fn intake_ack(&mut self, msg: Message) -> Intake {
        self.intake(msg, false)
    }

    /// Offers an acknowledged message that is recorded nowhere (the sender keeps its own
    /// record): retried and deduplicated like [`Self::intake_ack`] within the session, never
    /// looked up. Its key is its own (`watch:<uid>`), so it never stands for a record of the
    /// same object that another module's message needs.
    pub(crate) fn intake_unrecorded(&mut self, msg: Message) -> Intake {
        self.intake(msg, true)
    }

    fn intake(&mut self, msg: Message, unrecorded: bool) -> Intake {
        let info = object_info(&msg);
        let delete = is_delete(&msg, info.as_ref());
        if rv(&msg).is_empty() && !delete {
            return dropped(
                DropReason::Malformed,
                "ack-class message without resourceVersion",
                msg,
            );
        }
        let key = match &info {
            Some(i) if unrecorded => format!("watch:{}", i.uid),
            Some(i) => i.uid.clone(),
            None => format!("msg:{}", msg.header.id),
        };
        let real_delete = msg.route.operation == op::DELETE;
        if !real_delete && msg.route.operation != op::RESPONSE && self.gone.contains(&key) {
            return dropped(
                DropReason::Stale,
                "the object's delete was acknowledged",
                msg,
            );
        }
        if let Some(e) = self.entries.get(&key) {
            // A delete replaces anything. A version marked for deletion (a delete by
            // KubeEdge's rules, but applied by the edge as an update) must still be newer,
            // and nothing but another delete replaces a delete operation.
            let stale = !real_delete
                && msg.route.operation != op::RESPONSE
                && (e.msg.route.operation == op::DELETE
                    || (e.delete && !delete)
                    || !is_newer(rv(&msg), rv(&e.msg)));
            if stale {
                return dropped(DropReason::Stale, "not newer than the pending version", msg);
            }
            self.put(key, msg, info, false);
            return Intake::Queued;
        }
        if delete && let Some(waiting) = self.lookups.get_mut(&key) {
            // The update waiting for its record lookup is superseded: queued after the lookup,
            // it would reach the edge after the delete and bring the object back.
            *waiting = msg;
            return Intake::Waiting;
        }
        if self.full() {
            return dropped(DropReason::QueueFull, "node queue full", msg);
        }
        if delete || msg.route.operation == op::RESPONSE || info.is_none() {
            self.put(key, msg, info, false);
            return Intake::Queued;
        }
        if let Some(acked) = self.acked.get(&key) {
            if !is_newer(rv(&msg), acked) {
                return dropped(
                    DropReason::Stale,
                    "not newer than the acknowledged version",
                    msg,
                );
            }
            // Acknowledged here before, so its record exists (or its write is queued).
            self.put(key, msg, info, true);
            return Intake::Queued;
        }
        if unrecorded {
            // No record to read: "recorded" as far as the session's end is concerned.
            self.put(key, msg, info, true);
            return Intake::Queued;
        }
        if let Some(waiting) = self.lookups.get_mut(&key) {
            if !is_newer(rv(&msg), rv(waiting)) {
                return dropped(DropReason::Stale, "not newer than the pending version", msg);
            }
            *waiting = msg;
            return Intake::Waiting;
        }
        self.lookups.insert(key.clone(), msg);
        Intake::Lookup {
            key,
            info: info.unwrap_or_default(),
        }
    }

    /// The record lookup for `key` finished: `Some(rv)` is the recorded version (`""` counts as
    /// `"0"`: KubeEdge drops every message for such an object forever), `None` means it failed and
    /// the message is delivered anyway.
    pub(crate) fn lookup_done(&mut self, key: &str, recorded: Option<String>) -> Intake {
        let Some(msg) = self.lookups.remove(key) else {
            // The session forgot it (ended); nothing was waiting.
            return Intake::Waiting;
        };
        let has_record = recorded.is_some();
        let info = object_info(&msg);
        let delete = is_delete(&msg, info.as_ref());
        if let Some(recorded) = recorded {
            let recorded = if recorded.is_empty() {
                "0".to_owned()
            } else {
                recorded
            };
            let newer = delete || is_newer(rv(&msg), &recorded);
            self.acked.insert(key.to_owned(), recorded);
            if !newer {
                return dropped(
                    DropReason::Stale,
                    "not newer than the recorded version",
                    msg,
                );
            }
        }
        self.put(key.to_owned(), msg, info, has_record);
        Intake::Queued
    }

    /// Gives back the memory of empty collections: an idle node should cost only the struct.
    fn compact(&mut self) {
        if self.entries.is_empty() && self.entries.capacity() > 0 {
            self.entries = HashMap::new();
        }
        if self.inflight.is_empty() && self.inflight.capacity() > 0 {
            self.inflight = HashMap::new();
        }
        if self.lookups.is_empty() && self.lookups.capacity() > 0 {
            self.lookups = HashMap::new();
        }
        if self.queue.is_empty() && self.queue.capacity() > 0 {
            self.queue = VecDeque::new();
        }
        if self.no_ack.is_empty() && self.no_ack.capacity() > 0 {
            self.no_ack = VecDeque::new();
        }
        if self.backoff.is_empty() && self.backoff.capacity() > 0 {
            self.backoff = HashMap::new();
        }
        if self.delayed.is_empty() && self.delayed.capacity() > 0 {
            self.delayed = Vec::new();
        }
        if self.gone.is_empty() && self.gone.capacity() > 0 {
            self.gone = VecDeque::new();
        }
    }

    /// Whether `id` is a message written and waiting for its ACK.
    pub(crate) fn in_flight(&self, id: &str) -> bool {
        self.inflight.contains_key(id)
    }

    /// An upstream `response` arrived: if it acknowledges the in-flight message of an object
    /// with no newer version waiting, that message is done and returned (for recording);
    /// otherwise `None` (a newer version waiting is queued: pump again).
    pub(crate) fn on_ack(&mut self, parent_id: &str) -> Option<Acked> {
        let flight = self.inflight.remove(parent_id)?;
        self.backoff.remove(&flight.key);
        if let Some(e) = self.entries.get_mut(&flight.key)
            && e.msg.header.id != parent_id
        {
            // A newer version waited behind this one: its turn. The record is written when
            // the newer one is acknowledged; until then the acknowledged version stands.
            e.flight = None;
            if !e.queued {
                e.queued = true;
                self.queue.push_back(flight.key.clone());
            }
            if !flight.key.starts_with("msg:") {
                self.acked.insert(flight.key, flight.rv);
            }
            return None;
        }
        let entry = self.entries.remove(&flight.key);
        self.compact();
        let entry = entry?;
        if entry.delete {
            self.acked.remove(&flight.key);
            if entry.msg.route.operation == op::DELETE && !flight.key.starts_with("msg:") {
                if self.gone.len() >= GONE_REMEMBERED {
                    self.gone.pop_front();
                }
                self.gone.push_back(flight.key.clone());
            }
        } else if !flight.key.starts_with("msg:") {
            self.acked
                .insert(flight.key, entry.msg.header.resource_version.to_string());
        }
        Some(Acked {
            msg: entry.msg,
            info: entry.info,
            delete: entry.delete,
        })
    }

    fn backoff_for(&mut self, key: &str) -> Duration {
        let n = self.backoff.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        BACKOFF.delay(*n)
    }

    /// Decides what to write now. With `can_write` false (the socket is backed up) nothing
    /// is taken and a short retry is scheduled.
    pub(crate) fn pump(&mut self, now: Instant, can_write: bool) -> Pump {
        let mut out = Pump::default();
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.cfg.rate).min(self.cfg.burst);
        self.refilled = now;
        if !can_write {
            out.next = Some(now + Duration::from_millis(20));
            return out;
        }
        while self.tokens >= 1.0 {
            let Some(msg) = self.no_ack.pop_front() else {
                break;
            };
            self.tokens -= 1.0;
            out.writes.push(msg);
        }
        // Back-off expired: the key goes back in line.
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                let (_, key) = self.delayed.swap_remove(i);
                if let Some(e) = self.entries.get_mut(&key)
                    && !e.queued
                    && e.flight.is_none()
                {
                    e.queued = true;
                    self.queue.push_back(key);
                }
            } else {
                i += 1;
            }
        }
        // Re-sends of in-flight messages that were not acknowledged in time.
        let due: Vec<String> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.next <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some(f) = self.inflight.get_mut(&id) else {
                continue;
            };
            let newer_waits = self
                .entries
                .get(&f.key)
                .is_some_and(|e| e.msg.header.id != id);
            if newer_waits {
                // Not acknowledged in time and superseded: the newer version goes instead.
                let key = f.key.clone();
                self.inflight.remove(&id);
                if let Some(e) = self.entries.get_mut(&key) {
                    e.flight = None;
                    if !e.queued {
                        e.queued = true;
                        self.queue.push_front(key);
                    }
                }
            } else if f.writes < WRITES_PER_ROUND {
                f.writes += 1;
                f.next = now + self.cfg.retry_interval;
                if let Some(e) = self.entries.get(&f.key) {
                    out.writes.push(e.msg.clone());
                    out.resends += 1;
                }
            } else {
                let key = f.key.clone();
                self.inflight.remove(&id);
                if let Some(e) = self.entries.get_mut(&key) {
                    e.flight = None;
                }
                let wait = self.backoff_for(&key);
                self.delayed.push((now + wait, key));
            }
        }
        // New messages, up to the window.
        while self.inflight.len() < self.cfg.window.max(1) {
            let Some(key) = self.queue.pop_front() else {
                break;
            };
            let Some(e) = self.entries.get_mut(&key) else {
                continue;
            };
            e.queued = false;
            let id = e.msg.header.id.to_string();
            e.flight = Some(id.clone());
            if e.written {
                out.resends += 1;
            }
            e.written = true;
            out.writes.push(e.msg.clone());
            let rv = e.msg.header.resource_version.to_string();
            self.inflight.insert(
                id,
                Flight {
                    key,
                    writes: 1,
                    next: now + self.cfg.retry_interval,
                    rv,
                },
            );
        }
        self.compact();
        let mut next = self.inflight.values().map(|f| f.next).min();
        for (t, _) in &self.delayed {
            next = Some(next.map_or(*t, |n| n.min(*t)));
        }
        if !self.no_ack.is_empty() {
            let wait =
                Duration::from_secs_f64(((1.0 - self.tokens) / self.cfg.rate.max(1.0)).max(0.001));
            let t = now + wait;
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        out.next = next;
        out
    }

    /// Everything still waiting (no-ACK first, then ACK-class not yet written), for a last
    /// write on shutdown. In-flight messages are not repeated. The ACK-class ones count as
    /// written from now on (unacknowledged, not dropped, when the session ends).
    pub(crate) fn drain(&mut self) -> Vec<Message> {
        let mut out: Vec<Message> = self.no_ack.drain(..).collect();
        while let Some(key) = self.queue.pop_front() {
            if let Some(e) = self.entries.get_mut(&key) {
                e.queued = false;
                e.written = true;
                out.push(e.msg.clone());
            }
        }
        out
    }

    /// Messages waiting or in flight.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.no_ack.len() + self.entries.len() + self.lookups.len()
    }

    /// Empties the state when the session ends, reporting what it still held.
    pub(crate) fn abandon(&mut self) -> Abandoned {
        let mut out = Abandoned {
            no_ack: self.no_ack.len(),
            ack: self.lookups.len(),
            ..Abandoned::default()
        };
        for (_, e) in self.entries.drain() {
            if e.written {
                out.unacked += 1;
            } else {
                out.ack += 1;
            }
            if !e.recorded {
                out.unrecorded.push(e.msg);
            }
        }
        // A lookup still running may or may not have created the record.
        out.unrecorded.extend(self.lookups.drain().map(|(_, m)| m));
        self.no_ack.clear();
        self.queue.clear();
        self.inflight.clear();
        self.delayed.clear();
        self.backoff.clear();
        self.gone.clear();
        self.compact();
        out
    }
}

fn dropped(reason: DropReason, why: &'static str, msg: Message) -> Intake {
    Intake::Dropped(Dropped {
        reason,
        why,
        msg: Box::new(msg),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use beehive::Content;

    fn cfg(window: usize) -> DownConfig {
        DownConfig {
            window,
            queue_limit: 100,
            retry_interval: RETRY_INTERVAL,
            burst: 50.0,
            rate: 100.0,
        }
    }

    fn pod(uid: &str, rv: &str, operation: &str) -> Message {
        Message::new()
            .with_route("edgecontroller", "resource", "node/e/default/pod/p", operation)
            .with_resource_version(rv)
            .with_content(
                Content::json(&serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": uid, "resourceVersion": rv}})).unwrap(),
            )
    }

    /// An update of a pod marked for deletion (a delete by KubeEdge's rules).
    fn terminating(uid: &str, rv: &str) -> Message {
        Message::new()
            .with_route("edgecontroller", "resource", "node/e/default/pod/p", "update")
            .with_resource_version(rv)
            .with_content(
                Content::json(&serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": uid, "resourceVersion": rv, "deletionTimestamp": "2026-12-06T10:49:59Z"}})).unwrap(),
            )
    }

    fn ids(p: &Pump) -> Vec<String> {
        p.writes
            .iter()
            .map(|m| m.header.resource_version.to_string())
            .collect()
    }

    #[test]
    fn a_delete_supersedes_an_update_waiting_for_its_lookup() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        let Intake::Lookup { key, .. } = d.intake_ack(pod("u1", "5", "update")) else {
            panic!("lookup expected");
        };
        let delete = pod("u1", "", "delete");
        assert_eq!(d.intake_ack(delete.clone()), Intake::Waiting);
        // The lookup ends (record at "7": the update alone would have been stale): the delete
        // is what goes out, and nothing for the object follows it.
        assert_eq!(d.lookup_done(&key, Some("7".into())), Intake::Queued);
        assert_eq!(d.pump(now, true).writes, vec![delete]);
        assert!(
            d.pump(now, true).writes.is_empty(),
            "nothing after the delete"
        );
    }

    #[test]
    fn an_unrecorded_message_is_never_looked_up_but_retried_and_deduplicated() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        let watch = |rv: &str| {
            let mut m = pod("u1", rv, "insert");
            m.route.source = "dynamiccontroller".into();
            m
        };
        assert_eq!(d.intake_unrecorded(watch("5")), Intake::Queued);
        // The same object from another module still needs its record: keys are apart.
        assert!(matches!(
            d.intake_ack(pod("u1", "5", "update")),
            Intake::Lookup { .. }
        ));
        let p = d.pump(now, true);
        assert_eq!(ids(&p), ["5"]);
        let written = p.writes;
        let acked = d
            .on_ack(&written[0].header.id.as_str())
            .expect("acknowledged");
        assert_eq!(acked.msg.header.resource_version.as_str(), "5");
        assert_eq!(
            reason(d.intake_unrecorded(watch("5"))),
            DropReason::Stale,
            "an acknowledged version is not written twice in a session"
        );
        assert_eq!(d.intake_unrecorded(watch("6")), Intake::Queued);
        let left = d.abandon();
        assert!(
            left.unrecorded
                .iter()
                .all(|m| m.route.source != "dynamiccontroller"),
            "nothing of it is left for a record"
        );
    }

    /// Sends `msg` for a new object (record found at "0") and returns its write.
    fn sent(d: &mut Downstream, msg: Message, now: Instant) -> Message {
        let Intake::Lookup { key, .. } = d.intake_ack(msg) else {
            panic!("lookup expected");
        };
        assert_eq!(d.lookup_done(&key, Some("0".into())), Intake::Queued);
        let mut p = d.pump(now, true);
        assert_eq!(p.writes.len(), 1);
        p.writes.remove(0)
    }

    #[test]
    fn a_newer_version_waits_for_the_ack_of_the_one_in_flight() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        let update = sent(&mut d, pod("u1", "505", "update"), now);
        let marked = terminating("u1", "506");
        assert_eq!(d.intake_ack(marked.clone()), Intake::Queued);
        assert!(
            d.pump(now, true).writes.is_empty(),
            "two versions of one object are never in flight together"
        );
        assert!(
            d.on_ack(&update.header.id.as_str()).is_none(),
            "a newer one waits"
        );
        assert_eq!(d.pump(now, true).writes, vec![marked.clone()]);
        let delete = pod("u1", "507", "delete");
        assert_eq!(d.intake_ack(delete.clone()), Intake::Queued);
        assert!(d.pump(now, true).writes.is_empty());
        assert!(d.on_ack(&marked.header.id.as_str()).is_none());
        assert_eq!(d.pump(now, true).writes, vec![delete.clone()]);
        let acked = d
            .on_ack(&delete.header.id.as_str())
            .expect("the delete is recorded");
        assert!(acked.delete);
    }

    #[test]
    fn only_a_written_unacknowledged_message_is_in_flight() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        let m = sent(&mut d, pod("u1", "5", "update"), now);
        let id = m.header.id.as_str();
        assert!(d.in_flight(&id));
        assert!(!d.in_flight("an id the edge made up"));
        assert!(d.on_ack("an id the edge made up").is_none());
        assert!(d.on_ack(&id).is_some());
        assert!(!d.in_flight(&id), "a repeated ACK matches nothing");
    }

    #[test]
    fn a_superseded_version_not_acknowledged_in_time_gives_way_to_the_newer_one() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        sent(&mut d, pod("u1", "5", "update"), now);
        assert_eq!(d.intake_ack(pod("u1", "6", "update")), Intake::Queued);
        assert!(d.pump(now, true).writes.is_empty());
        let p = d.pump(now + RETRY_INTERVAL, true);
        assert_eq!(
            ids(&p),
            ["6"],
            "the newer version, not a re-send of the older"
        );
    }

    #[test]
    fn nothing_brings_back_an_object_whose_delete_is_pending_or_acknowledged() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        sent(&mut d, pod("u1", "505", "update"), now);
        let delete = pod("u1", "507", "delete");
        assert_eq!(d.intake_ack(delete.clone()), Intake::Queued);
        // A sync pass that read the object before its delete, and a late watch event.
        assert_eq!(
            reason(d.intake_ack(terminating("u1", "506"))),
            DropReason::Stale
        );
        assert_eq!(
            reason(d.intake_ack(pod("u1", "508", "update"))),
            DropReason::Stale
        );
        let first = d.inflight.keys().next().unwrap().clone();
        assert!(d.on_ack(&first).is_none());
        assert_eq!(d.pump(now, true).writes, vec![delete.clone()]);
        assert!(d.on_ack(&delete.header.id.as_str()).is_some());
        for late in [terminating("u1", "506"), pod("u1", "509", "update")] {
            assert_eq!(reason(d.intake_ack(late)), DropReason::Stale);
        }
        // A repeated delete is harmless and still goes out.
        assert_eq!(d.intake_ack(pod("u1", "", "delete")), Intake::Queued);
    }

    #[test]
    fn a_version_marked_for_deletion_must_be_newer_than_the_pending_one() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        sent(&mut d, pod("u1", "5", "update"), now);
        assert_eq!(d.intake_ack(terminating("u1", "6")), Intake::Queued);
        assert_eq!(
            reason(d.intake_ack(terminating("u1", "6"))),
            DropReason::Stale
        );
        assert_eq!(
            reason(d.intake_ack(pod("u1", "7", "update"))),
            DropReason::Stale
        );
        assert_eq!(d.intake_ack(terminating("u1", "7")), Intake::Queued);
    }

    #[test]
    fn first_sight_needs_a_lookup_then_is_sent() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        let m = pod("u1", "10", "update");
        let Intake::Lookup { key, .. } = d.intake_ack(m.clone()) else {
            panic!()
        };
        assert_eq!(d.lookup_done(&key, Some("0".into())), Intake::Queued);
        let p = d.pump(now, true);
        assert_eq!(p.writes, vec![m.clone()]);
        let acked = d.on_ack(&m.header.id.as_str()).unwrap();
        assert_eq!(acked.msg.header.resource_version, "10");
        // Now the acknowledged version is known: an equal version is dropped without a lookup.
        assert!(matches!(
            d.intake_ack(pod("u1", "10", "update")),
            Intake::Dropped(_)
        ));
        assert_eq!(d.intake_ack(pod("u1", "11", "update")), Intake::Queued);
    }

    #[test]
    fn recorded_version_suppresses_old_updates() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        let Intake::Lookup { key, .. } = d.intake_ack(pod("u1", "5", "update")) else {
            panic!()
        };
        assert!(matches!(
            d.lookup_done(&key, Some("7".into())),
            Intake::Dropped(_)
        ));
        assert!(d.pump(now, true).writes.is_empty());
    }

    #[test]
    fn empty_version_is_dropped_unless_delete() {
        let mut d = Downstream::new(cfg(4), Instant::now());
        assert!(matches!(
            d.intake_ack(pod("u1", "", "update")),
            Intake::Dropped(_)
        ));
        assert_eq!(d.intake_ack(pod("u1", "", "delete")), Intake::Queued);
    }

    #[test]
    fn resends_every_interval_five_writes_then_backs_off() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        d.intake_ack(pod("u1", "", "delete"));
        assert_eq!(d.pump(now, true).writes.len(), 1);
        let mut t = now;
        for _ in 0..4 {
            t += RETRY_INTERVAL;
            let p = d.pump(t, true);
            assert_eq!((p.writes.len(), p.resends), (1, 1));
        }
        t += RETRY_INTERVAL;
        let p = d.pump(t, true);
        assert!(p.writes.is_empty());
        let next = p.next.unwrap();
        assert!(next > t && next <= t + Duration::from_millis(5));
        let p = d.pump(next, true);
        assert_eq!(p.writes.len(), 1, "re-queued after the back-off");
    }

    #[test]
    fn window_bounds_in_flight_and_coalesces_by_uid() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(1), now);
        d.intake_ack(pod("a", "", "delete"));
        assert_eq!(d.pump(now, true).writes.len(), 1);
        for rv in ["10", "11"] {
            let m = pod("b", rv, "update");
            match d.intake_ack(m) {
                Intake::Lookup { key, .. } => {
                    assert_eq!(d.lookup_done(&key, Some("0".into())), Intake::Queued)
                }
                other => assert_eq!(other, Intake::Queued),
            }
        }
        assert!(d.pump(now, true).writes.is_empty(), "window of 1 is full");
        let first = d.inflight.keys().next().unwrap().clone();
        d.on_ack(&first).unwrap();
        let p = d.pump(now, true);
        assert_eq!(ids(&p), ["11"]);
    }

    #[test]
    fn no_ack_is_paced() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(4), now);
        for _ in 0..60 {
            assert!(
                d.push_no_ack(Message::new().with_route(
                    "edgecontroller",
                    "resource",
                    "node/e/ns/podstatus/x",
                    "response"
                ))
                .is_ok()
            );
        }
        let p = d.pump(now, true);
        assert_eq!(p.writes.len(), 50);
        let p = d.pump(now + Duration::from_millis(100), true);
        assert_eq!(p.writes.len(), 10);
    }

    fn reason(i: Intake) -> DropReason {
        match i {
            Intake::Dropped(d) => d.reason,
            other => panic!("not dropped: {other:?}"),
        }
    }

    #[test]
    fn drop_reasons_tell_superseded_from_lost() {
        let now = Instant::now();
        let mut d = Downstream::new(
            DownConfig {
                queue_limit: 2,
                ..cfg(4)
            },
            now,
        );
        assert_eq!(
            reason(d.intake_ack(pod("u0", "", "update"))),
            DropReason::Malformed
        );
        let Intake::Lookup { key, .. } = d.intake_ack(pod("u1", "5", "update")) else {
            panic!()
        };
        assert_eq!(
            reason(d.intake_ack(pod("u1", "4", "update"))),
            DropReason::Stale
        );
        assert_eq!(
            reason(d.lookup_done(&key, Some("9".into()))),
            DropReason::Stale
        );
        assert_eq!(d.intake_ack(pod("u2", "", "delete")), Intake::Queued);
        assert_eq!(d.intake_ack(pod("u3", "", "delete")), Intake::Queued);
        let full = d.intake_ack(pod("u4", "7", "update"));
        let Intake::Dropped(Dropped { reason, msg, .. }) = full else {
            panic!()
        };
        assert_eq!(reason, DropReason::QueueFull);
        assert_eq!(
            msg.header.resource_version, "7",
            "the message is handed back"
        );
    }

    #[test]
    fn what_a_shutdown_writes_last_is_not_counted_as_left_behind() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(1), now);
        d.push_no_ack(pod("n1", "1", "response")).unwrap();
        for (uid, v) in [("u1", "5"), ("u2", "6")] {
            let Intake::Lookup { key, .. } = d.intake_ack(pod(uid, v, "update")) else {
                panic!()
            };
            assert_eq!(d.lookup_done(&key, Some("0".into())), Intake::Queued);
        }
        assert_eq!(d.drain().len(), 3, "the no-ack message and both objects");
        let left = d.abandon();
        assert_eq!((left.no_ack, left.ack, left.unacked), (0, 0, 2));
        assert!(left.unrecorded.is_empty());
    }

    #[test]
    fn abandon_reports_what_was_held_and_which_keys_may_lack_a_record() {
        let now = Instant::now();
        let mut d = Downstream::new(cfg(1), now);
        d.push_no_ack(pod("n1", "1", "response")).unwrap();
        // Recorded: found at "0".
        let Intake::Lookup { key, .. } = d.intake_ack(pod("u1", "5", "update")) else {
            panic!()
        };
        assert_eq!(d.lookup_done(&key, Some("0".into())), Intake::Queued);
        // Lookup failed: delivered anyway, but no record is known.
        let Intake::Lookup { key, .. } = d.intake_ack(pod("u2", "6", "update")) else {
            panic!()
        };
        assert_eq!(d.lookup_done(&key, None), Intake::Queued);
        // Still looking up.
        assert!(matches!(
            d.intake_ack(pod("u3", "7", "update")),
            Intake::Lookup { .. }
        ));
        assert_eq!(
            d.pump(now, true).writes.len(),
            2,
            "one in flight, one no-ack"
        );
        let left = d.abandon();
        assert_eq!((left.no_ack, left.ack, left.unacked), (0, 2, 1));
        let mut unrecorded: Vec<_> = left
            .unrecorded
            .iter()
            .map(|m| m.header.resource_version.as_str())
            .collect();
        unrecorded.sort();
        assert_eq!(unrecorded, ["6", "7"]);
        assert_eq!(d.pending(), 0);
        assert_eq!(
            d.lookup_done("u3", Some("0".into())),
            Intake::Waiting,
            "a late lookup finds nothing to do"
        );
    }
}
