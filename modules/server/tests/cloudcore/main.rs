//! cloudcore end to end, a module per topic. Most topics run the `cloudcore` binary of this
//! package (cargo builds it first) against a real kube-apiserver (`k8s-testenv`, one per test
//! binary, shared by every topic), several cloudcores at once: each names its own nodes and
//! namespaces. One `replicas` test runs an unmodified KubeEdge edgecore.
//!
//! The scenarios that need a cluster where their cloudcore is the only one are the `edgecore`
//! test binary beside this one.
//!
//! ```text
//! cargo test -p cloudcore-server                                # everything
//! cargo test -p cloudcore-server --test cloudcore hostile_edge  # one topic
//! ```

mod support;

mod binary;
mod chart;
mod component;
mod diagnose;
mod hostile_edge;
mod hostile_edge_impersonated;
mod iptables_external;
mod leader;
mod manifests;
mod monitor;
mod node_jobs;
mod operator;
mod replicas;
