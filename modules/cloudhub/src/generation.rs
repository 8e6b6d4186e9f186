//! Reads of the token generation shared by the bootstraps waiting for one.

use std::future::Future;
use std::time::Instant;

use tokio::sync::Mutex;

/// Reads of the token generation for the certificate server, one at a time, each answering
/// every request that was already waiting when it started.
///
/// Guarantee: a request's answer comes from a read that began after the request arrived, so an
/// invalidation stored before the request arrived is always seen, as with a read of its own
/// (and by every replica at once, which a cached or watched copy could not promise). A burst
/// of bootstraps then costs a read per read's duration rather than a read each.
#[derive(Debug, Default)]
pub(crate) struct GenerationReads {
    /// The last read: when it started and what it answered. Held while a read is under way,
    /// so requests queue here in arrival order (tokio's mutex is fair).
    last: Mutex<Option<(Instant, Result<String, String>)>>,
}

impl GenerationReads {
    /// The generation as read from the API server (`material::token_generation`); the error
    /// as text, shared by every request the failed read answered.
    pub(crate) async fn read(&self, client: &kube::Client) -> Result<String, String> {
        self.read_with(|| async {
            crate::material::token_generation(client)
                .await
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// [`Self::read`] with `fetch` as the read.
    async fn read_with<F, Fut>(&self, fetch: F) -> Result<String, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((started, answer)) = &*last
            && *started > arrived
        {
            return answer.clone();
        }
        let started = Instant::now();
        let answer = fetch().await;
        *last = Some((started, answer.clone()));
        answer
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A stored generation and the reads made of it; each read takes `took`.
    #[derive(Default)]
    struct Store {
        value: std::sync::Mutex<String>,
        reads: AtomicUsize,
    }

    impl Store {
        async fn read(&self, took: Duration) -> Result<String, String> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            // What the read returns is what was stored when it started.
            let value = self.value.lock().unwrap().clone();
            tokio::time::sleep(took).await;
            Ok(value)
        }
    }

    #[tokio::test]
    async fn a_burst_of_requests_shares_the_reads_that_started_after_they_arrived() {
        let (reads, store) = (
            Arc::new(GenerationReads::default()),
            Arc::new(Store::default()),
        );
        *store.value.lock().unwrap() = "g1".into();
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (reads, store) = (reads.clone(), store.clone());
                tokio::spawn(async move {
                    reads
                        .read_with(|| store.read(Duration::from_millis(20)))
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().as_deref(), Ok("g1"));
        }
        // The first request's read, then one read for all that arrived while it ran.
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_change_stored_before_a_request_arrives_is_always_seen() {
        let (reads, store) = (
            Arc::new(GenerationReads::default()),
            Arc::new(Store::default()),
        );
        *store.value.lock().unwrap() = "g1".into();
        // A slow read of g1 is under way when the generation changes and a request arrives.
        let first = {
            let (reads, store) = (reads.clone(), store.clone());
            tokio::spawn(async move {
                reads
                    .read_with(|| store.read(Duration::from_millis(200)))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        *store.value.lock().unwrap() = "g2".into();
        let later = reads
            .read_with(|| store.read(Duration::from_millis(1)))
            .await;
        assert_eq!(first.await.unwrap().as_deref(), Ok("g1"));
        assert_eq!(
            later.as_deref(),
            Ok("g2"),
            "the read under way began before it"
        );
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_read_answers_its_waiters_and_the_next_request_reads_again() {
        let reads = GenerationReads::default();
        let failed = reads
            .read_with(|| async { Err::<String, _>("unreachable".to_owned()) })
            .await;
        assert_eq!(failed, Err("unreachable".to_owned()));
        let next = reads.read_with(|| async { Ok("g1".to_owned()) }).await;
        assert_eq!(next.as_deref(), Ok("g1"));
    }
}
