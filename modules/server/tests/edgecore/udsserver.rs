//! The CSI driver's Unix socket with an unmodified edgecore: a `createvolume` written on the
//! socket reaches the real edge's metamanager through our cloudhub, and the edge's answer comes
//! back on the connection. With edged off (as in every scenario here: a real edged needs a
//! container runtime and a vendor CSI driver) edgecore's metamanager cannot get a result from
//! edged and answers `null`, which the socket turns into an error message at once, not after
//! the 60 s KubeEdge's CSI driver would wait. The successful answers are exercised with a Rust
//! edge through the real WebSocket in the `cloudcore` test binary (`hostile_edge/udsserver.rs`).
//!
//! Run: `cargo test -p cloudcore-server --test edgecore udsserver`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use beehive::{Content, Message};
use edgecore_interop::Interop;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_volume_request_on_the_socket_reaches_the_real_edge_and_its_answer_comes_back()
-> Result<()> {
    let dir = std::env::temp_dir().join(format!("uds-interop-{}", std::process::id()));
    let socket = dir.join("kubeedge.sock");
    let node = "uds-edge";
    let it = Interop::builder(node)
        .service_account()
        .cloud_config(json!({"modules": {"cloudHub": {"unixsocket": {
            "enable": true, "address": format!("unix://{}", socket.display())}}}}))
        .start()
        .await?;
    let msg = Message::new()
        .with_route(
            "cloudhub",
            "resource",
            format!("node/{node}/default/volume/pvc-1"),
            "createvolume",
        )
        .with_content(Content::string(
            json!({"name": "pvc-1", "capacityRange": {"requiredBytes": "1073741824"}}).to_string(),
        ));
    let started = Instant::now();
    let mut sock = tokio::net::UnixStream::connect(&socket)
        .await
        .context("connect to the socket")?;
    sock.write_all(&msg.to_json()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(90), sock.read_to_end(&mut out))
        .await
        .context("an answer on the socket")??;
    let answer = Message::from_json(&out).context("the answer is a message")?;
    let took = started.elapsed();
    ensure!(
        answer.header.parent_id == msg.header.id,
        "answered under the request's id: {answer}"
    );
    ensure!(
        answer.route.operation == "error",
        "edged is off, so the edge has no result: {answer}"
    );
    let text = answer.content.as_string().unwrap_or_default();
    ensure!(
        text.contains("without a result"),
        "the edge's own (null) answer: {text}"
    );
    ensure!(
        took < Duration::from_secs(30),
        "answered by the edge, not timed out: {took:?}"
    );
    // The edge logged the request it processed.
    let log = std::fs::read_to_string(it.home().log_file())?;
    ensure!(
        log.contains("process volume"),
        "edgecore's metamanager handled the volume request"
    );
    let _ = std::fs::remove_dir_all(&dir);
    it.finish();
    Ok(())
}
