//! Which nodes are edge nodes: a metadata watch of the Nodes labelled
//! `node-role.kubernetes.io/edge`, so a REST call for any other name is refused without an API
//! call (KubeEdge GETs the Node on every attempt).

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::EDGE_NODE_LABEL;
use kubeedge_api::watch::{self, Cache, CacheWriter};
use tracing::warn;

/// The edge nodes, by name (read side; cheap to clone).
pub(crate) type EdgeNodes = Cache<PartialObjectMeta<Node>>;

/// An empty view and its writer.
pub(crate) fn view() -> (CacheWriter<PartialObjectMeta<Node>>, EdgeNodes) {
    watch::cache()
}

/// Keeps `writer` current until `stop`.
pub(crate) async fn follow(
    client: kube::Client,
    mut writer: CacheWriter<PartialObjectMeta<Node>>,
    stop: CancellationToken,
) {
    // Metadata only: `Api<PartialObjectMeta<_>>` asks for nothing else.
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    let config = watcher::Config::default().labels(EDGE_NODE_LABEL);
    let mut events = watcher(api, config).default_backoff().boxed();
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = stop.cancelled() => return,
        };
        match event {
            Some(Ok(event)) => {
                writer.apply(event);
            }
            Some(Err(error)) => warn!(%error, "edge node watch failed, retrying with back-off"),
            None => return,
        }
    }
}
