//! edgecontroller's integration tests.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p edgecontroller --test edgecontroller <topic>::`.

mod support;

mod downstream;
mod errors;
mod upstream;
