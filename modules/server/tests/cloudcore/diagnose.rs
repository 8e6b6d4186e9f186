//! `GET /debug/nodes/{name}` on the monitor server and `cloudcore diagnose <node>`: one
//! cloudcore composed in-process against the real API server, real Rust edges connecting its
//! hub and tunnel, and each failure the report names produced for real.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloudcore_server::app::CloudCore;
use cloudcore_server::config::CloudCoreConfig;
use cloudcore_server::diagnose::{Diagnostics, IptablesCheck, Report, Status, fetch_report};
use cloudcore_server::ops::{Metrics, Ops};
use cloudstream::TlsMaterial;
use cloudstream::iptables::SystemRunner;
use edge::hub::{HubClient, HubClientConfig, HubEvent, bootstrap};
use edge::stream::{AgentOptions, EdgeStreamConfig, StreamAgent};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivateSec1KeyDer};

use crate::support::{self, binary};

const WAIT: Duration = Duration::from_secs(30);

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

fn config(dir: &Path) -> CloudCoreConfig {
    support::testenv_config(dir)
}

/// A cloudcore and its monitor server answering diagnostics.
struct Cloud {
    core: CloudCore,
    client: kube::Client,
    diagnostics: Diagnostics,
    monitor: String,
    dir: PathBuf,
}

impl Cloud {
    async fn start(name: &str) -> Cloud {
        init_tracing();
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        let client = k8s_testenv::client().await;
        let dir = std::env::temp_dir().join(format!("diagnose-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let diagnostics = Diagnostics::default();
        let ops = Ops {
            diagnostics: diagnostics.clone(),
            ..Ops::default()
        };
        let (addr, server) =
            cloudcore_server::ops::serve("127.0.0.1:0", ops).expect("monitor server binds");
        actix_rt::spawn(server);
        let monitor = addr.to_string();
        // Before the modules run there is nothing to diagnose.
        match fetch_report(&monitor, "anything", None).await {
            Err(cloudcore_server::diagnose::FetchError::Status { status: 503, .. }) => {}
            other => panic!("before start: {other:?}"),
        }
        let core = CloudCore::start(&config(&dir), Some(client.clone()), &Metrics::default())
            .await
            .expect("cloudcore starts");
        diagnostics.set(core.diagnostics());
        Cloud {
            core,
            client,
            diagnostics,
            monitor,
            dir,
        }
    }

    /// The HTTP status the monitor server answers a GET of `path` with.
    async fn status_of(&self, path: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(&self.monitor).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    async fn report(&self, node: &str) -> Report {
        fetch_report(&self.monitor, node, None)
            .await
            .unwrap_or_else(|e| panic!("report for {node}: {e}"))
    }

    /// `cloudcore diagnose <node> --monitor <addr>`, off the runtime that serves it.
    async fn run_binary(&self, node: &str) -> Output {
        let (bin, monitor, node) = (binary(), self.monitor.clone(), node.to_owned());
        tokio::task::spawn_blocking(move || {
            Command::new(bin)
                .args(["diagnose", &node, "--monitor", &monitor])
                .output()
                .expect("run cloudcore diagnose")
        })
        .await
        .unwrap()
    }

    async fn create_node(&self, name: &str) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let _ = nodes.delete(name, &Default::default()).await;
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"node-role.kubernetes.io/edge": ""}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        self.set_kubelet_port(name, 10350).await;
    }

    async fn set_kubelet_port(&self, name: &str, port: i32) {
        let status = serde_json::json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }});
        Api::<Node>::all(self.client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    async fn kubelet_port(&self, name: &str) -> Option<i32> {
        let n = Api::<Node>::all(self.client.clone()).get(name).await.ok()?;
        Some(n.status?.daemon_endpoints?.kubelet_endpoint?.port)
    }

    /// A Rust edge hub client for `node`, connected.
    async fn connect_hub(&self, node: &str) -> (HubClient, TlsMaterial) {
        let hub = self.core.hub().expect("cloudhub");
        let https = self.core.addresses().https.expect("https address");
        let ws = self.core.addresses().websocket.expect("websocket address");
        let certs = bootstrap(&format!("https://{https}"), &hub.token(), node)
            .await
            .expect("edge bootstrap");
        let tls = Arc::new(certs.client_tls().expect("client TLS"));
        let (client, mut events) =
            HubClient::start(HubClientConfig::new(node, ws.to_string()), tls);
        tokio::time::timeout(WAIT, async {
            while let Some(ev) = events.recv().await {
                if ev == HubEvent::Connected {
                    return;
                }
            }
            panic!("hub client of {node} stopped before connecting");
        })
        .await
        .expect("hub session within 30 s");
        // Keep draining so the client keeps reading.
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        let material = TlsMaterial {
            cert_chain: vec![CertificateDer::from(certs.cert_der.clone())],
            key: PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(certs.key_der.clone())),
            ca: vec![CertificateDer::from(certs.ca_der.clone())],
        };
        (client, material)
    }

    /// edgestream for `node`, until its Node advertises this cloudcore's port.
    async fn connect_tunnel(
        &self,
        node: &str,
        material: &TlsMaterial,
    ) -> edge::stream::AgentHandle {
        let tunnel = self.core.addresses().tunnel.expect("tunnel address");
        let agent = StreamAgent::new(
            EdgeStreamConfig {
                enable: true,
                server: format!("127.0.0.1:{}", tunnel.port()),
                ..EdgeStreamConfig::default()
            },
            AgentOptions::new(node, "127.0.0.1"),
            edge::stream::client_tls(material).unwrap(),
        )
        .spawn();
        let stream_port = i32::from(self.core.addresses().stream.expect("stream").port());
        let deadline = Instant::now() + WAIT;
        while self.kubelet_port(node).await != Some(stream_port) {
            assert!(Instant::now() < deadline, "tunnel of {node} not up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        agent
    }

    async fn stop(self) {
        self.diagnostics.clear();
        self.core.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[actix_rt::test]
async fn a_node_not_connected_should_be_blamed_on_the_edge_hub_connection() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("nohub").await;
    // Only node names are looked up: anything else is refused before it reaches an API path.
    for path in [
        "/debug/nodes/a%2Fb",
        "/debug/nodes/UPPER",
        "/debug/nodes/a%3Fx%3D1",
    ] {
        assert_eq!(cloud.status_of(path).await, 400, "{path}");
    }
    let r = cloud.report("diagnose-never-connected").await;
    assert_eq!(r.status, Status::Failing, "{r:?}");
    assert_eq!(r.check.as_deref(), Some("hub"), "{r:?}");
    assert!(!r.hub.connected && r.hub.session_age_seconds.is_none());
    assert!(
        r.verdict
            .contains("is not connected to this cloudcore: check edgecore's"),
        "{}",
        r.verdict
    );
    assert_eq!(r.port.node_exists, Some(false), "{r:?}");

    let out = cloud.run_binary("diagnose-never-connected").await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hub session:   not connected"), "{text}");
    assert!(
        text.contains("FAILING: diagnose-never-connected is not connected"),
        "{text}"
    );
    cloud.stop().await;
}

#[actix_rt::test]
async fn a_hub_session_without_a_tunnel_should_be_blamed_on_edgestream() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("notunnel").await;
    let node = "diagnose-no-tunnel";
    cloud.create_node(node).await;
    let (hub, _material) = cloud.connect_hub(node).await;
    let r = cloud.report(node).await;
    assert!(r.hub.connected, "{r:?}");
    assert!(r.hub.session_age_seconds.is_some(), "{r:?}");
    assert!(!r.tunnel.connected && r.tunnel.address.is_none(), "{r:?}");
    assert_eq!(r.check.as_deref(), Some("tunnel"), "{r:?}");
    assert!(
        r.verdict.contains(
            "edgestream of diagnose-no-tunnel is not connected: enable modules.edgeStream"
        ),
        "{}",
        r.verdict
    );
    hub.stop();
    cloud.stop().await;
}

#[actix_rt::test]
async fn a_connected_node_should_be_ok_until_its_node_advertises_another_port() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("ok").await;
    let node = "diagnose-ok";
    cloud.create_node(node).await;
    let (hub, material) = cloud.connect_hub(node).await;
    let agent = cloud.connect_tunnel(node, &material).await;
    let stream_port = cloud.core.addresses().stream.unwrap().port();

    let r = cloud.report(node).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.check, None);
    assert_eq!(r.verdict, "ok");
    assert_eq!(r.tunnel.address.as_deref(), Some("127.0.0.1"), "{r:?}");
    assert_eq!(r.port.advertised, Some(stream_port));
    assert_eq!(r.port.node_port, Some(i32::from(stream_port)));
    assert_eq!(r.iptables.mode, "notManaged");
    assert_eq!(r.iptables.rule_present, None);
    assert!(r.iptables.detail.starts_with("not managed"), "{r:?}");
    let names: Vec<&str> = r.certificates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cloudhub server", "cloudhub CA"]);
    assert!(r.certificates.iter().all(|c| c.days_left > 365), "{r:?}");
    let out = cloud.run_binary(node).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK: ok"), "{text}");
    assert!(
        text.contains(&format!(
            "cloudcore serves {stream_port}; Node advertises {stream_port}"
        )),
        "{text}"
    );

    // Something else rewrites the Node's kubelet port: the API server now dials the wrong one.
    cloud.set_kubelet_port(node, 10250).await;
    let r = cloud.report(node).await;
    assert_eq!(r.check.as_deref(), Some("port"), "{r:?}");
    assert_eq!(r.port.node_port, Some(10250));
    assert!(
        r.verdict.contains(&format!(
            "Node diagnose-ok advertises kubelet port 10250 but this cloudcore serves port {stream_port}"
        )),
        "{}",
        r.verdict
    );
    let out = cloud.run_binary(node).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    drop(agent);
    hub.stop();
    cloud.stop().await;
}

/// Internal mode with the real `iptables` in a fresh network namespace: no rule there is the
/// failure a cloudcore without NET_ADMIN produces; once the rule exists the node is ok.
/// Needs root, as the other iptables tests do.
#[actix_rt::test]
async fn a_missing_dnat_rule_in_internal_mode_should_be_named() {
    test_tiers::require!(ApiServer, Root);
    support::require("ip", "iproute2");
    support::require("iptables", "iptables");
    let ns = format!("cc-diag-{}", std::process::id());
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().expect("run ip");
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let _ = Command::new("ip").args(["netns", "del", &ns]).output();
    ip(&["netns", "add", &ns]);
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
        }
    }
    let _del = Del(ns.clone());

    let cloud = Cloud::start("iptables").await;
    let node = "diagnose-iptables";
    cloud.create_node(node).await;
    let (hub, material) = cloud.connect_hub(node).await;
    let agent = cloud.connect_tunnel(node, &material).await;
    let mut sources = cloud.core.diagnostics();
    sources.iptables = IptablesCheck::Internal;
    sources.runner = Arc::new(SystemRunner::in_netns(&ns));
    cloud.diagnostics.set(sources);

    let r = cloud.report(node).await;
    assert_eq!(r.check.as_deref(), Some("iptables"), "{r:?}");
    assert_eq!(r.iptables.mode, "internal");
    assert_ne!(r.iptables.rule_present, Some(true), "{r:?}");
    assert!(
        r.verdict.starts_with("iptables rule missing"),
        "{}",
        r.verdict
    );

    let port = cloud.core.addresses().stream.unwrap().port().to_string();
    let in_ns =
        |args: &[&str]| ip(&[&["netns", "exec", &ns, "iptables", "-t", "nat"], args].concat());
    in_ns(&["-N", "TUNNEL-PORT"]);
    in_ns(&[
        "-A",
        "TUNNEL-PORT",
        "-p",
        "tcp",
        "-j",
        "DNAT",
        "--dport",
        &port,
        "--to",
        &format!("127.0.0.1:{port}"),
    ]);
    let r = cloud.report(node).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.iptables.rule_present, Some(true), "{r:?}");

    drop(agent);
    hub.stop();
    cloud.stop().await;
}

#[actix_rt::test]
async fn a_flood_of_diagnoses_is_refused_429_beyond_the_burst() {
    test_tiers::require!(ApiServer);
    let cloud = Cloud::start("flood").await;
    // Each diagnosis reads the Node and may fork iptables: five may start back to back, then
    // one a second. The flood's own duration bounds how many the refill may add: on a slow
    // machine each diagnosis takes longer and more pass, never more than the rate allows.
    let start = Instant::now();
    let mut answers = Vec::new();
    for _ in 0..30 {
        answers.push(match fetch_report(&cloud.monitor, "flooded", None).await {
            Ok(_) => 200,
            Err(cloudcore_server::diagnose::FetchError::Status { status, .. }) => status,
            Err(e) => panic!("{e}"),
        });
    }
    let refill = start.elapsed().as_secs_f64().ceil() as usize;
    let passed = answers.iter().filter(|s| **s == 200).count();
    assert!(answers[..5].iter().all(|s| *s == 200), "{answers:?}");
    assert!(
        answers.iter().all(|s| *s == 200 || *s == 429),
        "{answers:?}"
    );
    assert!(answers.contains(&429), "{answers:?}");
    assert!(
        passed <= 5 + refill,
        "{passed} passed in {refill} s: {answers:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(fetch_report(&cloud.monitor, "flooded", None).await.is_ok());
    cloud.stop().await;
}
