//! The hub client as an edge-side beehive module (name `websocket`, group `hub`, like
//! edgecore's edgehub): local modules send to it to reach the cloud, cloud messages are
//! delivered to local groups.

use std::collections::HashMap;
use std::sync::Arc;

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, WrapFuture};
use beehive::{Endpoint, Message, Module};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::client::{HubClient, HubClientConfig, HubEvent};

/// Module name of edgecore's hub (yes, `websocket`).
pub const EDGEHUB_MODULE: &str = "websocket";
/// Its group.
pub const EDGEHUB_GROUP: &str = "hub";

/// Which local group receives cloud messages of each message group.
///
/// Default (edgecore's edgehub): `resource` and `func` → `meta`, `twin` → `twin`, `user` →
/// `bus`, `taskmanager` → `taskmanager`. Messages of other groups are dropped with a log.
/// A message whose parent id is a local synchronous request is handed to that request
/// instead, whatever its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRoutes(pub HashMap<String, String>);

impl Default for GroupRoutes {
    fn default() -> Self {
        GroupRoutes(
            [
                ("resource", "meta"),
                ("func", "meta"),
                ("twin", "twin"),
                ("user", "bus"),
                ("taskmanager", "taskmanager"),
            ]
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect(),
        )
    }
}

/// The edge hub module. Register it on the edge's [`beehive::Bus`]; local modules then
/// `send("websocket", msg)` (or `send_sync`) to talk to the cloud.
pub struct EdgeHub {
    config: HubClientConfig,
    tls: Arc<rustls::ClientConfig>,
    routes: GroupRoutes,
    endpoint: Endpoint,
    client: Option<HubClient>,
}

impl std::fmt::Debug for EdgeHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeHub")
            .field("node", &self.config.node_name)
            .finish_non_exhaustive()
    }
}

impl EdgeHub {
    /// A module that will connect with `config` and `tls` once started. `endpoint` is what it
    /// delivers with (normally `bus.endpoint("websocket")`).
    pub fn new(
        config: HubClientConfig,
        tls: Arc<rustls::ClientConfig>,
        endpoint: Endpoint,
    ) -> Self {
        EdgeHub {
            config,
            tls,
            routes: GroupRoutes::default(),
            endpoint,
            client: None,
        }
    }

    /// Replaces the group mapping.
    pub fn with_routes(mut self, routes: GroupRoutes) -> Self {
        self.routes = routes;
        self
    }
}

async fn deliver(endpoint: Endpoint, routes: GroupRoutes, mut events: mpsc::Receiver<HubEvent>) {
    while let Some(ev) = events.recv().await {
        let msg = match ev {
            HubEvent::Message(m) => m,
            other => {
                debug!(event = ?other, "hub connection event");
                continue;
            }
        };
        if !msg.header.parent_id.is_empty() && endpoint.is_waiting(&msg.header.parent_id) {
            endpoint.send_resp(msg);
            continue;
        }
        let Some(group) = routes.0.get(msg.route.group.as_str()) else {
            warn!(group = %msg.route.group, msg = %msg, "no local group for cloud message, dropped");
            continue;
        };
        if let Err(e) = endpoint.send_to_group(group, msg).await {
            debug!(group = %group, error = %e, "cloud message not delivered locally");
        }
    }
}

impl Actor for EdgeHub {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Context<Self>) {
        let (client, events) = HubClient::start(self.config.clone(), self.tls.clone());
        self.client = Some(client);
        actix::spawn(deliver(self.endpoint.clone(), self.routes.clone(), events));
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if let Some(c) = &self.client {
            c.stop();
        }
    }
}

impl Handler<Message> for EdgeHub {
    type Result = ();

    fn handle(&mut self, msg: Message, ctx: &mut Context<Self>) {
        let Some(client) = self.client.clone() else {
            return;
        };
        if let Err(super::HubError::Stopped(msg)) = client.try_send(msg) {
            // Full: wait for room, keeping order with later messages.
            ctx.wait(
                async move {
                    if client.send(*msg).await.is_err() {
                        warn!("hub client stopped, message to the cloud dropped");
                    }
                }
                .into_actor(self)
                .map(|(), _, _| ()),
            );
        }
    }
}

impl Module for EdgeHub {
    fn name(&self) -> &str {
        EDGEHUB_MODULE
    }

    fn group(&self) -> &str {
        EDGEHUB_GROUP
    }

    fn shutdown(&mut self, _ctx: &mut Context<Self>) {
        if let Some(c) = &self.client {
            c.stop();
        }
    }
}
