//! The changes made to a job's status, as pure functions on the object: initialisation, a task
//! sent, a report, a timeout, the job phase. Each returns whether it changed anything, so the
//! writer knows whether to write; each is safe to apply again to a fresher copy of the job
//! (that is how a conflicting write is retried).
//!
//! The order of writes is causal: a task is marked sent only while it is `Pending`; a report
//! never moves a node back from `Successful` or `Failure`, and a non-final report does not
//! undo a timeout (`Unknown`), while a final report does (a late real result says more than
//! the timeout).

use k8s_openapi::jiff::Timestamp;
use kubeedge_api::operations::v1alpha2::ActionStatus;
use kubeedge_api::operations::{action, phase};

use crate::job::{NodeJob, NodeTask, edge_reason};
use crate::kind::{JobKind, Step};
use crate::select::Chosen;
use crate::wire::{Refusal, Report};

/// The reason of a node whose task timed out (KubeEdge's words).
pub const TIMED_OUT: &str = "The node task has timed out";

/// The most `actionFlow` entries a node may have: the longest flow reported twice over
/// (KubeEdge's edge reports an upgrade again after restarting), with room to spare.
pub const MAX_FLOW: usize = 16;

/// The reason of a node no replica holds a session of (KubeEdge's words).
pub fn not_connected(node: &str) -> String {
    format!("the node {node} is not connected to the current cloudcore instance")
}

/// A node task's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePhase {
    /// Not sent yet.
    Pending,
    /// Sent.
    InProgress,
    /// Finished well.
    Successful,
    /// Finished badly, or never started.
    Failure,
    /// Timed out.
    Unknown,
    /// Anything else (written by another tool): treated as still running.
    Other,
}

impl NodePhase {
    /// Reads a `phase` string.
    pub fn of(s: &str) -> NodePhase {
        match s {
            phase::PENDING => NodePhase::Pending,
            phase::IN_PROGRESS => NodePhase::InProgress,
            phase::SUCCESSFUL => NodePhase::Successful,
            phase::FAILURE => NodePhase::Failure,
            phase::UNKNOWN => NodePhase::Unknown,
            _ => NodePhase::Other,
        }
    }

    /// Whether the task has ended (by a report, a verification failure or a timeout).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            NodePhase::Successful | NodePhase::Failure | NodePhase::Unknown
        )
    }
}

/// Whether a job phase is final for `kind` (nothing more is computed or sent).
pub fn job_is_final(kind: JobKind, job_phase: &str) -> bool {
    job_phase == phase::COMPLETED || (job_phase == phase::FAILURE && kind.failure_is_final())
}

/// Whether work may start or go on: the job was initialised and is not finished.
pub fn job_is_running(job_phase: &str) -> bool {
    job_phase == phase::INIT || job_phase == phase::IN_PROGRESS
}

/// Whether the node's task was ever sent to it: only then may it report.
pub fn was_sent<T: NodeTask>(task: &T) -> bool {
    match NodePhase::of(task.phase()) {
        NodePhase::InProgress | NodePhase::Successful | NodePhase::Unknown => true,
        NodePhase::Pending => false,
        // A verification failure or "not connected" was never sent; a failed flow was.
        NodePhase::Failure | NodePhase::Other => !task.action_flow().is_empty(),
    }
}

fn index<J: NodeJob>(job: &J, node: &str) -> Option<usize> {
    job.tasks().iter().position(|t| t.node() == node)
}

/// Initialises an uninitialised job: `Init` with one entry per chosen node, or `Failure`
/// with the reason. Does nothing once the job has a phase.
pub fn init<J: NodeJob>(job: &mut J, chosen: Result<Vec<Chosen>, String>) -> bool {
    if !job.phase().is_empty() {
        return false;
    }
    match chosen {
        Ok(nodes) => {
            *job.tasks_mut() = nodes
                .iter()
                .map(|c| J::Task::new(&c.node, c.phase, &c.reason))
                .collect();
            job.set_phase(phase::INIT, "");
        }
        Err(reason) => {
            job.tasks_mut().clear();
            job.set_phase(phase::FAILURE, &reason);
        }
    }
    true
}

/// Marks `node`'s task sent (`InProgress`), only while it is `Pending`.
pub fn claim<J: NodeJob>(job: &mut J, node: &str) -> bool {
    let Some(i) = index(job, node) else {
        return false;
    };
    let task = &mut job.tasks_mut()[i];
    if NodePhase::of(task.phase()) != NodePhase::Pending {
        return false;
    }
    task.set(phase::IN_PROGRESS, "");
    true
}

/// Fails a `Pending` node no replica holds a session of.
pub fn fail_unconnected<J: NodeJob>(job: &mut J, node: &str) -> bool {
    let Some(i) = index(job, node) else {
        return false;
    };
    let task = &mut job.tasks_mut()[i];
    if NodePhase::of(task.phase()) != NodePhase::Pending {
        return false;
    }
    task.set(phase::FAILURE, &not_connected(node));
    true
}

/// Times out `node`'s task, only if it is still running and nothing was reported since the
/// decision (`flow_len` entries then).
pub fn time_out<J: NodeJob>(job: &mut J, node: &str, flow_len: usize) -> bool {
    let Some(i) = index(job, node) else {
        return false;
    };
    let task = &mut job.tasks_mut()[i];
    if NodePhase::of(task.phase()).is_terminal() || task.action_flow().len() != flow_len {
        return false;
    }
    task.set(phase::UNKNOWN, TIMED_OUT);
    true
}

/// What a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// What the action means for the flow.
    pub step: Step,
    /// Anything changed (an exact repeat of an entry changes nothing).
    pub changed: bool,
    /// The node's phase after the report, when the report changed it to a terminal one.
    pub ended: Option<&'static str>,
    /// The `extend` could not be read (the rest was applied).
    pub extend_error: Option<String>,
}

/// The RFC 3339 text of `t` (whole seconds, `Z`), as the edge writes it.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Applies `node`'s report (already known to come from `node`'s own session): the node must
/// be one of the job's and have been sent its task, the action must be in the kind's flow.
/// The entry's time is the edge's `finishTime` when it is RFC 3339, else `received`.
pub fn report<J: NodeJob>(
    job: &mut J,
    node: &str,
    r: &Report,
    received: Timestamp,
) -> Result<Applied, Refusal> {
    let i = index(job, node).ok_or(Refusal::NotSent)?;
    if !was_sent(&job.tasks()[i]) {
        return Err(Refusal::NotSent);
    }
    let step = J::KIND
        .step(&r.action, r.succ)
        .ok_or(Refusal::UnknownAction)?;
    let time = r
        .finish_time
        .parse::<Timestamp>()
        .map(rfc3339)
        .unwrap_or_else(|_| rfc3339(received));
    let entry = ActionStatus {
        action: r.action.clone(),
        status: if r.succ { action::TRUE } else { action::FALSE }.into(),
        reason: if r.succ {
            String::new()
        } else {
            edge_reason(&r.reason)
        },
        time,
    };
    let task = &job.tasks()[i];
    if task.action_flow().contains(&entry) {
        return Ok(Applied {
            step,
            changed: false,
            ended: None,
            extend_error: None,
        });
    }
    if task.action_flow().len() >= MAX_FLOW {
        return Err(Refusal::TooMany);
    }
    let before = NodePhase::of(task.phase());
    let failure_reason = if entry.reason.is_empty() {
        format!("{} failed on the edge", r.action)
    } else {
        entry.reason.clone()
    };
    let next: Option<(&'static str, String)> = match (before, step) {
        (NodePhase::InProgress | NodePhase::Other, Step::Continue) => {
            Some((phase::IN_PROGRESS, String::new()))
        }
        (NodePhase::InProgress | NodePhase::Other | NodePhase::Unknown, Step::Succeeded) => {
            Some((phase::SUCCESSFUL, String::new()))
        }
        (NodePhase::InProgress | NodePhase::Other | NodePhase::Unknown, Step::Failed) => {
            Some((phase::FAILURE, failure_reason))
        }
        // A timed-out node that is still working stays timed out until it finishes; a
        // finished node stays finished.
        _ => None,
    };
    let task = &mut job.tasks_mut()[i];
    task.action_flow_mut().push(entry);
    let mut ended = None;
    if let Some((p, reason)) = next {
        if NodePhase::of(p).is_terminal() && NodePhase::of(task.phase()) != NodePhase::of(p) {
            ended = Some(p);
        }
        task.set(p, &reason);
    }
    let extend_error = job.apply_extend(i, &r.action, &r.extend).err();
    Ok(Applied {
        step,
        changed: true,
        ended,
        extend_error,
    })
}

/// The job phase from its nodes, with KubeEdge's counting: none → `Failure`; any still
/// running → `InProgress`; failed (`Failure` or `Unknown`) over total, rounded half-up to two
/// decimals, above `tolerance` → `Failure` with the count; else `Completed`. A final phase
/// is left alone; a job that failed before it had nodes keeps its reason.
pub fn aggregate<J: NodeJob>(job: &mut J, tolerance: f64) -> bool {
    let current = job.phase().to_owned();
    if current.is_empty() || job_is_final(J::KIND, &current) {
        return false;
    }
    let tasks = job.tasks();
    let total = tasks.len();
    let failed = tasks
        .iter()
        .filter(|t| {
            matches!(
                NodePhase::of(t.phase()),
                NodePhase::Failure | NodePhase::Unknown
            )
        })
        .count();
    let processing = tasks
        .iter()
        .filter(|t| !NodePhase::of(t.phase()).is_terminal())
        .count();
    let (next, reason) = if total == 0 {
        (phase::FAILURE, job.reason().to_owned())
    } else if processing > 0 {
        (phase::IN_PROGRESS, String::new())
    } else {
        let ratio = ((failed as f64 / total as f64) * 100.0).round() / 100.0;
        if failed > 0 && ratio > tolerance {
            (
                phase::FAILURE,
                format!(
                    "the number of failed nodes is {failed}/{total}, which exceeds the failure tolerance threshold"
                ),
            )
        } else {
            (phase::COMPLETED, String::new())
        }
    };
    if next == current && reason == job.reason() {
        return false;
    }
    job.set_phase(next, &reason);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeedge_api::operations::v1alpha2::{
        ConfigUpdateJob, ConfigUpdateJobSpec, ImagePrePullJob, ImagePrePullJobSpec, NodeUpgradeJob,
        NodeUpgradeJobSpec,
    };

    fn now() -> Timestamp {
        "2026-08-06T07:00:00Z".parse().unwrap()
    }

    fn rep(action: &str, succ: bool, time: &str, extend: &str) -> Report {
        Report {
            action: action.into(),
            succ,
            finish_time: time.into(),
            reason: if succ { String::new() } else { "boom".into() },
            extend: extend.into(),
        }
    }

    fn chosen(nodes: &[(&str, &'static str)]) -> Vec<Chosen> {
        nodes
            .iter()
            .map(|(n, p)| Chosen {
                node: n.to_string(),
                phase: p,
                reason: if *p == "Failure" {
                    "the node is not ready".into()
                } else {
                    String::new()
                },
            })
            .collect()
    }

    fn prepull(nodes: &[(&str, &'static str)]) -> ImagePrePullJob {
        let mut job = ImagePrePullJob::new("p", ImagePrePullJobSpec::default());
        job.spec.image_pre_pull_template.images = vec!["nginx:1.27".into()];
        assert!(init(&mut job, Ok(chosen(nodes))));
        job
    }

    #[test]
    fn a_prepull_node_goes_pending_sent_checked_pulled() {
        let mut job = prepull(&[("e1", "Pending")]);
        assert_eq!(job.phase(), "Init");
        assert!(!init(&mut job, Err("x".into())), "only once");
        assert!(aggregate(&mut job, 0.1));
        assert_eq!(job.phase(), "InProgress");
        assert_eq!(
            report(&mut job, "e1", &rep("Check", true, "", ""), now()),
            Err(Refusal::NotSent),
            "a report for a task never sent"
        );
        assert!(claim(&mut job, "e1"));
        assert!(!claim(&mut job, "e1"), "sent once");
        let a = report(
            &mut job,
            "e1",
            &rep("Check", true, "2026-08-06T07:00:01Z", ""),
            now(),
        )
        .unwrap();
        assert_eq!((a.step, a.ended), (Step::Continue, None));
        assert_eq!(job.tasks()[0].action_flow[0].time, "2026-08-06T07:00:01Z");
        let a = report(
            &mut job,
            "e1",
            &rep(
                "Pull",
                true,
                "2026-08-06T07:00:02Z",
                r#"[{"image":"nginx:1.27","status":"True"}]"#,
            ),
            now(),
        )
        .unwrap();
        assert_eq!(a.ended, Some("Successful"));
        assert_eq!(job.tasks()[0].image_status[0].status, "True");
        assert!(aggregate(&mut job, 0.1));
        assert_eq!(job.phase(), "Completed");
        assert!(!aggregate(&mut job, 0.1), "final");
    }

    #[test]
    fn duplicates_and_floods_change_nothing_and_finals_are_sticky() {
        let mut job = prepull(&[("e1", "Pending")]);
        claim(&mut job, "e1");
        let pull_fail = rep("Pull", false, "2026-08-06T07:00:02Z", "");
        let a = report(&mut job, "e1", &pull_fail, now()).unwrap();
        assert_eq!(a.ended, Some("Failure"));
        assert_eq!(job.tasks()[0].reason, "boom");
        let again = report(&mut job, "e1", &pull_fail, now()).unwrap();
        assert!(!again.changed && again.ended.is_none(), "an exact repeat");
        let late_ok = report(
            &mut job,
            "e1",
            &rep("Pull", true, "2026-08-06T07:00:03Z", ""),
            now(),
        )
        .unwrap();
        assert_eq!(late_ok.ended, None);
        assert_eq!(
            job.tasks()[0].phase,
            "Failure",
            "a final phase is not reverted"
        );
        assert_eq!(
            report(&mut job, "e1", &rep("Upgrade", true, "", ""), now()),
            Err(Refusal::UnknownAction)
        );
        for n in 0..MAX_FLOW {
            let r = rep("Check", true, &format!("2026-08-06T07:01:{n:02}Z"), "");
            let _ = report(&mut job, "e1", &r, now());
        }
        assert_eq!(
            report(
                &mut job,
                "e1",
                &rep("Check", true, "2026-08-06T08:00:00Z", ""),
                now()
            ),
            Err(Refusal::TooMany)
        );
        assert_eq!(job.tasks()[0].action_flow.len(), MAX_FLOW);
        assert_eq!(
            report(&mut job, "e9", &rep("Check", true, "", ""), now()),
            Err(Refusal::NotSent)
        );
    }

    #[test]
    fn timeouts_release_and_a_late_final_report_replaces_unknown() {
        let mut job = prepull(&[("e1", "Pending"), ("e2", "Pending")]);
        claim(&mut job, "e1");
        report(&mut job, "e1", &rep("Check", true, "", ""), now()).unwrap();
        assert!(
            !time_out(&mut job, "e1", 0),
            "a report came after the decision"
        );
        assert!(time_out(&mut job, "e1", 1));
        assert_eq!(
            (
                job.tasks()[0].phase.as_str(),
                job.tasks()[0].reason.as_str()
            ),
            ("Unknown", TIMED_OUT)
        );
        let a = report(
            &mut job,
            "e1",
            &rep("Check", true, "2026-08-06T07:05:00Z", ""),
            now(),
        )
        .unwrap();
        assert!(a.changed && a.ended.is_none());
        assert_eq!(
            job.tasks()[0].phase,
            "Unknown",
            "still working, still timed out"
        );
        let a = report(&mut job, "e1", &rep("Pull", true, "", ""), now()).unwrap();
        assert_eq!(a.ended, Some("Successful"));
        assert_eq!(
            job.tasks()[0].action_flow[2].time,
            "2026-08-06T07:00:00Z",
            "cloud time"
        );
        assert!(fail_unconnected(&mut job, "e2"));
        assert_eq!(
            job.tasks()[1].reason,
            "the node e2 is not connected to the current cloudcore instance"
        );
        aggregate(&mut job, 0.0);
        assert_eq!(job.phase(), "Failure");
        assert_eq!(
            job.reason(),
            "the number of failed nodes is 1/2, which exceeds the failure tolerance threshold"
        );
    }

    #[test]
    fn tolerance_counts_verification_failures_rounded_to_two_decimals() {
        for (tolerance, want) in [(0.3, "Failure"), (0.5, "Completed"), (0.33, "Completed")] {
            let mut job = prepull(&[("a", "Pending"), ("b", "Pending"), ("c", "Failure")]);
            for n in ["a", "b"] {
                claim(&mut job, n);
                report(&mut job, n, &rep("Check", true, "", ""), now()).unwrap();
                report(&mut job, n, &rep("Pull", true, "", ""), now()).unwrap();
            }
            aggregate(&mut job, tolerance);
            assert_eq!(job.phase(), want, "1/3 against {tolerance}");
        }
    }

    #[test]
    fn init_failures_keep_their_reason_and_upgrade_failure_is_recomputed() {
        let mut job = NodeUpgradeJob::new("u", NodeUpgradeJobSpec::default());
        init(
            &mut job,
            Err("nodeNames and nodeSelector cannot both be empty".into()),
        );
        assert_eq!(job.phase(), "Failure");
        assert!(!aggregate(&mut job, 0.1), "the reason is kept");
        assert_eq!(
            job.reason(),
            "nodeNames and nodeSelector cannot both be empty"
        );
        // An upgrade that failed and was rolled back counts as successful (KubeEdge).
        let mut job = NodeUpgradeJob::new("u", NodeUpgradeJobSpec::default());
        init(&mut job, Ok(chosen(&[("e", "Pending")])));
        claim(&mut job, "e");
        for (a, ok, ext) in [
            ("Check", true, ""),
            ("WaitingConfirmation", true, ""),
            ("BackUp", true, "v1.22.1,v1.23.0"),
        ] {
            let r = report(&mut job, "e", &rep(a, ok, "", ext), now()).unwrap();
            assert_eq!(r.step, Step::Continue, "{a}");
        }
        assert_eq!(job.tasks()[0].current_version, "v1.23.0");
        let r = report(&mut job, "e", &rep("Upgrade", false, "", ""), now()).unwrap();
        assert_eq!(
            (r.step, job.tasks()[0].phase.as_str()),
            (Step::Continue, "InProgress")
        );
        let r = report(&mut job, "e", &rep("RollBack", true, "", ""), now()).unwrap();
        assert_eq!(r.ended, Some("Successful"));
        // ConfigUpdateJob: Failure is final.
        let mut job = ConfigUpdateJob::new("c", ConfigUpdateJobSpec::default());
        init(&mut job, Ok(chosen(&[("e", "Failure")])));
        aggregate(&mut job, 0.0);
        assert_eq!(job.phase(), "Failure");
        assert!(job_is_final(JobKind::ConfigUpdate, job.phase()));
        assert!(!job_is_final(JobKind::NodeUpgrade, "Failure"));
    }
}
