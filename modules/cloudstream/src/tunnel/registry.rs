//! Sessions by node name and by internal IP; a reconnect replaces, an ended session leaves,
//! and an IP belongs to at most one node's live session.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::Session;

/// The live sessions, keyed separately by node name and by internal IP. A lookup by name
/// never consults the IPs and a lookup by IP never consults the names, so a node cannot
/// receive another node's requests by registering under a key that happens to be that
/// node's name or address.
#[derive(Debug)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
    /// Bumped on every change, for waiters.
    changes: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            inner: Mutex::default(),
            changes: watch::Sender::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    by_node: HashMap<String, Arc<Session>>,
    by_ip: HashMap<IpAddr, Arc<Session>>,
}

/// Why a session was not registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RegisterError {
    /// The session's IP is not an IP address.
    #[error("{ip:?} is not an IP address")]
    NotAnIp {
        /// What the session claimed.
        ip: String,
    },
    /// Another node's live session holds the IP; it keeps it. The message does not name
    /// the holder: the refused edge need not learn it.
    #[error("IP {ip} is held by another node's tunnel")]
    IpHeld {
        /// The IP.
        ip: IpAddr,
        /// The node whose session holds it.
        holder: String,
    },
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps half-updated in a way that
        // matters (each operation is a few inserts/removes), so keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `session` under its node name and IP, atomically with the checks. Returns the
    /// session it replaces for the same node, which the caller must close. Refused, with
    /// nothing changed, when the IP is not an address or another node's live session holds
    /// it (that session is neither moved nor replaced) — unless `evict` (the session's node
    /// owns the IP) and the holder's claim rests only on its Node's status: the holder is then
    /// closed and loses its keys.
    pub(crate) fn try_insert(
        &self,
        session: Arc<Session>,
        evict: bool,
    ) -> Result<Option<Arc<Session>>, RegisterError> {
        let ip: IpAddr = session.ip.parse().map_err(|_| RegisterError::NotAnIp {
            ip: session.ip.clone(),
        })?;
        let mut inner = self.lock();
        if let Some(holder) = inner.by_ip.get(&ip).cloned()
            && holder.node != session.node
            && !holder.is_closed()
        {
            if !evict || holder.peer_proven() {
                return Err(RegisterError::IpHeld {
                    ip,
                    holder: holder.node.clone(),
                });
            }
            holder.close("the IP belongs to another node, whose tunnel took it");
            inner.by_node.retain(|_, s| !Arc::ptr_eq(s, &holder));
            inner.by_ip.retain(|_, s| !Arc::ptr_eq(s, &holder));
        }
        let old = inner.by_node.insert(session.node.clone(), session.clone());
        if let Some(old) = &old {
            inner.by_ip.retain(|_, s| !Arc::ptr_eq(s, old));
        }
        inner.by_ip.insert(ip, session);
        drop(inner);
        self.changes.send_modify(|n| *n += 1);
        Ok(old)
    }

    /// Removes every key that still leads to `session`.
    pub(crate) fn remove(&self, session: &Arc<Session>) {
        let mut inner = self.lock();
        inner.by_node.retain(|_, s| !Arc::ptr_eq(s, session));
        inner.by_ip.retain(|_, s| !Arc::ptr_eq(s, session));
        drop(inner);
        self.changes.send_modify(|n| *n += 1);
    }

    /// A receiver that sees every change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The session of the node named `node`; names only, never IPs.
    pub(crate) fn by_node(&self, node: &str) -> Option<Arc<Session>> {
        self.lock().by_node.get(node).cloned()
    }

    /// The session registered with internal IP `ip`; IPs only, never names.
    pub(crate) fn by_ip(&self, ip: IpAddr) -> Option<Arc<Session>> {
        self.lock().by_ip.get(&ip).cloned()
    }

    /// Every live session.
    pub(crate) fn all(&self) -> Vec<Arc<Session>> {
        self.lock().by_node.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Tuning;
    use crate::metrics::Metrics;
    use crate::tunnel::Shared;

    fn session(shared: &Arc<Shared>, node: &str, ip: &str) -> Arc<Session> {
        let (tx, _rx) = tokio::sync::mpsc::channel(1);
        Session::new(node.into(), ip.into(), tx, shared.clone(), false, None)
    }

    #[test]
    fn an_ip_should_belong_to_one_live_node_and_names_never_match_ips() {
        let shared = Arc::new(Shared::new(Arc::new(Metrics::default()), Tuning::default()));
        let r = Registry::default();
        let a = session(&shared, "a", "10.0.0.1");
        assert!(r.try_insert(a.clone(), false).unwrap().is_none());
        let b = session(&shared, "b", "10.0.0.1");
        assert_eq!(
            r.try_insert(b, false).err(),
            Some(RegisterError::IpHeld {
                ip: "10.0.0.1".parse().unwrap(),
                holder: "a".into()
            })
        );
        assert!(Arc::ptr_eq(
            &r.by_ip("10.0.0.1".parse().unwrap()).unwrap(),
            &a
        ));
        assert!(matches!(
            r.try_insert(session(&shared, "c", "c"), false),
            Err(RegisterError::NotAnIp { .. })
        ));
        // By name only: an IP string is not a name.
        assert!(r.by_node("10.0.0.1").is_none());
        // The same node reconnecting with another IP replaces itself and frees the old IP.
        let a2 = session(&shared, "a", "10.0.0.2");
        let old = r.try_insert(a2.clone(), false).unwrap().unwrap();
        assert!(Arc::ptr_eq(&old, &a));
        assert!(r.by_ip("10.0.0.1".parse().unwrap()).is_none());
        // A closed holder's IP may be taken.
        a2.close("gone");
        let d = session(&shared, "d", "10.0.0.2");
        assert!(r.try_insert(d.clone(), false).unwrap().is_none());
        assert!(Arc::ptr_eq(
            &r.by_ip("10.0.0.2".parse().unwrap()).unwrap(),
            &d
        ));
    }

    #[test]
    fn the_owner_evicts_a_holder_whose_claim_is_only_status_but_not_a_proven_one() {
        let shared = Arc::new(Shared::new(Arc::new(Metrics::default()), Tuning::default()));
        let r = Registry::default();
        let squatter = session(&shared, "squatter", "10.0.0.1");
        r.try_insert(squatter.clone(), false).unwrap();
        let owner = session(&shared, "owner", "10.0.0.1");
        assert!(r.try_insert(owner.clone(), true).unwrap().is_none());
        assert!(squatter.is_closed());
        assert!(r.by_node("squatter").is_none());
        assert!(Arc::ptr_eq(
            &r.by_ip("10.0.0.1".parse().unwrap()).unwrap(),
            &owner
        ));
        // A holder that dials from the IP itself keeps it.
        let there = session(&shared, "there", "10.0.0.2");
        there.set_peer_proven();
        r.try_insert(there.clone(), false).unwrap();
        let claimant = session(&shared, "claimant", "10.0.0.2");
        assert!(matches!(
            r.try_insert(claimant, true),
            Err(RegisterError::IpHeld { .. })
        ));
        assert!(!there.is_closed());
    }
}
