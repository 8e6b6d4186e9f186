//! The hostile-edge suite (`hostile_edge/suite.rs`) with the default configuration: no
//! impersonation, so cloudcore's own check is all that stands between the edge and the cluster.

/// The shared cloudcore of the included suite acts as itself.
const IMPERSONATE: bool = false;

// clippy::duplicate_mod: the suite is compiled twice on purpose, once per configuration
// (`hostile_edge` and `hostile_edge_impersonated`), each with a cloudcore of its own.
#[allow(clippy::duplicate_mod)]
#[path = "hostile_edge/suite.rs"]
mod suite;

/// Revocations a cloudcore must notice when it starts (each test runs its own cloudcore).
#[path = "hostile_edge/restarts.rs"]
mod restarts;
