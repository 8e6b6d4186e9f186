//! The test environment's own tests: a real API server started and used.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p k8s-testenv --test testenv <topic>::`.

mod e2e;
