//! One edge connection as an actor: downstream delivery, acknowledgements, keepalive, and a
//! termination that happens once and only speaks for its own generation.

use std::rc::Rc;
use std::sync::Arc;

use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};
use actix_http::ws::CloseCode;
use beehive::Message;
use kubeedge_api::NodeResource;
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{debug, info, warn};

use crate::classify::{Delivery, classify, is_node_deletion};
use crate::downstream::{DownConfig, Downstream, Dropped, Intake, RETRY_INTERVAL};
use crate::messages::{Acked, Deliver, Stop, StopReason};
use crate::metrics::{DropReason, NodeCounters};
use crate::outbox::{BACKLOG_HIGH, Outbox};
use crate::persist::PersistOp;
use crate::state::Hub;
use crate::store::{Created, SyncKey, SyncSpec};
use crate::throttle::Throttle;

/// At most one warning per session and period about node deletes that are not acted on (the
/// sync loop may repeat such a delete every 5 s).
const STALE_NODE_DELETE_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The session actor. Lives on the WebSocket worker thread that accepted the connection.
pub(crate) struct Session {
    hub: Arc<Hub>,
    node: Arc<str>,
    generation: u64,
    outbox: Rc<Outbox>,
    down: Downstream,
    counters: Arc<NodeCounters>,
    timer_at: Option<Instant>,
    /// Unix seconds when the session was made: a node revoked at or after this was deleted
    /// while the session lived (the revocation check at the handshake refuses older ones).
    started_unix: i64,
    /// A newer connection took over (what is left behind counts as `replaced`).
    replaced: bool,
    stale_deletes: Throttle,
    /// Holds the session's place among the hub's sessions until the actor is gone, so
    /// shutdown can wait for it.
    _tracked: TaskTrackerToken,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("node", &self.node)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn new(hub: Arc<Hub>, node: Arc<str>, generation: u64, outbox: Rc<Outbox>) -> Self {
        // The node's counters outlive its connections (see `Registry::node_counters`).
        let counters = hub.registry.node_counters(&node);
        outbox.attach(counters.clone());
        let c = &hub.config;
        let down = Downstream::new(
            DownConfig {
                window: c.ack_window,
                queue_limit: c.node_queue_size,
                retry_interval: RETRY_INTERVAL,
                burst: f64::from(c.no_ack_burst.max(1)),
                rate: f64::from(c.no_ack_rate.max(1)),
            },
            Instant::now(),
        );
        let tracked = hub.sessions.token();
        Session {
            hub,
            node,
            generation,
            outbox,
            down,
            counters,
            timer_at: None,
            started_unix: pki::unix_now(),
            replaced: false,
            stale_deletes: Throttle::new(STALE_NODE_DELETE_LOG_EVERY),
            _tracked: tracked,
        }
    }

    fn count_drop(&self, reason: DropReason, n: u64) {
        self.hub.count_drop(Some(&self.counters), reason, n);
    }

    /// An ACK-class message the delivery state refused.
    fn dropped(&self, d: Dropped) {
        self.count_drop(d.reason, 1);
        let resource = &d.msg.route.resource;
        match d.reason {
            // Superseded: the edge gets (or has) this version or a newer one.
            DropReason::Stale => {
                debug!(node = %self.node, resource = %resource, reason = d.why, "downstream message dropped")
            }
            DropReason::QueueFull => {
                let recorded = self.hub.record_offline(&self.node, &d.msg);
                warn!(node = %self.node, resource = %resource, reason = d.why, redelivered_by_sync_loop = recorded, "downstream message dropped");
            }
            _ => {
                warn!(node = %self.node, resource = %resource, reason = d.why, "downstream message dropped")
            }
        }
    }

    /// A `node` `delete` for this session. It closes the session only when the node really
    /// was deleted while the session lived (the Node watcher, or `HubHandle::revoke_node`,
    /// revoked it): a delete for an earlier incarnation of a re-created node must not cut
    /// off the current one, or the edge would be disconnected on every sync-loop pass.
    fn node_delete(&mut self, msg: Message, ctx: &mut Context<Self>) {
        let revoked = self.hub.revocations.revoked_at(&self.node);
        if revoked.is_some_and(|t| t >= self.started_unix) {
            info!(node = %self.node, generation = self.generation, "node deleted, closing session");
            self.outbox.close_with(
                CloseCode::Policy,
                "node deleted; its certificates are revoked",
            );
            ctx.stop();
            return;
        }
        self.count_drop(DropReason::StaleNodeDelete, 1);
        match self.stale_deletes.allow(Instant::now()) {
            Some(suppressed) => warn!(
                node = %self.node,
                resource = %msg.route.resource,
                msg_id = %msg.header.id,
                suppressed,
                "node delete for a node that is not deleted (an earlier incarnation's record?): not written, session kept"
            ),
            None => {
                debug!(node = %self.node, resource = %msg.route.resource, "stale node delete dropped")
            }
        }
    }

    fn check_keepalive(&mut self, ctx: &mut Context<Self>) {
        let limit = self.hub.config.keepalive();
        let idle = self.outbox.last_keepalive.get().elapsed();
        if idle >= limit {
            info!(node = %self.node, idle_s = idle.as_secs(), "keepalive timeout, closing session");
            self.outbox.close_with(CloseCode::Away, "keepalive timeout");
            ctx.stop();
        } else {
            ctx.run_later(limit - idle, Self::check_keepalive);
        }
    }

    /// Writes what the delivery state allows now and arms the next wake-up.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.outbox.is_closed() {
            return;
        }
        let now = Instant::now();
        let p = self.down.pump(now, self.outbox.backlog() < BACKLOG_HIGH);
        let fresh = p.writes.len() as u64 - p.resends;
        for m in p.writes {
            self.outbox.push_owned(m);
        }
        NodeCounters::add(&self.counters.sent, fresh);
        NodeCounters::add(&self.counters.retried, p.resends);
        if let Some(next) = p.next
            && self.timer_at.is_none_or(|t| next < t)
        {
            self.timer_at = Some(next);
            ctx.run_later(next.saturating_duration_since(now), |act, ctx| {
                act.timer_at = None;
                act.pump(ctx);
            });
        }
    }

    fn sync_key(&self, resource: &str, uid: &str) -> Option<SyncKey> {
        let r = NodeResource::parse(resource).ok()?;
        (!r.namespace.is_empty()).then(|| SyncKey {
            node: self.node.to_string(),
            namespace: r.namespace,
            uid: uid.to_owned(),
        })
    }

    /// Reads (or creates) the record of a UID seen for the first time, off the actor.
    fn lookup(
        &mut self,
        ctx: &mut Context<Self>,
        msg_resource: String,
        key: String,
        spec: SyncSpec,
    ) {
        let Some(sync_key) = self.sync_key(&msg_resource, &key) else {
            self.down.lookup_done(&key, None);
            return;
        };
        let store = self.hub.persister.store().clone();
        let node = self.node.clone();
        let fut = async move {
            match store.get(&sync_key).await {
                Ok(Some(rv)) => Some(rv),
                Ok(None) => match store.create(&sync_key, &spec).await {
                    Ok(Created::New) => Some("0".to_owned()),
                    Ok(Created::Existed(rv)) => Some(rv),
                    Err(e) => {
                        warn!(node = %node, record = %sync_key.name(), error = %e, "objectsync create failed; delivering anyway");
                        None
                    }
                },
                Err(e) => {
                    warn!(node = %node, record = %sync_key.name(), error = %e, "objectsync lookup failed; delivering anyway");
                    None
                }
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |recorded, act, ctx| {
            if let Intake::Dropped(d) = act.down.lookup_done(&key, recorded) {
                act.dropped(d);
            }
            act.pump(ctx);
        }));
    }

    /// The record of a UID seen for the first time, from the record cache another module's
    /// watch keeps: `None` when there is none here (or it has not listed yet, or the object
    /// has no namespace token): then [`Session::lookup`] asks the API server.
    fn cached_record(&self, resource: &str, uid: &str) -> Option<(SyncKey, Option<String>)> {
        let records = self.hub.records.as_ref()?;
        let key = self.sync_key(resource, uid)?;
        let found = records.recorded(&key.namespace, &key.name())?;
        Some((key, found))
    }

    /// A first sight answered by the record cache: the message is queued (or dropped as stale)
    /// at once. Without a record it is written now and its record (`"0"`) is created beside the
    /// write rather than before it, as the edge's acknowledgement is recorded after the write:
    /// the ACK's record supersedes it when still queued. Should cloudcore stop before either
    /// is written, the pod watch's first list after the restart sends the object again (no
    /// record: first sight), so nothing is lost; what the record adds is that a delete made
    /// while cloudcore is down still reaches the edge (the sync loop finds the object gone).
    fn seen_in_cache(
        &mut self,
        key: String,
        sync_key: SyncKey,
        spec: SyncSpec,
        found: Option<String>,
    ) {
        if found.is_none() {
            self.hub
                .persister
                .submit(sync_key, PersistOp::Create { spec });
        }
        let recorded = found.unwrap_or_else(|| "0".to_owned());
        if let Intake::Dropped(d) = self.down.lookup_done(&key, Some(recorded)) {
            self.dropped(d);
        }
    }

    fn record_ack(&self, acked: crate::downstream::Acked) {
        let Some(info) = acked.info else { return };
        if acked.msg.route.group != kubeedge_api::names::GROUP_RESOURCE {
            return; // twin (and other groups) record nothing.
        }
        if classify(&acked.msg) != Delivery::Ack {
            return; // its sender keeps its own record.
        }
        let Some(key) = self.sync_key(&acked.msg.route.resource, &info.uid) else {
            return;
        };
        let op = if acked.delete {
            PersistOp::Delete
        } else {
            let name = NodeResource::parse(&acked.msg.route.resource)
                .map(|r| r.name)
                .unwrap_or_default();
            PersistOp::Acked {
                spec: SyncSpec {
                    api_version: info.api_version,
                    kind: info.kind,
                    name: if name.is_empty() { info.name } else { name },
                },
                rv: acked.msg.header.resource_version.to_string(),
            }
        };
        self.hub.persister.submit(key, op);
    }
}

impl Actor for Session {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.hub.config.node_queue_size.max(16));
        let keepalive = self.hub.config.keepalive();
        ctx.run_later(keepalive, Self::check_keepalive);
        self.hub.ownership.hold(&self.node);
        self.hub.events.connected(&self.node);
        info!(node = %self.node, generation = self.generation, "edge connected");
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.outbox.close();
        self.account_for_leftovers();
        // Only the registered generation speaks for the node.
        if self.hub.registry.remove(&self.node, self.generation) {
            self.hub.ownership.release(&self.node);
            self.hub.events.disconnected(&self.node);
            info!(node = %self.node, generation = self.generation, "edge disconnected");
        } else {
            debug!(node = %self.node, generation = self.generation, "replaced session ended");
        }
    }
}

impl Session {
    /// Counts what the session still holds as it ends and makes sure every ACK-class object
    /// among it has a record, so the sync loop redelivers it to the next session. Messages
    /// never written count as drops; written but unacknowledged ones do not (the edge may
    /// have them, and the sync loop re-sends them if not).
    fn account_for_leftovers(&mut self) {
        let left = self.down.abandon();
        for m in &left.unrecorded {
            self.hub.record_offline(&self.node, m);
        }
        let dropped = (left.no_ack + left.ack) as u64;
        if dropped == 0 && left.unacked == 0 {
            return;
        }
        let reason = if self.replaced {
            DropReason::Replaced
        } else {
            DropReason::SessionEnded
        };
        self.count_drop(reason, dropped);
        if left.no_ack > 0 {
            warn!(node = %self.node, generation = self.generation, reason = reason.as_str(), no_ack_lost = left.no_ack, ack_unwritten = left.ack, ack_unacknowledged = left.unacked,
                "session ended with undelivered messages: ACK-class ones are redelivered by the sync loop from their ObjectSync records, no-ACK ones are lost");
        } else {
            info!(node = %self.node, generation = self.generation, reason = reason.as_str(), ack_unwritten = left.ack, ack_unacknowledged = left.unacked,
                "session ended with unacknowledged messages: the sync loop redelivers them from their ObjectSync records");
        }
    }
}

impl Handler<Deliver> for Session {
    type Result = ();

    fn handle(&mut self, mut deliver: Deliver, ctx: &mut Context<Self>) {
        let Some(msg) = deliver.take() else {
            return;
        };
        if is_node_deletion(&msg) {
            self.node_delete(msg, ctx);
            return;
        }
        match classify(&msg) {
            Delivery::NoAck => {
                if let Err(msg) = self.down.push_no_ack(msg) {
                    self.count_drop(DropReason::NoAckOverflow, 1);
                    warn!(node = %self.node, resource = %msg.route.resource, reason = "no-ack queue full", "downstream message dropped");
                }
            }
            Delivery::AckUnrecorded => {
                if let Intake::Dropped(d) = self.down.intake_unrecorded(msg) {
                    self.dropped(d);
                }
            }
            Delivery::Ack => {
                let resource = msg.route.resource.to_string();
                match self.down.intake_ack(msg) {
                    Intake::Queued | Intake::Waiting => {}
                    Intake::Dropped(d) => self.dropped(d),
                    Intake::Lookup { key, info } => {
                        let name = NodeResource::parse(&resource)
                            .map(|r| r.name)
                            .unwrap_or_default();
                        let spec = SyncSpec {
                            api_version: info.api_version,
                            kind: info.kind,
                            name: if name.is_empty() { info.name } else { name },
                        };
                        match self.cached_record(&resource, &key) {
                            Some((sync_key, found)) => {
                                self.seen_in_cache(key, sync_key, spec, found)
                            }
                            None => self.lookup(ctx, resource, key, spec),
                        }
                    }
                }
            }
        }
        self.pump(ctx);
    }
}

impl Handler<Acked> for Session {
    type Result = ();

    fn handle(&mut self, Acked(resp): Acked, ctx: &mut Context<Self>) {
        let parent = resp.header.parent_id.as_str();
        // An ACK that matches nothing (late, repeated, or made up by the edge) costs a lookup.
        if !self.down.in_flight(&parent) {
            return;
        }
        if let Some(acked) = self.down.on_ack(&parent) {
            NodeCounters::add(&self.counters.acked, 1);
            self.record_ack(acked);
        }
        // Also when a newer version of the object waited for this ACK.
        self.pump(ctx);
    }
}

impl Handler<Stop> for Session {
    type Result = ();

    fn handle(&mut self, Stop(reason): Stop, ctx: &mut Context<Self>) {
        match &reason {
            StopReason::Replaced => {
                self.replaced = true;
                info!(node = %self.node, generation = self.generation, "session replaced by a new connection");
                self.outbox
                    .close_with(CloseCode::Normal, "replaced by a new connection");
            }
            StopReason::Shutdown => {
                let last = self.down.drain();
                for m in &last {
                    self.outbox.push_message(m);
                }
                NodeCounters::add(&self.counters.sent, last.len() as u64);
                self.outbox
                    .close_with(CloseCode::Away, "cloudhub shutting down");
            }
            StopReason::NodeDeleted => {
                info!(node = %self.node, generation = self.generation, "session closed: node deleted");
                self.outbox.close_with(
                    CloseCode::Policy,
                    "node deleted; its certificates are revoked",
                );
            }
            StopReason::ConnectionClosed(why) => {
                debug!(node = %self.node, reason = %why, "connection closed");
                self.outbox.close();
            }
        }
        ctx.stop();
    }
}
