//! The cloud side of KubeEdge on a beehive-style actor runtime: one crate that re-exports every
//! crate of the workspace, the way `kube` re-exports `kube-core`, `kube-client` and
//! `kube-runtime`. Each re-export has a feature of the same name (all on by default), so an
//! application can take only [`beehive`] with `default-features = false`.
//!
//! ```text
//! edge ⇄ cloudhub ⇄ beehive ⇄ edgecontroller / devicecontroller / synccontroller ⇄ apiserver
//! edge metaServer ⇄ cloudhub ⇄ dynamiccontroller ⇄ apiserver
//! node jobs ⇄ taskmanager ⇄ cloudhub ⇄ edge taskManager
//! kubectl ⇄ apiserver ⇄ cloudstream ⇄ edge
//! wire: the formats both ends share (hub framing, tunnel frames, WebSocket), no Kubernetes
//! server: all of the above on one bus from a CloudCore YAML file (the `cloudcore` binary)
//! ```
//!
//! Start with [`server`] to run cloudcore, or with [`beehive::Bus`] to compose modules of your
//! own:
//!
//! ```
//! use cloudcore::beehive::{Bus, Message, constants::operation};
//!
//! actix_rt::System::new().block_on(async {
//!     let bus = Bus::new();
//!     let mut hub = bus.register_inbox("hub", "hub", 16).unwrap();
//!     bus.start().unwrap();
//!     let pod = Message::new().with_route("controller", "resource", "node/n1/default/pod/p", operation::INSERT);
//!     bus.endpoint("controller").send("hub", pod).await.unwrap();
//!     assert_eq!(hub.recv().await.unwrap().route.operation, "insert");
//!     bus.shutdown().await;
//! });
//!
//! // cloudcore reads KubeEdge's CloudCore file; the minimal one enables cloudhub and the
//! // controllers, which need an API server.
//! # #[cfg(feature = "server")] {
//! use cloudcore::server::config::CloudCoreConfig;
//! let config = CloudCoreConfig::from_yaml(&CloudCoreConfig::min_yaml()).unwrap();
//! assert!(config.modules.cloud_hub.enable && config.needs_kubernetes());
//! # }
//! ```

#[doc(inline)]
pub use beehive;
#[cfg(feature = "cloudhub")]
#[doc(inline)]
pub use cloudhub;
#[cfg(feature = "cloudstream")]
#[doc(inline)]
pub use cloudstream;
#[cfg(feature = "csrapprover")]
#[doc(inline)]
pub use csrapprover;
#[cfg(feature = "devicecontroller")]
#[doc(inline)]
pub use devicecontroller;
#[cfg(feature = "dynamiccontroller")]
#[doc(inline)]
pub use dynamiccontroller;
#[cfg(feature = "edge")]
#[doc(inline)]
pub use edge;
#[cfg(feature = "edgecontroller")]
#[doc(inline)]
pub use edgecontroller;
#[cfg(feature = "api")]
#[doc(inline)]
pub use kubeedge_api as api;
#[cfg(feature = "wire")]
#[doc(inline)]
pub use kubeedge_wire as wire;
#[cfg(feature = "pki")]
#[doc(inline)]
pub use pki;
#[cfg(feature = "policycontroller")]
#[doc(inline)]
pub use policycontroller;
#[cfg(feature = "router")]
#[doc(inline)]
pub use router;
#[cfg(feature = "synccontroller")]
#[doc(inline)]
pub use synccontroller;
#[cfg(feature = "taskmanager")]
#[doc(inline)]
pub use taskmanager;
#[cfg(feature = "udsserver")]
#[doc(inline)]
pub use udsserver;

/// cloudcore itself: the modules composed from a CloudCore YAML file (crate `cloudcore-server`).
#[cfg(feature = "server")]
#[doc(inline)]
pub use cloudcore_server as server;

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
