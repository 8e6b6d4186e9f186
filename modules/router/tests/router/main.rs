//! The router on a real bus with its real REST listener (HTTP over a real socket) and the real
//! API server for the edge Nodes; inboxes stand in for cloudhub (what goes to edges) and
//! edgecontroller (rule status), and the tests send what edgecontroller and the edges would.
//! The same flows through the real cloudhub and a real edgecore are in
//! `modules/server/tests/edgecore/router.rs`.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::{Bus, Content, Message};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use kubeedge_api::replicas::Ownership;
use kubeedge_api::testing::FakeEdge;
use router::{EdgeResult, RestResult, Router, RouterConfig, RouterHandle};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id()[..8])
}

async fn node(name: &str, edge: bool) {
    let labels = if edge {
        json!({EDGE_LABEL: ""})
    } else {
        json!({})
    };
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Node>::all(k8s_testenv::client().await)
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

/// One router with its inboxes, an edge node held here (`node`), one held by nobody
/// (`away`), and a namespace of its own.
struct World {
    bus: Bus,
    router: RouterHandle,
    hub: FakeEdge,
    controller: FakeEdge,
    edgecontroller: beehive::Endpoint,
    node: String,
    away: String,
    ns: String,
    addr: SocketAddr,
}

impl World {
    async fn new(adjust: impl FnOnce(&mut RouterConfig)) -> World {
        let (node_name, away) = (unique("edge"), unique("away"));
        node(&node_name, true).await;
        node(&away, true).await;
        let bus = Bus::new();
        let hub = FakeEdge::register(&bus, "cloudhub");
        // Rule status goes to module `edgecontroller`.
        let controller = FakeEdge::register(&bus, "edgecontroller");
        let mut config = RouterConfig {
            enable: true,
            rest_timeout: 2,
            ..RouterConfig::default()
        };
        adjust(&mut config);
        let ownership = Ownership::new("127.0.0.1");
        ownership.hold(&node_name);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let module = Router::with_listener(
            config,
            bus.endpoint("router"),
            k8s_testenv::client().await,
            ownership,
            listener,
        )
        .unwrap();
        let router = module.handle();
        let addr = router.local_addr();
        bus.register(module).unwrap();
        bus.start().unwrap();
        tokio::time::timeout(WAIT, router.ready())
            .await
            .expect("edge nodes listed");
        World {
            edgecontroller: bus.endpoint("edgecontroller"),
            bus,
            router,
            hub,
            controller,
            node: node_name,
            away,
            ns: unique("ns"),
            addr,
        }
    }

    /// Sends what edgecontroller sends for a new object (`rule` or `ruleendpoint`).
    async fn learn(&self, kind: &str, obj: Value) {
        self.tell(kind, "insert", obj).await;
    }

    async fn tell(&self, kind: &str, op: &str, mut obj: Value) {
        obj["metadata"]["namespace"] = json!(self.ns);
        let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
        let msg = Message::new()
            .with_route("edgecontroller", "resource", format!("{kind}/{name}"), op)
            .with_content(Content::json(&obj).unwrap());
        self.edgecontroller.send("router", msg).await.unwrap();
    }

    async fn endpoint(&self, name: &str, kind: &str, props: Value) {
        self.learn(
            "ruleendpoint",
            json!({"apiVersion": "rules.kubeedge.io/v1", "kind": "RuleEndpoint",
                   "metadata": {"name": name},
                   "spec": {"ruleEndpointType": kind, "properties": props}}),
        )
        .await;
    }

    fn rule_obj(name: &str, src: &str, s: Value, tgt: &str, t: Value) -> Value {
        json!({"apiVersion": "rules.kubeedge.io/v1", "kind": "Rule",
               "metadata": {"name": name, "uid": beehive::new_id()},
               "spec": {"source": src, "sourceResource": s, "target": tgt, "targetResource": t}})
    }

    async fn rule(&self, name: &str, src: &str, s: Value, tgt: &str, t: Value) {
        self.learn("rule", Self::rule_obj(name, src, s, tgt, t))
            .await;
    }

    /// Waits until the router has `name` active.
    async fn active(&self, name: &str) {
        let key = format!("{}/{name}", self.ns);
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.router.active_rules().contains_key(&key) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{key} not active: {:?}",
                self.router.active_rules()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A REST call to the listener.
    async fn call(&self, method: &str, path: &str, body: &'static [u8]) -> (u16, Bytes) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(body)))
            .unwrap();
        let resp = client.request(req).await.expect("the listener answers");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }

    /// Waits for a message to cloudhub for `node` with `resource` after `node/<node>/`.
    async fn to_edge(&self, node: &str, resource: &str, op: &str) -> Message {
        let full = format!("node/{node}/{resource}");
        self.hub
            .wait_for(WAIT, |m| {
                m.route.resource == full && m.route.operation == op
            })
            .await
            .unwrap_or_else(|| {
                panic!(
                    "no {op} {full} to cloudhub; got {:?}",
                    self.hub
                        .messages()
                        .iter()
                        .map(|m| format!("{} {}", m.route.operation, m.route.resource))
                        .collect::<Vec<_>>()
                )
            })
    }

    /// Sends what cloudhub passes on from an edge (resource already `node/<node>/…`), from
    /// cloudhub's edge relay endpoint as cloudhub does.
    async fn send_as_edge(&self, msg: Message) {
        self.bus
            .endpoint("cloudhub")
            .sub("edge")
            .send("router", msg)
            .await
            .unwrap();
    }

    /// Sends one of cloudhub's own node events, from its endpoint `cloudhub`.
    async fn hub_event(&self, msg: Message) {
        self.bus
            .endpoint("cloudhub")
            .send("router", msg)
            .await
            .unwrap();
    }

    /// Sums the rule status counts edgecontroller received for `rule`, by status.
    fn statuses(&self, rule: &str) -> (i64, i64, String) {
        let resource = format!("node/nodeid/{}/rulestatus/{rule}", self.ns);
        let (mut ok, mut failed, mut last) = (0, 0, String::new());
        for m in self.controller.matching(|m| m.route.resource == resource) {
            let r: kubeedge_api::rules::ExecResult = m.content.parse().unwrap();
            if r.status == "SUCCESS" {
                ok += r.deliveries();
            } else {
                failed += r.deliveries();
                last = r.error.detail;
            }
        }
        (ok, failed, last)
    }

    async fn wait_statuses(&self, rule: &str, ok: i64, failed: i64) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (o, f, last) = self.statuses(rule);
            if (o, f) == (ok, failed) {
                return last;
            }
            assert!(
                tokio::time::Instant::now() < deadline && o <= ok && f <= failed,
                "{rule}: status counts {o} ok / {f} failed, want {ok} / {failed}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn upload(node: &str, topic: &str, payload: &str) -> Message {
    Message::new()
        .with_route("bus", "user", format!("node/{node}/{topic}"), "upload")
        .with_content(Content::string(payload))
}

fn answer(node: &str, request: &Message, status: u16, body: &[u8], op: &str) -> Message {
    let mut m = Message::with_parent(request.header.id.clone()).with_route(
        "servicebus",
        "user",
        format!("node/{node}/"),
        op,
    );
    m = m.with_content(
        Content::json(
            &json!({"header": {"X-Edge": ["yes"]}, "status_code": status,
            "body": router::wire::base64(body)}),
        )
        .unwrap(),
    );
    m
}

#[actix_rt::test]
async fn a_rest_call_is_published_on_the_topic_at_the_node_it_names() {
    let w = World::new(|_| {}).await;
    w.endpoint("my-rest", "rest", json!({})).await;
    w.endpoint("my-eventbus", "eventbus", json!({})).await;
    w.rule(
        "r",
        "my-rest",
        json!({"path": "/test"}),
        "my-eventbus",
        json!({"topic": "test"}),
    )
    .await;
    w.active("r").await;
    let (status, body) = w
        .call("POST", &format!("/{}/{}/test", w.node, w.ns), b"hi")
        .await;
    assert_eq!((status, &body[..]), (200, &b"message delivered"[..]));
    let m = w.to_edge(&w.node, "test", "publish").await;
    assert_eq!(
        (m.route.source.as_str(), m.route.group.as_str()),
        ("router_eventbus", "user")
    );
    assert_eq!(m.content.as_string().as_deref(), Some("hi"));
    // Extra segments extend the topic.
    let (status, _) = w
        .call("PUT", &format!("/{}/{}/test/a/b", w.node, w.ns), b"x")
        .await;
    assert_eq!(status, 200);
    w.to_edge(&w.node, "test/a/b", "publish").await;
    // Counted on the rule, coalesced: two deliveries.
    w.wait_statuses("r", 2, 0).await;
    assert_eq!(w.router.metrics().rest_calls(RestResult::Delivered), 2);
}

#[actix_rt::test]
async fn calls_without_a_rule_an_edge_node_or_a_session_are_refused_at_once() {
    let w = World::new(|_| {}).await;
    w.endpoint("rest", "rest", json!({})).await;
    w.endpoint("bus", "eventbus", json!({})).await;
    w.rule(
        "a",
        "rest",
        json!({"path": "/a"}),
        "bus",
        json!({"topic": "ta"}),
    )
    .await;
    w.rule(
        "ab",
        "rest",
        json!({"path": "/a/b"}),
        "bus",
        json!({"topic": "tab"}),
    )
    .await;
    w.active("a").await;
    w.active("ab").await;
    let plain = unique("plain");
    node(&plain, false).await;
    for (path, want, body) in [
        (format!("/{}/{}/ab", w.node, w.ns), 404, "Request error"),
        (format!("/{}/other-ns/a", w.node), 404, "Request error"),
        (format!("/{plain}/{}/a", w.ns), 404, "is not an edge node"),
        (
            format!("/no-such-node/{}/a", w.ns),
            404,
            "is not an edge node",
        ),
        (format!("/{}/{}/a", w.away, w.ns), 503, "is not connected"),
        ("/x".to_owned(), 404, "Request error"),
    ] {
        let (status, got) = w.call("POST", &path, b"x").await;
        let got = String::from_utf8_lossy(&got);
        assert_eq!(status, want, "{path}: {got}");
        assert!(got.contains(body), "{path}: {got}");
    }
    // The longer rule path wins, whatever the order the rules arrived in.
    let (status, _) = w
        .call("POST", &format!("/{}/{}/a/b/c", w.node, w.ns), b"x")
        .await;
    assert_eq!(status, 200);
    w.to_edge(&w.node, "tab/c", "publish").await;
    assert!(
        w.hub.matching(|m| m.route.operation == "publish").len() == 1,
        "nothing was published for the refused calls"
    );
    assert_eq!(w.router.metrics().rest_calls(RestResult::UnknownNode), 2);
    w.wait_statuses("a", 0, 1).await;
}

#[actix_rt::test]
async fn a_rest_call_reaches_the_edge_service_and_gets_its_answer_from_that_node_only() {
    let w = World::new(|_| {}).await;
    w.endpoint("rest", "rest", json!({})).await;
    w.endpoint("svc", "servicebus", json!({"service_port": "6666"}))
        .await;
    w.rule(
        "s",
        "rest",
        json!({"path": "/svc"}),
        "svc",
        json!({"path": "/target"}),
    )
    .await;
    w.active("s").await;
    let w = std::rc::Rc::new(w);
    let call = {
        let w = w.clone();
        actix_rt::spawn(async move {
            w.call("POST", &format!("/{}/{}/svc/a?x=1", w.node, w.ns), b"hello")
                .await
        })
    };
    let req = w.to_edge(&w.node, "6666:/target/a?x=1", "POST").await;
    assert_eq!(req.route.source, "router_servicebus");
    let content: Value = req.content.parse().unwrap();
    assert_eq!(content["body"], router::wire::base64(b"hello"));
    assert_eq!(content["method"], "POST");
    assert_eq!(content["url"], "");
    assert_eq!(content["header"]["Content-Type"], json!(["text/plain"]));
    // Another node answering this request is ignored; the node asked answers.
    w.send_as_edge(answer(&w.away, &req, 200, b"forged", "upload"))
        .await;
    w.send_as_edge(answer(&w.node, &req, 201, b"ok", "upload"))
        .await;
    let (status, body) = call.await.unwrap();
    assert_eq!((status, &body[..]), (201, &b"ok"[..]));
    assert_eq!(w.router.metrics().edge_messages(EdgeResult::OtherNode), 1);
    w.wait_statuses("s", 1, 0).await;

    // The edge could not call its service: its error answer (no operation) is the status.
    let call = {
        let w = w.clone();
        actix_rt::spawn(async move {
            w.call("GET", &format!("/{}/{}/svc", w.node, w.ns), b"")
                .await
        })
    };
    let req = w.to_edge(&w.node, "6666:/target", "GET").await;
    w.send_as_edge(answer(&w.node, &req, 404, b"error to call service", ""))
        .await;
    let (status, body) = call.await.unwrap();
    assert_eq!((status, &body[..]), (404, &b"error to call service"[..]));

    // No answer within restTimeout: 504, one attempt.
    let (status, body) = w
        .call("DELETE", &format!("/{}/{}/svc/slow", w.node, w.ns), b"")
        .await;
    assert_eq!(
        (status, &body[..]),
        (504, &b"wait to get response time out"[..])
    );
    assert_eq!(
        w.hub
            .matching(|m| m.route.resource.ends_with("6666:/target/slow"))
            .len(),
        1,
        "sent once, not retried"
    );
    let last = w.wait_statuses("s", 1, 2).await;
    assert!(last.starts_with("504 Gateway Timeout"), "{last}");
}

#[actix_rt::test]
async fn an_edge_upload_is_posted_for_the_rules_naming_that_node_only() {
    let w = World::new(|_| {}).await;
    let (sink, received) = sink().await;
    w.endpoint("bus", "eventbus", json!({})).await;
    w.endpoint("sink", "rest", json!({})).await;
    w.rule(
        "e",
        "bus",
        json!({"topic": "test", "node_name": w.node}),
        "sink",
        json!({"resource": format!("http://{sink}/x")}),
    )
    .await;
    w.active("e").await;
    let topic = format!("{}/test", w.ns);
    w.to_edge(&w.node, &topic, "subscribe").await;
    w.send_as_edge(upload(&w.node, &topic, "{\"a\":1}")).await;
    // Another node's upload on the same topic, and this node's on another topic.
    w.send_as_edge(upload(&w.away, &topic, "{\"forged\":1}"))
        .await;
    w.send_as_edge(upload(&w.node, &format!("{}/other", w.ns), "{}"))
        .await;
    w.wait_statuses("e", 1, 0).await;
    assert_eq!(
        received.lock().unwrap().clone(),
        [("/x".to_owned(), "{\"a\":1}".to_owned())]
    );
    assert_eq!(w.router.metrics().edge_messages(EdgeResult::NoRule), 2);

    // The node reconnects: it is asked to subscribe again.
    w.hub.clear();
    let connected = Message::new().with_route(
        "cloudhub",
        "resource",
        format!("node/{}", w.node),
        "connected",
    );
    // An edge that claims cloudhub's event is not asked anything: only cloudhub's own
    // endpoint speaks for the hub.
    w.send_as_edge(connected.clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        w.hub
            .matching(|m| m.route.operation == "subscribe")
            .is_empty(),
        "a connected event relayed from an edge is not the hub's"
    );
    w.hub_event(connected).await;
    w.to_edge(&w.node, &topic, "subscribe").await;

    // Deleted: unsubscribed.
    w.tell(
        "rule",
        "delete",
        World::rule_obj(
            "e",
            "bus",
            json!({"topic": "test", "node_name": w.node}),
            "sink",
            json!({"resource": format!("http://{sink}/x")}),
        ),
    )
    .await;
    w.to_edge(&w.node, &topic, "unsubscribe").await;
}

#[actix_rt::test]
async fn a_rule_that_arrives_before_its_endpoints_becomes_active_when_they_do() {
    let w = World::new(|_| {}).await;
    w.rule(
        "early",
        "rest",
        json!({"path": "/e"}),
        "bus",
        json!({"topic": "t"}),
    )
    .await;
    let (status, _) = w
        .call("POST", &format!("/{}/{}/e", w.node, w.ns), b"x")
        .await;
    assert_eq!(status, 404);
    w.endpoint("rest", "rest", json!({})).await;
    w.endpoint("bus", "eventbus", json!({})).await;
    w.active("early").await;
    let (status, _) = w
        .call("POST", &format!("/{}/{}/e", w.node, w.ns), b"x")
        .await;
    assert_eq!(status, 200);
}

#[actix_rt::test]
async fn bodies_and_calls_in_progress_are_bounded_per_rule() {
    let w = World::new(|c| {
        c.max_body_bytes = 16;
        c.max_concurrent_per_rule = 1;
    })
    .await;
    w.endpoint("rest", "rest", json!({})).await;
    w.endpoint("svc", "servicebus", json!({"service_port": "80"}))
        .await;
    w.rule(
        "s",
        "rest",
        json!({"path": "/s"}),
        "svc",
        json!({"path": "/"}),
    )
    .await;
    w.active("s").await;
    let (status, _) = w
        .call(
            "POST",
            &format!("/{}/{}/s", w.node, w.ns),
            b"seventeen bytes!!",
        )
        .await;
    assert_eq!(status, 413);
    let w = std::rc::Rc::new(w);
    let first = {
        let w = w.clone();
        actix_rt::spawn(async move {
            w.call("GET", &format!("/{}/{}/s/1", w.node, w.ns), b"")
                .await
        })
    };
    let req = w.to_edge(&w.node, "80:/1", "GET").await;
    let (status, _) = w
        .call("GET", &format!("/{}/{}/s/2", w.node, w.ns), b"")
        .await;
    assert_eq!(status, 429, "one call of the rule at a time");
    w.send_as_edge(answer(&w.node, &req, 200, b"", "upload"))
        .await;
    assert_eq!(first.await.unwrap().0, 200);
    assert_eq!(w.router.metrics().rest_calls(RestResult::Busy), 1);
    assert_eq!(w.router.metrics().rest_calls(RestResult::TooLarge), 1);
}

/// An HTTP server on a free port recording each request's path and body.
async fn sink() -> (SocketAddr, Arc<Mutex<Vec<(String, String)>>>) {
    use actix_web::{App, HttpRequest, HttpServer, web};
    let received: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let seen = received.clone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = HttpServer::new(move || {
        let seen = seen.clone();
        App::new().default_service(web::to(move |req: HttpRequest, body: Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push((
                    req.path().to_owned(),
                    String::from_utf8_lossy(&body).into_owned(),
                ));
                "ok"
            }
        }))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    actix_rt::spawn(server);
    (addr, received)
}
