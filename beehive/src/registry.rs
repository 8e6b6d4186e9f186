//! The registry of modules and groups every endpoint and the bus share: lookups, offers and
//! counters, thread-safe.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::config::BusConfig;
use crate::error::{Error, Result};
use crate::mailbox::{Mailbox, Offer};
use crate::stats::{BusStats, ModuleStats, ModuleStatsSnapshot, inc};
use crate::waiters::Waiters;
use crate::{FastMap, Message};

pub(crate) const RUNNING: u8 = 0;
pub(crate) const SHUTTING_DOWN: u8 = 1;
pub(crate) const SHUT_DOWN: u8 = 2;

#[derive(Debug, Clone)]
pub(crate) enum Registered {
    Enabled(Arc<Mailbox>),
    Disabled,
}

/// The part of the bus every [`Endpoint`] shares (thread-safe).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: BusConfig,
    pub(crate) modules: FastMap<Arc<str>, Registered>,
    pub(crate) groups: FastMap<String, Arc<[Arc<Mailbox>]>>,
    pub(crate) stats: FastMap<Arc<str>, Arc<ModuleStats>>,
    pub(crate) waiters: Waiters,
    pub(crate) unmatched_responses: AtomicU64,
    pub(crate) state: AtomicU8,
}

/// What [`Shared::offer`] did with a message.
pub(crate) enum Offered {
    Queued,
    /// The mailbox is full: wait for room in it.
    Full(Arc<Mailbox>, Message),
    /// The mailbox refused it (stopped; already counted).
    Refused(Error),
    /// The name did not resolve (not counted yet).
    Lookup(LookupError, Message),
}

/// Why a module name did not resolve to a mailbox.
pub(crate) enum LookupError {
    Unknown,
    Disabled,
    Stopped,
    Shutdown,
}

impl LookupError {
    pub(crate) fn into_error(self, module: &str, message: Option<Message>) -> Error {
        let module = module.to_owned();
        let message = message.map(Box::new);
        match self {
            LookupError::Unknown => Error::UnknownModule { module, message },
            LookupError::Disabled => Error::ModuleDisabled { module, message },
            LookupError::Stopped => Error::Stopped { module, message },
            LookupError::Shutdown => Error::Shutdown { message },
        }
    }
}

impl Shared {
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.state.load(Ordering::Acquire) != RUNNING
    }

    pub(crate) fn lookup(&self, module: &str) -> Result<Arc<Mailbox>, LookupError> {
        if self.state.load(Ordering::Acquire) == SHUT_DOWN {
            return Err(LookupError::Shutdown);
        }
        match self.modules.get(module).as_deref() {
            Some(Registered::Enabled(mb)) if mb.is_closing() => Err(LookupError::Stopped),
            Some(Registered::Enabled(mb)) => Ok(mb.clone()),
            Some(Registered::Disabled) => Err(LookupError::Disabled),
            None => Err(LookupError::Unknown),
        }
    }

    /// Enqueues `message` for `module` if its mailbox has room now, under the registry's read
    /// guard: the common path takes no reference count on the mailbox and builds no future.
    /// A full mailbox comes back with the message, so the caller can wait for room.
    #[inline]
    pub(crate) fn offer(&self, module: &str, message: Message) -> Offered {
        if self.state.load(Ordering::Acquire) == SHUT_DOWN {
            return Offered::Lookup(LookupError::Shutdown, message);
        }
        match self.modules.get(module).as_deref() {
            Some(Registered::Enabled(mb)) if mb.is_closing() => {
                Offered::Lookup(LookupError::Stopped, message)
            }
            Some(Registered::Enabled(mb)) => match mb.offer(message) {
                Offer::Queued => Offered::Queued,
                Offer::Full(message) => Offered::Full(mb.clone(), message),
                Offer::Refused(e) => Offered::Refused(e),
            },
            Some(Registered::Disabled) => Offered::Lookup(LookupError::Disabled, message),
            None => Offered::Lookup(LookupError::Unknown, message),
        }
    }

    /// The members of `group` now (a snapshot; membership may change afterwards).
    pub(crate) fn group_members(&self, group: &str) -> Result<Arc<[Arc<Mailbox>]>, LookupError> {
        if self.state.load(Ordering::Acquire) == SHUT_DOWN {
            return Err(LookupError::Shutdown);
        }
        match self.groups.get(group) {
            Some(members) if !members.is_empty() => Ok(members.clone()),
            _ => Err(LookupError::Unknown),
        }
    }

    /// Counts a send refused at lookup because `module` had stopped or was removed (a name
    /// that was never registered counts nowhere).
    pub(crate) fn count_refused(&self, module: &str, why: &LookupError) {
        let stopped = match why {
            LookupError::Stopped => true,
            LookupError::Unknown => false,
            LookupError::Disabled | LookupError::Shutdown => return,
        };
        if let Some(stats) = self.stats.get(module)
            && (stopped || stats.removed.load(Ordering::Acquire))
        {
            inc(&stats.rejected_stopped);
        }
    }

    pub(crate) fn stats_for(&self, name: &str) -> Arc<ModuleStats> {
        if let Some(s) = self.stats.get(name) {
            return s.clone();
        }
        self.stats.entry(Arc::from(name)).or_default().clone()
    }

    pub(crate) fn join(&self, group: &str, mailbox: &Arc<Mailbox>) {
        let mut entry = self
            .groups
            .entry(group.to_owned())
            .or_insert_with(|| Arc::from([]));
        if entry.iter().any(|m| Arc::ptr_eq(m, mailbox)) {
            return;
        }
        let mut members: Vec<Arc<Mailbox>> = entry.iter().cloned().collect();
        members.push(mailbox.clone());
        *entry = Arc::from(members);
    }

    pub(crate) fn leave(&self, group: &str, module: &str) {
        if let Some(mut entry) = self.groups.get_mut(group) {
            let members: Vec<Arc<Mailbox>> = entry
                .iter()
                .filter(|m| &*m.name != module)
                .cloned()
                .collect();
            *entry = Arc::from(members);
        }
    }

    pub(crate) fn leave_all(&self, module: &str) {
        let groups: Vec<String> = self.groups.iter().map(|e| e.key().clone()).collect();
        for g in groups {
            self.leave(&g, module);
        }
    }

    pub(crate) fn stats(&self) -> BusStats {
        let mut modules: Vec<ModuleStatsSnapshot> = self
            .stats
            .iter()
            .map(|e| {
                let (depth, capacity) = match self.modules.get(e.key()).as_deref() {
                    Some(Registered::Enabled(mb)) => (mb.depth(), mb.capacity()),
                    _ => (0, 0),
                };
                e.value().snapshot(e.key(), depth, capacity)
            })
            .collect();
        modules.sort_by(|a, b| a.name.cmp(&b.name));
        BusStats {
            modules,
            unmatched_responses: self.unmatched_responses.load(Ordering::Relaxed),
            pending_sync: self.waiters.len(),
        }
    }
}
