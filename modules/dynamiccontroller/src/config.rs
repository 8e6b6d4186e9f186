//! `modules.dynamicController` of CloudCoreConfig.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.dynamicController`. KubeEdge has only `enable` (default `false` there); the other
/// keys are Rust additions bounding what edges can make cloudcore hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DynamicControllerConfig {
    /// Whether the module runs (default `true`: without it every metaServer request on the
    /// edge waits 10 s and then answers from the edge's local store).
    #[serde(alias = "Enable")]
    pub enable: bool,
    /// Requests served at once, all nodes together (default 32); more wait their turn.
    pub concurrency: usize,
    /// Requests one node may have waiting or running (default 64); more are answered `429`.
    pub node_requests: usize,
    /// Bytes of request content one node may have waiting or running (default 16 MiB); more
    /// are answered `429`, so a node's queue cannot hold more memory than this.
    pub node_request_bytes: usize,
    /// Requests per second one node may send over time (default 50), with bursts of
    /// `nodeBurst` (default 100); beyond that they are answered `429`.
    #[serde(rename = "nodeQPS")]
    pub node_qps: u32,
    /// See `nodeQPS`.
    pub node_burst: u32,
    /// Seconds a watch registration waits for a new resource type's first list before it is
    /// answered `504` (default 30). Other requests are not held up meanwhile.
    pub informer_sync_timeout: u64,
    /// Resource types edges may watch, as `<resource>` (core) or `<resource>.<group>`
    /// (`services`, `endpointslices.discovery.k8s.io`); `*` or empty = any type the cluster
    /// lets the node watch (default empty).
    pub allowed_resources: Vec<String>,
    /// Resource types watched at once for edges (default 64); a watch on another type is
    /// answered `429` until one is released.
    pub max_informers: usize,
    /// Watch listeners one node may hold (default 256); more are answered `429`.
    pub max_listeners_per_node: usize,
    /// Watch listeners all nodes together may hold (default 65,536); more are answered `429`.
    pub max_listeners: usize,
    /// Bytes one watch may ask cloudcore to keep: its id, key and options together (default
    /// 8 KiB; edgecore's are a few hundred). A larger watch is refused `400`; an id is at most
    /// 128 bytes and a watch carries no body.
    pub max_watch_bytes: usize,
    /// Bytes of watches one node may have cloudcore keep (default 512 KiB); beyond, its new
    /// watches are answered `429`.
    pub max_listener_bytes_per_node: usize,
    /// Bytes of watches all nodes together may have cloudcore keep (default 64 MiB).
    pub max_listener_bytes: usize,
    /// Answers of SubjectAccessReviews remembered, all nodes together (default 8,192, each
    /// at most 4 KiB of attributes: about 32 MiB at worst).
    pub review_cache_entries: usize,
    /// Answers of SubjectAccessReviews remembered for one node (default 256).
    pub review_cache_entries_per_node: usize,
    /// Resource types (group/versions) whose discovery is remembered (default 1,024). Only
    /// group/versions the API server serves are ever remembered, so edges asking for made-up
    /// groups add nothing.
    pub max_discovery_entries: usize,
    /// Seconds between re-reviews of every watch listener (default 300): a listener the
    /// cluster no longer allows (its pod left the node) is dropped and its objects deleted at
    /// the edge. Listeners of Secrets, ConfigMaps, claims and service accounts are also
    /// decided again within about a second of a pod of their namespace being deleted. 0 turns
    /// both off.
    pub listener_review_seconds: u64,
    /// Bytes of the record of what one node's watches delivered (default 384 KiB: about
    /// 3,000 objects of usual names). With it, a reconnected or restored node is sent the
    /// deletes it missed while it or cloudcore was away. Objects beyond are delivered but not
    /// recorded: a delete of one of them missed while the edge was away is not sent.
    pub max_delivered_bytes_per_node: usize,
    /// Bytes of the records of what watches delivered, all nodes together (default 64 MiB).
    pub max_delivered_bytes: usize,
    /// Seconds a discovery answer (`/api`, `/apis/<group>/<version>`, `/version`,
    /// `/openapi/v2`, …) fetched for one edge serves every edge (default 30): each path costs
    /// the API server at most one request per period, however many nodes ask. 0 keeps
    /// nothing, but requests for a path still share the fetch in flight.
    pub pass_through_cache_seconds: u64,
    /// Discovery paths whose answers are kept at once (default 256); the answers expiring
    /// first make room.
    pub max_pass_through_cache_entries: usize,
    /// Bytes of discovery answers kept at once (default 64 MiB; `/openapi/v2` is a few MiB,
    /// more with many CRDs). A larger answer is given to the requests that waited for its
    /// fetch and not kept.
    pub max_pass_through_cache_bytes: usize,
    /// Keep each node's watch listeners in a ConfigMap (`kubeedge/dynamiccontroller.<node>`)
    /// so a restarted cloudcore resumes pushing changes at once instead of waiting for the
    /// edge's next watch sync (default `true`).
    pub persist_listeners: bool,
}

impl Default for DynamicControllerConfig {
    fn default() -> Self {
        DynamicControllerConfig {
            enable: true,
            concurrency: 32,
            node_requests: 64,
            node_request_bytes: 16 << 20,
            node_qps: 50,
            node_burst: 100,
            informer_sync_timeout: 30,
            allowed_resources: Vec::new(),
            max_informers: 64,
            max_listeners_per_node: 256,
            max_listeners: 65_536,
            max_watch_bytes: 8 << 10,
            max_listener_bytes_per_node: 512 << 10,
            max_listener_bytes: 64 << 20,
            review_cache_entries: 8_192,
            review_cache_entries_per_node: 256,
            max_discovery_entries: 1_024,
            listener_review_seconds: 300,
            max_delivered_bytes_per_node: 384 << 10,
            max_delivered_bytes: 64 << 20,
            pass_through_cache_seconds: 30,
            max_pass_through_cache_entries: 256,
            max_pass_through_cache_bytes: 64 << 20,
            persist_listeners: true,
        }
    }
}

impl DynamicControllerConfig {
    /// [`DynamicControllerConfig::informer_sync_timeout`] as a duration (at least 1 s).
    pub fn sync_timeout(&self) -> Duration {
        Duration::from_secs(self.informer_sync_timeout.max(1))
    }

    /// [`DynamicControllerConfig::pass_through_cache_seconds`] as a duration.
    pub fn pass_through_ttl(&self) -> Duration {
        Duration::from_secs(self.pass_through_cache_seconds)
    }

    /// Whether edges may watch `resource` of `group`.
    pub fn allows(&self, group: &str, resource: &str) -> bool {
        self.allowed_resources.is_empty()
            || self.allowed_resources.iter().any(|a| {
                a == "*"
                    || match a.split_once('.') {
                        Some((r, g)) => r == resource && g == group,
                        None => group.is_empty() && a == resource,
                    }
            })
    }

    /// The first setting that cannot work, as (key, why).
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        [
            ("concurrency", self.concurrency),
            ("nodeRequests", self.node_requests),
            ("nodeRequestBytes", self.node_request_bytes),
            ("nodeQPS", self.node_qps as usize),
            ("nodeBurst", self.node_burst as usize),
            ("maxInformers", self.max_informers),
            ("maxListenersPerNode", self.max_listeners_per_node),
            ("maxListeners", self.max_listeners),
            ("maxWatchBytes", self.max_watch_bytes),
            ("maxListenerBytesPerNode", self.max_listener_bytes_per_node),
            ("maxListenerBytes", self.max_listener_bytes),
            ("maxDiscoveryEntries", self.max_discovery_entries),
            (
                "maxDeliveredBytesPerNode",
                self.max_delivered_bytes_per_node,
            ),
            ("maxDeliveredBytes", self.max_delivered_bytes),
            (
                "maxPassThroughCacheEntries",
                self.max_pass_through_cache_entries,
            ),
            (
                "maxPassThroughCacheBytes",
                self.max_pass_through_cache_bytes,
            ),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0)
        .map(|(k, _)| (k, "must be at least 1"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_keys() {
        let c: DynamicControllerConfig = serde_saphyr::from_str(
            "enable: false\nconcurrency: 4\ninformerSyncTimeout: 5\nallowedResources: [services, endpointslices.discovery.k8s.io]\npersistListeners: false\npassThroughCacheSeconds: 7\nmaxPassThroughCacheBytes: 1024\n",
        )
        .unwrap();
        assert!(!c.enable && !c.persist_listeners);
        assert_eq!(
            (c.pass_through_ttl(), c.max_pass_through_cache_bytes),
            (Duration::from_secs(7), 1024)
        );
        assert_eq!(
            (c.concurrency, c.sync_timeout()),
            (4, Duration::from_secs(5))
        );
        assert!(c.allows("", "services"));
        assert!(c.allows("discovery.k8s.io", "endpointslices"));
        assert!(!c.allows("", "secrets"));
        assert!(!c.allows("apps", "services"));
        assert!(DynamicControllerConfig::default().allows("x.io", "anything"));
        assert_eq!(DynamicControllerConfig::default().invalid(), None);
    }
}
