//! The discovery answers (`/api`, `/apis/<group>/<version>`, `/openapi/v2`, `/version`, …)
//! shared by every node for a short while, with one API request per path at a time.
//!
//! An OpenAPI document is megabytes; relayed per request, every edge asking at its own rate
//! would make cloudcore fetch and relay that much per request from the API server. These
//! answers are the same for every node: they are fetched with cloudcore's identity whatever
//! the node (the policy decides them [`Act::Cloudcore`](kubeedge_api::authz::Act), with
//! impersonation on or off), and Kubernetes gives them to every authenticated user anyway
//! (`system:discovery`, `system:public-info-viewer`). So one copy may serve all nodes, once
//! each node's request was decided.
//!
//! * A path is fetched once per `passThroughCacheSeconds`; requests arriving meanwhile (and
//!   while the fetch runs) get that answer.
//! * A failed fetch is given to the requests that waited for it and not kept.
//! * At most `maxPassThroughCacheEntries` paths and `maxPassThroughCacheBytes` bytes are
//!   kept; the answers expiring first make room. Only answers the API server gave are kept,
//!   so made-up paths (which it answers `404`) take no room. An answer larger than the byte
//!   bound is given to the requests that waited for its fetch and not kept.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kubeedge_api::status::StatusError;
use tokio::sync::OnceCell;

use crate::metrics::DynamicControllerMetrics;

/// The bounds of a [`PassThroughCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// How long an answer is served after its fetch (zero: only to the requests that waited
    /// for that fetch).
    pub ttl: Duration,
    /// Paths kept at once.
    pub entries: usize,
    /// Bytes of answers kept at once.
    pub bytes: usize,
}

/// One path's answer: fetched once, by whichever request comes first.
#[derive(Debug, Default)]
struct Slot {
    answer: OnceCell<Result<Arc<str>, StatusError>>,
    /// When the answer arrived (set once, with it).
    fetched: OnceLock<Instant>,
}

impl Slot {
    /// Whether the slot still serves at `now`: while its fetch runs, and for `ttl` after a
    /// successful one.
    fn live(&self, now: Instant, ttl: Duration) -> bool {
        match (self.answer.get(), self.fetched.get()) {
            (None, _) => true,
            (Some(Ok(_)), Some(at)) => now.saturating_duration_since(*at) < ttl,
            _ => false,
        }
    }

    fn kept_bytes(&self) -> usize {
        match self.answer.get() {
            Some(Ok(body)) => body.len(),
            _ => 0,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<String, Arc<Slot>>,
    /// Bytes of the answers in `slots`.
    bytes: usize,
}

impl State {
    fn remove(&mut self, path: &str) {
        if let Some(slot) = self.slots.remove(path) {
            self.bytes -= slot.kept_bytes();
        }
    }

    /// Drops what no longer serves, then the answers expiring first until `room` more bytes
    /// and one more path fit.
    fn make_room(&mut self, now: Instant, limits: &Limits, room: usize) {
        let dead: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| !s.live(now, limits.ttl))
            .map(|(p, _)| p.clone())
            .collect();
        for p in dead {
            self.remove(&p);
        }
        while self.slots.len() >= limits.entries || self.bytes + room > limits.bytes {
            let oldest = self
                .slots
                .iter()
                .filter_map(|(p, s)| Some((p, *s.fetched.get()?)))
                .min_by_key(|(_, at)| *at)
                .map(|(p, _)| p.clone());
            match oldest {
                Some(p) => self.remove(&p),
                // Only fetches in flight left: bounded by the module's concurrency.
                None => break,
            }
        }
    }
}

/// Discovery answers by path, shared by every node (see the module's documentation).
#[derive(Debug)]
pub(crate) struct PassThroughCache {
    limits: Limits,
    state: Mutex<State>,
    metrics: DynamicControllerMetrics,
}

impl PassThroughCache {
    pub(crate) fn new(limits: Limits, metrics: DynamicControllerMetrics) -> Self {
        PassThroughCache {
            limits,
            state: Mutex::new(State::default()),
            metrics,
        }
    }

    /// The answer for `path`: a kept one, the one being fetched, or `fetch`'s (run only when
    /// neither exists). `path` must name the request `fetch` makes, and that request must be
    /// the same for every node.
    pub(crate) async fn get<F>(&self, path: &str, fetch: F) -> Result<Arc<str>, StatusError>
    where
        F: Future<Output = Result<String, StatusError>>,
    {
        let slot = {
            let mut st = self.lock();
            let now = Instant::now();
            match st.slots.get(path) {
                Some(s) if s.live(now, self.limits.ttl) => s.clone(),
                _ => {
                    st.remove(path);
                    st.make_room(now, &self.limits, 0);
                    let s = Arc::new(Slot::default());
                    if st.slots.len() < self.limits.entries {
                        st.slots.insert(path.to_owned(), s.clone());
                    }
                    s
                }
            }
        };
        let mut fetched = false;
        let answer = slot
            .answer
            .get_or_init(|| async {
                fetched = true;
                let answer = fetch.await.map(Arc::<str>::from);
                let _ = slot.fetched.set(Instant::now());
                answer
            })
            .await
            .clone();
        if fetched {
            self.metrics.passthrough(false);
            self.keep(path, &slot);
        } else {
            self.metrics.passthrough(true);
        }
        answer
    }

    /// Accounts `slot`'s new answer, or lets it go when it may not be kept.
    fn keep(&self, path: &str, slot: &Arc<Slot>) {
        let mut st = self.lock();
        if !st.slots.get(path).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            return;
        }
        let size = slot.kept_bytes();
        let keep = matches!(slot.answer.get(), Some(Ok(_)))
            && !self.limits.ttl.is_zero()
            && size <= self.limits.bytes;
        // Out of the map while room is made, so it is not the one evicted.
        st.slots.remove(path);
        if keep {
            st.make_room(Instant::now(), &self.limits, size);
            st.slots.insert(path.to_owned(), slot.clone());
            st.bytes += size;
        }
        self.metrics.passthrough_bytes(st.bytes);
    }

    /// (paths, bytes) kept now.
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let st = self.lock();
        (st.slots.len(), st.bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps: no step spans an await.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn cache(ttl_ms: u64, entries: usize, bytes: usize) -> PassThroughCache {
        PassThroughCache::new(
            Limits {
                ttl: Duration::from_millis(ttl_ms),
                entries,
                bytes,
            },
            DynamicControllerMetrics::default(),
        )
    }

    /// A fetch that counts its runs and answers `body` after a short wait.
    async fn fetch(runs: &AtomicUsize, body: &str) -> Result<String, StatusError> {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(body.to_owned())
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_fetch_and_later_ones_the_kept_answer() {
        let c = cache(10_000, 8, 1 << 20);
        let runs = AtomicUsize::new(0);
        let all =
            futures::future::join_all((0..10).map(|_| c.get("/openapi/v2", fetch(&runs, "doc"))))
                .await;
        assert!(all.iter().all(|a| a.as_deref() == Ok("doc")));
        assert_eq!(
            c.get("/openapi/v2", fetch(&runs, "other")).await.as_deref(),
            Ok("doc")
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let m = c.metrics.snapshot();
        assert_eq!((m.passthrough_hits, m.passthrough_misses), (10, 1));
        assert_eq!(c.sizes(), (1, 3));
    }

    #[tokio::test]
    async fn an_expired_answer_is_fetched_again() {
        let c = cache(50, 8, 1 << 20);
        let runs = AtomicUsize::new(0);
        c.get("/api", fetch(&runs, "a")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(c.get("/api", fetch(&runs, "b")).await.as_deref(), Ok("b"));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn failures_are_shared_by_their_waiters_and_not_kept() {
        let c = cache(10_000, 8, 1 << 20);
        let runs = AtomicUsize::new(0);
        let failing = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err::<String, _>(StatusError::new(404, "NotFound", "no such path"))
        };
        let (a, b) = tokio::join!(
            c.get("/apis/x.io", failing()),
            c.get("/apis/x.io", failing())
        );
        assert_eq!((a.unwrap_err().code(), b.unwrap_err().code()), (404, 404));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(c.sizes(), (0, 0));
        assert!(c.get("/apis/x.io", failing()).await.is_err());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn paths_and_bytes_are_bounded_and_an_oversized_answer_is_not_kept() {
        let c = cache(10_000, 2, 10);
        let runs = AtomicUsize::new(0);
        for p in ["/a", "/b", "/c"] {
            c.get(p, fetch(&runs, "1234")).await.unwrap();
        }
        assert_eq!(c.sizes(), (2, 8));
        // The oldest made room: `/a` is fetched again, `/c` is not.
        c.get("/c", fetch(&runs, "x")).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        c.get("/d", fetch(&runs, "12345678")).await.unwrap();
        assert_eq!(c.sizes(), (1, 8));
        let big = "b".repeat(11);
        let (x, y) = tokio::join!(
            c.get("/big", fetch(&runs, &big)),
            c.get("/big", fetch(&runs, &big))
        );
        assert_eq!((x.unwrap().len(), y.unwrap().len()), (11, 11));
        assert_eq!(runs.load(Ordering::SeqCst), 5, "one fetch for both waiters");
        assert_eq!(c.sizes(), (1, 8), "the oversized answer is not kept");
    }

    #[tokio::test]
    async fn a_zero_ttl_keeps_nothing_but_still_shares_one_fetch() {
        let c = cache(0, 8, 1 << 20);
        let runs = AtomicUsize::new(0);
        let (a, b) = tokio::join!(
            c.get("/version", fetch(&runs, "v")),
            c.get("/version", fetch(&runs, "v"))
        );
        assert_eq!((a.as_deref(), b.as_deref()), (Ok("v"), Ok("v")));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(c.sizes(), (0, 0));
    }
}
