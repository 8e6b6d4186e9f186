//! Who may call the stream server, decided as a kubelet decides it: the verified client
//! certificate gives the user (CN) and groups (O), the request maps to `nodes/<subresource>`
//! attributes, and a SubjectAccessReview asks the API server, with answers cached.

use std::time::Duration;

use kubeedge_api::access::{self, AccessReviewer, Subject};
use rustls_pki_types::CertificateDer;

use crate::metrics::Metrics;

/// The authenticated caller: a certificate's CN and O values plus `system:authenticated`, or
/// `system:anonymous` when the connection carried no certificate (client verification off).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Caller {
    pub(crate) user: String,
    pub(crate) groups: Vec<String>,
}

impl Caller {
    /// The caller a certificate names, as the API server's x509 authenticator maps it; no
    /// certificate is `system:anonymous`. A certificate whose subject does not hold exactly
    /// one CN is refused: Go's x509 keeps the last CN where others read the first, so such a
    /// certificate would be reviewed as another user than the API server sees.
    pub(crate) fn from_certificate(cert: Option<&CertificateDer<'_>>) -> Result<Caller, String> {
        let Some(cert) = cert else {
            return Ok(Caller {
                user: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
            });
        };
        let subject = pki::parse_identity(cert.as_ref()).map_err(|e| e.to_string())?;
        let user = subject
            .common_name
            .filter(|cn| !cn.is_empty())
            .ok_or("the client certificate's subject must hold exactly one common name")?;
        let mut groups = subject.organizations;
        groups.push("system:authenticated".into());
        Ok(Caller { user, groups })
    }
}

/// What a request asks to do: `verb` on `nodes/<subresource>` named `node` (empty when the
/// node is unknown, which RBAC grants only to rules without `resourceNames`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Attributes {
    pub(crate) verb: &'static str,
    pub(crate) subresource: &'static str,
    pub(crate) node: String,
}

/// The kubelet's `isSubpath`: `path` is `sub` or below it; a trailing slash on `sub` is
/// ignored.
fn is_subpath(path: &str, sub: &str) -> bool {
    let sub = sub.strip_suffix('/').unwrap_or(sub);
    path == sub || (path.starts_with(sub) && path.as_bytes().get(sub.len()) == Some(&b'/'))
}

/// The kubelet's request attributes (`pkg/kubelet/server/auth.go`): the verb from the
/// method (an unknown method gets an empty verb, which no rule grants) and the subresource
/// from the path: `/stats` → `stats`, `/metrics` → `metrics`, `/logs` → `log`, everything
/// else, exec, attach and `/containerLogs` included, → `proxy`.
pub(crate) fn attributes(method: &str, path: &str, node: Option<&str>) -> Attributes {
    let verb = match method {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    let subresource = if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else {
        "proxy"
    };
    Attributes {
        verb,
        subresource,
        node: node.unwrap_or("").to_owned(),
    }
}

/// An authorization answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    /// Refused; `reason` is the authorizer's explanation (may be empty).
    Deny {
        reason: String,
    },
}

/// Errors asking the API server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthzError {
    /// The SubjectAccessReview could not be created.
    #[error("subjectaccessreview failed: {0}")]
    Review(#[source] kube::Error),
}

/// How the stream server decides.
#[derive(Debug)]
pub(crate) enum Authorizer {
    /// Every caller whose certificate verified may do anything.
    AlwaysAllow,
    /// SubjectAccessReviews against the API server.
    Webhook(Box<Webhook>),
}

impl Authorizer {
    /// The decision for `caller` doing `attrs`. Errors are not cached: the next request
    /// asks again.
    pub(crate) async fn authorize(
        &self,
        caller: &Caller,
        attrs: &Attributes,
        metrics: &Metrics,
    ) -> Result<Decision, AuthzError> {
        match self {
            Authorizer::AlwaysAllow => Ok(Decision::Allow),
            Authorizer::Webhook(w) => w.authorize(caller, attrs, metrics).await,
        }
    }
}

/// SubjectAccessReviews with the kubelet's answer cache: allowed answers are reused for
/// `allowed_ttl`, denied ones for `denied_ttl`.
pub(crate) struct Webhook(AccessReviewer);

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Webhook").field(&self.0).finish()
    }
}

impl Webhook {
    pub(crate) fn new(client: kube::Client, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        Webhook(AccessReviewer::new(client, allowed_ttl, denied_ttl))
    }

    /// Remembers answers within `limits` (callers choose node names: the cache is bounded).
    pub(crate) fn with_limits(self, limits: access::CacheLimits) -> Self {
        Webhook(self.0.with_limits(limits))
    }

    async fn authorize(
        &self,
        caller: &Caller,
        attrs: &Attributes,
        metrics: &Metrics,
    ) -> Result<Decision, AuthzError> {
        let subject = Subject {
            user: caller.user.clone(),
            groups: caller.groups.clone(),
        };
        // The kubelet's attributes: its Node's proxy-like subresources.
        let attributes = access::Attributes {
            verb: attrs.verb.into(),
            version: "v1".into(),
            resource: "nodes".into(),
            subresource: attrs.subresource.into(),
            name: attrs.node.clone(),
            ..access::Attributes::default()
        };
        let review = self
            .0
            .review_as(&subject, &attributes)
            .await
            .map_err(AuthzError::Review)?;
        if !review.cached {
            metrics.authz_review();
        }
        Ok(match review.decision {
            access::Decision::Allow => Decision::Allow,
            access::Decision::Deny(reason) => Decision::Deny { reason },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods_should_map_as_the_kubelet_maps_them() {
        let a = |m, p| {
            let a = attributes(m, p, Some("edge-1"));
            (a.verb, a.subresource)
        };
        assert_eq!(a("GET", "/stats"), ("get", "stats"));
        assert_eq!(a("GET", "/stats/summary"), ("get", "stats"));
        assert_eq!(a("GET", "/statsx"), ("get", "proxy"));
        assert_eq!(a("GET", "/metrics"), ("get", "metrics"));
        assert_eq!(a("GET", "/metrics/cadvisor"), ("get", "metrics"));
        assert_eq!(a("GET", "/metricsx"), ("get", "proxy"));
        assert_eq!(a("GET", "/logs/"), ("get", "log"));
        assert_eq!(a("GET", "/logs/syslog"), ("get", "log"));
        assert_eq!(a("GET", "/containerLogs/ns/p/c"), ("get", "proxy"));
        assert_eq!(a("POST", "/exec/ns/p/c"), ("create", "proxy"));
        assert_eq!(a("GET", "/exec/ns/p/c"), ("get", "proxy"));
        assert_eq!(a("POST", "/attach/ns/p/c"), ("create", "proxy"));
        assert_eq!(a("PUT", "/x"), ("update", "proxy"));
        assert_eq!(a("PATCH", "/x"), ("patch", "proxy"));
        assert_eq!(a("DELETE", "/x"), ("delete", "proxy"));
        assert_eq!(a("OPTIONS", "/x"), ("", "proxy"));
        assert_eq!(attributes("GET", "/metrics", None).node, "");
    }

    #[test]
    fn a_certificate_should_give_its_cn_and_organizations_and_none_is_anonymous() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "dev");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let caller = Caller::from_certificate(Some(cert.der())).unwrap();
        assert_eq!(caller.user, "alice");
        assert_eq!(caller.groups, ["dev", "system:authenticated"]);
        let anon = Caller::from_certificate(None).unwrap();
        assert_eq!(anon.user, "system:anonymous");
        assert_eq!(anon.groups, ["system:unauthenticated"]);
    }

    #[test]
    fn a_certificate_with_two_common_names_or_none_should_name_no_caller() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut two = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        two.distinguished_name
            .push(rcgen::DnType::CommonName, "first");
        // The CN attribute type again, under another key of rcgen's map.
        two.distinguished_name
            .push(rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]), "last");
        let cert = two.self_signed(&key).unwrap();
        let err = Caller::from_certificate(Some(cert.der())).unwrap_err();
        assert!(err.contains("exactly one common name"), "{err}");
        let mut none = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        none.distinguished_name = rcgen::DistinguishedName::new();
        none.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        let cert = none.self_signed(&key).unwrap();
        assert!(Caller::from_certificate(Some(cert.der())).is_err());
    }
}
