//! Bounded mailboxes: one `tokio::sync::mpsc` channel per module, with a close signal that
//! lets the receiver drain what is queued.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use futures::task::AtomicWaker;
use tokio::sync::{Notify, mpsc};

use crate::Message;
use crate::error::{Error, Result};
use crate::stats::{ModuleStats, inc};

/// Default mailbox capacity, as KubeEdge's `ChannelSizeDefault`.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 1024;

/// The sending side of a module's mailbox, shared by every sender.
#[derive(Debug)]
pub(crate) struct Mailbox {
    pub(crate) name: Arc<str>,
    tx: mpsc::Sender<Message>,
    pub(crate) stats: Arc<ModuleStats>,
    /// The receiver lives here while no actor owns it (before start, during a restart).
    parked: Mutex<Option<mpsc::Receiver<Message>>>,
    closing: AtomicBool,
    close_waker: AtomicWaker,
    /// Signalled when the receiver has delivered everything after a close.
    drained: Notify,
    /// Signalled on close: wakes senders waiting for room in an [`Inbox`]'s mailbox, whose
    /// owner may have stopped reading (an actor's stream, or a parked receiver, closes the
    /// channel itself, which wakes them).
    closed: Notify,
    /// Read through an [`Inbox`].
    inbox: AtomicBool,
    drained_flag: AtomicBool,
}

impl Mailbox {
    pub(crate) fn new(name: Arc<str>, capacity: usize, stats: Arc<ModuleStats>) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Arc::new(Mailbox {
            name,
            tx,
            stats,
            parked: Mutex::new(Some(rx)),
            closing: AtomicBool::new(false),
            close_waker: AtomicWaker::new(),
            drained: Notify::new(),
            closed: Notify::new(),
            inbox: AtomicBool::new(false),
            drained_flag: AtomicBool::new(false),
        })
    }

    pub(crate) fn capacity(&self) -> usize {
        self.tx.max_capacity()
    }

    pub(crate) fn depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// The refusal of a send because the module stopped, counted on the module.
    fn stopped(&self, message: Message) -> Error {
        inc(&self.stats.rejected_stopped);
        Error::Stopped {
            module: self.name.to_string(),
            message: Some(Box::new(message)),
        }
    }

    /// Waits for room (back-pressure). Fails if the module stops meanwhile, handing the
    /// message back, whether or not anyone reads the mailbox.
    pub(crate) async fn send(&self, message: Message) -> Result<()> {
        if self.is_closing() {
            return Err(self.stopped(message));
        }
        if !self.inbox.load(Ordering::Relaxed) {
            return self.tx.send(message).await.map_err(|e| self.stopped(e.0));
        }
        let message = match self.tx.try_send(message) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Full(m)) => m,
            Err(mpsc::error::TrySendError::Closed(m)) => return Err(self.stopped(m)),
        };
        // Full: wait for a permit (in arrival order) or for the close, whichever comes first.
        // The message stays here until a permit is granted, so a close hands it back.
        let closed = self.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if self.is_closing() {
            return Err(self.stopped(message));
        }
        tokio::select! {
            biased;
            permit = self.tx.reserve() => match permit {
                Ok(permit) if !self.is_closing() => {
                    permit.send(message);
                    Ok(())
                }
                _ => Err(self.stopped(message)),
            },
            () = &mut closed => Err(self.stopped(message)),
        }
    }

    /// Fails at once when full, counting the rejection.
    pub(crate) fn try_send(&self, message: Message) -> Result<()> {
        let result = self.try_send_uncounted(message);
        if let Err(Error::MailboxFull { .. }) = result {
            inc(&self.stats.rejected_full);
        }
        result
    }

    /// Fails at once when full; the caller will wait for room, so nothing is rejected.
    pub(crate) fn try_send_uncounted(&self, message: Message) -> Result<()> {
        if self.is_closing() {
            return Err(self.stopped(message));
        }
        self.tx.try_send(message).map_err(|e| match e {
            mpsc::error::TrySendError::Full(m) => Error::MailboxFull {
                module: self.name.to_string(),
                message: Box::new(m),
            },
            mpsc::error::TrySendError::Closed(m) => self.stopped(m),
        })
    }

    /// Stops accepting messages; the receiver still gets what is queued, then ends.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.close_waker.wake();
        self.closed.notify_waiters();
        // A receiver that is parked (not owned by a running actor) is closed here.
        if let Some(rx) = self
            .parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            rx.close();
            if rx.is_empty() {
                self.mark_drained();
            }
        }
    }

    fn mark_drained(&self) {
        self.drained_flag.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// True while no consumer holds the receiver (never started, or between restarts).
    pub(crate) fn is_parked(&self) -> bool {
        self.parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Resolves once everything queued before the close has been handed out.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.drained_flag.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Says the receiver is read through an [`Inbox`] (see `closed`).
    pub(crate) fn mark_inbox(&self) {
        self.inbox.store(true, Ordering::Relaxed);
    }

    /// Takes the receiver for a (re)started consumer.
    pub(crate) fn take_stream(self: &Arc<Self>) -> Option<MailboxStream> {
        let rx = self
            .parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        Some(MailboxStream {
            rx: Some(rx),
            mailbox: self.clone(),
            closed: false,
        })
    }
}

/// The receiving side, as a `Stream` an actor (or an [`Inbox`]) consumes. Dropping it parks the
/// receiver back in the mailbox, so a restarted module keeps its queued messages.
#[derive(Debug)]
pub(crate) struct MailboxStream {
    rx: Option<mpsc::Receiver<Message>>,
    mailbox: Arc<Mailbox>,
    closed: bool,
}

impl MailboxStream {
    fn observe_close(&mut self, rx: &mut mpsc::Receiver<Message>) {
        if !self.closed && self.mailbox.is_closing() {
            self.closed = true;
            rx.close();
        }
    }
}

impl MailboxStream {
    /// The next queued message without waiting (and without spending the task's budget).
    fn try_next(&mut self) -> Option<Message> {
        let mut rx = self.rx.take()?;
        self.observe_close(&mut rx);
        let m = rx.try_recv().ok();
        self.rx = Some(rx);
        let m = m?;
        inc(&self.mailbox.stats.received);
        Some(m)
    }
}

impl Stream for MailboxStream {
    type Item = Message;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let this = &mut *self;
        let Some(mut rx) = this.rx.take() else {
            return Poll::Ready(None);
        };
        this.observe_close(&mut rx);
        let result = match rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                inc(&this.mailbox.stats.received);
                Poll::Ready(Some(m))
            }
            Poll::Ready(None) => {
                this.mailbox.mark_drained();
                Poll::Ready(None)
            }
            Poll::Pending if !this.closed => {
                // Only an idle receiver needs a wake-up for a close.
                this.mailbox.close_waker.register(cx.waker());
                if this.mailbox.is_closing() {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        };
        this.rx = Some(rx);
        result
    }
}

impl Drop for MailboxStream {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            let mut parked = self
                .mailbox
                .parked
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *parked = Some(rx);
        }
    }
}

/// The mailbox of a module that is not an actor: receive with [`Inbox::recv`].
///
/// Made by [`crate::Bus::register_inbox`]. Messages arrive in each sender's order. After the
/// module is stopped (shutdown or [`crate::Bus::remove`]) `recv` still returns what was queued,
/// then [`Error::Stopped`] — never an empty message. Senders waiting for room when it stops
/// get [`Error::Stopped`] with their message at once, whether or not anyone still reads the
/// inbox.
#[derive(Debug)]
pub struct Inbox {
    stream: MailboxStream,
}

impl Inbox {
    pub(crate) fn new(stream: MailboxStream) -> Self {
        Inbox { stream }
    }

    /// The module name.
    pub fn name(&self) -> &str {
        &self.stream.mailbox.name
    }

    /// The next message; waits while the mailbox is empty.
    pub async fn recv(&mut self) -> Result<Message> {
        use futures::StreamExt;
        match self.stream.next().await {
            Some(m) => Ok(m),
            None => Err(Error::Stopped {
                module: self.name().to_owned(),
                message: None,
            }),
        }
    }

    /// The next message if one is queued now.
    pub fn try_recv(&mut self) -> Option<Message> {
        self.stream.try_next()
    }

    /// Messages waiting now.
    pub fn len(&self) -> usize {
        self.stream.mailbox.depth()
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
