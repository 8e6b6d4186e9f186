//! cloudcore with real edge nodes: `scripts/local-up` brings up etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, the `cloudcore` binary of this package, and two
//! unmodified KubeEdge edgecores with edged (their kubelet) running pods on containerd; every
//! check goes through the real `kubectl`.
//!
//! Each configuration is one test that runs its scenarios side by side on a cluster of its own
//! (a slot of local-up; the clusters of the two configurations run at the same time): one
//! edge stays up throughout and is watched Ready for five minutes while pods, volumes, logs,
//! exec and attach run on it; the other is killed, restarted and cut off for two minutes;
//! then cloudcore restarts. Through all of it cloudcore refuses nothing the real edges ask and
//! answers none of their requests with an error. `require_authorization` runs one edge with
//! KubeEdge's `featureGates.requireAuthorization`: the CSR of its metaServer is approved by
//! cloudcore, signed by kube-controller-manager and served. `local_up` checks the script
//! itself: what a missing prerequisite says, and that `down` (or the owner's exit) leaves the
//! host as it was.
//! Needs root, containerd, runc, containernetworking-plugins, busybox-static and umoci
//! (`.ci/run` installs them; docs/real-edge.md).
//!
//! ```text
//! cargo test -p cloudcore-server --test realedge -- --test-threads=4   # everything, ~7 min
//! cargo test -p cloudcore-server --test realedge kubeedge_defaults    # one configuration
//! ```

mod support;

mod impersonated;
mod kubeedge_defaults;
mod local_up;
mod require_authorization;
