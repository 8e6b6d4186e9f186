//! What the cluster lets an edge node (or any subject) do, asked of the API server with
//! SubjectAccessReviews and remembered for a short time.
//!
//! The answer is the one the API server's authorizers (Node authorizer, RBAC, webhooks) give
//! `system:node:<name>` in group `system:nodes`; admission (NodeRestriction) is not part of a
//! review, so writes still have to reach the API server as the node to be fully checked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, LabelSelectorAttributes, ResourceAttributes, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::status::StatusError;

/// Decisions remembered at most; beyond this, expired ones are dropped, then all.
const CACHE_CAPACITY: usize = 65_536;

/// A request as the authorizers see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource, plural.
    pub resource: String,
    /// Subresource or empty.
    pub subresource: String,
    /// Namespace; empty for cluster scope or all namespaces.
    pub namespace: String,
    /// Object name; empty for collections.
    pub name: String,
    /// Field selector of a list or watch (the Node authorizer needs `spec.nodeName=` for pods).
    pub field_selector: String,
    /// Label selector of a list or watch.
    pub label_selector: String,
}

/// An authorization answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Refused, with the authorizer's reason (may be empty).
    Deny(String),
}

impl Decision {
    /// The `403 Forbidden` the edge gets for a denial, worded as the API server words it.
    pub fn forbidden(node: &str, attrs: &Attributes, reason: &str) -> StatusError {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let group = if attrs.group.is_empty() {
            String::new()
        } else {
            format!(" in API group \"{}\"", attrs.group)
        };
        let scope = if attrs.namespace.is_empty() {
            " at the cluster scope".to_owned()
        } else {
            format!(" in the namespace \"{}\"", attrs.namespace)
        };
        let why = if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        };
        StatusError::forbidden(format!(
            "{} \"{}\" is forbidden: User \"system:node:{node}\" cannot {} resource \"{resource}\"{group}{scope}{why}",
            attrs.resource, attrs.name, attrs.verb
        ))
        .with_details(&attrs.resource, &attrs.name)
    }
}

/// Who a review is about: a user and its groups, as the API server's authenticator would
/// give them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subject {
    /// The user name (`system:node:edge-1`).
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
}

impl Subject {
    /// Edge node `name`: `system:node:<name>` in `system:nodes` (authenticated).
    pub fn node(name: &str) -> Subject {
        Subject {
            user: format!("system:node:{name}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
        }
    }
}

/// An answer and whether it came from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// The decision.
    pub decision: Decision,
    /// True when no SubjectAccessReview was made for it (a remembered answer).
    pub cached: bool,
}

/// Asks the API server what a subject may do (SubjectAccessReviews), remembering allowed
/// answers for `allowed_ttl` and denied ones for `denied_ttl` (per subject and attributes).
/// Failures to ask are not remembered.
pub struct AccessReviewer {
    api: Api<SubjectAccessReview>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    cache: Mutex<HashMap<(Subject, Attributes), (Decision, Instant)>>,
}

impl std::fmt::Debug for AccessReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessReviewer")
            .field("allowed_ttl", &self.allowed_ttl)
            .field("denied_ttl", &self.denied_ttl)
            .finish_non_exhaustive()
    }
}

impl AccessReviewer {
    /// Reviews created with `client` (cloudcore's identity, which needs `create` on
    /// `subjectaccessreviews.authorization.k8s.io`).
    pub fn new(client: kube::Client, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        AccessReviewer {
            api: Api::all(client),
            allowed_ttl,
            denied_ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key: &(Subject, Attributes)) -> Option<Decision> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(key)
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(d, _)| d.clone())
    }

    fn remember(&self, key: (Subject, Attributes), decision: Decision) {
        let ttl = match decision {
            Decision::Allow => self.allowed_ttl,
            Decision::Deny(_) => self.denied_ttl,
        };
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_CAPACITY {
            cache.retain(|_, (_, until)| now < *until);
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (decision, now + ttl));
    }

    /// What the cluster answers for node `node` doing `attrs`.
    pub async fn review(&self, node: &str, attrs: &Attributes) -> Result<Decision, kube::Error> {
        Ok(self.review_as(&Subject::node(node), attrs).await?.decision)
    }

    /// What the cluster answers for `subject` doing `attrs`, and whether it was remembered.
    pub async fn review_as(
        &self,
        subject: &Subject,
        attrs: &Attributes,
    ) -> Result<Review, kube::Error> {
        let key = (subject.clone(), attrs.clone());
        if let Some(decision) = self.cached(&key) {
            return Ok(Review {
                decision,
                cached: true,
            });
        }
        let opt = |s: &str| Some(s.to_owned());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(subject.user.clone()),
                groups: Some(subject.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: opt(&attrs.verb),
                    group: opt(&attrs.group),
                    version: opt(&attrs.version),
                    resource: opt(&attrs.resource),
                    subresource: opt(&attrs.subresource),
                    namespace: opt(&attrs.namespace),
                    name: opt(&attrs.name),
                    field_selector: (!attrs.field_selector.is_empty()).then(|| {
                        FieldSelectorAttributes {
                            raw_selector: opt(&attrs.field_selector),
                            requirements: None,
                        }
                    }),
                    label_selector: (!attrs.label_selector.is_empty()).then(|| {
                        LabelSelectorAttributes {
                            raw_selector: opt(&attrs.label_selector),
                            requirements: None,
                        }
                    }),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.api.create(&PostParams::default(), &review).await?;
        let status = answer.status.unwrap_or_default();
        let decision = if status.allowed && status.denied != Some(true) {
            Decision::Allow
        } else {
            let mut reason = status.reason.unwrap_or_default();
            if let Some(e) = status.evaluation_error.filter(|e| !e.is_empty()) {
                if !reason.is_empty() {
                    reason.push_str("; ");
                }
                reason.push_str(&e);
            }
            Decision::Deny(reason)
        };
        self.remember(key, decision.clone());
        Ok(Review {
            decision,
            cached: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_reads_like_the_api_servers() {
        let attrs = Attributes {
            verb: "watch".into(),
            version: "v1".into(),
            resource: "secrets".into(),
            ..Attributes::default()
        };
        let e = Decision::forbidden("edge-1", &attrs, "");
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.err_status.message,
            "secrets \"\" is forbidden: User \"system:node:edge-1\" cannot watch resource \"secrets\" at the cluster scope"
        );
    }
}
