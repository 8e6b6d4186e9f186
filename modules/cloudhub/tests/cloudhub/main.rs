//! cloudhub's integration tests.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p cloudhub --test cloudhub <topic>::`.
//!
//! Two tests change what the whole process shares, so each stays a binary of its own:
//! `cloudhub_file_limit` lowers the process's open-file limit, `cloudhub_logs` installs the
//! process-wide log subscriber that captures the hub's lines. Both take `support` from here.

mod support;

mod apiserver;
mod bad_input;
mod certserver;
mod downstream;
mod edge_client;
mod edgecore;
mod first_sight;
mod listener_limits;
mod offline;
mod revocation;
mod sessions;
mod token_store;
mod upstream;
