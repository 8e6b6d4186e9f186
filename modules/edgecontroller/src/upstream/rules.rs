//! Rule status from the router module: counters merge-patched under `status` (KubeEdge puts
//! them at the top level, where the CRD schema prunes them).

use beehive::Message;
use kube::api::{GetParams, Patch, PatchParams};
use kubeedge_api::rules::{ExecResult, Rule};
use kubeedge_api::status::StatusError;
use serde_json::json;
use tracing::debug;

use super::{Outcome, Upstream, api, parts};

/// Retries when the Rule changed between read and write.
const CONFLICT_RETRIES: usize = 3;

impl Upstream {
    /// Counts deliveries on the Rule: `SUCCESS` → `successMessages` + n; `FAIL` →
    /// `failMessages` + n and `errors` = the detail, where n is the result's count (one
    /// without, as KubeEdge's router sends). As cloudcore; never answered.
    pub(crate) async fn rule_status(&self, msg: &Message) -> Outcome {
        match self.count_rule_result(msg).await {
            Ok(()) => Outcome::Ok,
            Err(e) => {
                debug!(msg_id = %msg.header.id, resource = %msg.route.resource, error = %e, "rule status not written");
                Outcome::Failed
            }
        }
    }

    async fn count_rule_result(&self, msg: &Message) -> Result<(), StatusError> {
        let r = parts(msg, true, true)?;
        let result: ExecResult = msg
            .content
            .parse_bytes()
            .map_err(|e| StatusError::bad_request(format!("content is not an ExecResult: {e}")))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let get = api::<Rule>(Some(&r.namespace)).get(&r.name, &GetParams::default());
            let rule: Rule = self.own_request(get).await?;
            let mut status = rule.status.unwrap_or_default();
            let n = result.deliveries();
            match result.status.as_str() {
                ExecResult::SUCCESS => status.success_messages += n,
                ExecResult::FAIL => {
                    status.fail_messages += n;
                    status.errors = vec![result.error.detail.clone()];
                }
                _ => return Ok(()),
            }
            // The resourceVersion makes the patch fail (409) if another result landed first.
            let patch = json!({
                "metadata": {"resourceVersion": rule.metadata.resource_version},
                "status": status,
            });
            let request = api::<Rule>(Some(&r.namespace)).patch(
                &r.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            );
            match self.own_request::<Rule>(request).await {
                Err(e) if e.code() == 409 && attempt < CONFLICT_RETRIES => continue,
                other => return other.map(|_| ()),
            }
        }
    }
}
