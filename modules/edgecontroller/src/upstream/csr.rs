//! CertificateSigningRequest creation (queries are in `queries`).

use beehive::Message;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::PostParams;
use kubeedge_api::client::Identity;
use kubeedge_api::status::StatusError;

use super::{Kind, Outcome, Upstream, api, parts};
use crate::reply;

impl Upstream {
    /// `certificatesigningrequest`/`insert`: POST as the node; ObjectResp.
    pub(crate) async fn create_csr(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, false, false) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::CertificateSigningRequest, msg, e).await,
        };
        let csr: CertificateSigningRequest = match msg.content.parse_bytes() {
            Ok(c) => c,
            Err(e) => {
                let e = StatusError::bad_request(format!(
                    "content is not a CertificateSigningRequest: {e}"
                ));
                return self.fail(Kind::CertificateSigningRequest, msg, e).await;
            }
        };
        let body = serde_json::to_vec(&csr).unwrap_or_default();
        let request = api::<CertificateSigningRequest>(None).create(&PostParams::default(), body);
        let result: Result<CertificateSigningRequest, _> =
            self.kube.request(Identity::Node(&r.node), request).await;
        let outcome = if result.is_ok() {
            Outcome::Ok
        } else {
            Outcome::Failed
        };
        self.send(reply::object_resp(msg, result, None), outcome)
            .await
    }
}
