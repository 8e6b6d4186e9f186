//! Module, group and source names KubeEdge routes by (`cloud/pkg/common/modules/modules.go`).

/// The hub edge nodes connect to; downstream messages are sent to this module.
pub const CLOUDHUB: &str = "cloudhub";
/// Pods, nodes, configmaps, secrets, leases.
pub const EDGECONTROLLER: &str = "edgecontroller";
/// Devices and twins.
pub const DEVICECONTROLLER: &str = "devicecontroller";
/// Reliable-delivery reconciliation (ObjectSync).
pub const SYNCCONTROLLER: &str = "synccontroller";
/// Serves the edge metaserver's list/watch (not built here; its name is routed to).
pub const DYNAMICCONTROLLER: &str = "dynamiccontroller";
/// Node tasks (upgrade, image pre-pull).
pub const TASKMANAGER: &str = "taskmanager";
/// Rule-based message routing.
pub const ROUTER: &str = "router";
/// Source name of policy messages.
pub const POLICYCONTROLLER: &str = "policycontroller";
/// Source name of upgrade-job messages.
pub const NODEUPGRADEJOBCONTROLLER: &str = "nodeupgradejobcontroller";
/// The stream tunnel (capital S, as upstream).
pub const CLOUDSTREAM: &str = "cloudStream";
/// The CSI driver's Unix socket (inside cloudhub in KubeEdge, a module of its own here).
pub const UDSSERVER: &str = "udsserver";
/// Approves edge metaServers' serving-certificate requests (outside the bus in KubeEdge).
pub const CSRAPPROVER: &str = "csrapprover";

/// The role of cloudhub's endpoint that relays what edges send (see [`EDGE_RELAY`]).
pub const EDGE_RELAY_ROLE: &str = "edge";
/// The bus sender ([`beehive::Message::sender`]) of everything an edge sent: cloudhub puts
/// every edge message, answer and task report on the bus through its endpoint derived for
/// this role, and only its own node events through its endpoint `cloudhub`. A module that
/// treats a message as a cloud module's decides on the bus sender being that module; a
/// message from this sender is held to the edge's rules whatever its `route.source` says.
pub const EDGE_RELAY: &str = "cloudhub/edge";

/// Message group of Kubernetes-object traffic.
pub const GROUP_RESOURCE: &str = "resource";
/// Message group of device twin traffic.
pub const GROUP_TWIN: &str = "twin";
/// Message group of user (router) traffic.
pub const GROUP_USER: &str = "user";
/// Message group edged uses upstream.
pub const GROUP_META: &str = "meta";

/// Edge source: the edge metaserver (routed to dynamiccontroller).
pub const SOURCE_METASERVER: &str = "metaserver";
/// Edge source: devicetwin (routed to devicecontroller).
pub const SOURCE_TWIN: &str = "twin";
/// Edge source: edged (the kubelet).
pub const SOURCE_EDGED: &str = "edged";
/// Edge source: the edge hub's own module name (its keepalives).
pub const SOURCE_EDGEHUB: &str = "websocket";

/// Source of the cloud router's messages to an edge's eventbus.
pub const ROUTER_EVENTBUS: &str = "router_eventbus";
/// Source of the cloud router's messages to an edge's servicebus.
pub const ROUTER_SERVICEBUS: &str = "router_servicebus";

/// Sources that only cloud modules may use: every cloud module's name and the cloud-only
/// sources of its messages. cloudhub drops an upstream message claiming one, so an edge
/// cannot speak as a cloud module; a handler may trust these sources on messages that did
/// not come from an edge. A new cloud module adds its name here (the hub's tests send every
/// entry from an edge and expect it dropped).
pub const CLOUD_SOURCES: [&str; 14] = [
    CLOUDHUB,
    CLOUDSTREAM,
    CSRAPPROVER,
    DEVICECONTROLLER,
    DYNAMICCONTROLLER,
    EDGECONTROLLER,
    NODEUPGRADEJOBCONTROLLER,
    POLICYCONTROLLER,
    ROUTER,
    ROUTER_EVENTBUS,
    ROUTER_SERVICEBUS,
    SYNCCONTROLLER,
    TASKMANAGER,
    UDSSERVER,
];

/// The namespace token of cluster-scoped objects in resource paths.
pub const NULL_NAMESPACE: &str = "null";

/// Label that marks a Node as an edge node (value `""`).
pub const EDGE_NODE_LABEL: &str = "node-role.kubernetes.io/edge";

/// Operations specific to cloudhub and the tasks it relays.
pub mod operation {
    /// Edge keepalive.
    pub const KEEPALIVE: &str = "keepalive";
    /// Node connected event.
    pub const CONNECTED: &str = "connected";
    /// Node disconnected event.
    pub const DISCONNECTED: &str = "disconnected";
    /// Metaserver application response.
    pub const APPLICATION_RESPONSE: &str = "applicationResponse";
    /// CSI volume operations (answered by the edge synchronously).
    pub const VOLUME_OPERATIONS: [&str; 4] = [
        "createvolume",
        "deletevolume",
        "controllerpublishvolume",
        "controllerunpublishvolume",
    ];
    /// Task operations relayed to the task manager.
    pub const TASK_OPERATIONS: [&str; 3] = ["prepull", "upgrade", "UpdateNodeActionStatus"];
    /// Transport control operations a viaduct peer answers itself.
    pub const CONTROL: [&str; 3] = ["config", "ping", "pong"];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_relay_is_cloudhubs_endpoint_for_the_role() {
        let bus_name = format!("{CLOUDHUB}/{EDGE_RELAY_ROLE}");
        assert_eq!(bus_name, EDGE_RELAY);
        // No module can be the relay: module names have no `/`.
        assert!(CLOUD_SOURCES.iter().all(|s| !s.contains('/')));
    }
}
