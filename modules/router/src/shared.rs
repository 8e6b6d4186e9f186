//! What the module, the REST listener and the delivery tasks share, and the three deliveries:
//! REST → eventbus, REST → servicebus (with the edge's answer), eventbus → REST.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use beehive::{Endpoint, Id, Message};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::Full;
use kubeedge_api::names::CLOUDHUB;
use kubeedge_api::replicas::Ownership;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use crate::client::{Http, HttpError};
use crate::config::RouterConfig;
use crate::metrics::{EdgeResult, RouterMetrics};
use crate::nodes::EdgeNodes;
use crate::path::{Matched, target_path, target_topic};
use crate::route::{RuleKey, Target};
use crate::status::StatusBook;
use crate::table::{ActiveRule, Effects, Table};
use crate::waiters::{Answered, Waiters};
use crate::wire::{self, Headers};

/// The header a replica adds when it passes a REST call to the replica holding the node, so
/// the call is never passed on again.
pub(crate) const FORWARDED: &str = "x-kubeedge-router-forwarded";

/// Headers that describe one hop, not the message: never copied between hops.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "host",
];

pub(crate) fn hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// An HTTP answer to a REST call.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Bytes::from(body.into()),
        }
    }

    /// The status counted for the rule: `<code> <reason>: <start of the body>`.
    fn detail(&self) -> String {
        let body = String::from_utf8_lossy(&self.body[..self.body.len().min(200)]).into_owned();
        format!(
            "{} {}: {body}",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or("")
        )
    }
}

/// Deliveries of one rule in progress: one permit of the rule's and one of the router's.
#[derive(Debug)]
pub(crate) struct Permits {
    _rule: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
    in_flight: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for Permits {
    fn drop(&mut self) {
        self.in_flight.dec();
    }
}

/// Everything the router's parts share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: RouterConfig,
    pub(crate) endpoint: Endpoint,
    table: RwLock<Table>,
    pub(crate) waiters: Waiters,
    pub(crate) status: StatusBook,
    pub(crate) metrics: RouterMetrics,
    pub(crate) nodes: EdgeNodes,
    pub(crate) ownership: Ownership,
    pub(crate) http: Http,
    all: Arc<Semaphore>,
}

impl Shared {
    pub(crate) fn new(
        config: RouterConfig,
        endpoint: Endpoint,
        nodes: EdgeNodes,
        ownership: Ownership,
        metrics: RouterMetrics,
    ) -> Self {
        Shared {
            table: RwLock::new(Table::new(config.max_concurrent_per_rule as usize)),
            all: Arc::new(Semaphore::new(config.max_concurrent as usize)),
            config,
            endpoint,
            waiters: Waiters::default(),
            status: StatusBook::default(),
            metrics,
            nodes,
            ownership,
            http: Http::new(),
        }
    }

    pub(crate) fn table(&self) -> RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the table, then asks the edges for what the change needs and reports unusable
    /// rules in their status.
    pub(crate) async fn change(&self, f: impl FnOnce(&mut RwLockWriteGuard<'_, Table>) -> Effects) {
        let (effects, counts) = {
            let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
            let effects = f(&mut table);
            (effects, table.counts())
        };
        self.metrics.set_rules(counts.0, counts.1);
        self.apply(effects).await;
    }

    async fn apply(&self, effects: Effects) {
        for (rule, error) in effects.unusable {
            warn!(%rule, %error, "rule cannot be used");
            self.status.failure(&rule, error.to_string());
        }
        for sub in effects.unsubscribe {
            self.to_edge(wire::subscription(
                &sub.node,
                &sub.topic,
                wire::op::UNSUBSCRIBE,
            ))
            .await;
        }
        for sub in effects.subscribe {
            self.to_edge(wire::subscription(
                &sub.node,
                &sub.topic,
                wire::op::SUBSCRIBE,
            ))
            .await;
        }
    }

    /// Sends the subscriptions `node` must hold again (it connected: KubeEdge sends them only
    /// when a rule is created, so an edge that was away then never gets them).
    pub(crate) async fn resubscribe(&self, node: &str) {
        let subs = self.table().subscriptions_of(node);
        for sub in subs {
            self.to_edge(wire::subscription(
                &sub.node,
                &sub.topic,
                wire::op::SUBSCRIBE,
            ))
            .await;
        }
    }

    /// Hands a message to cloudhub (no-ACK class: lost if the node is not connected).
    async fn to_edge(&self, msg: Message) {
        let resource = msg.route.resource.clone();
        if let Err(e) = self.endpoint.send(CLOUDHUB, msg).await {
            warn!(%resource, error = %e, "message to the edge not sent");
        }
    }

    /// A permit for one delivery of `rule`, or `None` when the rule or the router is at its
    /// limit.
    pub(crate) fn permits(&self, rule: &ActiveRule) -> Option<Permits> {
        let all = self.all.clone().try_acquire_owned().ok()?;
        let rule = rule.in_flight.clone().try_acquire_owned().ok()?;
        self.metrics.in_flight.inc();
        Some(Permits {
            _rule: rule,
            _all: all,
            in_flight: self.metrics.in_flight.clone(),
        })
    }

    /// Delivers one REST call to `node` through `rule` (the node's session is here); counts
    /// the outcome on the rule.
    pub(crate) async fn rest_call(
        &self,
        rule: &ActiveRule,
        matched: &Matched,
        node: &str,
        method: &Method,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Reply {
        let key = &rule.route.key;
        let reply = match &rule.route.target {
            Target::EventBus { topic } => {
                let id = Id::new_v4();
                let topic = target_topic(topic, &matched.extra_path);
                let msg = wire::publish(&id, node, &topic, &body);
                match tokio::time::timeout(
                    self.config.rest_timeout(),
                    self.endpoint.send(CLOUDHUB, msg),
                )
                .await
                {
                    Ok(Ok(())) => Reply::text(StatusCode::OK, "message delivered"),
                    Ok(Err(e)) => Reply::text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("the message could not be handed to cloudhub: {e}"),
                    ),
                    Err(_) => Reply::text(
                        StatusCode::GATEWAY_TIMEOUT,
                        "cloudhub did not take the message in time",
                    ),
                }
            }
            Target::ServiceBus { port, path } => {
                let path = target_path(path, &matched.param);
                self.servicebus(node, *port, &path, method, headers, &body)
                    .await
            }
            // Not a REST-source rule: the table never matches one to a call.
            Target::Rest { .. } => Reply::text(StatusCode::NOT_FOUND, "Request error"),
        };
        if reply.status.is_success() {
            self.status.success(key);
        } else {
            self.status.failure(key, reply.detail());
        }
        debug!(rule = %key, node, status = reply.status.as_u16(), "rest call delivered");
        reply
    }

    async fn servicebus(
        &self,
        node: &str,
        port: u16,
        path: &str,
        method: &Method,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Reply {
        let mut header = Headers::new();
        for (name, value) in headers {
            if hop_by_hop(name.as_str()) || name.as_str() == FORWARDED {
                continue;
            }
            if let Ok(v) = value.to_str() {
                header
                    .entry(wire::canonical_header(name.as_str()))
                    .or_default()
                    .push(v.to_owned());
            }
        }
        let id = Id::new_v4();
        let msg = wire::servicebus_request(&id, node, port, path, method.as_str(), header, body);
        let mut waiting = self.waiters.wait(id, node);
        let exchange = async {
            self.endpoint.send(CLOUDHUB, msg).await.map_err(|e| {
                Reply::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the request could not be handed to cloudhub: {e}"),
                )
            })?;
            waiting.answer().await.ok_or_else(|| {
                Reply::text(StatusCode::SERVICE_UNAVAILABLE, "the router is stopping")
            })
        };
        let answer = match tokio::time::timeout(self.config.rest_timeout(), exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(reply)) => return reply,
            Err(_) => {
                return Reply::text(StatusCode::GATEWAY_TIMEOUT, "wait to get response time out");
            }
        };
        match wire::servicebus_answer(&answer) {
            Ok(resp) => {
                let status = u16::try_from(resp.status_code)
                    .ok()
                    .and_then(|c| StatusCode::from_u16(c).ok())
                    .filter(|s| !s.is_informational())
                    .unwrap_or(StatusCode::BAD_GATEWAY);
                let headers = resp
                    .header
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(k, _)| !hop_by_hop(k))
                    .flat_map(|(k, vs)| vs.into_iter().map(move |v| (k.clone(), v)))
                    .collect();
                let max = self.config.max_body_bytes as usize;
                if resp.body.len() > max {
                    return Reply::text(
                        StatusCode::BAD_GATEWAY,
                        format!("the edge service's answer is larger than {max} bytes"),
                    );
                }
                Reply {
                    status,
                    headers,
                    body: Bytes::from(resp.body),
                }
            }
            Err(e) => Reply::text(
                StatusCode::BAD_GATEWAY,
                format!("the edge's answer is not an HTTP response: {e}"),
            ),
        }
    }

    /// Passes a REST call to the replica `holder` that holds the node's session.
    pub(crate) async fn forward(
        &self,
        holder: &str,
        method: &Method,
        uri: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Reply {
        let host = if holder.contains(':') {
            format!("[{holder}]")
        } else {
            holder.to_owned()
        };
        let port = self
            .config
            .listen_address()
            .rsplit_once(':')
            .map(|(_, p)| p.to_owned())
            .unwrap_or_default();
        let url = format!("http://{host}:{port}{uri}");
        let mut req = http::Request::builder().method(method.clone()).uri(&url);
        for (name, value) in headers {
            if !hop_by_hop(name.as_str()) {
                req = req.header(name, value);
            }
        }
        req = req.header(FORWARDED, self.ownership.me());
        let req = match req.body(Full::new(body)) {
            Ok(r) => r,
            Err(e) => return Reply::text(StatusCode::BAD_GATEWAY, format!("{url}: {e}")),
        };
        let limit = self.config.max_body_bytes as usize;
        match self
            .http
            .send(req, false, limit, self.config.rest_timeout())
            .await
        {
            Ok(a) => Reply {
                status: a.status,
                headers: a
                    .headers
                    .iter()
                    .filter(|(k, _)| !hop_by_hop(k.as_str()))
                    .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
                    .collect(),
                body: a.body,
            },
            Err(HttpError::Timeout(_)) => Reply::text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("the replica {holder} holding the node did not answer in time"),
            ),
            Err(e) => Reply::text(
                StatusCode::BAD_GATEWAY,
                format!("the replica {holder} holding the node: {e}"),
            ),
        }
    }

    /// An eventbus upload from `node` on `topic`: POSTed to the target of every rule naming
    /// that node and topic, each in a task of its own.
    pub(crate) fn upload(self: &Arc<Self>, node: &str, topic: &str, msg: &Message) {
        let rules = self.table().eventbus_rules(node, topic);
        if rules.is_empty() {
            self.metrics.edge(EdgeResult::NoRule);
            debug!(
                node,
                topic, "upload on a topic no rule of this node has: dropped"
            );
            return;
        }
        let payload = Bytes::from(wire::upload_payload(msg));
        for rule in rules {
            let key = rule.route.key.clone();
            let Some(permits) = self.permits(&rule) else {
                self.metrics.edge(EdgeResult::Busy);
                self.status.failure(
                    &key,
                    "dropped: the rule has too many deliveries in progress",
                );
                continue;
            };
            let Target::Rest { url, insecure } = rule.route.target.clone() else {
                continue;
            };
            let (shared, payload, node) = (self.clone(), payload.clone(), node.to_owned());
            tokio::spawn(async move {
                let _permits = permits;
                shared.post(&key, &node, url, insecure, payload).await;
            });
        }
    }

    async fn post(&self, rule: &RuleKey, node: &str, url: http::Uri, insecure: bool, body: Bytes) {
        if body.is_empty() {
            self.metrics.edge(EdgeResult::Failed);
            self.status.failure(rule, "empty message");
            return;
        }
        let req = http::Request::post(url.clone()).body(Full::new(body));
        let outcome = match req {
            Ok(req) => {
                self.http
                    .send(req, insecure, 1 << 20, self.config.rest_timeout())
                    .await
            }
            Err(e) => Err(HttpError::Transport(e.to_string())),
        };
        match outcome {
            Ok(a) if a.status.is_success() => {
                self.metrics.edge(EdgeResult::Delivered);
                self.status.success(rule);
                debug!(%rule, node, %url, "upload delivered");
            }
            Ok(a) => {
                self.metrics.edge(EdgeResult::Failed);
                let reply = Reply {
                    status: a.status,
                    headers: Vec::new(),
                    body: a.body,
                };
                info!(%rule, node, %url, status = a.status.as_u16(), "upload refused by its target");
                self.status.failure(rule, reply.detail());
            }
            Err(e) => {
                self.metrics.edge(EdgeResult::Failed);
                info!(%rule, node, %url, error = %e, "upload not delivered");
                self.status.failure(rule, format!("POST {url}: {e}"));
            }
        }
    }

    /// An answer from `node` to a servicebus request.
    pub(crate) fn answer(&self, node: &str, msg: Message) {
        let result = match self.waiters.answer(node, msg) {
            Answered::Delivered => EdgeResult::Delivered,
            Answered::Unmatched => EdgeResult::Unmatched,
            Answered::OtherNode => {
                warn!(node, "answer to a request another node was sent: dropped");
                EdgeResult::OtherNode
            }
        };
        self.metrics.edge(result);
    }
}
