//! The agent: dials, serves the tunnel, redials with jittered back-off, until shut down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use beehive::Backoff;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::config::{AgentOptions, EdgeStreamConfig};
use super::dial::dial;
use super::link::Ctx;
use super::stats::{AgentStats, Stats};
use super::tunnel;

/// The edge stream agent (edgecore's edgestream). Build it, then [`StreamAgent::spawn`].
#[derive(Debug)]
pub struct StreamAgent {
    config: EdgeStreamConfig,
    options: AgentOptions,
    tls: Arc<rustls::ClientConfig>,
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    stop: CancellationToken,
    /// The dial loop.
    task: JoinHandle<()>,
    /// What the tunnels run: writers, pings, stream relays.
    tasks: TaskTracker,
    /// How long [`AgentHandle::shutdown`] waits for the stream relays.
    grace: Duration,
    connected: watch::Receiver<bool>,
    stats: Arc<Stats>,
}

impl StreamAgent {
    /// An agent dialing `config.server` as `options.node_name` with client TLS `tls`
    /// (see [`super::client_tls`]).
    pub fn new(
        config: EdgeStreamConfig,
        options: AgentOptions,
        tls: Arc<rustls::ClientConfig>,
    ) -> Self {
        StreamAgent {
            config,
            options,
            tls,
        }
    }

    /// Starts the dial loop on the current tokio runtime.
    pub fn spawn(self) -> AgentHandle {
        let stop = CancellationToken::new();
        let (tx, connected) = watch::channel(false);
        let stats = Arc::new(Stats::default());
        let tasks = TaskTracker::new();
        let grace = self.config.write();
        let ctx = Arc::new(Ctx {
            options: self.options.clone(),
            read: self.config.read(),
            write: self.config.write(),
            stats: stats.clone(),
            tasks: tasks.clone(),
        });
        let task = tokio::spawn(self.run(stop.clone(), tx, stats.clone(), ctx));
        AgentHandle {
            stop,
            task,
            tasks,
            grace,
            connected,
            stats,
        }
    }

    async fn run(
        self,
        stop: CancellationToken,
        connected: watch::Sender<bool>,
        stats: Arc<Stats>,
        ctx: Arc<Ctx>,
    ) {
        let mut failures: u32 = 0;
        while !stop.is_cancelled() {
            let dialed = tokio::select! {
                _ = stop.cancelled() => break,
                d = dial(&self.config.server, self.tls.clone(), &self.options.node_name, &self.options.node_ip, self.options.stream_queue_bytes, self.config.handshake()) => d,
            };
            match dialed {
                Ok(d) => {
                    failures = 0;
                    stats.tunnels.fetch_add(1, Ordering::Relaxed);
                    info!(server = %self.config.server, node = %self.options.node_name, ip = %d.node_ip, "tunnel connected");
                    connected.send_replace(true);
                    let reason = tunnel::serve(d, ctx.clone(), stop.clone()).await;
                    connected.send_replace(false);
                    info!(%reason, "tunnel ended");
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    warn!(server = %self.config.server, error = %e, failures, "tunnel dial failed");
                }
            }
            let wait = backoff(&self.options, failures);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// `redial_base` after a session, doubling per consecutive failed dial up to `redial_max`,
/// each with ±25 % jitter so edges do not redial in lockstep.
fn backoff(options: &AgentOptions, failures: u32) -> Duration {
    Backoff::new(options.redial_base, options.redial_max).jittered(failures, 0.75, 1.25)
}

impl AgentHandle {
    /// Whether a tunnel is up now.
    pub fn is_connected(&self) -> bool {
        *self.connected.borrow()
    }

    /// Waits until a tunnel is up; false after `limit`.
    pub async fn wait_connected(&self, limit: Duration) -> bool {
        let mut rx = self.connected.clone();
        tokio::time::timeout(limit, rx.wait_for(|c| *c))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits until no tunnel is up; false after `limit`.
    pub async fn wait_disconnected(&self, limit: Duration) -> bool {
        let mut rx = self.connected.clone();
        tokio::time::timeout(limit, rx.wait_for(|c| !*c))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Current counters.
    pub fn stats(&self) -> AgentStats {
        AgentStats {
            tunnels: self.stats.tunnels.load(Ordering::Relaxed),
            streams_total: self.stats.streams_total.load(Ordering::Relaxed),
            streams_active: self.stats.streams_active.load(Ordering::Relaxed),
        }
    }

    /// Closes the tunnel (its streams end) and stops redialing; returns when done, or
    /// once the write deadline has passed for stream relays still writing locally.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.tasks.close();
        let _ = tokio::time::timeout(self.grace, self.tasks.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_should_grow_with_failures_and_stay_jittered_within_bounds() {
        let o = AgentOptions::new("n", "");
        for _ in 0..50 {
            let first = backoff(&o, 0).as_secs_f64();
            assert!((1.5..=2.5).contains(&first), "{first}");
            let third = backoff(&o, 3).as_secs_f64();
            assert!((6.0..=10.0).contains(&third), "{third}");
            let many = backoff(&o, 30).as_secs_f64();
            assert!((22.5..=37.5).contains(&many), "{many}");
        }
    }
}
