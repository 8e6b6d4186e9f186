//! cloudstream's integration tests.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p cloudstream --test cloudstream <topic>::`.

mod support;

mod apiserver;
mod authz;
mod edge_agent;
mod edgecore;
mod exec;
mod hostile;
mod identity;
mod iptables;
mod logs;
mod module;
mod review_cache;
mod stream_tls;
mod tunnel;
