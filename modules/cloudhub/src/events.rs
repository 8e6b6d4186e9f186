//! `connected` / `disconnected` events to group `edgecontroller` and modules `dynamiccontroller`
//! and `synccontroller`, published in the order sessions report them.

use std::sync::Mutex;

use beehive::{Content, Endpoint, Message};
use kubeedge_api::names::{self, operation as hub_op};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Events waiting for the publisher; beyond this they are dropped with a warning.
const CAPACITY: usize = 65_536;

/// The event queue shared by every session.
#[derive(Debug)]
pub(crate) struct Events {
    tx: mpsc::Sender<Message>,
    rx: Mutex<Option<mpsc::Receiver<Message>>>,
}

/// The event message: source `cloudhub`, group `resource`, resource `node/<id>`, content
/// `{"client_id","event_type","timestamp"}` (seconds) as a JSON object.
pub fn event_message(node: &str, event: &str) -> Message {
    let secs = beehive::now_millis() / 1000;
    let content = serde_json::json!({"client_id": node, "event_type": event, "timestamp": secs});
    Message::new()
        .with_route(
            names::CLOUDHUB,
            names::GROUP_RESOURCE,
            format!("node/{node}"),
            event,
        )
        .with_content(Content::json(&content).unwrap_or_default())
}

impl Events {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::channel(CAPACITY);
        Events {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    fn publish(&self, node: &str, event: &str) {
        if self.tx.try_send(event_message(node, event)).is_err() {
            warn!(node, event, "event queue full, event dropped");
        }
    }

    pub(crate) fn connected(&self, node: &str) {
        self.publish(node, hub_op::CONNECTED);
    }

    pub(crate) fn disconnected(&self, node: &str) {
        self.publish(node, hub_op::DISCONNECTED);
    }

    /// Publishes queued events forever (started once, with the module).
    pub(crate) async fn run(&self, endpoint: Endpoint) {
        let Some(mut rx) = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        while let Some(msg) = rx.recv().await {
            // dynamiccontroller resumes a reconnected node's watches and synccontroller brings
            // it up to date; either may not be running.
            let _ = endpoint.try_send(names::DYNAMICCONTROLLER, msg.clone());
            let _ = endpoint.try_send(names::SYNCCONTROLLER, msg.clone());
            if let Err(e) = endpoint.send_to_group(names::EDGECONTROLLER, msg).await {
                debug!(error = %e, "node event not published");
            }
        }
    }
}
