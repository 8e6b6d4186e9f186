//! `modules.edgeController` of CloudCoreConfig: keys and defaults exactly as KubeEdge's.
//!
//! YAML keys are the Go JSON tags, including the capitalised `UpdateRuleStatusWorkers`,
//! `ServiceAccountTokenWorkers` and `CreatePodWorks`; Go matches keys case-insensitively, so
//! each key also accepts its other-capitalisation form. Unknown keys are ignored (the binary
//! validates). Counts are `i32` as in Go; a value below 1 is used as 1.

use serde::{Deserialize, Serialize};

/// KubeEdge's `modules.cloudHub.nodeLimit` default; several defaults derive from it.
pub const DEFAULT_NODE_LIMIT: i32 = 500;

/// `modules.edgeController`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EdgeControllerConfig {
    /// Whether the module runs (default `true`).
    pub enable: bool,
    /// Seconds; legacy node status refreshes condition heartbeats older than this (default 10).
    #[serde(alias = "NodeUpdateFrequency")]
    pub node_update_frequency: i32,
    /// Queue and channel sizes.
    pub buffer: EdgeControllerBuffer,
    /// Concurrency per request kind.
    pub load: EdgeControllerLoad,
    /// Rust extension: one node may hold at most 1/`nodeQueueShareDivisor` of any upstream
    /// queue (requests queued and being handled), never less than `nodeQueueShareMin`
    /// entries; past that, that node's requests of the kind are answered `429` while other
    /// nodes' still get in (default 8: 128 of a 1024 queue; 0 turns the per-node cap off).
    #[serde(alias = "NodeQueueShareDivisor")]
    pub node_queue_share_divisor: i32,
    /// Rust extension: the floor of a node's share of an upstream queue, so that small
    /// queues still take one node's ordinary burst (default 16).
    #[serde(alias = "NodeQueueShareMin")]
    pub node_queue_share_min: i32,
}

impl Default for EdgeControllerConfig {
    fn default() -> Self {
        EdgeControllerConfig {
            enable: true,
            node_update_frequency: 10,
            buffer: EdgeControllerBuffer::default(),
            load: EdgeControllerLoad::default(),
            node_queue_share_divisor: kubeedge_api::queue::DEFAULT_NODE_SHARE_DIVISOR as i32,
            node_queue_share_min: kubeedge_api::queue::DEFAULT_NODE_SHARE_MIN as i32,
        }
    }
}

impl EdgeControllerConfig {
    /// Go's start-up adjustment for `nodeLimit` (`modules.cloudHub.nodeLimit`): raises
    /// `queryNodeWorkers` and `createLeaseWorkers` to at least nodeLimit, `patchNodeWorkers` to
    /// at least 100 + nodeLimit/50, `buffer.patchNode` to at least 1024 + nodeLimit/2 and
    /// `buffer.queryNode` / `buffer.createLease` to at least 1024 + nodeLimit. Returns whether
    /// anything changed.
    pub fn adjust_for_node_limit(&mut self, node_limit: i32) -> bool {
        let before = self.clone();
        let raise = |v: &mut i32, min: i32| *v = (*v).max(min);
        raise(&mut self.load.query_node_workers, node_limit);
        raise(&mut self.load.create_lease_workers, node_limit);
        raise(&mut self.load.patch_node_workers, 100 + node_limit / 50);
        raise(&mut self.buffer.patch_node, 1024 + node_limit / 2);
        raise(&mut self.buffer.query_node, 1024 + node_limit);
        raise(&mut self.buffer.create_lease, 1024 + node_limit);
        *self != before
    }

    /// The most entries one node may hold in a queue of `capacity` (`None`: no per-node cap),
    /// from `nodeQueueShareDivisor` and `nodeQueueShareMin`.
    pub fn node_share(&self, capacity: usize) -> Option<usize> {
        kubeedge_api::queue::node_share(
            capacity,
            self.node_queue_share_divisor.max(0) as usize,
            self.node_queue_share_min.max(0) as usize,
        )
    }
}

macro_rules! counts {
    (
        $(#[$doc:meta])* $name:ident {
            $( $(#[$fdoc:meta])* $field:ident: $key:literal $(| $alias:literal)* = $default:expr, )*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct $name {
            $(
                $(#[$fdoc])*
                #[serde(rename = $key $(, alias = $alias)*)]
                pub $field: i32,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }
    };
}

counts! {
    /// `modules.edgeController.buffer`: queue sizes (and Go's informer channel sizes).
    EdgeControllerBuffer {
        /// Legacy pod status queue.
        update_pod_status: "updatePodStatus" | "UpdatePodStatus" = 1024,
        /// Legacy node status queue; also sizes the rule status queue, as in Go.
        update_node_status: "updateNodeStatus" | "UpdateNodeStatus" = 1024,
        /// ConfigMap query queue.
        query_config_map: "queryConfigMap" | "QueryConfigMap" = 1024,
        /// Secret query queue.
        query_secret: "querySecret" | "QuerySecret" = 1024,
        /// Event queue.
        process_event: "processEvent" | "ProcessEvent" = 1024,
        /// Go's pod informer channel. Accepted for compatibility: the Rust watch streams are
        /// polled directly by the processing loop, so there is no intermediate channel.
        pod_event: "podEvent" | "PodEvent" = 1,
        /// Go's configmap informer channel (accepted, unused: see `podEvent`).
        config_map_event: "configMapEvent" | "ConfigMapEvent" = 1,
        /// Go's secret informer channel (accepted, unused: see `podEvent`).
        secret_event: "secretEvent" | "SecretEvent" = 1,
        /// Go's rule informer channel (accepted, unused: see `podEvent`).
        rules_event: "rulesEvent" | "RulesEvent" = 1,
        /// Go's rule endpoint informer channel (accepted, unused: see `podEvent`).
        rule_endpoints_event: "ruleEndpointsEvent" | "RuleEndpointsEvent" = 1,
        /// PersistentVolume query queue.
        query_persistent_volume: "queryPersistentVolume" | "QueryPersistentVolume" = 1024,
        /// PersistentVolumeClaim query queue.
        query_persistent_volume_claim: "queryPersistentVolumeClaim" | "QueryPersistentVolumeClaim" = 1024,
        /// VolumeAttachment query queue.
        query_volume_attachment: "queryVolumeAttachment" | "QueryVolumeAttachment" = 1024,
        /// Node registration queue.
        create_node: "createNode" | "CreateNode" = 1024,
        /// Node status patch queue (1024 + nodeLimit/2).
        patch_node: "patchNode" | "PatchNode" = 1024 + DEFAULT_NODE_LIMIT / 2,
        /// Node query queue (1024 + nodeLimit); also sizes the connection-event queue.
        query_node: "queryNode" | "QueryNode" = 1024 + DEFAULT_NODE_LIMIT,
        /// Node label/annotation update queue.
        update_node: "updateNode" | "UpdateNode" = 1024,
        /// Pod status patch queue.
        patch_pod: "patchPod" | "PatchPod" = 1024,
        /// Pod delete queue.
        delete_pod: "deletePod" | "DeletePod" = 1024,
        /// Lease create/update queue (1024 + nodeLimit).
        create_lease: "createLease" | "CreateLease" = 1024 + DEFAULT_NODE_LIMIT,
        /// Lease query queue.
        query_lease: "queryLease" | "QueryLease" = 1024,
        /// ServiceAccount token queue.
        service_account_token: "serviceAccountToken" | "ServiceAccountToken" = 1024,
        /// Pod create queue (mirror pods).
        create_pod: "createPod" | "CreatePod" = 1024,
        /// CertificateSigningRequest queue.
        certificate_signing_request: "certificateSigningRequest" | "CertificateSigningRequest" = 1024,
    }
}

counts! {
    /// `modules.edgeController.load`: the maximum number of handlers running at once per
    /// request kind (a semaphore, not idle tasks).
    EdgeControllerLoad {
        /// Events.
        process_event_workers: "processEventWorkers" | "ProcessEventWorkers" = 4,
        /// Legacy pod status.
        update_pod_status_workers: "updatePodStatusWorkers" | "UpdatePodStatusWorkers" = 1,
        /// Legacy node status.
        update_node_status_workers: "updateNodeStatusWorkers" | "UpdateNodeStatusWorkers" = 1,
        /// ConfigMap queries.
        query_config_map_workers: "queryConfigMapWorkers" | "QueryConfigMapWorkers" = 100,
        /// Secret queries.
        query_secret_workers: "querySecretWorkers" | "QuerySecretWorkers" = 100,
        /// PersistentVolume queries.
        query_persistent_volume_workers: "queryPersistentVolumeWorkers" | "QueryPersistentVolumeWorkers" = 4,
        /// PersistentVolumeClaim queries.
        query_persistent_volume_claim_workers: "queryPersistentVolumeClaimWorkers" | "QueryPersistentVolumeClaimWorkers" = 4,
        /// VolumeAttachment queries.
        query_volume_attachment_workers: "queryVolumeAttachmentWorkers" | "QueryVolumeAttachmentWorkers" = 4,
        /// Node registration.
        create_node_workers: "createNodeWorkers" | "CreateNodeWorkers" = 100,
        /// Node status patches (100 + nodeLimit/50).
        patch_node_workers: "patchNodeWorkers" | "PatchNodeWorkers" = 100 + DEFAULT_NODE_LIMIT / 50,
        /// Node queries (nodeLimit).
        query_node_workers: "queryNodeWorkers" | "QueryNodeWorkers" = DEFAULT_NODE_LIMIT,
        /// Node label/annotation updates; also the connection-event writers.
        update_node_workers: "updateNodeWorkers" | "UpdateNodeWorkers" = 4,
        /// Pod status patches.
        patch_pod_workers: "patchPodWorkers" | "PatchPodWorkers" = 100,
        /// Pod deletes.
        delete_pod_workers: "deletePodWorkers" | "DeletePodWorkers" = 100,
        /// Lease create/update (nodeLimit).
        create_lease_workers: "createLeaseWorkers" | "CreateLeaseWorkers" = DEFAULT_NODE_LIMIT,
        /// Lease queries.
        query_lease_workers: "queryLeaseWorkers" | "QueryLeaseWorkers" = 100,
        /// Rule status (real key with a capital U).
        update_rule_status_workers: "UpdateRuleStatusWorkers" | "updateRuleStatusWorkers" = 4,
        /// ServiceAccount tokens (real key with a capital S).
        service_account_token_workers: "ServiceAccountTokenWorkers" | "serviceAccountTokenWorkers" = 100,
        /// Pod creation (real key, including the "Works" typo).
        create_pod_works: "CreatePodWorks" | "createPodWorks" = 4,
        /// CertificateSigningRequests.
        certificate_signing_request_workers: "certificateSigningRequestWorkers" | "CertificateSigningRequestWorkers" = 4,
    }
}

/// A configured count as a usable size: at least 1.
pub(crate) fn at_least_one(v: i32) -> usize {
    v.max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kubeedges() {
        let c = EdgeControllerConfig::default();
        assert!(c.enable);
        assert_eq!(c.node_update_frequency, 10);
        assert_eq!(c.buffer.patch_node, 1274);
        assert_eq!(c.buffer.query_node, 1524);
        assert_eq!(c.buffer.create_lease, 1524);
        assert_eq!(c.buffer.pod_event, 1);
        assert_eq!(c.load.patch_node_workers, 110);
        assert_eq!(c.load.query_node_workers, 500);
        assert_eq!(c.load.update_pod_status_workers, 1);
        assert_eq!(c.load.create_pod_works, 4);
        assert_eq!(
            (c.node_queue_share_divisor, c.node_queue_share_min),
            (8, 16)
        );
        assert_eq!(c.node_share(1024), Some(128));
        assert_eq!(c.node_share(40), Some(16));
    }

    #[test]
    fn the_node_share_keys_can_turn_the_cap_off() {
        let c: EdgeControllerConfig =
            serde_saphyr::from_str("nodeQueueShareDivisor: 0\nnodeQueueShareMin: 4\n").unwrap();
        assert_eq!(c.node_share(1024), None);
        let c: EdgeControllerConfig =
            serde_saphyr::from_str("nodeQueueShareDivisor: 4\nnodeQueueShareMin: 4\n").unwrap();
        assert_eq!(c.node_share(1024), Some(256));
        assert_eq!(c.node_share(8), Some(4));
    }

    #[test]
    fn yaml_uses_the_real_keys_and_accepts_case_variants() {
        let text = "enable: false\nnodeUpdateFrequency: 20\nbuffer:\n  querySecret: 7\n  PatchPod: 9\n\
                    load:\n  UpdateRuleStatusWorkers: 2\n  serviceAccountTokenWorkers: 3\n  CreatePodWorks: 5\n  \
                    processEventWorkers: 6\n  someFutureKey: 1\n";
        let c: EdgeControllerConfig = serde_saphyr::from_str(text).unwrap();
        assert!(!c.enable);
        assert_eq!(c.node_update_frequency, 20);
        assert_eq!(c.buffer.query_secret, 7);
        assert_eq!(c.buffer.patch_pod, 9);
        assert_eq!(c.buffer.delete_pod, 1024, "absent keys keep their default");
        assert_eq!(c.load.update_rule_status_workers, 2);
        assert_eq!(c.load.service_account_token_workers, 3);
        assert_eq!(c.load.create_pod_works, 5);
        assert_eq!(c.load.process_event_workers, 6);
        let out = serde_saphyr::to_string(&c).unwrap();
        assert!(out.contains("UpdateRuleStatusWorkers: 2"), "{out}");
        assert!(out.contains("CreatePodWorks: 5"), "{out}");
        assert!(out.contains("ServiceAccountTokenWorkers: 3"), "{out}");
        assert!(out.contains("querySecret: 7"), "{out}");
    }

    #[test]
    fn node_limit_raises_the_node_sized_settings_only_upwards() {
        let mut c = EdgeControllerConfig::default();
        assert!(!c.adjust_for_node_limit(DEFAULT_NODE_LIMIT));
        assert!(c.adjust_for_node_limit(1000));
        assert_eq!(c.load.query_node_workers, 1000);
        assert_eq!(c.load.create_lease_workers, 1000);
        assert_eq!(c.load.patch_node_workers, 120);
        assert_eq!(c.buffer.patch_node, 1524);
        assert_eq!(c.buffer.query_node, 2024);
        assert!(!c.adjust_for_node_limit(10), "never lowered");
        assert_eq!(c.load.query_node_workers, 1000);
    }
}
