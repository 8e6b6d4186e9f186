//! Edge watches: registering listeners, the edge's watch sync, reconnects, and fanning every
//! change of a watched type out to the nodes whose listeners select it.
//!
//! Watch events are ordinary `insert`/`update`/`delete` resource messages that cloudhub
//! delivers reliably (acknowledged and retried while the session lives) but records in no
//! ObjectSync: what a node's watches delivered is recorded here instead (`delivered`, bounded
//! per node), so an object version the node holds is not sent again after a reconnect or a
//! re-registration, and an object deleted (or changed out of the selection) while the node or
//! cloudcore was away is deleted at the edge once it is back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use beehive::constants::operation as op;
use beehive::{Content, Message};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DynamicObject, ListParams, TypeMeta};
use kubeedge_api::application::{Application, ListOptions, verb};
use kubeedge_api::authz::authorize;
use kubeedge_api::names::{DYNAMICCONTROLLER, GROUP_RESOURCE, NULL_NAMESPACE};
use kubeedge_api::status::StatusError;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::delivered::Recorded;
use crate::discovery::ResourceInfo;
use crate::filter;
use crate::informer::AcquireError;
use crate::informer::{Change, Informer, TypeChange, type_key};
use crate::key::ResourceKey;
use crate::listeners::Listener;
use crate::policy::MetaPolicy;
use crate::requests::{list_query, with_query};
use crate::selector::{FieldSelector, LabelSelector};
use crate::shared::{Shared, TopologyLookup};

/// The watch message of `obj` for `node`: no parent (the edge stores it rather than taking
/// it for a reply), header resource version = the object's, content the whole object with
/// `apiVersion` and `kind`, filtered for the node.
fn event_message(
    node: &str,
    info: &ResourceInfo,
    operation: &str,
    obj: &DynamicObject,
    lookup: Option<&TopologyLookup>,
) -> Option<Message> {
    let ns = obj.metadata.namespace.as_deref().unwrap_or(NULL_NAMESPACE);
    let name = obj.metadata.name.as_deref()?;
    let resource = format!("node/{node}/{ns}/{}/{name}", info.type_name());
    let content = if filter::filters_kind(&info.resource.kind) {
        let mut v = serde_json::to_value(obj).ok()?;
        match lookup {
            Some(l) => filter::filter(&mut v, &info.resource.kind, node, l),
            None => filter::filter(&mut v, &info.resource.kind, node, &filter::NoLookup),
        }
        Content::json(&v).ok()?
    } else {
        Content::json(obj).ok()?
    };
    Some(
        Message::new()
            .with_route(DYNAMICCONTROLLER, GROUP_RESOURCE, resource, operation)
            .with_content(content)
            .with_resource_version(obj.metadata.resource_version.clone().unwrap_or_default()),
    )
}

async fn lookup_for(shared: &Shared, info: &ResourceInfo) -> Option<TopologyLookup> {
    if filter::filters_kind(&info.resource.kind) {
        shared.topology().await
    } else {
        None
    }
}

/// Sends `operation` of `obj` to `node` and records it as delivered; false when cloudhub did
/// not take it (or it cannot be sent: an object without a name).
async fn deliver(
    shared: &Shared,
    node: &str,
    info: &ResourceInfo,
    operation: &str,
    obj: &DynamicObject,
    lookup: Option<&TopologyLookup>,
) -> bool {
    let Some(msg) = event_message(node, info, operation, obj, lookup) else {
        warn!(r#type = %type_key(info), "an object without a name cannot be sent");
        return false;
    };
    let sent = shared.send(msg).await;
    shared.metrics.event(sent);
    if sent {
        let delete = operation == op::DELETE;
        match shared
            .delivered
            .sent(node, &type_key(info), &obj.metadata, delete)
        {
            Recorded::Changed => {
                if let Some(p) = &shared.persist {
                    p.mark(node);
                }
            }
            Recorded::Untracked => shared.metrics.untracked(),
            Recorded::Updated | Recorded::Nothing => {}
        }
    }
    sent
}

/// Sends every cached object `l` selects to its node as `insert`, but those the node holds
/// at their version already.
async fn send_all(shared: &Shared, l: &Listener, informer: &Informer) {
    let lookup = lookup_for(shared, &l.info).await;
    for obj in informer.list() {
        if !l.matches(&obj) {
            continue;
        }
        let m = &obj.metadata;
        if let (Some(uid), Some(rv)) = (&m.uid, &m.resource_version)
            && shared.delivered.holds(&l.node, uid, rv)
        {
            continue;
        }
        if !deliver(shared, &l.node, &l.info, op::INSERT, &obj, lookup.as_ref()).await
            && obj.metadata.name.is_some()
        {
            return;
        }
    }
}

/// The API server's current resource version of `info`'s type: a delete sent for an object
/// gone while the edge was away carries it, so the edge's open watches report the delete
/// (they show only changes newer than what they hold).
async fn current_rv(shared: &Shared, info: &ResourceInfo) -> Option<String> {
    Api::<DynamicObject>::all_with(shared.client.clone(), &info.resource)
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(|e| debug!(r#type = %type_key(info), error = %e, "cannot read the current resource version"))
        .ok()?
        .metadata
        .resource_version
        .filter(|rv| !rv.is_empty())
}

/// Sends `node` a delete for every object its watches delivered that none of its listeners
/// selects now: deleted, or changed out of the selection, while the node or cloudcore was
/// away (and deletes sent then that were never confirmed). An object whose name now holds
/// another object (deleted and created again) is not deleted: the new one replaces it.
async fn send_missed_deletes(shared: &Shared, node: &str) {
    let listeners = shared.registry.of_node(node);
    let mut types: HashMap<String, Arc<ResourceInfo>> = HashMap::new();
    for l in &listeners {
        types
            .entry(type_key(&l.info))
            .or_insert_with(|| l.info.clone());
    }
    for (key, info) in types {
        let Some(informer) = shared.informers.get(&key) else {
            continue;
        };
        if !informer.is_ready() {
            continue;
        }
        let mut selected = HashSet::new();
        let mut names = HashSet::new();
        for obj in informer.list() {
            if listeners.iter().any(|l| l.info == info && l.matches(&obj)) {
                let m = &obj.metadata;
                if let Some(uid) = &m.uid {
                    selected.insert(uid.clone());
                }
                names.insert((
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap_or_default(),
                ));
            }
        }
        let missed = shared.delivered.missed(node, &key, &selected);
        if missed.is_empty() {
            continue;
        }
        let rv = current_rv(shared, &info).await;
        let mut sent = 0;
        for m in missed {
            if names.contains(&(m.namespace.clone(), m.name.clone())) {
                shared.delivered.remove(node, &m.uid);
                continue;
            }
            let obj = DynamicObject {
                types: Some(TypeMeta {
                    api_version: info.resource.api_version.clone(),
                    kind: info.resource.kind.clone(),
                }),
                metadata: ObjectMeta {
                    name: Some(m.name),
                    namespace: (!m.namespace.is_empty()).then_some(m.namespace),
                    uid: Some(m.uid),
                    resource_version: rv.clone(),
                    ..ObjectMeta::default()
                },
                data: serde_json::Value::Object(Default::default()),
            };
            if deliver(shared, node, &info, op::DELETE, &obj, None).await {
                shared.metrics.missed_delete();
                sent += 1;
            }
        }
        if sent > 0 {
            info!(node, r#type = %key, deletes = sent, "edge sent the deletes it missed while away");
        }
    }
}

/// The request as it is kept: what the edge asked (id, key, verb, options), no bodies, not
/// what was answered.
fn recorded(app: &Application, node: &str) -> Application {
    Application {
        node_name: node.to_owned(),
        req_body: None,
        resp_body: None,
        status: String::new(),
        reason: String::new(),
        error: None,
        ..app.clone()
    }
}

/// The longest watch id kept (edgecore's are hex digests of 64 characters).
pub(crate) const ID_MAX: usize = 128;

/// Refuses a watch whose id, body or size would make cloudcore keep more than a watch needs.
fn check_size(shared: &Shared, app: &Application) -> Result<(), StatusError> {
    if app.id.len() > ID_MAX {
        return Err(StatusError::bad_request(format!(
            "a watch id may be at most {ID_MAX} bytes"
        )));
    }
    if app.req_body.as_ref().is_some_and(|b| !b.is_empty()) {
        return Err(StatusError::bad_request("a watch carries no body"));
    }
    let size = app.id.len() + app.key.len() + app.option.as_ref().map_or(0, Vec::len);
    if size > shared.config.max_watch_bytes {
        return Err(StatusError::bad_request(format!(
            "a watch may be at most {} bytes of id, key and options (maxWatchBytes)",
            shared.config.max_watch_bytes
        )));
    }
    Ok(())
}

/// Registers the watch `app` of `node` and sends the objects it selects. An identical watch
/// (same id) already registered is kept as it is.
///
/// The watch is decided as the API request the edge's watch stands for
/// (`GET <collection>?watch=true&labelSelector=…&fieldSelector=…`, the key's name as a
/// `metadata.name` requirement), and the listener selects with the namespace and selectors
/// read from that decided request: it can never select more than was allowed.
pub(crate) async fn register(
    shared: &Shared,
    node: &str,
    app: &Application,
) -> Result<(), StatusError> {
    check_size(shared, app)?;
    let key = ResourceKey::parse(&app.key)?;
    let options: ListOptions = app
        .options()
        .map_err(|e| StatusError::bad_request(format!("failed to parse Option bytes: {e}")))?;
    // Refused early when they do not parse: before any review.
    LabelSelector::parse(&options.label_selector)?;
    FieldSelector::parse(&options.field_selector)?;
    let info = shared.resolver.resolve(&key).await?;
    if !info.serves(verb::WATCH) {
        return Err(StatusError::new(
            405,
            "MethodNotAllowed",
            format!("{} cannot be watched", key.resource),
        ));
    }
    if !shared.config.allows(&key.group, &key.resource) {
        return Err(StatusError::forbidden(format!(
            "{} may not be watched through cloudcore (modules.dynamicController.allowedResources)",
            key.resource
        )));
    }
    if let Some(l) = shared.registry.get(node, &app.id) {
        // The same watch again (edgecore repeats its watches): decided again, not taken as
        // allowed because it once was.
        return decide_again(shared, &l).await;
    }
    // Limits first: a node at its limits costs the API server no review.
    shared
        .registry
        .room(
            node,
            &app.id,
            Listener::cost(&recorded(app, node)),
            &shared.listener_limits(),
        )
        .map_err(StatusError::too_many_requests)?;
    let mut query = list_query(&options, key.name.as_deref());
    query.push(("watch", "true".into()));
    let uri = with_query(key.collection_path(info.namespaced), &query);
    let watch = http::Request::get(&uri).body(Vec::new());
    let decided = authorize(&MetaPolicy(shared), node, watch.map_err(Into::into)).await?;
    let i = decided.info();
    let namespace = (!i.namespace.is_empty()).then(|| i.namespace.clone());
    let labels = LabelSelector::parse(&i.label_selector)?;
    let fields = FieldSelector::parse(&i.field_selector)?;
    let informer = shared.informers.acquire(&info).map_err(|e| match e {
        AcquireError::Full(_) => StatusError::too_many_requests(e.to_string()),
    })?;
    if let Err(e) = informer.wait_ready(shared.config.sync_timeout()).await {
        shared.informers.release(&info);
        return Err(e);
    }
    let app = recorded(app, node);
    let listener = Arc::new(Listener {
        id: app.id.clone(),
        node: node.to_owned(),
        info: info.clone(),
        namespace,
        labels,
        fields,
        bytes: Listener::cost(&app),
        app,
        uri,
    });
    match shared
        .registry
        .try_add(listener.clone(), &shared.listener_limits())
    {
        Ok(Some(old)) => shared.informers.release(&old.info),
        Ok(None) => {}
        Err(full) => {
            shared.informers.release(&info);
            return Err(StatusError::too_many_requests(full));
        }
    }
    if let Some(p) = &shared.persist {
        p.mark(node);
    }
    debug!(node, id = %listener.id, r#type = %type_key(&info), "edge watch registered");
    send_all(shared, &listener, &informer).await;
    Ok(())
}

/// Removes listener `id` of `node`.
pub(crate) fn unregister(shared: &Shared, node: &str, id: &str) {
    if let Some(gone) = shared.registry.remove(node, id) {
        shared.informers.release(&gone.info);
        if let Some(p) = &shared.persist {
            p.mark(node);
        }
        debug!(node, id, "edge watch removed");
    }
}

/// The edge's list of its open watches: listeners it no longer lists are removed, watches
/// not registered are registered. Returns the watches that failed, `Rejected`.
pub(crate) async fn sync(
    shared: &Shared,
    node: &str,
    apps: BTreeMap<String, Application>,
) -> BTreeMap<String, Application> {
    let mut failed = BTreeMap::new();
    for l in shared.registry.of_node(node) {
        if !apps.contains_key(&l.id) {
            unregister(shared, node, &l.id);
        }
    }
    for (id, mut app) in apps {
        if !app.node_name.is_empty() && app.node_name != node {
            // An edge may only watch for itself.
            let e = StatusError::forbidden(format!(
                "node {node} cannot register a watch for node {:?}",
                app.node_name.chars().take(253).collect::<String>()
            ));
            shared.metrics.denied(verb::WATCH);
            failed.insert(id, app.rejected(e));
            continue;
        }
        if app.verb != verb::WATCH {
            let e = StatusError::bad_request(format!(
                "a watch sync lists watches only, not {:?}",
                app.verb.chars().take(32).collect::<String>()
            ));
            failed.insert(id, app.rejected(e));
            continue;
        }
        if app.id != id {
            app.id = id.clone();
        }
        if let Err(e) = register(shared, node, &app).await {
            if e.code() == 403 {
                shared.metrics.denied(verb::WATCH);
            }
            failed.insert(id, app.rejected(e));
        }
    }
    failed
}

/// `node` (re)connected: it is sent the deletes it missed and its listeners' objects it does
/// not hold at their version, or, when this process holds no listener of it, the recorded
/// ones are restored (with the record of what they delivered) and then the same is sent.
pub(crate) async fn connected(shared: &Shared, node: &str) {
    let listeners = shared.registry.of_node(node);
    if listeners.is_empty() {
        let Some(p) = &shared.persist else { return };
        let record = p.load(node).await;
        if record.apps.is_empty() {
            return;
        }
        // Before the listeners register: what the edge holds is not sent again.
        shared.delivered.load(node, record.delivered);
        let mut restored = 0;
        for app in record.apps {
            match register(shared, node, &app).await {
                Ok(()) => restored += 1,
                Err(e) => debug!(node, id = %app.id, error = %e, "recorded watch not restored"),
            }
        }
        info!(node, restored, "edge watches restored from their record");
        send_missed_deletes(shared, node).await;
        return;
    }
    let mut allowed = Vec::new();
    for l in listeners {
        // Decided again before anything is sent: the cluster may have stopped allowing it
        // while the edge was away.
        if decide_again(shared, &l).await.is_err() {
            shared.metrics.denied(verb::WATCH);
            continue;
        }
        allowed.push(l);
    }
    send_missed_deletes(shared, node).await;
    for l in allowed {
        if let Some(informer) = shared.informers.get(&type_key(&l.info)) {
            send_all(shared, &l, &informer).await;
        }
    }
}

/// Drops every listener of `node` and its record (the Node is gone).
pub(crate) async fn forget_node(shared: &Shared, node: &str) {
    let listeners = shared.registry.of_node(node);
    for l in &listeners {
        if let Some(gone) = shared.registry.remove(node, &l.id) {
            shared.informers.release(&gone.info);
        }
    }
    shared.delivered.forget(node);
    if let Some(p) = &shared.persist {
        p.delete(node).await;
    }
    if !listeners.is_empty() {
        info!(
            node,
            listeners = listeners.len(),
            "node deleted: its edge watches are dropped"
        );
    }
}

/// Decides every listener again ([`MetaPolicy`] on the watch request it was registered as)
/// every `listenerReviewSeconds`: one the cluster no longer allows (a Secret whose pod left
/// the node) is dropped, and the edge is sent a delete for each object it selected that no
/// other listener of the node still selects. An answer that is not a refusal keeps it.
pub(crate) async fn review_listeners(shared: Arc<Shared>) {
    let every = shared.config.listener_review_seconds;
    if every == 0 {
        return;
    }
    let period = std::time::Duration::from_secs(every);
    loop {
        tokio::time::sleep(period).await;
        for node in shared.registry.nodes() {
            for l in shared.registry.of_node(&node) {
                if decide_again(&shared, &l).await.is_err() {
                    shared.metrics.denied(verb::WATCH);
                }
            }
        }
    }
}

/// Types a node may read only through a pod bound to it (the Node authorizer's graph): a
/// listener of one of them is decided again as soon as a pod of its namespace is deleted.
fn pod_dependent(info: &ResourceInfo) -> bool {
    let r = &info.resource;
    match r.group.as_str() {
        "" => matches!(
            r.plural.as_str(),
            "secrets" | "configmaps" | "persistentvolumeclaims" | "serviceaccounts"
        ),
        "resource.k8s.io" => r.plural == "resourceclaims",
        _ => false,
    }
}

/// How long pod deletions are gathered before the listeners they concern are decided again.
const POD_REVIEW_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Decides again, promptly, the listeners a deleted pod may have justified: the listeners of
/// Secrets, ConfigMaps, claims and service accounts in the deleted pod's namespace, with that
/// namespace's remembered review answers forgotten first. A pod never changes node (its
/// `nodeName` is immutable once set), so deletion is the event that ends such access; the
/// periodic review (`listenerReviewSeconds`) stays the backstop for anything missed here (the
/// pod watch restarting, for one). Only pods' metadata is watched, and nothing is kept of it.
pub(crate) async fn review_on_pod_deletes(shared: Arc<Shared>) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};

    if shared.config.listener_review_seconds == 0 {
        return;
    }
    let pods: Api<PartialObjectMeta<Pod>> = Api::all(shared.client.clone());
    let mut events = watcher::watcher(pods, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut pending: HashSet<String> = HashSet::new();
    loop {
        let event = if pending.is_empty() {
            events.next().await
        } else {
            match tokio::time::timeout(POD_REVIEW_DELAY, events.next()).await {
                Ok(e) => e,
                Err(_) => {
                    for ns in pending.drain() {
                        review_namespace(&shared, &ns).await;
                    }
                    continue;
                }
            }
        };
        match event {
            None => return,
            Some(Ok(Event::Delete(pod))) => {
                if let Some(ns) = pod.metadata.namespace
                    && pending.len() < shared.config.max_listeners
                {
                    pending.insert(ns);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => debug!(error = %e, "pod watch for listener reviews failed; retrying"),
        }
    }
}

/// Decides again every pod-dependent listener in `namespace` (see [`review_on_pod_deletes`]).
async fn review_namespace(shared: &Shared, namespace: &str) {
    let concerned: Vec<Arc<Listener>> = shared
        .registry
        .nodes()
        .into_iter()
        .flat_map(|n| shared.registry.of_node(&n))
        .filter(|l| l.namespace.as_deref() == Some(namespace) && pod_dependent(&l.info))
        .collect();
    if concerned.is_empty() {
        return;
    }
    shared.reviewer.forget_namespace(namespace);
    for l in concerned {
        if decide_again(shared, &l).await.is_err() {
            shared.metrics.denied(verb::WATCH);
        }
    }
}

/// Decides listener `l` again on the watch request it was decided as; one the cluster now
/// refuses (`403`) is revoked and the refusal returned (the caller counts it). Other failures (the API server is
/// unreachable) keep it: it was allowed, and a later review decides.
async fn decide_again(shared: &Shared, l: &Listener) -> Result<(), StatusError> {
    let watch = http::Request::get(&l.uri).body(Vec::new());
    match authorize(&MetaPolicy(shared), &l.node, watch.map_err(Into::into)).await {
        Err(e) if e.code() == 403 => {
            revoke(shared, l).await;
            Err(e)
        }
        _ => Ok(()),
    }
}

/// Drops listener `l`, now refused, and deletes at its edge what only it selected.
async fn revoke(shared: &Shared, l: &Listener) {
    info!(node = %l.node, id = %l.id, r#type = %type_key(&l.info), "edge watch no longer allowed: dropped");
    unregister(shared, &l.node, &l.id);
    let Some(informer) = shared.informers.get(&type_key(&l.info)) else {
        return;
    };
    let others = shared.registry.of_node(&l.node);
    let lookup = lookup_for(shared, &l.info).await;
    for obj in informer.list() {
        if !l.matches(&obj) || others.iter().any(|o| o.info == l.info && o.matches(&obj)) {
            continue;
        }
        deliver(shared, &l.node, &l.info, op::DELETE, &obj, lookup.as_ref()).await;
    }
}

/// What one node gets for one change.
fn decide(change: &Change, was: bool, now: bool) -> Option<&'static str> {
    match change {
        Change::Deleted(_) => was.then_some(op::DELETE),
        Change::Added(_) => now.then_some(op::INSERT),
        Change::Modified { .. } => match (was, now) {
            (true, true) => Some(op::UPDATE),
            (false, true) => Some(op::INSERT),
            // Left the selection: the edge's watch shows it as deleted.
            (true, false) => Some(op::DELETE),
            (false, false) => None,
        },
    }
}

/// Fans changes out to the nodes whose listeners select them, in the order they arrive.
pub(crate) async fn dispatch(shared: Arc<Shared>, mut changes: mpsc::Receiver<TypeChange>) {
    while let Some(TypeChange { info, change }) = changes.recv().await {
        let listeners = shared.registry.of_type(&type_key(&info));
        if listeners.is_empty() {
            continue;
        }
        let (old, new): (Option<&DynamicObject>, Option<&DynamicObject>) = match &change {
            Change::Added(n) => (None, Some(n)),
            Change::Modified { old, new } => (Some(old), Some(new)),
            Change::Deleted(o) => (Some(o), None),
        };
        let mut per_node: HashMap<&str, (bool, bool)> = HashMap::new();
        for l in &listeners {
            let was = old.is_some_and(|o| l.matches(o));
            let now = new.is_some_and(|n| l.matches(n));
            let e = per_node.entry(l.node.as_str()).or_default();
            e.0 |= was;
            e.1 |= now;
        }
        let lookup = lookup_for(&shared, &info).await;
        let obj = new.or(old).expect("a change has an object");
        for (node, (was, now)) in per_node {
            let Some(operation) = decide(&change, was, now) else {
                continue;
            };
            deliver(&shared, node, &info, operation, obj, lookup.as_ref()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_the_operation_its_selection_implies() {
        let o = Arc::new(DynamicObject::new(
            "a",
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
        ));
        let added = Change::Added(o.clone());
        let modified = Change::Modified {
            old: o.clone(),
            new: o.clone(),
        };
        let deleted = Change::Deleted(o);
        assert_eq!(decide(&added, false, true), Some("insert"));
        assert_eq!(decide(&added, false, false), None);
        assert_eq!(decide(&modified, true, true), Some("update"));
        assert_eq!(decide(&modified, false, true), Some("insert"));
        assert_eq!(decide(&modified, true, false), Some("delete"));
        assert_eq!(decide(&modified, false, false), None);
        assert_eq!(decide(&deleted, true, false), Some("delete"));
        assert_eq!(decide(&deleted, false, false), None);
    }
}
