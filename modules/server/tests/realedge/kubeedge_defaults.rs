//! The scenarios with cloudcore as KubeEdge ships it: `authorization.enable: false`, so
//! cloudcore's own node authorizer decides each edge request and sends what it allows to the
//! API server as cloudcore.

/// The suite's cloudcore does not impersonate nodes.
const IMPERSONATE: bool = false;

// clippy::duplicate_mod: the suite is compiled twice on purpose, once per configuration
// (`kubeedge_defaults` and `impersonated`), each with a cluster of its own.
#[allow(clippy::duplicate_mod)]
#[path = "suite/mod.rs"]
mod suite;
