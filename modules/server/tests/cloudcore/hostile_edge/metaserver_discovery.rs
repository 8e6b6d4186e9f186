//! Discovery through the metaServer is shared among nodes: however many edges ask for
//! `/openapi/v2` (megabytes), cloudcore fetches it from the API server once per
//! `passThroughCacheSeconds` and relays those bytes, so edges with certificates cannot make it
//! pull the document at their request rate. What the policy refuses stays refused and costs
//! no API request.
//!
//! Fetches are counted in the test API server's audit log (kube-apiserver's request metrics do
//! not count `/openapi/v2`). No other test asks for `/openapi/v2`, and the two configurations'
//! copies of this test take turns, so the count moves only for the test counting it.

use std::time::Instant;

use base64::Engine;

use super::metaserver::{Answer, application};
use super::*;

/// The shared cloudcore's `passThroughCacheSeconds`.
pub(super) const PASS_THROUGH_SECONDS: u64 = 8;

/// Requests for exactly `uri` (path and query) the API server has answered.
fn fetched(uri: &str) -> usize {
    let log = k8s_testenv::env().audit_log();
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("the API server's audit log {}: {e}", log.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["requestURI"] == uri)
        // cloudcore's own requests: other tests' clients (kubectl, admin) may fetch it too.
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("cloudcore@"))
        })
        .count()
}

/// Requests answered for `uri` by the API server, once the count has settled at `at_least`
/// or more (an event is written as its answer completes).
async fn fetched_settled(uri: &str, at_least: usize) -> usize {
    eventually(WAIT, "the audit log counts the fetch", || async {
        (fetched(uri) >= at_least).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    fetched(uri)
}

/// `/openapi/v2` as the API server answers admin, as JSON (as cloudcore asks for it).
async fn openapi(client: &kube::Client) -> Vec<u8> {
    let request = http::Request::get("/openapi/v2")
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .expect("a request");
    client
        .request_text(request)
        .await
        .expect("admin reads /openapi/v2")
        .into_bytes()
}

/// The raw `RespBody` bytes of an approved answer.
fn raw(answer: &Answer) -> Vec<u8> {
    assert_eq!(
        answer.status(),
        "Approved",
        "expected Approved: {}",
        answer.app["Error"]
    );
    base64::engine::general_purpose::STANDARD
        .decode(answer.app["RespBody"].as_str().expect("a RespBody"))
        .expect("RespBody is base64")
}

async fn ask(edge: &Edge) -> Answer {
    edge.apply(application("get", "/openapi/v2", None, None))
        .await
}

async fn hits() -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value("dynamiccontroller_passthrough_cache_hits_total", &[])
        .unwrap_or(0.0)
}

#[tokio::test]
async fn openapi_asked_by_many_nodes_is_fetched_once_per_period() {
    test_tiers::require!(ApiServer);
    let (a, b) = tokio::join!(Scenario::new("disc-a"), Scenario::new("disc-b"));
    let _turn = crate::support::AUDIT_TURN.lock().await;
    let doc_before = openapi(&a.client).await;
    assert!(doc_before.len() > 1 << 20, "{} bytes", doc_before.len());
    let start = fetched_settled("/openapi/v2", 0).await;
    let hits_before = hits().await;

    // Ten at once from two nodes, then one more from each: one fetch serves them all.
    let asked = Instant::now();
    let at_once =
        futures::future::join_all((0..10).map(|i| ask(if i % 2 == 0 { &a.edge } else { &b.edge })))
            .await;
    let mut bodies: Vec<Vec<u8>> = at_once.iter().map(raw).collect();
    bodies.push(raw(&ask(&a.edge).await));
    bodies.push(raw(&ask(&b.edge).await));
    let served = Instant::now();
    // One fetch per period: the twelve fit in one period unless the machine is so loaded that
    // relaying them (2 MiB each) outlasts it, and then each later period may fetch once more.
    let periods = 1 + (served - asked).as_secs() / PASS_THROUGH_SECONDS;
    let fetches = fetched_settled("/openapi/v2", start + 1).await - start;
    assert!(
        (1..=periods as usize).contains(&fetches),
        "12 requests from two nodes in {:?} ({periods} period(s) of {PASS_THROUGH_SECONDS} s) made {fetches} fetches",
        served - asked
    );
    let doc_after = openapi(&a.client).await;
    // The document changes only when a CRD comes or goes (other tests may add one meanwhile).
    assert!(
        bodies[0] == doc_before || bodies[0] == doc_after,
        "the answer is the API server's document ({} bytes, expected {} or {})",
        bodies[0].len(),
        doc_before.len(),
        doc_after.len()
    );
    assert!(
        bodies.iter().all(|b| *b == bodies[0]),
        "every node got the same bytes"
    );
    // Every request a fetch did not answer was a hit.
    let want_hits = 12usize.saturating_sub(fetches) as f64;
    assert!(
        hits().await - hits_before >= want_hits,
        "{want_hits} requests counted as hits"
    );

    // Once the period is over, the next request fetches again.
    tokio::time::sleep_until((served + Duration::from_secs(PASS_THROUGH_SECONDS + 1)).into()).await;
    let start = fetched_settled("/openapi/v2", 0).await;
    let again = raw(&ask(&b.edge).await);
    assert!(again.len() > 1 << 20);
    assert_eq!(fetched_settled("/openapi/v2", start + 1).await, start + 1);
}

#[tokio::test]
async fn refused_discovery_paths_stay_refused_and_fetch_nothing() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("disc-refused").await;
    for path in [
        "/openapi/v3/apis/apps/v1",
        "/openapi/v2?timeout=1s",
        "/apis/../openapi/v2",
        "/openapi/v2/..",
        "/metrics",
    ] {
        let answer = s.edge.apply(application("get", path, None, None)).await;
        assert_eq!(answer.status(), "Rejected", "{path}: {}", answer.app);
        assert!(
            matches!(answer.code(), 400 | 403 | 404),
            "{path}: {}",
            answer.app
        );
        assert_eq!(fetched(path), 0, "{path} reached the API server");
    }
}
