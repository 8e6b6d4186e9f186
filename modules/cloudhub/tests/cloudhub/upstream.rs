//! Upstream routing through real sockets and the wire vectors.

use std::time::Duration;

use crate::support::*;
use beehive::{Content, Message};
use futures::SinkExt;
use tokio_tungstenite::tungstenite::Message as Frame;

#[actix_rt::test]
async fn the_keepalive_vector_is_accepted_and_forwarded_nowhere() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    assert_eq!(h.next_event().await.route.operation, "connected");
    // dynamiccontroller and the router hear of connections too (one resumes the node's watches,
    // the other sends it its rules' subscriptions again).
    for inbox in [&mut h.dynamic, &mut h.router] {
        let event = recv(inbox).await;
        assert_eq!(
            (event.route.source.as_str(), event.route.operation.as_str()),
            ("cloudhub", "connected")
        );
        // The hub's own event, from its own endpoint: what modules trust as the hub's.
        assert!(event.is_sent_by("cloudhub"), "{:?}", event.sender());
    }
    // The exact 196 bytes of a real edge keepalive.
    let wire = "{\"header\":{\"msg_id\":\"5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b01\",\"timestamp\":1700000000000},\"route\":{\"source\":\"websocket\",\"group\":\"resource\",\"operation\":\"keepalive\",\"resource\":\"node\"},\"content\":\"ping\"}\n";
    e.ws.send(Frame::Text(wire.into())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.controllers.try_recv().is_none());
    assert!(
        h.devices.try_recv().is_none()
            && h.router.try_recv().is_none()
            && h.dynamic.try_recv().is_none()
    );
    assert_eq!(h.hub.node_stats("edge-1").unwrap().received, 1);
}

#[actix_rt::test]
async fn upstream_update_reaches_edgecontroller_with_the_node_prefix_only() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    let content = r#"{"status":{"phase":"Running","n":9007199254740993}}"#;
    let msg = Message::new()
        .with_route("edged", "meta", "default/podstatus/nginx", "update")
        .with_content(Content::from_json_text(content.into()).unwrap());
    e.send(&msg).await;
    let got = h.next_controller_msg().await;
    assert_eq!(got.route.resource, "node/edge-1/default/podstatus/nginx");
    assert_eq!(got.header, msg.header);
    // What an edge sent is on the bus as the edge relay's, never as the hub's own.
    assert!(got.is_sent_by("cloudhub/edge"), "{:?}", got.sender());
    assert_eq!(
        (
            got.route.source.as_str(),
            got.route.group.as_str(),
            got.route.operation.as_str()
        ),
        ("edged", "meta", "update")
    );
    assert_eq!(
        got.content.as_json(),
        content,
        "content byte-identical, big integers intact"
    );
}

#[actix_rt::test]
async fn upstream_routing_by_source() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    e.send(&Message::new().with_route("twin", "twin", "$hw/events/device/d/twin/update", "update"))
        .await;
    let twin = recv(&mut h.devices).await;
    assert_eq!(
        twin.route.resource,
        "node/edge-1/$hw/events/device/d/twin/update"
    );
    assert!(twin.is_sent_by("cloudhub/edge"));
    e.send(&Message::new().with_route("metaserver", "meta", "default/pod", "list"))
        .await;
    assert_eq!(recv(&mut h.dynamic).await.route.operation, "connected");
    let request = recv(&mut h.dynamic).await;
    assert_eq!(request.route.source, "metaserver");
    assert!(request.is_sent_by("cloudhub/edge"));
    e.send(&Message::new().with_route("metamanager", "meta", "default/configmap/c", "query"))
        .await;
    assert_eq!(
        h.next_controller_msg().await.route.resource,
        "node/edge-1/default/configmap/c"
    );
    // A non-response claiming to be edgecontroller is dropped (impersonation).
    e.send(&Message::new().with_route("edgecontroller", "resource", "default/pod/p", "update"))
        .await;
    e.send(&Message::new().with_route("edged", "meta", "default/pod/marker", "update"))
        .await;
    assert_eq!(
        h.next_controller_msg().await.route.resource,
        "node/edge-1/default/pod/marker"
    );
}

#[actix_rt::test]
async fn user_upload_goes_to_the_router_with_the_node_prefix() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    // The router hears of the connection first (it sends the node its subscriptions again).
    assert_eq!(recv(&mut h.router).await.route.operation, "connected");
    e.send(&Message::new().with_route("eventbus", "user", "r/x", "upload"))
        .await;
    let got = recv(&mut h.router).await;
    assert_eq!(got.route.resource, "node/edge-1/r/x");
    assert!(got.is_sent_by("cloudhub/edge"));
}

#[actix_rt::test]
async fn k8s_ca_query_is_answered_by_the_hub_on_the_same_socket() {
    let h = Harness::with_options(
        |_| {},
        cloudhub::HubOptions {
            kube_ca_pem: "-----BEGIN CERTIFICATE-----\nKUBE\n-----END CERTIFICATE-----\n".into(),
            ..Default::default()
        },
    )
    .await;
    let mut e = h.connect("edge-1").await;
    let q = Message::new().with_route("metamanager", "resource", "k8s/ca.crt", "query");
    e.send(&q).await;
    let a = e.recv().await;
    assert_eq!(a.header.parent_id, q.header.id);
    assert_eq!(
        (a.route.source.as_str(), a.route.group.as_str()),
        ("cloudhub", "resource")
    );
    assert_eq!(
        (a.route.resource.as_str(), a.route.operation.as_str()),
        ("k8s/ca.crt", "response")
    );
    assert!(a.content.as_string().unwrap().contains("KUBE"));
    // No ACK is awaited: nothing is re-sent.
    assert!(e.recv_within(Duration::from_millis(5600)).await.is_none());
}

#[actix_rt::test]
async fn task_operations_reach_taskmanager_with_the_sessions_node_and_errors_are_not_forwarded() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    // edgecore's task reports come from its hub (source `edgehub`); a cloud module's source
    // from an edge is dropped.
    for op in ["prepull", "upgrade", "UpdateNodeActionStatus"] {
        // The node the report names is the edge's word; the session's node goes in front.
        e.send(&Message::new().with_route("edgehub", "taskmanager", "task/t1/node/edge-2", op))
            .await;
        let got = recv(&mut h.tasks).await;
        assert_eq!(
            (got.route.resource.as_str(), got.route.operation.as_str()),
            ("node/edge-1/task/t1/node/edge-2", op)
        );
        assert!(got.is_sent_by("cloudhub/edge"));
    }
    e.send(&Message::new().with_route("edged", "meta", "default/pod/p", "error"))
        .await;
    e.send(&Message::new().with_route("edged", "meta", "default/pod/marker", "update"))
        .await;
    assert_eq!(
        h.next_controller_msg().await.route.resource,
        "node/edge-1/default/pod/marker"
    );
}

#[actix_rt::test]
async fn ping_pong_and_config_are_answered_with_ack_and_not_forwarded() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    for op in ["ping", "pong", "config"] {
        let m = Message::new().with_route("x", "g", "r", op);
        e.send(&m).await;
        let a = e.recv().await;
        assert_eq!(a.header.parent_id, m.header.id);
        assert_eq!(a.route.operation, "response");
        assert_eq!(a.content.as_string().as_deref(), Some("ack"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Some(m) = h.controllers.try_recv() {
        assert!(
            matches!(m.route.operation.as_str(), "connected" | "disconnected"),
            "forwarded: {m}"
        );
    }
}

#[actix_rt::test]
async fn an_edge_sync_request_is_answered_by_the_controller_response() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    let q = Message::new().with_route("metamanager", "resource", "default/configmap/cfg", "query");
    e.send(&q).await;
    let req = h.next_controller_msg().await;
    // The controller answers with parent = request id; the hub delivers it downstream.
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "uid": "cu", "resourceVersion": "9"}});
    let resp = req
        .response(Content::json(&cm).unwrap())
        .with_resource_version("9");
    h.downstream(resp.clone()).await;
    let got = e.recv().await;
    assert_eq!(got.header.parent_id, q.header.id);
    assert_eq!(got.route.resource, "default/configmap/cfg");
    // Object responses are ACK-class: the edge's ACK records them.
    e.ack(&got).await;
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
}

#[actix_rt::test]
async fn a_query_nobody_can_serve_gets_an_error_reply_at_once() {
    let h = Harness::start().await;
    h.bus.remove("dynamiccontroller").await.unwrap();
    let mut e = h.connect("edge-1").await;
    let q = Message::new().with_route("metaserver", "meta", "default/pod", "query");
    e.send(&q).await;
    let r = e.recv().await;
    assert_eq!(
        (r.route.operation.as_str(), r.header.parent_id.as_str()),
        ("error", q.header.id.as_str())
    );
}

#[actix_rt::test]
async fn the_edge_stop_message_is_dropped_quietly() {
    let mut h = Harness::start().await;
    let mut e = h.connect("edge-1").await;
    // What edgecore writes on SIGTERM (observed).
    e.ws.send(Frame::Text(
        "{\"header\":{\"msg_id\":\"\",\"timestamp\":0},\"route\":{},\"content\":null}\n".into(),
    ))
    .await
    .unwrap();
    e.send(&Message::new().with_route("edged", "meta", "default/pod/marker", "update"))
        .await;
    assert_eq!(
        h.next_controller_msg().await.route.resource,
        "node/edge-1/default/pod/marker"
    );
}

#[actix_rt::test]
async fn a_sync_request_is_answered_only_by_the_node_it_was_sent_to() {
    let h = Harness::start().await;
    let mut a = h.connect("edge-a").await;
    let mut b = h.connect("edge-b").await;
    h.wait_nodes(2).await;
    for (source, group, resource, operation) in [
        (
            "cloudhub",
            "resource",
            "node/edge-a/ns/volume/v",
            "createvolume",
        ),
        ("router", "user", "node/edge-a/r/x", "insert"),
    ] {
        let request = Message::new().with_route(source, group, resource, operation);
        let id = request.header.id.clone();
        let caller = h.bus.endpoint("csidriver");
        let call = tokio::spawn(async move {
            caller
                .send_sync("cloudhub", request, Duration::from_secs(10))
                .await
        });
        let got = a.recv().await;
        assert_eq!(got.header.id, id, "the request reached edge-a");
        // edge-b knows the id (it could have guessed or seen it) and answers first.
        let forged = Message::with_parent(id.clone())
            .with_route("csidriver", group, &resource[12..], "response")
            .with_content(Content::string("from edge-b"));
        b.send(&forged).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !call.is_finished(),
            "{operation}: edge-b's answer was taken"
        );
        let real = Message::with_parent(id)
            .with_route("csidriver", group, &resource[12..], "response")
            .with_content(Content::string("from edge-a"));
        a.send(&real).await;
        let answer = call.await.unwrap().expect("edge-a's answer");
        assert_eq!(answer.content.as_json(), r#""from edge-a""#, "{operation}");
        // An edge's answer is the edge relay's, whatever source it names.
        assert!(answer.is_sent_by("cloudhub/edge"), "{:?}", answer.sender());
    }
}
