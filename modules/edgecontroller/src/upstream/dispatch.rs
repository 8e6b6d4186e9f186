//! Classifies an upstream message by resource type (segment 3) and operation.

use beehive::Message;
use beehive::constants::{operation as op, resource_type as rt};
use kubeedge_api::NodeResourceRef;
use kubeedge_api::names::operation::{CONNECTED, DISCONNECTED};

use super::Kind;

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
