//! cloudcore with an unmodified KubeEdge edgecore, and as the manifests' ServiceAccount: the
//! `cloudcore` binary of this package against a real kube-apiserver of this test binary's own.
//!
//! These scenarios delete and re-create Nodes, and take rules out of the manifests' roles,
//! while their cloudcore is stopped or starting: any other cloudcore on the same API server
//! would act on that too (it garbage-collects the records of a deleted Node, and records its
//! certificates' revocation), so they do not share one with the `cloudcore` test binary, whose
//! topics keep cloudcores running throughout. Within this binary they take turns
//! (`edgecore_interop::Serial`); `scripts/test` runs it as several processes, each with a share
//! of the scenarios and an API server of its own.
//!
//! ```text
//! cargo test -p cloudcore-server --test edgecore                    # both topics, ~5 min
//! cargo test -p cloudcore-server --test edgecore interop_edgecore   # one
//! ```

mod interop_edgecore;
mod least_privilege;
mod node_jobs;
mod policycontroller;
mod router;
mod udsserver;
