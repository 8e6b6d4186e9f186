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

/// How many answers an [`AccessReviewer`] remembers, so that what callers choose (node names,
/// selectors) cannot grow cloudcore's memory: at most `entries` in all and
/// `entries_per_subject` for one user, each at most `key_bytes` of attribute text (longer
/// ones are asked every time, never remembered). Beyond a bound, expired answers go first,
/// then the oldest of that user (or of all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Answers remembered in all.
    pub entries: usize,
    /// Answers remembered for one user (one edge node, one stream caller).
    pub entries_per_subject: usize,
    /// Longest attribute text (verb, resource, names, selectors together) remembered.
    pub key_bytes: usize,
}

impl Default for CacheLimits {
    /// 8,192 answers, 256 per user, 4 KiB each: at most about 32 MiB however the keys are
    /// chosen, 1 MiB per user.
    fn default() -> Self {
        CacheLimits {
            entries: 8_192,
            entries_per_subject: 256,
            key_bytes: 4 << 10,
        }
    }
}

/// One remembered answer.
#[derive(Debug)]
struct Entry {
    decision: Decision,
    until: Instant,
    /// Insertion order, for evicting the oldest.
    seq: u64,
}

/// The answers and how many each user holds.
#[derive(Debug, Default)]
struct Cache {
    map: HashMap<(Subject, Attributes), Entry>,
    per_user: HashMap<String, usize>,
    seq: u64,
}

impl Cache {
    fn remove(&mut self, key: &(Subject, Attributes)) {
        if self.map.remove(key).is_some()
            && let Some(n) = self.per_user.get_mut(&key.0.user)
        {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(&key.0.user);
            }
        }
    }

    /// Removes the expired answers (of `user` only, when given), or else the oldest one.
    fn make_room(&mut self, user: Option<&str>, now: Instant) {
        let mine = |k: &(Subject, Attributes)| user.is_none_or(|u| k.0.user == u);
        let expired: Vec<(Subject, Attributes)> = self
            .map
            .iter()
            .filter(|(k, e)| mine(k) && e.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        if expired.is_empty() {
            let oldest = self
                .map
                .iter()
                .filter(|(k, _)| mine(k))
                .min_by_key(|(_, e)| e.seq)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.remove(&k);
            }
        }
        for k in expired {
            self.remove(&k);
        }
    }
}

/// The size of a cache key's text.
fn key_bytes(s: &Subject, a: &Attributes) -> usize {
    s.user.len()
        + s.groups.iter().map(String::len).sum::<usize>()
        + a.verb.len()
        + a.group.len()
        + a.version.len()
        + a.resource.len()
        + a.subresource.len()
        + a.namespace.len()
        + a.name.len()
        + a.field_selector.len()
        + a.label_selector.len()
}

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
/// answers for `allowed_ttl` and denied ones for `denied_ttl` (per subject and attributes),
/// within [`CacheLimits`]. Failures to ask are not remembered.
pub struct AccessReviewer {
    api: Api<SubjectAccessReview>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    limits: CacheLimits,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for AccessReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessReviewer")
            .field("allowed_ttl", &self.allowed_ttl)
            .field("denied_ttl", &self.denied_ttl)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl AccessReviewer {
    /// Reviews created with `client` (cloudcore's identity, which needs `create` on
    /// `subjectaccessreviews.authorization.k8s.io`), remembered within the default
    /// [`CacheLimits`].
    pub fn new(client: kube::Client, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        AccessReviewer {
            api: Api::all(client),
            allowed_ttl,
            denied_ttl,
            limits: CacheLimits::default(),
            cache: Mutex::new(Cache::default()),
        }
    }

    /// Remembers answers within `limits` instead of the default ones.
    pub fn with_limits(mut self, limits: CacheLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Answers remembered now (expired ones included until they are dropped).
    pub fn cached_answers(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }

    /// Forgets every answer remembered about objects in `namespace`: the relationships that
    /// decided them changed (a pod there was deleted), so the next review asks again.
    pub fn forget_namespace(&self, namespace: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<(Subject, Attributes)> = cache
            .map
            .keys()
            .filter(|(_, a)| a.namespace == namespace)
            .cloned()
            .collect();
        for key in &keys {
            cache.remove(key);
        }
    }

    fn cached(&self, key: &(Subject, Attributes)) -> Option<Decision> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let entry = cache.map.get(key)?;
        if Instant::now() < entry.until {
            return Some(entry.decision.clone());
        }
        cache.remove(key);
        None
    }

    fn remember(&self, key: (Subject, Attributes), decision: Decision) {
        let ttl = match decision {
            Decision::Allow => self.allowed_ttl,
            Decision::Deny(_) => self.denied_ttl,
        };
        let limits = self.limits;
        if ttl.is_zero()
            || limits.entries == 0
            || limits.entries_per_subject == 0
            || key_bytes(&key.0, &key.1) > limits.key_bytes
        {
            return;
        }
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if !cache.map.contains_key(&key) {
            let user = key.0.user.clone();
            if cache.per_user.get(&user).copied().unwrap_or(0) >= limits.entries_per_subject {
                cache.make_room(Some(&user), now);
            }
            if cache.map.len() >= limits.entries {
                cache.make_room(None, now);
            }
            *cache.per_user.entry(user).or_default() += 1;
        }
        cache.seq += 1;
        let seq = cache.seq;
        cache.map.insert(
            key,
            Entry {
                decision,
                until: now + ttl,
                seq,
            },
        );
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

    fn reviewer(limits: CacheLimits) -> AccessReviewer {
        // Never asked: these tests fill the cache directly.
        let client = kube::Client::new(
            tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("unused"))
            }),
            "default",
        );
        AccessReviewer::new(client, Duration::from_secs(60), Duration::from_secs(60))
            .with_limits(limits)
    }

    fn attrs(name: &str) -> Attributes {
        Attributes {
            verb: "get".into(),
            resource: "nodes".into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[tokio::test]
    async fn the_cache_holds_at_most_its_limits_whatever_the_keys() {
        let r = reviewer(CacheLimits {
            entries: 100,
            entries_per_subject: 10,
            key_bytes: 300,
        });
        let flooder = Subject::node("attacker");
        for i in 0..1_000 {
            r.remember((flooder.clone(), attrs(&format!("n{i}"))), Decision::Allow);
        }
        assert_eq!(r.cached_answers(), 10, "one user holds its share only");
        assert!(
            r.cached(&(flooder.clone(), attrs("n999"))).is_some(),
            "newest kept"
        );
        assert!(
            r.cached(&(flooder.clone(), attrs("n0"))).is_none(),
            "oldest gone"
        );
        for n in 0..50 {
            let s = Subject::node(&format!("e{n}"));
            for i in 0..5 {
                r.remember((s.clone(), attrs(&format!("x{i}"))), Decision::Allow);
            }
        }
        assert_eq!(r.cached_answers(), 100, "the global bound");
        // A key longer than the limit is never remembered.
        r.remember((flooder.clone(), attrs(&"y".repeat(400))), Decision::Allow);
        assert!(r.cached(&(flooder, attrs(&"y".repeat(400)))).is_none());
    }

    #[tokio::test]
    async fn answers_about_a_namespace_are_forgotten_together() {
        let r = reviewer(CacheLimits::default());
        let s = Subject::node("e1");
        let in_ns = |ns: &str, name: &str| Attributes {
            namespace: ns.into(),
            ..attrs(name)
        };
        r.remember((s.clone(), in_ns("a", "x")), Decision::Allow);
        r.remember((s.clone(), in_ns("a", "y")), Decision::Allow);
        r.remember((s.clone(), in_ns("b", "x")), Decision::Allow);
        r.forget_namespace("a");
        assert_eq!(r.cached_answers(), 1);
        assert!(r.cached(&(s.clone(), in_ns("b", "x"))).is_some());
        assert!(r.cached(&(s, in_ns("a", "x"))).is_none());
        assert_eq!(r.cache.lock().unwrap().per_user.values().sum::<usize>(), 1);
    }

    #[tokio::test]
    async fn expired_answers_are_dropped_when_read() {
        let r = reviewer(CacheLimits::default());
        let s = Subject::node("e1");
        let mut cache = r.cache.lock().unwrap();
        cache.map.insert(
            (s.clone(), attrs("a")),
            Entry {
                decision: Decision::Allow,
                until: Instant::now(),
                seq: 1,
            },
        );
        cache.per_user.insert(s.user.clone(), 1);
        drop(cache);
        assert!(r.cached(&(s, attrs("a"))).is_none());
        assert_eq!(r.cached_answers(), 0);
    }

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
