//! The scenarios with `authorization.enable: true, debug: false`: cloudcore decides each edge
//! request, then sends what it allows as `system:node:<name>`, where the API server's Node
//! authorizer and NodeRestriction (local-up runs both) decide again. A real edged's requests
//! must pass both.

/// The suite's cloudcore impersonates nodes.
const IMPERSONATE: bool = true;

// clippy::duplicate_mod: the suite is compiled twice on purpose, once per configuration
// (`kubeedge_defaults` and `impersonated`), each with a cluster of its own.
#[allow(clippy::duplicate_mod)]
#[path = "suite/mod.rs"]
mod suite;
