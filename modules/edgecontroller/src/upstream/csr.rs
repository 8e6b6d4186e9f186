//! CertificateSigningRequest creation (queries are in `queries`).

use beehive::Message;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::PostParams;

use super::{Kind, Outcome, Upstream, api, body, content, parts};
use crate::reply;

impl Upstream {
    /// `certificatesigningrequest`/`insert`: POST as the node once the policy found it asks for
    /// the node's own name; ObjectResp.
    pub(crate) async fn create_csr(&self, msg: &Message) -> Outcome {
        self.answer(Kind::CertificateSigningRequest, msg, async {
            let r = parts(msg, false, false)?;
            let csr: CertificateSigningRequest = content(msg, "a CertificateSigningRequest")?;
            let request =
                api::<CertificateSigningRequest>(None).create(&PostParams::default(), body(&csr)?);
            let created: CertificateSigningRequest = self
                .call(Kind::CertificateSigningRequest, msg, &r.node, request)
                .await?;
            Ok(reply::object_resp(msg, Ok(created), None))
        })
        .await
    }
}
