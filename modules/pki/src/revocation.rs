//! Edge certificates revoked by node name and date: once a node is revoked at time `T`, every
//! certificate for that node dated (notBefore) at or before `T` is refused; certificates
//! issued later are not affected.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::error::{Error, Result};
use crate::identity;

#[derive(Debug, Default)]
struct Inner {
    /// node name → revoked-at (unix seconds).
    nodes: RwLock<HashMap<String, i64>>,
    /// Bumped on every change of `nodes`.
    generation: AtomicU64,
    refused: AtomicU64,
    /// True until the stored table has been read (see [`Revocations::pending`]).
    pending: AtomicBool,
}

/// A shared, cheaply cloned table of node name → revoked-at time (unix seconds).
///
/// A certificate is revoked when its subject is an edge node (`CN=system:node:<node>`,
/// `O=system:nodes`) that has an entry and its notBefore is **at or before** that entry
/// (X.509 times have whole seconds, so a certificate issued in the same second as the
/// revocation counts as revoked; issuers wait for the next second, see
/// [`Revocations::issue_delay`]). Other certificates are never revoked by this table.
/// Reads are lock-shared and cost one certificate parse; an empty table costs nothing.
#[derive(Debug, Clone, Default)]
pub struct Revocations(Arc<Inner>);

/// Now, in unix seconds.
pub fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// `secs` as RFC 3339 (UTC), for messages and storage.
pub fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| secs.to_string())
}

/// Parses RFC 3339 (as written by [`rfc3339`]) or plain unix seconds.
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<i64>() {
        return Some(secs);
    }
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

impl Revocations {
    /// An empty table, complete as it is (nothing stored elsewhere).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose stored entries are still to be read: until
    /// [`Revocations::mark_loaded`], [`Revocations::check`] refuses every certificate
    /// (fail closed) with [`Error::RevocationsUnavailable`].
    pub fn pending() -> Self {
        let r = Self::default();
        r.0.pending.store(true, Ordering::Release);
        r
    }

    /// Declares the stored entries read; checks judge by the table from now on.
    pub fn mark_loaded(&self) {
        self.0.pending.store(false, Ordering::Release);
    }

    /// True once the table is complete (always for [`Revocations::new`]).
    pub fn is_loaded(&self) -> bool {
        !self.0.pending.load(Ordering::Acquire)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, i64>> {
        self.0.nodes.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, i64>> {
        self.0.nodes.write().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.0.generation.fetch_add(1, Ordering::Release);
    }

    /// A number that changes whenever the table does (a revocation, a later time, a
    /// forgotten entry). Holders of live connections compare it with the one they last saw
    /// and re-check their certificates when it moved ([`Revocations::covers`]).
    pub fn generation(&self) -> u64 {
        self.0.generation.load(Ordering::Acquire)
    }

    /// Whether a certificate of `node` dated (notBefore, unix seconds) `not_before` is
    /// revoked by the table now; what [`Revocations::check`] decides for a loaded table,
    /// for a certificate read once when its connection was accepted.
    pub fn covers(&self, node: &str, not_before: i64) -> bool {
        self.revoked_at(node).is_some_and(|t| not_before <= t)
    }

    /// Revokes every certificate of `node` dated at or before `revoked_at` (unix seconds).
    /// An existing later time is kept (revocation never moves back). True when it changed.
    pub fn revoke(&self, node: &str, revoked_at: i64) -> bool {
        let mut nodes = self.write();
        match nodes.get(node) {
            Some(t) if *t >= revoked_at => false,
            _ => {
                nodes.insert(node.to_owned(), revoked_at);
                self.changed();
                true
            }
        }
    }

    /// Removes `node`'s entry only if it is still `revoked_at` (so a newer revocation made
    /// meanwhile is never lost). True when removed.
    pub fn forget(&self, node: &str, revoked_at: i64) -> bool {
        let mut nodes = self.write();
        if nodes.get(node) == Some(&revoked_at) {
            nodes.remove(node);
            self.changed();
            true
        } else {
            false
        }
    }

    /// The revoked-at time of `node`, if any.
    pub fn revoked_at(&self, node: &str) -> Option<i64> {
        self.read().get(node).copied()
    }

    /// Every entry, sorted by node name.
    pub fn snapshot(&self) -> BTreeMap<String, i64> {
        self.read().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Number of revoked node names.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when nothing is revoked.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Certificates refused by [`Revocations::check`] so far (all clones share the count).
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// `Ok` unless `cert_der` is an edge certificate revoked by this table; then
    /// [`Error::Revoked`] naming the node and both times. While the table is
    /// [pending](Revocations::pending), every certificate gets
    /// [`Error::RevocationsUnavailable`]. A certificate that does not parse is not judged
    /// here (chain verification refuses it).
    pub fn check(&self, cert_der: &[u8]) -> Result<()> {
        if !self.is_loaded() {
            self.0.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Error::RevocationsUnavailable);
        }
        if self.is_empty() {
            return Ok(());
        }
        let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
            return Ok(());
        };
        let id = identity::from_name(cert.subject());
        let Some(node) = id.node_name() else {
            return Ok(());
        };
        let Some(revoked_at) = self.revoked_at(node) else {
            return Ok(());
        };
        let not_before = cert.validity().not_before.timestamp();
        if not_before > revoked_at {
            return Ok(());
        }
        self.0.refused.fetch_add(1, Ordering::Relaxed);
        Err(Error::Revoked {
            node: node.to_owned(),
            issued: rfc3339(not_before),
            revoked: rfc3339(revoked_at),
        })
    }

    /// How long an issuer must wait before signing a certificate for `node` so that it is
    /// dated after the node's revocation (zero when not revoked or already later); at most
    /// a little over a second unless the revocation time is in the future (clock skew).
    pub fn issue_delay(&self, node: &str) -> std::time::Duration {
        let Some(revoked_at) = self.revoked_at(node) else {
            return std::time::Duration::ZERO;
        };
        let now = time::OffsetDateTime::now_utc();
        let next = (revoked_at + 1) as i128 * 1_000_000_000;
        let wait = next - now.unix_timestamp_nanos();
        if wait <= 0 {
            std::time::Duration::ZERO
        } else {
            // A few milliseconds past the boundary, so the truncated notBefore is after it.
            std::time::Duration::from_nanos(wait as u64) + std::time::Duration::from_millis(5)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CertificateAuthority, IssueOptions};

    #[test]
    fn a_certificate_dated_at_or_before_the_revocation_is_refused() {
        let ca = CertificateAuthority::generate().unwrap();
        let old = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
        let other = ca.issue(&IssueOptions::edge("edge-2")).unwrap();
        let r = Revocations::new();
        assert!(r.check(&old.cert_der).is_ok());
        assert!(r.revoke("edge-1", unix_now()));
        assert!(!r.revoke("edge-1", unix_now() - 100), "never moves back");
        let err = r.check(&old.cert_der).unwrap_err();
        assert!(matches!(err, Error::Revoked { ref node, .. } if node == "edge-1"));
        assert!(err.to_string().contains("edge-1"), "{err}");
        assert!(r.check(&other.cert_der).is_ok());
        assert!(r.check(ca.cert_der()).is_ok(), "non-edge certificates pass");
        assert_eq!(r.refused(), 1);

        std::thread::sleep(r.issue_delay("edge-1"));
        let fresh = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
        assert!(r.check(&fresh.cert_der).is_ok());
    }

    #[test]
    fn the_generation_moves_with_every_change_and_covers_judges_a_date() {
        let r = Revocations::new();
        let g0 = r.generation();
        assert!(!r.covers("n", 10));
        r.revoke("n", 100);
        let g1 = r.generation();
        assert!(g1 > g0);
        assert!(r.covers("n", 100) && r.covers("n", 10) && !r.covers("n", 101));
        r.revoke("n", 50);
        assert_eq!(r.generation(), g1, "an earlier time changes nothing");
        r.forget("n", 100);
        assert!(r.generation() > g1);
        assert!(!r.covers("n", 10));
    }

    #[test]
    fn a_pending_table_refuses_everything_until_loaded() {
        let ca = CertificateAuthority::generate().unwrap();
        let cert = ca.issue(&IssueOptions::edge("edge-1")).unwrap();
        let r = Revocations::pending();
        assert!(matches!(
            r.check(&cert.cert_der),
            Err(Error::RevocationsUnavailable)
        ));
        r.mark_loaded();
        assert!(r.check(&cert.cert_der).is_ok());
    }

    #[test]
    fn forget_keeps_a_newer_revocation_and_times_round_trip() {
        let r = Revocations::new();
        r.revoke("n", 100);
        r.revoke("n", 200);
        assert!(!r.forget("n", 100));
        assert_eq!(r.revoked_at("n"), Some(200));
        assert!(r.forget("n", 200));
        assert!(r.is_empty());
        assert_eq!(parse_time(&rfc3339(1_700_000_000)), Some(1_700_000_000));
        assert_eq!(parse_time("42"), Some(42));
        assert_eq!(parse_time("soon"), None);
    }
}
