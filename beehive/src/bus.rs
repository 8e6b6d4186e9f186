//! The bus: registry of modules and groups, start, shutdown.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use actix::AsyncContext;
use actix::fut::{ActorFutureExt, wrap_future};

use tokio::sync::{Notify, oneshot};
use tracing::{error, info, warn};

use crate::FastMap;
use crate::config::BusConfig;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::mailbox::{Inbox, Mailbox, MailboxStream};
use crate::module::{Module, RestartPolicy};
use crate::registry::{RUNNING, Registered, SHUT_DOWN, SHUTTING_DOWN, Shared};
use crate::stats::{BusStats, ModuleStatsSnapshot, inc};
use crate::waiters::Waiters;

/// Starts one actor instance on a mailbox stream and returns its stop event (`true` when the
/// bus asked it to stop); `None` when no instance is left to start.
type Spawner = Box<dyn FnMut(MailboxStream, RunHandle) -> Option<oneshot::Receiver<bool>>>;

/// Lifecycle of one started module (shared between the bus and its watcher task).
#[derive(Default)]
struct RunState {
    stop: RefCell<Option<oneshot::Sender<()>>>,
    stopped: Cell<bool>,
    done: Notify,
}

type RunHandle = Rc<RunState>;

struct Slot {
    name: Arc<str>,
    mailbox: Arc<Mailbox>,
    spawner: Option<Spawner>,
    policy: Option<RestartPolicy>,
    run: RunHandle,
    /// An inbox is read by its owner, not by an actor; shutdown does not wait for it.
    inbox: bool,
}

#[derive(Default)]
struct Local {
    order: Vec<Slot>,
    started: bool,
}

/// A message bus: modules by name and group, each with a bounded mailbox.
///
/// The bus is a value, so a process (or a test) can run several. It lives on the thread that
/// made it (it keeps the modules' constructors); hand [`Endpoint`]s to other threads. Start,
/// shutdown and signal handling need a running actix `System`.
///
/// * **Start order:** registration order, after every registered mailbox exists.
/// * **Shutdown order:** reverse registration order; see [`Bus::shutdown`].
#[derive(Clone)]
pub struct Bus {
    shared: Arc<Shared>,
    local: Rc<RefCell<Local>>,
}

impl fmt::Debug for Bus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bus")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl Default for Bus {
    fn default() -> Self {
        Bus::new()
    }
}

/// Fires once when an actor's context is dropped, saying whether the bus asked it to stop.
struct StopGuard {
    requested: Rc<Cell<bool>>,
    event: Option<oneshot::Sender<bool>>,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        if let Some(tx) = self.event.take() {
            let _ = tx.send(self.requested.get());
        }
    }
}

fn spawn_actor<M: Module>(
    module: M,
    stream: MailboxStream,
    run: RunHandle,
) -> oneshot::Receiver<bool> {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (event_tx, event_rx) = oneshot::channel::<bool>();
    *run.stop.borrow_mut() = Some(stop_tx);
    let requested = Rc::new(Cell::new(false));
    let guard = StopGuard {
        requested: requested.clone(),
        event: Some(event_tx),
    };
    M::create(move |ctx| {
        ctx.add_message_stream(stream);
        ctx.spawn(
            wrap_future::<_, M>(async move {
                let _ = stop_rx.await;
            })
            .map(move |(), act, ctx| {
                requested.set(true);
                act.shutdown(ctx);
                actix::ActorContext::stop(ctx);
            }),
        );
        // Owned by the context: dropped (and fires) only when the actor is gone.
        ctx.spawn(wrap_future::<_, M>(async move {
            let _guard = guard;
            futures::future::pending::<()>().await
        }));
        module
    });
    event_rx
}

impl Bus {
    /// A bus with default settings.
    pub fn new() -> Self {
        Bus::with_config(BusConfig::default())
    }

    /// A bus with the given settings.
    pub fn with_config(config: BusConfig) -> Self {
        Bus {
            shared: Arc::new(Shared {
                config,
                modules: FastMap::default(),
                groups: FastMap::default(),
                stats: FastMap::default(),
                waiters: Waiters::default(),
                unmatched_responses: AtomicU64::new(0),
                state: AtomicU8::new(RUNNING),
            }),
            local: Rc::new(RefCell::new(Local::default())),
        }
    }

    /// A handle that sends as `name`. The name need not be registered: an endpoint can send
    /// and answer, it only needs a module registration to receive.
    pub fn endpoint(&self, name: &str) -> Endpoint {
        Endpoint::new(self.shared.clone(), name)
    }

    fn add_mailbox(&self, name: &str, group: &str, capacity: usize) -> Result<Arc<Mailbox>> {
        if self.shared.is_shutting_down() {
            return Err(Error::Shutdown { message: None });
        }
        let key: Arc<str> = Arc::from(name);
        match self.shared.modules.entry(key.clone()) {
            dashmap::mapref::entry::Entry::Occupied(_) => {
                Err(Error::DuplicateModule(name.to_owned()))
            }
            dashmap::mapref::entry::Entry::Vacant(v) => {
                let stats = self.shared.stats_for(name);
                stats.removed.store(false, Ordering::Release);
                stats.failed.store(false, Ordering::Release);
                let mailbox = Mailbox::new(key, capacity, stats);
                v.insert(Registered::Enabled(mailbox.clone()));
                if !group.is_empty() {
                    self.shared.join(group, &mailbox);
                }
                Ok(mailbox)
            }
        }
    }

    fn add_disabled(&self, name: &str) -> Result<()> {
        match self.shared.modules.entry(Arc::from(name)) {
            dashmap::mapref::entry::Entry::Occupied(_) => {
                Err(Error::DuplicateModule(name.to_owned()))
            }
            dashmap::mapref::entry::Entry::Vacant(v) => {
                v.insert(Registered::Disabled);
                info!(module = name, "module is disabled, not registered");
                Ok(())
            }
        }
    }

    /// Registers a module. Refuses a name that is already registered. A disabled module is
    /// recorded (sends to it fail with [`Error::ModuleDisabled`]) but gets no mailbox and is
    /// never started. If the bus has started, the module starts now.
    pub fn register<M: Module>(&self, module: M) -> Result<()> {
        self.register_inner(module, None, None::<fn() -> M>)
    }

    /// Registers a module made by `factory`, restarted under `policy` when it stops on its own
    /// (panic or `ctx.stop()`). The mailbox and what is queued in it survive restarts.
    pub fn register_restartable<M, F>(&self, mut factory: F, policy: RestartPolicy) -> Result<()>
    where
        M: Module,
        F: FnMut() -> M + 'static,
    {
        let first = factory();
        self.register_inner(first, Some(policy), Some(factory))
    }

    fn register_inner<M, F>(
        &self,
        module: M,
        policy: Option<RestartPolicy>,
        factory: Option<F>,
    ) -> Result<()>
    where
        M: Module,
        F: FnMut() -> M + 'static,
    {
        let name = module.name().to_owned();
        if !module.enabled() {
            return self.add_disabled(&name);
        }
        let mailbox = self.add_mailbox(&name, module.group(), module.mailbox_capacity())?;
        let mut first = Some(module);
        let mut factory = factory;
        let spawner: Spawner = Box::new(move |stream, run| {
            let module = match first.take() {
                Some(m) => m,
                None => factory.as_mut()?(),
            };
            run.stopped.set(false);
            Some(spawn_actor(module, stream, run))
        });
        info!(module = %name, "module registered");
        let slot = Slot {
            name: Arc::from(name.as_str()),
            mailbox,
            spawner: Some(spawner),
            policy,
            run: RunHandle::default(),
            inbox: false,
        };
        let started = self.local.borrow().started;
        let index = {
            let mut local = self.local.borrow_mut();
            local.order.push(slot);
            local.order.len() - 1
        };
        if started {
            self.start_slot(index)?;
        }
        Ok(())
    }

    /// Registers a module that is not an actor: its messages are read from the returned
    /// [`Inbox`]. Refuses a duplicate name.
    pub fn register_inbox(&self, name: &str, group: &str, capacity: usize) -> Result<Inbox> {
        let capacity = if capacity == 0 {
            self.shared.config.default_capacity
        } else {
            capacity
        };
        let mailbox = self.add_mailbox(name, group, capacity)?;
        mailbox.mark_inbox();
        let stream = mailbox.take_stream().ok_or(Error::Stopped {
            module: name.to_owned(),
            message: None,
        })?;
        self.local.borrow_mut().order.push(Slot {
            name: Arc::from(name),
            mailbox,
            spawner: None,
            policy: None,
            run: RunHandle::default(),
            inbox: true,
        });
        Ok(Inbox::new(stream))
    }

    /// Adds a registered module to another group.
    pub fn join_group(&self, module: &str, group: &str) -> Result<()> {
        match self.shared.lookup(module) {
            Ok(mailbox) => {
                self.shared.join(group, &mailbox);
                Ok(())
            }
            Err(e) => Err(e.into_error(module, None)),
        }
    }

    /// Removes a module from a group; later group sends skip it.
    pub fn leave_group(&self, module: &str, group: &str) {
        self.shared.leave(group, module);
    }

    /// Starts every registered module in registration order. Needs a running actix system.
    pub fn start(&self) -> Result<()> {
        if actix::System::try_current().is_none() {
            return Err(Error::NoSystem);
        }
        let count = {
            let mut local = self.local.borrow_mut();
            if local.started {
                return Ok(());
            }
            local.started = true;
            local.order.len()
        };
        for index in 0..count {
            self.start_slot(index)?;
        }
        Ok(())
    }

    fn start_slot(&self, index: usize) -> Result<()> {
        let (name, mailbox, mut spawner, run, policy) = {
            let mut local = self.local.borrow_mut();
            let slot = &mut local.order[index];
            let Some(spawner) = slot.spawner.take() else {
                return Ok(());
            };
            (
                slot.name.clone(),
                slot.mailbox.clone(),
                spawner,
                slot.run.clone(),
                slot.policy.clone(),
            )
        };
        let Some(stream) = mailbox.take_stream() else {
            return Err(Error::Stopped {
                module: name.to_string(),
                message: None,
            });
        };
        let Some(events) = spawner(stream, run.clone()) else {
            return Ok(());
        };
        info!(module = %name, "module started");
        let shared = self.shared.clone();
        actix::spawn(watch(name, mailbox, spawner, run, policy, events, shared));
        Ok(())
    }

    /// Stops the bus:
    /// 1. every pending sync request is woken with [`Error::Shutdown`]; new sync requests fail;
    /// 2. modules stop in reverse registration order. For each: its mailbox stops accepting
    ///    (senders, including those waiting for room, get [`Error::Stopped`]), the messages
    ///    already queued are handled (up to [`BusConfig::drain_timeout`]), then
    ///    [`Module::shutdown`] runs once and the actor stops;
    /// 3. every later send fails with [`Error::Shutdown`], which hands its message back.
    ///
    /// Calling it again does nothing.
    pub async fn shutdown(&self) {
        if self
            .shared
            .state
            .compare_exchange(RUNNING, SHUTTING_DOWN, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        info!("bus shutting down");
        self.shared.waiters.shutdown();
        let slots: Vec<(Arc<str>, Arc<Mailbox>, RunHandle, bool)> = self
            .local
            .borrow()
            .order
            .iter()
            .rev()
            .map(|s| (s.name.clone(), s.mailbox.clone(), s.run.clone(), s.inbox))
            .collect();
        for (name, mailbox, run, inbox) in slots {
            self.stop_module(&name, &mailbox, &run, inbox).await;
        }
        self.shared.state.store(SHUT_DOWN, Ordering::Release);
        info!("bus shut down");
    }

    async fn stop_module(&self, name: &str, mailbox: &Arc<Mailbox>, run: &RunHandle, inbox: bool) {
        mailbox.close();
        self.shared.leave_all(name);
        // An inbox is read by its owner, a parked mailbox by nobody: neither can be waited for.
        if inbox || mailbox.is_parked() {
            return;
        }
        let cfg = &self.shared.config;
        if tokio::time::timeout(cfg.drain_timeout, mailbox.wait_drained())
            .await
            .is_err()
        {
            warn!(
                module = name,
                left = mailbox.depth(),
                "mailbox not drained before the timeout"
            );
        }
        let stop = run.stop.borrow_mut().take();
        if let Some(stop) = stop {
            let _ = stop.send(());
            let done = async {
                loop {
                    let notified = run.done.notified();
                    if run.stopped.get() {
                        return;
                    }
                    notified.await;
                }
            };
            if tokio::time::timeout(cfg.stop_timeout, done).await.is_err() {
                warn!(module = name, "module did not stop before the timeout");
            }
        }
        info!(module = name, "module stopped");
    }

    /// Removes a module: it leaves all groups, its mailbox stops accepting, what is queued is
    /// handled, its shutdown hook runs and it stops. Its name can be registered again.
    pub async fn remove(&self, module: &str) -> Result<()> {
        let slot = {
            let mut local = self.local.borrow_mut();
            let pos = local.order.iter().position(|s| &*s.name == module);
            pos.map(|p| local.order.remove(p))
        };
        let removed = self.shared.modules.remove(module);
        if removed.is_some()
            && let Some(stats) = self.shared.stats.get(module)
        {
            stats.removed.store(true, Ordering::Release);
        }
        match (slot, removed) {
            (Some(slot), _) => {
                self.stop_module(module, &slot.mailbox, &slot.run, slot.inbox)
                    .await;
                Ok(())
            }
            (None, Some(_)) => Ok(()),
            (None, None) => Err(Error::UnknownModule {
                module: module.to_owned(),
                message: None,
            }),
        }
    }

    /// Waits for SIGINT or SIGTERM, then shuts the bus down.
    pub async fn run_until_signal(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => info!(signal = "SIGTERM", "got os signal"),
            _ = int.recv() => info!(signal = "SIGINT", "got os signal"),
        }
        self.shutdown().await;
        Ok(())
    }

    /// True once [`Bus::shutdown`] has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.is_shutting_down()
    }

    /// Counters of every module and endpoint.
    pub fn stats(&self) -> BusStats {
        self.shared.stats()
    }

    /// Counters of one module or endpoint.
    pub fn module_stats(&self, name: &str) -> Option<ModuleStatsSnapshot> {
        self.shared
            .stats()
            .modules
            .into_iter()
            .find(|m| m.name == name)
    }
}

/// Follows one module: records its stop, and restarts it under its policy when it stopped on
/// its own.
async fn watch(
    name: Arc<str>,
    mailbox: Arc<Mailbox>,
    mut spawner: Spawner,
    run: RunHandle,
    policy: Option<RestartPolicy>,
    mut events: oneshot::Receiver<bool>,
    shared: Arc<Shared>,
) {
    let mut attempt = 0u32;
    loop {
        let requested = (&mut events).await.unwrap_or(false);
        let mark_stopped = |run: &RunHandle| {
            run.stopped.set(true);
            run.done.notify_waiters();
        };
        if requested || shared.is_shutting_down() {
            mark_stopped(&run);
            return;
        }
        error!(module = %name, "module stopped on its own");
        let Some(policy) = policy.as_ref() else {
            // Nobody will read this mailbox again: make senders fail instead of block.
            mailbox.close();
            mailbox.stats.failed.store(true, Ordering::Release);
            mark_stopped(&run);
            return;
        };
        attempt += 1;
        if policy.max_restarts.is_some_and(|max| attempt > max) {
            error!(module = %name, restarts = attempt - 1, "module gave up restarting");
            mailbox.close();
            mailbox.stats.failed.store(true, Ordering::Release);
            mark_stopped(&run);
            return;
        }
        let wait = policy.backoff(attempt);
        warn!(module = %name, attempt, wait_ms = wait.as_millis() as u64, "restarting module");
        tokio::time::sleep(wait).await;
        if shared.is_shutting_down() {
            mark_stopped(&run);
            return;
        }
        let Some(stream) = mailbox.take_stream() else {
            mark_stopped(&run);
            return;
        };
        let Some(next) = spawner(stream, run.clone()) else {
            mark_stopped(&run);
            return;
        };
        events = next;
        inc(&mailbox.stats.restarts);
    }
}
