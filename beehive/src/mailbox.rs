//! Bounded mailboxes: a queue of at most `capacity` messages per module, whose free slots are
//! the permits of a (fair, FIFO) semaphore, with a close signal that lets the receiver drain
//! what is queued.
//!
//! A sender takes a permit (waiting for one when the mailbox is full: back-pressure), then
//! pushes under a short lock. The receiver swaps the whole queue out under the same lock and
//! hands the batch to its consumer one message at a time. The slots of handed-out messages go
//! back (as permits) in chunks of up to [`RETURN_CHUNK`] (at most an eighth of the capacity),
//! and all of them whenever the receiver has handed out everything it took: a slot is never
//! free while its message is still queued, so the capacity is a hard bound, but a sender that
//! waits for room on a busy mailbox is woken once per chunk rather than once per message
//! (across threads every wake-up is a system call). The two buffers grow to the high-water mark
//! and keep their allocation: no allocation per message (tokio's `mpsc` allocates a block every
//! 32 messages), and the receiver takes the lock once per batch, not once per message.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use tokio::sync::{Notify, Semaphore, TryAcquireError};

use crate::Message;
use crate::error::{Error, Result};
use crate::stats::{ModuleStats, inc};

/// Default mailbox capacity, as KubeEdge's `ChannelSizeDefault`.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 1024;

/// Most slots the receiver hands out before it gives them back to senders in one go.
pub(crate) const RETURN_CHUNK: usize = 64;

/// What [`Mailbox::offer`] did with a message.
pub(crate) enum Offer {
    Queued,
    /// No room now: the message is handed back.
    Full(Message),
    /// The module stopped (the error hands the message back).
    Refused(Error),
}

/// The queue behind the lock.
#[derive(Debug)]
struct Ring {
    queue: VecDeque<Message>,
    /// No more pushes (the module stopped); what is queued is still handed out.
    closed: bool,
    /// The receiver waiting for a message (or for the close).
    waker: Option<Waker>,
    /// The batch a parked receiver had taken but not handed out (kept for the next consumer).
    parked_batch: Option<VecDeque<Message>>,
    /// True while no consumer holds the receiving side (never started, between restarts).
    parked: bool,
}

/// The sending side of a module's mailbox, shared by every sender.
#[derive(Debug)]
pub(crate) struct Mailbox {
    pub(crate) name: Arc<str>,
    pub(crate) stats: Arc<ModuleStats>,
    capacity: usize,
    /// Slots given back to senders at once (see [`RETURN_CHUNK`]).
    return_chunk: usize,
    /// Messages handed out whose slot is not given back yet (written by the receiver only).
    unreturned: AtomicUsize,
    /// One permit per free slot. Closed on close, which wakes every sender waiting for room.
    room: Semaphore,
    ring: Mutex<Ring>,
    closing: AtomicBool,
    /// Signalled when the receiver has delivered everything after a close.
    drained: Notify,
    drained_flag: AtomicBool,
}

impl Mailbox {
    pub(crate) fn new(name: Arc<str>, capacity: usize, stats: Arc<ModuleStats>) -> Arc<Self> {
        let capacity = capacity.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Mailbox {
            name,
            stats,
            capacity,
            return_chunk: (capacity / 8).clamp(1, RETURN_CHUNK),
            unreturned: AtomicUsize::new(0),
            room: Semaphore::new(capacity),
            ring: Mutex::new(Ring {
                // Grows to the high-water mark, then keeps its allocation (no preallocation:
                // a large, mostly idle mailbox costs nothing).
                queue: VecDeque::new(),
                closed: false,
                waker: None,
                parked_batch: None,
                parked: true,
            }),
            closing: AtomicBool::new(false),
            drained: Notify::new(),
            drained_flag: AtomicBool::new(false),
        })
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Messages queued and not yet handed out.
    pub(crate) fn depth(&self) -> usize {
        self.capacity
            .saturating_sub(self.room.available_permits())
            .saturating_sub(self.unreturned.load(Ordering::Relaxed))
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// The refusal of a send because the module stopped, counted on the module.
    #[cold]
    fn stopped(&self, message: Message) -> Error {
        inc(&self.stats.rejected_stopped);
        Error::Stopped {
            module: self.name.to_string(),
            message: Some(Box::new(message)),
        }
    }

    /// Puts a message in a slot already reserved (a permit taken and forgotten).
    // Inlined, as are the offers that call it: a `Message` is 248 bytes, and each call it is
    // passed through by value is a copy (a `memcpy` call).
    #[inline]
    fn push(&self, message: Message) -> Result<()> {
        let mut ring = self.ring();
        if ring.closed {
            drop(ring);
            return Err(self.refuse_reserved(message));
        }
        ring.queue.push_back(message);
        let waker = ring.waker.take();
        drop(ring);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Gives back the slot reserved for a message the closed mailbox refused.
    #[cold]
    fn refuse_reserved(&self, message: Message) -> Error {
        self.room.add_permits(1);
        self.stopped(message)
    }

    /// Waits for room (back-pressure). Fails if the module stops meanwhile, handing the
    /// message back, whether or not anyone reads the mailbox.
    pub(crate) async fn send(&self, message: Message) -> Result<()> {
        match self.offer(message) {
            Offer::Queued => Ok(()),
            Offer::Refused(e) => Err(e),
            // The waiting part is boxed: it runs once per full mailbox, not once per message,
            // and keeps the future every send builds (and moves) small.
            Offer::Full(message) => Box::pin(self.send_when_room(message)).await,
        }
    }

    /// Enqueues at once if there is room, without building a waiting future: the common case.
    #[inline]
    pub(crate) fn offer(&self, message: Message) -> Offer {
        if self.is_closing() {
            return Offer::Refused(self.stopped(message));
        }
        match self.room.try_acquire() {
            Ok(permit) => {
                permit.forget();
                match self.push(message) {
                    Ok(()) => Offer::Queued,
                    Err(e) => Offer::Refused(e),
                }
            }
            Err(TryAcquireError::NoPermits) => Offer::Full(message),
            Err(TryAcquireError::Closed) => Offer::Refused(self.stopped(message)),
        }
    }

    /// The slow part of [`Mailbox::send`]: the mailbox was full a moment ago. Waits for a
    /// slot in arrival order; the close wakes it (the message stays here until a slot is
    /// granted, so a close hands it back).
    pub(crate) async fn send_when_room(&self, message: Message) -> Result<()> {
        if self.is_closing() {
            return Err(self.stopped(message));
        }
        match self.room.acquire().await {
            Ok(permit) if !self.is_closing() => {
                permit.forget();
                self.push(message)
            }
            _ => Err(self.stopped(message)),
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
        match self.offer(message) {
            Offer::Queued => Ok(()),
            Offer::Full(m) => Err(Error::MailboxFull {
                module: self.name.to_string(),
                message: Box::new(m),
            }),
            Offer::Refused(e) => Err(e),
        }
    }

    /// Stops accepting messages; the receiver still gets what is queued, then ends.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let mut ring = self.ring();
        ring.closed = true;
        let waker = ring.waker.take();
        // Nobody holds a parked receiver: with nothing queued, it is drained now.
        let drained = ring.parked
            && ring.queue.is_empty()
            && ring.parked_batch.as_ref().is_none_or(VecDeque::is_empty);
        drop(ring);
        // Wakes every sender waiting for room, whether or not anyone reads the mailbox.
        self.room.close();
        if let Some(waker) = waker {
            waker.wake();
        }
        if drained {
            self.mark_drained();
        }
    }

    fn mark_drained(&self) {
        self.drained_flag.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// True while no consumer holds the receiver (never started, or between restarts).
    pub(crate) fn is_parked(&self) -> bool {
        self.ring().parked
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

    /// Says the receiver is read through an [`Inbox`] (kept for the bus; senders waiting for
    /// room are woken by the close for every kind of consumer).
    pub(crate) fn mark_inbox(&self) {}

    /// Takes the receiver for a (re)started consumer.
    pub(crate) fn take_stream(self: &Arc<Self>) -> Option<MailboxStream> {
        let mut ring = self.ring();
        if !ring.parked {
            return None;
        }
        ring.parked = false;
        let batch = ring.parked_batch.take().unwrap_or_default();
        drop(ring);
        Some(MailboxStream {
            mailbox: self.clone(),
            batch,
            unreturned: 0,
            ended: false,
        })
    }
}

/// The receiving side, as a `Stream` an actor (or an [`Inbox`]) consumes. Dropping it parks the
/// receiver back in the mailbox, so a restarted module keeps its queued messages.
#[derive(Debug)]
pub(crate) struct MailboxStream {
    mailbox: Arc<Mailbox>,
    /// Messages taken from the ring in one go and not handed out yet (still counted in the
    /// depth: their slots are given back one by one as they are handed out).
    batch: VecDeque<Message>,
    /// Messages handed out whose slot is not given back yet.
    unreturned: usize,
    ended: bool,
}

impl MailboxStream {
    /// Hands out the next message of the batch. Its slot goes back with a full chunk, or
    /// with the last message of the batch.
    #[inline]
    fn hand_out(&mut self) -> Option<Message> {
        let m = self.batch.pop_front()?;
        inc(&self.mailbox.stats.received);
        self.unreturned += 1;
        if self.unreturned >= self.mailbox.return_chunk || self.batch.is_empty() {
            self.give_back();
        } else {
            // Only this receiver writes it: a plain store, read by `depth`.
            self.mailbox
                .unreturned
                .store(self.unreturned, Ordering::Relaxed);
        }
        Some(m)
    }

    /// Gives the slots of the handed-out messages back to senders.
    fn give_back(&mut self) {
        if self.unreturned > 0 {
            self.mailbox.unreturned.store(0, Ordering::Relaxed);
            self.mailbox.room.add_permits(self.unreturned);
            self.unreturned = 0;
        }
    }

    /// Refills the batch from the ring. `Err(true)` when the mailbox is closed and empty.
    fn refill(&mut self, waker: Option<&Waker>) -> std::result::Result<(), bool> {
        let mut ring = self.mailbox.ring();
        if ring.queue.is_empty() {
            if ring.closed {
                return Err(true);
            }
            if let Some(waker) = waker
                && !ring.waker.as_ref().is_some_and(|w| w.will_wake(waker))
            {
                ring.waker = Some(waker.clone());
            }
            return Err(false);
        }
        // The batch is empty here: swap the buffers (both keep their allocation).
        std::mem::swap(&mut ring.queue, &mut self.batch);
        Ok(())
    }

    /// The next queued message without waiting.
    fn try_next(&mut self) -> Option<Message> {
        if self.batch.is_empty() {
            self.refill(None).ok()?;
        }
        self.hand_out()
    }
}

impl Stream for MailboxStream {
    type Item = Message;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        // Spend the task's budget like a tokio channel does, so a busy mailbox still lets the
        // actor's other futures (its stop signal, timers) run.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        if this.batch.is_empty() {
            match this.refill(Some(cx.waker())) {
                Ok(()) => {}
                Err(true) => {
                    this.ended = true;
                    this.mailbox.mark_drained();
                    return Poll::Ready(None);
                }
                Err(false) => return Poll::Pending,
            }
        }
        coop.made_progress();
        Poll::Ready(this.hand_out())
    }
}

impl Drop for MailboxStream {
    fn drop(&mut self) {
        self.give_back();
        let mut ring = self.mailbox.ring();
        ring.waker = None;
        ring.parked = true;
        if !self.batch.is_empty() {
            // What was taken but not handed out goes back in front, in order.
            let batch = std::mem::take(&mut self.batch);
            match ring.parked_batch.as_mut() {
                Some(parked) => {
                    for m in batch.into_iter().rev() {
                        parked.push_front(m);
                    }
                }
                None => ring.parked_batch = Some(batch),
            }
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
