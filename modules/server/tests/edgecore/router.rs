//! The router with an unmodified KubeEdge edgecore whose eventBus uses a real MQTT broker
//! (Debian's `mosquitto` on loopback) and whose serviceBus is on: a REST call reaches an MQTT
//! subscriber at the edge; an MQTT publish at the edge reaches a REST endpoint in the cloud; a
//! REST call reaches an HTTP service at the edge and its answer comes back (and the edge's
//! error, when the service is not there). cloudcore runs as the manifests' ServiceAccount, and
//! the Rules' status counts what was delivered.
//!
//! Run: `cargo test -p cloudcore-server --test edgecore router`.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use edgecore_interop::{Interop, Mosquitto, Recorder, eventually, http_request, listen_ports};
use kube::Api;
use kube::api::PostParams;
use kubeedge_api::rules::{Rule, RuleEndpoint};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn create<K>(api: &Api<K>, v: Value) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v)?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

fn endpoint(name: &str, kind: &str, props: Value) -> Value {
    json!({"apiVersion": "rules.kubeedge.io/v1", "kind": "RuleEndpoint",
           "metadata": {"name": name},
           "spec": {"ruleEndpointType": kind, "properties": props}})
}

fn rule(name: &str, source: &str, s: Value, target: &str, t: Value) -> Value {
    json!({"apiVersion": "rules.kubeedge.io/v1", "kind": "Rule", "metadata": {"name": name},
           "spec": {"source": source, "sourceResource": s, "target": target, "targetResource": t}})
}

#[tokio::test]
async fn rest_calls_reach_mqtt_and_http_services_at_the_edge_and_edge_mqtt_reaches_rest()
-> Result<()> {
    let broker = Mosquitto::start().await?;
    let router_port = listen_ports(1)?[0];
    let node = "router-edge";
    let it = Interop::builder(node)
        .service_account()
        .with_event_bus(broker.addr())
        .with_service_bus()
        .cloud_config(json!({"modules": {"router": {
            "enable": true, "address": "127.0.0.1", "port": router_port, "restTimeout": 20}}}))
        .start()
        .await?;
    let router = std::net::SocketAddr::from(([127, 0, 0, 1], router_port));
    let client = it.client();
    let ns = k8s_testenv::namespace("router").await;
    let endpoints: Api<RuleEndpoint> = Api::namespaced(client.clone(), &ns);
    let rules: Api<Rule> = Api::namespaced(client.clone(), &ns);

    // The edge application's HTTP service, and the cloud's REST sink.
    let service = Recorder::start(201, "{target}").await?;
    let sink = Recorder::start(200, "thanks").await?;
    let closed = listen_ports(1)?[0];
    create(&endpoints, endpoint("rest", "rest", json!({}))).await?;
    create(&endpoints, endpoint("mqtt", "eventbus", json!({}))).await?;
    create(
        &endpoints,
        endpoint(
            "svc",
            "servicebus",
            json!({"service_port": service.addr().port().to_string()}),
        ),
    )
    .await?;
    create(
        &endpoints,
        endpoint(
            "nowhere",
            "servicebus",
            json!({"service_port": closed.to_string()}),
        ),
    )
    .await?;
    create(&endpoints, endpoint("sink", "rest", json!({}))).await?;
    create(
        &rules,
        rule(
            "to-mqtt",
            "rest",
            json!({"path": "/to-mqtt"}),
            "mqtt",
            json!({"topic": "sensors/cmd"}),
        ),
    )
    .await?;
    create(
        &rules,
        rule(
            "to-svc",
            "rest",
            json!({"path": "/svc"}),
            "svc",
            json!({"path": "/api"}),
        ),
    )
    .await?;
    create(
        &rules,
        rule(
            "to-nowhere",
            "rest",
            json!({"path": "/nowhere"}),
            "nowhere",
            json!({"path": "/"}),
        ),
    )
    .await?;
    create(
        &rules,
        rule(
            "from-mqtt",
            "mqtt",
            json!({"topic": "events", "node_name": node}),
            "sink",
            json!({"resource": format!("http://{}/ingest", sink.addr())}),
        ),
    )
    .await?;

    // 1. REST → MQTT at the edge: edgecore publishes the body on the rule's topic.
    let subscriber = broker.subscribe("sensors/#").await?;
    let path = format!("/{node}/{ns}/to-mqtt/a");
    let reply = eventually(WAIT, "the to-mqtt rule delivers", || async {
        let r = http_request(router, "POST", &path, &[], b"{\"temp\":21}", WAIT)
            .await
            .ok()?;
        (r.status == 200).then_some(r)
    })
    .await?;
    ensure!(reply.text() == "message delivered", "{}", reply.text());
    let payload = subscriber.wait_for("sensors/cmd/a", WAIT).await?;
    ensure!(payload == "{\"temp\":21}", "MQTT payload {payload:?}");

    // 2. MQTT at the edge → REST in the cloud: the edge subscribed `<ns>/events` for the rule;
    // a message published there is POSTed to the sink.
    let topic = format!("{ns}/events");
    eventually(
        WAIT,
        "the sink receives the edge's MQTT message",
        || async {
            broker.publish(&topic, "{\"a\":1}").await.ok()?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            (!sink.received().is_empty()).then_some(())
        },
    )
    .await?;
    let got = &sink.received()[0];
    ensure!(
        (
            got.method.as_str(),
            got.target.as_str(),
            got.body.as_slice()
        ) == ("POST", "/ingest", &b"{\"a\":1}"[..]),
        "{got:?}"
    );

    // 3. REST → HTTP service at the edge, and its answer back.
    let reply = eventually(WAIT, "the to-svc rule answers", || async {
        let r = http_request(
            router,
            "PUT",
            &format!("/{node}/{ns}/svc/echo?x=1"),
            &[("Content-Type", "text/plain"), ("X-Caller", "test")],
            b"ping",
            WAIT,
        )
        .await
        .ok()?;
        (r.status != 404).then_some(r)
    })
    .await?;
    ensure!(
        (reply.status, reply.text().as_str()) == (201, "/api/echo?x=1"),
        "{} {}",
        reply.status,
        reply.text()
    );
    let called = service.received();
    let call = called.last().context("the edge service was called")?;
    ensure!(
        (call.method.as_str(), call.body.as_slice()) == ("PUT", &b"ping"[..]),
        "{call:?}"
    );
    ensure!(
        call.headers
            .iter()
            .any(|(k, v)| k == "x-caller" && v == "test"),
        "the caller's headers reach the service: {call:?}"
    );

    // The edge cannot reach the service: its own error comes back at once (KubeEdge drops it
    // and the caller waits for the timeout).
    let started = std::time::Instant::now();
    let reply = eventually(WAIT, "the to-nowhere rule answers", || async {
        let r = http_request(
            router,
            "GET",
            &format!("/{node}/{ns}/nowhere"),
            &[],
            b"",
            WAIT,
        )
        .await
        .ok()?;
        (r.text() != "Request error").then_some(r)
    })
    .await?;
    ensure!(
        reply.status == 404 && reply.text() == "error to call service",
        "{} {}",
        reply.status,
        reply.text()
    );
    ensure!(
        started.elapsed() < Duration::from_secs(20),
        "answered before the timeout"
    );

    // 4. The Rules count what was delivered (edgecontroller patches their status).
    for (name, ok, failed) in [
        ("to-mqtt", 1, 0),
        ("to-svc", 1, 0),
        ("from-mqtt", 1, 0),
        ("to-nowhere", 0, 1),
    ] {
        eventually(WAIT, &format!("{name} counts its deliveries"), || async {
            let status = rules.get(name).await.ok()?.status?;
            (status.success_messages >= ok && status.fail_messages >= failed).then_some(())
        })
        .await?;
    }
    let nowhere = rules.get("to-nowhere").await?.status.unwrap_or_default();
    ensure!(
        nowhere.errors.first().is_some_and(|e| e.starts_with("404")),
        "{nowhere:?}"
    );
    it.finish();
    Ok(())
}
