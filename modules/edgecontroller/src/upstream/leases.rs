//! Node leases: create/update and query, answered with ObjectResp (a lease query too,
//! where other queries get the raw object).

use beehive::Message;
use beehive::constants::operation;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{GetParams, PostParams};

use super::{Kind, Outcome, Upstream, api, body, content, parts};
use crate::reply;

impl Upstream {
    /// `lease`/`insert` → POST, `lease`/`update` → PUT, both as the node.
    pub(crate) async fn write_lease(&self, msg: &Message) -> Outcome {
        self.answer(Kind::CreateLease, msg, async {
            let r = parts(msg, true, true)?;
            let lease: Lease = content(msg, "a Lease")?;
            let body = body(&lease)?;
            let leases = api::<Lease>(Some(&r.namespace));
            let request = if msg.route.operation == operation::INSERT {
                leases.create(&PostParams::default(), body)
            } else {
                leases.replace(&r.name, &PostParams::default(), body)
            };
            let written: Lease = self.call(Kind::CreateLease, msg, &r.node, request).await?;
            Ok(reply::object_resp(msg, Ok(written), None))
        })
        .await
    }

    /// `lease`/`query`: a direct GET as the node (no cluster-wide lease cache: memory follows the
    /// edge fleet, not the cluster).
    pub(crate) async fn query_lease(&self, msg: &Message) -> Outcome {
        self.answer(Kind::QueryLease, msg, async {
            let r = parts(msg, true, true)?;
            let request = api::<Lease>(Some(&r.namespace)).get(&r.name, &GetParams::default());
            let lease: Lease = self.call(Kind::QueryLease, msg, &r.node, request).await?;
            Ok(reply::object_resp(msg, Ok(lease), None))
        })
        .await
    }
}
