//! The cloud side of KubeEdge on a beehive-style actor runtime.
//!
//! This crate only re-exports the workspace crates; applications compose the modules they
//! need on a [`beehive::Bus`].
//!
//! ```text
//! edge ⇄ cloudhub ⇄ beehive ⇄ edgecontroller / devicecontroller / synccontroller ⇄ apiserver
//! kubectl ⇄ apiserver ⇄ cloudstream ⇄ edge
//! ```

pub mod apiclient;
pub mod app;
pub mod config;
pub mod diagnose;
pub mod leader;
pub mod metrics;
pub mod ops;
pub mod permissions;

#[doc(inline)]
pub use beehive;
#[doc(inline)]
pub use kubeedge_api as api;

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
