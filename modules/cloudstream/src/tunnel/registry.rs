//! Sessions by node name and by internal IP; a reconnect replaces, an ended session leaves.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::Session;

/// The live sessions. Lookups by node name come first, then by IP (upstream keeps both keys
/// in one map).
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
    by_ip: HashMap<String, Arc<Session>>,
}

/// One spelling per address, so `::1` and `0:0::1` meet.
pub(crate) fn ip_key(ip: &str) -> String {
    ip.parse::<IpAddr>()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| ip.to_owned())
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps half-updated in a way that
        // matters (each operation is a few inserts/removes), so keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `session` under its node name and IP. Returns the session it replaces for the
    /// same node, which the caller must close. Another node's session that shared the IP
    /// keeps running; the IP now leads to the newcomer.
    pub(crate) fn insert(&self, session: Arc<Session>) -> Option<Arc<Session>> {
        let mut inner = self.lock();
        let old = inner.by_node.insert(session.node.clone(), session.clone());
        if let Some(old) = &old {
            let old_ip = ip_key(&old.ip);
            if inner
                .by_ip
                .get(&old_ip)
                .is_some_and(|s| Arc::ptr_eq(s, old))
            {
                inner.by_ip.remove(&old_ip);
            }
        }
        inner.by_ip.insert(ip_key(&session.ip), session);
        drop(inner);
        self.changes.send_modify(|n| *n += 1);
        old
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

    /// The session for a node name or an internal IP.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Session>> {
        let inner = self.lock();
        inner
            .by_node
            .get(key)
            .or_else(|| inner.by_ip.get(&ip_key(key)))
            .cloned()
    }

    /// Every live session.
    pub(crate) fn all(&self) -> Vec<Arc<Session>> {
        self.lock().by_node.values().cloned().collect()
    }
}
