//! Node authorization: what an edge node may ask of the cloud, decided from the watch caches
//! before a request reaches the API server.
//!
//! The rules follow Kubernetes' Node authorizer (a node reaches only the objects its own pods
//! use) and the NodeRestriction admission plugin (a node writes only itself and its own pods),
//! with the node name taken from the connection, never from the message. They apply whatever
//! the impersonation setting: with impersonation on, the API server checks the same requests
//! again as `system:node:<name>`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use beehive::Message;
use beehive::constants::operation as op;
use k8s_openapi::api::core::v1::{Node, Pod};
use kubeedge_api::NodeResourceRef;
use kubeedge_api::authz::InvalidRequest;
use kubeedge_api::authz::restriction;
use kubeedge_api::names::{CLOUDHUB, ROUTER};
use kubeedge_api::status::StatusError;
use kubeedge_api::validation::{self, InvalidName};
use kubeedge_api::watch::{self, Cache};
use serde::Deserialize;
use serde_json::Value;

use crate::downstream::{
    MIRROR_POD_ANNOTATION, ObjectRef, RefKind, SharedLocations, bound_node, granted, references,
};
use crate::request_kind::{Kind, Route, route};

/// The namespace of node heartbeat leases.
pub(crate) const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
pub(crate) use kubeedge_api::authz::restriction::KUBEEDGE_ROLE_LABELS;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A name or namespace is not one Kubernetes accepts (answered `400 BadRequest`).
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// The request cannot be read (answered `400 BadRequest`).
    #[error("{0}")]
    Malformed(String),
    /// The API request built for it cannot be read one way only (answered `400 BadRequest`).
    #[error(transparent)]
    Request(#[from] InvalidRequest),
    /// What the decision needs could not be read from the API server (answered with the API
    /// server's own status, a `500` for a transport error; not counted as a refusal of the
    /// node).
    #[error("cannot decide the request: {0}")]
    Unavailable(Box<StatusError>),
    /// The node may not do this (answered `403 Forbidden`).
    #[error("{plural} \"{name}\" is forbidden: {why}")]
    Forbidden {
        /// The resource, plural (`pods`).
        plural: &'static str,
        /// The object's name (may be empty).
        name: String,
        /// The verb refused (`get`, `patch`, …).
        verb: &'static str,
        /// Why, in a few words.
        why: String,
    },
    /// The pod the request is about does not exist (answered `404 NotFound`, as the API
    /// server answers a write to a missing object; not counted as a refusal).
    #[error("pods \"{name}\" not found")]
    PodNotFound {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// The decision depends on the Node's labels as they are now, and the watch cache may
    /// lag behind them. Resolved by reading the Node once and deciding again with it.
    #[error("the labels of Node {name} could not be confirmed")]
    UnconfirmedNode {
        /// The Node's name.
        name: String,
    },
    /// The decision needs the pod `namespace/name`, which the watch cache does not hold yet.
    /// Resolved by looking the pod up once and deciding again with it.
    #[error("pod {namespace}/{name} is not known to be bound to the node")]
    UnknownPod {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
}

impl Refusal {
    fn forbidden(
        plural: &'static str,
        name: &str,
        verb: &'static str,
        why: impl Into<String>,
    ) -> Self {
        Refusal::Forbidden {
            plural,
            name: name.to_owned(),
            verb,
            why: why.into(),
        }
    }

    /// The answer the edge gets, in the Kubernetes shape (`403` as the API server words it
    /// for a node, `400` for unreadable requests).
    pub fn status(&self, node: &str) -> StatusError {
        match self {
            Refusal::InvalidName(e) => StatusError::bad_request(e.to_string()),
            Refusal::Request(e) => StatusError::bad_request(e.to_string()),
            Refusal::Unavailable(e) => (**e).clone(),
            Refusal::Malformed(m) => StatusError::bad_request(m.clone()),
            Refusal::Forbidden {
                plural,
                name,
                verb,
                why,
            } => StatusError::forbidden(format!(
                "{plural} \"{name}\" is forbidden: User \"system:node:{node}\" cannot {verb} resource \"{plural}\": {why}"
            ))
            .with_details(plural, name),
            Refusal::UnknownPod { namespace, name } => StatusError::forbidden(format!(
                "pods \"{name}\" is forbidden: User \"system:node:{node}\": no relationship found between node '{node}' and pod {namespace}/{name}"
            ))
            .with_details("pods", name),
            Refusal::PodNotFound { name, .. } => StatusError::not_found("pods", name),
            Refusal::UnconfirmedNode { name } => StatusError::forbidden(format!(
                "nodes \"{name}\" is forbidden: User \"system:node:{node}\": the node's labels could not be confirmed"
            ))
            .with_details("nodes", name),
        }
    }

    /// A short word for logs and metrics: `invalid`, `malformed` or `forbidden`.
    pub fn class(&self) -> &'static str {
        match self {
            Refusal::InvalidName(_) | Refusal::Malformed(_) | Refusal::Request(_) => "invalid",
            Refusal::PodNotFound { .. } => "not-found",
            Refusal::Unavailable(_) => "unavailable",
            Refusal::Forbidden { .. }
            | Refusal::UnknownPod { .. }
            | Refusal::UnconfirmedNode { .. } => "forbidden",
        }
    }
}

type Decision = Result<(), Refusal>;

/// Objects read from the API server for one decision because the watch caches did not hold
/// them (yet): the answers to [`Refusal::UnknownPod`] and [`Refusal::UnconfirmedNode`].
#[derive(Debug, Default, Clone)]
pub struct Fetched {
    /// Pods looked up by namespace and name.
    pub pods: Vec<Pod>,
    /// The requesting node's Node as it is now; `Some(None)` when it could not be read
    /// (the cache's copy decides).
    pub node: Option<Option<Node>>,
}

/// Decides every request an edge node sends to the edgecontroller.
///
/// Decisions read only the watch caches (pods on edge nodes and what they reference), so they
/// never wait on the API server; a request about a pod the cache does not hold yet is refused
/// with [`Refusal::UnknownPod`], which the caller may resolve with a lookup
/// ([`NodeAuthorizer::authorize_with`]). Everything without a rule is refused.
#[derive(Debug, Clone)]
pub struct NodeAuthorizer {
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    locations: SharedLocations,
}

impl NodeAuthorizer {
    pub(crate) fn new(pods: Cache<Pod>, nodes: Cache<Node>, locations: SharedLocations) -> Self {
        NodeAuthorizer {
            pods,
            nodes,
            locations,
        }
    }

    /// An authorizer over a fixed set of pods and nodes, for benchmarks and tests; in
    /// cloudcore the edgecontroller's watch caches feed it.
    pub fn with_objects(pods: impl IntoIterator<Item = Pod>, nodes: Vec<Node>) -> Self {
        let (mut pod_writer, pod_cache) = watch::cache();
        let (mut node_writer, node_cache) = watch::cache();
        let locations = SharedLocations::default();
        for pod in pods {
            let key = watch::key_of(&pod);
            let node = bound_node(&pod).unwrap_or_default().to_owned();
            locations.write().set_pod(&key, &node, granted(&pod));
            pod_writer.upsert(pod);
        }
        for node in nodes {
            node_writer.upsert(node);
        }
        pod_writer.mark_ready();
        node_writer.mark_ready();
        NodeAuthorizer::new(pod_cache, node_cache, locations)
    }

    /// Whether the edge node in `msg`'s resource (`node/<name>/…`, set from the connection)
    /// may make this request. Requests about objects fetched later (persistent volumes,
    /// volume attachments, certificate signing requests) pass here on their names and are
    /// decided again on the fetched object.
    pub fn authorize(&self, msg: &Message) -> Result<(), Refusal> {
        match route(msg) {
            Route::Queue(kind) => self.decide(kind, msg, &Fetched::default()),
            Route::Ignore(why) => Err(Refusal::Malformed(why.to_owned())),
        }
    }

    /// [`NodeAuthorizer::authorize`] with `fetched` standing in for what the caches lack.
    pub fn authorize_with(&self, msg: &Message, fetched: &Fetched) -> Result<(), Refusal> {
        match route(msg) {
            Route::Queue(kind) => self.decide(kind, msg, fetched),
            Route::Ignore(why) => Err(Refusal::Malformed(why.to_owned())),
        }
    }

    pub(crate) fn decide(&self, kind: Kind, msg: &Message, fetched: &Fetched) -> Decision {
        if kind == Kind::Connection {
            // cloudhub's node event: resource `node/<id>`, the node's name checked like any.
            let node = msg.route.resource.strip_prefix("node/").unwrap_or_default();
            validation::object_name("node name", node)?;
            return from_cloud_module(kind, msg, CLOUDHUB);
        }
        let r = NodeResourceRef::parse(&msg.route.resource)
            .map_err(|e| Refusal::Malformed(e.to_string()))?;
        let node = r.node;
        validation::object_name("node name", node)?;
        if !r.namespace.is_empty() && !r.is_cluster_scoped() {
            validation::namespace(r.namespace)?;
        }
        if !r.name.is_empty() {
            validation::object_name("name", r.name)?;
        } else if needs_name(kind, &msg.route.operation) {
            return Err(Refusal::Malformed(format!(
                "resource {:?} has no name",
                msg.route.resource
            )));
        }
        if kind == Kind::UpdateRuleStatus {
            return from_cloud_module(kind, msg, ROUTER);
        }
        let pods = PodLookup {
            cache: &self.pods,
            extra: &fetched.pods,
        };
        match kind {
            Kind::CreateNode => {
                own_node(&r, "create")?;
                let wanted: Node = parse(msg, "a Node")?;
                check_node_labels(node, wanted.metadata.labels.as_ref(), None)
            }
            Kind::QueryNode => own_node(&r, "get"),
            Kind::UpdateNode => {
                own_node(&r, "update")?;
                let wanted: Node = parse(msg, "a Node")?;
                // An edge echoes its Node back as it received it; the cache may lag the
                // labels an administrator just set, so a refusal is confirmed first.
                self.on_own_node(node, fetched, |n| {
                    let current = n.and_then(|n| n.metadata.labels.as_ref());
                    check_node_labels(node, wanted.metadata.labels.as_ref(), current)
                })
            }
            Kind::PatchNode => {
                own_node(&r, "patch")?;
                let patch: Value = parse(msg, "a Node patch")?;
                self.on_own_node(node, fetched, |now| {
                    restriction::node_patch_metadata(&patch, now)
                        .map_err(|d| Refusal::forbidden("nodes", node, "patch", d.0))
                })
            }
            Kind::UpdateNodeStatus => own_node(&r, "update"),
            // Every pod of a legacy status report, before any is written.
            Kind::UpdatePodStatus => {
                let bytes = msg.content.bytes();
                let reports: Vec<PodStatusView<'_>> = if r.name.is_empty() {
                    parse_view(&bytes, "a list of PodStatusRequest")?
                } else {
                    vec![parse_view(&bytes, "a PodStatusRequest")?]
                };
                reports
                    .iter()
                    .try_for_each(|p| pods.bound(node, r.namespace, &p.name, "update"))
            }
            Kind::PatchPod => {
                let pod = pods.bound_pod(node, r.namespace, r.name, "patch")?;
                let patch: Value = parse(msg, "a pod status patch")?;
                restriction::pod_status_patch(&patch, &pod)
                    .map_err(|d| Refusal::forbidden("pods", r.name, "patch", d.0))
            }
            Kind::DeletePod => pods.bound(node, r.namespace, r.name, "delete"),
            Kind::CreatePod => {
                let pod: Pod = parse(msg, "a Pod")?;
                // The owner reference names the Node's uid; the cache's copy may be of an
                // earlier incarnation, so a refusal is confirmed first.
                self.on_own_node(node, fetched, |n| {
                    let uid = n.and_then(|n| n.metadata.uid.as_deref());
                    check_mirror_pod(node, r.namespace, &pod, uid)
                })
            }
            Kind::CreateLease | Kind::QueryLease => {
                let verb = if kind == Kind::QueryLease {
                    "get"
                } else {
                    "update"
                };
                own_lease(&r, verb)?;
                if kind == Kind::CreateLease {
                    let bytes = msg.content.bytes();
                    let lease: ObjectView<'_> = parse_view(&bytes, "a Lease")?;
                    let meta = &lease.metadata;
                    let named = |v: &Option<Cow<'_, str>>, want: &str| {
                        v.as_deref().is_none_or(|v| v == want)
                    };
                    if !named(&meta.name, node) || !named(&meta.namespace, NODE_LEASE_NAMESPACE) {
                        return Err(Refusal::forbidden(
                            "leases",
                            r.name,
                            verb,
                            "a node may only write its own lease",
                        ));
                    }
                }
                Ok(())
            }
            Kind::ProcessEvent => self.event(&r, msg, &pods),
            Kind::QueryConfigMap => self.uses(node, &r, RefKind::ConfigMap),
            Kind::QuerySecret => self.uses(node, &r, RefKind::Secret),
            Kind::QueryPersistentVolumeClaim => self.uses(node, &r, RefKind::PersistentVolumeClaim),
            // Decided on the fetched object (its claim or its node).
            Kind::QueryPersistentVolume | Kind::QueryVolumeAttachment => Ok(()),
            Kind::ServiceAccountToken => {
                let tr: Value = parse(msg, "a TokenRequest")?;
                if !tr["spec"].is_object() {
                    return Err(Refusal::Malformed(
                        "content is not a TokenRequest with a spec".into(),
                    ));
                }
                let refuse = |d: restriction::Denied| {
                    Refusal::forbidden("serviceaccounts", r.name, "create", d.0)
                };
                let (bound, _) = restriction::token_bound_pod(&tr).map_err(refuse)?;
                let pod = pods.bound_pod(node, r.namespace, bound, "create tokens for")?;
                restriction::token_request(&tr, r.name, &pod).map_err(refuse)
            }
            Kind::CertificateSigningRequest if msg.route.operation == op::INSERT => {
                let csr: Value = parse(msg, "a CertificateSigningRequest")?;
                csr_for_node(node, &csr)
            }
            // Decided on the fetched object.
            Kind::CertificateSigningRequest => Ok(()),
            Kind::Connection | Kind::UpdateRuleStatus => unreachable_rule(kind),
        }
    }

    /// `check` on the node's own Node: the one fetched for this decision, else the cache's
    /// copy, whose refusal is confirmed on the Node as it is now
    /// ([`Refusal::UnconfirmedNode`]) before it stands.
    fn on_own_node(
        &self,
        node: &str,
        fetched: &Fetched,
        check: impl Fn(Option<&Node>) -> Decision,
    ) -> Decision {
        match &fetched.node {
            Some(Some(now)) => check(Some(now)),
            Some(None) => check(self.nodes.get_by(None, node).as_deref()),
            None => check(self.nodes.get_by(None, node).as_deref()).map_err(|e| match e {
                Refusal::Forbidden { .. } => Refusal::UnconfirmedNode {
                    name: node.to_owned(),
                },
                other => other,
            }),
        }
    }

    /// A ConfigMap, Secret or claim: only when a pod bound to the node references it.
    fn uses(&self, node: &str, r: &NodeResourceRef<'_>, kind: RefKind) -> Decision {
        let wanted = ObjectRef::new(kind, r.namespace, r.name);
        if self.locations.read().node_uses(node, &wanted) {
            return Ok(());
        }
        Err(not_used(r, kind))
    }

    /// Whether the persistent volume (as fetched) is bound to a claim a pod of the node uses.
    pub fn persistent_volume(&self, node: &str, pv: &Value) -> Result<(), Refusal> {
        let claim = &pv["spec"]["claimRef"];
        let name = pv["metadata"]["name"].as_str().unwrap_or_default();
        if let (Some(ns), Some(claim)) = (claim["namespace"].as_str(), claim["name"].as_str()) {
            let wanted = ObjectRef::new(RefKind::PersistentVolumeClaim, ns, claim);
            if self.locations.read().node_uses(node, &wanted) {
                return Ok(());
            }
        }
        Err(Refusal::forbidden(
            "persistentvolumes",
            name,
            "get",
            format!("no relationship found between node '{node}' and this object"),
        ))
    }

    /// Whether the volume attachment (as fetched) is for the node.
    pub fn volume_attachment(&self, node: &str, va: &Value) -> Result<(), Refusal> {
        if va["spec"]["nodeName"].as_str() == Some(node) {
            return Ok(());
        }
        let name = va["metadata"]["name"].as_str().unwrap_or_default();
        Err(Refusal::forbidden(
            "volumeattachments",
            name,
            "get",
            format!("no relationship found between node '{node}' and this object"),
        ))
    }

    /// Whether the certificate signing request (as fetched) asks for the node's identity.
    pub fn certificate_request(&self, node: &str, csr: &Value) -> Result<(), Refusal> {
        csr_for_node(node, csr)
    }

    /// Whether `pod` (as fetched) is bound to the node: a pod status report may only write
    /// the node's own pods.
    pub fn pod_status(&self, node: &str, pod: &Pod) -> Result<(), Refusal> {
        if bound_node(pod) == Some(node) {
            return Ok(());
        }
        Err(not_bound(node, pod_name(pod), "update"))
    }

    fn event(&self, r: &NodeResourceRef<'_>, msg: &Message, pods: &PodLookup<'_>) -> Decision {
        let node = r.node;
        let bytes = msg.content.bytes();
        let (event, patch) = if msg.route.operation == op::PATCH {
            let p: EventPatchView<'_> = parse_view(&bytes, "an event patch")?;
            let data: Value = serde_json::from_str(&p.patch_data)
                .map_err(|e| Refusal::Malformed(format!("patchData is not JSON: {e}")))?;
            (p.event, Some(data))
        } else {
            (parse_view::<EventView<'_>>(&bytes, "an event")?, None)
        };
        let name = &*event.metadata.name;
        if !name.is_empty() {
            validation::object_name("event name", name)?;
        }
        let namespace = if event.metadata.namespace.is_empty() {
            r.namespace
        } else {
            &*event.metadata.namespace
        };
        validation::namespace(namespace)?;
        let deny = |why: &str| Err(Refusal::forbidden("events", name, "write", why));
        if let Some(patch) = &patch {
            let touches = |k: &str| patch.get(k).is_some();
            let meta = &patch["metadata"];
            if touches("involvedObject")
                || touches("related")
                || meta.get("name").is_some()
                || meta.get("namespace").is_some()
            {
                return deny("an event patch may not change what the event is about");
            }
        }
        let about = &event.involved_object;
        let own_object = match &*about.kind {
            "Node" => about.name == node,
            "Pod" if about.namespace == namespace => {
                match pods.bound(node, &about.namespace, &about.name, "write events about") {
                    Ok(()) => true,
                    // Not in the cache yet: the caller looks the pod up and decides again.
                    Err(unknown @ Refusal::UnknownPod { .. }) => return Err(unknown),
                    Err(_) => false,
                }
            }
            _ => false,
        };
        if !own_object {
            return deny(&format!(
                "node '{node}' may only write events about itself and its own pods"
            ));
        }
        // Updates and patches address an existing event by name: only names the kubelet's
        // recorder gives its own events (`<object>.<suffix>`), so a node cannot rewrite an
        // event about another object by claiming it is about its own.
        if msg.route.operation != op::INSERT
            && !name
                .strip_prefix(&*about.name)
                .is_some_and(|rest| rest.starts_with('.'))
        {
            return deny("a node may only change events named after its own objects");
        }
        Ok(())
    }
}

/// The refusal of a read of an object no pod of the node references.
pub(crate) fn not_used(r: &NodeResourceRef<'_>, kind: RefKind) -> Refusal {
    Refusal::forbidden(
        plural(kind),
        r.name,
        "get",
        format!(
            "no relationship found between node '{}' and this object in namespace \"{}\"",
            r.node, r.namespace
        ),
    )
}

fn plural(kind: RefKind) -> &'static str {
    match kind {
        RefKind::ConfigMap => "configmaps",
        RefKind::Secret => "secrets",
        RefKind::PersistentVolumeClaim => "persistentvolumeclaims",
    }
}

/// Kinds that address one object by the name in the resource.
fn needs_name(kind: Kind, operation: &str) -> bool {
    match kind {
        Kind::CreatePod | Kind::UpdatePodStatus | Kind::ProcessEvent => false,
        Kind::CertificateSigningRequest => operation != op::INSERT,
        _ => true,
    }
}

/// A kind only the cloud module `module` sends: decided on the message's bus sender (the
/// endpoint the bus delivered it from), never on `route.source`, which whoever wrote the
/// message chose. Everything an edge sends reaches this module from cloudhub's edge relay,
/// so no edge passes, whatever it names as source.
fn from_cloud_module(kind: Kind, msg: &Message, module: &str) -> Decision {
    if msg.is_sent_by(module) {
        return Ok(());
    }
    let sender = msg.sender().map_or("nobody on the bus", |s| s.name());
    Err(Refusal::forbidden(
        "",
        "",
        "send",
        format!(
            "{} is only accepted from the {module} module, not from {sender}",
            kind.name()
        ),
    ))
}

fn unreachable_rule(kind: Kind) -> Decision {
    Err(Refusal::forbidden(
        "",
        "",
        "send",
        format!("no rule allows {} from an edge", kind.name()),
    ))
}

/// Pods from the cache, or pods fetched for this decision.
struct PodLookup<'a> {
    cache: &'a Cache<Pod>,
    extra: &'a [Pod],
}

impl PodLookup<'_> {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        if let Some(p) = self.extra.iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(name)
        }) {
            return Some(Arc::new(p.clone()));
        }
        self.cache.get_by(Some(namespace), name)
    }

    /// The pod `namespace/name` is bound to `node`.
    fn bound(&self, node: &str, namespace: &str, name: &str, verb: &'static str) -> Decision {
        self.bound_pod(node, namespace, name, verb).map(drop)
    }

    /// [`PodLookup::bound`], handing out the pod.
    fn bound_pod(
        &self,
        node: &str,
        namespace: &str,
        name: &str,
        verb: &'static str,
    ) -> Result<Arc<Pod>, Refusal> {
        validation::namespace(namespace)?;
        validation::object_name("pod name", name)?;
        match self.get(namespace, name) {
            Some(p) if bound_node(&p) == Some(node) => Ok(p),
            Some(_) => Err(not_bound(node, name, verb)),
            None => Err(Refusal::UnknownPod {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
        }
    }
}

fn not_bound(node: &str, pod: &str, verb: &'static str) -> Refusal {
    Refusal::forbidden(
        "pods",
        pod,
        verb,
        format!("the pod is not bound to node '{node}'"),
    )
}

fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// `bytes` (a request's content) as a view borrowing from them.
fn parse_view<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, Refusal> {
    serde_json::from_slice(bytes)
        .map_err(|e| Refusal::Malformed(format!("content is not {what}: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(msg: &Message, what: &str) -> Result<T, Refusal> {
    msg.content
        .parse_bytes()
        .map_err(|e| Refusal::Malformed(format!("content is not {what}: {e}")))
}

fn own_node(r: &NodeResourceRef<'_>, verb: &'static str) -> Decision {
    if r.name == r.node {
        return Ok(());
    }
    Err(Refusal::forbidden(
        "nodes",
        r.name,
        verb,
        format!("node '{}' may only {verb} its own Node object", r.node),
    ))
}

fn own_lease(r: &NodeResourceRef<'_>, verb: &'static str) -> Decision {
    if r.namespace == NODE_LEASE_NAMESPACE && r.name == r.node {
        return Ok(());
    }
    Err(Refusal::forbidden(
        "leases",
        r.name,
        verb,
        format!(
            "node '{}' may only use its own lease {NODE_LEASE_NAMESPACE}/{}",
            r.node, r.node
        ),
    ))
}

/// Labels added or changed relative to `current` must be ones a node may set.
fn check_node_labels(
    node: &str,
    wanted: Option<&BTreeMap<String, String>>,
    current: Option<&BTreeMap<String, String>>,
) -> Decision {
    let changed = wanted
        .into_iter()
        .flatten()
        .filter(|(k, v)| current.and_then(|c| c.get(*k)) != Some(*v))
        .map(|(k, _)| k.as_str());
    let forbidden: Vec<&str> = changed
        .filter(|k| !restriction::node_may_set_label(k))
        .collect();
    if forbidden.is_empty() {
        return Ok(());
    }
    Err(Refusal::forbidden(
        "nodes",
        node,
        "update",
        format!("a node may not set these labels: {}", forbidden.join(", ")),
    ))
}

/// NodeRestriction's rules for pods a node creates: mirror pods bound to itself, owned by
/// exactly its Node (`node_uid`: the Node's uid; `None` when it is not registered), that reach
/// no other API object.
pub(crate) fn check_mirror_pod(
    node: &str,
    namespace: &str,
    pod: &Pod,
    node_uid: Option<&str>,
) -> Decision {
    let name = pod_name(pod);
    if !name.is_empty() {
        validation::object_name("pod name", name)?;
    }
    let deny = |why: String| Err(Refusal::forbidden("pods", name, "create", why));
    if pod
        .metadata
        .namespace
        .as_deref()
        .is_some_and(|ns| !ns.is_empty() && ns != namespace)
    {
        return deny("the pod's namespace differs from the request's".into());
    }
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
    if !annotated {
        return deny(format!(
            "pod does not have \"{MIRROR_POD_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
        ));
    }
    if bound_node(pod) != Some(node) {
        return deny(format!(
            "node \"{node}\" can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    let owner_ok = |o: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
        o.api_version == "v1"
            && o.kind == "Node"
            && o.name == node
            && o.controller == Some(true)
            && o.block_owner_deletion != Some(true)
            && node_uid.is_some_and(|uid| o.uid == uid)
    };
    if owners.len() != 1 || owners.iter().any(|o| !owner_ok(o)) {
        return deny(format!(
            "node \"{node}\" can only create pods with a single controller owner reference set to itself (its Node's uid)"
        ));
    }
    let spec = pod.spec.as_ref();
    let service_account = spec
        .and_then(|s| {
            s.service_account_name
                .as_deref()
                .or(s.service_account.as_deref())
        })
        .unwrap_or_default();
    if !service_account.is_empty() {
        return deny(format!(
            "node \"{node}\" can not create pods that reference a service account"
        ));
    }
    if let Some(r) = references(pod).into_iter().next() {
        let what = plural(r.kind);
        return deny(format!(
            "node \"{node}\" can not create pods that reference {what}"
        ));
    }
    let projected_token = spec
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .any(|s| s.service_account_token.is_some() || s.cluster_trust_bundle.is_some());
    let claims = spec
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty());
    if projected_token || claims {
        return deny(format!(
            "node \"{node}\" can not create pods that reference other API objects"
        ));
    }
    Ok(())
}

/// The pod a legacy status report is about (`edgeapi.PodStatusRequest`, keys without JSON
/// tags).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PodStatusView<'a> {
    #[serde(rename = "Name", alias = "name", borrow)]
    name: Cow<'a, str>,
}

/// The name and namespace of an object, all the lease rule reads of its body.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ObjectView<'a> {
    #[serde(borrow)]
    metadata: MetaView<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MetaView<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    namespace: Option<Cow<'a, str>>,
}

/// The parts of an event the rule reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct EventView<'a> {
    #[serde(borrow)]
    metadata: EventMetaView<'a>,
    #[serde(borrow)]
    involved_object: InvolvedView<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EventMetaView<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    namespace: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InvolvedView<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    namespace: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EventPatchView<'a> {
    #[serde(borrow)]
    event: EventView<'a>,
    #[serde(rename = "patchData", borrow)]
    patch_data: Cow<'a, str>,
}

/// A CSR (as JSON) whose PEM request names the node: subject `CN=system:node:<node>`.
pub(crate) fn csr_for_node(node: &str, csr: &Value) -> Decision {
    if csr["spec"]["request"].as_str().is_none() {
        return Err(Refusal::Malformed(
            "content is not a CertificateSigningRequest with spec.request".into(),
        ));
    }
    let name = csr["metadata"]["name"].as_str().unwrap_or_default();
    restriction::csr_for_node(node, csr)
        .map_err(|d| Refusal::forbidden("certificatesigningrequests", name, "create", d.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}")},
            "spec": {"nodeName": node, "serviceAccountName": "runner",
                "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
                "containers": [{"name": "c",
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}]}]}
        }))
        .unwrap()
    }

    fn authz() -> NodeAuthorizer {
        NodeAuthorizer::with_objects([pod("ns", "mine", "e1"), pod("ns", "theirs", "e2")], vec![])
    }

    fn msg(resource: &str, operation: &str, content: Value) -> Message {
        Message::new()
            .with_route("edged", "meta", resource, operation)
            .with_content(beehive::Content::json(&content).unwrap())
    }

    fn forbidden(d: Decision) -> bool {
        matches!(d, Err(Refusal::Forbidden { .. }))
    }

    #[test]
    fn a_status_patch_may_not_write_the_cloudcore_annotation() {
        let a = authz();
        let patch = |body: serde_json::Value| msg("node/e1/null/nodepatch/e1", "patch", body);
        assert_eq!(
            a.authorize(&patch(json!({"status": {"phase": "Running"}}))),
            Ok(())
        );
        assert_eq!(
            a.authorize(&patch(json!({"metadata": {"annotations": {"team": "a"}}}))),
            Ok(())
        );
        // The cache does not hold the node: a refusal waits for the Node as it is now.
        let read = Fetched {
            node: Some(None),
            ..Fetched::default()
        };
        for refused in [
            json!({"metadata": {"annotations": {"cloudcore": "10.9.9.9"}}}),
            json!({"metadata": {"annotations": {"$patch": "replace", "team": "a"}}}),
            json!({"metadata": {"$patch": "replace"}}),
            json!({"metadata": {"annotations": "cloudcore"}}),
            json!({"metadata": {"labels": {"node-restriction.kubernetes.io/secure": "true"}}}),
            json!({"metadata": {"finalizers": ["x/y"]}}),
        ] {
            assert!(
                matches!(
                    a.authorize(&patch(refused.clone())),
                    Err(Refusal::UnconfirmedNode { .. })
                ),
                "{refused}"
            );
            assert!(
                forbidden(a.authorize_with(&patch(refused.clone()), &read)),
                "{refused}"
            );
        }
    }

    #[test]
    fn pod_writes_only_for_own_pods() {
        let a = authz();
        let patch = |name: &str| msg(&format!("node/e1/ns/podpatch/{name}"), "patch", json!({}));
        assert_eq!(a.authorize(&patch("mine")), Ok(()));
        assert!(forbidden(a.authorize(&patch("theirs"))));
        assert!(matches!(
            a.authorize(&patch("unknown")),
            Err(Refusal::UnknownPod { .. })
        ));
        let del = msg("node/e1/ns/pod/theirs", "delete", json!({}));
        assert!(forbidden(a.authorize(&del)));
    }

    #[test]
    fn names_that_could_change_a_url_are_refused() {
        let a = authz();
        for bad in ["mine/status", "mine?dryRun=All", "a%2Fb", "Mine"] {
            let m = msg(&format!("node/e1/ns/podpatch/{bad}"), "patch", json!({}));
            assert!(
                matches!(a.authorize(&m), Err(Refusal::InvalidName(_))),
                "{bad}"
            );
        }
        let m = msg("node/e1/n%2Fs/secret/s1", "query", json!({}));
        assert!(matches!(a.authorize(&m), Err(Refusal::InvalidName(_))));
    }

    #[test]
    fn reads_follow_the_pods_of_the_node() {
        let a = authz();
        assert_eq!(
            a.authorize(&msg("node/e1/ns/secret/s1", "query", json!(null))),
            Ok(())
        );
        assert!(forbidden(a.authorize(&msg(
            "node/e3/ns/secret/s1",
            "query",
            json!(null)
        ))));
        assert!(forbidden(a.authorize(&msg(
            "node/e1/kubeedge/secret/casecret",
            "query",
            json!(null)
        ))));
    }

    #[test]
    fn mirror_pods_grant_no_reads() {
        let mut mirror = pod("ns", "static-web", "e1");
        mirror.metadata.annotations = Some(
            [(MIRROR_POD_ANNOTATION.to_owned(), "x".to_owned())]
                .into_iter()
                .collect(),
        );
        if let Some(spec) = mirror.spec.as_mut() {
            spec.image_pull_secrets =
                Some(vec![serde_json::from_value(json!({"name": "s9"})).unwrap()]);
        }
        let a = NodeAuthorizer::with_objects([mirror], vec![]);
        assert!(forbidden(a.authorize(&msg(
            "node/e1/ns/secret/s9",
            "query",
            json!(null)
        ))));
    }

    #[test]
    fn a_legacy_status_list_is_refused_whole_if_one_pod_is_not_its_own() {
        let a = authz();
        let list = |names: &[&str]| {
            let items: Vec<Value> = names
                .iter()
                .map(|n| json!({"UID": format!("uid-{n}"), "Name": n, "Status": {"phase": "Running"}}))
                .collect();
            msg("node/e1/ns/podstatus", "update", json!(items))
        };
        assert_eq!(a.authorize(&list(&["mine"])), Ok(()));
        assert!(forbidden(a.authorize(&list(&["mine", "theirs"]))));
        let one = msg(
            "node/e1/ns/podstatus/mine",
            "update",
            json!({"Name": "theirs", "Status": {}}),
        );
        assert!(forbidden(a.authorize(&one)));
    }

    #[test]
    fn a_label_change_is_confirmed_against_the_node_as_it_is_now() {
        let admin_labelled: Node = serde_json::from_value(json!({"metadata": {"name": "e1",
            "labels": {"node-restriction.kubernetes.io/trusted": "yes"}}}))
        .unwrap();
        let a = authz();
        let echo = msg(
            "node/e1/null/node/e1",
            "update",
            json!({"metadata": {"name": "e1", "labels": {"node-restriction.kubernetes.io/trusted": "yes"}}}),
        );
        assert!(matches!(
            a.authorize(&echo),
            Err(Refusal::UnconfirmedNode { .. })
        ));
        let now = Fetched {
            node: Some(Some(admin_labelled)),
            ..Fetched::default()
        };
        assert_eq!(a.authorize_with(&echo, &now), Ok(()));
        let unreadable = Fetched {
            node: Some(None),
            ..Fetched::default()
        };
        assert!(forbidden(a.authorize_with(&echo, &unreadable)));
    }

    #[test]
    fn leases_and_nodes_only_its_own() {
        let a = authz();
        let lease = |ns: &str, name: &str| {
            msg(
                &format!("node/e1/{ns}/lease/{name}"),
                "update",
                json!({"metadata": {"name": name, "namespace": ns}}),
            )
        };
        assert_eq!(a.authorize(&lease("kube-node-lease", "e1")), Ok(()));
        assert!(forbidden(a.authorize(&lease("kube-node-lease", "e2"))));
        assert!(forbidden(a.authorize(&lease("kubeedge", "cloudcore"))));
        let sneaky = msg(
            "node/e1/kube-node-lease/lease/e1",
            "update",
            json!({"metadata": {"name": "e2", "namespace": "kube-node-lease"}}),
        );
        assert!(forbidden(a.authorize(&sneaky)));
        assert!(forbidden(a.authorize(&msg(
            "node/e1/null/nodepatch/e2",
            "patch",
            json!({})
        ))));
        assert_eq!(
            a.authorize(&msg("node/e1/null/nodepatch/e1", "patch", json!({}))),
            Ok(())
        );
    }

    #[test]
    fn node_labels_follow_node_restriction() {
        let a = authz();
        let create = |labels: Value| {
            msg(
                "node/e1/null/node/e1",
                "insert",
                json!({"metadata": {"name": "e1", "labels": labels}}),
            )
        };
        assert_eq!(
            a.authorize(&create(json!({"node-role.kubernetes.io/edge": ""}))),
            Ok(())
        );
        assert!(forbidden(a.authorize(&create(
            json!({"node-restriction.kubernetes.io/x": "y"})
        ))));
    }

    #[test]
    fn only_mirror_pods_bound_to_itself_that_reach_nothing() {
        let e1: Node =
            serde_json::from_value(json!({"metadata": {"name": "e1", "uid": "uid-e1"}})).unwrap();
        let a = NodeAuthorizer::with_objects([], vec![e1]);
        let create = |pod: Value| msg("node/e1/ns/pod/", "insert", pod);
        let mirror = json!({"metadata": {"name": "m", "namespace": "ns",
            "annotations": {"kubernetes.io/config.mirror": "x"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "e1",
                "uid": "uid-e1", "controller": true}]},
            "spec": {"nodeName": "e1", "containers": [{"name": "c"}]}});
        assert_eq!(a.authorize(&create(mirror.clone())), Ok(()));
        let forbidden = |d: Decision| matches!(d, Err(Refusal::UnconfirmedNode { .. }));
        for owners in [
            json!([]),
            json!([{"apiVersion": "v1", "kind": "Node", "name": "e1",
            "uid": "uid-old", "controller": true}]),
        ] {
            let mut unowned = mirror.clone();
            unowned["metadata"]["ownerReferences"] = owners;
            assert!(forbidden(a.authorize(&create(unowned))));
        }
        let mut other = mirror.clone();
        other["spec"]["nodeName"] = json!("e2");
        assert!(forbidden(a.authorize(&create(other))));
        let mut plain = mirror.clone();
        plain["metadata"]["annotations"] = json!({});
        assert!(forbidden(a.authorize(&create(plain))));
        let mut secret = mirror.clone();
        secret["spec"]["volumes"] = json!([{"name": "v", "secret": {"secretName": "casecret"}}]);
        assert!(forbidden(a.authorize(&create(secret))));
        let mut sa = mirror;
        sa["spec"]["serviceAccountName"] = json!("admin");
        assert!(forbidden(a.authorize(&create(sa))));
    }

    #[test]
    fn tokens_only_bound_to_own_pods_and_their_account() {
        let a = authz();
        let token = |sa: &str, pod: &str, uid: &str| {
            msg(
                &format!("node/e1/ns/serviceaccounttoken/{sa}"),
                "query",
                json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": uid}}}),
            )
        };
        assert_eq!(a.authorize(&token("runner", "mine", "uid-mine")), Ok(()));
        assert!(forbidden(a.authorize(&token("admin", "mine", "uid-mine"))));
        assert!(forbidden(a.authorize(&token(
            "runner",
            "theirs",
            "uid-theirs"
        ))));
        assert!(forbidden(a.authorize(&token("runner", "mine", "other"))));
        let mut with_audience = token("runner", "mine", "uid-mine");
        with_audience.content = beehive::Content::json(&json!({"spec": {"audiences": ["api"],
            "boundObjectRef": {"kind": "Pod", "name": "mine", "uid": "uid-mine"}}}))
        .unwrap();
        assert!(forbidden(a.authorize(&with_audience)));
        // As edged sends it for the default token volume: Go marshals the unset list as null.
        let from_edged = msg(
            "node/e1/ns/serviceaccounttoken/runner",
            "query",
            json!({"metadata": {"creationTimestamp": null}, "spec": {"audiences": null,
                "expirationSeconds": 3607, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                "name": "mine", "uid": "uid-mine"}}, "status": {"token": "",
                "expirationTimestamp": null}}),
        );
        assert_eq!(a.authorize(&from_edged), Ok(()));
        let unbound = msg(
            "node/e1/ns/serviceaccounttoken/runner",
            "query",
            json!({"spec": {}}),
        );
        assert!(forbidden(a.authorize(&unbound)));
    }

    #[test]
    fn events_only_about_itself_and_its_pods() {
        let a = authz();
        let event = |ns: &str, kind: &str, name: &str, op: &str| {
            msg(
                &format!("node/e1/{ns}/event/x"),
                op,
                json!({"metadata": {"name": format!("{name}.1"), "namespace": ns},
                    "involvedObject": {"kind": kind, "namespace": if kind == "Pod" { ns } else { "" }, "name": name}}),
            )
        };
        assert_eq!(
            a.authorize(&event("default", "Node", "e1", "insert")),
            Ok(())
        );
        assert_eq!(a.authorize(&event("ns", "Pod", "mine", "update")), Ok(()));
        assert!(forbidden(
            a.authorize(&event("default", "Node", "e2", "insert"))
        ));
        assert!(forbidden(
            a.authorize(&event("ns", "Pod", "theirs", "insert"))
        ));
        assert!(forbidden(
            a.authorize(&event("kubeedge", "Secret", "casecret", "insert"))
        ));
    }

    /// `msg` as the bus delivers it from the endpoint named `sender`.
    async fn delivered(sender: &str, msg: Message) -> Message {
        let bus = beehive::Bus::new();
        let mut inbox = bus
            .register_inbox("edgecontroller", "edgecontroller", 0)
            .unwrap();
        bus.endpoint(sender)
            .send("edgecontroller", msg)
            .await
            .unwrap();
        inbox.recv().await.unwrap()
    }

    #[actix_rt::test]
    async fn cloud_only_kinds_are_decided_on_the_bus_sender_not_the_claimed_source() {
        let a = authz();
        let connected =
            |source: &str| Message::new().with_route(source, "resource", "node/e1", "connected");
        let status = |source: &str, resource: &str| {
            msg(resource, "update", json!({})).with_route(source, "resource", resource, "update")
        };
        for source in ["edged", "cloudhub", "router", ""] {
            // From an edge (cloudhub's relay), built in place, or from another module.
            for sender in [Some("cloudhub/edge"), None, Some("devicecontroller")] {
                let deliver = |m: Message| async move {
                    match sender {
                        Some(sender) => delivered(sender, m).await,
                        None => m,
                    }
                };
                let m = deliver(connected(source)).await;
                assert!(forbidden(a.authorize(&m)), "{source} {sender:?}");
                let m = deliver(status(source, "node/nodeid/ns/rulestatus/r")).await;
                assert!(forbidden(a.authorize(&m)), "{source} {sender:?}");
            }
        }
        let m = delivered("cloudhub", connected("edged")).await;
        assert_eq!(a.authorize(&m), Ok(()));
        let m = delivered("router", status("", "node/nodeid/ns/rulestatus/r")).await;
        assert_eq!(a.authorize(&m), Ok(()));
        // Names are checked before the sender: not even the router writes a path the API
        // server would take apart.
        for resource in [
            "node/nodeid/ns/rulestatus/r%2F..",
            "node/nodeid/NS/rulestatus/r",
            "node/nodeid/ns/rulestatus/",
            "node/node%3Fx/ns/rulestatus/r",
        ] {
            let m = delivered("router", status("router", resource)).await;
            assert!(
                matches!(
                    a.authorize(&m),
                    Err(Refusal::InvalidName(_) | Refusal::Malformed(_))
                ),
                "{resource}: {:?}",
                a.authorize(&m)
            );
        }
        let m = delivered(
            "cloudhub",
            connected("cloudhub").with_route("cloudhub", "resource", "node/e1?x=1", "connected"),
        )
        .await;
        assert!(matches!(a.authorize(&m), Err(Refusal::InvalidName(_))));
    }

    #[test]
    fn certificate_requests_only_for_its_own_name() {
        let csr = |cn: &str| {
            let pem = pki_csr_pem(cn);
            use base64::Engine as _;
            json!({"metadata": {"name": "csr-1"}, "spec": {"request":
                base64::engine::general_purpose::STANDARD.encode(pem)}})
        };
        assert_eq!(csr_for_node("e1", &csr("system:node:e1")), Ok(()));
        assert!(forbidden(csr_for_node("e1", &csr("system:node:e2"))));
        assert!(forbidden(csr_for_node("e1", &csr("admin"))));
        assert!(forbidden(csr_for_node(
            "e1",
            &json!({"spec": {"request": "AAAA"}})
        )));
        assert!(matches!(
            csr_for_node("e1", &json!({"spec": 1})),
            Err(Refusal::Malformed(_))
        ));
    }

    fn pki_csr_pem(cn: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serialize_request(&key).unwrap().pem().unwrap()
    }
}
