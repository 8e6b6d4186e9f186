//! cloudcore end to end, one test binary with a module per topic. Most topics run the
//! `cloudcore` binary of this package (cargo builds it first) against a real kube-apiserver
//! (`k8s-testenv`, one per test binary, shared by every topic); `interop_edgecore`,
//! `least_privilege` and one `replicas` test run an unmodified KubeEdge edgecore.
//!
//! ```text
//! cargo test -p cloudcore-server                                # everything
//! cargo test -p cloudcore-server --test cloudcore hostile_edge  # one topic
//! ```

mod support;

mod binary;
mod diagnose;
mod hostile_edge;
mod hostile_edge_impersonated;
mod interop_edgecore;
mod iptables_external;
mod leader;
mod least_privilege;
mod manifests;
mod operator;
mod replicas;
