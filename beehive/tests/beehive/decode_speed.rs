//! Decode speed of [`Message::from_json`], run by hand:
//! `cargo test -p beehive --release --test beehive decode_speed:: -- --ignored --nocapture`.

use std::time::Instant;

use beehive::{Content, Message};

/// A message whose content holds `content_bytes` of items: number-heavy (`numbers`) or
/// string-heavy like Kubernetes objects.
fn sample(content_bytes: usize, numbers: bool) -> Vec<u8> {
    let items: Vec<serde_json::Value> = if numbers {
        (0..content_bytes / 40)
            .map(|i| serde_json::json!({"name": format!("item-{i}"), "value": i, "ratio": 0.5}))
            .collect()
    } else {
        (0..content_bytes / 120)
            .map(|i| {
                serde_json::json!({
                    "name": format!("container-{i}"),
                    "image": "registry.example.com/team/app:v1.2.3",
                    "uid": "4f3c2b1a-0e9d-4c8b-a7f6-5e4d3c2b1a09",
                })
            })
            .collect()
    };
    Message::new()
        .with_route(
            "edgecontroller",
            "resource",
            "node/n1/default/pod/p",
            "update",
        )
        .with_resource_version("90211")
        .with_content(
            Content::json(&serde_json::json!({"metadata": {"name": "p"}, "items": items})).unwrap(),
        )
        .to_json()
}

#[test]
#[ignore = "a measurement, run by hand in release mode"]
#[allow(clippy::print_stdout)]
fn decode_speed() {
    for (size, numbers) in [
        (100, false),
        (2_000, false),
        (50_000, false),
        (50_000, true),
    ] {
        let json = sample(size, numbers);
        let rounds = (100_000_000 / json.len()).max(2000);
        let time = |f: &dyn Fn()| {
            for _ in 0..rounds / 10 {
                f();
            }
            let start = Instant::now();
            for _ in 0..rounds {
                f();
            }
            start.elapsed().as_nanos() as f64 / rounds as f64
        };
        let ours = time(&|| {
            std::hint::black_box(Message::from_json(std::hint::black_box(&json)).unwrap());
        });
        // A yardstick in the same run: serde_json's own parse into a `Value` tree.
        let value = time(&|| {
            std::hint::black_box(
                serde_json::from_slice::<serde_json::Value>(std::hint::black_box(&json)).unwrap(),
            );
        });
        println!(
            "decode shape={} bytes={} rounds={rounds} ns_per_msg={ours:.0} MB_per_s={:.0} vs_value_parse={:.2}",
            if numbers { "numbers" } else { "strings" },
            json.len(),
            json.len() as f64 / ours * 1e3,
            ours / value
        );
    }
}
