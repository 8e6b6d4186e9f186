//! The three job kinds, their names on the wire and in the API, and their action flows: which
//! reported action ends a node's task, with which result.

use kubeedge_api::operations::{action, kind};

/// A node job kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKind {
    /// `NodeUpgradeJob`: edgecore upgraded through keadm.
    NodeUpgrade,
    /// `ImagePrePullJob`: images pulled into the node's container runtime.
    ImagePrePull,
    /// `ConfigUpdateJob`: fields of edgecore.yaml changed through keadm.
    ConfigUpdate,
}

/// What a reported action means for the node's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The edge goes on with the next action (or waits for local confirmation): the node
    /// stays `InProgress`.
    Continue,
    /// The flow ended: the node's task is `Successful`.
    Succeeded,
    /// The flow ended: the node's task is `Failure`.
    Failed,
}

impl Step {
    /// True when the node's task ends with this step.
    pub fn is_final(self) -> bool {
        !matches!(self, Step::Continue)
    }
}

impl JobKind {
    /// The three kinds.
    pub const ALL: [JobKind; 3] = [
        JobKind::NodeUpgrade,
        JobKind::ImagePrePull,
        JobKind::ConfigUpdate,
    ];

    /// The resource type in task messages (`nodeupgradejob`, …).
    pub fn resource_type(self) -> &'static str {
        match self {
            JobKind::NodeUpgrade => kind::NODE_UPGRADE_JOB,
            JobKind::ImagePrePull => kind::IMAGE_PRE_PULL_JOB,
            JobKind::ConfigUpdate => kind::CONFIG_UPDATE_JOB,
        }
    }

    /// The kind named by a task message's resource type.
    pub fn from_resource_type(t: &str) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| k.resource_type() == t)
    }

    /// The API kind (`NodeUpgradeJob`, …).
    pub fn api_kind(self) -> &'static str {
        match self {
            JobKind::NodeUpgrade => "NodeUpgradeJob",
            JobKind::ImagePrePull => "ImagePrePullJob",
            JobKind::ConfigUpdate => "ConfigUpdateJob",
        }
    }

    /// The job controller's finalizer.
    pub fn finalizer(self) -> &'static str {
        match self {
            JobKind::NodeUpgrade => kind::NODE_UPGRADE_JOB_FINALIZER,
            JobKind::ImagePrePull => kind::IMAGE_PRE_PULL_JOB_FINALIZER,
            JobKind::ConfigUpdate => kind::CONFIG_UPDATE_JOB_FINALIZER,
        }
    }

    /// The actions of the flow, first to last.
    pub fn actions(self) -> &'static [&'static str] {
        match self {
            JobKind::NodeUpgrade => &[
                action::CHECK,
                action::WAITING_CONFIRMATION,
                action::BACK_UP,
                action::UPGRADE,
                action::ROLL_BACK,
            ],
            JobKind::ImagePrePull => &[action::CHECK, action::PULL],
            JobKind::ConfigUpdate => &[
                action::CHECK,
                action::BACK_UP,
                action::UPDATE,
                action::ROLL_BACK,
            ],
        }
    }

    /// What the edge's report of `action` with `succeeded` means, by the flow: an action with
    /// no successor for that result ends the task. `None` for an action the flow does not have.
    ///
    /// A successful `RollBack` counts as `Successful`, as KubeEdge counts it (the action flow
    /// shows the failed upgrade before it).
    pub fn step(self, action_name: &str, succeeded: bool) -> Option<Step> {
        if !self.actions().contains(&action_name) {
            return None;
        }
        let ends_ok = matches!(
            (self, action_name),
            (JobKind::NodeUpgrade, action::UPGRADE)
                | (JobKind::ImagePrePull, action::PULL)
                | (JobKind::ConfigUpdate, action::UPDATE)
                | (_, action::ROLL_BACK)
        );
        // Only the upgrade and the update go on to a rollback when they fail.
        let failure_goes_on = matches!(
            (self, action_name),
            (JobKind::NodeUpgrade, action::UPGRADE) | (JobKind::ConfigUpdate, action::UPDATE)
        );
        Some(match (succeeded, ends_ok, failure_goes_on) {
            (true, true, _) => Step::Succeeded,
            (true, false, _) => Step::Continue,
            (false, _, true) => Step::Continue,
            (false, _, false) => Step::Failed,
        })
    }

    /// Whether a `Failure` job phase is final. KubeEdge keeps recomputing a failed
    /// NodeUpgradeJob (a late report can still complete it); the other kinds stop.
    pub fn failure_is_final(self) -> bool {
        !matches!(self, JobKind::NodeUpgrade)
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.api_kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_action_table_is_kubeedges() {
        use JobKind::*;
        use Step::*;
        let table = [
            (NodeUpgrade, "Check", Continue, Failed),
            (NodeUpgrade, "WaitingConfirmation", Continue, Failed),
            (NodeUpgrade, "BackUp", Continue, Failed),
            (NodeUpgrade, "Upgrade", Succeeded, Continue),
            (NodeUpgrade, "RollBack", Succeeded, Failed),
            (ImagePrePull, "Check", Continue, Failed),
            (ImagePrePull, "Pull", Succeeded, Failed),
            (ConfigUpdate, "Check", Continue, Failed),
            (ConfigUpdate, "BackUp", Continue, Failed),
            (ConfigUpdate, "Update", Succeeded, Continue),
            (ConfigUpdate, "RollBack", Succeeded, Failed),
        ];
        for (kind, action, ok, failed) in table {
            assert_eq!(kind.step(action, true), Some(ok), "{kind} {action} ok");
            assert_eq!(
                kind.step(action, false),
                Some(failed),
                "{kind} {action} failed"
            );
        }
        assert_eq!(ImagePrePull.step("Upgrade", true), None);
        assert_eq!(NodeUpgrade.step("Pull", true), None);
        assert_eq!(ConfigUpdate.step("check", true), None, "names are exact");
    }

    #[test]
    fn names_round_trip() {
        for k in JobKind::ALL {
            assert_eq!(JobKind::from_resource_type(k.resource_type()), Some(k));
            assert!(k.finalizer().starts_with("kubeedge.io/"));
            assert_eq!(
                k.actions()[0],
                "Check",
                "the edge starts every flow with Check"
            );
        }
        assert_eq!(JobKind::from_resource_type("imagepulljob"), None);
    }
}
