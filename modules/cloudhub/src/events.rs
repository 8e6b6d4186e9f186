//! `connected` / `disconnected` events to group `edgecontroller` and modules
//! `dynamiccontroller`, `synccontroller` and `router`, published in the order sessions report
//! them.

use std::sync::Mutex;

use beehive::{Content, Endpoint, Message};
use kubeedge_api::names::{self, operation as hub_op};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Events waiting for each destination; beyond this they are dropped with a warning.
const CAPACITY: usize = 65_536;

/// Where node events go. Each destination has its own queue and publisher, so a slow or
/// stuck module delays only its own events.
#[derive(Debug, Clone, Copy)]
enum Destination {
    /// Every member of group `edgecontroller`.
    Group(&'static str),
    /// One module, which may not be running in this composition.
    Module(&'static str),
}

const DESTINATIONS: [Destination; 4] = [
    Destination::Group(names::EDGECONTROLLER),
    // dynamiccontroller resumes a reconnected node's watches; synccontroller brings it up to
    // date (and, with several replicas, takes over what a node that moved here missed); the
    // router sends the node its rules' subscriptions again.
    Destination::Module(names::DYNAMICCONTROLLER),
    Destination::Module(names::SYNCCONTROLLER),
    Destination::Module(names::ROUTER),
];

/// The event queues shared by every session.
#[derive(Debug)]
pub(crate) struct Events {
    queues: Vec<mpsc::Sender<Message>>,
    receivers: Mutex<Vec<(Destination, mpsc::Receiver<Message>)>>,
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
        let (queues, receivers) = DESTINATIONS
            .iter()
            .map(|d| {
                let (tx, rx) = mpsc::channel(CAPACITY);
                (tx, (*d, rx))
            })
            .unzip();
        Events {
            queues,
            receivers: Mutex::new(receivers),
        }
    }

    fn publish(&self, node: &str, event: &str) {
        let msg = event_message(node, event);
        for (queue, destination) in self.queues.iter().zip(DESTINATIONS) {
            match queue.try_send(msg.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    warn!(node, event, ?destination, "event queue full, event dropped")
                }
                // The publishers stopped with the bus: sessions closing after it have nobody
                // left to tell.
                Err(TrySendError::Closed(_)) => {
                    debug!(
                        node,
                        event,
                        ?destination,
                        "hub stopping, event not published"
                    )
                }
            }
        }
    }

    pub(crate) fn connected(&self, node: &str) {
        self.publish(node, hub_op::CONNECTED);
    }

    pub(crate) fn disconnected(&self, node: &str) {
        self.publish(node, hub_op::DISCONNECTED);
    }

    /// Publishes queued events until the bus shuts down or `done` is cancelled with nothing
    /// queued (started once, with the module). Each destination gets every event in order,
    /// waiting while its mailbox is full: a burst of reconnects must not lose the events that
    /// catch nodes up.
    pub(crate) async fn run(&self, endpoint: Endpoint, done: CancellationToken) {
        let receivers =
            std::mem::take(&mut *self.receivers.lock().unwrap_or_else(|e| e.into_inner()));
        let publishers = receivers
            .into_iter()
            .map(|(destination, rx)| publish(destination, rx, endpoint.clone(), done.clone()));
        futures::future::join_all(publishers).await;
    }
}

async fn publish(
    destination: Destination,
    mut rx: mpsc::Receiver<Message>,
    endpoint: Endpoint,
    done: CancellationToken,
) {
    loop {
        // Queued events first: the last sessions' `disconnected` goes out before the end.
        let msg = tokio::select! {
            biased;
            msg = rx.recv() => match msg {
                Some(msg) => msg,
                None => return,
            },
            () = done.cancelled() => return,
        };
        let sent = match destination {
            Destination::Group(group) => endpoint.send_to_group(group, msg).await.map(drop),
            Destination::Module(module) => endpoint.send(module, msg).await,
        };
        match sent {
            Ok(()) => {}
            // The composition does not run that module, or it stopped: nobody to tell.
            Err(
                beehive::Error::UnknownModule { .. }
                | beehive::Error::ModuleDisabled { .. }
                | beehive::Error::EmptyGroup { .. }
                | beehive::Error::Stopped { .. },
            ) => {}
            Err(beehive::Error::Shutdown { .. }) => return,
            Err(error) => debug!(?destination, %error, "node event not published"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log lines written while `f` runs on this thread, at `debug` and above.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = buffer.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn an_event_after_the_publishers_stopped_is_not_reported_as_a_full_queue() {
        let events = Events::new();
        // As when the bus has shut down: the publishers are gone with their receivers.
        events.receivers.lock().unwrap().clear();
        let log = logged(|| events.disconnected("edge-1"));
        assert!(!log.contains("queue full"), "{log}");
        assert_eq!(
            log.matches("hub stopping, event not published").count(),
            DESTINATIONS.len(),
            "{log}"
        );
        assert!(!log.contains("WARN"), "{log}");
    }

    #[test]
    fn an_event_beyond_a_full_queue_is_dropped_with_a_warning() {
        let events = Events::new();
        for _ in 0..CAPACITY {
            events.connected("edge-1");
        }
        let log = logged(|| events.disconnected("edge-1"));
        assert_eq!(
            log.matches("event queue full, event dropped").count(),
            DESTINATIONS.len(),
            "{log}"
        );
        assert!(log.contains("WARN"), "{log}");
    }
}
