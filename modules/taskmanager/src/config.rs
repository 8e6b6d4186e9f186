//! `modules.taskManager` of CloudCoreConfig: KubeEdge's keys and defaults, plus
//! `jobController` (Rust addition).

use serde::{Deserialize, Serialize};

/// `modules.taskManager`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TaskManagerConfig {
    /// Whether the module runs (default `false`, as KubeEdge). When on, the three job CRDs
    /// must be installed.
    #[serde(alias = "Enable")]
    pub enable: bool,
    /// Queue sizes.
    #[serde(alias = "Buffer")]
    pub buffer: TaskManagerBuffer,
    /// Concurrency.
    #[serde(alias = "Load")]
    pub load: TaskManagerLoad,
    /// Rust addition (default `true`): also run the job controller, which KubeEdge runs in its
    /// separate `controller-manager` binary: finalizers, node selection and verification,
    /// job phases from the node results, timeouts. Switch it off when KubeEdge's
    /// controller-manager runs against the same cluster: both would write every job's status.
    pub job_controller: bool,
}

impl Default for TaskManagerConfig {
    fn default() -> Self {
        TaskManagerConfig {
            enable: false,
            buffer: TaskManagerBuffer::default(),
            load: TaskManagerLoad::default(),
            job_controller: true,
        }
    }
}

/// `modules.taskManager.buffer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskManagerBuffer {
    /// Node reports waiting to be applied, for all kinds together (default 1024; KubeEdge
    /// sizes its v1alpha1 status queue with it). A full queue drops a report with a warning;
    /// one node may hold an eighth of it.
    #[serde(rename = "taskStatus", alias = "TaskStatus")]
    pub task_status: i32,
    /// KubeEdge's v1alpha1 job event channel (default 1). Accepted for compatibility: the job
    /// watches are read directly.
    #[serde(rename = "taskEvent", alias = "TaskEvent")]
    pub task_event: i32,
}

impl Default for TaskManagerBuffer {
    fn default() -> Self {
        TaskManagerBuffer {
            task_status: 1024,
            task_event: 1,
        }
    }
}

/// `modules.taskManager.load`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskManagerLoad {
    /// KubeEdge's v1alpha1 status workers (default 1). Accepted for compatibility: each job
    /// kind has one writer, which applies every report waiting for a job in one status write.
    #[serde(rename = "taskWorkers", alias = "TaskWorkers")]
    pub task_workers: i32,
}

impl Default for TaskManagerLoad {
    fn default() -> Self {
        TaskManagerLoad { task_workers: 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_kubeedge_keys() {
        let c = TaskManagerConfig::default();
        assert!(!c.enable && c.job_controller);
        assert_eq!((c.buffer.task_status, c.buffer.task_event), (1024, 1));
        let c: TaskManagerConfig = serde_saphyr::from_str(
            "enable: true\nbuffer:\n  taskStatus: 8\n  taskEvent: 2\nload:\n  taskWorkers: 3\njobController: false\n",
        )
        .unwrap();
        assert!(c.enable && !c.job_controller);
        assert_eq!(
            (
                c.buffer.task_status,
                c.buffer.task_event,
                c.load.task_workers
            ),
            (8, 2, 3)
        );
        let text = serde_saphyr::to_string(&c).unwrap();
        assert!(
            text.contains("taskStatus: 8") && text.contains("jobController: false"),
            "{text}"
        );
    }
}
