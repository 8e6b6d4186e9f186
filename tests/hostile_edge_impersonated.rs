//! The hostile-edge suite with `authorization.enable: true, debug: false`: cloudcore decides
//! every edge request first, then sends what it allows to the API server impersonating
//! `system:node:<name>`, where the Node authorizer and NodeRestriction (the test API server
//! runs both) decide again. The same attempts must be refused and the same own-node requests
//! must still succeed.

/// The shared cloudcore of the included suite impersonates nodes.
const IMPERSONATE: bool = true;

#[path = "hostile_edge.rs"]
mod suite;
