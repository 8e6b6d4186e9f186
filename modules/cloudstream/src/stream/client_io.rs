//! Writing toward the API server's connection: every write within the write deadline, and
//! what a handled request leaves the connection fit for.

use std::io::IoSlice;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tracing::debug;

use crate::tunnel::Shared;

/// What a handled request leaves the connection fit for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The response is complete; another request may follow.
    KeepAlive,
    /// Close the connection.
    Close,
}

/// Writes and flushes `bytes`; false when that failed or took longer than `write_timeout`
/// (a client that does not read is dropped, counted).
pub(crate) async fn write_within<S: AsyncWrite + Unpin>(
    conn: &mut S,
    bytes: &[u8],
    shared: &Shared,
) -> bool {
    write_all_within(conn, &mut [IoSlice::new(bytes)], shared).await
}

/// [`write_within`] for several buffers at once, written as vectored writes (a TLS stream
/// packs them into records without gathering them first); they are consumed.
pub(crate) async fn write_all_within<S: AsyncWrite + Unpin>(
    conn: &mut S,
    mut bufs: &mut [IoSlice<'_>],
    shared: &Shared,
) -> bool {
    let write = async {
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            let n = conn.write_vectored(bufs).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut bufs, n);
        }
        conn.flush().await
    };
    match tokio::time::timeout(shared.tuning.write_timeout, write).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            shared.metrics.api_write_timeout();
            debug!("write toward the API client timed out; dropping it");
            false
        }
    }
}
