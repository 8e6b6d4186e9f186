//! synccontroller's integration tests.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p synccontroller --test synccontroller <topic>::`.

mod reconcile;
