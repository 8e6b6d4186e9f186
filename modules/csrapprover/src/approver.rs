//! The approval loop: kube-runtime's controller over every CertificateSigningRequest, a
//! reconcile that decides by [`crate::rules`] and PUTs the `approval` subresource, and
//! per-request exponential back-off on API errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::Backoff;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::EDGE_NODE_LABEL;
use tracing::{debug, info, warn};

use crate::metrics::CsrApproverMetrics;
use crate::rules::{self, APPROVED_MESSAGE, APPROVED_REASON, Refusal};

/// Requests decided at once (KubeEdge runs 5 workers).
const WORKERS: u16 = 5;
/// First and longest wait before a request whose approval failed is tried again (KubeEdge's
/// per-item back-off: 200 ms doubling to 1000 s).
const RETRY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(1000));

/// Why one reconcile failed; the request is tried again after a back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the Node or writing the approval failed (a conflict included: the request
    /// changed since it was read).
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The request has no name.
    #[error("a certificate signing request without a name")]
    Unnamed,
}

struct Ctx {
    client: kube::Client,
    cloudcore_user: Option<String>,
    metrics: CsrApproverMetrics,
    failures: Mutex<HashMap<String, u32>>,
}

/// The user cloudcore's credentials authenticate as (a SelfSubjectReview), or `None` when the
/// API server does not say: then only requests a node created for itself are approved.
pub(crate) async fn own_user(client: &kube::Client) -> Option<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username),
        Err(e) => {
            warn!(error = %e, "cannot tell cloudcore's own user: only CSRs an edge node created itself are approved");
            None
        }
    }
}

/// Runs the approval loop until `stop`: every add or update of a request reconciles it.
pub(crate) async fn run(
    client: kube::Client,
    metrics: CsrApproverMetrics,
    stop: CancellationToken,
) {
    let cloudcore_user = tokio::select! {
        user = own_user(&client) => user,
        () = stop.cancelled() => return,
    };
    info!(cloudcore_user = ?cloudcore_user, "csr approver started");
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        cloudcore_user,
        metrics,
        failures: Mutex::default(),
    });
    let api: Api<CertificateSigningRequest> = Api::all(client);
    Controller::new(api, watcher::Config::default())
        .with_config(Config::default().concurrency(WORKERS))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, retry, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "csr reconcile");
            }
        })
        .await;
    info!("csr approver stopped");
}

async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = csr.meta().name.clone().ok_or(Error::Unnamed)?;
    if rules::is_settled(&csr) {
        return Ok(Action::await_change());
    }
    match decide(&csr, &ctx).await? {
        Ok(node) => {
            approve(&ctx.client, &csr).await?;
            ctx.metrics.approved.inc();
            info!(
                csr = name,
                node, "kubelet-serving certificate request approved"
            );
        }
        // Not ours to decide: counted, not logged (every client certificate request).
        Err(refusal @ Refusal::OtherSigner(_)) => ctx.metrics.left(&refusal),
        Err(refusal) => {
            ctx.metrics.left(&refusal);
            warn!(
                csr = name,
                requester = csr.spec.username.as_deref().unwrap_or_default(),
                reason = %refusal,
                "kubelet-serving certificate request left pending"
            );
        }
    }
    ctx.failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&name);
    Ok(Action::await_change())
}

/// The node to approve for, or why not; `Err` for an API error (tried again).
async fn decide(
    csr: &CertificateSigningRequest,
    ctx: &Ctx,
) -> Result<Result<String, Refusal>, Error> {
    let req = match rules::kubelet_serving(csr) {
        Ok(req) => req,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let requester = csr.spec.username.as_deref().unwrap_or_default();
    if let Err(refusal) = rules::edge_request(&req, requester, ctx.cloudcore_user.as_deref()) {
        return Ok(Err(refusal));
    }
    let node = Api::<Node>::all(ctx.client.clone())
        .get_opt(&req.node)
        .await?;
    if !node.is_some_and(|n| n.labels().contains_key(EDGE_NODE_LABEL)) {
        return Ok(Err(Refusal::NotEdgeNode(req.node)));
    }
    Ok(Ok(req.node))
}

/// Appends the `Approved` condition and PUTs the `approval` subresource with the version read,
/// so a request denied in between is not approved (409, tried again, then settled).
async fn approve(client: &kube::Client, csr: &CertificateSigningRequest) -> Result<(), Error> {
    let name = csr.meta().name.clone().ok_or(Error::Unnamed)?;
    let mut approved = csr.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = approved
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some(APPROVED_REASON.into()),
            message: Some(APPROVED_MESSAGE.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    Api::<CertificateSigningRequest>::all(client.clone())
        .replace_subresource("approval", &name, &PostParams::default(), &approved)
        .await?;
    Ok(())
}

fn retry(csr: Arc<CertificateSigningRequest>, error: &Error, ctx: Arc<Ctx>) -> Action {
    let name = csr.name_any();
    let mut failures = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
    let n = failures.entry(name.clone()).or_default();
    *n = n.saturating_add(1);
    let wait = RETRY.delay(*n);
    ctx.metrics.errors.inc();
    warn!(csr = name, %error, retry_in = ?wait, "approving a certificate request failed");
    Action::requeue(wait)
}
