//! What a stream's relay holds of its tunnel: the sending side of its stream, how it ended,
//! and the session's settings.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kubeedge_wire::tunnel::{Credit, OPENING_BYTES, StreamEnd, TunnelMessage};
use kubeedge_wire::ws::Outgoing;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::config::AgentOptions;
use super::stats::Stats;

/// What a relay needs from its session.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) options: AgentOptions,
    pub(crate) read: Duration,
    pub(crate) write: Duration,
    pub(crate) stats: Arc<Stats>,
    /// The session's writer and ping and every stream's relay.
    pub(crate) tasks: TaskTracker,
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The local side finished or failed: tell the cloud.
    Local,
    /// The cloud sent REMOVE_CONNECT: nothing to tell.
    CloudRemoved,
    /// The tunnel is gone: nobody to tell.
    TunnelGone,
}

/// The sending side of one stream.
#[derive(Debug, Clone)]
pub(crate) struct Up {
    pub(crate) id: u64,
    pub(crate) out: mpsc::Sender<Outgoing>,
    /// With flow control: bytes the cloud lets this stream send now.
    pub(crate) credit: Option<Credit>,
    /// With flow control of what the cloud sends: the window it keeps each stream within.
    pub(crate) input_window: Option<usize>,
}

impl Up {
    /// Sends DATA; `Err` when the tunnel or the stream is gone. With flow control, first
    /// waits until the cloud's client has taken enough of what was sent before, so a slow
    /// client holds back only this stream (its local connection is simply read later).
    pub(crate) async fn data(&self, data: Bytes) -> Result<(), End> {
        if let Some(credit) = &self.credit {
            // Closed when the cloud removed the stream or the tunnel ended.
            credit
                .take(data.len())
                .await
                .map_err(|_| End::CloudRemoved)?;
        }
        self.out
            .send(Outgoing::Tunnel(TunnelMessage::data(self.id, data)))
            .await
            .map_err(|_| End::TunnelGone)
    }

    /// Tells the cloud the local connection took `taken` more bytes of this stream, so it
    /// may send that many more; false when the tunnel queue had no room (keep the count).
    pub(crate) fn grant(&self, taken: usize) -> bool {
        self.out
            .try_send(Outgoing::Tunnel(TunnelMessage::window(
                self.id,
                taken as u64,
            )))
            .is_ok()
    }

    /// [`Up::grant`] that waits for room in the tunnel queue.
    pub(crate) async fn grant_wait(&self, taken: usize) -> Result<(), End> {
        self.out
            .send(Outgoing::Tunnel(TunnelMessage::window(
                self.id,
                taken as u64,
            )))
            .await
            .map_err(|_| End::TunnelGone)
    }
}

/// Maps a queue end to a relay end.
pub(crate) fn end_of(e: StreamEnd) -> End {
    match e {
        StreamEnd::Removed => End::CloudRemoved,
        // An overflow already sent REMOVE_CONNECT from the reader.
        StreamEnd::Overflow | StreamEnd::TunnelClosed(_) => End::TunnelGone,
    }
}

/// Counts a relay's first bytes toward the cloud ([`OPENING_BYTES`]). Until they are sent,
/// the relay lets the tunnel writer send each DATA before it reads on: otherwise a relay whose
/// local connection has more ready queues several reads' worth first, the writer sends them
/// as one batch, and the first byte waits for all of them at every hop.
#[derive(Debug)]
pub(crate) struct Opening {
    left: usize,
}

impl Opening {
    pub(crate) fn new() -> Self {
        Opening {
            left: OPENING_BYTES,
        }
    }

    /// After a DATA of `len` bytes was queued.
    pub(crate) async fn sent(&mut self, len: usize) {
        if self.left > 0 {
            self.left = self.left.saturating_sub(len);
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};

    use super::*;

    #[tokio::test]
    async fn a_relay_lets_the_writer_run_after_each_data_of_its_first_bytes_only() {
        let mut opening = Opening::new();
        let mut cx = Context::from_waker(Waker::noop());
        let half = OPENING_BYTES / 2;
        // (DATA length, whether the relay yields after it)
        for (len, yields) in [
            (half, true),
            (half - 1, true),
            (1, true),
            (1, false),
            (half, false),
        ] {
            let mut sent = std::pin::pin!(opening.sent(len));
            assert_eq!(
                sent.as_mut().poll(&mut cx).is_pending(),
                yields,
                "after {len} bytes"
            );
            if yields {
                assert!(sent.as_mut().poll(&mut cx).is_ready());
            }
        }
    }
}
