//! The streams open on one tunnel, as both ends keep them: per connect id, the inbound queue
//! the reader feeds without ever waiting, and the send credit a flow-controlled stream draws
//! on. Closing the table ends every stream and refuses new ones.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::Semaphore;

use super::queue::{PushError, QueueSender, StreamEnd};

/// The send credit of one stream: how many bytes the peer lets it send now, reopened by the
/// peer's `WINDOW` messages and never above the whole window.
#[derive(Debug, Clone)]
pub struct Credit {
    permits: Arc<Semaphore>,
    window: usize,
}

/// The stream ended while waiting for credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream ended")]
pub struct CreditClosed;

impl Credit {
    /// A full window of `window` bytes (at most `Semaphore::MAX_PERMITS`).
    pub fn new(window: usize) -> Self {
        let window = window.min(Semaphore::MAX_PERMITS);
        Credit {
            permits: Arc::new(Semaphore::new(window)),
            window,
        }
    }

    /// The whole window.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Waits until `n` bytes may be sent and takes them; a piece larger than the window
    /// needs the whole window, not more. Fails once the stream ended.
    pub async fn take(&self, n: usize) -> Result<(), CreditClosed> {
        let need = n.min(self.window).min(u32::MAX as usize) as u32;
        match self.permits.acquire_many(need).await {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(_) => Err(CreditClosed),
        }
    }

    /// Reopens the window by `bytes`, never above the whole window, whatever the peer says.
    pub fn grant(&self, bytes: u64) {
        let room = self.window.saturating_sub(self.permits.available_permits());
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.permits.add_permits(bytes.min(room));
    }

    /// Ends the credit: a sender waiting in [`Credit::take`] wakes up with an error.
    pub fn close(&self) {
        self.permits.close();
    }
}

/// A stream's first bytes: relays send each DATA among them on by itself (they let the other
/// tasks run after it) instead of batching it with what is read next, so the first bytes are
/// not held back behind a batch at every hop.
pub const OPENING_BYTES: usize = 64 * 1024;

/// What became of data pushed to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued {
        /// The data is part of the stream's first [`OPENING_BYTES`].
        opening: bool,
    },
    /// No stream has this id.
    Unknown,
    /// The stream's queue is over its budget (the stream is still registered).
    Overflow,
    /// The stream's reader is gone (the stream is still registered).
    Gone,
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    queue: QueueSender,
    credit: Option<Credit>,
    /// Bytes pushed to this stream so far (counted up to [`OPENING_BYTES`]).
    received: usize,
}

impl Entry {
    fn end(self, why: StreamEnd) {
        if let Some(c) = &self.credit {
            c.close();
        }
        self.queue.end(why);
    }
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<u64, Entry>,
    next_generation: u64,
    closed: bool,
}

/// The open streams of one tunnel, by connect id.
#[derive(Debug, Default)]
pub struct StreamTable {
    inner: Mutex<Inner>,
}

impl StreamTable {
    /// An empty, open table.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers stream `id` when `admit(open streams)` allows it and the table is open;
    /// returns the entry's generation (to unregister this entry and not a later one with the
    /// same id). A live entry with the same id yields to the new one: it ends as
    /// [`StreamEnd::Removed`]. `None` when the table is closed.
    pub fn insert<E>(
        &self,
        id: u64,
        queue: QueueSender,
        credit: Option<Credit>,
        admit: impl FnOnce(usize) -> Result<(), E>,
    ) -> Option<Result<u64, E>> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        if let Err(e) = admit(inner.map.len()) {
            return Some(Err(e));
        }
        let generation = inner.next_generation;
        inner.next_generation += 1;
        let old = inner.map.insert(
            id,
            Entry {
                generation,
                queue,
                credit,
                received: 0,
            },
        );
        drop(inner);
        if let Some(old) = old {
            old.end(StreamEnd::Removed);
        }
        Some(Ok(generation))
    }

    /// Queues `data` for stream `id` without waiting.
    pub fn push(&self, id: u64, data: Bytes) -> Pushed {
        let (queue, opening) = match self.lock().map.get_mut(&id) {
            Some(e) => {
                let opening = e.received < OPENING_BYTES;
                e.received = e.received.saturating_add(data.len()).min(OPENING_BYTES);
                (e.queue.clone(), opening)
            }
            None => return Pushed::Unknown,
        };
        match queue.push(data) {
            Ok(()) => Pushed::Queued { opening },
            Err(PushError::Overflow) => Pushed::Overflow,
            Err(PushError::Gone) => Pushed::Gone,
        }
    }

    /// Reopens stream `id`'s send window by `bytes`; nothing when it has no credit.
    pub fn grant(&self, id: u64, bytes: u64) {
        if let Some(credit) = self.lock().map.get(&id).and_then(|e| e.credit.as_ref()) {
            credit.grant(bytes);
        }
    }

    /// Unregisters stream `id` and ends it with `why`; false when it was not registered.
    pub fn end(&self, id: u64, why: StreamEnd) -> bool {
        let entry = self.lock().map.remove(&id);
        entry.map(|e| e.end(why)).is_some()
    }

    /// Unregisters stream `id` (only the entry of `generation`, when given) whose reader is
    /// done with it; its credit closes. False when no such entry was registered.
    pub fn unregister(&self, id: u64, generation: Option<u64>) -> bool {
        let mut inner = self.lock();
        let ours = inner
            .map
            .get(&id)
            .is_some_and(|e| generation.is_none_or(|g| e.generation == g));
        if !ours {
            return false;
        }
        if let Some(c) = inner.map.remove(&id).and_then(|e| e.credit) {
            c.close();
        }
        true
    }

    /// How many streams are open.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// True when no stream is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the table: every open stream ends with `why` and later inserts are refused.
    /// Returns how many streams were open; the first call only, later calls return 0.
    pub fn close(&self, why: &StreamEnd) -> usize {
        let entries: Vec<Entry> = {
            let mut inner = self.lock();
            inner.closed = true;
            inner.map.drain().map(|(_, e)| e).collect()
        };
        let n = entries.len();
        for e in entries {
            e.end(why.clone());
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::queue::{Inbound, stream_queue};
    use super::*;

    fn admit_all(_: usize) -> Result<(), ()> {
        Ok(())
    }

    #[tokio::test]
    async fn credit_should_stay_within_its_window() {
        let c = Credit::new(10);
        c.take(4).await.unwrap();
        // More than the window was granted back: only the window's room is added.
        c.grant(100);
        c.take(10).await.unwrap();
        // A piece larger than the window takes the whole window, and waits for it.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), c.take(20));
        assert!(waiting.await.is_err(), "no credit left");
        c.grant(10);
        c.take(20).await.unwrap();
        c.close();
        assert_eq!(c.take(1).await, Err(CreditClosed));
    }

    #[tokio::test]
    async fn table_should_route_data_end_streams_and_refuse_after_close() {
        let t = StreamTable::new();
        let (tx, mut rx) = stream_queue(8);
        let g = t.insert(1, tx, None, admit_all).unwrap().unwrap();
        assert_eq!(
            t.push(1, Bytes::from_static(b"abc")),
            Pushed::Queued { opening: true }
        );
        assert_eq!(
            t.push(1, Bytes::from_static(b"de")),
            Pushed::Queued { opening: true }
        );
        assert_eq!(t.push(2, Bytes::from_static(b"abc")), Pushed::Unknown);
        assert_eq!(t.push(1, Bytes::from(vec![0u8; 9])), Pushed::Overflow);
        assert!(matches!(rx.recv().await, Inbound::Data(d) if &d[..] == b"abc"));
        assert!(matches!(rx.recv().await, Inbound::Data(d) if &d[..] == b"de"));
        assert_eq!(rx.recv().await, Inbound::End(StreamEnd::Overflow));
        // A newer entry with the same id is not unregistered by the older generation.
        let (tx2, mut rx2) = stream_queue(8);
        let g2 = t.insert(1, tx2, None, admit_all).unwrap().unwrap();
        assert_ne!(g, g2);
        // The replaced entry ended as removed.
        assert_eq!(rx.recv().await, Inbound::End(StreamEnd::Removed));
        assert!(!t.unregister(1, Some(g)));
        assert_eq!(t.len(), 1);
        assert!(
            t.insert(2, stream_queue(8).0, None, |n| if n >= 1 {
                Err(n)
            } else {
                Ok(())
            })
            .unwrap()
            .is_err()
        );
        assert_eq!(t.close(&StreamEnd::Overflow), 1);
        assert_eq!(rx2.recv().await, Inbound::End(StreamEnd::Overflow));
        assert!(t.insert(3, stream_queue(8).0, None, admit_all).is_none());
    }

    #[tokio::test]
    async fn data_is_opening_until_the_stream_has_had_its_first_bytes() {
        let t = StreamTable::new();
        let (tx, _rx) = stream_queue(1 << 20);
        t.insert(1, tx, None, admit_all).unwrap().unwrap();
        let piece = || Bytes::from(vec![0u8; OPENING_BYTES / 2 - 1]);
        assert_eq!(t.push(1, piece()), Pushed::Queued { opening: true });
        assert_eq!(t.push(1, piece()), Pushed::Queued { opening: true });
        // Two bytes short of the opening bytes: this one still counts, what follows does not.
        assert_eq!(t.push(1, piece()), Pushed::Queued { opening: true });
        assert_eq!(t.push(1, piece()), Pushed::Queued { opening: false });
        // Another stream has its own opening.
        let (tx2, _rx2) = stream_queue(1 << 20);
        t.insert(2, tx2, None, admit_all).unwrap().unwrap();
        assert_eq!(t.push(2, piece()), Pushed::Queued { opening: true });
    }
}
