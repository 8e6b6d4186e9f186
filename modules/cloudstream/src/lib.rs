//! cloudstream: the tunnel that lets `kubectl logs/exec/attach` and metrics reach pods on
//! edge nodes, wire-compatible with KubeEdge's cloudstream and edgestream.
//!
//! ```text
//! kube-apiserver ─HTTPS─► stream server :10003 ─(node of the pod)─► Session ─┐
//!                                                                        tunnel :10004 (WSS, mTLS,
//! edge kubelet ◄─ edge stream agent ◄══ Text frames: uvarint id ‖ type ‖ data ◄┘ dialed by the edge)
//! ```
//!
//! Start with [`CloudStream`] (the `cloudStream` beehive module). The wire formats both ends
//! share live in `kubeedge_wire` (re-exported here): [`TunnelMessage`] (framing),
//! [`ConnectRequest`] (CONNECT JSON), [`ws`] (WebSocket on actix-http's codec) and [`http1`];
//! the edge agent is `edge::stream`.
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
pub mod iptables;
mod listen;
mod metrics;
mod module;
pub mod negotiate;
mod record;
mod stream;
mod tunnel;

pub use kubeedge_wire::tunnel::tls;
pub use kubeedge_wire::{http1, ws};

pub use config::{
    CloudStreamConfig, IptablesManagerConfig, IptablesMode, StreamAuthorizationConfig,
    StreamAuthorizationMode, Tuning,
};
pub use kubeedge_wire::gourl::{GoUrl, UrlError};
pub use kubeedge_wire::tunnel::tls::{ServerTls, TlsError, TlsMaterial};
pub use kubeedge_wire::tunnel::{
    ConnectError, ConnectRequest, FrameError, GoHeader, INPUT_WINDOW_HEADER, Inbound, MAX_DATA_LEN,
    MessageType, PushError, QueueReceiver, QueueSender, StreamEnd, TunnelMessage, WINDOW_HEADER,
    canonical_header_key, put_uvarint, stream_queue,
};
pub use metrics::{CountersSnapshot, Metrics};
pub use module::{CloudStream, CloudStreamHandle, CloudStreamTls, Error};
pub use record::{
    TUNNEL_PORT_ANNOTATION, TUNNEL_PORT_BASE, TUNNEL_PORT_CONFIGMAP, TUNNEL_PORT_LIMIT,
    TUNNEL_PORT_NAMESPACE, TunnelPortRecord,
};
pub use stream::{KubePodLocator, LocateError, PodLocator, StaticPods};
pub use tunnel::SessionError;
