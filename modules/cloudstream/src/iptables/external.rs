//! The iptables manager on its own, as KubeEdge's `iptables-manager` DaemonSet runs it
//! (`modules.iptablesManager.mode: external`): cloudcore negotiates and records its tunnel
//! port, and this process, on each API server host, keeps the DNAT rules for every record.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use super::manager::{IptablesError, IptablesManager, RecordPolicy};
use super::runner::CommandRunner;
use crate::negotiate;

/// Where the standalone manager sends tunnel-port traffic: cloudstream's stream port
/// (KubeEdge's `--forwardport`, default 10003).
pub const DEFAULT_FORWARD_PORT: u16 = 10003;

/// Runs the iptables manager until `stop` resolves, fed by the `kubeedge/tunnelport` record
/// (the entries `policy` and the live cloudcore pods of `namespace` allow), and releases the
/// record entries of deleted cloudcore pods in `namespace` (as KubeEdge's iptables-manager
/// does). Rules are removed when it stops, as in internal mode.
///
/// Unlike the manager inside cloudcore, which only warns, an unusable iptables is an error
/// here: redirecting is this process's only job, so it must not look healthy without it.
pub async fn run_standalone(
    client: kube::Client,
    runner: Arc<dyn CommandRunner>,
    forward_port: u16,
    namespace: String,
    policy: RecordPolicy,
    stop: impl Future<Output = ()>,
) -> Result<(), IptablesError> {
    let mut manager = IptablesManager::new(runner, forward_port).with_policy(policy.clone());
    manager.probe().await?;
    info!(forward_port, %namespace, ?policy, "iptables manager following the tunnel port record");
    let token = CancellationToken::new();
    let tasks = TaskTracker::new();
    let records = negotiate::watch_record(client.clone(), token.clone(), &tasks);
    let cloudcores =
        negotiate::watch_cloudcore_ips(client.clone(), namespace.clone(), token.clone(), &tasks);
    tasks.spawn(negotiate::release_deleted_cloudcores(
        client,
        namespace,
        token.clone(),
    ));
    tasks.spawn(manager.run(records, cloudcores, token.clone()));
    stop.await;
    token.cancel();
    tasks.close();
    tasks.wait().await;
    Ok(())
}
