//! Node authorization of devicetwin's requests: an edge node reaches only the Devices bound to
//! it (`spec.nodeName`), with the node taken from the resource prefix cloudhub adds from the
//! verified connection, never from the message body.

use std::ops::Deref;

use beehive::constants::operation;
use beehive::{Content, Message};
use kubeedge_api::authz::InvalidRequest;
use kubeedge_api::devices::Device;
use kubeedge_api::names::{DEVICECONTROLLER, GROUP_TWIN};
use kubeedge_api::status::StatusError;
use kubeedge_api::validation::{self, InvalidName};

use crate::request_kind::Kind;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The resource is not one of the shapes devicetwin sends (never answered: its kind, and
    /// so the answer the edge would expect, is unknown).
    #[error("not a request the devicecontroller serves")]
    UnknownRequest,
    /// The device id is not `<namespace>/<name>` (answered `400 BadRequest`).
    #[error("device id {0:?} is not <namespace>/<name>")]
    MalformedDevice(String),
    /// A namespace or name Kubernetes would not accept (answered `400 BadRequest`).
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// The API request built for a report cannot be read one way only (answered
    /// `400 BadRequest`).
    #[error(transparent)]
    Request(#[from] InvalidRequest),
    /// The device does not exist or is not bound to the requesting node (answered `403
    /// Forbidden`, the same answer in both cases so that an edge cannot probe for devices).
    #[error("device {namespace}/{name} is not bound to the node: {why}")]
    NotBound {
        /// The device's namespace.
        namespace: String,
        /// The device's name.
        name: String,
        /// What was found instead (logged, never sent to the edge).
        why: String,
    },
}

impl Refusal {
    /// The status carried by the refusal's answer, worded as the API server words a denial
    /// for a node.
    pub(crate) fn status(&self, node: &str) -> StatusError {
        match self {
            Refusal::NotBound {
                namespace, name, ..
            } => StatusError::forbidden(format!(
                "devicestatuses.devices.kubeedge.io \"{name}\" is forbidden: User \"system:node:{node}\" \
                 cannot patch resource \"devicestatuses\" in API group \"devices.kubeedge.io\" in the \
                 namespace \"{namespace}\": no relationship found between node '{node}' and this object"
            ))
            .with_details("devicestatuses", name),
            other => StatusError::bad_request(other.to_string()),
        }
    }
}

/// A request whose resource has one of the shapes devicetwin sends, after cloudhub's
/// `node/<node>/` prefix:
///
/// * `node/<node>/device/<namespace>/<name>/twin/edge_updated` (twin report),
/// * `node/<node>/device/<namespace>/<name>/state/update` (state report),
/// * `node/<node>/membership/detail` (membership query).
///
/// Nothing else is classified. The operation is not part of the shape (KubeEdge does not read
/// it either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request<'a> {
    /// The node of the connection the request came from.
    pub(crate) node: &'a str,
    /// What is asked.
    pub(crate) kind: Kind,
    /// The device id as sent (`<namespace>/<name>` when well formed); empty for membership.
    pub(crate) device: &'a str,
}

/// The request `resource` carries, by shape only; `None` for anything else.
pub(crate) fn classify(resource: &str) -> Option<Request<'_>> {
    let rest = resource.strip_prefix("node/")?;
    let (node, rest) = rest.split_once('/')?;
    if node.is_empty() {
        return None;
    }
    if rest == "membership/detail" {
        return Some(Request {
            node,
            kind: Kind::MembershipDetail,
            device: "",
        });
    }
    let id = rest.strip_prefix("device/")?;
    let (kind, device) = if let Some(device) = id.strip_suffix("/twin/edge_updated") {
        (Kind::Twin, device)
    } else if let Some(device) = id.strip_suffix("/state/update") {
        (Kind::State, device)
    } else {
        return None;
    };
    Some(Request { node, kind, device })
}

impl<'a> Request<'a> {
    /// The device's namespace and name, each valid for a URL path (DNS-1123 label and
    /// subdomain), so no `/`, `?`, `#` or `%` can reach a request path.
    pub(crate) fn device_ref(&self) -> Result<(&'a str, &'a str), Refusal> {
        let malformed = || Refusal::MalformedDevice(self.device.chars().take(64).collect());
        let (namespace, name) = self.device.split_once('/').ok_or_else(malformed)?;
        if name.contains('/') {
            return Err(malformed());
        }
        validation::namespace(namespace)?;
        validation::object_name("device name", name)?;
        Ok((namespace, name))
    }
}

/// `device` (looked up as `namespace/name`) when `node` may report on it: only when the device
/// exists and its `spec.nodeName` is `node`.
pub(crate) fn decide<D: Deref<Target = Device>>(
    node: &str,
    namespace: &str,
    name: &str,
    device: Option<D>,
) -> Result<D, Refusal> {
    let why = match device {
        Some(d) if d.spec.node_name == node => return Ok(d),
        Some(d) if d.spec.node_name.is_empty() => "the device is not bound to any node".to_owned(),
        Some(d) => format!("the device is bound to node {:?}", d.spec.node_name),
        None => "no such device".to_owned(),
    };
    Err(Refusal::NotBound {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        why,
    })
}

/// The answer to a refused twin or state report: shaped like the confirmation devicetwin
/// waits for (parent = request id, `node/<node>/twin`, group `twin`, operation `response`)
/// but carrying the refusal's status instead of `"OK"`. devicetwin takes any answer as the
/// end of its retries, which is right for a refusal: a retry would be refused again.
pub(crate) fn refusal_answer(req: &Message, node: &str, refusal: &Refusal) -> Message {
    Message::with_parent(req.header.id.clone())
        .with_route(
            DEVICECONTROLLER,
            GROUP_TWIN,
            format!("node/{node}/twin"),
            operation::RESPONSE,
        )
        .with_content(Content::json(&refusal.status(node)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device(node: &str) -> Device {
        serde_json::from_value(
            json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
            "metadata": {"name": "d1", "namespace": "ns"}, "spec": {"nodeName": node}}),
        )
        .unwrap()
    }

    #[test]
    fn only_the_three_shapes_devicetwin_sends_are_classified() {
        let twin = classify("node/e1/device/ns/d1/twin/edge_updated").unwrap();
        assert_eq!(
            (twin.node, twin.kind, twin.device),
            ("e1", Kind::Twin, "ns/d1")
        );
        let state = classify("node/e1/device/ns/d1/state/update").unwrap();
        assert_eq!((state.kind, state.device), (Kind::State, "ns/d1"));
        let detail = classify("node/e1/membership/detail").unwrap();
        assert_eq!((detail.node, detail.kind), ("e1", Kind::MembershipDetail));
        for other in [
            "node/e1/device/ns/d1/twin/cloud_updated",
            "node/e1/membership/detail/x",
            "node/e1/x/membership/detail",
            "node/e1/device/ns/d1/state/update/twin/edge_updated/x",
            "node//membership/detail",
            "e1/device/ns/d1/twin/edge_updated",
            "node/e1/device/twin/edge_updated",
            "node/e1/membership",
        ] {
            assert_eq!(classify(other), None, "{other}");
        }
    }

    #[test]
    fn device_ids_must_be_a_valid_namespace_and_name() {
        fn id(r: &str) -> Result<(&str, &str), Refusal> {
            classify(r).unwrap().device_ref()
        }
        assert_eq!(
            id("node/e1/device/ns/d1/twin/edge_updated"),
            Ok(("ns", "d1"))
        );
        assert!(matches!(
            id("node/e1/device/ns/a/b/twin/edge_updated"),
            Err(Refusal::MalformedDevice(_))
        ));
        assert!(matches!(
            id("node/e1/device/d1/state/update"),
            Err(Refusal::MalformedDevice(_))
        ));
        for bad in [
            "node/e1/device/ns/x?y/state/update",
            "node/e1/device/ns/x#y/state/update",
            "node/e1/device/ns/%2e%2e/state/update",
            "node/e1/device/NS/d1/state/update",
            "node/e1/device//d1/state/update",
            "node/e1/device/ns//state/update",
            "node/e1/device/a.b/d1/twin/edge_updated",
        ] {
            assert!(
                matches!(id(bad), Err(Refusal::InvalidName(_))),
                "{bad}: {:?}",
                id(bad)
            );
        }
    }

    #[test]
    fn only_devices_bound_to_the_node_are_allowed() {
        let mine = device("e1");
        assert!(decide("e1", "ns", "d1", Some(&mine)).is_ok_and(|d| std::ptr::eq(d, &mine)));
        for (d, why) in [
            (Some(device("e2")), "bound to node \"e2\""),
            (Some(device("")), "not bound to any node"),
            (None, "no such device"),
        ] {
            let refusal = decide("e1", "ns", "d1", d.as_ref()).unwrap_err();
            assert!(refusal.to_string().contains(why), "{refusal}");
            let status = refusal.status("e1");
            assert_eq!((status.code(), status.reason()), (403, "Forbidden"));
            assert!(
                !status.err_status.message.contains("e2"),
                "the answer does not tell where the device is"
            );
        }
        let a = decide("e1", "ns", "d1", Some(&device("e2"))).unwrap_err();
        let b = decide::<&Device>("e1", "ns", "d1", None).unwrap_err();
        assert_eq!(a.status("e1"), b.status("e1"), "same answer, found or not");
    }

    #[test]
    fn a_refusal_answer_ends_devicetwins_retries_without_saying_ok() {
        let req = Message::new().with_route(
            "twin",
            "resource",
            "node/e1/device/ns/d1/twin/edge_updated",
            "update",
        );
        let refusal = decide::<&Device>("e1", "ns", "d1", None).unwrap_err();
        let answer = refusal_answer(&req, "e1", &refusal);
        assert_eq!(answer.header.parent_id, req.header.id);
        assert_eq!(
            (
                answer.route.resource.as_str(),
                answer.route.group.as_str(),
                answer.route.operation.as_str()
            ),
            ("node/e1/twin", "twin", "response")
        );
        let body: serde_json::Value = serde_json::from_str(answer.content.as_json()).unwrap();
        assert_eq!(body["ErrStatus"]["code"], 403);
    }
}
