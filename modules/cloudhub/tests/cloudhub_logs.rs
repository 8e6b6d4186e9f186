//! What an edge can make the hub log. A test binary of its own: it installs the process-wide
//! log subscriber that captures the hub's lines (the hub logs from its worker threads).

#[path = "cloudhub/support/mod.rs"]
mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use beehive::{Content, Message};
use support::*;

/// Everything logged in this process, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    })
}

fn lines_with(text: &str) -> Vec<String> {
    let raw = captured().0.lock().unwrap().clone();
    String::from_utf8(raw)
        .expect("the log is valid UTF-8")
        .lines()
        .filter(|l| l.contains(text))
        .map(str::to_owned)
        .collect()
}

#[actix_rt::test]
async fn edge_errors_are_logged_as_bounded_excerpts_at_most_once_per_period() {
    captured();
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-log").await;
    // 200 KB of two-byte characters, a long resource; then a burst of further reports.
    let huge = "é".repeat(100_000);
    let first = Message::new()
        .with_route(
            "edged",
            "meta",
            format!("default/pod/{}", "ü".repeat(5_000)),
            "error",
        )
        .with_content(Content::string(&huge));
    e.send(&first).await;
    for _ in 0..50 {
        e.send(&Message::new().with_route("edged", "meta", "default/pod/x", "error"))
            .await;
    }
    // The reader handles frames in order: once this reaches the controller, all were handled.
    let marker = Message::new().with_route("edged", "meta", "default/pod/marker", "update");
    e.send(&marker).await;
    loop {
        if h.next_controller_msg().await.header.id == marker.header.id {
            break;
        }
    }
    let lines = lines_with("edge reported an error");
    assert_eq!(lines.len(), 1, "one line per period: {lines:?}");
    let line = &lines[0];
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("edge-log") && line.contains(&first.header.id.to_string()),
        "{line}"
    );
    assert!(line.contains("éééé") && line.contains("üüüü"), "{line}");
    assert!(
        line.contains("content_bytes=200002"),
        "the size is logged: {line}"
    );
    assert!(
        line.len() < 1_500,
        "a bounded excerpt, not the content: {} bytes",
        line.len()
    );
    // The connection is unaffected.
    e.keepalive().await;
    assert_eq!(h.hub.nodes(), ["edge-log"]);
}
