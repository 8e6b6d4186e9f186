//! The operations server (`commonConfig.monitorServer`): `/healthz`, `/readyz`, Prometheus
//! `/metrics` and `/debug/nodes/{name}` (why `kubectl logs/exec` would fail for a node).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpResponse, HttpServer, web};

use crate::diagnose::{Diagnostics, diagnose};

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

/// Prometheus text exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts a metric family.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample; labels as `(name, value)` pairs, values escaped.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.text, "{k}=\"{v}\"");
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// The text so far.
    pub fn into_text(self) -> String {
        self.text
    }
}

type Collector = Box<dyn Fn(&mut Exposition) + Send + Sync>;

/// Metric collectors; each writes its families when `/metrics` is scraped.
#[derive(Clone, Default)]
pub struct Metrics(Arc<Mutex<Vec<Collector>>>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Adds a collector.
    pub fn register(&self, collector: impl Fn(&mut Exposition) + Send + Sync + 'static) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(collector));
    }

    /// Renders every collector.
    pub fn render(&self) -> String {
        let mut out = Exposition::default();
        for c in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            c(&mut out);
        }
        out.into_text()
    }
}

/// Starts the operations server on the running actix system; returns the bound address.
pub fn serve(
    bind: &str,
    readiness: Readiness,
    metrics: Metrics,
) -> std::io::Result<(SocketAddr, actix_web::dev::Server)> {
    serve_with(bind, readiness, metrics, Diagnostics::default())
}

/// [`serve`] with node diagnostics, answered once the composition fills `diagnostics`.
pub fn serve_with(
    bind: &str,
    readiness: Readiness,
    metrics: Metrics,
    diagnostics: Diagnostics,
) -> std::io::Result<(SocketAddr, actix_web::dev::Server)> {
    let server = HttpServer::new(move || {
        let readiness = readiness.clone();
        let metrics = metrics.clone();
        let diagnostics = diagnostics.clone();
        App::new()
            .route(
                "/debug/nodes/{name}",
                web::get().to(move |name: web::Path<String>| {
                    let sources = diagnostics.sources();
                    async move {
                        // The name reaches an API path: only a node name is looked up.
                        if !kubeedge_api::validation::is_dns1123_subdomain(&name) {
                            return HttpResponse::BadRequest()
                                .body(format!("{:?} is not a node name", name.as_str()));
                        }
                        match sources {
                            Some(s) => HttpResponse::Ok().json(diagnose(&s, &name).await),
                            None => HttpResponse::ServiceUnavailable()
                                .body("modules not running (standby or starting)"),
                        }
                    }
                }),
            )
            .route(
                "/healthz",
                web::get().to(|| async { HttpResponse::Ok().body("ok") }),
            )
            .route(
                "/readyz",
                web::get().to(move || {
                    let phase = readiness.phase();
                    async move {
                        match phase {
                            Phase::Ready => HttpResponse::Ok().body("ok"),
                            Phase::Standby => {
                                HttpResponse::ServiceUnavailable().body("standby: not the leader")
                            }
                            Phase::Starting => HttpResponse::ServiceUnavailable().body("starting"),
                            Phase::ShuttingDown => {
                                HttpResponse::ServiceUnavailable().body("shutting down")
                            }
                        }
                    }
                }),
            )
            .route(
                "/metrics",
                web::get().to(move || {
                    let text = metrics.render();
                    async move {
                        HttpResponse::Ok()
                            .content_type("text/plain; version=0.0.4")
                            .body(text)
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
