//! Rule status counters: deliveries tallied per rule and sent to edgecontroller at most once a
//! second per rule, so a busy rule costs one status write a second, not one per message.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use beehive::Endpoint;
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::EDGECONTROLLER;
use tracing::debug;

use crate::route::RuleKey;
use crate::wire;

/// How often tallies are sent.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Tally {
    ok: u32,
    failed: u32,
    last_error: String,
}

/// Deliveries per rule since the last flush.
#[derive(Debug, Default)]
pub(crate) struct StatusBook {
    tallies: Mutex<HashMap<RuleKey, Tally>>,
}

impl StatusBook {
    /// One delivery the caller saw succeed (a 2xx, or an edge message posted with a 2xx).
    pub(crate) fn success(&self, rule: &RuleKey) {
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let tally = t.entry(rule.clone()).or_default();
        tally.ok = tally.ok.saturating_add(1);
    }

    /// One delivery that failed, with what the caller saw (`504 Gateway Timeout: …`).
    pub(crate) fn failure(&self, rule: &RuleKey, detail: impl Into<String>) {
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let tally = t.entry(rule.clone()).or_default();
        tally.failed = tally.failed.saturating_add(1);
        tally.last_error = detail.into();
    }

    /// The status messages for everything tallied, emptying the book.
    fn take(&self) -> Vec<beehive::Message> {
        let taken = std::mem::take(&mut *self.tallies.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out = Vec::new();
        for (rule, tally) in taken {
            if tally.ok > 0 {
                out.push(wire::rule_status(&rule, None, tally.ok));
            }
            if tally.failed > 0 {
                out.push(wire::rule_status(
                    &rule,
                    Some(&tally.last_error),
                    tally.failed,
                ));
            }
        }
        out
    }

    /// Sends the tallies every [`FLUSH_EVERY`] until `stop`, then once more.
    pub(crate) async fn run(&self, endpoint: Endpoint, stop: CancellationToken) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                () = stop.cancelled() => true,
            };
            for msg in self.take() {
                // Without an edgecontroller (or while it stops) the counts are lost, as
                // KubeEdge's are when its channel is full.
                if let Err(e) = endpoint.try_send(EDGECONTROLLER, msg) {
                    debug!(error = %e, "rule status not sent");
                }
            }
            if last {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_coalesce_per_rule_and_outcome() {
        let book = StatusBook::default();
        let r = RuleKey {
            namespace: "ns".into(),
            name: "r".into(),
        };
        for _ in 0..3 {
            book.success(&r);
        }
        book.failure(&r, "first");
        book.failure(&r, "504 Gateway Timeout");
        let msgs = book.take();
        assert_eq!(msgs.len(), 2);
        let contents: Vec<serde_json::Value> =
            msgs.iter().map(|m| m.content.parse().unwrap()).collect();
        assert!(
            contents
                .iter()
                .any(|c| c["Status"] == "SUCCESS" && c["Count"] == 3)
        );
        assert!(contents.iter().any(|c| c["Status"] == "FAIL"
            && c["Count"] == 2
            && c["Error"]["Detail"] == "504 Gateway Timeout"));
        assert!(book.take().is_empty());
    }
}
