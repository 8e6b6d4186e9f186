//! Where a message from an edge goes (KubeEdge's routing rules, docs/hub-protocol.md), as a pure
//! decision.

use beehive::constants::operation as op;
use beehive::{Content, Message};
use kubeedge_api::names::{self, operation as hub_op};
use kubeedge_api::with_node;

/// Content of the transport's automatic answer to `config`/`ping`/`pong`.
const CONTROL_ACK: &str = "ack";

/// The decision for one upstream message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Upstream {
    /// A keepalive: resets the session timer, goes nowhere.
    Keepalive,
    /// A transport control message: write this answer back, forward nothing.
    Answer(Message),
    /// A reply to a volume request waiting synchronously (resource unchanged).
    VolumeReply(Message),
    /// An acknowledgement (or any response) of the downstream message `parent`.
    Ack(Message),
    /// An `error` from the edge: logged only.
    EdgeError(Message),
    /// Send to one module.
    ToModule(&'static str, Message),
    /// Send to every module of a group.
    ToGroup(&'static str, Message),
    /// A `k8s/ca.crt` query the hub answers itself.
    CaQuery(Message),
    /// Refused (not forwarded, counted as a drop), with the reason.
    Drop(&'static str),
    /// Nothing to route (not a loss: the empty message edgecore writes when it stops).
    Ignore(&'static str),
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `^\w[-\w.+]*/volume/\w[-\w.+]*` (upstream's volume pattern).
fn is_volume_resource(resource: &str) -> bool {
    let mut parts = resource.splitn(3, '/');
    let (Some(first), Some(kind), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let mut chars = first.chars();
    chars.next().is_some_and(is_word)
        && chars.all(|c| is_word(c) || matches!(c, '-' | '.' | '+'))
        && kind == "volume"
        && rest.chars().next().is_some_and(is_word)
}

/// Routes `msg` received from `node` (identity from the connection, never the message).
pub(crate) fn route(node: &str, mut msg: Message) -> Upstream {
    let operation = msg.route.operation.as_str();
    if hub_op::CONTROL.contains(&operation) {
        let mut answer = msg.response(Content::string(CONTROL_ACK));
        answer.route.operation = op::RESPONSE.into();
        return Upstream::Answer(answer);
    }
    if operation == hub_op::KEEPALIVE {
        return Upstream::Keepalive;
    }
    if is_volume_resource(&msg.route.resource) {
        return Upstream::VolumeReply(msg);
    }
    // An edge servicebus answers a router request with the request's id as parent: `upload`
    // when its service answered, no operation at all when it could not call it (KubeEdge
    // sends the latter to edgecontroller, where it is lost and the caller waits).
    if msg.route.group == names::GROUP_USER
        && !msg.header.parent_id.is_empty()
        && operation != op::RESPONSE
    {
        msg.route.resource = with_node(node, &msg.route.resource).into();
        return Upstream::ToModule(names::ROUTER, msg);
    }
    if operation == op::RESPONSE {
        return Upstream::Ack(msg);
    }
    if operation == op::RESPONSE_ERROR {
        return Upstream::EdgeError(msg);
    }
    // Past answers (an edge's ack or error may echo the cloud route it answers), no message
    // may claim a cloud module's source: modules trust those sources.
    if names::CLOUD_SOURCES.contains(&msg.route.source.as_str()) {
        return Upstream::Drop("edge message claims a cloud module as source");
    }
    if operation == op::UPLOAD && msg.route.group == names::GROUP_USER {
        msg.route.resource = with_node(node, &msg.route.resource).into();
        return Upstream::ToModule(names::ROUTER, msg);
    }
    if hub_op::TASK_OPERATIONS.contains(&operation) {
        // The taskmanager applies a report only to the node it came from: it reads the
        // session's node in front of the resource (KubeEdge forwards it unchanged and takes
        // the node the report names).
        msg.route.resource = with_node(node, &msg.route.resource).into();
        return Upstream::ToGroup(names::TASKMANAGER, msg);
    }
    if msg.route.resource == beehive::constants::resource_type::K8S_CA {
        return Upstream::CaQuery(msg);
    }
    if msg.is_empty() || (msg.header.id.is_empty() && operation.is_empty()) {
        // edgecore writes an all-empty message when it stops (observed); nothing to route.
        return Upstream::Ignore("empty message");
    }
    msg.route.resource = with_node(node, &msg.route.resource).into();
    match msg.route.source.as_str() {
        names::SOURCE_METASERVER => Upstream::ToModule(names::DYNAMICCONTROLLER, msg),
        names::SOURCE_TWIN => Upstream::ToGroup(names::DEVICECONTROLLER, msg),
        _ => Upstream::ToGroup(names::EDGECONTROLLER, msg),
    }
}

/// The hub's answer to a `k8s/ca.crt` query: parent = query id, source
/// `cloudhub`, group `resource`, resource `node/<id>/k8s/ca.crt`, operation `response`,
/// content the Kubernetes CA PEM (empty when unknown).
pub(crate) fn ca_answer(node: &str, query: &Message, ca_pem: &str) -> Message {
    Message::with_parent(query.header.id.clone())
        .with_route(
            names::CLOUDHUB,
            names::GROUP_RESOURCE,
            with_node(node, beehive::constants::resource_type::K8S_CA),
            op::RESPONSE,
        )
        .with_content(Content::string(ca_pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(source: &str, group: &str, resource: &str, operation: &str) -> Message {
        Message::new().with_route(source, group, resource, operation)
    }

    #[test]
    fn routes_by_the_spec_table() {
        assert_eq!(
            route("e", m("websocket", "resource", "node", "keepalive")),
            Upstream::Keepalive
        );
        assert_eq!(
            route("e", m("x", "resource", "anything", "keepalive")),
            Upstream::Keepalive
        );
        assert!(matches!(
            route("e", m("csidriver", "resource", "ns/volume/v1", "response")),
            Upstream::VolumeReply(_)
        ));
        assert!(matches!(
            route(
                "e",
                m("edgecontroller", "resource", "default/pod/p", "response")
            ),
            Upstream::Ack(_)
        ));
        assert!(matches!(
            route("e", m("edged", "resource", "default/pod/p", "error")),
            Upstream::EdgeError(_)
        ));
        match route("e", m("eventbus", "user", "r/x", "upload")) {
            Upstream::ToModule("router", msg) => assert_eq!(msg.route.resource, "node/e/r/x"),
            other => panic!("{other:?}"),
        }
        let mut answer = Message::with_parent(beehive::Id::new_v4());
        answer.route.source = "servicebus".into();
        answer.route.group = "user".into();
        match route("e", answer) {
            Upstream::ToModule("router", msg) => assert_eq!(msg.route.resource, "node/e/"),
            other => panic!("{other:?}"),
        }
        match route("e", m("edged", "taskmanager", "task/t/node/x", "upgrade")) {
            Upstream::ToGroup("taskmanager", msg) => {
                assert_eq!(msg.route.resource, "node/e/task/t/node/x")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            route("e", m("metamanager", "resource", "k8s/ca.crt", "query")),
            Upstream::CaQuery(_)
        ));
        match route("e", m("edged", "meta", "default/podstatus/nginx", "update")) {
            Upstream::ToGroup("edgecontroller", msg) => {
                assert_eq!(msg.route.resource, "node/e/default/podstatus/nginx")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            route("e", m("twin", "twin", "$hw/events/device/d", "update")),
            Upstream::ToGroup("devicecontroller", _)
        ));
        assert!(matches!(
            route("e", m("metaserver", "meta", "default/pod", "list")),
            Upstream::ToModule("dynamiccontroller", _)
        ));
        assert!(matches!(
            route(
                "e",
                m("edgecontroller", "resource", "default/pod/p", "update")
            ),
            Upstream::Drop(_)
        ));
        assert!(matches!(
            route("e", Message::default()),
            Upstream::Ignore(_)
        ));
    }

    #[test]
    fn no_cloud_source_passes_from_an_edge_whatever_the_operation() {
        for source in names::CLOUD_SOURCES {
            for (group, resource, operation) in [
                ("resource", "ns/rulestatus/r", "update"),
                ("user", "ns/topic", "upload"),
                ("taskmanager", "task/t/node/e", "upgrade"),
                ("meta", "default/pod", "list"),
            ] {
                let got = route("e", m(source, group, resource, operation));
                assert!(
                    matches!(got, Upstream::Drop(_)),
                    "{source} {operation}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn control_operations_are_answered_with_ack() {
        let ping = m("x", "g", "r", "ping");
        let Upstream::Answer(a) = route("e", ping.clone()) else {
            panic!()
        };
        assert_eq!(a.header.parent_id, ping.header.id);
        assert_eq!(
            (a.route.operation.as_str(), a.route.resource.as_str()),
            ("response", "r")
        );
        assert_eq!(a.content.as_string().as_deref(), Some("ack"));
    }

    #[test]
    fn volume_pattern() {
        assert!(is_volume_resource("ns/volume/v"));
        assert!(is_volume_resource("my-ns.x/volume/v-1"));
        assert!(!is_volume_resource("-ns/volume/v"));
        assert!(!is_volume_resource("ns/volumes/v"));
        assert!(!is_volume_resource("ns/volume/"));
    }
}
