//! Test-only: runs an unmodified KubeEdge edgecore against our cloudcore on loopback, with the
//! real Kubernetes API server of `k8s-testenv`.
//!
//! ```text
//! kubectl ─► kube-apiserver ─► cloudcore (process) ◄─wss─ edgecore (process) ─► sqlite store
//!                  └─ logs/exec ─► stream server ─tunnel─► edgestream ─► FakeKubelet :10350
//! ```
//!
//! Start with [`Interop::builder`]. The scenarios of one test binary take turns on its API
//! server ([`Serial`]); test binaries run side by side, each edgecore's metaServer on a port of
//! its own, and only the kubelet port 10350 is held machine-wide
//! ([`FakeKubelet::start_on_kubelet_port`]). The builder unpacks and verifies the binary
//! ([`binary::edgecore`]), starts our cloudcore with a fresh CA, then edgecore with the token
//! cloudhub wrote. Processes run in their own process groups and are killed on drop, also when
//! a test panics; their log tails are printed then. [`host::EdgeHost`] runs an edgecore with
//! containerd in namespaces of its own (node jobs that install and restart things), fed by a
//! [`registry::Registry`] of [`images`] built here. Anything missing (the archive, `xz`,
//! `sqlite3`, the cloudcore binary, the API server) is an error that names it: the suite fails,
//! it never skips.
//!
//! ```no_run
//! # async fn demo() -> edgecore_interop::Result<()> {
//! use edgecore_interop::Interop;
//! let mut interop = Interop::builder("edge-demo").start().await?;
//! let stored = interop.store().all()?;
//! # let _ = stored;
//! # Ok(())
//! # }
//! ```

mod balancer;
pub mod binary;
mod cloud;
mod edge;
mod error;
mod fixture;
pub mod host;
mod http;
pub mod images;
mod kubectl;
pub mod kubelet;
mod mqtt;
mod process;
pub mod rbac;
pub mod registry;
mod serial;
mod spdy;
mod store;
pub mod tools;

pub use balancer::Balancer;
pub use cloud::{CloudPorts, CloudSpec, Cloudcore, Metrics, listen_ports};
pub use edge::{EdgeConfig, EdgeHome, Edgecore, KUBELET, pem};
pub use error::{Error, Result};
pub use fixture::{EDGE_LABEL, Interop, InteropBuilder, eventually};
pub use http::{Recorded, Recorder, Response, get as http_get, request as http_request};
pub use kubectl::{kubectl, kubectl_ok, kubectl_spawn};
pub use kubelet::FakeKubelet;
pub use mqtt::{Mosquitto, Subscriber};
pub use process::{Process, reap_orphans, tail};
pub use serial::{KubeletPort, Serial};
pub use store::{EdgeStore, Stored, key as store_key};
