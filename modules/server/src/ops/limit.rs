//! How often `/debug/nodes/{name}` may run: each diagnosis reads the Node from the API server
//! and forks `iptables`, so a flood of them would take cloudcore's CPU and process slots and
//! load the API server. At most [`DEBUG_CONCURRENCY`] run at once and [`DEBUG_RATE`] per
//! second start (a burst of [`DEBUG_BURST`]); beyond that the answer is `429`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Diagnoses running at once.
pub const DEBUG_CONCURRENCY: usize = 2;
/// Diagnoses started per second, sustained.
pub const DEBUG_RATE: f64 = 1.0;
/// Diagnoses that may start back to back after a quiet spell.
pub const DEBUG_BURST: f64 = 5.0;

/// The gate every diagnosis passes; cheap to clone, clones share it.
#[derive(Debug, Clone)]
pub struct DebugGate(Arc<Gate>);

#[derive(Debug)]
struct Gate {
    running: Arc<Semaphore>,
    /// Tokens left and when they were last counted.
    bucket: Mutex<(f64, Instant)>,
}

impl Default for DebugGate {
    fn default() -> Self {
        DebugGate(Arc::new(Gate {
            running: Arc::new(Semaphore::new(DEBUG_CONCURRENCY)),
            bucket: Mutex::new((DEBUG_BURST, Instant::now())),
        }))
    }
}

impl DebugGate {
    /// A permit to run one diagnosis now (held until dropped), or `None`: too many at once or
    /// too many lately.
    pub fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.0.running.clone().try_acquire_owned().ok()?;
        let mut bucket = self.0.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, since) = *bucket;
        let tokens =
            (tokens + now.duration_since(since).as_secs_f64() * DEBUG_RATE).min(DEBUG_BURST);
        if tokens < 1.0 {
            *bucket = (tokens, now);
            return None;
        }
        *bucket = (tokens - 1.0, now);
        Some(permit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds_and_running_ones_are_capped() {
        let gate = DebugGate::default();
        let held: Vec<_> = (0..DEBUG_CONCURRENCY)
            .map(|_| gate.admit().unwrap())
            .collect();
        assert!(gate.admit().is_none(), "{DEBUG_CONCURRENCY} already run");
        drop(held);
        let admitted = (0..10).filter(|_| gate.admit().is_some()).count();
        assert_eq!(admitted, DEBUG_BURST as usize - DEBUG_CONCURRENCY);
    }
}
