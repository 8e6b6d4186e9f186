//! The iptables manager: a `TUNNEL-PORT` NAT chain that DNATs each cloudcore's advertised
//! kubelet port to its stream server.

mod external;
mod manager;
mod runner;

pub use external::{DEFAULT_FORWARD_PORT, run_standalone};
pub use manager::{
    CHAIN, COMMENT, IptablesError, IptablesManager, RECONCILE_INTERVAL, RecordPolicy,
};
pub use runner::{CommandOutput, CommandRunner, SystemRunner};
