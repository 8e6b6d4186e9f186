//! cloudstream: the tunnel that lets `kubectl logs/exec/attach` and metrics reach pods on
//! edge nodes, wire-compatible with KubeEdge's cloudstream and edgestream.
//!
//! ```text
//! kube-apiserver ─HTTPS─► stream server :10003 ─(node of the pod)─► Session ─┐
//!                                                                        tunnel :10004 (WSS, mTLS,
//! edge kubelet ◄─ edge stream agent ◄══ Text frames: uvarint id ‖ type ‖ data ◄┘ dialed by the edge)
//! ```
//!
//! Start with [`CloudStream`] (the `cloudStream` beehive module). The wire formats live
//! here for both ends: [`TunnelMessage`] (framing), [`ConnectRequest`] (CONNECT JSON),
//! [`ws`] (WebSocket without UTF-8 checks) and [`http1`]; the edge agent is `edge::stream`.
//!
//! ```
//! use cloudstream::{MessageType, TunnelMessage};
//!
//! let bytes = TunnelMessage::remove(300).encode();
//! assert_eq!(&bytes[..], &[0xac, 0x02, 0x04]);
//! let back = TunnelMessage::decode(bytes).unwrap();
//! assert_eq!(back.kind, MessageType::RemoveConnect);
//! ```

mod config;
mod connect;
mod counters;
mod frame;
mod gourl;
pub mod http1;
pub mod iptables;
mod listen;
mod module;
pub mod negotiate;
mod queue;
mod record;
mod stream;
pub mod tls;
mod tunnel;
pub mod ws;

pub use config::{
    CloudStreamConfig, IptablesManagerConfig, IptablesMode, StreamAuthorizationConfig,
    StreamAuthorizationMode, Tuning,
};
pub use connect::{ConnectError, ConnectRequest, GoHeader, canonical_header_key};
pub use counters::{Counters, CountersSnapshot};
pub use frame::{
    FrameError, INPUT_WINDOW_HEADER, MAX_DATA_LEN, MessageType, TunnelMessage, WINDOW_HEADER,
    put_uvarint,
};
pub use gourl::{GoUrl, UrlError};
pub use module::{CloudStream, CloudStreamHandle, CloudStreamTls, Error};
pub use queue::{Inbound, PushError, QueueReceiver, QueueSender, StreamEnd, stream_queue};
pub use record::{
    TUNNEL_PORT_ANNOTATION, TUNNEL_PORT_BASE, TUNNEL_PORT_CONFIGMAP, TUNNEL_PORT_NAMESPACE,
    TunnelPortRecord,
};
pub use stream::{KubePodLocator, LocateError, PodLocator, StaticPods};
pub use tls::{ServerTls, TlsError, TlsMaterial};
pub use tunnel::SessionError;
