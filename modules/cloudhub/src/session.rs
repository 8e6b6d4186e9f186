//! One edge connection as an actor: downstream delivery, acknowledgements, keepalive, and a
//! termination that happens once and only speaks for its own generation.

use std::rc::Rc;
use std::sync::Arc;

use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};
use actix_http::ws::CloseCode;
use beehive::Message;
use kubeedge_api::NodeResource;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::classify::{Delivery, classify, is_node_deletion};
use crate::conn::Conn;
use crate::downstream::{DownConfig, Downstream, Intake, RETRY_INTERVAL};
use crate::hub::Hub;
use crate::persist::PersistOp;
use crate::registry::NodeCounters;
use crate::store::{Created, SyncKey, SyncSpec};

/// Above this many queued bytes the session stops taking new messages until the writer
/// catches up (the write deadline then decides whether the peer is alive).
const BACKLOG_HIGH: usize = 1024 * 1024;

/// A downstream message for this node (from the cloudhub module).
#[derive(Debug)]
pub(crate) struct Deliver(pub(crate) Message);

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

/// The session actor. Lives on the WebSocket worker thread that accepted the connection.
pub(crate) struct Session {
    hub: Arc<Hub>,
    node: Arc<str>,
    generation: u64,
    conn: Rc<Conn>,
    down: Downstream,
    counters: Arc<NodeCounters>,
    timer_at: Option<Instant>,
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
    pub(crate) fn new(
        hub: Arc<Hub>,
        node: Arc<str>,
        generation: u64,
        conn: Rc<Conn>,
        counters: Arc<NodeCounters>,
    ) -> Self {
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
        Session {
            hub,
            node,
            generation,
            conn,
            down,
            counters,
            timer_at: None,
        }
    }

    fn check_keepalive(&mut self, ctx: &mut Context<Self>) {
        let limit = self.hub.config.keepalive();
        let idle = self.conn.last_keepalive.get().elapsed();
        if idle >= limit {
            info!(node = %self.node, idle_s = idle.as_secs(), "keepalive timeout, closing session");
            self.conn.close_with(CloseCode::Away, "keepalive timeout");
            ctx.stop();
        } else {
            ctx.run_later(limit - idle, Self::check_keepalive);
        }
    }

    /// Writes what the delivery state allows now and arms the next wake-up.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.conn.is_closed() {
            return;
        }
        let now = Instant::now();
        let p = self.down.pump(now, self.conn.backlog() < BACKLOG_HIGH);
        for m in &p.writes {
            self.conn.push_message(m);
        }
        let fresh = p.writes.len() as u64 - p.resends;
        NodeCounters::add(&self.counters.sent, fresh);
        NodeCounters::add(&self.counters.retried, p.resends);
        if p.node_deleted {
            // spec §3.6: the node was deleted; drop the connection, the edge will come back.
            info!(node = %self.node, "node deleted, closing session");
            self.conn.close();
            ctx.stop();
            return;
        }
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
            if let Intake::Dropped(reason) = act.down.lookup_done(&key, recorded) {
                NodeCounters::add(&act.counters.dropped, 1);
                debug!(node = %act.node, uid = %key, reason, "downstream message dropped");
            }
            act.pump(ctx);
        }));
    }

    fn record_ack(&self, acked: crate::downstream::Acked) {
        let Some(info) = acked.info else { return };
        if acked.msg.route.group != kubeedge_api::names::GROUP_RESOURCE {
            return; // spec §3.7: twin (and other groups) record nothing.
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
                rv: acked.msg.header.resource_version,
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
        self.hub.events.connected(&self.node);
        info!(node = %self.node, generation = self.generation, "edge connected");
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.conn.close();
        // Only the registered generation speaks for the node (spec §9.2–9.3).
        if self.hub.registry.remove(&self.node, self.generation) {
            self.hub.events.disconnected(&self.node);
            info!(node = %self.node, generation = self.generation, pending = self.down.pending(), "edge disconnected");
        } else {
            debug!(node = %self.node, generation = self.generation, "replaced session ended");
        }
    }
}

impl Handler<Deliver> for Session {
    type Result = ();

    fn handle(&mut self, Deliver(msg): Deliver, ctx: &mut Context<Self>) {
        match classify(&msg) {
            Delivery::NoAck => {
                // A node deletion is queued too, so it takes effect after what precedes it.
                let deletion = is_node_deletion(&msg);
                if !self.down.push_no_ack(msg) {
                    if deletion {
                        info!(node = %self.node, "node deleted, closing session");
                        self.conn.close();
                        ctx.stop();
                        return;
                    }
                    NodeCounters::add(&self.counters.dropped, 1);
                    warn!(node = %self.node, "no-ack queue full, message dropped");
                }
            }
            Delivery::Ack => {
                let resource = msg.route.resource.clone();
                match self.down.intake_ack(msg) {
                    Intake::Queued | Intake::Waiting => {}
                    Intake::Dropped(reason) => {
                        NodeCounters::add(&self.counters.dropped, 1);
                        debug!(node = %self.node, resource = %resource, reason, "downstream message dropped");
                    }
                    Intake::Lookup { key, info } => {
                        let name = NodeResource::parse(&resource)
                            .map(|r| r.name)
                            .unwrap_or_default();
                        let spec = SyncSpec {
                            api_version: info.api_version,
                            kind: info.kind,
                            name: if name.is_empty() { info.name } else { name },
                        };
                        self.lookup(ctx, resource, key, spec);
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
        if let Some(acked) = self.down.on_ack(&resp.header.parent_id) {
            NodeCounters::add(&self.counters.acked, 1);
            self.record_ack(acked);
            self.pump(ctx);
        }
    }
}

impl Handler<Stop> for Session {
    type Result = ();

    fn handle(&mut self, Stop(reason): Stop, ctx: &mut Context<Self>) {
        match &reason {
            StopReason::Replaced => {
                info!(node = %self.node, generation = self.generation, "session replaced by a new connection");
                self.conn
                    .close_with(CloseCode::Normal, "replaced by a new connection");
            }
            StopReason::Shutdown => {
                for m in self.down.drain() {
                    self.conn.push_message(&m);
                }
                self.conn
                    .close_with(CloseCode::Away, "cloudhub shutting down");
            }
            StopReason::NodeDeleted => {
                info!(node = %self.node, generation = self.generation, "session closed: node deleted");
                self.conn.close_with(
                    CloseCode::Policy,
                    "node deleted; its certificates are revoked",
                );
            }
            StopReason::ConnectionClosed(why) => {
                debug!(node = %self.node, reason = %why, "connection closed");
                self.conn.close();
            }
        }
        ctx.stop();
    }
}
