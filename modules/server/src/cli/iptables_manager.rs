//! `cloudcore iptables-manager`: KubeEdge's `iptables-manager` for
//! `modules.iptablesManager.mode: external`. Run on each API server host (a DaemonSet with
//! `hostNetwork` and `NET_ADMIN`): it follows the `kubeedge/tunnelport` record that every
//! cloudcore writes and keeps a DNAT rule from each cloudcore's tunnel port to its stream port.

use std::process::ExitCode;
use std::sync::Arc;

use crate::config::KubeApiConfig;
use clap::Args;
use cloudstream::iptables::{DEFAULT_FORWARD_PORT, RecordPolicy, SystemRunner, run_standalone};

/// Flags of `cloudcore iptables-manager` (KubeEdge's names are accepted too).
#[derive(Debug, Args)]
pub(crate) struct IptablesManagerArgs {
    /// Kubeconfig file; empty: the in-cluster configuration, else `$KUBECONFIG`.
    #[arg(long, default_value = "")]
    kubeconfig: String,
    /// API server URL, overriding the kubeconfig's.
    #[arg(long, default_value = "")]
    master: String,
    /// Port the DNAT rules forward to: cloudcore's `modules.cloudStream.streamPort`.
    #[arg(long, alias = "forwardport", default_value_t = DEFAULT_FORWARD_PORT)]
    forward_port: u16,
    /// Tunnel ports accepted from the record, above 10350 (`10351..=10350+N`); other entries
    /// get no rule.
    #[arg(long, default_value_t = RecordPolicy::default().tunnel_port_limit)]
    tunnel_port_limit: u16,
    /// Most rules one record change may add, remove or change; a record changing more is
    /// refused whole.
    #[arg(long, default_value_t = RecordPolicy::default().max_changes)]
    max_record_changes: usize,
}

/// Runs until SIGINT/SIGTERM, then removes the rules. Fails when the API server or iptables
/// cannot be used.
pub(crate) fn run(args: IptablesManagerArgs) -> ExitCode {
    let kube = KubeApiConfig {
        kube_config: args.kubeconfig,
        master: args.master,
        ..KubeApiConfig::default()
    };
    let result = actix_rt::System::new().block_on(async move {
        let client = crate::app::kube_client(&kube)
            .await
            .map_err(|e| super::causes(&e))?;
        run_standalone(
            client,
            Arc::new(SystemRunner::new()),
            args.forward_port,
            cloudstream::negotiate::cloudcore_namespace(),
            RecordPolicy {
                tunnel_port_limit: args.tunnel_port_limit,
                max_changes: args.max_record_changes,
                own_ip: None,
            },
            crate::app::signal(),
        )
        .await
        .map_err(|e| super::causes(&e))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iptables-manager failed: {e}");
            ExitCode::FAILURE
        }
    }
}
