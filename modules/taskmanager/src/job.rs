//! One interface over the three v1alpha2 job types: what selects the nodes, the common
//! settings, the status the controller and the executor write, and what the edge is sent.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Resource;
use kube::core::ClusterResourceScope;
use kubeedge_api::operations::action;
use kubeedge_api::operations::v1alpha2::{
    ActionStatus, ConfigUpdateJob, ConfigUpdateJobNodeTaskStatus, ImagePrePullJob,
    ImagePrePullNodeTaskStatus, ImageStatus, NodeUpgradeJob, NodeUpgradeJobNodeTaskStatus,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::kind::JobKind;
use crate::spec::Common;

/// The installation-package repository KubeEdge documents as the default of
/// `NodeUpgradeJob.spec.image` (its v1alpha2 code never fills it in, and the edge then pulls
/// `:<version>`, which always fails).
pub const DEFAULT_UPGRADE_IMAGE: &str = "kubeedge/installation-package";

/// Longest reason kept from an edge report or an image result; longer text is cut (a node
/// cannot grow the job's status without bound).
pub(crate) const MAX_REASON_CHARS: usize = 1024;

/// How the job chooses its nodes.
#[derive(Debug, Clone, Copy)]
pub struct Targets<'a> {
    /// `nodeNames`.
    pub node_names: &'a [String],
    /// `labelSelector`.
    pub label_selector: Option<&'a LabelSelector>,
}

/// One node's entry of `status.nodeStatus`.
pub trait NodeTask: Clone + Debug + Default + Send + Sync {
    /// A new entry.
    fn new(node: &str, phase: &str, reason: &str) -> Self;
    /// `nodeName`.
    fn node(&self) -> &str;
    /// `phase`.
    fn phase(&self) -> &str;
    /// `reason`.
    fn reason(&self) -> &str;
    /// Sets `phase` and `reason`.
    fn set(&mut self, phase: &str, reason: &str);
    /// `actionFlow`.
    fn action_flow(&self) -> &[ActionStatus];
    /// `actionFlow`, to append to.
    fn action_flow_mut(&mut self) -> &mut Vec<ActionStatus>;
}

macro_rules! node_task {
    ($t:ty) => {
        impl NodeTask for $t {
            fn new(node: &str, phase: &str, reason: &str) -> Self {
                Self {
                    node_name: node.to_owned(),
                    phase: phase.to_owned(),
                    reason: reason.to_owned(),
                    ..Self::default()
                }
            }
            fn node(&self) -> &str {
                &self.node_name
            }
            fn phase(&self) -> &str {
                &self.phase
            }
            fn reason(&self) -> &str {
                &self.reason
            }
            fn set(&mut self, phase: &str, reason: &str) {
                self.phase = phase.to_owned();
                self.reason = reason.to_owned();
            }
            fn action_flow(&self) -> &[ActionStatus] {
                &self.action_flow
            }
            fn action_flow_mut(&mut self) -> &mut Vec<ActionStatus> {
                &mut self.action_flow
            }
        }
    };
}

node_task!(NodeUpgradeJobNodeTaskStatus);
node_task!(ImagePrePullNodeTaskStatus);
node_task!(ConfigUpdateJobNodeTaskStatus);

/// A node job of one of the three kinds, as stored (v1alpha2).
pub trait NodeJob:
    Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    /// The kind.
    const KIND: JobKind;
    /// Its `status.nodeStatus[]` entry.
    type Task: NodeTask;

    /// `nodeNames` / `labelSelector`.
    fn targets(&self) -> Targets<'_>;
    /// Timeout, concurrency, failure tolerance and check items as written.
    fn common(&self) -> Common<'_>;
    /// The kind's own spec rules; `Err` is the reason an operator reads in `status.reason`.
    fn check_spec(&self) -> Result<(), String>;
    /// What the edge gets as the content of `Check`: the spec, with what the edge needs
    /// filled in (the upgrade image's documented default).
    fn edge_spec(&self) -> serde_json::Value;
    /// `status.phase` (empty when there is no status).
    fn phase(&self) -> &str;
    /// `status.reason`.
    fn reason(&self) -> &str;
    /// Sets `status.phase` and `status.reason`.
    fn set_phase(&mut self, phase: &str, reason: &str);
    /// `status.nodeStatus`.
    fn tasks(&self) -> &[Self::Task];
    /// `status.nodeStatus`, to change.
    fn tasks_mut(&mut self) -> &mut Vec<Self::Task>;
    /// Applies the `extend` of a report of `action` to the node's entry `i` (versions of an
    /// upgrade, image results of a pull); `Err` when it cannot be read (the rest of the
    /// report still applies).
    fn apply_extend(&mut self, i: usize, action: &str, extend: &str) -> Result<(), String>;
    /// `imageSecrets` as namespace and name, when an ImagePrePullJob names one.
    fn pull_secret(&self) -> Option<(&str, &str)> {
        None
    }
    /// The images an ImagePrePullJob pulls.
    fn images(&self) -> &[String] {
        &[]
    }
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Cuts a reason from the edge to [`MAX_REASON_CHARS`].
pub(crate) fn edge_reason(text: &str) -> String {
    cut(text)
}

/// The status accessors of [`NodeJob`], alike for the three kinds: each stores `phase`,
/// `reason` and `nodeStatus` in an optional `status`.
macro_rules! job_status {
    () => {
        fn phase(&self) -> &str {
            self.status.as_ref().map_or("", |s| &s.phase)
        }

        fn reason(&self) -> &str {
            self.status.as_ref().map_or("", |s| &s.reason)
        }

        fn set_phase(&mut self, phase: &str, reason: &str) {
            let s = self.status.get_or_insert_with(Default::default);
            s.phase = phase.to_owned();
            s.reason = reason.to_owned();
        }

        fn tasks(&self) -> &[Self::Task] {
            self.status.as_ref().map_or(&[], |s| &s.node_status)
        }

        fn tasks_mut(&mut self) -> &mut Vec<Self::Task> {
            &mut self.status.get_or_insert_with(Default::default).node_status
        }
    };
}

impl NodeJob for NodeUpgradeJob {
    const KIND: JobKind = JobKind::NodeUpgrade;
    type Task = NodeUpgradeJobNodeTaskStatus;

    fn targets(&self) -> Targets<'_> {
        Targets {
            node_names: &self.spec.node_names,
            label_selector: self.spec.label_selector.as_ref(),
        }
    }

    fn common(&self) -> Common<'_> {
        Common {
            path: "spec.",
            timeout_seconds: self.spec.timeout_seconds,
            concurrency: self.spec.concurrency,
            failure_tolerate: &self.spec.failure_tolerate,
            check_items: &self.spec.check_items,
        }
    }

    fn check_spec(&self) -> Result<(), String> {
        crate::spec::upgrade_version(&self.spec.version)?;
        crate::spec::upgrade_image(&self.spec.image)
    }

    fn edge_spec(&self) -> serde_json::Value {
        let mut spec = self.spec.clone();
        if spec.image.is_empty() {
            spec.image = DEFAULT_UPGRADE_IMAGE.into();
        }
        serde_json::to_value(&spec).unwrap_or_default()
    }

    job_status!();

    fn apply_extend(&mut self, i: usize, act: &str, extend: &str) -> Result<(), String> {
        if !matches!(act, action::BACK_UP | action::UPGRADE | action::ROLL_BACK)
            || extend.is_empty()
        {
            return Ok(());
        }
        let Some((from, to)) = extend.split_once(',').filter(|(_, to)| !to.contains(',')) else {
            return Err(format!("extend {extend:?} is not \"<from>,<to>\""));
        };
        let task = &mut self.tasks_mut()[i];
        task.historic_version = cut(from);
        task.current_version = cut(to);
        Ok(())
    }
}

impl NodeJob for ImagePrePullJob {
    const KIND: JobKind = JobKind::ImagePrePull;
    type Task = ImagePrePullNodeTaskStatus;

    fn targets(&self) -> Targets<'_> {
        let t = &self.spec.image_pre_pull_template;
        Targets {
            node_names: &t.node_names,
            label_selector: t.label_selector.as_ref(),
        }
    }

    fn common(&self) -> Common<'_> {
        let t = &self.spec.image_pre_pull_template;
        Common {
            path: "spec.imagePrePullTemplate.",
            timeout_seconds: t.timeout_seconds,
            concurrency: t.concurrency,
            failure_tolerate: &t.failure_tolerate,
            check_items: &t.check_items,
        }
    }

    fn check_spec(&self) -> Result<(), String> {
        let t = &self.spec.image_pre_pull_template;
        crate::spec::images(&t.images)?;
        crate::spec::image_secret(&t.image_secret)?;
        crate::spec::retry_times(t.retry_times)
    }

    fn edge_spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }

    job_status!();

    fn apply_extend(&mut self, i: usize, act: &str, extend: &str) -> Result<(), String> {
        if act != action::PULL || extend.is_empty() {
            return Ok(());
        }
        let reported: Vec<ImageStatus> = serde_json::from_str(extend)
            .map_err(|e| format!("extend is not a list of image results: {e}"))?;
        // Only the job's own images, each once, in the job's order: the edge cannot add
        // entries of its own to the status.
        let images = &self.spec.image_pre_pull_template.images;
        let mut kept: Vec<ImageStatus> = Vec::new();
        for image in images {
            if kept.iter().any(|k| &k.image == image) {
                continue;
            }
            if let Some(r) = reported.iter().find(|r| &r.image == image) {
                kept.push(ImageStatus {
                    image: image.clone(),
                    status: match r.status.as_str() {
                        action::TRUE => action::TRUE.into(),
                        _ => action::FALSE.into(),
                    },
                    reason: cut(&r.reason),
                });
            }
        }
        self.tasks_mut()[i].image_status = kept;
        Ok(())
    }

    fn pull_secret(&self) -> Option<(&str, &str)> {
        crate::spec::split_secret(&self.spec.image_pre_pull_template.image_secret)
    }

    fn images(&self) -> &[String] {
        &self.spec.image_pre_pull_template.images
    }
}

impl NodeJob for ConfigUpdateJob {
    const KIND: JobKind = JobKind::ConfigUpdate;
    type Task = ConfigUpdateJobNodeTaskStatus;

    fn targets(&self) -> Targets<'_> {
        Targets {
            node_names: &self.spec.node_names,
            label_selector: self.spec.label_selector.as_ref(),
        }
    }

    fn common(&self) -> Common<'_> {
        Common {
            path: "spec.",
            timeout_seconds: self.spec.timeout_seconds,
            concurrency: self.spec.concurrency,
            failure_tolerate: &self.spec.failure_tolerate,
            check_items: &[],
        }
    }

    fn check_spec(&self) -> Result<(), String> {
        crate::spec::update_fields(&self.spec.update_fields)
    }

    fn edge_spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }

    job_status!();

    fn apply_extend(&mut self, _i: usize, _action: &str, _extend: &str) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeedge_api::operations::v1alpha2::{ImagePrePullJobSpec, NodeUpgradeJobSpec};

    #[test]
    fn the_upgrade_edge_spec_names_the_default_image() {
        let job = NodeUpgradeJob::new(
            "u",
            NodeUpgradeJobSpec {
                version: "v1.23.0".into(),
                ..Default::default()
            },
        );
        let spec = job.edge_spec();
        assert_eq!(spec["image"], DEFAULT_UPGRADE_IMAGE);
        assert!(spec["imageDigestGatter"].is_null());
        assert_eq!(spec["version"], "v1.23.0");
    }

    #[test]
    fn upgrade_versions_come_from_the_extend() {
        let mut job = NodeUpgradeJob::new("u", NodeUpgradeJobSpec::default());
        job.tasks_mut().push(NodeTask::new("e", "InProgress", ""));
        job.apply_extend(0, "BackUp", "v1.22.1,v1.23.0").unwrap();
        assert_eq!(job.tasks()[0].historic_version, "v1.22.1");
        assert_eq!(job.tasks()[0].current_version, "v1.23.0");
        assert!(job.apply_extend(0, "Upgrade", "a,b,c").is_err());
        job.apply_extend(0, "Check", "ignored").unwrap();
        job.apply_extend(0, "Upgrade", ",").unwrap();
        assert_eq!(job.tasks()[0].current_version, "");
    }

    #[test]
    fn image_results_keep_only_the_jobs_images() {
        let mut job = ImagePrePullJob::new("p", ImagePrePullJobSpec::default());
        job.spec.image_pre_pull_template.images = vec!["a:1".into(), "b:2".into()];
        job.tasks_mut().push(NodeTask::new("e", "InProgress", ""));
        let long = "x".repeat(5000);
        let extend = serde_json::json!([
            {"image": "b:2", "status": "False", "reason": long},
            {"image": "evil", "status": "True"},
            {"image": "a:1", "status": "True"},
            {"image": "a:1", "status": "Maybe"}
        ]);
        job.apply_extend(0, "Pull", &extend.to_string()).unwrap();
        let st = &job.tasks()[0].image_status;
        assert_eq!(st.len(), 2);
        assert_eq!(
            (st[0].image.as_str(), st[0].status.as_str()),
            ("a:1", "True")
        );
        assert_eq!(
            (st[1].image.as_str(), st[1].status.as_str()),
            ("b:2", "False")
        );
        assert!(st[1].reason.chars().count() <= MAX_REASON_CHARS + 1);
        assert!(job.apply_extend(0, "Pull", "not json").is_err());
    }
}
