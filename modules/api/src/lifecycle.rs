//! Background tasks of a controller module and their graceful stop, in the workspace's one
//! stop vocabulary: a [`CancellationToken`] says "stop", a [`TaskTracker`] knows which tasks
//! still run.
//!
//! A module spawns its watch loops and queue workers through one [`Lifecycle`] (the pair of
//! the two); long-running loops select on [`Lifecycle::token`]`.cancelled()`. Its
//! `Module::shutdown` hook calls [`Lifecycle::stop`]; the composer may then await
//! [`Lifecycle::join`] to let in-flight work finish (bounded by a timeout).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! let life = kubeedge_api::lifecycle::Lifecycle::new();
//! let stop = life.token().clone();
//! life.spawn(async move { stop.cancelled().await; /* finish in-flight work */ });
//! life.stop();
//! assert!(life.join(Duration::from_secs(1)).await);
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

/// The types of [`Lifecycle`]'s signatures, whose home is `tokio_util`: re-exported so that a
/// module needs no dependency on tokio-util to stop its tasks. A crate that depends on
/// tokio-util itself imports them from there.
pub use tokio_util::sync::CancellationToken;
pub use tokio_util::task::TaskTracker;

/// A module's stop token and the tracker of its tasks. Cheap to clone; clones share both.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Lifecycle {
    /// No tasks, not stopped.
    pub fn new() -> Self {
        Lifecycle::default()
    }

    /// Tasks stop when `token` is cancelled (e.g. a child of the process's token).
    pub fn with_token(token: CancellationToken) -> Self {
        Lifecycle {
            token,
            tracker: TaskTracker::new(),
        }
    }

    /// The stop signal: cancelled once stop was requested.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The tracker every task of the module runs on.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Spawns a tracked task that runs to its own end (it should watch [`Self::token`]).
    /// Needs a Tokio runtime (an actix system is one).
    pub fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(fut);
    }

    /// Spawns a tracked task that is dropped (cancelled) when stop is requested.
    pub fn spawn_cancellable<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token.clone();
        self.tracker.spawn(async move {
            token.run_until_cancelled(fut).await;
        });
    }

    /// Requests stop; idempotent.
    pub fn stop(&self) {
        self.token.cancel();
    }

    /// True once stop was requested.
    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Closes the tracker and waits until every tracked task has ended, at most `timeout`;
    /// returns whether all ended. Tasks still running then are left to the runtime's
    /// shutdown.
    pub async fn join(&self, timeout: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(timeout, self.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn join_waits_for_in_flight_work_within_the_timeout() {
        let life = Lifecycle::new();
        let stop = life.token().clone();
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = finished.clone();
        life.spawn(async move {
            stop.cancelled().await;
            // In-flight work after the stop request still completes.
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        life.spawn_cancellable(futures::future::pending());
        life.stop();
        assert!(life.join(Duration::from_secs(1)).await);
        assert!(finished.load(std::sync::atomic::Ordering::Relaxed));

        let stuck = Lifecycle::new();
        stuck.spawn(futures::future::pending());
        stuck.stop();
        assert!(!stuck.join(Duration::from_millis(100)).await);
    }
}
