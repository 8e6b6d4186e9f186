//! The taskmanager against a real API server, with the edge played by the test: what the
//! module sends to `cloudhub` is captured, and edge reports are injected as cloudhub
//! forwards them (`node/<session>/…`). Which replica holds which node is set by the test.
//!
//! One test binary, one module per topic; the tests take turns (every taskmanager watches
//! every job of the cluster). To run one topic:
//! `cargo test -p taskmanager --test taskmanager <topic>::`.

mod support;

mod flows;
mod refusals;
mod scheduling;
