//! Leader election through a `coordination.k8s.io/v1` Lease, so that several cloudcore
//! replicas can run with one active.
//!
//! The holder renews every `retryPeriod`; a candidate takes the Lease once it has not been
//! renewed for `leaseDuration`. Updates use the Lease's resourceVersion, so two candidates
//! never both win. A holder that cannot renew within `renewDeadline` steps down.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tracing::{info, warn};

use crate::config::LeaderElectionConfig;

/// Competes for one Lease under one identity.
#[derive(Debug, Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This identity holds the Lease now.
    Leading,
    /// Someone else holds a Lease that has not expired.
    Following(String),
}

impl LeaderElector {
    /// An elector for the configured Lease.
    pub fn new(
        client: kube::Client,
        config: &LeaderElectionConfig,
        identity: impl Into<String>,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.resource_namespace),
            name: config.resource_name.clone(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(u64::from(config.lease_duration.max(1))),
            renew_deadline: Duration::from_secs(u64::from(config.renew_deadline.max(1))),
            retry_period: Duration::from_secs(u64::from(config.retry_period.max(1))),
        }
    }

    /// This elector's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One acquire-or-renew attempt.
    pub async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following(String::new())),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let renewed = spec
            .renew_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let expired = now.duration_since(renewed).unsigned_abs() > duration || holder.is_empty();
        if holder != self.identity && !expired {
            return Ok(Attempt::Following(holder));
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder != self.identity);
        let acquired = if holder == self.identity {
            spec.acquire_time.map(|t| t.0)
        } else {
            None
        };
        lease.spec = Some(self.spec(now, acquired, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following(holder)),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, now: Timestamp, acquired: Option<Timestamp>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired.unwrap_or(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Waits until this identity holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire().await {
                Ok(Attempt::Leading) => {
                    info!(lease = %self.name, identity = %self.identity, "became leader");
                    return;
                }
                Ok(Attempt::Following(holder)) => {
                    tracing::debug!(lease = %self.name, %holder, "lease held elsewhere");
                }
                Err(e) => warn!(lease = %self.name, error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.retry_period).await;
        }
    }

    /// Keeps renewing; returns when leadership is lost (not renewed within `renewDeadline`, or
    /// taken by someone else).
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.retry_period).await;
            match self.try_acquire().await {
                Ok(Attempt::Leading) => last_renewal = tokio::time::Instant::now(),
                Ok(Attempt::Following(holder)) => {
                    warn!(lease = %self.name, %holder, "leadership taken over");
                    return;
                }
                Err(e) => warn!(lease = %self.name, error = %e, "lease renewal failed"),
            }
            if last_renewal.elapsed() > self.renew_deadline {
                warn!(lease = %self.name, "lease not renewed within renewDeadline");
                return;
            }
        }
    }
}
