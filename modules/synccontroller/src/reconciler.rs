//! The reconcile loop: records, the objects they track, and the messages that bring an edge
//! up to date (docs/controllers.md#synccontroller).
//!
//! One task owns every cache. It reconciles a record when the record changes, when the object it
//! tracks changes or disappears (event-driven; KubeEdge polls every record every 5 s), and every
//! record once per interval (the safety net, and the resend for edges that missed a message;
//! an unacknowledged delete is resent less and less often, see [`DELETE_RESEND_MAX`]).
//! Object caches exist per kind, are filled by one watch per kind and keep only objects some record
//! tracks.
//!
//! A record whose object exists under another UID belongs to a previous incarnation (deleted
//! and recreated under the same name, typically while the edge was away). Its delete is sent
//! only where it cannot hit the new incarnation: the edge deletes a pod only when the UIDs
//! match, but every other kind by name. So for pods the delete goes out; a Node's record is
//! dropped without a word (a Node delete reaching its own edge would cut the edge off); for
//! other kinds the record is dropped once a record of the new incarnation shows that one is on
//! its way, and the delete is sent only when none has appeared after a grace period.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use beehive::constants::operation;
use beehive::{Content, Endpoint, Message};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, SelectAll};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, TypeMeta};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use kube::runtime::watcher::{self, Event};
use kubeedge_api::NodeResource;
use kubeedge_api::lifecycle::{CancellationToken, Lifecycle};
use kubeedge_api::names::{CLOUDHUB, GROUP_RESOURCE};
use kubeedge_api::reliablesyncs::{
    ClusterObjectSync, ObjectSync, RecordCacheWriter, object_sync_name, parse_object_sync_name,
    record_cache,
};
use kubeedge_api::replicas::Ownership;
use kubeedge_api::version;
use kubeedge_api::watch::{self, CacheWriter, Change};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::kinds;
use crate::metrics::Counters;
use crate::record::{self, Decision, NOT_ACKNOWLEDGED, Record, RecordKey, decide};
use crate::takeover::{self, Found, Takeovers};

/// Kinds whose content differs per node (filtered by dynamiccontroller): never re-sent here.
const FILTERED_PER_NODE: [&str; 2] = ["Endpoints", "EndpointSlice"];
/// How long a kind that discovery could not resolve is left alone.
const DISCOVERY_RETRY: Duration = Duration::from_secs(30);
/// Record deletions are tried this many times, 1 s apart (as KubeEdge does).
const DELETE_ATTEMPTS: u32 = 5;
/// How long the record of a previous incarnation of a kind the edge deletes by name waits for
/// a record of the new incarnation before the old copy's delete is sent. cloudhub records a
/// copy as soon as it is given one (also for an edge that is away), so after this no new copy
/// is on its way to that edge and a delete by name can only remove the old one.
const SUPERSEDED_GRACE: Duration = Duration::from_secs(10);
/// How long a record may stay without a status before it counts as `"0"` (never
/// acknowledged) and its object is sent. Its writer creates a record and sets its status in two
/// calls (status is a subresource); a writer that dies in between — a replica killed while it
/// recorded what its nodes could not take — leaves a record nothing else would ever complete.
/// Within this grace the status is on its way and sending would duplicate an acknowledged
/// version.
const UNRECORDED_STATUS_GRACE: Duration = Duration::from_secs(20);
/// A record being dropped is not dropped again sooner (its deletion shows in the record watch
/// long before).
const DROP_RETRY: Duration = Duration::from_secs(30);
/// GETs of objects tracked before their watch brought them, in flight at once.
const SEEDS_IN_FLIGHT: usize = 32;
/// How long connections are collected before their nodes are caught up together.
const CATCH_UP_DELAY: Duration = Duration::from_millis(200);
/// The longest the periodic pass waits before it sends a delete again that the edge has not
/// acknowledged. The wait starts at one interval and doubles with every send: each send costs
/// the API server a GET (the deletion confirmed) and a LIST (a current resource version), and
/// an edge that is away, or never acknowledges, would otherwise cost that every pass for every
/// such record. A node that connects is caught up at once, whatever its records wait for.
const DELETE_RESEND_MAX: Duration = Duration::from_secs(300);
/// A current resource version for deletes is read once per kind within this time and shared
/// by the deletes sent meanwhile.
const CURRENT_RV_REUSE: Duration = Duration::from_secs(1);

/// A kind some record names, with its watch cache.
struct Slot {
    resource: ApiResource,
    namespaced: bool,
    type_name: String,
    source: &'static str,
    cache: CacheWriter<DynamicObject>,
    /// UID and resource version of each object the kind's watch reported while no record
    /// tracked it (the cache keeps only tracked objects). A record that appears for such an
    /// object and already shows its version needs no GET: a burst of new records (a record
    /// per pod per edge) would otherwise read every object once, one at a time, ahead of
    /// everything else this loop does.
    seen: HashMap<String, (String, String)>,
}

enum Lookup {
    Known(usize),
    Failed(Instant),
}

/// An object tracked by records: (kind slot, cache key).
type ObjKey = (usize, String);

/// An object's GET answered: the object, or `None` when it does not exist.
type Seeded = (ObjKey, Result<Option<DynamicObject>, kube::Error>);

/// When a delete the edge has not acknowledged goes out again.
struct Resend {
    due: Instant,
    wait: Duration,
}

#[derive(Default)]
struct Tracked {
    records: BTreeSet<RecordKey>,
    /// Looked up once with a GET; from then on the watch keeps the cache current.
    seeded: bool,
}

/// Settings of the loop.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) interval: Duration,
    pub(crate) watch_timeout: Option<Duration>,
    /// Which replica holds which node; `None`: this replica serves every node.
    pub(crate) ownership: Option<Ownership>,
}

pub(crate) struct Reconciler {
    client: kube::Client,
    endpoint: Endpoint,
    settings: Settings,
    life: Lifecycle,
    counters: Arc<Counters>,
    syncs: CacheWriter<ObjectSync>,
    cluster_syncs: CacheWriter<ClusterObjectSync>,
    nodes: CacheWriter<PartialObjectMeta<Node>>,
    slots: Vec<Slot>,
    lookups: HashMap<GroupVersionKind, Lookup>,
    tracked: HashMap<ObjKey, Tracked>,
    targets: HashMap<RecordKey, ObjKey>,
    watches: SelectAll<BoxStream<'static, (usize, Event<DynamicObject>)>>,
    running: bool,
    /// Records of a previous incarnation waiting for the new one's record, since when.
    superseded_since: HashMap<RecordKey, Instant>,
    /// Records seen without a status, since when (see [`UNRECORDED_STATUS_GRACE`]).
    statusless_since: HashMap<RecordKey, Instant>,
    /// Records of a previous incarnation being dropped, since when.
    dropping: HashMap<RecordKey, Instant>,
    /// Records whose delete went out, and when the periodic pass may send it again.
    resends: HashMap<RecordKey, Resend>,
    /// A current resource version per kind slot, and when it was read.
    current_rv: HashMap<usize, (Instant, String)>,
    /// Nodes that connected here, to bring up to date at the next catch-up.
    connected: mpsc::Receiver<String>,
    catching_up: HashSet<String>,
    catch_up_at: Option<Instant>,
    takeovers: Takeovers,
    /// GETs of objects tracked before the watch brought them, in flight beside the loop
    /// (at most [`SEEDS_IN_FLIGHT`] at once): the records of such an object are reconciled
    /// when its GET answers, and everything else goes on meanwhile.
    seeding: FuturesUnordered<BoxFuture<'static, Seeded>>,
    seeding_keys: HashSet<ObjKey>,
    seed_permits: Arc<tokio::sync::Semaphore>,
}

impl Reconciler {
    pub(crate) fn new(
        client: kube::Client,
        endpoint: Endpoint,
        settings: Settings,
        life: Lifecycle,
        counters: Arc<Counters>,
        connected: mpsc::Receiver<String>,
        records: Option<RecordCacheWriter>,
    ) -> Self {
        let takeovers = Takeovers::new(client.clone(), life.clone());
        let records = records.unwrap_or_else(|| record_cache().0);
        Reconciler {
            connected,
            catching_up: HashSet::new(),
            catch_up_at: None,
            takeovers,
            client,
            endpoint,
            settings,
            life,
            counters,
            syncs: records.namespaced,
            cluster_syncs: records.cluster,
            nodes: watch::cache().0,
            slots: Vec::new(),
            lookups: HashMap::new(),
            tracked: HashMap::new(),
            targets: HashMap::new(),
            watches: SelectAll::new(),
            running: false,
            superseded_since: HashMap::new(),
            statusless_since: HashMap::new(),
            dropping: HashMap::new(),
            resends: HashMap::new(),
            current_rv: HashMap::new(),
            seeding: FuturesUnordered::new(),
            seeding_keys: HashSet::new(),
            seed_permits: Arc::new(tokio::sync::Semaphore::new(SEEDS_IN_FLIGHT)),
        }
    }

    fn watch_config(&self) -> watcher::Config {
        let mut c = watcher::Config::default();
        if let Some(t) = self.settings.watch_timeout {
            c = c.timeout(t.as_secs().clamp(1, u64::from(u32::MAX)) as u32);
        }
        c
    }

    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut syncs = watch::events(
            Api::<ObjectSync>::all(self.client.clone()),
            self.watch_config(),
        )
        .boxed();
        let mut cluster_syncs = watch::events(
            Api::<ClusterObjectSync>::all(self.client.clone()),
            self.watch_config(),
        )
        .boxed();
        let mut nodes = watch::events(
            Api::<PartialObjectMeta<Node>>::all(self.client.clone()),
            self.watch_config(),
        )
        .boxed();
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Control events first: the watch streams below can be ready without pause (every
            // node's status and annotation changes), and a connected node, a catch-up, a
            // takeover or the periodic pass must not wait behind them.
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(node) = self.connected.recv() => self.on_connected(node),
                _ = sleep_until_some(self.catch_up_at), if self.running => self.catch_up().await,
                Some(found) = self.takeovers.next() => self.on_takeover(found).await,
                // A full interval of watch events between passes, however long a pass takes.
                _ = tick.tick(), if self.running => {
                    self.full_pass().await;
                    tick.reset();
                }
                Some(e) = nodes.next() => self.on_node_event(e).await,
                Some(e) = syncs.next() => {
                    let changes = self.syncs.apply(e);
                    self.on_records(changes.into_iter().map(|c| map_change(c, Record::namespaced)).collect()).await;
                }
                Some(e) = cluster_syncs.next() => {
                    let changes = self.cluster_syncs.apply(e);
                    self.on_records(changes.into_iter().map(|c| map_change(c, Record::cluster)).collect()).await;
                }
                Some((slot, e)) = self.watches.next(), if !self.watches.is_empty() => self.on_object_event(slot, e).await,
                Some((key, got)) = self.seeding.next(), if !self.seeding.is_empty() => self.on_seeded(key, got).await,
            }
            if !self.running
                && self.syncs.reader().is_ready()
                && self.cluster_syncs.reader().is_ready()
                && self.nodes.reader().is_ready()
            {
                self.running = true;
                info!(
                    objectsyncs = self.syncs.reader().len(),
                    clusterobjectsyncs = self.cluster_syncs.reader().len(),
                    nodes = self.nodes.reader().len(),
                    "caches synced; collecting records of deleted nodes, then reconciling"
                );
                self.collect_records_of_missing_nodes(None);
                self.full_pass().await;
                tick.reset();
            }
        }
        info!("synccontroller stopped");
    }

    fn record(&self, key: &RecordKey) -> Option<Record> {
        match key {
            RecordKey::Namespaced { namespace, name } => self
                .syncs
                .reader()
                .get_by(Some(namespace), name)
                .map(|o| Record::namespaced(&o)),
            RecordKey::Cluster { name } => self
                .cluster_syncs
                .reader()
                .get(name)
                .map(|o| Record::cluster(&o)),
        }
    }

    fn all_records(&self) -> Vec<Record> {
        let mut all: Vec<Record> = self
            .syncs
            .reader()
            .list()
            .iter()
            .map(|o| Record::namespaced(o))
            .collect();
        all.extend(
            self.cluster_syncs
                .reader()
                .list()
                .iter()
                .map(|o| Record::cluster(o)),
        );
        all
    }

    /// Every record but the settled ones: those showing an acknowledged version that the
    /// cached copy of their object (same UID) is not newer than, for which [`Self::assess`]
    /// would decide "up to date" and change nothing. They are recognised in place in the
    /// record caches, so a pass over thousands of settled records copies none of them (most
    /// records, most of the time: a record is reconciled at once when it or its object
    /// changes).
    fn unsettled_records(&self) -> Vec<Record> {
        let mut all: Vec<Record> = self
            .syncs
            .reader()
            .filter(|os| {
                let (meta, spec) = (&os.metadata, &os.spec);
                let acked = os
                    .status
                    .as_ref()
                    .map(|s| s.object_resource_version.as_str());
                !self.settled(
                    Some(meta.namespace.as_deref().unwrap_or_default()),
                    meta.name.as_deref().unwrap_or_default(),
                    (
                        &spec.object_api_version,
                        &spec.object_kind,
                        &spec.object_name,
                    ),
                    acked.unwrap_or_default(),
                )
            })
            .iter()
            .map(|o| Record::namespaced(o))
            .collect();
        all.extend(
            self.cluster_syncs
                .reader()
                .filter(|cos| {
                    let (meta, spec) = (&cos.metadata, &cos.spec);
                    let acked = cos
                        .status
                        .as_ref()
                        .map(|s| s.object_resource_version.as_str());
                    !self.settled(
                        None,
                        meta.name.as_deref().unwrap_or_default(),
                        (
                            &spec.object_api_version,
                            &spec.object_kind,
                            &spec.object_name,
                        ),
                        acked.unwrap_or_default(),
                    )
                })
                .iter()
                .map(|o| Record::cluster(o)),
        );
        all
    }

    /// Whether the record (`namespace`: `None` for a ClusterObjectSync; `object`: its spec's
    /// apiVersion, kind and name) is settled: its kind is watched already and the cached
    /// copy of its object is one [`record::settled`] calls up to date. Nothing is looked up
    /// or allocated beyond the cache key.
    fn settled(
        &self,
        namespace: Option<&str>,
        name: &str,
        object: (&str, &str, &str),
        acked: &str,
    ) -> bool {
        let (api_version, kind, object_name) = object;
        if acked.is_empty() {
            return false;
        }
        let Some(slot) = self.known_slot(api_version, kind) else {
            return false;
        };
        let s = &self.slots[slot];
        // As `assess` looks objects up: a cluster-scoped kind by name; a namespaced kind in
        // the record's namespace (a ClusterObjectSync of one is never settled here).
        let lookup_ns = match (namespace, s.namespaced) {
            (_, false) => None,
            (Some(ns), true) => Some(ns),
            (None, true) => return false,
        };
        s.cache
            .reader()
            .get(&watch::key(lookup_ns, object_name))
            .is_some_and(|obj| record::settled(name, acked, &obj))
    }

    /// The slot of a kind already watched, found without allocating (a handful of kinds).
    fn known_slot(&self, api_version: &str, kind: &str) -> Option<usize> {
        let (group, version) = kinds::group_version(api_version)?;
        self.lookups.iter().find_map(|(gvk, lookup)| match lookup {
            Lookup::Known(i)
                if gvk.kind == kind && gvk.version == version && gvk.group == group =>
            {
                Some(*i)
            }
            _ => None,
        })
    }

    async fn on_records(&mut self, changes: Vec<Change<Record>>) {
        for change in changes {
            match change {
                Change::Added(r) | Change::Modified { new: r, .. } => {
                    if self.running {
                        self.reconcile(&r).await;
                    }
                }
                Change::Deleted(r) => {
                    self.superseded_since.remove(&r.key);
                    self.statusless_since.remove(&r.key);
                    self.dropping.remove(&r.key);
                    self.resends.remove(&r.key);
                    self.untrack(&r.key);
                }
            }
        }
    }

    async fn on_node_event(&mut self, event: Event<PartialObjectMeta<Node>>) {
        for change in self.nodes.apply(event) {
            if !self.running {
                continue;
            }
            match change {
                Change::Deleted(node) => {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    info!(node = %name, "node deleted: removing its records");
                    self.collect_records_of_missing_nodes(Some(&name));
                }
                // Records seen before their node were skipped ("node gone"): serve them now
                // rather than at the next pass.
                Change::Added(node) => {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let waiting: Vec<Record> = self
                        .all_records()
                        .into_iter()
                        .filter(|r| r.target.as_ref().is_some_and(|(n, _)| *n == name))
                        .collect();
                    for r in waiting {
                        self.reconcile(&r).await;
                    }
                }
                Change::Modified { .. } => {}
            }
        }
    }

    async fn on_object_event(&mut self, slot: usize, event: Event<DynamicObject>) {
        let keep = |tracked: &HashMap<ObjKey, Tracked>, o: &DynamicObject| {
            tracked.contains_key(&(slot, watch::key_of(o)))
        };
        let seen = &mut self.slots[slot].seen;
        match &event {
            Event::Apply(o) | Event::InitApply(o) if !keep(&self.tracked, o) => {
                // Only objects some record tracks are kept (memory follows the records);
                // of the others, their UID and version.
                let meta = &o.metadata;
                seen.insert(
                    watch::key_of(o),
                    (
                        meta.uid.clone().unwrap_or_default(),
                        meta.resource_version.clone().unwrap_or_default(),
                    ),
                );
                return;
            }
            Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => {
                seen.remove(&watch::key_of(o));
            }
            Event::Init => seen.clear(),
            Event::InitDone => {}
        }
        let changes = self.slots[slot].cache.apply(event);
        if !self.running {
            return;
        }
        for change in changes {
            let key = (slot, watch::key_of(&**change.object()));
            let records: Vec<RecordKey> = self
                .tracked
                .get(&key)
                .map(|t| t.records.iter().cloned().collect())
                .unwrap_or_default();
            let records: Vec<Record> = records.iter().filter_map(|k| self.record(k)).collect();
            for r in records {
                self.reconcile(&r).await;
            }
        }
    }

    /// One pass over every record. Deletes go out before updates: should a delete by name of
    /// an old copy and the new copy go out in the same pass, the edge must see the delete
    /// first.
    async fn full_pass(&mut self) {
        self.counters.passes.inc();
        let mut updates = Vec::new();
        for r in self.unsettled_records() {
            if !self.mine(&r) {
                continue;
            }
            match self.assess(&r).await {
                Some((slot, Decision::Orphan | Decision::Superseded, _))
                    if !self.resend_waits(&r.key) =>
                {
                    self.settle(slot, &r).await;
                }
                Some((slot, Decision::Update, Some(obj))) => updates.push((slot, r, obj)),
                _ => {}
            }
        }
        for (slot, r, obj) in updates {
            self.send_update(slot, &r, &obj).await;
        }
    }

    /// Whether the record's last delete went out too recently to send it again in a periodic
    /// pass (see [`DELETE_RESEND_MAX`]). Half an interval of slack: a pass that starts just
    /// before the time is not one interval late.
    fn resend_waits(&self, key: &RecordKey) -> bool {
        self.resends
            .get(key)
            .is_some_and(|r| Instant::now() + self.settings.interval / 2 < r.due)
    }

    /// A node connected here: bring it up to date soon (connections come in bursts, so they
    /// are caught up together in one pass over the records).
    fn on_connected(&mut self, node: String) {
        if let Some(from) = self
            .settings
            .ownership
            .as_ref()
            .and_then(|o| o.take_over(&node))
        {
            info!(
                node,
                from, "node moved here from another replica: looking for what it missed"
            );
            self.takeovers.scan(node.clone());
        }
        self.catching_up.insert(node);
        self.catch_up_at
            .get_or_insert_with(|| Instant::now() + CATCH_UP_DELAY);
    }

    /// Reconciles the records of the nodes that connected since the last catch-up.
    async fn catch_up(&mut self) {
        self.catch_up_at = None;
        let nodes = std::mem::take(&mut self.catching_up);
        let records: Vec<Record> = self
            .all_records()
            .into_iter()
            .filter(|r| r.target.as_ref().is_some_and(|(n, _)| nodes.contains(n)))
            .collect();
        debug!(
            nodes = nodes.len(),
            records = records.len(),
            "catching up connected nodes"
        );
        for r in records {
            self.reconcile(&r).await;
        }
    }

    /// The pods bound to a node that moved here: each one without a record of this node is
    /// one the previous replica never delivered (or never recorded) and no replica recorded
    /// while the node was away, so it is sent now; cloudhub records it when it is acknowledged.
    async fn on_takeover(&mut self, found: Found) {
        let Found { node, pods } = found;
        let ownership = self.settings.ownership.clone();
        if ownership.is_some_and(|o| !o.holds(&node)) {
            return;
        }
        let mut sent = 0;
        for pod in pods {
            let (Some(ns), Some(uid)) = (pod.metadata.namespace.clone(), pod.metadata.uid.clone())
            else {
                continue;
            };
            let key = RecordKey::Namespaced {
                namespace: ns,
                name: object_sync_name(&node, &uid),
            };
            if self.record(&key).is_some() {
                debug!(node, pod = ?pod.metadata.name, "takeover: recorded, left to the reconcile");
                continue;
            }
            debug!(node, pod = ?pod.metadata.name, rv = ?pod.metadata.resource_version, "takeover: no record, sending");
            let Some(msg) = takeover::pod_message(&node, &pod) else {
                continue;
            };
            if self.send(msg).await {
                self.counters.updates.inc();
                sent += 1;
            }
        }
        info!(
            node,
            sent, "pods without a record sent to a node that moved here"
        );
    }

    /// The slot of a record's kind, resolving it (and starting its watch) on first use.
    async fn slot_for(&mut self, record: &Record) -> Option<usize> {
        let gvk = kinds::gvk(&record.api_version, &record.kind)?;
        match self.lookups.get(&gvk) {
            Some(Lookup::Known(i)) => return Some(*i),
            Some(Lookup::Failed(at)) if at.elapsed() < DISCOVERY_RETRY => return None,
            _ => {}
        }
        let (resource, namespaced) = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((ar, caps)) => (ar, caps.scope == Scope::Namespaced),
            Err(kube::Error::Discovery(error)) => {
                // The group/version is served but does not list the kind: KubeEdge's rule.
                warn!(kind = %record.kind, %error, "kind not in discovery, guessing its resource");
                let plural = kinds::plural_of(&record.kind);
                (
                    ApiResource::from_gvk_with_plural(&gvk, &plural),
                    matches!(record.key, RecordKey::Namespaced { .. }),
                )
            }
            Err(error) => {
                warn!(api_version = %record.api_version, kind = %record.kind, %error, "cannot resolve kind; retrying later");
                self.lookups.insert(gvk, Lookup::Failed(Instant::now()));
                return None;
            }
        };
        let index = self.slots.len();
        let label = format!("{}/{}", resource.api_version, resource.kind);
        let api = Api::<DynamicObject>::all_with(self.client.clone(), &resource);
        let stream =
            watch::labelled_events(api, self.watch_config(), label).map(move |e| (index, e));
        self.watches.push(stream.boxed());
        debug!(kind = %resource.kind, namespaced, "watching a new kind");
        self.slots.push(Slot {
            type_name: kinds::type_name(&resource.kind),
            source: kinds::source_for(&resource.group),
            namespaced,
            resource,
            cache: watch::cache().0,
            seen: HashMap::new(),
        });
        self.lookups.insert(gvk, Lookup::Known(index));
        Some(index)
    }

    fn untrack(&mut self, record: &RecordKey) {
        let Some(obj) = self.targets.remove(record) else {
            return;
        };
        let Some(t) = self.tracked.get_mut(&obj) else {
            return;
        };
        t.records.remove(record);
        if t.records.is_empty() {
            self.tracked.remove(&obj);
            self.slots[obj.0].cache.remove(&obj.1);
        }
    }

    /// Whether this replica looks after the record: only the replica holding a node's
    /// session re-sends to it and changes its records. A record whose name names no node is
    /// anyone's to drop.
    fn mine(&self, record: &Record) -> bool {
        match (&self.settings.ownership, &record.target) {
            (Some(o), Some((node, _))) => o.holds(node),
            (None, _) | (Some(_), None) => true,
        }
    }

    async fn reconcile(&mut self, record: &Record) {
        if !self.mine(record) {
            return;
        }
        match self.assess(record).await {
            Some((slot, Decision::Update, Some(obj))) => self.send_update(slot, record, &obj).await,
            Some((slot, Decision::Orphan | Decision::Superseded, _)) => {
                self.settle(slot, record).await;
            }
            _ => {}
        }
    }

    /// A record whose object the cache says is gone or recreated. The cache can be behind the
    /// API server: with a delete and recreate under the same name not delivered yet, the record
    /// of the new incarnation looks like one of the old, and what follows deletes at the edge
    /// or drops records. So the API server confirms first; where it disagrees nothing is done,
    /// and a later pass decides on a newer cache.
    async fn settle(&mut self, slot: usize, record: &Record) {
        let Some(live) = self.live(slot, record).await else {
            return;
        };
        match (decide(record, live.as_ref()), live) {
            (Decision::Orphan, _) => self.orphan(slot, record).await,
            (Decision::Superseded, Some(obj)) => self.superseded(slot, record, &obj).await,
            _ => debug!(
                record = record.key.name(),
                "the object cache is behind the API server; decided on a later pass"
            ),
        }
    }

    /// The record's object as the API server has it now; `None` when it could not answer.
    async fn live(&mut self, slot: usize, record: &Record) -> Option<Option<DynamicObject>> {
        let s = &self.slots[slot];
        let api = match (&record.key, s.namespaced) {
            (RecordKey::Namespaced { namespace, .. }, true) => {
                Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &s.resource)
            }
            _ => Api::<DynamicObject>::all_with(self.client.clone(), &s.resource),
        };
        match api.get_opt(&record.object_name).await {
            Ok(live) => Some(live),
            Err(error) => {
                warn!(kind = %s.resource.kind, name = %record.object_name, %error, "cannot confirm a deletion; retrying next pass");
                None
            }
        }
    }

    /// Whether the slot holds the core kind `kind`.
    fn is_core(&self, slot: usize, kind: &str) -> bool {
        let r = &self.slots[slot].resource;
        r.group.is_empty() && r.kind == kind
    }

    /// The object is gone: the edge deletes its copy. Never for a Node: the only Node an edge
    /// holds is its own, and that one's records go with the node.
    async fn orphan(&mut self, slot: usize, record: &Record) {
        if self.is_core(slot, "Node") {
            self.drop_superseded(record, "node object gone");
            return;
        }
        self.send_orphan_delete(slot, record).await;
    }

    /// The object was deleted and recreated under the record's name (see the module doc).
    async fn superseded(&mut self, slot: usize, record: &Record, live: &DynamicObject) {
        if self.is_core(slot, "Pod") {
            // The edge removes a pod only when its stored copy has the delete's UID (and then
            // relists the pods it holds), so the new incarnation is untouched.
            self.send_orphan_delete(slot, record).await;
            return;
        }
        if self.is_core(slot, "Node") {
            // A Node delete would take the node's own object from its edge (and make cloudhub
            // end the session); the new Node reaches the edge as any update does.
            self.drop_superseded(record, "node recreated");
            return;
        }
        let live_uid = live.metadata.uid.as_deref().unwrap_or_default();
        if self.has_record_of(record, live_uid) {
            // The new copy is on its way and replaces the old one at the edge by name; a
            // delete by name could arrive after it and remove it.
            self.drop_superseded(record, "new incarnation recorded for the node");
            return;
        }
        let since = *self
            .superseded_since
            .entry(record.key.clone())
            .or_insert_with(Instant::now);
        if since.elapsed() >= SUPERSEDED_GRACE {
            self.send_orphan_delete(slot, record).await;
        } else {
            debug!(
                record = record.key.name(),
                "object recreated: waiting for a record of the new incarnation before deleting the old copy"
            );
        }
    }

    /// Whether the record's node also has a record of the object with `uid` (the same kind of
    /// record: ObjectSync in the same namespace, or ClusterObjectSync).
    fn has_record_of(&self, record: &Record, uid: &str) -> bool {
        let Some((node, _)) = &record.target else {
            return false;
        };
        if uid.is_empty() {
            return false;
        }
        let name = object_sync_name(node, uid);
        match &record.key {
            RecordKey::Namespaced { namespace, .. } => {
                self.syncs.reader().get_by(Some(namespace), &name).is_some()
            }
            RecordKey::Cluster { .. } => self.cluster_syncs.reader().get(&name).is_some(),
        }
    }

    /// Deletes a record of a previous incarnation without sending anything to its node.
    fn drop_superseded(&mut self, record: &Record, why: &'static str) {
        if self
            .dropping
            .get(&record.key)
            .is_some_and(|at| at.elapsed() < DROP_RETRY)
        {
            return;
        }
        self.dropping.insert(record.key.clone(), Instant::now());
        let node = record.target.as_ref().map(|(n, _)| n.as_str());
        info!(
            record = record.key.name(),
            node,
            kind = %record.kind,
            object = %record.object_name,
            why,
            "stale record dropped; nothing sent to the edge"
        );
        self.counters.superseded_dropped.inc();
        self.delete_records(vec![record.key.clone()]);
    }

    /// What `record` needs (with its kind's slot and the live object), without sending
    /// anything; `None` when it cannot be decided now.
    async fn assess(
        &mut self,
        record: &Record,
    ) -> Option<(usize, Decision, Option<Arc<DynamicObject>>)> {
        if let Some((node, _)) = &record.target
            && !self.nodes.reader().contains(node)
        {
            // Its node is gone: the record is being collected, nothing goes to that node.
            return None;
        }
        let slot = self.slot_for(record).await?;
        let lookup_ns = match (&record.key, self.slots[slot].namespaced) {
            (RecordKey::Namespaced { namespace, .. }, true) => Some(namespace.clone()),
            // A cluster-scoped object recorded under a namespace (the edge queries
            // VolumeAttachments in `default`) is found by name.
            (RecordKey::Namespaced { .. }, false) | (RecordKey::Cluster { .. }, false) => None,
            (RecordKey::Cluster { name }, true) => {
                debug!(record = %name, kind = %record.kind, "cluster record of a namespaced kind: cannot look it up");
                return None;
            }
        };
        let obj_key = (slot, watch::key(lookup_ns.as_deref(), &record.object_name));
        if self.targets.get(&record.key) != Some(&obj_key) {
            self.untrack(&record.key);
            self.targets.insert(record.key.clone(), obj_key.clone());
            self.tracked
                .entry(obj_key.clone())
                .or_default()
                .records
                .insert(record.key.clone());
        }
        let seeded = self.tracked.get(&obj_key).is_some_and(|t| t.seeded)
            // The watch brought it after the record came: as current as a GET.
            || self.slots[slot].cache.reader().get(&obj_key.1).is_some();
        if !seeded {
            if self.up_to_date_as_seen(slot, &obj_key.1, record) {
                debug!(
                    record = record.key.name(),
                    why = "up to date",
                    "nothing to send"
                );
                return Some((slot, Decision::Skip("up to date"), None));
            }
            // Decided when the GET answers (see `on_seeded`).
            self.seed(slot, lookup_ns, &record.object_name, obj_key);
            return None;
        }
        if let Some(t) = self.tracked.get_mut(&obj_key) {
            t.seeded = true;
        }
        let object = self.slots[slot].cache.reader().get(&obj_key.1);
        let mut decision = decide(record, object.as_deref());
        if record.acked.is_empty() {
            let since = *self
                .statusless_since
                .entry(record.key.clone())
                .or_insert_with(Instant::now);
            if decision == Decision::Skip(NOT_ACKNOWLEDGED)
                && since.elapsed() >= UNRECORDED_STATUS_GRACE
            {
                debug!(
                    record = record.key.name(),
                    "record without a status for too long: counts as never acknowledged"
                );
                decision = Decision::Update;
            }
        } else {
            self.statusless_since.remove(&record.key);
        }
        if let Decision::Skip(why) = decision {
            debug!(record = record.key.name(), why, "nothing to send");
        }
        Some((slot, decision, object))
    }

    /// Whether the kind's watch last reported the record's object (same UID) at a version
    /// the record already shows. Not cached yet, the object is stored at its next change, which
    /// reconciles the record again.
    fn up_to_date_as_seen(&self, slot: usize, key: &str, record: &Record) -> bool {
        let (Some((_, uid)), Some((seen_uid, seen_rv))) =
            (&record.target, self.slots[slot].seen.get(key))
        else {
            return false;
        };
        uid == seen_uid
            && !record.acked.is_empty()
            && version::compare(seen_rv, &record.acked).is_some()
            && !version::is_newer(seen_rv, &record.acked)
    }

    /// Starts the GET of an object not seen yet, beside the loop (once per object at a time).
    fn seed(&mut self, slot: usize, ns: Option<String>, name: &str, key: ObjKey) {
        if !self.seeding_keys.insert(key.clone()) {
            return;
        }
        let s = &self.slots[slot];
        let api = match ns.as_deref() {
            Some(ns) => Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &s.resource),
            None => Api::<DynamicObject>::all_with(self.client.clone(), &s.resource),
        };
        let (name, permits) = (name.to_owned(), self.seed_permits.clone());
        self.seeding.push(Box::pin(async move {
            let _permit = permits.acquire_owned().await;
            (key, api.get_opt(&name).await)
        }));
    }

    /// A GET started by [`Self::seed`] answered: the object (or its absence) is what the
    /// records tracking it are decided on. An error decides nothing (an error must never look
    /// like a deletion); the next pass tries again.
    async fn on_seeded(&mut self, key: ObjKey, got: Result<Option<DynamicObject>, kube::Error>) {
        self.seeding_keys.remove(&key);
        let Some(tracked) = self.tracked.get_mut(&key) else {
            return; // No record tracks it any more.
        };
        match got {
            Ok(found) => {
                tracked.seeded = true;
                let cache = &mut self.slots[key.0].cache;
                // A copy the watch brought meanwhile is at least as recent.
                if let Some(mut obj) = found
                    && cache.reader().get(&key.1).is_none()
                {
                    // The watches drop managedFields; a read must too, or a pod's copy held
                    // here is several KiB larger than the watched ones.
                    obj.metadata.managed_fields = None;
                    cache.upsert(obj);
                }
            }
            Err(error) => {
                let kind = &self.slots[key.0].resource.kind;
                warn!(%kind, object = %key.1, %error, "cannot read a tracked object; retrying next pass");
                return;
            }
        }
        if !self.running {
            return;
        }
        let records: Vec<Record> = tracked_records(&self.tracked, &key)
            .iter()
            .filter_map(|k| self.record(k))
            .collect();
        for r in records {
            self.reconcile(&r).await;
        }
    }

    fn resource_for(&self, slot: usize, record: &Record) -> Option<String> {
        let (node, _) = record.target.as_ref()?;
        NodeResource::new(
            node,
            record.key.namespace_token(),
            &self.slots[slot].type_name,
            &record.object_name,
        )
        .build()
        .ok()
    }

    async fn send_update(&mut self, slot: usize, record: &Record, obj: &DynamicObject) {
        let Some(resource) = self.resource_for(slot, record) else {
            return;
        };
        let s = &self.slots[slot];
        if FILTERED_PER_NODE.contains(&s.resource.kind.as_str()) {
            // What a node sees of these depends on the node (dynamiccontroller filters them by
            // node group, and rewrites default/kubernetes); dynamiccontroller re-sends its
            // listeners' objects itself, so the unfiltered object is never sent from here.
            debug!(record = record.key.name(), "left to dynamiccontroller");
            return;
        }
        // A copy with apiVersion/kind set, on both record kinds (cached objects stay untouched).
        let mut obj = obj.clone();
        obj.types = Some(TypeMeta {
            api_version: s.resource.api_version.clone(),
            kind: s.resource.kind.clone(),
        });
        if kinds::without_status(&s.resource.group)
            && let Some(map) = obj.data.as_object_mut()
        {
            map.insert("status".into(), serde_json::json!({}));
        }
        let rv = obj.metadata.resource_version.clone().unwrap_or_default();
        let Ok(content) = Content::json(&obj) else {
            return;
        };
        let msg = Message::new()
            .with_route(s.source, GROUP_RESOURCE, resource, operation::UPDATE)
            .with_content(content)
            .with_resource_version(rv);
        debug!(record = record.key.name(), "sending newer version");
        if self.send(msg).await {
            self.counters.updates.inc();
        }
    }

    async fn send_orphan_delete(&mut self, slot: usize, record: &Record) {
        let Some(resource) = self.resource_for(slot, record) else {
            // Nothing the edge could match: drop the record itself.
            self.delete_records(vec![record.key.clone()]);
            return;
        };
        let uid = record
            .target
            .as_ref()
            .map(|(_, u)| u.clone())
            .unwrap_or_default();
        let mut meta = serde_json::json!({"name": record.object_name, "uid": uid});
        if let RecordKey::Namespaced { namespace, .. } = &record.key {
            meta["namespace"] = namespace.clone().into();
        }
        // apiVersion and kind let the edge's metaServer find and drop its copy too, and a
        // current resource version (the deletion's is gone with the object) lets the edge's
        // open watches report the deletion: they show only changes newer than what they hold.
        let r = self.slots[slot].resource.clone();
        if let Some(rv) = self.current_rv(slot).await {
            meta["resourceVersion"] = rv.into();
        }
        let body =
            serde_json::json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": meta});
        let Ok(content) = Content::json(&body) else {
            return;
        };
        let msg = Message::new()
            .with_route(
                self.slots[slot].source,
                GROUP_RESOURCE,
                resource,
                operation::DELETE,
            )
            .with_content(content);
        debug!(
            record = record.key.name(),
            "object gone or recreated: deleting the old copy at the edge"
        );
        if self.send(msg).await {
            self.counters.deletes.inc();
            let wait = self
                .resends
                .get(&record.key)
                .map_or(self.settings.interval, |r| {
                    // An interval above the cap (it is configurable) is the wait itself:
                    // `clamp` would panic with its bounds crossed.
                    let most = DELETE_RESEND_MAX.max(self.settings.interval);
                    (r.wait * 2).clamp(self.settings.interval, most)
                });
            self.resends.insert(
                record.key.clone(),
                Resend {
                    due: Instant::now() + wait,
                    wait,
                },
            );
        }
    }

    /// The API server's current resource version for the slot's kind (read at most once per
    /// [`CURRENT_RV_REUSE`]); `None` when it cannot be read.
    async fn current_rv(&mut self, slot: usize) -> Option<String> {
        if let Some((at, rv)) = self.current_rv.get(&slot)
            && at.elapsed() < CURRENT_RV_REUSE
        {
            return Some(rv.clone());
        }
        let list = Api::<DynamicObject>::all_with(self.client.clone(), &self.slots[slot].resource)
            .list_metadata(&ListParams::default().limit(1))
            .await
            .ok()?;
        let rv = list.metadata.resource_version.filter(|rv| !rv.is_empty())?;
        self.current_rv.insert(slot, (Instant::now(), rv.clone()));
        Some(rv)
    }

    async fn send(&mut self, msg: Message) -> bool {
        match self.endpoint.send(CLOUDHUB, msg).await {
            Ok(()) => true,
            Err(error) => {
                warn!(%error, "cannot send to cloudhub");
                false
            }
        }
    }

    /// Deletes the records of nodes that no longer exist (of `only` that node, if given).
    fn collect_records_of_missing_nodes(&mut self, only: Option<&str>) {
        let nodes = self.nodes.reader();
        let mut doomed: HashMap<String, Vec<RecordKey>> = HashMap::new();
        for r in self.all_records() {
            let Some((node, _)) = parse_object_sync_name(r.key.name()) else {
                continue;
            };
            if only.is_none_or(|n| n == node) && !nodes.contains(node) {
                doomed.entry(node.to_owned()).or_default().push(r.key);
            }
        }
        if doomed.is_empty() {
            return;
        }
        // The node cache can lag the record cache (they are listed separately, and a node
        // may be created just before its first record), so each node's absence is confirmed
        // with the API server before its records go.
        let (client, counters) = (self.client.clone(), self.counters.clone());
        self.life.spawn_cancellable(async move {
            let api = Api::<PartialObjectMeta<Node>>::all(client.clone());
            for (node, keys) in doomed {
                if node_is_gone(&api, &node).await {
                    info!(node = %node, records = keys.len(), "deleting records of a deleted node");
                    delete_record_keys(&client, &counters, keys).await;
                }
            }
        });
    }

    /// Deletes records in the background (grace 0, NotFound is fine, 5 attempts 1 s apart).
    fn delete_records(&self, keys: Vec<RecordKey>) {
        let (client, counters) = (self.client.clone(), self.counters.clone());
        self.life
            .spawn_cancellable(async move { delete_record_keys(&client, &counters, keys).await });
    }
}

/// Whether the API server says `node` does not exist (tried [`DELETE_ATTEMPTS`] times, 1 s
/// apart; an API server that cannot answer never counts as "gone").
/// Resolves at `at`, never when `None`.
/// The records tracking `key`.
fn tracked_records(tracked: &HashMap<ObjKey, Tracked>, key: &ObjKey) -> Vec<RecordKey> {
    tracked
        .get(key)
        .map(|t| t.records.iter().cloned().collect())
        .unwrap_or_default()
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn node_is_gone(api: &Api<PartialObjectMeta<Node>>, node: &str) -> bool {
    for attempt in 1..=DELETE_ATTEMPTS {
        match api.get_metadata_opt(node).await {
            Ok(found) => return found.is_none(),
            Err(error) if attempt < DELETE_ATTEMPTS => {
                debug!(node, attempt, %error, "cannot read node, retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => warn!(node, %error, "cannot read node: keeping its records"),
        }
    }
    false
}

/// Deletes `keys` (grace 0, NotFound is fine, each tried [`DELETE_ATTEMPTS`] times 1 s apart).
async fn delete_record_keys(client: &kube::Client, counters: &Counters, keys: Vec<RecordKey>) {
    for key in keys {
        for attempt in 1..=DELETE_ATTEMPTS {
            let dp = DeleteParams::default().grace_period(0);
            let result = match &key {
                RecordKey::Namespaced { namespace, name } => {
                    Api::<ObjectSync>::namespaced(client.clone(), namespace)
                        .delete(name, &dp)
                        .await
                        .map(|_| ())
                }
                RecordKey::Cluster { name } => Api::<ClusterObjectSync>::all(client.clone())
                    .delete(name, &dp)
                    .await
                    .map(|_| ()),
            };
            match result {
                Ok(()) => {
                    counters.records_deleted.inc();
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => break,
                Err(error) if attempt < DELETE_ATTEMPTS => {
                    debug!(record = key.name(), attempt, %error, "record delete failed, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(error) => warn!(record = key.name(), %error, "cannot delete record"),
            }
        }
    }
}

/// A change of a record object as a change of its [`Record`] view.
fn map_change<K>(change: Change<K>, f: impl Fn(&K) -> Record) -> Change<Record> {
    match change {
        Change::Added(o) => Change::Added(Arc::new(f(&o))),
        Change::Modified { old, new } => Change::Modified {
            old: Arc::new(f(&old)),
            new: Arc::new(f(&new)),
        },
        Change::Deleted(o) => Change::Deleted(Arc::new(f(&o))),
    }
}
