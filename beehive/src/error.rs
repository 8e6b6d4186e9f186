//! Errors of the bus.

use std::time::Duration;

use crate::Message;

/// What can go wrong on the bus. Errors caused by a send hand the message back
/// ([`Error::into_message`]) so the caller can retry or dead-letter it without a clone.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No module of that name is registered (never, or removed).
    #[error("module {module:?} is not registered")]
    UnknownModule {
        /// The name asked for.
        module: String,
        /// The message, when a send failed.
        message: Option<Box<Message>>,
    },
    /// The module is registered but disabled, so it has no mailbox.
    #[error("module {module:?} is disabled")]
    ModuleDisabled {
        /// The disabled module.
        module: String,
        /// The message, when a send failed.
        message: Option<Box<Message>>,
    },
    /// The group has no members (never had any, or all were removed).
    #[error("group {group:?} has no members")]
    EmptyGroup {
        /// The group.
        group: String,
        /// The message, when a send failed.
        message: Option<Box<Message>>,
    },
    /// A module of that name is already registered.
    #[error("module {0:?} is already registered")]
    DuplicateModule(String),
    /// The mailbox is at capacity; only returned by the `try_` calls.
    #[error("mailbox of {module:?} is full")]
    MailboxFull {
        /// The full module.
        module: String,
        /// The message that did not get in.
        message: Box<Message>,
    },
    /// The module stopped (or is stopping) and accepts nothing more.
    #[error("module {module:?} has stopped")]
    Stopped {
        /// The stopped module.
        module: String,
        /// The message, when a send failed.
        message: Option<Box<Message>>,
    },
    /// A sync request could not be enqueued before its timeout; it will never be delivered.
    #[error("timed out after {timeout:?} enqueueing message {id} to {module:?}")]
    EnqueueTimeout {
        /// The destination.
        module: String,
        /// The request id.
        id: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// No response arrived before the timeout; a later one is dropped and counted.
    #[error("timed out after {timeout:?} waiting for the response to {id}")]
    ResponseTimeout {
        /// The request id.
        id: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// A group sync request expired before every member answered.
    #[error("timed out after {timeout:?}: {} of {} members of {group:?} answered, missing {missing:?}", answered.len(), answered.len() + missing.len())]
    GroupTimeout {
        /// The group.
        group: String,
        /// The answers that did arrive, by member.
        answered: Vec<(String, Message)>,
        /// Members that did not answer.
        missing: Vec<String>,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// Sync requests need a non-empty message id: it is the key the response is matched by.
    #[error("a sync request needs a message id")]
    EmptyMessageId,
    /// Another sync request with the same id is still waiting.
    #[error("a sync request with id {0} is already waiting")]
    DuplicateMessageId(String),
    /// The bus is shutting down or has shut down.
    #[error("the bus is shut down")]
    Shutdown {
        /// The message, when a send failed (a sync request woken by the shutdown after it
        /// was delivered has none to give back).
        message: Option<Box<Message>>,
    },
    /// Starting modules needs a running actix system.
    #[error("no actix system is running on this thread")]
    NoSystem,
}

impl Error {
    /// The message a failed send carried, if this error hands one back.
    pub fn into_message(self) -> Option<Message> {
        match self {
            Error::MailboxFull { message, .. } => Some(*message),
            Error::UnknownModule { message, .. }
            | Error::ModuleDisabled { message, .. }
            | Error::EmptyGroup { message, .. }
            | Error::Stopped { message, .. }
            | Error::Shutdown { message } => message.map(|m| *m),
            _ => None,
        }
    }

    /// True for errors that say the target cannot receive now but might later (full
    /// mailbox, timeouts); false for addressing errors and shutdown.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::MailboxFull { .. }
                | Error::EnqueueTimeout { .. }
                | Error::ResponseTimeout { .. }
                | Error::GroupTimeout { .. }
        )
    }
}

/// `Result` with the bus [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
