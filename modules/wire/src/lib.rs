//! The wire formats the cloud and the edge share, each defined once here, without Kubernetes
//! or actor dependencies (as kube-core is split from kube-runtime), so that an edge (and the
//! test harness) can speak them without building the cloud.
//!
//! ```text
//! hub      one JSON message per WebSocket message between edgecore and cloudhub: framing,
//!          reassembly caps, keepalive, acknowledgement (beehive's message model, no bus)
//! tunnel   tunnel frames (uvarint id ‖ type ‖ data), CONNECT JSON, stream queues
//! gourl    Go's URL rules, as the CONNECT JSON carries them
//! http1    HTTP/1.1 heads and bodies as the tunnel relays them
//! ws       WebSocket on actix-http's codec over tokio IO: the handshake on both ends, and
//!          the socket's reader and batching writer (binary data in Text frames)
//! ```
//!
//! Leaves first: `gourl` and `http1` name nothing else here; `tunnel` uses `gourl`; `ws`
//! uses `http1` and `tunnel`'s frames; `hub` reads and writes its frames with `ws`'s decoder
//! and frame writer, so both WebSocket users refuse and write bytes alike.

pub mod gourl;
pub mod http1;
pub mod hub;
pub mod tunnel;
pub mod ws;
