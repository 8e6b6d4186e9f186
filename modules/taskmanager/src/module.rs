//! The `taskmanager` beehive module: receives the edges' reports from cloudhub and runs one
//! engine per job kind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::{Endpoint, Message, Module};
use k8s_openapi::jiff::Timestamp;
use kubeedge_api::lifecycle::Lifecycle;
use kubeedge_api::names::TASKMANAGER;
use kubeedge_api::operations::v1alpha2::{ConfigUpdateJob, ImagePrePullJob, NodeUpgradeJob};
use kubeedge_api::queue::{
    DEFAULT_NODE_SHARE_DIVISOR, DEFAULT_NODE_SHARE_MIN, EnqueueError, Limit, Queue, QueueStats,
    node_share,
};
use kubeedge_api::replicas::Ownership;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::TaskManagerConfig;
use crate::engine::{Engine, Inbound, Shared};
use crate::kind::JobKind;
use crate::metrics::TaskManagerMetrics;
use crate::wire::{self, Refusal};

/// Reports waiting for one engine (after the shared queue).
const ENGINE_INBOX: usize = 256;

/// The taskmanager module: name and group `taskmanager`.
///
/// * **Job controller** (with `jobController`, the default): adds the finalizer, chooses
///   and checks the nodes (`Init`, or `Failure` with a reason an operator reads), derives the
///   job phase from the node results with the failure tolerance, removes the finalizer when
///   the job is deleted.
/// * **Executor**: sends each `Pending` node held by this replica its task (`Check` with the
///   spec), at most `concurrency` at a time, writing `InProgress` before it sends; fails nodes
///   no replica holds; times out nodes that make no progress for `timeoutSeconds` (default
///   300), which frees their slot.
/// * **Reports** (`UpdateNodeActionStatus`) are applied to the reporting node's entry only:
///   the node named in the report must be the session's (cloudhub puts it in front of the
///   resource), one of the job's, and sent its task; anything else is refused, logged and
///   counted. KubeEdge's v1alpha1 task traffic is dropped the same way.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use taskmanager::{TaskManager, TaskManagerConfig};
/// let bus = beehive::Bus::new();
/// let config = TaskManagerConfig { enable: true, ..TaskManagerConfig::default() };
/// let ownership = kubeedge_api::replicas::Ownership::new("10.0.0.1");
/// let tm = TaskManager::new(config, bus.endpoint("taskmanager"), client, ownership);
/// bus.register(tm).unwrap();
/// bus.start().unwrap();
/// # }
/// ```
pub struct TaskManager {
    config: TaskManagerConfig,
    shared: Arc<Shared>,
    life: Lifecycle,
    queue: Option<Queue>,
    stats: Arc<QueueStats>,
}

impl std::fmt::Debug for TaskManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl TaskManager {
    /// A taskmanager with `config`, sending through `endpoint`, talking to Kubernetes with
    /// `client`; `ownership` says which nodes this replica holds.
    pub fn new(
        config: TaskManagerConfig,
        endpoint: Endpoint,
        client: kube::Client,
        ownership: Ownership,
    ) -> Self {
        let capacity = config.buffer.task_status.max(1) as usize;
        let stats = QueueStats::new("taskStatus", capacity, 1).with_node_share(node_share(
            capacity,
            DEFAULT_NODE_SHARE_DIVISOR,
            DEFAULT_NODE_SHARE_MIN,
        ));
        TaskManager {
            shared: Arc::new(Shared {
                client,
                endpoint,
                ownership,
                controller: config.job_controller,
                metrics: TaskManagerMetrics::default(),
                watch_timeout: None,
                warned: Default::default(),
            }),
            config,
            life: Lifecycle::new(),
            queue: None,
            stats: Arc::new(stats),
        }
    }

    /// Server-side timeout of each job watch request (kube's default when unset).
    pub fn with_watch_timeout(mut self, timeout: Duration) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            s.watch_timeout = Some(timeout.as_secs().clamp(1, u64::from(u32::MAX)) as u32);
        }
        self
    }

    /// The metrics; the handle stays valid for the module's life.
    pub fn metrics(&self) -> TaskManagerMetrics {
        self.shared.metrics.clone()
    }

    /// The engines and the report queue: after `bus.shutdown()`, `lifecycle().join(timeout)`
    /// waits for them.
    pub fn lifecycle(&self) -> Lifecycle {
        self.life.clone()
    }

    fn refuse(&self, why: &Refusal, msg: &Message) {
        self.shared.metrics.report(Err(why));
        debug!(resource = %msg.route.resource, operation = %msg.route.operation, reason = %why, "task message dropped");
    }
}

impl Actor for TaskManager {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let mut inboxes: HashMap<JobKind, mpsc::Sender<Inbound>> = HashMap::new();
        for kind in JobKind::ALL {
            let (tx, rx) = mpsc::channel(ENGINE_INBOX);
            inboxes.insert(kind, tx);
            let stop = self.life.token().clone();
            let shared = self.shared.clone();
            match kind {
                JobKind::NodeUpgrade => self
                    .life
                    .spawn(Engine::<NodeUpgradeJob>::new(shared, rx).run(stop)),
                JobKind::ImagePrePull => self
                    .life
                    .spawn(Engine::<ImagePrePullJob>::new(shared, rx).run(stop)),
                JobKind::ConfigUpdate => self
                    .life
                    .spawn(Engine::<ConfigUpdateJob>::new(shared, rx).run(stop)),
            }
        }
        let inboxes = Arc::new(inboxes);
        let shared = self.shared.clone();
        let queue = Queue::start(
            self.stats.clone(),
            Limit::new(1),
            &self.life,
            Duration::from_secs(2),
            move |msg| {
                let (inboxes, shared) = (inboxes.clone(), shared.clone());
                async move {
                    let up = match wire::parse_upstream(&msg) {
                        Ok(up) => up,
                        Err(why) => {
                            shared.metrics.report(Err(&why));
                            let node =
                                kubeedge_api::node_of(&msg.route.resource).unwrap_or_default();
                            if why.is_denial() && shared.warn_due(node) {
                                warn!(resource = %msg.route.resource, reason = %why, "node job report refused");
                            } else {
                                debug!(resource = %msg.route.resource, operation = %msg.route.operation, reason = %why, "task message dropped");
                            }
                            return false;
                        }
                    };
                    let Some(tx) = inboxes.get(&up.task.kind) else {
                        return false;
                    };
                    let inbound = Inbound {
                        up,
                        received: Timestamp::now(),
                    };
                    tx.send(inbound).await.is_ok()
                }
            },
            |_msg| async {},
        );
        self.queue = Some(queue);
        info!(
            controller = self.config.job_controller,
            "taskmanager started"
        );
    }
}

impl Handler<Message> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        let Some(queue) = &self.queue else {
            return;
        };
        let Some(node) = kubeedge_api::node_of(&msg.route.resource).map(str::to_owned) else {
            self.refuse(&Refusal::NoSession, &msg);
            return;
        };
        match queue.try_enqueue_from(&node, msg) {
            Ok(()) => {}
            Err(e) => {
                let over_share = matches!(e, EnqueueError::OverShare { .. });
                let msg = e.into_message();
                self.shared.metrics.report(Err(&Refusal::QueueFull));
                if over_share {
                    debug!(node, resource = %msg.route.resource, "node job report dropped: the node holds its share of the queue");
                } else {
                    warn!(node, resource = %msg.route.resource, "node job report dropped: the queue is full");
                }
            }
        }
    }
}

impl Module for TaskManager {
    fn name(&self) -> &str {
        TASKMANAGER
    }

    fn group(&self) -> &str {
        TASKMANAGER
    }

    fn enabled(&self) -> bool {
        self.config.enable
    }

    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.life.stop();
    }
}
