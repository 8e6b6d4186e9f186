//! Who may read `/metrics` and `/debug`: decided as the kubelet and kube-rbac-proxy decide.
//! The request's bearer token is reviewed by the API server (a TokenReview), and the user it
//! names must be allowed `get` on the request's path (a SubjectAccessReview with non-resource
//! attributes, which RBAC grants with `nonResourceURLs`). The health endpoints stay open: the
//! kubelet probes them without credentials.
//!
//! Answers are remembered for a while (tokens 2 min, allowed 5 min, denied 30 s by default;
//! keyed by the token's SHA-256, never the token), at most [`CACHE_CAPACITY`] of each, and at
//! most [`REVIEWS_IN_FLIGHT`] reviews go to the API server at once: a flood of made-up tokens
//! costs the API server a bounded rate of reviews and cloudcore bounded memory.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::config::{MonitorAuthorization, MonitorAuthorizationMode};

/// Decisions remembered at most, per cache; beyond it, expired ones are dropped, then all.
pub const CACHE_CAPACITY: usize = 4_096;

/// Reviews sent to the API server at once; a request beyond them is answered `429`.
pub const REVIEWS_IN_FLIGHT: usize = 16;

/// How long a token's review is reused (the kubelet's `authentication.webhook.cacheTTL`).
const TOKEN_TTL: Duration = Duration::from_secs(120);

/// The answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead.
    Allow,
    /// `401`: no bearer token, or the API server does not know it.
    Unauthenticated(String),
    /// `403`: the token's user may not `get` the path.
    Forbidden(String),
    /// `429`: too many reviews in flight.
    Busy,
    /// `503`: no answer can be had yet (no API client yet, or the API server failed).
    Unavailable(String),
}

/// Who the API server says a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UserInfo {
    name: String,
    uid: String,
    groups: Vec<String>,
}

/// A small expiring map with a hard size bound.
#[derive(Debug)]
struct Cache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Cache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(v, _)| v.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_CAPACITY {
            let now = Instant::now();
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= CACHE_CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now() + ttl));
    }

    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The monitor server's authorizer; cheap to clone, clones share caches and client.
#[derive(Debug, Clone)]
pub struct Access(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// `None`: AlwaysAllow.
    webhook: Option<Webhook>,
}

struct Webhook {
    client: OnceLock<kube::Client>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    /// SHA-256 of the token → who it is (`None`: the API server does not know it).
    tokens: Cache<[u8; 32], Option<UserInfo>>,
    /// (user, path) → allowed, or the reason it is not.
    decisions: Cache<(String, String), Result<(), String>>,
    in_flight: Semaphore,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("client", &self.client.get().is_some())
            .field("allowed_ttl", &self.allowed_ttl)
            .field("denied_ttl", &self.denied_ttl)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Anyone may read everything.
    pub fn always_allow() -> Self {
        Access(Arc::new(Inner { webhook: None }))
    }

    /// Reviews every request with the API server once [`Access::set_client`] is called
    /// (`503` before), reusing answers as `settings` says.
    pub fn webhook(settings: &MonitorAuthorization) -> Self {
        Access(Arc::new(Inner {
            webhook: Some(Webhook {
                client: OnceLock::new(),
                allowed_ttl: Duration::from_secs(settings.cache_authorized_ttl_seconds),
                denied_ttl: Duration::from_secs(settings.cache_unauthorized_ttl_seconds),
                tokens: Cache::new(),
                decisions: Cache::new(),
                in_flight: Semaphore::new(REVIEWS_IN_FLIGHT),
            }),
        }))
    }

    /// The authorizer `settings` ask for, given whether the process will have an API client.
    pub fn from_settings(settings: &MonitorAuthorization, has_client: bool) -> Self {
        match settings.mode {
            Some(MonitorAuthorizationMode::AlwaysAllow) => Access::always_allow(),
            Some(MonitorAuthorizationMode::Webhook) => Access::webhook(settings),
            None if has_client => Access::webhook(settings),
            None => Access::always_allow(),
        }
    }

    /// True when every request is allowed.
    pub fn allows_everyone(&self) -> bool {
        self.0.webhook.is_none()
    }

    /// The client reviews go through (the first call wins).
    pub fn set_client(&self, client: kube::Client) {
        if let Some(w) = &self.0.webhook {
            let _ = w.client.set(client);
        }
    }

    /// Decisions remembered now (tokens, path decisions).
    pub fn cached(&self) -> (usize, usize) {
        self.0
            .webhook
            .as_ref()
            .map_or((0, 0), |w| (w.tokens.len(), w.decisions.len()))
    }

    /// Decides a `GET` of `path` carrying `authorization` (the header's value, if any).
    pub async fn decide(&self, path: &str, authorization: Option<&str>) -> Verdict {
        let Some(w) = &self.0.webhook else {
            return Verdict::Allow;
        };
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Verdict::Unauthenticated("a bearer token is required".to_owned());
        };
        let Some(client) = w.client.get() else {
            return Verdict::Unavailable("not connected to the API server yet".to_owned());
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let user = match w.tokens.get(&key) {
            Some(user) => user,
            None => {
                let Ok(_permit) = w.in_flight.try_acquire() else {
                    return Verdict::Busy;
                };
                match review_token(client, token).await {
                    Ok(user) => {
                        let ttl = if user.is_some() {
                            TOKEN_TTL
                        } else {
                            w.denied_ttl
                        };
                        w.tokens.put(key, user.clone(), ttl);
                        user
                    }
                    Err(e) => return Verdict::Unavailable(format!("token review failed: {e}")),
                }
            }
        };
        let Some(user) = user else {
            return Verdict::Unauthenticated("the token is not valid".to_owned());
        };
        let decision_key = (format!("{}\u{0}{}", user.name, user.uid), path.to_owned());
        let decision = match w.decisions.get(&decision_key) {
            Some(decision) => decision,
            None => {
                let Ok(_permit) = w.in_flight.try_acquire() else {
                    return Verdict::Busy;
                };
                match review_access(client, &user, path).await {
                    Ok(decision) => {
                        let ttl = if decision.is_ok() {
                            w.allowed_ttl
                        } else {
                            w.denied_ttl
                        };
                        w.decisions.put(decision_key, decision.clone(), ttl);
                        decision
                    }
                    Err(e) => return Verdict::Unavailable(format!("access review failed: {e}")),
                }
            }
        };
        match decision {
            Ok(()) => Verdict::Allow,
            Err(reason) => Verdict::Forbidden(format!(
                "User {:?} cannot get path {path:?}{}",
                user.name,
                if reason.is_empty() {
                    String::new()
                } else {
                    format!(": {reason}")
                }
            )),
        }
    }
}

/// Who the API server says `token` belongs to; `None` when it does not know it.
async fn review_token(client: &kube::Client, token: &str) -> kube::Result<Option<UserInfo>> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_owned(),
            ..TokenReviewSpec::default()
        },
        ..TokenReview::default()
    };
    let answer = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
        return Ok(None);
    };
    let user = status.user.unwrap_or_default();
    Ok(user.username.map(|name| UserInfo {
        name,
        uid: user.uid.unwrap_or_default(),
        groups: user.groups.unwrap_or_default(),
    }))
}

/// Whether `user` may `get` the non-resource `path`; `Err(reason)` when not.
async fn review_access(
    client: &kube::Client,
    user: &UserInfo,
    path: &str,
) -> kube::Result<Result<(), String>> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: Some(user.groups.clone()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some("get".to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let status = answer.status.unwrap_or_default();
    Ok(if status.allowed {
        Ok(())
    } else {
        Err(status.reason.unwrap_or_default())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_drops_what_expired_then_everything() {
        let cache: Cache<usize, ()> = Cache::new();
        for i in 0..CACHE_CAPACITY {
            cache.put(i, (), Duration::from_secs(60));
        }
        cache.put(CACHE_CAPACITY, (), Duration::from_secs(60));
        assert_eq!(cache.len(), 1, "nothing expired: all dropped");
        cache.put(1, (), Duration::ZERO);
        assert_eq!(cache.get(&1), None, "expired");
        assert_eq!(cache.get(&CACHE_CAPACITY), Some(()));
    }

    #[actix_rt::test]
    async fn always_allow_lets_everyone_in_and_webhook_asks_for_a_token() {
        assert_eq!(
            Access::always_allow().decide("/metrics", None).await,
            Verdict::Allow
        );
        let webhook = Access::webhook(&MonitorAuthorization::default());
        assert!(matches!(
            webhook.decide("/metrics", None).await,
            Verdict::Unauthenticated(_)
        ));
        assert!(matches!(
            webhook.decide("/metrics", Some("Basic abc")).await,
            Verdict::Unauthenticated(_)
        ));
        assert!(
            matches!(
                webhook.decide("/metrics", Some("Bearer t")).await,
                Verdict::Unavailable(_)
            ),
            "no API client yet"
        );
    }

    #[test]
    fn unset_mode_follows_whether_there_is_a_cluster() {
        let unset = MonitorAuthorization::default();
        assert!(!Access::from_settings(&unset, true).allows_everyone());
        assert!(Access::from_settings(&unset, false).allows_everyone());
        let open = MonitorAuthorization {
            mode: Some(MonitorAuthorizationMode::AlwaysAllow),
            ..unset
        };
        assert!(Access::from_settings(&open, true).allows_everyone());
    }
}
