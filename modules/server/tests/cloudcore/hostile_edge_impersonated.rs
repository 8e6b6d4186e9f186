//! The hostile-edge suite with `authorization.enable: true, debug: false`: cloudcore decides
//! every edge request first, then sends what it allows to the API server impersonating
//! `system:node:<name>`, where the Node authorizer and NodeRestriction (the test API server
//! runs both) decide again. The same attempts must be refused and the same own-node requests
//! must still succeed.

/// The shared cloudcore of the included suite impersonates nodes.
const IMPERSONATE: bool = true;

// clippy::duplicate_mod: the suite is compiled twice on purpose, once per configuration
// (`hostile_edge` and `hostile_edge_impersonated`), each with a cloudcore of its own.
#[allow(clippy::duplicate_mod)]
#[path = "hostile_edge/suite.rs"]
mod suite;
