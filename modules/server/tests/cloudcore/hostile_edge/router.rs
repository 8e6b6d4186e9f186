//! The router's edge-facing messages (modules.router on): eventbus uploads, servicebus
//! answers, and rule status. An edge publishes only for rules that name it, answers only the
//! requests sent to it, and cannot pass for the router; malformed answers end the waiting call
//! with a `502` and the router keeps serving.

use super::*;
use edgecore_interop::{Recorder, http_request};
use kubeedge_api::rules::RuleEndpoint;

/// The router's REST listener of the suite's cloudcore.
fn router() -> std::net::SocketAddr {
    let port = cloud().spec().extra["modules"]["router"]["port"]
        .as_u64()
        .expect("the suite's cloudcore runs the router");
    std::net::SocketAddr::from(([127, 0, 0, 1], port as u16))
}

async fn router_metric(result: &str) -> f64 {
    cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value("router_edge_messages_total", &[("result", result)])
        .unwrap_or(0.0)
}

/// Tests that count the router's edge results take turns.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Scenario {
    async fn endpoint(&self, name: &str, kind: &str, props: Value) {
        let ep: RuleEndpoint = from(json!({"metadata": {"name": name},
            "spec": {"ruleEndpointType": kind, "properties": props}}));
        create(self.api::<RuleEndpoint>(), &ep).await;
    }

    async fn rule(&self, name: &str, source: &str, s: Value, target: &str, t: Value) {
        let rule: Rule = from(json!({"metadata": {"name": name},
            "spec": {"source": source, "sourceResource": s, "target": target, "targetResource": t}}));
        create(self.api::<Rule>(), &rule).await;
    }

    /// Sends a servicebus answer to `request` as this scenario's edge.
    async fn answer(&self, request: &Message, content: Content, operation: &str) {
        let msg = Message::with_parent(request.header.id.clone())
            .with_route("servicebus", "user", "", operation)
            .with_content(content);
        self.edge.client.send(msg).await.expect("queue the answer");
    }
}

fn http_answer(status: i64, body: &[u8]) -> Content {
    json_content(
        &json!({"header": {"X-From": ["edge"]}, "status_code": status,
        "body": base64::engine::general_purpose::STANDARD.encode(body)}),
    )
}

#[tokio::test]
async fn an_edge_publishes_only_for_rules_that_name_it() {
    let victim = Scenario::new("rt-victim").await;
    let attacker = Edge::connect(&victim.other_node().await).await;
    let sink = Recorder::start(200, "ok").await.expect("sink");
    victim.endpoint("bus", "eventbus", json!({})).await;
    victim.endpoint("sink", "rest", json!({})).await;
    victim
        .rule(
            "from-victim",
            "bus",
            json!({"topic": "t", "node_name": victim.node}),
            "sink",
            json!({"resource": format!("http://{}/in", sink.addr())}),
        )
        .await;
    let topic = format!("{}/t", victim.ns);
    victim.edge.pushed(&topic, "subscribe").await;
    let _turn = TURN.lock().await;
    let before = router_metric("no_rule").await;
    // The attacker uploads on the victim's topic (and claims the victim's node in the
    // resource: cloudhub puts the connection's node in front, whatever it says).
    for resource in [topic.clone(), format!("node/{}/{topic}", victim.node)] {
        let msg = Message::new()
            .with_route("bus", "user", resource, "upload")
            .with_content(Content::string("{\"forged\":true}"));
        attacker.client.send(msg).await.expect("queue the upload");
    }
    eventually(WAIT, "both forged uploads refused", || async {
        (router_metric("no_rule").await >= before + 2.0).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // The victim's own upload is delivered.
    let msg = Message::new()
        .with_route("bus", "user", topic.clone(), "upload")
        .with_content(Content::string("{\"real\":true}"));
    victim
        .edge
        .client
        .send(msg)
        .await
        .expect("queue the upload");
    eventually(WAIT, "the victim's upload at the sink", || async {
        (!sink.received().is_empty()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let bodies: Vec<String> = sink
        .received()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert_eq!(bodies, ["{\"real\":true}"]);
}

#[tokio::test]
async fn an_edge_cannot_answer_a_request_sent_to_another_node() {
    let victim = Scenario::new("rt-answer").await;
    let attacker = Scenario::new("rt-forger").await;
    victim.endpoint("rest", "rest", json!({})).await;
    victim
        .endpoint("svc", "servicebus", json!({"service_port": "6666"}))
        .await;
    victim
        .rule(
            "to-svc",
            "rest",
            json!({"path": "/svc"}),
            "svc",
            json!({"path": "/api"}),
        )
        .await;
    let _turn = TURN.lock().await;
    let before = router_metric("other_node").await;
    let node = victim.node.clone();
    let call = {
        let path = format!("/{node}/{}/svc", victim.ns);
        tokio::spawn(async move {
            eventually(WAIT, "the router answers", || async {
                let r = http_request(router(), "GET", &path, &[], b"", WAIT)
                    .await
                    .ok()?;
                (r.text() != "Request error").then_some(r)
            })
            .await
        })
    };
    let request = victim.edge.pushed("6666:/api", "GET").await;
    // The attacker knows the request's id and answers first.
    attacker
        .answer(&request, http_answer(200, b"forged"), "upload")
        .await;
    eventually(WAIT, "the forged answer refused", || async {
        (router_metric("other_node").await > before).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    victim
        .answer(&request, http_answer(202, b"genuine"), "upload")
        .await;
    let reply = call.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((reply.status, reply.text().as_str()), (202, "genuine"));
}

#[tokio::test]
async fn a_malformed_servicebus_answer_ends_the_call_with_502_and_the_router_keeps_serving() {
    let s = Scenario::new("rt-bad").await;
    s.endpoint("rest", "rest", json!({})).await;
    s.endpoint("svc", "servicebus", json!({"service_port": "8080"}))
        .await;
    s.rule(
        "to-svc",
        "rest",
        json!({"path": "/svc"}),
        "svc",
        json!({"path": "/"}),
    )
    .await;
    for (i, content) in [
        Content::string("not json"),
        json_content(&json!({"status_code": "two hundred"})),
        http_answer(99, b"informational"),
        http_answer(70000, b"out of range"),
        json_content(&json!({"status_code": 200, "body": "%%% not base64"})),
    ]
    .into_iter()
    .enumerate()
    {
        let node = s.node.clone();
        let path = format!("/{node}/{}/svc/{i}", s.ns);
        let call = tokio::spawn(async move {
            eventually(WAIT, "the router answers", || async {
                let r = http_request(router(), "GET", &path, &[], b"", WAIT)
                    .await
                    .ok()?;
                (r.text() != "Request error").then_some(r)
            })
            .await
        });
        let request = s.edge.pushed(&format!("8080:/{i}"), "GET").await;
        s.answer(&request, content, "upload").await;
        let reply = call.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.status, 502, "answer {i}: {}", reply.text());
    }
    // Still serving: a well-formed answer goes through.
    let node = s.node.clone();
    let path = format!("/{node}/{}/svc/ok", s.ns);
    let call =
        tokio::spawn(async move { http_request(router(), "GET", &path, &[], b"", WAIT).await });
    let request = s.edge.pushed("8080:/ok", "GET").await;
    s.answer(&request, http_answer(200, b"fine"), "upload")
        .await;
    let reply = call.await.unwrap().expect("an answer");
    assert_eq!((reply.status, reply.text().as_str()), (200, "fine"));
}

#[tokio::test]
async fn an_edge_cannot_write_rule_status_as_the_router() {
    let s = Scenario::new("rt-status").await;
    let rule: Rule = from(json!({"metadata": {"name": "r"}, "spec": {"source": "a",
        "sourceResource": {}, "target": "b", "targetResource": {}}}));
    let rules: Api<Rule> = s.api();
    let existing = create(rules.clone(), &rule).await;
    let dropped = || async {
        cloud()
            .metrics()
            .await
            .expect("/metrics")
            .value(
                "cloudhub_node_messages_dropped_total",
                &[("node", s.node.as_str()), ("reason", "refused")],
            )
            .unwrap_or(0.0)
    };
    let before = dropped().await;
    s.edge
        .send_as(
            "router",
            "resource",
            &format!("{}/rulestatus/r", s.ns),
            "update",
            json_content(
                &json!({"RuleID": "r", "ProjectID": s.ns, "Status": "SUCCESS",
                "Count": 1000}),
            ),
        )
        .await;
    eventually(WAIT, "the message dropped by cloudhub", || async {
        (dropped().await > before).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    s.unchanged(
        &rules,
        &existing,
        "rule status from an edge claiming the router",
    )
    .await;
}
