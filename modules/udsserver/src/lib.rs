//! cloudhub's Unix-socket server (`modules.cloudHub.unixsocket`): the path KubeEdge's CSI
//! driver reaches edge nodes by. No CSI driver is built here.
//!
//! ```text
//! csidriver ─one JSON message─► socket ─► udsserver ─send_sync 60 s─► cloudhub ─► edge metamanager ─► edged
//! csidriver ◄─the edge's answer, or an `error` message─┘       ◄─ response (parent = request id) ◄──┘
//! ```
//!
//! Start with [`UdsServer`]; the request and answer shapes are in [`request`]. What differs
//! from KubeEdge (a request is read whole up to 1 MiB, only volume operations pass, a `null`
//! answer becomes an error, the socket is mode 0600) is in `docs/uds.md`.

mod address;
mod metrics;
mod module;
pub mod request;
mod server;

pub use address::{Address, AddressError};
pub use metrics::{Outcome, UdsMetrics};
pub use module::{UDSSERVER, UdsServer};
pub use server::{ANSWER_TIMEOUT, BindError, MAX_IN_PROGRESS, READ_TIMEOUT};
