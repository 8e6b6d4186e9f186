//! Node leases: create/update and query, answered with ObjectResp (spec §3.3).

use beehive::Message;
use beehive::constants::operation;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{GetParams, PostParams};
use kubeedge_api::client::Identity;
use kubeedge_api::status::StatusError;

use super::{Kind, Outcome, Upstream, api, parts};
use crate::reply;

impl Upstream {
    /// `lease`/`insert` → POST, `lease`/`update` → PUT, both as the node.
    pub(crate) async fn write_lease(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, true, true) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::CreateLease, msg, e).await,
        };
        let lease: Lease = match msg.content.parse_bytes() {
            Ok(l) => l,
            Err(e) => {
                return self
                    .fail(
                        Kind::CreateLease,
                        msg,
                        StatusError::bad_request(format!("content is not a Lease: {e}")),
                    )
                    .await;
            }
        };
        let body = match serde_json::to_vec(&lease) {
            Ok(b) => b,
            Err(e) => {
                return self
                    .fail(Kind::CreateLease, msg, StatusError::internal(e.to_string()))
                    .await;
            }
        };
        let request = if msg.route.operation == operation::INSERT {
            api::<Lease>(Some(&r.namespace)).create(&PostParams::default(), body)
        } else {
            api::<Lease>(Some(&r.namespace)).replace(&r.name, &PostParams::default(), body)
        };
        let result: Result<Lease, _> = self.kube.request(Identity::Node(&r.node), request).await;
        let outcome = if result.is_ok() {
            Outcome::Ok
        } else {
            Outcome::Failed
        };
        self.send(reply::object_resp(msg, result, None), outcome)
            .await
    }

    /// `lease`/`query`: a direct GET as the node (no cluster-wide lease cache, W23).
    pub(crate) async fn query_lease(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, true, true) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::QueryLease, msg, e).await,
        };
        let request = api::<Lease>(Some(&r.namespace)).get(&r.name, &GetParams::default());
        let result: Result<Lease, _> = self.kube.request(Identity::Node(&r.node), request).await;
        let outcome = if result.is_ok() {
            Outcome::Ok
        } else {
            Outcome::Failed
        };
        self.send(reply::object_resp(msg, result, None), outcome)
            .await
    }
}
