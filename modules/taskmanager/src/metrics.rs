//! The taskmanager's metrics (prometheus-client types), registered under `taskmanager_`:
//! jobs by phase, tasks sent, node results, reports by outcome, status writes, and how long
//! node tasks and jobs take.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::kind::JobKind;
use crate::wire::Refusal;

/// `kind` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub(crate) kind: &'static str,
}

/// `kind` and `phase` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PhaseLabels {
    pub(crate) kind: &'static str,
    pub(crate) phase: String,
}

/// `outcome` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabel {
    pub(crate) outcome: &'static str,
}

/// `kind` and `outcome` labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindOutcome {
    pub(crate) kind: &'static str,
    pub(crate) outcome: &'static str,
}

/// Buckets of task and job durations, in seconds: a pull of a small image to a large upgrade.
const DURATION_BUCKETS: [f64; 12] = [
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
];

fn durations() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The taskmanager's metrics; cheap to clone (clones share the values).
#[derive(Debug, Clone)]
pub struct TaskManagerMetrics {
    pub(crate) jobs: Family<PhaseLabels, Gauge>,
    pub(crate) sent: Family<KindLabel, Counter>,
    pub(crate) results: Family<PhaseLabels, Counter>,
    pub(crate) reports: Family<OutcomeLabel, Counter>,
    pub(crate) writes: Family<KindOutcome, Counter>,
    pub(crate) task_seconds: Family<KindLabel, Histogram, fn() -> Histogram>,
    pub(crate) job_seconds: Family<KindLabel, Histogram, fn() -> Histogram>,
    /// Jobs by kind and phase as each engine last counted them.
    pub(crate) by_phase: Arc<Mutex<BTreeMap<(JobKind, String), i64>>>,
}

impl Default for TaskManagerMetrics {
    fn default() -> Self {
        TaskManagerMetrics {
            jobs: Family::default(),
            sent: Family::default(),
            results: Family::default(),
            reports: Family::default(),
            writes: Family::default(),
            task_seconds: Family::new_with_constructor(durations),
            job_seconds: Family::new_with_constructor(durations),
            by_phase: Arc::default(),
        }
    }
}

/// What the metrics say now, for tests and tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskManagerSnapshot {
    /// Tasks sent to edges, all kinds.
    pub sent: u64,
    /// Reports by outcome (`accepted` or a refusal's label).
    pub reports: BTreeMap<&'static str, u64>,
}

impl TaskManagerMetrics {
    /// Registers the families under `taskmanager_`:
    /// `jobs{kind,phase}` (gauge), `tasks_sent_total{kind}`,
    /// `node_results_total{kind,phase}` (`Successful`, `Failure`, `Unknown` written by this
    /// replica), `reports_total{outcome}`, `status_writes_total{kind,outcome}` (`ok`,
    /// `conflict`, `error`), and the histograms `node_task_duration_seconds{kind}` (sent to
    /// final result) and `job_duration_seconds{kind}` (created to `Completed`/`Failure`).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("taskmanager");
        r.register(
            "jobs",
            "Node jobs by kind and status.phase (empty: not initialised)",
            self.jobs.clone(),
        );
        r.register(
            "tasks_sent",
            "Node tasks sent to edges by this replica",
            self.sent.clone(),
        );
        r.register(
            "node_results",
            "Node tasks this replica ended, by final phase (Successful, Failure, Unknown)",
            self.results.clone(),
        );
        r.register(
            "reports",
            "Edge reports by outcome: accepted, or why they were refused",
            self.reports.clone(),
        );
        r.register(
            "status_writes",
            "Job status writes by outcome (ok, conflict, error)",
            self.writes.clone(),
        );
        r.register(
            "node_task_duration_seconds",
            "From sending a node its task to its final result",
            self.task_seconds.clone(),
        );
        r.register(
            "job_duration_seconds",
            "From a job's creation to Completed or Failure",
            self.job_seconds.clone(),
        );
    }

    pub(crate) fn report(&self, outcome: Result<(), &Refusal>) {
        let label = match outcome {
            Ok(()) => "accepted",
            Err(r) => r.label(),
        };
        self.reports
            .get_or_create(&OutcomeLabel { outcome: label })
            .inc();
    }

    pub(crate) fn write(&self, kind: JobKind, outcome: &'static str) {
        self.writes
            .get_or_create(&KindOutcome {
                kind: kind.api_kind(),
                outcome,
            })
            .inc();
    }

    /// Replaces the job counts of `kind`.
    pub(crate) fn set_jobs(&self, kind: JobKind, counts: BTreeMap<String, i64>) {
        let mut all = self.by_phase.lock().unwrap_or_else(|e| e.into_inner());
        let old: Vec<String> = all
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, p)| p.clone())
            .collect();
        for p in old {
            if !counts.contains_key(&p) {
                all.remove(&(kind, p.clone()));
                self.jobs
                    .get_or_create(&PhaseLabels {
                        kind: kind.api_kind(),
                        phase: p,
                    })
                    .set(0);
            }
        }
        for (p, n) in counts {
            self.jobs
                .get_or_create(&PhaseLabels {
                    kind: kind.api_kind(),
                    phase: p.clone(),
                })
                .set(n);
            all.insert((kind, p), n);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> TaskManagerSnapshot {
        let sent = JobKind::ALL
            .iter()
            .map(|k| {
                self.sent
                    .get_or_create(&KindLabel { kind: k.api_kind() })
                    .get()
            })
            .sum();
        let reports = std::iter::once("accepted")
            .chain(Refusal::ALL.iter().map(Refusal::label))
            .map(|l| {
                (
                    l,
                    self.reports
                        .get_or_create(&OutcomeLabel { outcome: l })
                        .get(),
                )
            })
            .collect();
        TaskManagerSnapshot { sent, reports }
    }

    /// Refused reports that reached beyond the node's own tasks, by kind, for
    /// `cloudcore_node_authorization_denied_total{module="taskmanager"}`.
    pub fn denied(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .filter(|r| r.is_denial())
            .map(|r| {
                (
                    match r {
                        Refusal::OtherNode => "taskReportOtherNode",
                        _ => "taskReportNotSent",
                    },
                    self.reports
                        .get_or_create(&OutcomeLabel { outcome: r.label() })
                        .get(),
                )
            })
            .collect()
    }
}
