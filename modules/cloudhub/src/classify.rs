//! Which downstream messages need an acknowledgement from the edge, and the few
//! object fields the reliable path reads from content.

use beehive::Message;
use beehive::constants::{SUCCESS_CONTENT, operation as op};
use kubeedge_api::names::{self, operation as hub_op};
use serde::Deserialize;

/// How a downstream message is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Written once; never retried, never recorded (fire and forget).
    NoAck,
    /// Retried until the edge answers with a `response` whose parent is its id; the
    /// acknowledged resource version is recorded in an ObjectSync.
    Ack,
    /// Retried until acknowledged like [`Delivery::Ack`] while the session lives, but recorded
    /// in no ObjectSync: the sender keeps its own bounded record of what it delivered
    /// (dynamiccontroller's watch events).
    AckUnrecorded,
}

const SOURCE_EDGEMGR: &str = "edgemgr";

fn resource_type(resource: &str) -> &str {
    // Index 3 of `node/<id>/<ns>/<type>/<name>`; missing = empty.
    resource.split('/').nth(3).unwrap_or("")
}

/// True when a `response`'s content is an error rather than an object: any JSON string (Go
/// sends error text or `"OK"` as strings) or an object with a top-level `ErrStatus` (a
/// serialised `StatusError`). Go decides this by the in-process type; we only see JSON.
fn is_error_or_text_content(msg: &Message) -> bool {
    let text = msg.content.as_json().trim_start();
    if text.starts_with('"') {
        return true;
    }
    if text.starts_with('{') && text.contains("\"ErrStatus\"") {
        #[derive(Deserialize)]
        struct Probe {
            #[serde(rename = "ErrStatus")]
            err_status: Option<serde::de::IgnoredAny>,
        }
        return matches!(
            msg.content.parse::<Probe>(),
            Ok(Probe {
                err_status: Some(_)
            })
        );
    }
    false
}

/// Classifies a downstream message by KubeEdge's rules, evaluated in order (see
/// docs/hub-protocol.md), where a `response` with string or `ErrStatus` content counts as an
/// error answer and is no-ACK: Go decides by the in-process type, which JSON does not carry.
pub fn classify(msg: &Message) -> Delivery {
    let r = &msg.route;
    let res = r.resource.as_str();
    let no_ack = res.contains("podlist")
        || res.contains("membership")
        || res.contains("twin/cloud_updated")
        || res.contains("serviceaccounttoken")
        || res.contains("k8s/ca.crt")
        || hub_op::VOLUME_OPERATIONS.contains(&r.operation.as_str())
        || r.operation == hub_op::APPLICATION_RESPONSE
        || r.group == names::GROUP_USER
        || r.source == names::TASKMANAGER
        || r.source == names::NODEUPGRADEJOBCONTROLLER
        || (r.operation == op::RESPONSE
            && (msg.content.as_string().as_deref() == Some(SUCCESS_CONTENT)
                || is_error_or_text_content(msg)))
        || (r.source == names::EDGECONTROLLER && {
            let t = resource_type(res);
            (t == "node" && r.operation != op::UPDATE)
                || matches!(
                    t,
                    "lease" | "nodepatch" | "podpatch" | "podstatus" | "certificatesigningrequest"
                )
                || (t == "pod" && r.operation == op::RESPONSE)
        });
    if no_ack {
        Delivery::NoAck
    } else if r.source == names::DYNAMICCONTROLLER {
        Delivery::AckUnrecorded
    } else {
        Delivery::Ack
    }
}

/// The legacy `edgemgr` source filter KubeEdge still applies: true when the message must be
/// dropped.
pub(crate) fn legacy_drop(msg: &Message) -> bool {
    if msg.route.source != SOURCE_EDGEMGR {
        return false;
    }
    let res = kubeedge_api::trim_node(&msg.route.resource);
    let o = msg.route.operation.as_str();
    (res.contains("membership") && o == "get")
        || (res.contains("twin") && matches!(o, "delta" | "document" | "get"))
        || (res.contains("auth_info") && o == "get")
        || (res.contains("node") && o == "deleted")
}

/// True for a no-ACK message that announces the deletion of the node itself (`node` type,
/// operation `delete`): the session is closed instead of writing it.
pub(crate) fn is_node_deletion(msg: &Message) -> bool {
    msg.route.operation == op::DELETE && resource_type(&msg.route.resource) == "node"
}

/// The object fields the reliable path needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    /// `metadata.uid` (the ACK store key).
    pub uid: String,
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    name: String,
    #[serde(rename = "deletionTimestamp", default)]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Object {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<Meta>,
}

/// Reads the object fields from the content (an object, or a string holding one, as Go's
/// `GetContentData`). `None` when the content has no `metadata.uid`.
pub fn object_info(msg: &Message) -> Option<ObjectInfo> {
    let o: Object = msg.content.parse_bytes().ok()?;
    let meta = o.metadata?;
    if meta.uid.is_empty() {
        return None;
    }
    Some(ObjectInfo {
        uid: meta.uid,
        api_version: o.api_version,
        kind: o.kind,
        name: meta.name,
        deleting: meta.deletion_timestamp.is_some(),
    })
}

/// A delete is operation `delete` or an object being deleted (`metadata.deletionTimestamp`).
pub(crate) fn is_delete(msg: &Message, info: Option<&ObjectInfo>) -> bool {
    msg.route.operation == op::DELETE || info.is_some_and(|i| i.deleting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use beehive::Content;

    fn m(source: &str, group: &str, resource: &str, operation: &str) -> Message {
        Message::new().with_route(source, group, resource, operation)
    }

    #[test]
    fn no_ack_rules_in_order() {
        let ec = "edgecontroller";
        for msg in [
            m(ec, "resource", "node/e/default/podlist", "update"),
            m("devicecontroller", "twin", "node/e/membership", "update"),
            m(
                "devicecontroller",
                "twin",
                "node/e/device/d/twin/cloud_updated",
                "update",
            ),
            m(
                ec,
                "resource",
                "node/e/ns/serviceaccounttoken/sa",
                "response",
            ),
            m("cloudhub", "resource", "node/e/k8s/ca.crt", "response"),
            m("cloudhub", "resource", "node/e/ns/volume/v", "createvolume"),
            m(
                "dynamiccontroller",
                "resource",
                "node/e/x",
                "applicationResponse",
            ),
            m("router", "user", "node/e/r/x", "insert"),
            m("taskmanager", "taskmanager", "task/t/node/e", "upgrade"),
            m("nodeupgradejobcontroller", "x", "node/e/y", "upgrade"),
            m(ec, "resource", "node/e/null/node/e", "delete"),
            m(ec, "resource", "node/e/kube-node-lease/lease/e", "response"),
            m(ec, "resource", "node/e/null/nodepatch/e", "response"),
            m(ec, "resource", "node/e/default/podpatch/p", "response"),
            m(ec, "resource", "node/e/default/podstatus/p", "response"),
            m(
                ec,
                "resource",
                "node/e/null/certificatesigningrequest/c",
                "response",
            ),
            m(ec, "resource", "node/e/default/pod/p", "response"),
            m(ec, "resource", "node/e/default/configmap/c", "response")
                .with_content(Content::string("OK")),
        ] {
            assert_eq!(classify(&msg), Delivery::NoAck, "{msg}");
        }
    }

    #[test]
    fn ack_class_messages() {
        let ec = "edgecontroller";
        for msg in [
            m(ec, "resource", "node/e/default/pod/p", "insert"),
            m(ec, "resource", "node/e/default/pod/p", "update"),
            m(ec, "resource", "node/e/default/configmap/c", "delete"),
            m(ec, "resource", "node/e/null/node/e", "update"),
            m(
                "synccontroller",
                "resource",
                "node/e/default/secret/s",
                "update",
            ),
            m(ec, "resource", "node/e/default/configmap/c", "response").with_content(
                Content::json(&serde_json::json!({"kind": "ConfigMap", "metadata": {"uid": "u"}}))
                    .unwrap(),
            ),
        ] {
            assert_eq!(classify(&msg), Delivery::Ack, "{msg}");
        }
    }

    #[test]
    fn watch_events_are_acknowledged_but_not_recorded() {
        let dc = "dynamiccontroller";
        for op in ["insert", "update", "delete"] {
            let msg = m(dc, "resource", "node/e/default/service/s", op);
            assert_eq!(classify(&msg), Delivery::AckUnrecorded, "{msg}");
        }
        let reply = m(
            dc,
            "resource",
            "node/e/ignore/Application/ignore",
            "applicationResponse",
        );
        assert_eq!(classify(&reply), Delivery::NoAck);
    }

    #[test]
    fn error_responses_are_no_ack() {
        let err = kubeedge_api::status::StatusError::not_found("configmap", "c");
        let msg = m(
            "edgecontroller",
            "resource",
            "node/e/default/configmap/c",
            "response",
        )
        .with_content(Content::json(&err).unwrap());
        assert_eq!(classify(&msg), Delivery::NoAck);
        let text = m(
            "edgecontroller",
            "resource",
            "node/e/default/secret/s",
            "response",
        )
        .with_content(Content::string("secret not found"));
        assert_eq!(classify(&text), Delivery::NoAck);
    }

    #[test]
    fn object_info_reads_uid_kind_and_deletion() {
        let msg = m("e", "resource", "node/e/default/pod/p", "update").with_content(
            Content::json(&serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"}})).unwrap(),
        );
        let info = object_info(&msg).unwrap();
        assert_eq!(
            (info.uid.as_str(), info.kind.as_str(), info.name.as_str()),
            ("u1", "Pod", "p")
        );
        assert!(is_delete(&msg, Some(&info)));
        assert!(object_info(&m("e", "resource", "x", "update")).is_none());
        assert!(
            object_info(
                &m("e", "resource", "x", "update")
                    .with_content(Content::string("{\"metadata\":{\"uid\":\"s\"}}"))
            )
            .is_some()
        );
    }

    #[test]
    fn legacy_edgemgr_filter() {
        assert!(legacy_drop(&m(
            "edgemgr",
            "x",
            "node/e/membership/detail",
            "get"
        )));
        assert!(!legacy_drop(&m(
            "edgemgr",
            "x",
            "node/e/membership/detail",
            "update"
        )));
        assert!(!legacy_drop(&m(
            "edgecontroller",
            "x",
            "node/e/membership/detail",
            "get"
        )));
        assert!(is_node_deletion(&m(
            "edgecontroller",
            "resource",
            "node/e/null/node/e",
            "delete"
        )));
    }
}
