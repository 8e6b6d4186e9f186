//! The edge side: a hub client ([`hub`]) that connects to cloudhub like edgecore's edgehub,
//! and a stream agent ([`stream`]) that serves cloudstream tunnels like edgecore's edgestream.
//! Used by tests, examples, load tools, and Rust edge applications.
//!
//! Both verify the cloud's server certificate against the KubeEdge CA unless a caller asks
//! for [`ServerVerification::InsecureSkipVerify`].

pub mod hub;
pub mod stream;
mod verify;

pub use verify::ServerVerification;

/// The crate README's code blocks, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
