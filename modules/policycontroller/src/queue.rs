//! The keys (`namespace/name` of a ServiceAccountAccess) waiting for a reconcile: each at most
//! once, whatever number of events asked for it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(crate) struct Queue {
    pending: Mutex<BTreeSet<String>>,
    notify: Notify,
}

impl Queue {
    pub(crate) fn push(&self, key: String) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key);
        self.notify.notify_one();
    }

    /// The next key, waiting for one.
    pub(crate) async fn pop(&self) -> String {
        loop {
            let notified = self.notify.notified();
            if let Some(key) = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_first()
            {
                return key;
            }
            notified.await;
        }
    }
}
