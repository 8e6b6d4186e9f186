//! The `udsserver` beehive module: serves the socket while the bus runs.

use std::sync::Mutex;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use kubeedge_api::lifecycle::Lifecycle;
use tracing::{debug, info};

use crate::address::Address;
use crate::metrics::UdsMetrics;
use crate::server::{self, BindError, Listener};

/// The module name (KubeEdge runs this inside cloudhub; here it is a module of its own, sending
/// through cloudhub like every other).
pub const UDSSERVER: &str = kubeedge_api::names::UDSSERVER;

/// The Unix-socket server of `modules.cloudHub.unixsocket`, the path KubeEdge's CSI driver
/// reaches edges by: a client writes one message (a volume operation for
/// `node/<node>/<ns>/volume/<id>`), the server sends it to that node through cloudhub and
/// waits up to 60 s, and writes back the edge's answer (or an `error` message) on the same
/// connection, then closes it.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let bus = beehive::Bus::new();
/// let server = udsserver::UdsServer::bind("unix:///var/lib/kubeedge/kubeedge.sock", bus.endpoint("udsserver"))?;
/// bus.register(server)?;
/// bus.start()?;
/// # Ok(()) }
/// ```
pub struct UdsServer {
    address: Address,
    listener: Mutex<Option<Listener>>,
    endpoint: Endpoint,
    metrics: UdsMetrics,
    timeout: Duration,
    life: Lifecycle,
}

impl std::fmt::Debug for UdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdsServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl UdsServer {
    /// Binds `address` (`unix://<path>` or `tcp://<loopback:port>`) now, so a bad address
    /// fails here; serving starts with the bus. Needs a Tokio runtime.
    pub fn bind(address: &str, endpoint: Endpoint) -> Result<Self, BindError> {
        let address: Address = address.parse()?;
        let listener = server::bind(&address)?;
        Ok(UdsServer {
            address,
            listener: Mutex::new(Some(listener)),
            endpoint,
            metrics: UdsMetrics::new(),
            timeout: crate::server::ANSWER_TIMEOUT,
            life: Lifecycle::new(),
        })
    }

    /// How long an edge may take to answer (default [`crate::ANSWER_TIMEOUT`], KubeEdge's).
    pub fn with_answer_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Where it listens.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Its counters.
    pub fn metrics(&self) -> UdsMetrics {
        self.metrics.clone()
    }

    /// Its accept loop: after `bus.shutdown()`, `lifecycle().join(timeout)` waits for it (the
    /// socket file is removed then).
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }
}

impl Actor for UdsServer {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let taken = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(listener) = taken {
            self.life.spawn(server::serve(
                listener,
                self.endpoint.clone(),
                self.metrics.clone(),
                self.timeout,
                self.life.token().clone(),
            ));
            info!(address = %self.address, "unix socket server listening");
        }
    }
}

impl Handler<Message> for UdsServer {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        debug!(msg = %msg, "udsserver takes no messages: dropped");
    }
}

impl Module for UdsServer {
    fn name(&self) -> &str {
        UDSSERVER
    }

    fn group(&self) -> &str {
        UDSSERVER
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
    }
}
