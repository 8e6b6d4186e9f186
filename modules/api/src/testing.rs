//! Test helpers (feature `testing`): a fake edge that captures what controllers send to a
//! module, and a Kubernetes client whose requests can be made to fail on purpose.
//!
//! * [`FakeEdge`] registers an inbox (normally named `cloudhub`) and records every message in
//!   arrival order, so tests can wait for and count what a controller sent downstream.
//! * [`faulty_client`] builds a real client with a layer that can, on request, answer like a
//!   dead API server, return an error status for chosen calls (e.g. `409 Conflict`), or end the
//!   next watch with a `410 Gone` event (the "resource version too old" a real server sends).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use beehive::{Bus, Message};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::client::{Body, ClientBuilder, DynBody};
use tokio::sync::Notify;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Records everything sent to one inbox on a bus.
#[derive(Debug, Clone)]
pub struct FakeEdge {
    seen: Arc<Mutex<Vec<Message>>>,
    notify: Arc<Notify>,
}

impl FakeEdge {
    /// Registers an inbox `name` (group `name`) on `bus` and starts recording. Call before
    /// `bus.start()` or after; needs a Tokio runtime.
    ///
    /// # Panics
    /// When the name is already registered.
    pub fn register(bus: &Bus, name: &str) -> FakeEdge {
        let mut inbox = bus
            .register_inbox(name, name, 1 << 16)
            .unwrap_or_else(|e| panic!("register inbox {name}: {e}"));
        let edge = FakeEdge {
            seen: Arc::default(),
            notify: Arc::default(),
        };
        let (seen, notify) = (edge.seen.clone(), edge.notify.clone());
        tokio::spawn(async move {
            while let Ok(m) = inbox.recv().await {
                seen.lock().unwrap_or_else(|e| e.into_inner()).push(m);
                notify.notify_waiters();
            }
        });
        edge
    }

    /// Every message so far, in arrival order.
    pub fn messages(&self) -> Vec<Message> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The messages so far that match `pred`, in arrival order.
    pub fn matching(&self, pred: impl Fn(&Message) -> bool) -> Vec<Message> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|m| pred(m))
            .cloned()
            .collect()
    }

    /// Waits until at least `n` messages match, at most `timeout`; returns the matches
    /// (fewer than `n` on timeout).
    pub async fn wait_count(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Message) -> bool,
    ) -> Vec<Message> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            let found = self.matching(&pred);
            if found.len() >= n {
                return found;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.matching(&pred);
            }
        }
    }

    /// The first message matching `pred`, waiting at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&Message) -> bool,
    ) -> Option<Message> {
        self.wait_count(1, timeout, pred).await.into_iter().next()
    }

    /// Forgets what was recorded.
    pub fn clear(&self) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// One injected failure.
#[derive(Debug, Clone)]
struct Rule {
    method: Option<http::Method>,
    path_contains: String,
    watch_only: bool,
    remaining: usize,
    outcome: Outcome,
}

#[derive(Debug, Clone)]
enum Outcome {
    Status(u16, String),
    Gone,
    Delay(Duration),
}

/// Switches of a [`faulty_client`]; cheap to clone, shared with the client.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    down: Arc<AtomicBool>,
    rules: Arc<Mutex<VecDeque<Rule>>>,
    injected: Arc<AtomicUsize>,
}

impl Faults {
    /// While `down`, every request fails as if the API server could not be reached.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// The next `times` requests with `method` whose path contains `path_contains` get an
    /// error status `code` with `reason` (for example `409`, `Conflict`) without reaching the
    /// server.
    pub fn fail_next(
        &self,
        method: http::Method,
        path_contains: &str,
        times: usize,
        code: u16,
        reason: &str,
    ) {
        self.push(Rule {
            method: Some(method),
            path_contains: path_contains.to_owned(),
            watch_only: false,
            remaining: times,
            outcome: Outcome::Status(code, reason.to_owned()),
        });
    }

    /// The next `times` requests with `method` whose path contains `path_contains` are sent,
    /// but their answers are held back for `delay` (a slow API server).
    pub fn delay_next(
        &self,
        method: http::Method,
        path_contains: &str,
        times: usize,
        delay: Duration,
    ) {
        self.push(Rule {
            method: Some(method),
            path_contains: path_contains.to_owned(),
            watch_only: false,
            remaining: times,
            outcome: Outcome::Delay(delay),
        });
    }

    /// The next watch request whose path contains `path_contains` is answered with a single
    /// `ERROR` event carrying `410 Gone` (`Expired`, "too old resource version"), which makes
    /// a `kube` watcher relist.
    pub fn expire_next_watch(&self, path_contains: &str) {
        self.push(Rule {
            method: None,
            path_contains: path_contains.to_owned(),
            watch_only: true,
            remaining: 1,
            outcome: Outcome::Gone,
        });
    }

    /// How many requests were answered by an injected fault so far.
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::SeqCst)
    }

    fn push(&self, rule: Rule) {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(rule);
    }

    fn decide(&self, req: &http::Request<Body>) -> Option<Result<Outcome, ()>> {
        if self.down.load(Ordering::SeqCst) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return Some(Err(()));
        }
        let path = req.uri().path();
        let is_watch = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let pos = rules.iter().position(|r| {
            r.remaining > 0
                && path.contains(&r.path_contains)
                && r.method.as_ref().is_none_or(|m| m == req.method())
                && (!r.watch_only || is_watch)
        })?;
        let rule = &mut rules[pos];
        rule.remaining -= 1;
        let outcome = rule.outcome.clone();
        if rule.remaining == 0 {
            rules.remove(pos);
        }
        self.injected.fetch_add(1, Ordering::SeqCst);
        Some(Ok(outcome))
    }
}

fn body(text: String) -> Box<DynBody> {
    Box::new(Full::new(Bytes::from(text)).map_err(|never| match never {}))
}

fn status_json(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
}

fn respond(outcome: Outcome) -> http::Response<Box<DynBody>> {
    let (status, text) = match outcome {
        Outcome::Status(code, reason) => {
            let text = status_json(code, &reason, &format!("injected {code} {reason}")).to_string();
            (code, text)
        }
        Outcome::Delay(_) => (
            500,
            status_json(500, "InternalError", "delay is not a response").to_string(),
        ),
        Outcome::Gone => {
            let event = serde_json::json!({
                "type": "ERROR",
                "object": status_json(410, "Expired", "too old resource version: injected"),
            });
            (200, format!("{event}\n"))
        }
    };
    let mut resp = http::Response::new(body(text));
    *resp.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The layer a [`faulty_client`] is built with.
#[derive(Debug, Clone)]
pub struct FaultLayer {
    faults: Faults,
}

impl<S> tower::Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> FaultService<S> {
        FaultService {
            inner,
            faults: self.faults.clone(),
        }
    }
}

/// The service a [`FaultLayer`] wraps around the HTTP stack.
#[derive(Debug)]
pub struct FaultService<S> {
    inner: S,
    faults: Faults,
}

type RespFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Box<DynBody>>, BoxError>> + Send>>;

impl<S> tower::Service<http::Request<Body>> for FaultService<S>
where
    S: tower::Service<
            http::Request<Body>,
            Response = http::Response<Box<DynBody>>,
            Error = BoxError,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = RespFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> RespFuture {
        match self.faults.decide(&req) {
            None => Box::pin(self.inner.call(req)),
            Some(Err(())) => Box::pin(async {
                Err::<_, BoxError>("injected: the API server cannot be reached".into())
            }),
            Some(Ok(Outcome::Delay(delay))) => {
                // Sent now (the request runs on its own task), answered late.
                let answer = tokio::spawn(self.inner.call(req));
                Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    answer.await.map_err(|e| -> BoxError { Box::new(e) })?
                })
            }
            Some(Ok(outcome)) => Box::pin(async move { Ok(respond(outcome)) }),
        }
    }
}

/// A client for `config` whose requests can be failed through the returned [`Faults`].
///
/// # Panics
/// When the config cannot make a client (tests only).
pub fn faulty_client(config: kube::Config) -> (kube::Client, Faults) {
    let faults = Faults::default();
    let client = ClientBuilder::try_from(config)
        .unwrap_or_else(|e| panic!("client from config: {e}"))
        .with_layer(&FaultLayer {
            faults: faults.clone(),
        })
        .build();
    (client, faults)
}
