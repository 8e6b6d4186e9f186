//! Points a Node's reported kubelet port at cloudstream (`updateNodeKubeletEndpoint`), so
//! the API server's kubelet calls for that node come to us.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kubeedge_api::escaped::Api;

use super::NodeAddresses;
use tracing::{info, warn};

/// Sets `status.daemonEndpoints.kubeletEndpoint.Port` of connecting nodes, and keeps the
/// index of which Node lists which IP.
#[derive(Clone)]
pub(crate) struct NodeUpdater {
    api: Api<Node>,
    client: kube::Client,
    index: Arc<NodeAddresses>,
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
            api: Api::all(client.clone()),
            client,
            index: Arc::default(),
            port,
            interval,
            deadline,
        }
    }

    /// The Node address index ([`NodeAddresses`]).
    pub(crate) fn index(&self) -> &NodeAddresses {
        &self.index
    }

    /// Keeps the address index until `stop`.
    pub(crate) async fn watch_addresses(self, stop: tokio_util::sync::CancellationToken) {
        self.index.run(self.client.clone(), stop).await;
    }

    /// The Node named `node` now (`None` when there is no such Node); what it lists goes into
    /// the index as the newest listing. One GET, no retry.
    pub(crate) async fn read(&self, node: &str) -> Result<Option<Node>, kube::Error> {
        let found = self.api.get_opt(node).await?;
        if let Some(n) = &found {
            self.index.observed(n);
        }
        Ok(found)
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
