//! The server over a real Unix socket, on a real bus, with an inbox standing in for cloudhub
//! (the tests answer as the edge would, through `send_resp`, as cloudhub does with an edge's
//! volume answer). The same path through the real cloudhub, the real WebSocket and an edge is
//! in `modules/server/tests/cloudcore/hostile_edge/udsserver.rs` and, with a real edgecore,
//! `modules/server/tests/edgecore/udsserver.rs`.

use std::path::PathBuf;
use std::time::Duration;

use beehive::{Bus, Content, Message};
use kubeedge_api::testing::FakeEdge;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use udsserver::{Outcome, UdsServer, request};

const WAIT: Duration = Duration::from_secs(10);

struct World {
    bus: Bus,
    hub: FakeEdge,
    path: PathBuf,
    metrics: udsserver::UdsMetrics,
    _dir: Dir,
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl World {
    fn new(timeout: Duration) -> World {
        let dir = std::env::temp_dir().join(format!("uds-{}", &beehive::new_id()[..8]));
        // A folder that does not exist yet: the server creates it.
        let path = dir.join("sub/kubeedge.sock");
        let bus = Bus::new();
        let hub = FakeEdge::register(&bus, "cloudhub");
        let server = UdsServer::bind(
            &format!("unix://{}", path.display()),
            bus.endpoint("udsserver"),
        )
        .unwrap()
        .with_answer_timeout(timeout);
        let metrics = server.metrics();
        bus.register(server).unwrap();
        bus.start().unwrap();
        World {
            bus,
            hub,
            path,
            metrics,
            _dir: Dir(dir),
        }
    }

    /// Writes `bytes` (keeping the write side open, as the CSI driver does) and reads the
    /// answer until the server closes.
    async fn ask_raw(&self, bytes: &[u8]) -> Vec<u8> {
        let mut sock = UnixStream::connect(&self.path).await.expect("connect");
        sock.write_all(bytes).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(WAIT, sock.read_to_end(&mut out))
            .await
            .expect("an answer in time")
            .unwrap();
        out
    }

    async fn ask(&self, msg: &Message) -> Message {
        Message::from_json(&self.ask_raw(&msg.to_json()).await).expect("a message")
    }

    /// Answers the request cloudhub got for `resource` as its edge would.
    async fn answer_as_edge(&self, resource: &str, content: Content) -> Message {
        let req = self
            .hub
            .wait_for(WAIT, |m| m.route.resource == resource)
            .await
            .expect("the request at cloudhub");
        let mut answer = req.response(content);
        answer.route.resource = kubeedge_api::trim_node(&req.route.resource).into();
        self.bus.endpoint("cloudhub").send_resp(answer);
        req
    }
}

fn volume(op: &str, node: &str, id: &str, csi: serde_json::Value) -> Message {
    Message::new()
        .with_route(
            "cloudhub",
            "resource",
            format!("node/{node}/default/volume/{id}"),
            op,
        )
        .with_content(request::csi_content(&csi))
}

#[actix_rt::test]
async fn each_volume_operation_goes_to_its_node_and_the_answer_comes_back_on_the_connection() {
    let w = World::new(WAIT);
    let mode = std::fs::metadata(&w.path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        mode.permissions().mode() & 0o777,
        0o600,
        "only the owner connects"
    );
    for (i, op) in [
        "createvolume",
        "deletevolume",
        "controllerpublishvolume",
        "controllerunpublishvolume",
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("vol-{i}");
        let msg = volume(op, "e1", &id, serde_json::json!({"volumeId": id}));
        let asked = {
            let msg = msg.clone();
            let w = &w;
            async move { w.ask(&msg).await }
        };
        let resource = format!("node/e1/default/volume/{id}");
        let answered = w.answer_as_edge(
            &resource,
            Content::json(&serde_json::json!({"volume": {"volume_id": id}})).unwrap(),
        );
        let (answer, req) = tokio::join!(asked, answered);
        assert_eq!(req.route.operation, op);
        assert_eq!(
            req.content, msg.content,
            "the CSI request reaches the edge unchanged"
        );
        assert_ne!(
            req.header.id, msg.header.id,
            "the edge gets an id of its own"
        );
        assert_eq!(
            answer.header.parent_id, msg.header.id,
            "answered under the client's id"
        );
        assert_eq!(answer.route.operation, "response");
        let content: serde_json::Value = answer.content.parse().unwrap();
        assert_eq!(
            content["volume"]["volume_id"], id,
            "an object answer passes unchanged"
        );
    }
    assert_eq!(w.metrics.requests(Outcome::Answered), 4);
}

#[actix_rt::test]
async fn a_request_of_20_kib_is_read_whole() {
    let w = World::new(WAIT);
    let big = "p".repeat(20 * 1024);
    let msg = volume(
        "createvolume",
        "e1",
        "big",
        serde_json::json!({"name": big}),
    );
    assert!(msg.to_json().len() > 20 * 1024);
    let asked = w.ask(&msg);
    let answered = w.answer_as_edge(
        "node/e1/default/volume/big",
        Content::json(&serde_json::json!({"volume": {}})).unwrap(),
    );
    let (answer, req) = tokio::join!(asked, answered);
    assert_eq!(req.content, msg.content);
    assert_eq!(answer.route.operation, "response");
}

#[actix_rt::test]
async fn no_answer_or_a_null_answer_is_an_error_message_with_the_request_as_parent() {
    let w = World::new(Duration::from_millis(500));
    let msg = volume("createvolume", "e1", "slow", serde_json::json!({}));
    let answer = w.ask(&msg).await;
    assert_eq!(answer.route.operation, "error");
    assert_eq!(answer.header.parent_id, msg.header.id);
    assert_eq!(answer.route.resource, msg.route.resource);
    assert_eq!(answer.route.source, "cloudhub");
    assert!(
        answer
            .content
            .as_string()
            .unwrap_or_default()
            .contains("timed out")
            || answer
                .content
                .as_string()
                .unwrap_or_default()
                .contains("timeout"),
        "{}",
        answer.content.as_json()
    );
    let w = World::new(WAIT);
    let msg = volume("deletevolume", "e1", "failed", serde_json::json!({}));
    let asked = w.ask(&msg);
    let answered = w.answer_as_edge("node/e1/default/volume/failed", Content::null());
    let (answer, _) = tokio::join!(asked, answered);
    assert_eq!(answer.route.operation, "error");
    assert!(
        answer
            .content
            .as_string()
            .unwrap_or_default()
            .contains("without a result")
    );
    assert_eq!(w.metrics.requests(Outcome::EdgeFailed), 1);
}

#[actix_rt::test]
async fn garbage_and_other_messages_are_refused_with_an_error_and_the_server_keeps_serving() {
    let w = World::new(WAIT);
    for bytes in [
        b"garbage".to_vec(),
        b"{\"header\": 7}".to_vec(),
        volume("insert", "e1", "v", serde_json::json!({})).to_json(),
        Message::new()
            .with_route(
                "cloudhub",
                "resource",
                "node/e1/default/pod/p",
                "createvolume",
            )
            .to_json(),
    ] {
        let answer = Message::from_json(&w.ask_raw(&bytes).await).expect("an error message");
        assert_eq!(
            answer.route.operation,
            "error",
            "{}",
            String::from_utf8_lossy(&bytes)
        );
    }
    // A client that closes without sending anything, and one that sends too much.
    let mut sock = UnixStream::connect(&w.path).await.unwrap();
    sock.shutdown().await.unwrap();
    let mut out = Vec::new();
    sock.read_to_end(&mut out).await.unwrap();
    assert_eq!(
        Message::from_json(&out)
            .unwrap()
            .content
            .as_string()
            .as_deref(),
        Some("failed with error: context is empty")
    );
    let flood = format!(
        "{{\"content\":\"{}",
        "x".repeat(request::MAX_REQUEST_BYTES + 1)
    );
    let answer = Message::from_json(&w.ask_raw(flood.as_bytes()).await).unwrap();
    assert!(answer.content.as_string().unwrap().contains("larger than"));
    assert!(
        w.hub.messages().is_empty(),
        "nothing refused reached cloudhub"
    );
    assert_eq!(w.metrics.requests(Outcome::Refused), 6);
    // Still serving.
    let msg = volume("createvolume", "e1", "after", serde_json::json!({}));
    let asked = w.ask(&msg);
    let answered = w.answer_as_edge(
        "node/e1/default/volume/after",
        Content::json(&serde_json::json!({"volume": {}})).unwrap(),
    );
    assert_eq!(tokio::join!(asked, answered).0.route.operation, "response");
}
