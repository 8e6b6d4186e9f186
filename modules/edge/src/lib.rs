//! The edge side: a hub client ([`hub`]) that connects to cloudhub like edgecore's edgehub,
//! and a stream agent ([`stream`]) that serves cloudstream tunnels like edgecore's edgestream.
//! Used by tests, examples, load tools, and Rust edge applications.

pub mod hub;
pub mod stream;
