//! The operations server (`commonConfig.monitorServer`): `/healthz` and `/livez` (liveness:
//! [`health`]), `/readyz`, Prometheus `/metrics` and `/debug/nodes/{name}` (why `kubectl
//! logs/exec` would fail for a node).
//!
//! The health endpoints are open (the kubelet probes them). `/metrics` and `/debug` are for
//! callers [`auth`] allows; `/debug` also only for callers on loopback (`cloudcore diagnose`
//! in the pod) and at the pace [`limit`] sets.

pub mod auth;
pub mod health;
pub mod limit;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::diagnose::{Diagnostics, diagnose};
pub use auth::{Access, Verdict};
pub use health::{Health, HealthOptions};
pub use limit::DebugGate;

/// Where the process is in its life, as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Modules are starting.
    Starting = 0,
    /// Waiting for the leader Lease; nothing active.
    Standby = 1,
    /// All enabled modules run.
    Ready = 2,
    /// Draining and stopping.
    ShuttingDown = 3,
}

/// Shared readiness, set by the composition and read by `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicU8>);

impl Readiness {
    /// Records the current phase.
    pub fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::Release);
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        match self.0.load(Ordering::Acquire) {
            1 => Phase::Standby,
            2 => Phase::Ready,
            3 => Phase::ShuttingDown,
            _ => Phase::Starting,
        }
    }
}

/// The process's one Prometheus registry: modules register their metrics and collectors as
/// they start; `/metrics` encodes it (OpenMetrics text). Cheap to clone; clones share it.
#[derive(Clone, Default)]
pub struct Metrics(Arc<Mutex<Registry>>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Runs `f` with the registry to register into (each family name once per process).
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The registry in the OpenMetrics text format; fails only if a collector does.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode(&mut out, &self.0.lock().unwrap_or_else(|e| e.into_inner()))?;
        Ok(out)
    }
}

/// What the operations server answers from. Cheap to clone; clones share their state. The
/// default lets every caller read `/metrics` and `/debug` (keep it on loopback).
#[derive(Debug, Clone)]
pub struct Ops {
    /// Where the process is in its life (`/readyz`).
    pub readiness: Readiness,
    /// The registry `/metrics` encodes.
    pub metrics: Metrics,
    /// What `/debug/nodes/{name}` checks, once the modules run.
    pub diagnostics: Diagnostics,
    /// Whether the bus still runs its modules (`/healthz`, `/livez`, and part of `/readyz`).
    pub health: Health,
    /// Who may read `/metrics` and `/debug`.
    pub access: Access,
    /// How often `/debug/nodes/{name}` may run.
    pub debug: DebugGate,
}

impl Default for Ops {
    fn default() -> Self {
        Ops {
            readiness: Readiness::default(),
            metrics: Metrics::default(),
            diagnostics: Diagnostics::default(),
            health: Health::default(),
            access: Access::always_allow(),
            debug: DebugGate::default(),
        }
    }
}

/// The answer to a request [`Access`] did not allow.
fn refusal(verdict: Verdict) -> Option<HttpResponse> {
    Some(match verdict {
        Verdict::Allow => return None,
        Verdict::Unauthenticated(why) => HttpResponse::Unauthorized()
            .insert_header(("WWW-Authenticate", "Bearer realm=\"cloudcore\""))
            .body(format!("Unauthorized: {why}")),
        Verdict::Forbidden(why) => HttpResponse::Forbidden().body(format!("Forbidden: {why}")),
        Verdict::Busy => HttpResponse::TooManyRequests().body("too many reviews in flight"),
        Verdict::Unavailable(why) => HttpResponse::ServiceUnavailable().body(why),
    })
}

/// The request's `Authorization` header, if it is text.
fn bearer(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Query `?verbose` (any value): list every check, also when all pass.
#[derive(Debug, serde::Deserialize)]
struct Verbose {
    verbose: Option<String>,
}

fn health_answer(endpoint: &str, checks: &[health::Check], verbose: bool) -> HttpResponse {
    let (healthy, body) = health::report(endpoint, checks, verbose);
    let mut response = if healthy {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response
        .content_type("text/plain; charset=utf-8")
        .body(body)
}

/// Starts the operations server on the running actix system; returns the bound address.
pub fn serve(bind: &str, ops: Ops) -> std::io::Result<(SocketAddr, actix_web::dev::Server)> {
    let server = HttpServer::new(move || {
        let Ops {
            readiness,
            metrics,
            diagnostics,
            health,
            access,
            debug,
        } = ops.clone();
        let live = health.clone();
        let metrics_access = access.clone();
        App::new()
            .route(
                "/debug/nodes/{name}",
                web::get().to(move |req: HttpRequest, name: web::Path<String>| {
                    let sources = diagnostics.sources();
                    let (access, debug) = (access.clone(), debug.clone());
                    async move {
                        // Diagnoses read what an attacker would like to know (which nodes are
                        // away) and fork iptables: never for callers off this host.
                        let loopback = req
                            .peer_addr()
                            .is_some_and(|a| a.ip().to_canonical().is_loopback());
                        if !loopback {
                            return HttpResponse::Forbidden()
                                .body("Forbidden: /debug answers callers on loopback only");
                        }
                        let verdict = access.decide(req.path(), bearer(&req).as_deref()).await;
                        if let Some(refused) = refusal(verdict) {
                            return refused;
                        }
                        // The name reaches an API path: only a node name is looked up.
                        if !kubeedge_api::validation::is_dns1123_subdomain(&name) {
                            return HttpResponse::BadRequest()
                                .body(format!("{:?} is not a node name", name.as_str()));
                        }
                        let Some(s) = sources else {
                            return HttpResponse::ServiceUnavailable()
                                .body("modules not running (standby or starting)");
                        };
                        let Some(_running) = debug.admit() else {
                            return HttpResponse::TooManyRequests()
                                .insert_header(("Retry-After", "1"))
                                .body("too many diagnoses at once or lately; try again");
                        };
                        HttpResponse::Ok().json(diagnose(&s, &name).await)
                    }
                }),
            )
            .route(
                "/healthz",
                web::get().to(move |q: web::Query<Verbose>| {
                    let checks = live.check();
                    async move { health_answer("healthz", &checks, q.verbose.is_some()) }
                }),
            )
            .route(
                "/livez",
                web::get().to({
                    let live = health.clone();
                    move |q: web::Query<Verbose>| {
                        let checks = live.check();
                        async move { health_answer("livez", &checks, q.verbose.is_some()) }
                    }
                }),
            )
            .route(
                "/readyz",
                web::get().to(move |q: web::Query<Verbose>| {
                    let phase = readiness.phase();
                    let mut checks = health.check();
                    let problem = match phase {
                        Phase::Ready => None,
                        Phase::Standby => Some("standby: not the leader"),
                        Phase::Starting => Some("starting"),
                        Phase::ShuttingDown => Some("shutting down"),
                    };
                    checks.insert(
                        0,
                        health::Check {
                            name: "phase".to_owned(),
                            problem: problem.map(str::to_owned),
                        },
                    );
                    async move { health_answer("readyz", &checks, q.verbose.is_some()) }
                }),
            )
            .route(
                "/metrics",
                web::get().to(move |req: HttpRequest| {
                    let (access, metrics) = (metrics_access.clone(), metrics.clone());
                    async move {
                        let verdict = access.decide(req.path(), bearer(&req).as_deref()).await;
                        if let Some(refused) = refusal(verdict) {
                            return refused;
                        }
                        match metrics.render() {
                            Ok(text) => HttpResponse::Ok()
                                .content_type(
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )
                                .body(text),
                            Err(_) => HttpResponse::InternalServerError()
                                .body("a metrics collector failed"),
                        }
                    }
                }),
            )
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(bind)?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| std::io::Error::other("no address bound"))?;
    Ok((addr, server.run()))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::time::Duration;

    use beehive::{Bus, Content, Message};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The histogram series of an OpenMetrics text, checked on the way: every family has one
    /// `# TYPE` line, a type this server uses, and its samples right after it under the names
    /// that type allows; each histogram's buckets are cumulative, end at `+Inf` and agree
    /// with its `_count`; the text ends with `# EOF`. Series are keyed by family and labels.
    fn parse(text: &str) -> Result<BTreeMap<String, Vec<(f64, u64)>>, String> {
        let mut types: HashMap<&str, &str> = HashMap::new();
        let mut current: Option<(&str, &str)> = None;
        let mut buckets: BTreeMap<String, Vec<(f64, u64)>> = BTreeMap::new();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        if text.lines().last() != Some("# EOF") {
            return Err("no # EOF at the end".into());
        }
        for line in text.lines().filter(|l| *l != "# EOF") {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or(line)?;
                if !["counter", "gauge", "histogram"].contains(&kind) {
                    return Err(format!("unexpected type: {line}"));
                }
                if types.insert(name, kind).is_some() {
                    return Err(format!("second # TYPE for {name}"));
                }
                current = Some((name, kind));
                continue;
            }
            if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').ok_or(line)?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}').ok_or(line)?),
                None => (series, ""),
            };
            let (family, kind) =
                current.ok_or_else(|| format!("sample before any # TYPE: {line}"))?;
            let suffix = name
                .strip_prefix(family)
                .ok_or_else(|| format!("{name} outside its family {family}"))?;
            let allowed: &[&str] = match kind {
                "counter" => &["_total"],
                "gauge" => &[""],
                _ => &["_bucket", "_sum", "_count"],
            };
            if !allowed.contains(&suffix) {
                return Err(format!("{name} is not a sample name of {kind} {family}"));
            }
            let v: f64 = value.parse().map_err(|_| format!("bad value: {line}"))?;
            if kind != "histogram" || suffix == "_sum" {
                continue;
            }
            let other: Vec<&str> = labels
                .split(',')
                .filter(|l| !l.is_empty() && !l.starts_with("le="))
                .collect();
            let key = format!("{family}{{{}}}", other.join(","));
            if suffix == "_count" {
                counts.insert(key, v as u64);
                continue;
            }
            let le = labels
                .split(',')
                .find_map(|l| l.strip_prefix("le=\""))
                .and_then(|l| l.strip_suffix('"'))
                .ok_or_else(|| format!("bucket without le: {line}"))?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().map_err(|_| format!("bad le: {line}"))?
            };
            buckets.entry(key).or_default().push((le, v as u64));
        }
        for (key, series) in &buckets {
            let ordered = series
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1);
            let last = series.last().copied();
            match (ordered, last) {
                (true, Some((le, n))) if le == f64::INFINITY && counts.get(key) == Some(&n) => {}
                _ => {
                    return Err(format!(
                        "{key}: buckets {series:?}, count {:?}",
                        counts.get(key)
                    ));
                }
            }
        }
        Ok(buckets)
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        sock.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        sock.read_to_string(&mut out).await.unwrap();
        out
    }

    #[actix_rt::test]
    async fn metrics_parse_and_the_sync_latency_is_a_histogram_with_buckets() {
        let bus = Bus::new();
        let mut inbox = bus.register_inbox("answerer", "answerers", 8).unwrap();
        let answerer = bus.endpoint("answerer");
        actix_rt::spawn(async move {
            while let Ok(req) = inbox.recv().await {
                answerer.send_resp(req.response(Content::null()));
            }
        });
        let ctl = bus.endpoint("ctl");
        for _ in 0..3 {
            ctl.send_sync("answerer", Message::new(), Duration::from_secs(10))
                .await
                .unwrap();
        }
        let metrics = Metrics::default();
        crate::metrics::bus(&metrics, bus.endpoint("metrics"));
        crate::metrics::edgecontroller(&metrics, Default::default());
        crate::metrics::dynamiccontroller(&metrics, Default::default());
        crate::metrics::node_authorization(
            &metrics,
            vec![("edgecontroller", Box::new(|| vec![("patchPod", 2)]))],
        );
        crate::metrics::listeners(
            &metrics,
            vec![Box::new(|| {
                vec![kubeedge_api::listener::ListenerStats {
                    listener: "cloudhub_websocket",
                    ..Default::default()
                }]
            })],
        );
        let ops = Ops {
            metrics,
            ..Ops::default()
        };
        let (addr, server) = serve("127.0.0.1:0", ops).unwrap();
        let handle = server.handle();
        actix_rt::spawn(server);

        let response = get(addr, "/metrics").await;
        handle.stop(true).await;
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/openmetrics-text"),
            "{head}"
        );
        let histograms = parse(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        let ctl = &histograms["beehive_sync_duration_seconds{module=\"ctl\"}"];
        assert_eq!(ctl.len(), beehive::SYNC_BUCKETS.len() + 1, "{ctl:?}");
        assert_eq!(ctl.last().map(|b| b.1), Some(3), "{ctl:?}");
        assert!(body.contains("# TYPE beehive_sync_duration_seconds histogram\n"));
        for line in [
            "beehive_messages_sent_total{module=\"ctl\"} 3",
            "cloudcore_node_authorization_denied_total{module=\"edgecontroller\",kind=\"patchPod\"} 2",
            "cloudcore_listener_connections{listener=\"cloudhub_websocket\"} 0",
            "dynamiccontroller_listeners 0",
        ] {
            assert!(body.lines().any(|l| l == line), "{line} missing:\n{body}");
        }
    }

    #[test]
    fn the_checker_refuses_what_a_scraper_would() {
        let ok = "# TYPE a histogram\na_bucket{le=\"1.0\"} 1\na_bucket{le=\"+Inf\"} 2\na_count 2\na_sum 0.5\n# EOF\n";
        assert!(parse(ok).is_ok());
        for bad in [
            // Counters as two families: the old `_sum`/`_count` exposition.
            "# TYPE a_count counter\na_count 2\n# EOF\n",
            "# TYPE a gauge\na 1\n# TYPE a gauge\na 1\n# EOF\n",
            "# TYPE a histogram\na_bucket{le=\"1.0\"} 3\na_bucket{le=\"+Inf\"} 2\na_count 2\n# EOF\n",
            "# TYPE a histogram\na_bucket{le=\"+Inf\"} 2\na_count 3\n# EOF\n",
            "# TYPE a gauge\na 1\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
