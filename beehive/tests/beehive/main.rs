//! beehive's integration tests.
//!
//! One test binary, one module per topic: the crate and its dependencies are linked once
//! for all of them. To run one topic:
//! `cargo test -p beehive --test beehive <topic>::`.

mod support;

mod decode_speed;
mod message;
mod modules;
mod send;
mod sender;
mod stats;
mod sync;
