//! One engine per job kind: it watches the jobs, runs the job controller (finalizer,
//! initialisation, job phase) and the executor (sending tasks, timeouts, reports), and writes
//! every change of a job's status in one read-modify-write.
//!
//! ```text
//! job watch ─┐                    ┌─► status write (PUT /status, resourceVersion)
//! reports ───┼─► plan per job ────┤   409: read again, apply the same intents again
//! 1 s tick ──┘                    └─► then: Check to the edge, slots released, metrics
//! ```
//!
//! # Replicas, restarts and what is never done twice
//! The API server holds all shared state. A node's task is marked `InProgress` *before* its
//! `Check` is sent, and only if it was still `Pending` in the version written, so no replica,
//! restarted or not, sends a node the same task twice (a replica that dies between the write
//! and the send leaves the node to its timeout). Only the replica holding a node's session
//! sends to it and counts it against the job's `concurrency`; a node no replica holds fails
//! at once; a node another replica holds is left to it. Timeouts are measured from progress
//! this replica observed (a report, a phase change), never from the edge's clock; after a
//! restart, from the restart. Every replica may time a node out: the write is conditional on
//! nothing having been reported since.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use beehive::Endpoint;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::CLOUDHUB;
use kubeedge_api::operations::phase;
use kubeedge_api::replicas::Ownership;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::job::{NodeJob, NodeTask};
use crate::kind::JobKind;
use crate::metrics::{KindLabel, PhaseLabels, TaskManagerMetrics};
use crate::select::{self, SelectError};
use crate::spec;
use crate::status::{self, Applied, NodePhase, job_is_final, job_is_running};
use crate::wire::{self, Refusal, TaskResource, Upstream};

/// How often timeouts are checked and waiting nodes are sent.
const TICK: Duration = Duration::from_secs(1);
/// Attempts of one status write before the intents wait for the next tick.
const WRITE_ATTEMPTS: usize = 5;
/// Reports waiting for one job, beyond which a node's further reports are refused.
const MAX_PENDING_PER_JOB: usize = 4096;
/// Reports held while the jobs are not listed yet.
const MAX_EARLY: usize = 1024;
/// How long the pulled secret reaches the edge's store before the task that reads it.
const SECRET_LEAD: Duration = Duration::from_millis(500);
/// How long a `Pending` node must be held by no replica before it fails as not connected:
/// a node that just connected, or just moved to another replica, is named by its Node's
/// `cloudcore` annotation only once the replica holding it wrote it.
const UNHELD_GRACE: Duration = Duration::from_secs(10);
/// How often one node's refused reports are logged at `warn`.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A report as handed to an engine.
#[derive(Debug, Clone)]
pub(crate) struct Inbound {
    pub(crate) up: Upstream,
    pub(crate) received: Timestamp,
}

/// What every engine shares.
pub(crate) struct Shared {
    pub(crate) client: kube::Client,
    pub(crate) endpoint: Endpoint,
    pub(crate) ownership: Ownership,
    pub(crate) controller: bool,
    pub(crate) metrics: TaskManagerMetrics,
    pub(crate) watch_timeout: Option<u32>,
    /// When each node's refused reports were last logged at `warn`.
    pub(crate) warned: std::sync::Mutex<HashMap<String, std::time::Instant>>,
}

impl Shared {
    /// Whether a refusal of `node`'s may be logged at `warn` now: once per [`WARN_EVERY`]
    /// per node, so a flooding node cannot flood the log as well.
    pub(crate) fn warn_due(&self, node: &str) -> bool {
        let now = std::time::Instant::now();
        let mut w = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|_, t| now.duration_since(*t) < WARN_EVERY);
        if w.contains_key(node) {
            return false;
        }
        w.insert(node.to_owned(), now);
        true
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("controller", &self.controller)
            .field("ownership", &self.ownership)
            .finish_non_exhaustive()
    }
}

/// Progress of one node as this replica saw it.
#[derive(Debug, Clone)]
struct Progress {
    phase: String,
    flow: usize,
    since: Instant,
}

/// The pull secret of a job, as the edge gets it.
#[derive(Debug, Clone)]
enum PullSecret {
    /// The Secret the edge stores (JSON) and its namespace.
    Ready {
        namespace: String,
        secret: serde_json::Value,
    },
    /// Why it cannot be used: the job's nodes fail with this.
    Unusable(String),
}

/// This replica's memory of one job.
#[derive(Debug)]
struct Run {
    uid: String,
    progress: HashMap<String, Progress>,
    job_progress: Instant,
    /// Nodes this replica sent the task to, with when, until their task ends.
    sent: HashMap<String, Instant>,
    pending: Vec<Inbound>,
    /// Checks to send once the pull secret had time to reach the edge's store.
    delayed: Vec<(Instant, String)>,
    secret: Option<PullSecret>,
    /// Nodes holding the pushed pull secret.
    pushed: HashSet<String>,
    /// `Pending` nodes no replica holds, since when this replica saw them so.
    unheld: HashMap<String, Instant>,
    /// The final phase was counted in the job duration metric.
    counted: bool,
}

impl Run {
    fn new(uid: String, now: Instant) -> Self {
        Run {
            uid,
            progress: HashMap::new(),
            job_progress: now,
            sent: HashMap::new(),
            pending: Vec::new(),
            delayed: Vec::new(),
            secret: None,
            pushed: HashSet::new(),
            unheld: HashMap::new(),
            counted: false,
        }
    }

    /// Records what changed since the last look: a node whose phase or action flow changed
    /// made progress now.
    fn observe<J: NodeJob>(&mut self, job: &J, now: Instant) {
        let mut seen = HashSet::new();
        for t in job.tasks() {
            seen.insert(t.node().to_owned());
            let (p, flow) = (t.phase(), t.action_flow().len());
            match self.progress.get_mut(t.node()) {
                Some(pr) if pr.phase == p && pr.flow == flow => {}
                Some(pr) => {
                    *pr = Progress {
                        phase: p.to_owned(),
                        flow,
                        since: now,
                    };
                    self.job_progress = now;
                }
                None => {
                    self.progress.insert(
                        t.node().to_owned(),
                        Progress {
                            phase: p.to_owned(),
                            flow,
                            since: now,
                        },
                    );
                    self.job_progress = now;
                }
            }
        }
        self.progress.retain(|n, _| seen.contains(n));
    }
}

/// A change to make to a job's status.
#[derive(Debug, Clone)]
enum Intent {
    Init(Result<Vec<select::Chosen>, String>),
    Report(Inbound),
    Claim(String),
    Fail { node: String, reason: String },
    TimeOut { node: String, flow: usize },
}

/// What an intent did in the version written.
#[derive(Debug)]
enum Done {
    Nothing,
    Init,
    Report(Inbound, Result<Applied, Refusal>),
    Claimed(String),
    Failed(String),
    TimedOut(String),
}

/// The engine of job kind `J`.
pub(crate) struct Engine<J: NodeJob> {
    shared: Arc<Shared>,
    api: Api<J>,
    nodes: Api<Node>,
    jobs: HashMap<String, Arc<J>>,
    relist: Option<HashSet<String>>,
    listed: bool,
    early: Vec<Inbound>,
    runs: HashMap<String, Run>,
    inbox: mpsc::Receiver<Inbound>,
    dirty: BTreeSet<String>,
}

fn newer<J: Resource>(old: &J, new: &J) -> bool {
    let rv = |j: &J| {
        j.meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (rv(old), rv(new)) {
        (Some(a), Some(b)) => b >= a || old.meta().uid != new.meta().uid,
        _ => true,
    }
}

impl<J: NodeJob> Engine<J> {
    pub(crate) fn new(shared: Arc<Shared>, inbox: mpsc::Receiver<Inbound>) -> Self {
        Engine {
            api: Api::all(shared.client.clone()),
            nodes: Api::all(shared.client.clone()),
            shared,
            jobs: HashMap::new(),
            relist: None,
            listed: false,
            early: Vec::new(),
            runs: HashMap::new(),
            inbox,
            dirty: BTreeSet::new(),
        }
    }

    fn kind(&self) -> JobKind {
        J::KIND
    }

    /// Runs until `stop`.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut config = watcher::Config::default();
        if let Some(t) = self.shared.watch_timeout {
            config = config.timeout(t);
        }
        let mut events = kubeedge_api::watch::events(self.api.clone(), config).boxed();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        info!(kind = %self.kind(), controller = self.shared.controller, "node job engine started");
        loop {
            let due = self
                .runs
                .values()
                .flat_map(|r| r.delayed.iter().map(|(at, _)| *at))
                .min();
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(e) = events.next() => self.on_event(e),
                Some(m) = self.inbox.recv() => self.on_report(m),
                _ = sleep_until(due) => self.send_delayed().await,
                _ = tick.tick() => self.on_tick(),
            }
            // Take what else arrived meanwhile, so one write carries it.
            for _ in 0..1024 {
                match self.inbox.try_recv() {
                    Ok(m) => self.on_report(m),
                    Err(_) => break,
                }
            }
            if self.listed {
                self.work().await;
            }
        }
        info!(kind = %self.kind(), "node job engine stopped");
    }

    fn store(&mut self, job: J) {
        let name = job.name_any();
        let keep = self.jobs.get(&name).is_none_or(|old| newer(&**old, &job));
        if keep {
            self.jobs.insert(name.clone(), Arc::new(job));
        }
        self.dirty.insert(name);
    }

    fn on_event(&mut self, event: Event<J>) {
        match event {
            Event::Apply(job) => self.store(job),
            Event::Delete(job) => {
                let name = job.name_any();
                self.jobs.remove(&name);
                self.forget(&name);
            }
            Event::Init => self.relist = Some(HashSet::new()),
            Event::InitApply(job) => {
                if let Some(seen) = self.relist.as_mut() {
                    seen.insert(job.name_any());
                }
                self.store(job);
            }
            Event::InitDone => {
                if let Some(seen) = self.relist.take() {
                    let gone: Vec<String> = self
                        .jobs
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.jobs.remove(&name);
                        self.forget(&name);
                    }
                }
                if !self.listed {
                    self.listed = true;
                    info!(kind = %self.kind(), jobs = self.jobs.len(), "node jobs listed");
                    for m in std::mem::take(&mut self.early) {
                        self.on_report(m);
                    }
                }
                self.dirty.extend(self.jobs.keys().cloned());
            }
        }
    }

    /// Drops a job's memory; the pushed pull secret is removed from the nodes still holding
    /// it.
    fn forget(&mut self, name: &str) {
        if let Some(run) = self.runs.remove(name) {
            for r in run.pending {
                self.refuse(&r, &Refusal::UnknownJob);
            }
            self.remove_pushed(name, &run.secret, run.pushed);
        }
    }

    fn remove_pushed(&self, job: &str, secret: &Option<PullSecret>, nodes: HashSet<String>) {
        let Some(PullSecret::Ready { namespace, secret }) = secret else {
            return;
        };
        for node in nodes {
            if !self.shared.ownership.holds(&node) {
                continue;
            }
            let msg = wire::secret_message(
                &node,
                namespace,
                &crate::secret::edge_name(job),
                beehive::constants::operation::DELETE,
                secret,
            );
            let endpoint = self.shared.endpoint.clone();
            tokio::spawn(async move {
                if let Err(e) = endpoint.send(CLOUDHUB, msg).await {
                    debug!(error = %e, "pull secret removal not sent");
                }
            });
        }
    }

    fn on_report(&mut self, m: Inbound) {
        if !self.listed {
            if self.early.len() < MAX_EARLY {
                self.early.push(m);
            } else {
                self.refuse(&m, &Refusal::QueueFull);
            }
            return;
        }
        let job_name = m.up.task.job.clone();
        let Some(job) = self.jobs.get(&job_name).cloned() else {
            self.refuse(&m, &Refusal::UnknownJob);
            return;
        };
        if job.meta().deletion_timestamp.is_some() {
            self.refuse(&m, &Refusal::UnknownJob);
            return;
        }
        // Decided early on the newest copy, so that a hostile flood costs no write; decided
        // again on the version written.
        let task = job.tasks().iter().find(|t| t.node() == m.up.task.node);
        if !task.is_some_and(status::was_sent) {
            self.refuse(&m, &Refusal::NotSent);
            return;
        }
        let now = Instant::now();
        let uid = job.uid().unwrap_or_default();
        let run = self
            .runs
            .entry(job_name.clone())
            .or_insert_with(|| Run::new(uid, now));
        if run.pending.len() >= MAX_PENDING_PER_JOB {
            self.refuse(&m, &Refusal::TooMany);
            return;
        }
        run.pending.push(m);
        self.dirty.insert(job_name);
    }

    fn refuse(&mut self, m: &Inbound, why: &Refusal) {
        self.shared.metrics.report(Err(why));
        let node = &m.up.task.node;
        if why.is_denial() && self.shared.warn_due(node) {
            warn!(node, task = %m.up.task, action = %m.up.report.action, reason = %why, "node job report refused");
            return;
        }
        debug!(node, task = %m.up.task, action = %m.up.report.action, reason = %why, "node job report refused");
    }

    fn on_tick(&mut self) {
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for (name, job) in &self.jobs {
            *counts.entry(job.phase().to_owned()).or_default() += 1;
            let p = job.phase();
            if job_is_running(p)
                || (self.shared.controller && (p.is_empty() || !job_is_final(J::KIND, p)))
                || self.runs.get(name).is_some_and(|r| !r.pending.is_empty())
            {
                self.dirty.insert(name.clone());
            }
        }
        self.shared.metrics.set_jobs(J::KIND, counts);
    }

    async fn work(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for name in dirty {
            self.reconcile(&name).await;
        }
    }

    async fn reconcile(&mut self, name: &str) {
        let Some(job) = self.jobs.get(name).cloned() else {
            self.forget(name);
            return;
        };
        let finalizer = J::KIND.finalizer();
        let has_finalizer = job.finalizers().iter().any(|f| f == finalizer);
        if job.meta().deletion_timestamp.is_some() {
            if self.runs.contains_key(name) {
                info!(kind = %J::KIND, job = name, "job deleted: no further node is sent");
                self.forget(name);
            }
            if self.shared.controller && has_finalizer {
                self.set_finalizer(&job, false).await;
            }
            return;
        }
        if self.shared.controller && !has_finalizer {
            self.set_finalizer(&job, true).await;
        }
        let Some(job) = self.jobs.get(name).cloned() else {
            return;
        };
        if job.phase().is_empty() {
            if self.shared.controller {
                self.initialise(&job).await;
            }
            return;
        }
        let now = Instant::now();
        let uid = job.uid().unwrap_or_default();
        let run = self
            .runs
            .entry(name.to_owned())
            .or_insert_with(|| Run::new(uid.clone(), now));
        if run.uid != uid {
            *run = Run::new(uid, now);
        }
        run.observe(&*job, now);
        if job_is_running(job.phase()) && job.pull_secret().is_some() && run.secret.is_none() {
            let secret = self.pull_secret(&*job).await;
            let Some(run) = self.runs.get_mut(name) else {
                return;
            };
            match secret {
                Ok(s) => run.secret = Some(s),
                Err(e) => {
                    warn!(kind = %J::KIND, job = name, error = %e, "cannot read the pull secret; trying again");
                    return;
                }
            }
        }
        let intents = self.plan(name, &job, now);
        let aggregate = self.shared.controller && !job_is_final(J::KIND, job.phase());
        if intents.is_empty() && !aggregate {
            return;
        }
        self.write(name, intents).await;
    }

    /// Adds (`true`) or removes the job controller's finalizer with a merge patch that
    /// carries the resource version: a concurrent change makes it fail, and the next event
    /// tries again.
    async fn set_finalizer(&mut self, job: &J, add: bool) {
        let name = job.name_any();
        let f = J::KIND.finalizer();
        let mut list: Vec<String> = job
            .finalizers()
            .iter()
            .filter(|x| *x != f)
            .cloned()
            .collect();
        if add {
            list.push(f.to_owned());
        }
        let patch = json!({"metadata": {
            "resourceVersion": job.resource_version(),
            "finalizers": list,
        }});
        match self
            .api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(j) => self.store(j),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                debug!(kind = %J::KIND, job = %name, code = s.code, "finalizer not changed; the next event retries");
            }
            Err(e) => {
                warn!(kind = %J::KIND, job = %name, error = %e, "cannot change the finalizer; retrying");
            }
        }
    }

    /// Chooses the nodes of a new job and writes `Init`, or `Failure` with the reason.
    async fn initialise(&mut self, job: &J) {
        let name = job.name_any();
        let chosen = match self.choose(job).await {
            Ok(c) => Ok(c),
            Err(SelectError::Refused(reason)) => Err(reason),
            Err(SelectError::Unavailable(e)) => {
                warn!(kind = %J::KIND, job = %name, error = %e, "cannot read the nodes; trying again");
                return;
            }
        };
        match &chosen {
            Ok(c) => {
                info!(kind = %J::KIND, job = %name, nodes = c.len(), pending = c.iter().filter(|n| n.phase == phase::PENDING).count(), "job initialised")
            }
            Err(reason) => warn!(kind = %J::KIND, job = %name, %reason, "job refused"),
        }
        self.write(&name, vec![Intent::Init(chosen)]).await;
    }

    async fn choose(&self, job: &J) -> Result<Vec<select::Chosen>, SelectError> {
        spec::job_name(&job.name_any()).map_err(SelectError::Refused)?;
        spec::settings(&job.common()).map_err(SelectError::Refused)?;
        job.check_spec().map_err(SelectError::Refused)?;
        select::choose(&self.nodes, job.targets()).await
    }

    /// Reads the pull secret: `Err` for a transient failure (retried), `Unusable` when the
    /// job's nodes should fail with the reason.
    async fn pull_secret(&self, job: &J) -> Result<PullSecret, kube::Error> {
        let Some((ns, name)) = job.pull_secret() else {
            return Ok(PullSecret::Unusable("no pull secret".into()));
        };
        let api: Api<Secret> = Api::namespaced(self.shared.client.clone(), ns);
        let unusable = |why: String| {
            PullSecret::Unusable(format!("cannot use imageSecrets {ns}/{name}: {why}"))
        };
        match api.get_opt(name).await {
            Ok(Some(s)) => Ok(match crate::secret::auth_config(&s, job.images()) {
                Ok(auth) => PullSecret::Ready {
                    namespace: ns.to_owned(),
                    secret: crate::secret::edge_secret(ns, &job.name_any(), &auth),
                },
                Err(why) => unusable(why),
            }),
            Ok(None) => Ok(unusable("the Secret does not exist".into())),
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(unusable(format!(
                "cloudcore may not read it ({})",
                s.message
            ))),
            Err(e) => Err(e),
        }
    }

    /// What to change in a running job now: reports waiting, timeouts, and the next nodes to
    /// send (or fail) within this replica's share of `concurrency`.
    fn plan(&mut self, name: &str, job: &J, now: Instant) -> Vec<Intent> {
        let ownership = self.shared.ownership.clone();
        let Some(run) = self.runs.get_mut(name) else {
            return Vec::new();
        };
        let mut intents: Vec<Intent> = run.pending.drain(..).map(Intent::Report).collect();
        if !job_is_running(job.phase()) {
            return intents;
        }
        let settings = spec::settings_or_default(&job.common());
        let mut timing_out = HashSet::new();
        for t in job.tasks() {
            let node = t.node();
            let p = NodePhase::of(t.phase());
            if p.is_terminal() {
                continue;
            }
            let since = match p {
                // Waiting for a slot here is not stalling; waiting for another replica that
                // makes no progress at all is.
                NodePhase::Pending if ownership.holds(node) => continue,
                NodePhase::Pending if ownership.held_elsewhere(node) => run.job_progress,
                NodePhase::Pending => continue,
                _ => run.progress.get(node).map_or(now, |pr| pr.since),
            };
            if now.duration_since(since) >= settings.timeout {
                timing_out.insert(node.to_owned());
                intents.push(Intent::TimeOut {
                    node: node.to_owned(),
                    flow: t.action_flow().len(),
                });
            }
        }
        // A node in flight takes a slot of the replica that holds it, or that its Node names
        // (after a restart, before it reconnected), or that sent it, until its task ends.
        let mine = |n: &str| {
            ownership.holds(n)
                || run.sent.contains_key(n)
                || ownership.holder(n).as_deref() == Some(ownership.me())
        };
        let in_flight = job
            .tasks()
            .iter()
            .filter(|t| !NodePhase::of(t.phase()).is_terminal() && t.phase() != phase::PENDING)
            .filter(|t| !timing_out.contains(t.node()))
            .filter(|t| mine(t.node()))
            .count();
        let mut free = settings.concurrency.saturating_sub(in_flight);
        let mut unheld = HashMap::new();
        for t in job.tasks() {
            let node = t.node();
            if t.phase() != phase::PENDING || timing_out.contains(node) {
                continue;
            }
            let held_here = ownership.holds(node);
            if !held_here && !ownership.held_elsewhere(node) {
                let since = run.unheld.get(node).copied().unwrap_or(now);
                unheld.insert(node.to_owned(), since);
                if now.duration_since(since) >= UNHELD_GRACE {
                    intents.push(Intent::Fail {
                        node: node.to_owned(),
                        reason: status::not_connected(node),
                    });
                }
                continue;
            }
            if held_here {
                if let Some(PullSecret::Unusable(reason)) = &run.secret {
                    intents.push(Intent::Fail {
                        node: node.to_owned(),
                        reason: reason.clone(),
                    });
                } else if free > 0 {
                    intents.push(Intent::Claim(node.to_owned()));
                    free -= 1;
                }
            }
        }
        run.unheld = unheld;
        intents
    }

    /// Applies `intents` to the newest copy of the job and writes the status if anything
    /// changed; on a conflict reads the job again and re-applies them. Then acts on what the
    /// written version says.
    async fn write(&mut self, name: &str, intents: Vec<Intent>) {
        let Some(mut base) = self.jobs.get(name).map(|j| (**j).clone()) else {
            return;
        };
        for attempt in 0..WRITE_ATTEMPTS {
            let mut job = base.clone();
            let mut done = Vec::with_capacity(intents.len());
            let mut changed = false;
            for intent in &intents {
                let d = apply(&mut job, intent.clone());
                changed |= matches!(
                    &d,
                    Done::Init
                        | Done::Claimed(_)
                        | Done::Failed(_)
                        | Done::TimedOut(_)
                        | Done::Report(_, Ok(Applied { changed: true, .. }))
                );
                done.push(d);
            }
            if self.shared.controller {
                let tolerance = spec::settings_or_default(&job.common()).tolerance;
                changed |= status::aggregate(&mut job, tolerance);
            }
            if !changed {
                self.finish(name, &base, done).await;
                return;
            }
            match self
                .api
                .replace_status(name, &PostParams::default(), &job)
                .await
            {
                Ok(written) => {
                    self.shared.metrics.write(J::KIND, "ok");
                    let written_phase = written.phase().to_owned();
                    let before = base.phase().to_owned();
                    self.store(written.clone());
                    if written_phase != before {
                        self.job_phase_changed(name, &written, &before);
                    }
                    self.finish(name, &written, done).await;
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    self.shared.metrics.write(J::KIND, "conflict");
                    debug!(kind = %J::KIND, job = name, attempt, "status conflict; reading the job again");
                    match self.api.get_opt(name).await {
                        Ok(Some(fresh)) => {
                            self.store(fresh.clone());
                            base = fresh;
                        }
                        Ok(None) => {
                            self.jobs.remove(name);
                            self.forget(name);
                            self.refuse_all(intents, &Refusal::UnknownJob);
                            return;
                        }
                        Err(e) => {
                            warn!(kind = %J::KIND, job = name, error = %e, "cannot read the job");
                            break;
                        }
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.jobs.remove(name);
                    self.forget(name);
                    self.refuse_all(intents, &Refusal::UnknownJob);
                    return;
                }
                Err(e) => {
                    self.shared.metrics.write(J::KIND, "error");
                    warn!(kind = %J::KIND, job = name, error = %e, "cannot write the job status; retrying");
                    break;
                }
            }
        }
        // Not written: reports wait for the next try; the rest is planned again.
        if let Some(run) = self.runs.get_mut(name) {
            for i in intents {
                if let Intent::Report(r) = i {
                    run.pending.push(r);
                }
            }
        }
    }

    fn refuse_all(&mut self, intents: Vec<Intent>, why: &Refusal) {
        for i in intents {
            if let Intent::Report(r) = i {
                self.refuse(&r, why);
            }
        }
    }

    fn job_phase_changed(&mut self, name: &str, job: &J, before: &str) {
        let now_phase = job.phase();
        info!(kind = %J::KIND, job = name, from = before, to = now_phase, reason = job.reason(), "job phase");
        if (now_phase == phase::COMPLETED || now_phase == phase::FAILURE)
            && let Some(run) = self.runs.get_mut(name)
            && !std::mem::replace(&mut run.counted, true)
            && let Some(created) = job.meta().creation_timestamp.as_ref()
        {
            let secs = (Timestamp::now().as_second() - created.0.as_second()).max(0);
            self.shared
                .metrics
                .job_seconds
                .get_or_create(&KindLabel {
                    kind: J::KIND.api_kind(),
                })
                .observe(secs as f64);
        }
    }

    /// Acts on what the written (or unchanged) version says: sends claimed tasks, releases
    /// finished ones, counts.
    async fn finish(&mut self, name: &str, job: &J, done: Vec<Done>) {
        let now = Instant::now();
        let mut sends = Vec::new();
        let mut ended: Vec<(String, &'static str)> = Vec::new();
        for d in done {
            match d {
                Done::Nothing | Done::Init => {}
                Done::Report(m, Ok(a)) => {
                    self.shared.metrics.report(Ok(()));
                    if let Some(e) = &a.extend_error {
                        warn!(kind = %J::KIND, job = name, node = %m.up.task.node, error = %e, "report extend ignored");
                    }
                    debug!(kind = %J::KIND, job = name, node = %m.up.task.node, action = %m.up.report.action, succ = m.up.report.succ, "report applied");
                    if let Some(p) = a.ended {
                        ended.push((m.up.task.node.clone(), p));
                    }
                }
                Done::Report(m, Err(why)) => self.refuse(&m, &why),
                Done::Claimed(node) => sends.push(node),
                Done::Failed(node) => ended.push((node, phase::FAILURE)),
                Done::TimedOut(node) => {
                    warn!(kind = %J::KIND, job = name, node = %node, "node task timed out");
                    ended.push((node, phase::UNKNOWN));
                }
            }
        }
        let Some(run) = self.runs.get_mut(name) else {
            return;
        };
        let mut released = Vec::new();
        for (node, p) in ended {
            self.shared
                .metrics
                .results
                .get_or_create(&PhaseLabels {
                    kind: J::KIND.api_kind(),
                    phase: p.to_owned(),
                })
                .inc();
            if let Some(at) = run.sent.remove(&node) {
                self.shared
                    .metrics
                    .task_seconds
                    .get_or_create(&KindLabel {
                        kind: J::KIND.api_kind(),
                    })
                    .observe(now.duration_since(at).as_secs_f64());
            }
            if run.pushed.remove(&node) {
                released.push(node.clone());
            }
            info!(kind = %J::KIND, job = name, node = %node, phase = p, "node task ended");
            // A slot is free: the next node may go now rather than at the next tick.
            self.dirty.insert(name.to_owned());
        }
        let secret = run.secret.clone();
        if !released.is_empty() {
            self.remove_pushed(name, &secret, released.into_iter().collect());
        }
        for node in sends {
            self.send(name, job, &node, now).await;
        }
    }

    /// Sends `node` its task; an ImagePrePullJob's pull secret goes first and the task
    /// [`SECRET_LEAD`] later, so that the edge has stored it when the pull reads it.
    async fn send(&mut self, name: &str, job: &J, node: &str, now: Instant) {
        let Some(run) = self.runs.get_mut(name) else {
            return;
        };
        run.sent.insert(node.to_owned(), now);
        self.shared
            .metrics
            .sent
            .get_or_create(&KindLabel {
                kind: J::KIND.api_kind(),
            })
            .inc();
        if let Some(PullSecret::Ready { namespace, secret }) = &run.secret {
            let msg = wire::secret_message(
                node,
                namespace,
                &crate::secret::edge_name(name),
                beehive::constants::operation::INSERT,
                secret,
            );
            run.pushed.insert(node.to_owned());
            run.delayed.push((now + SECRET_LEAD, node.to_owned()));
            if let Err(e) = self.shared.endpoint.send(CLOUDHUB, msg).await {
                warn!(kind = %J::KIND, job = name, node, error = %e, "pull secret not sent");
            }
            return;
        }
        self.send_check(name, job, node).await;
    }

    async fn send_check(&self, name: &str, job: &J, node: &str) {
        let task = TaskResource::new(J::KIND, name, node);
        let mut spec = job.edge_spec();
        if let Some((ns, _)) = job.pull_secret() {
            spec["imagePrePullTemplate"]["imageSecrets"] =
                format!("{ns}/{}", crate::secret::edge_name(name)).into();
        }
        let msg = wire::task_message(&task, &spec);
        match self.shared.endpoint.send(CLOUDHUB, msg).await {
            Ok(()) => info!(kind = %J::KIND, job = name, node, "node task sent"),
            // The node stays InProgress and times out.
            Err(e) => warn!(kind = %J::KIND, job = name, node, error = %e, "node task not sent"),
        }
    }

    async fn send_delayed(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        for (name, run) in &mut self.runs {
            run.delayed.retain(|(at, node)| {
                if *at <= now {
                    due.push((name.clone(), node.clone()));
                    false
                } else {
                    true
                }
            });
        }
        for (name, node) in due {
            if let Some(job) = self.jobs.get(&name).cloned() {
                self.send_check(&name, &job, &node).await;
            }
        }
    }
}

/// Applies one intent to `job`.
fn apply<J: NodeJob>(job: &mut J, intent: Intent) -> Done {
    match intent {
        Intent::Init(chosen) => match status::init(job, chosen) {
            true => Done::Init,
            false => Done::Nothing,
        },
        Intent::Report(m) => {
            let r = status::report(job, &m.up.task.node, &m.up.report, m.received);
            Done::Report(m, r)
        }
        Intent::Claim(node) => match status::claim(job, &node) {
            true => Done::Claimed(node),
            false => Done::Nothing,
        },
        Intent::Fail { node, reason } => {
            let Some(i) = job.tasks().iter().position(|t| t.node() == node) else {
                return Done::Nothing;
            };
            let task = &mut job.tasks_mut()[i];
            if task.phase() != phase::PENDING {
                return Done::Nothing;
            }
            task.set(phase::FAILURE, &reason);
            Done::Failed(node)
        }
        Intent::TimeOut { node, flow } => match status::time_out(job, &node, flow) {
            true => Done::TimedOut(node),
            false => Done::Nothing,
        },
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
