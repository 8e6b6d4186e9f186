//! Liveness: whether the bus still runs its modules, as `/healthz` (and `/readyz`) report it.
//!
//! Three checks, each cheap and local (none asks the API server, so a slow cluster never makes
//! the kubelet restart cloudcore):
//! - `bus`: a heartbeat task on the thread the modules run on (the actix system's arbiter)
//!   has run within [`HealthOptions::bus_stall`]; a handler that blocks that thread stops it.
//! - `module:<name>` failed: the module stopped on its own for good (a panic without a restart
//!   policy, or its restarts used up) while the bus runs.
//! - `module:<name>` stuck: its mailbox has held messages for [`HealthOptions::module_stall`]
//!   without the module taking any of them (a handler waiting forever).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use beehive::{Bus, Endpoint};

/// How often the heartbeat runs and how long silence counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthOptions {
    /// Period of the heartbeat on the modules' thread.
    pub heartbeat: Duration,
    /// The `bus` check fails when the heartbeat has not run for this long.
    pub bus_stall: Duration,
    /// A module check fails when its mailbox has held messages for this long without the
    /// module taking one. Generous: a controller may wait on the API server inside a handler.
    pub module_stall: Duration,
}

impl Default for HealthOptions {
    fn default() -> Self {
        HealthOptions {
            heartbeat: Duration::from_secs(1),
            bus_stall: Duration::from_secs(10),
            module_stall: Duration::from_secs(60),
        }
    }
}

/// One named check and, when it fails, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// `bus` or `module:<name>`.
    pub name: String,
    /// Why it fails; `None` when it passes.
    pub problem: Option<String>,
}

/// The liveness of one process's bus; cheap to clone, clones share it. Healthy while nothing
/// is watched (starting, standing by for the leader Lease).
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    options: HealthOptions,
    /// When this was made: heartbeats are recorded as milliseconds since.
    origin: OnceInstant,
    /// The watched bus's current watch: its generation and a reader of its counters.
    watched: Mutex<Option<Watched>>,
    /// Milliseconds since `origin` of the last heartbeat of the current watch.
    beat: AtomicU64,
    /// Per module: the `received` count last seen and since when it has not moved.
    progress: Mutex<HashMap<String, (u64, Instant)>>,
}

#[derive(Debug)]
struct Watched {
    generation: u64,
    stats: Endpoint,
}

#[derive(Debug)]
struct OnceInstant(Instant);

impl Default for OnceInstant {
    fn default() -> Self {
        OnceInstant(Instant::now())
    }
}

impl Health {
    /// With the given thresholds.
    pub fn new(options: HealthOptions) -> Self {
        Health(Arc::new(Inner {
            options,
            ..Inner::default()
        }))
    }

    fn now_millis(&self) -> u64 {
        self.0.origin.0.elapsed().as_millis() as u64
    }

    /// Starts watching `bus`: from now the checks cover its modules, and a heartbeat task runs
    /// on the current actix arbiter (call it on the thread the bus's modules run on). Replaces
    /// an earlier watch.
    pub fn watch(&self, bus: &Bus) {
        let generation = {
            let mut watched = self.0.watched.lock().unwrap_or_else(|e| e.into_inner());
            let generation = watched.as_ref().map_or(1, |w| w.generation + 1);
            *watched = Some(Watched {
                generation,
                // The name the metrics collector reads the counters as: no second endpoint
                // appears among them.
                stats: bus.endpoint("metrics"),
            });
            generation
        };
        self.0.beat.store(self.now_millis(), Ordering::Release);
        self.0
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let weak: Weak<Inner> = Arc::downgrade(&self.0);
        let period = self.0.options.heartbeat;
        actix_rt::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let current = inner
                    .watched
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_some_and(|w| w.generation == generation);
                if !current {
                    return;
                }
                let now = inner.origin.0.elapsed().as_millis() as u64;
                inner.beat.store(now, Ordering::Release);
            }
        });
    }

    /// Stops watching (the bus is being shut down on purpose, or this replica stands by).
    pub fn unwatch(&self) {
        *self.0.watched.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Runs every check now.
    pub fn check(&self) -> Vec<Check> {
        let stats = {
            let watched = self.0.watched.lock().unwrap_or_else(|e| e.into_inner());
            match watched.as_ref() {
                Some(w) => w.stats.stats(),
                None => return Vec::new(),
            }
        };
        let options = self.0.options;
        let mut checks = Vec::with_capacity(stats.modules.len() + 1);
        let silent = Duration::from_millis(
            self.now_millis()
                .saturating_sub(self.0.beat.load(Ordering::Acquire)),
        );
        checks.push(Check {
            name: "bus".to_owned(),
            problem: (silent > options.bus_stall).then(|| {
                format!(
                    "the modules' thread has not run for {:.1} s",
                    silent.as_secs_f64()
                )
            }),
        });
        let now = Instant::now();
        let mut progress = self.0.progress.lock().unwrap_or_else(|e| e.into_inner());
        // Endpoints without a mailbox (senders only) have no module to check.
        for m in stats.modules.iter().filter(|m| m.capacity > 0) {
            let since = match progress.get_mut(&m.name) {
                Some((received, since)) if *received == m.received && m.depth > 0 => *since,
                Some(seen) => {
                    *seen = (m.received, now);
                    now
                }
                None => {
                    progress.insert(m.name.clone(), (m.received, now));
                    now
                }
            };
            let problem = if m.failed {
                Some("stopped on its own and will not be restarted".to_owned())
            } else if m.depth > 0 && now.duration_since(since) > options.module_stall {
                Some(format!(
                    "{} messages waiting and none taken for {:.1} s",
                    m.depth,
                    now.duration_since(since).as_secs_f64()
                ))
            } else {
                None
            };
            checks.push(Check {
                name: format!("module:{}", m.name),
                problem,
            });
        }
        checks
    }
}

/// The body Kubernetes components answer on their health endpoints: `ok` when every check
/// passes, else (and always when `verbose`) one `[+]name ok` / `[-]name failed: why` line per
/// check and a last line saying which endpoint failed.
pub fn report(endpoint: &str, checks: &[Check], verbose: bool) -> (bool, String) {
    let healthy = checks.iter().all(|c| c.problem.is_none());
    if healthy && !verbose {
        return (true, "ok".to_owned());
    }
    let mut body = String::new();
    for c in checks {
        let _ = match &c.problem {
            None => writeln!(body, "[+]{} ok", c.name),
            Some(why) => writeln!(body, "[-]{} failed: {why}", c.name),
        };
    }
    let _ = if healthy {
        write!(body, "{endpoint} check passed")
    } else {
        write!(body, "{endpoint} check failed")
    };
    (healthy, body)
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{SocketAddr, TcpStream};

    use actix::{Actor, ActorContext, AsyncContext, Context, Handler};
    use beehive::{Content, Message, Module};

    use super::*;
    use crate::ops::{Ops, Phase, serve};

    const FAST: HealthOptions = HealthOptions {
        heartbeat: Duration::from_millis(50),
        bus_stall: Duration::from_millis(800),
        module_stall: Duration::from_millis(500),
    };

    /// What the test module does with a message whose content is a string.
    struct Misbehaving {
        name: &'static str,
    }

    impl Actor for Misbehaving {
        type Context = Context<Self>;
    }

    impl Handler<Message> for Misbehaving {
        type Result = ();
        fn handle(&mut self, msg: Message, ctx: &mut Context<Self>) {
            match msg.content.as_string().as_deref() {
                // Stops on its own, as after a panic.
                Some("die") => ctx.stop(),
                // Blocks the thread every module runs on.
                Some("block") => std::thread::sleep(Duration::from_millis(2_500)),
                // Takes no further message, ever.
                Some("hold") => ctx.wait(actix::fut::wrap_future(std::future::pending::<()>())),
                _ => {}
            }
        }
    }

    impl Module for Misbehaving {
        fn name(&self) -> &str {
            self.name
        }
        fn group(&self) -> &str {
            "misbehaving"
        }
    }

    /// A bus with one module of `name`, watched by a health check, behind a monitor server.
    fn running(name: &'static str) -> (Bus, Health, SocketAddr) {
        let bus = Bus::new();
        bus.register(Misbehaving { name }).unwrap();
        bus.start().unwrap();
        let ops = Ops {
            health: Health::new(FAST),
            ..Ops::default()
        };
        ops.readiness.set(Phase::Ready);
        ops.health.watch(&bus);
        let health = ops.health.clone();
        let (addr, server) = serve("127.0.0.1:0", ops).unwrap();
        actix_rt::spawn(server);
        (bus, health, addr)
    }

    /// A blocking GET from any thread: status and body.
    fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, out.split_once("\r\n\r\n").unwrap().1.to_owned())
    }

    async fn get_async(addr: SocketAddr, path: &'static str) -> (u16, String) {
        tokio::task::spawn_blocking(move || get(addr, path))
            .await
            .unwrap()
    }

    fn say(text: &str) -> Message {
        Message::new().with_content(Content::string(text))
    }

    #[actix_rt::test]
    async fn a_module_that_stops_on_its_own_turns_healthz_and_readyz() {
        let (bus, _health, addr) = running("fragile");
        assert_eq!(get_async(addr, "/healthz").await, (200, "ok".to_owned()));
        assert_eq!(get_async(addr, "/readyz").await.0, 200);
        let (status, body) = get_async(addr, "/livez?verbose").await;
        assert_eq!(status, 200);
        assert!(body.contains("[+]bus ok\n[+]module:fragile ok\n"), "{body}");

        bus.endpoint("test")
            .send("fragile", say("die"))
            .await
            .unwrap();
        let began = Instant::now();
        let (status, body) = loop {
            let answer = get_async(addr, "/healthz").await;
            if answer.0 != 200 || began.elapsed() > Duration::from_secs(10) {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("[-]module:fragile failed: stopped on its own and will not be restarted"),
            "{body}"
        );
        assert!(body.ends_with("healthz check failed"), "{body}");
        let (status, body) = get_async(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(body.contains("[+]phase ok\n"), "{body}");
        assert!(body.contains("[-]module:fragile failed"), "{body}");
    }

    #[actix_rt::test]
    async fn a_blocked_module_thread_turns_healthz_until_it_runs_again() {
        let (bus, _health, addr) = running("blocker");
        // Asked from a thread of its own: the test's own task runs on the blocked thread.
        let polling = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let started = polling.clone();
        let poller = std::thread::spawn(move || {
            let began = Instant::now();
            let mut seen = Vec::new();
            while began.elapsed() < Duration::from_secs(20) {
                let (status, body) = get(addr, "/healthz");
                started.store(true, Ordering::Release);
                if seen.last().map(|(s, _)| *s) != Some(status) {
                    seen.push((status, body));
                }
                if seen.len() == 3 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        });
        while !polling.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        bus.endpoint("test")
            .send("blocker", say("block"))
            .await
            .unwrap();
        let seen = tokio::task::spawn_blocking(move || poller.join().unwrap())
            .await
            .unwrap();
        let statuses: Vec<u16> = seen.iter().map(|(s, _)| *s).collect();
        assert_eq!(statuses, [200, 503, 200], "{seen:?}");
        assert!(
            seen[1]
                .1
                .contains("[-]bus failed: the modules' thread has not run for"),
            "{seen:?}"
        );
    }

    #[actix_rt::test]
    async fn a_module_that_takes_no_more_messages_is_reported_stuck() {
        let (bus, health, addr) = running("waiter");
        let ep = bus.endpoint("test");
        ep.send("waiter", say("hold")).await.unwrap();
        ep.send("waiter", say("next")).await.unwrap();
        let began = Instant::now();
        let stuck = loop {
            let checks = health.check();
            let waiter = checks.iter().find(|c| c.name == "module:waiter").cloned();
            if let Some(Check {
                problem: Some(why), ..
            }) = waiter
            {
                break why;
            }
            assert!(began.elapsed() < Duration::from_secs(10), "{checks:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            stuck.starts_with("1 messages waiting and none taken for"),
            "{stuck}"
        );
        assert!(began.elapsed() >= FAST.module_stall);
        let (status, body) = get_async(addr, "/healthz").await;
        assert_eq!(status, 503);
        assert!(body.contains("[+]bus ok"), "the thread itself runs: {body}");
    }

    #[test]
    fn nothing_watched_is_healthy() {
        let health = Health::default();
        assert!(health.check().is_empty());
        assert_eq!(
            report("healthz", &health.check(), false),
            (true, "ok".to_owned())
        );
    }
}
