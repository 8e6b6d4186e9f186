//! `modules.syncController` of CloudCoreConfig.

use serde::{Deserialize, Serialize};

/// `modules.syncController`. KubeEdge has only `enable`; `reconcileIntervalSeconds` is a Rust
/// extension (KubeEdge hard-codes 5 s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SyncControllerConfig {
    /// Whether the module runs (default `true`).
    #[serde(alias = "Enable")]
    pub enable: bool,
    /// Seconds between full reconcile passes over every ObjectSync and ClusterObjectSync
    /// (default 5). Changes of records and of the objects they track are reconciled at once;
    /// the periodic pass is the safety net and the resend for edges that missed a message.
    #[serde(alias = "ReconcileIntervalSeconds")]
    pub reconcile_interval_seconds: u64,
}

impl Default for SyncControllerConfig {
    fn default() -> Self {
        SyncControllerConfig {
            enable: true,
            reconcile_interval_seconds: 5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_keys() {
        let c = SyncControllerConfig::default();
        assert!(c.enable);
        assert_eq!(c.reconcile_interval_seconds, 5);
        let c: SyncControllerConfig =
            serde_saphyr::from_str("enable: false\nreconcileIntervalSeconds: 30\nx: 1\n").unwrap();
        assert_eq!((c.enable, c.reconcile_interval_seconds), (false, 30));
    }
}
