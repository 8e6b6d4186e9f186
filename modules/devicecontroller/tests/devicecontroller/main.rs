//! devicecontroller's integration tests.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p devicecontroller --test devicecontroller <topic>::`.

mod support;

mod authorization;
mod devices;
mod legacy_version;
mod permissions;
