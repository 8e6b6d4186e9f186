//! The kinds of upstream request (one bounded queue each) and the classification of an
//! edge message into its kind, by resource type (segment 3) and operation.

use beehive::Message;
use beehive::constants::{operation as op, resource_type as rt};
use kubeedge_api::NodeResourceRef;
use kubeedge_api::names::operation::{CONNECTED, DISCONNECTED};

use crate::config::{EdgeControllerConfig, at_least_one};

/// Concurrent `cloudcore` annotation writes for connecting nodes, at least.
const CONNECTION_WORKERS: i32 = 16;

/// The request kinds, one queue each (KubeEdge's queues), plus the connection events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    UpdateNodeStatus,
    UpdatePodStatus,
    ProcessEvent,
    QueryConfigMap,
    QuerySecret,
    ServiceAccountToken,
    QueryPersistentVolume,
    QueryPersistentVolumeClaim,
    QueryVolumeAttachment,
    CreateNode,
    QueryNode,
    UpdateNode,
    PatchNode,
    PatchPod,
    DeletePod,
    CreatePod,
    CreateLease,
    QueryLease,
    UpdateRuleStatus,
    CertificateSigningRequest,
    /// cloudhub's `connected` events (KubeEdge ignores them): not a KubeEdge queue; sized like
    /// `queryNode`, served by `updateNodeWorkers`.
    Connection,
}

impl Kind {
    pub(crate) const ALL: [Kind; 21] = [
        Kind::UpdateNodeStatus,
        Kind::UpdatePodStatus,
        Kind::ProcessEvent,
        Kind::QueryConfigMap,
        Kind::QuerySecret,
        Kind::ServiceAccountToken,
        Kind::QueryPersistentVolume,
        Kind::QueryPersistentVolumeClaim,
        Kind::QueryVolumeAttachment,
        Kind::CreateNode,
        Kind::QueryNode,
        Kind::UpdateNode,
        Kind::PatchNode,
        Kind::PatchPod,
        Kind::DeletePod,
        Kind::CreatePod,
        Kind::CreateLease,
        Kind::QueryLease,
        Kind::UpdateRuleStatus,
        Kind::CertificateSigningRequest,
        Kind::Connection,
    ];

    /// The name of the `buffer.*` key sizing the queue (metrics label).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::UpdateNodeStatus => "updateNodeStatus",
            Kind::UpdatePodStatus => "updatePodStatus",
            Kind::ProcessEvent => "processEvent",
            Kind::QueryConfigMap => "queryConfigMap",
            Kind::QuerySecret => "querySecret",
            Kind::ServiceAccountToken => "serviceAccountToken",
            Kind::QueryPersistentVolume => "queryPersistentVolume",
            Kind::QueryPersistentVolumeClaim => "queryPersistentVolumeClaim",
            Kind::QueryVolumeAttachment => "queryVolumeAttachment",
            Kind::CreateNode => "createNode",
            Kind::QueryNode => "queryNode",
            Kind::UpdateNode => "updateNode",
            Kind::PatchNode => "patchNode",
            Kind::PatchPod => "patchPod",
            Kind::DeletePod => "deletePod",
            Kind::CreatePod => "createPod",
            Kind::CreateLease => "createLease",
            Kind::QueryLease => "queryLease",
            Kind::UpdateRuleStatus => "updateRuleStatus",
            Kind::CertificateSigningRequest => "certificateSigningRequest",
            Kind::Connection => "connection",
        }
    }

    /// (queue capacity, max concurrent handlers) from the config, as Go sizes them.
    pub(crate) fn sizes(self, c: &EdgeControllerConfig) -> (usize, usize) {
        let (b, l) = (&c.buffer, &c.load);
        let (buffer, workers) = match self {
            Kind::UpdateNodeStatus => (b.update_node_status, l.update_node_status_workers),
            Kind::UpdatePodStatus => (b.update_pod_status, l.update_pod_status_workers),
            Kind::ProcessEvent => (b.process_event, l.process_event_workers),
            Kind::QueryConfigMap => (b.query_config_map, l.query_config_map_workers),
            Kind::QuerySecret => (b.query_secret, l.query_secret_workers),
            Kind::ServiceAccountToken => (b.service_account_token, l.service_account_token_workers),
            Kind::QueryPersistentVolume => {
                (b.query_persistent_volume, l.query_persistent_volume_workers)
            }
            Kind::QueryPersistentVolumeClaim => (
                b.query_persistent_volume_claim,
                l.query_persistent_volume_claim_workers,
            ),
            Kind::QueryVolumeAttachment => {
                (b.query_volume_attachment, l.query_volume_attachment_workers)
            }
            Kind::CreateNode => (b.create_node, l.create_node_workers),
            Kind::QueryNode => (b.query_node, l.query_node_workers),
            Kind::UpdateNode => (b.update_node, l.update_node_workers),
            Kind::PatchNode => (b.patch_node, l.patch_node_workers),
            Kind::PatchPod => (b.patch_pod, l.patch_pod_workers),
            Kind::DeletePod => (b.delete_pod, l.delete_pod_workers),
            Kind::CreatePod => (b.create_pod, l.create_pod_works),
            Kind::CreateLease => (b.create_lease, l.create_lease_workers),
            Kind::QueryLease => (b.query_lease, l.query_lease_workers),
            // Go sizes the rule status queue with the node status buffer.
            Kind::UpdateRuleStatus => (b.update_node_status, l.update_rule_status_workers),
            Kind::CertificateSigningRequest => (
                b.certificate_signing_request,
                l.certificate_signing_request_workers,
            ),
            // The `cloudcore` annotation names a node's replica; thousands of nodes connect at
            // once when a replica starts or fails over, and until annotated a node looks held
            // by nobody to the other replicas.
            Kind::Connection => (b.query_node, l.update_node_workers.max(CONNECTION_WORKERS)),
        };
        (at_least_one(buffer), at_least_one(workers))
    }
}

/// What to do with an upstream message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Queue it for the handler of this kind.
    Queue(Kind),
    /// Not handled: the reason, for the log (answered with `400` when the sender waits).
    Ignore(&'static str),
}

/// The route of `msg`.
pub(crate) fn route(msg: &Message) -> Route {
    let operation = msg.route.operation.as_str();
    match operation {
        CONNECTED => return Route::Queue(Kind::Connection),
        DISCONNECTED => return Route::Ignore("disconnected event"),
        _ => {}
    }
    let Ok(r) = NodeResourceRef::parse(&msg.route.resource) else {
        return Route::Ignore("resource does not start with node/<id>/");
    };
    let kind = match (r.resource_type, operation) {
        (rt::NODE_STATUS, op::INSERT | op::UPDATE) => Kind::UpdateNodeStatus,
        (rt::POD_STATUS, op::UPDATE) => Kind::UpdatePodStatus,
        (rt::EVENT, op::INSERT | op::UPDATE | op::PATCH) => Kind::ProcessEvent,
        (rt::CONFIGMAP, op::QUERY) => Kind::QueryConfigMap,
        (rt::SECRET, op::QUERY) => Kind::QuerySecret,
        (rt::SERVICE_ACCOUNT_TOKEN, op::QUERY) => Kind::ServiceAccountToken,
        ("persistentvolume", op::QUERY) => Kind::QueryPersistentVolume,
        ("persistentvolumeclaim", op::QUERY) => Kind::QueryPersistentVolumeClaim,
        ("volumeattachment", op::QUERY) => Kind::QueryVolumeAttachment,
        (rt::NODE, op::INSERT) => Kind::CreateNode,
        (rt::NODE, op::QUERY) => Kind::QueryNode,
        (rt::NODE, op::UPDATE) => Kind::UpdateNode,
        (rt::NODE_PATCH, _) => Kind::PatchNode,
        (rt::POD_PATCH, _) => Kind::PatchPod,
        (rt::POD, op::DELETE) => Kind::DeletePod,
        (rt::POD, op::INSERT) => Kind::CreatePod,
        (rt::LEASE, op::INSERT | op::UPDATE) => Kind::CreateLease,
        (rt::LEASE, op::QUERY) => Kind::QueryLease,
        (rt::RULE_STATUS, _) => Kind::UpdateRuleStatus,
        (rt::CSR, op::INSERT | op::QUERY) => Kind::CertificateSigningRequest,
        ("", _) => return Route::Ignore("resource has no type segment"),
        (
            rt::NODE_STATUS
            | rt::POD_STATUS
            | rt::EVENT
            | rt::CONFIGMAP
            | rt::SECRET
            | rt::SERVICE_ACCOUNT_TOKEN
            | "persistentvolume"
            | "persistentvolumeclaim"
            | "volumeattachment"
            | rt::NODE
            | rt::POD
            | rt::LEASE
            | rt::CSR,
            _,
        ) => return Route::Ignore("operation not supported for this resource type"),
        _ => return Route::Ignore("unknown resource type"),
    };
    Route::Queue(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_sized_from_its_config_keys() {
        let c = EdgeControllerConfig::default();
        assert_eq!(Kind::PatchNode.sizes(&c), (1274, 110));
        assert_eq!(Kind::UpdatePodStatus.sizes(&c), (1024, 1));
        assert_eq!(Kind::CreatePod.sizes(&c), (1024, 4));
        assert_eq!(Kind::UpdateRuleStatus.sizes(&c), (1024, 4));
        let names: std::collections::HashSet<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), Kind::ALL.len(), "names are unique");
    }

    fn r(resource: &str, operation: &str) -> Route {
        route(&Message::new().with_route("edged", "meta", resource, operation))
    }

    #[test]
    fn routes_every_kind_of_spec_3_1() {
        let cases = [
            ("node/e/null/nodestatus/e", "update", Kind::UpdateNodeStatus),
            ("node/e/null/nodestatus/e", "insert", Kind::UpdateNodeStatus),
            ("node/e/ns/podstatus/p", "update", Kind::UpdatePodStatus),
            ("node/e/ns/event/x", "patch", Kind::ProcessEvent),
            ("node/e/ns/configmap/c", "query", Kind::QueryConfigMap),
            ("node/e/ns/secret/s", "query", Kind::QuerySecret),
            (
                "node/e/ns/serviceaccounttoken/sa",
                "query",
                Kind::ServiceAccountToken,
            ),
            (
                "node/e/null/persistentvolume/pv",
                "query",
                Kind::QueryPersistentVolume,
            ),
            (
                "node/e/ns/persistentvolumeclaim/c",
                "query",
                Kind::QueryPersistentVolumeClaim,
            ),
            (
                "node/e/default/volumeattachment/v",
                "query",
                Kind::QueryVolumeAttachment,
            ),
            ("node/e/null/node/e", "insert", Kind::CreateNode),
            ("node/e/null/node/e", "query", Kind::QueryNode),
            ("node/e/null/node/e", "update", Kind::UpdateNode),
            ("node/e/null/nodepatch/e", "patch", Kind::PatchNode),
            ("node/e/ns/podpatch/p", "patch", Kind::PatchPod),
            ("node/e/ns/pod/p", "delete", Kind::DeletePod),
            ("node/e/ns/pod/p", "insert", Kind::CreatePod),
            (
                "node/e/kube-node-lease/lease/e",
                "update",
                Kind::CreateLease,
            ),
            ("node/e/kube-node-lease/lease/e", "query", Kind::QueryLease),
            (
                "node/nodeid/ns/rulestatus/r",
                "update",
                Kind::UpdateRuleStatus,
            ),
            (
                "node/e/default/certificatesigningrequest/c",
                "insert",
                Kind::CertificateSigningRequest,
            ),
            ("node/e", "connected", Kind::Connection),
        ];
        for (resource, operation, kind) in cases {
            assert_eq!(
                r(resource, operation),
                Route::Queue(kind),
                "{resource} {operation}"
            );
        }
    }

    #[test]
    fn ignores_what_go_drops() {
        assert!(matches!(r("node/e", "disconnected"), Route::Ignore(_)));
        assert!(matches!(
            r("node/e/default/foo/x", "query"),
            Route::Ignore("unknown resource type")
        ));
        assert!(matches!(r("node/e/ns/pod/p", "query"), Route::Ignore(_)));
        assert!(matches!(r("node/e/ns/lease/e", "delete"), Route::Ignore(_)));
        assert!(matches!(r("default/pod/p", "insert"), Route::Ignore(_)));
        assert!(matches!(
            r("node/e", "update"),
            Route::Ignore("resource has no type segment")
        ));
    }
}
