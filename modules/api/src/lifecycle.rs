//! Background tasks of a controller module and their graceful stop.
//!
//! A module spawns its watch loops and queue workers through one [`Lifecycle`]; its
//! `Module::shutdown` hook calls [`Lifecycle::stop`]; the composer may then await
//! [`Lifecycle::join`] to let in-flight work finish (bounded by a timeout).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! let life = kubeedge_api::lifecycle::Lifecycle::new();
//! let mut stop = life.stop_signal();
//! life.spawn(async move { stop.wait().await; /* finish in-flight work */ });
//! life.stop();
//! assert!(life.join(Duration::from_secs(1)).await);
//! # }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Tracks a module's tasks and carries its stop signal. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    stop: Arc<watch::Sender<bool>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::new()
    }
}

/// A receiver of the stop signal, for `tokio::select!` in long-running loops.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    /// Resolves once stop was requested (at once if it already was).
    pub async fn wait(&mut self) {
        // The sender lives as long as any Lifecycle clone; if all are gone, stopping is right.
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }

    /// True once stop was requested.
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
}

impl Lifecycle {
    /// No tasks, not stopped.
    pub fn new() -> Self {
        Lifecycle {
            stop: Arc::new(watch::channel(false).0),
            tasks: Arc::default(),
        }
    }

    /// A receiver of the stop signal.
    pub fn stop_signal(&self) -> StopSignal {
        StopSignal(self.stop.subscribe())
    }

    /// Spawns a tracked task that runs to its own end (it should watch [`Self::stop_signal`]).
    /// Needs a Tokio runtime (an actix system is one).
    pub fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = tokio::spawn(fut);
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// Spawns a tracked task that is dropped (cancelled) when stop is requested.
    pub fn spawn_cancellable<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut stop = self.stop_signal();
        self.spawn(async move {
            tokio::select! {
                _ = fut => {}
                _ = stop.wait() => {}
            }
        });
    }

    /// Requests stop; idempotent.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// True once stop was requested.
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Waits until every tracked task has ended, at most `timeout`; returns whether all
    /// ended. Tasks still running after the timeout are aborted.
    pub async fn join(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut handles = self.take();
            if handles.is_empty() {
                return true;
            }
            while let Some(mut handle) = handles.pop() {
                if tokio::time::timeout_at(deadline, &mut handle)
                    .await
                    .is_err()
                {
                    // The budget is spent: abort this one and everything still tracked.
                    handle.abort();
                    handles.extend(self.take());
                    handles.iter().for_each(JoinHandle::abort);
                    return false;
                }
            }
        }
    }

    fn take(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn join_waits_for_tasks_and_aborts_after_the_timeout() {
        let life = Lifecycle::new();
        let mut stop = life.stop_signal();
        life.spawn(async move {
            stop.wait().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        life.spawn_cancellable(futures::future::pending());
        life.stop();
        assert!(life.join(Duration::from_secs(1)).await);

        let stuck = Lifecycle::new();
        stuck.spawn(futures::future::pending());
        stuck.stop();
        assert!(!stuck.join(Duration::from_millis(100)).await);
    }
}
