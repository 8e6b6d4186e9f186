//! Points a Node's reported kubelet port at cloudstream (`updateNodeKubeletEndpoint`), so
//! the API server's kubelet calls for that node come to us.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kubeedge_api::escaped::Api;
use tracing::{info, warn};

/// Sets `status.daemonEndpoints.kubeletEndpoint.Port` of connecting nodes.
#[derive(Clone)]
pub(crate) struct NodeUpdater {
    api: Api<Node>,
    port: u16,
    interval: Duration,
    deadline: Duration,
}

impl std::fmt::Debug for NodeUpdater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeUpdater")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl NodeUpdater {
    pub(crate) fn new(
        client: kube::Client,
        port: u16,
        interval: Duration,
        deadline: Duration,
    ) -> Self {
        NodeUpdater {
            api: Api::all(client),
            port,
            interval,
            deadline,
        }
    }

    /// The IP addresses in the Node's `status.addresses` (entries that are not IPs, such as
    /// `Hostname`, are skipped); `None` when there is no such Node. One GET, no retry.
    pub(crate) async fn addresses(&self, node: &str) -> Result<Option<Vec<IpAddr>>, kube::Error> {
        let Some(n) = self.api.get_opt(node).await? else {
            return Ok(None);
        };
        Ok(Some(
            n.status
                .and_then(|s| s.addresses)
                .unwrap_or_default()
                .iter()
                .filter_map(|a| a.address.trim().parse().ok())
                .collect(),
        ))
    }

    /// Tries at once, then every `interval`, until `deadline` has passed (upstream
    /// `wait.PollImmediate(20s, 2min)`). A merge patch of the status subresource replaces
    /// upstream's GET + UpdateStatus, so there is no conflict to retry.
    pub(crate) async fn update(&self, node: &str) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}}}
        });
        let start = tokio::time::Instant::now();
        loop {
            match self
                .api
                .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    info!(node, port = self.port, "node kubelet endpoint port set");
                    return Ok(());
                }
                Err(e) if start.elapsed() + self.interval > self.deadline => return Err(e),
                Err(e) => {
                    warn!(node, error = %e, "failed to set the node's kubelet endpoint port; retrying");
                    tokio::time::sleep(self.interval).await;
                }
            }
        }
    }
}
