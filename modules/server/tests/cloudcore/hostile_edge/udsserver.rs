//! The CSI driver's path (`modules.cloudHub.unixsocket` on): a client writes a volume request
//! on the real Unix socket of the cloudcore binary, the edge (this suite's Rust edge, through
//! the real WebSocket: edgecore's edged needs a container runtime and a CSI driver to answer)
//! gets it and answers, and the client reads the answer on its connection. Only the node asked
//! can answer; an edge that fails (`null`) gives the client an error.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The socket of the suite's cloudcore.
fn socket() -> std::path::PathBuf {
    let address = cloud().spec().extra["modules"]["cloudHub"]["unixsocket"]["address"]
        .as_str()
        .expect("the suite's cloudcore serves the socket")
        .to_owned();
    std::path::PathBuf::from(address.trim_start_matches("unix://"))
}

/// Sends `msg` on the socket as KubeEdge's CSI driver does (its side stays open) and returns
/// the answer the server writes before closing.
async fn ask(msg: Message) -> Message {
    let mut sock = tokio::net::UnixStream::connect(socket())
        .await
        .expect("connect to the socket");
    sock.write_all(&msg.to_json()).await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(WAIT * 2, sock.read_to_end(&mut out))
        .await
        .expect("an answer in time")
        .expect("read");
    Message::from_json(&out).expect("the answer is a message")
}

fn volume(op: &str, node: &str, id: &str) -> Message {
    Message::new()
        .with_route(
            "cloudhub",
            "resource",
            format!("node/{node}/default/volume/{id}"),
            op,
        )
        .with_content(Content::string(
            json!({"name": format!("pvc-{id}"), "capacityRange": {"requiredBytes": "1073741824"}})
                .to_string(),
        ))
}

impl Scenario {
    /// Waits for the volume request for `id` at this edge and answers it with `content`.
    async fn answer_volume(&self, id: &str, content: Content) -> Message {
        let resource = format!("default/volume/{id}");
        let req = self
            .edge
            .pushed_where(&format!("volume request {id}"), |m| {
                m.route.resource == resource
            })
            .await;
        let answer = req.response(content);
        self.edge
            .client
            .send(answer)
            .await
            .expect("queue the answer");
        req
    }
}

#[tokio::test]
async fn the_four_volume_operations_reach_the_edge_and_its_answers_come_back_on_the_socket() {
    let s = Scenario::new("uds").await;
    for op in [
        "createvolume",
        "deletevolume",
        "controllerpublishvolume",
        "controllerunpublishvolume",
    ] {
        let id = unique("vol");
        let msg = volume(op, &s.node, &id);
        let asked = tokio::spawn(ask(msg.clone()));
        let req = s
            .answer_volume(&id, json_content(&json!({"volume": {"volume_id": id}})))
            .await;
        assert_eq!(req.route.operation, op);
        assert_eq!(
            req.content, msg.content,
            "the CSI request reaches the edge unchanged"
        );
        let answer = asked.await.unwrap();
        assert_eq!(answer.header.parent_id, msg.header.id, "{op}");
        assert_eq!(answer.route.operation, "response", "{op}");
        let content: Value = answer.content.parse().unwrap();
        assert_eq!(content["volume"]["volume_id"], id, "{op}");
    }
    // An edge whose edged failed answers `null`: the client gets an error message.
    let id = unique("vol");
    let msg = volume("createvolume", &s.node, &id);
    let asked = tokio::spawn(ask(msg.clone()));
    s.answer_volume(&id, Content::null()).await;
    let answer = asked.await.unwrap();
    assert_eq!(
        (
            answer.route.operation.as_str(),
            answer.header.parent_id.clone()
        ),
        ("error", msg.header.id.clone())
    );
}

#[tokio::test]
async fn an_edge_cannot_answer_a_volume_request_sent_to_another_node() {
    let victim = Scenario::new("uds-victim").await;
    let attacker = Scenario::new("uds-attacker").await;
    let id = unique("vol");
    let msg = volume("createvolume", &victim.node, &id);
    let asked = tokio::spawn(ask(msg.clone()));
    let resource = format!("default/volume/{id}");
    let req = victim
        .edge
        .pushed_where("the volume request", |m| m.route.resource == resource)
        .await;
    // The attacker answers under the id the client chose (which a client may make
    // predictable): the edge was sent another id, so this answers nothing.
    let forged = Message::with_parent(msg.header.id.clone())
        .with_route("edged", "resource", resource.clone(), "response")
        .with_content(json_content(&json!({"volume": {"volume_id": "forged"}})));
    attacker.edge.client.send(forged).await.expect("queue");
    // Nor does the attacker's own node name the victim's request.
    assert!(
        attacker
            .edge
            .pushed
            .lock()
            .unwrap()
            .iter()
            .all(|m| m.route.resource != resource),
        "the request went to the victim only"
    );
    let answer = req.response(json_content(&json!({"volume": {"volume_id": "genuine"}})));
    victim.edge.client.send(answer).await.expect("queue");
    let got = asked.await.unwrap();
    let content: Value = got.content.parse().unwrap();
    assert_eq!(content["volume"]["volume_id"], "genuine");
}

#[tokio::test]
async fn only_volume_operations_pass_the_socket() {
    let s = Scenario::new("uds-other").await;
    // A pod for the node, sent as a volume request would be: refused at the socket.
    let msg = Message::new()
        .with_route(
            "cloudhub",
            "resource",
            format!("node/{}/{}/pod/p", s.node, s.ns),
            "insert",
        )
        .with_content(json_content(&json!({"metadata": {"name": "p"}})));
    let answer = ask(msg.clone()).await;
    assert_eq!(answer.route.operation, "error");
    assert_eq!(answer.header.parent_id, msg.header.id);
    // Garbage: an error message, and the server keeps serving.
    let mut sock = tokio::net::UnixStream::connect(socket()).await.unwrap();
    sock.write_all(b"not a message").await.unwrap();
    sock.shutdown().await.unwrap();
    let mut out = Vec::new();
    sock.read_to_end(&mut out).await.unwrap();
    assert_eq!(Message::from_json(&out).unwrap().route.operation, "error");
    let id = unique("vol");
    let asked = tokio::spawn(ask(volume("deletevolume", &s.node, &id)));
    s.answer_volume(&id, json_content(&json!({}))).await;
    assert_eq!(asked.await.unwrap().route.operation, "response");
    assert!(
        s.edge
            .pushed
            .lock()
            .unwrap()
            .iter()
            .all(|m| !m.route.resource.ends_with("/pod/p")),
        "the pod never reached the edge"
    );
}
