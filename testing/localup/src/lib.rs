//! Test-only: drives `scripts/local-up`, a whole KubeEdge cluster on this machine (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler, our cloudcore, and real edgecores
//! with edged running pods on containerd), and `kubectl` against it.
//!
//! ```text
//! test ─ kubectl ─► kube-apiserver ─► cloudcore ◄─wss─ edgecore (netns) ─► edged ─► containerd
//!                         └─ logs/exec ─► stream server ─tunnel─┘
//! ```
//!
//! Start with [`LocalUp`]: it returns a [`Cluster`] once every edge Node is Ready, with the
//! lines local-up prints (kubeconfig, nodes, image, monitor). Its operations stop, kill,
//! start and disconnect components; dropping it (or the owner process exiting) takes it down.
//! A missing prerequisite is an error naming its Debian package; nothing is skipped.
//!
//! ```no_run
//! # async fn demo() -> local_up::Result<()> {
//! let cluster = local_up::LocalUp::new().edges(1).start()?;
//! let nodes = cluster.kubectl_json(&["get", "nodes"]).await?;
//! # let _ = nodes;
//! # Ok(())
//! # }
//! ```

mod cluster;
mod error;
mod kubectl;
mod metrics;

pub use cluster::{Cluster, LocalUp, script};
pub use error::{Error, Result};
pub use kubectl::eventually;
pub use metrics::{Metrics, Sample};
