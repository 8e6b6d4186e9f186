//! The sender the bus writes: every delivered message names the endpoint it went through,
//! whatever its route claims, for every kind of send, and a module cannot pass for another.

use std::time::Duration;

use beehive::{Bus, Content, Message};

/// A message whose route claims `claimed` as its source (and whose header carries whatever
/// sender an earlier delivery left in it).
fn claiming(claimed: &str) -> Message {
    Message::new().with_route(claimed, "resource", "node/n/default/pod/p", "update")
}

#[actix_rt::test]
async fn the_receiver_sees_the_endpoint_not_the_claimed_source() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("controller", "controllers", 0).unwrap();
    let edge = bus.endpoint("hub").sub("edge");

    edge.send("controller", claiming("router")).await.unwrap();
    let got = inbox.recv().await.unwrap();
    assert_eq!(got.route.source, "router", "the route is carried unchanged");
    assert_eq!(got.sender().map(|s| s.name()), Some("hub/edge"));
    assert!(got.is_sent_by("hub/edge") && !got.is_sent_by("router") && !got.is_sent_by("hub"));

    edge.try_send("controller", claiming("controller")).unwrap();
    assert!(inbox.recv().await.unwrap().is_sent_by("hub/edge"));

    assert_eq!(
        edge.send_to_group("controllers", claiming("hub"))
            .await
            .unwrap(),
        1
    );
    assert!(inbox.recv().await.unwrap().is_sent_by("hub/edge"));

    let within = edge
        .send_to_group_within("controllers", claiming("hub"), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(within.is_complete());
    assert!(inbox.recv().await.unwrap().is_sent_by("hub/edge"));
}

#[actix_rt::test]
async fn a_message_sent_on_carries_its_new_sender() {
    let bus = Bus::new();
    let mut first = bus.register_inbox("first", "first", 0).unwrap();
    let mut second = bus.register_inbox("second", "second", 0).unwrap();

    bus.endpoint("router")
        .send("first", claiming("router"))
        .await
        .unwrap();
    let got = first.recv().await.unwrap();
    assert!(got.is_sent_by("router"));
    // The module that got it from the router sends it on as itself: the earlier sender does
    // not survive the second send.
    bus.endpoint("first").send("second", got).await.unwrap();
    let relayed = second.recv().await.unwrap();
    assert!(relayed.is_sent_by("first"), "{:?}", relayed.sender());
}

#[actix_rt::test]
async fn sync_requests_and_their_answers_carry_their_senders() {
    let bus = Bus::new();
    let mut meta = bus.register_inbox("meta", "meta", 0).unwrap();
    let responder = bus.endpoint("meta");
    actix_rt::spawn(async move {
        let req = meta.recv().await.unwrap();
        assert!(req.is_sent_by("hub"), "{:?}", req.sender());
        // The answer claims to come from the router; the caller sees who answered.
        let mut answer = req.response(Content::string("OK"));
        answer.route.source = "router".into();
        responder.send_resp(answer);
    });
    let answer = bus
        .endpoint("hub")
        .send_sync("meta", claiming("router"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(answer.is_sent_by("meta"), "{:?}", answer.sender());

    let mut a = bus.register_inbox("a", "members", 0).unwrap();
    let answerer = bus.endpoint("a");
    actix_rt::spawn(async move {
        let req = a.recv().await.unwrap();
        assert!(req.is_sent_by("hub"));
        answerer.send_resp(req.response(Content::null()));
    });
    let answers = bus
        .endpoint("hub")
        .send_to_group_sync("members", claiming("a"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(answers.len(), 1);
    assert!(answers[0].1.is_sent_by("a"));
}

#[test]
fn built_and_decoded_messages_have_no_sender_and_the_sender_is_not_on_the_wire() {
    let m = claiming("router");
    assert_eq!(m.sender(), None);
    let decoded = Message::from_json(&m.to_json()).unwrap();
    assert_eq!(decoded.sender(), None);
    assert_eq!(decoded, m);
}

#[actix_rt::test]
async fn equality_ignores_the_sender() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("x", "x", 0).unwrap();
    let m = claiming("y");
    bus.endpoint("y").send("x", m.clone()).await.unwrap();
    let got = inbox.recv().await.unwrap();
    assert!(got.sender().is_some());
    assert_eq!(got, m, "same header, route and content");
    assert_eq!(
        String::from_utf8(got.to_json()).unwrap(),
        String::from_utf8(m.to_json()).unwrap()
    );
}

#[cfg(target_pointer_width = "64")]
#[test]
fn the_sender_costs_the_message_no_space() {
    // It lives in padding the header had: every send moves a message by value.
    assert_eq!(std::mem::size_of::<Message>(), 248);
}
