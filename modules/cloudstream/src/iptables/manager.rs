//! Keeps the `TUNNEL-PORT` chain in the nat table equal to the tunnel-port record — the part
//! of it that can be a cloudcore's: the record is a ConfigMap anyone who may write it could
//! fill, and these rules redirect TCP on the API server hosts. An entry becomes a rule only
//! when its port is in the negotiated range and its IP is a live cloudcore pod's (or this
//! cloudcore's own); a record that would change more than a few rules at once is refused
//! whole; and each rule matches only destinations that are not local addresses, so no
//! service of the host itself can be captured.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::runner::{CommandOutput, CommandRunner};
use crate::record::{TUNNEL_PORT_BASE, TUNNEL_PORT_LIMIT, TunnelPortRecord};

/// The chain holding the DNAT rules.
pub const CHAIN: &str = "TUNNEL-PORT";
/// Comment on the `OUTPUT`/`PREROUTING` jumps.
pub const COMMENT: &str = "kubeedge tunnel port";
/// How often the rules are made to match the record (upstream 10 s).
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(10);

/// Errors of the iptables manager.
#[derive(Debug, thiserror::Error)]
pub enum IptablesError {
    /// iptables cannot be used here (no binary, not root): the manager does nothing.
    #[error("iptables is unavailable: {0}")]
    Unavailable(String),
    /// The record would change more rules at once than allowed: nothing was applied.
    #[error(
        "the tunnel port record would change {changes} rules at once (at most {limit}); kept the rules in place"
    )]
    TooManyChanges {
        /// Rules the record would add, remove or change.
        changes: usize,
        /// [`RecordPolicy::max_changes`].
        limit: usize,
    },
    /// A command failed.
    #[error("`{command}` failed ({status:?}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit code.
        status: Option<i32>,
        /// What it printed on stderr.
        stderr: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    V4,
    V6,
}

/// Which record entries may become rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordPolicy {
    /// Ports above [`TUNNEL_PORT_BASE`] accepted: `10351..=10350 + tunnel_port_limit`.
    pub tunnel_port_limit: u16,
    /// Most rules one record change may add, remove or change; a record changing more is
    /// refused whole (the rules in place stay).
    pub max_changes: usize,
    /// This cloudcore's own address (internal mode): its entry is accepted whether or not a
    /// cloudcore pod has it.
    pub own_ip: Option<String>,
}

impl Default for RecordPolicy {
    fn default() -> Self {
        RecordPolicy {
            tunnel_port_limit: TUNNEL_PORT_LIMIT,
            max_changes: 8,
            own_ip: None,
        }
    }
}

/// Applies the record to iptables (and ip6tables for IPv6 addresses, Rust).
#[derive(Debug)]
pub struct IptablesManager {
    runner: Arc<dyn CommandRunner>,
    stream_port: u16,
    programs: [String; 2],
    wait: [Vec<String>; 2],
    /// Rules in place: IP → advertised port.
    applied: BTreeMap<String, u16>,
    /// Families whose chain and jumps exist.
    ready: [bool; 2],
    policy: RecordPolicy,
}

fn idx(f: Family) -> usize {
    match f {
        Family::V4 => 0,
        Family::V6 => 1,
    }
}

fn family_of(ip: &str) -> Option<Family> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some(Family::V4),
        IpAddr::V6(_) => Some(Family::V6),
    }
}

/// `-w` flags by version, as Kubernetes' iptables utility picks them.
fn wait_flags(version_output: &str) -> Vec<String> {
    let version: Vec<u32> = version_output
        .split_whitespace()
        .find_map(|w| w.strip_prefix('v'))
        .map(|v| v.split('.').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    let at_least = |want: [u32; 3]| version.as_slice() >= want.as_slice();
    let flags: &[&str] = if at_least([1, 6, 1]) {
        &["-w", "5", "-W", "100000"]
    } else if at_least([1, 4, 22]) {
        &["-w", "5"]
    } else if at_least([1, 4, 20]) {
        &["-w"]
    } else {
        &[]
    };
    flags.iter().map(|s| (*s).to_owned()).collect()
}

fn jump_args() -> Vec<String> {
    ["-m", "comment", "--comment", COMMENT, "-j", CHAIN]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

impl IptablesManager {
    /// A manager whose DNAT rules point at `stream_port`.
    pub fn new(runner: Arc<dyn CommandRunner>, stream_port: u16) -> Self {
        IptablesManager {
            runner,
            stream_port,
            programs: ["iptables".into(), "ip6tables".into()],
            wait: [Vec::new(), Vec::new()],
            applied: BTreeMap::new(),
            ready: [false, false],
            policy: RecordPolicy::default(),
        }
    }

    /// Judges record entries by `policy` instead of the default.
    pub fn with_policy(mut self, policy: RecordPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The entries of `record` that may become rules: an IP of a live cloudcore (one of
    /// `cloudcores`, or the policy's own address) with a port in the range. Every other entry
    /// is logged and skipped.
    fn wanted(
        &self,
        record: &TunnelPortRecord,
        cloudcores: &BTreeSet<String>,
    ) -> BTreeMap<String, u16> {
        let ports =
            TUNNEL_PORT_BASE + 1..=TUNNEL_PORT_BASE.saturating_add(self.policy.tunnel_port_limit);
        let canonical = |ip: &str| ip.parse::<IpAddr>().ok().map(|a| a.to_canonical());
        let live: BTreeSet<IpAddr> = cloudcores
            .iter()
            .chain(self.policy.own_ip.as_ref())
            .filter_map(|ip| canonical(ip))
            .collect();
        record
            .ip_tunnel_port
            .iter()
            .filter(|(ip, port)| {
                let why = match canonical(ip) {
                    None => "its key is not an IP address",
                    Some(a) if !live.contains(&a) => "its IP is not a live cloudcore pod's",
                    Some(_) if !ports.contains(*port) => {
                        "its port is outside the tunnel port range"
                    }
                    Some(_) => return true,
                };
                if !self.applied.contains_key(*ip) {
                    warn!(%ip, port, reason = why, "tunnel port record entry skipped");
                }
                false
            })
            .map(|(ip, port)| (ip.clone(), *port))
            .collect()
    }

    /// Uses other binaries than `iptables` / `ip6tables`.
    pub fn with_programs(mut self, v4: &str, v6: &str) -> Self {
        self.programs = [v4.to_owned(), v6.to_owned()];
        self
    }

    /// The DNAT rule of `ip`. Unlike upstream's it matches only destinations that are not
    /// addresses of this host (`addrtype ! --dst-type LOCAL`): the API server's connections to
    /// edge nodes are redirected, a connection to a service of the host itself never is.
    fn dnat_args(&self, ip: &str, port: u16) -> Vec<String> {
        let to = match family_of(ip) {
            Some(Family::V6) => format!("[{ip}]:{}", self.stream_port),
            _ => format!("{ip}:{}", self.stream_port),
        };
        [
            "-p",
            "tcp",
            "-m",
            "addrtype",
            "!",
            "--dst-type",
            "LOCAL",
            "-j",
            "DNAT",
            "--dport",
            &port.to_string(),
            "--to",
            &to,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    async fn exec(
        &self,
        family: Family,
        op: &str,
        chain: &str,
        args: &[String],
    ) -> Result<CommandOutput, IptablesError> {
        let mut argv = self.wait[idx(family)].clone();
        argv.extend([op.to_owned(), chain.to_owned(), "-t".into(), "nat".into()]);
        argv.extend_from_slice(args);
        let program = &self.programs[idx(family)];
        debug!(program = %program, args = ?argv, "iptables");
        let out = self
            .runner
            .run(program, &argv)
            .await
            .map_err(|e| IptablesError::Unavailable(format!("cannot run {program}: {e}")))?;
        if out.status == Some(127)
            || out.stderr.contains("you must be root")
            || out.stderr.contains("Permission denied")
        {
            return Err(IptablesError::Unavailable(out.stderr.trim().to_owned()));
        }
        Ok(out)
    }

    async fn must(
        &self,
        family: Family,
        op: &str,
        chain: &str,
        args: &[String],
    ) -> Result<(), IptablesError> {
        let out = self.exec(family, op, chain, args).await?;
        if out.success() {
            return Ok(());
        }
        Err(IptablesError::Command {
            command: format!(
                "{} {op} {chain} -t nat {}",
                self.programs[idx(family)],
                args.join(" ")
            ),
            status: out.status,
            stderr: out.stderr.trim().to_owned(),
        })
    }

    /// `-C`, then `-A` if missing.
    async fn ensure_rule(
        &self,
        family: Family,
        chain: &str,
        args: &[String],
    ) -> Result<(), IptablesError> {
        if self.exec(family, "-C", chain, args).await?.success() {
            return Ok(());
        }
        self.must(family, "-A", chain, args).await
    }

    /// `-D` while the rule exists (duplicates included).
    async fn delete_rule(
        &self,
        family: Family,
        chain: &str,
        args: &[String],
    ) -> Result<(), IptablesError> {
        while self.exec(family, "-C", chain, args).await?.success() {
            self.must(family, "-D", chain, args).await?;
        }
        Ok(())
    }

    /// Checks that iptables runs and picks its wait flags. `Unavailable` when the binary is
    /// missing or we are not allowed to change the nat table.
    pub async fn probe(&mut self) -> Result<(), IptablesError> {
        let program = self.programs[0].clone();
        let out = self
            .runner
            .run(&program, &["--version".to_owned()])
            .await
            .map_err(|e| IptablesError::Unavailable(format!("cannot run {program}: {e}")))?;
        if !out.success() {
            return Err(IptablesError::Unavailable(format!(
                "{program} --version: {}",
                out.stderr.trim()
            )));
        }
        self.wait[0] = wait_flags(&out.stdout);
        if let Ok(o) = self
            .runner
            .run(&self.programs[1], &["--version".to_owned()])
            .await
            && o.success()
        {
            self.wait[1] = wait_flags(&o.stdout);
        }
        // Listing needs the same rights as changing; a non-root user fails here.
        self.must(Family::V4, "-S", "OUTPUT", &[]).await
    }

    async fn ensure_chain(&mut self, family: Family) -> Result<(), IptablesError> {
        if self.ready[idx(family)] {
            return Ok(());
        }
        let out = self.exec(family, "-N", CHAIN, &[]).await?;
        // Exit code 1: the chain exists already.
        if !out.success() && out.status != Some(1) {
            return Err(IptablesError::Command {
                command: format!("{} -N {CHAIN} -t nat", self.programs[idx(family)]),
                status: out.status,
                stderr: out.stderr.trim().to_owned(),
            });
        }
        for parent in ["OUTPUT", "PREROUTING"] {
            self.ensure_rule(family, parent, &jump_args()).await?;
        }
        self.ready[idx(family)] = true;
        Ok(())
    }

    /// Flushes the chain (upstream does so at start; a missing chain is fine).
    pub async fn flush(&mut self) -> Result<(), IptablesError> {
        let out = self.exec(Family::V4, "-F", CHAIN, &[]).await?;
        if !out.success() {
            debug!(stderr = %out.stderr.trim(), "no TUNNEL-PORT chain to flush");
        }
        self.applied.clear();
        Ok(())
    }

    /// Makes the rules match the entries of `record` that may become rules (see
    /// [`RecordPolicy`]; `cloudcores` are the IPs of the live cloudcore pods): chain and jumps
    /// exist, each IP has its DNAT rule, and rules of IPs that left (or whose port changed) are
    /// deleted. A record that would change more than [`RecordPolicy::max_changes`] rules is
    /// refused with [`IptablesError::TooManyChanges`] and nothing changes.
    pub async fn reconcile(
        &mut self,
        record: &TunnelPortRecord,
        cloudcores: &BTreeSet<String>,
    ) -> Result<(), IptablesError> {
        let wanted = self.wanted(record, cloudcores);
        let changes = wanted
            .iter()
            .filter(|(ip, port)| self.applied.get(*ip) != Some(*port))
            .count()
            + self
                .applied
                .keys()
                .filter(|ip| !wanted.contains_key(*ip))
                .count();
        if changes > self.policy.max_changes {
            return Err(IptablesError::TooManyChanges {
                changes,
                limit: self.policy.max_changes,
            });
        }
        self.ready = [false, false];
        self.ensure_chain(Family::V4).await?;
        for (ip, port) in &wanted {
            let family = family_of(ip).unwrap_or(Family::V4);
            self.ensure_chain(family).await?;
            self.ensure_rule(family, CHAIN, &self.dnat_args(ip, *port))
                .await?;
        }
        let stale: Vec<(String, u16)> = self
            .applied
            .iter()
            .filter(|(ip, port)| wanted.get(*ip) != Some(*port))
            .map(|(ip, port)| (ip.clone(), *port))
            .collect();
        for (ip, port) in stale {
            let family = family_of(&ip).unwrap_or(Family::V4);
            self.delete_rule(family, CHAIN, &self.dnat_args(&ip, port))
                .await?;
            info!(%ip, port, "removed tunnel port rule");
        }
        self.applied = wanted;
        Ok(())
    }

    /// Removes the jumps and the chain (both families).
    pub async fn cleanup(&mut self) -> Result<(), IptablesError> {
        for family in [Family::V4, Family::V6] {
            if family == Family::V6
                && !self
                    .applied
                    .keys()
                    .any(|ip| family_of(ip) == Some(Family::V6))
                && !self.ready[1]
            {
                continue;
            }
            for parent in ["OUTPUT", "PREROUTING"] {
                self.delete_rule(family, parent, &jump_args()).await?;
            }
            let _ = self.exec(family, "-F", CHAIN, &[]).await?;
            let _ = self.exec(family, "-X", CHAIN, &[]).await?;
        }
        self.applied.clear();
        self.ready = [false, false];
        Ok(())
    }

    /// Runs until `stop`: flush, then reconcile on every change of the record or of the live
    /// cloudcore pods (`cloudcores`, `None` until known: nothing is applied before) and every
    /// 10 s, then clean up. If iptables is unavailable it says so once and returns;
    /// cloudstream keeps working for nodes that report the stream port directly.
    pub async fn run(
        mut self,
        mut records: watch::Receiver<Option<TunnelPortRecord>>,
        mut cloudcores: watch::Receiver<Option<BTreeSet<String>>>,
        stop: CancellationToken,
    ) {
        if let Err(e) = self.probe().await {
            warn!(error = %e, "iptables manager not running; kubelet ports are not redirected, so only nodes that report the stream port directly are reachable");
            return;
        }
        if let Err(e) = self.flush().await {
            warn!(error = %e, "iptables flush failed");
        }
        let mut tick = tokio::time::interval(RECONCILE_INTERVAL);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
                r = records.changed() => if r.is_err() { break },
                r = cloudcores.changed() => if r.is_err() { break },
            }
            let record = records.borrow_and_update().clone();
            let live = cloudcores.borrow_and_update().clone();
            let (Some(record), Some(live)) = (record, live) else {
                continue;
            };
            if let Err(e) = self.reconcile(&record, &live).await {
                warn!(error = %e, "iptables reconcile failed; retrying in 10 s");
            }
        }
        match self.cleanup().await {
            Ok(()) => info!("iptables rules removed"),
            Err(e) => warn!(error = %e, "iptables cleanup failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_flags_should_follow_the_iptables_version() {
        assert_eq!(
            wait_flags("iptables v1.8.9 (nf_tables)"),
            ["-w", "5", "-W", "100000"]
        );
        assert_eq!(wait_flags("iptables v1.4.22"), ["-w", "5"]);
        assert_eq!(wait_flags("iptables v1.4.21"), ["-w"]);
        assert!(wait_flags("iptables v1.4.19").is_empty());
        assert!(wait_flags("garbage").is_empty());
    }
}
