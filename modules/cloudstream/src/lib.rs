//! cloudstream: the tunnel that lets `kubectl logs/exec/attach` and metrics reach pods on
//! edge nodes, wire-compatible with KubeEdge's cloudstream and edgestream.
//!
//! ```text
//! kube-apiserver ─HTTPS─► stream server :10003 ─(node of the pod)─► Session ─┐
//!                                                                        tunnel :10004 (WSS, mTLS,
//! edge kubelet ◄─ edge stream agent ◄══ Text frames: uvarint id ‖ type ‖ data ◄┘ dialed by the edge)
//! ```
//!
//! Start with [`CloudStream`] (the `cloudStream` beehive module), configured by
//! [`CloudStreamConfig`] and given its certificates in [`CloudStreamTls`]. The wire formats
//! both ends share have one home, `kubeedge_wire` (the tunnel's frames and CONNECT JSON in
//! `kubeedge_wire::tunnel`, WebSocket in `kubeedge_wire::ws`, HTTP/1 in `kubeedge_wire::http1`);
//! the edge agent is `edge::stream`.
//!
//! ```
//! use cloudstream::CloudStreamConfig;
//!
//! // KubeEdge's defaults: off until enabled, tunnel on 10004, stream server on 10003.
//! let config = CloudStreamConfig::default();
//! assert!(!config.enable);
//! assert_eq!((config.tunnel_port, config.stream_port), (10004, 10003));
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

pub use config::{
    CloudStreamConfig, IptablesManagerConfig, IptablesMode, StreamAuthorizationConfig,
    StreamAuthorizationMode, Tuning,
};
pub use metrics::{CountersSnapshot, Metrics};
pub use module::{CloudStream, CloudStreamHandle, CloudStreamTls, Error};
/// The certificate types of [`CloudStreamTls`] and [`Error`], whose home is
/// `pki::stream_tls`: re-exported so that configuring this module needs no dependency on
/// `pki`.
pub use pki::stream_tls::{ServerTls, TlsError, TlsMaterial};
pub use record::{
    TUNNEL_PORT_ANNOTATION, TUNNEL_PORT_BASE, TUNNEL_PORT_CONFIGMAP, TUNNEL_PORT_LIMIT,
    TUNNEL_PORT_NAMESPACE, TunnelPortRecord,
};
pub use stream::{KubePodLocator, LocateError, PodLocator, StaticPods};
pub use tunnel::SessionError;
