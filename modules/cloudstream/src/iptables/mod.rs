//! The iptables manager: a `TUNNEL-PORT` NAT chain that DNATs each cloudcore's advertised
//! kubelet port to its stream server (spec §7).

mod manager;
mod runner;

pub use manager::{CHAIN, COMMENT, IptablesError, IptablesManager, RECONCILE_INTERVAL};
pub use runner::{CommandOutput, CommandRunner, SystemRunner};
