//! `modules.iptablesManager.mode: external` end to end, with the real API server and the real
//! `iptables` in a network namespace: cloudcore negotiates and records its tunnel port, a node
//! whose edge connects reports that port, and `cloudcore iptables-manager` (the binary, run in
//! the namespace as a `hostNetwork` DaemonSet pod runs on its host) programs the same
//! `TUNNEL-PORT` chain internal mode does, follows record changes and removes it on SIGTERM.
//!
//! Needs root (network namespaces, veth, iptables), as the internal-mode tests do.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cloudcore_server::app::CloudCore;
use cloudcore_server::config::CloudCoreConfig;
use cloudcore_server::ops::Metrics;
use cloudstream::{IptablesMode, TlsMaterial, TunnelPortRecord};
use edge::hub::bootstrap;
use edge::stream::{AgentOptions, EdgeStreamConfig, StreamAgent};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivateSec1KeyDer};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{self, binary};

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace joined to the host by a veth pair (`host_ip` ↔ `ns_ip`); deleted on
/// drop (which removes the pair too).
struct Netns {
    name: String,
    host_ip: String,
}

impl Netns {
    fn new() -> Netns {
        support::require("ip", "iproute2");
        support::require("iptables", "iptables");
        let pid = std::process::id();
        let name = format!("cc-ipt-{pid}");
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("run ip netns add");
        assert!(
            ok.success(),
            "cannot create network namespace {name} (root and iproute2 are needed)"
        );
        let ns = Netns {
            name: name.clone(),
            host_ip: format!("10.253.{}.1", pid % 250),
        };
        let ns_ip = format!("10.253.{}.2", pid % 250);
        let (host_if, ns_if) = (
            format!("ccv{}h", pid % 100_000),
            format!("ccv{}n", pid % 100_000),
        );
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        run(&["ip", "link", "set", &ns_if, "netns", &name]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/30", ns.host_ip),
            "dev",
            &host_if,
        ]);
        run(&["ip", "link", "set", &host_if, "up"]);
        let exec = ["ip", "netns", "exec", name.as_str()];
        let in_ns = |rest: &[&str]| run(&[&exec[..], rest].concat());
        in_ns(&["ip", "addr", "add", &format!("{ns_ip}/30"), "dev", &ns_if]);
        in_ns(&["ip", "link", "set", &ns_if, "up"]);
        in_ns(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn nat_rules(&self) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "iptables", "-t", "nat", "-S"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Relays `host_ip:<port>` to the API server on loopback, which the namespace cannot reach;
/// returns a kubeconfig that goes through it.
async fn kubeconfig_via(host_ip: &str, dir: &Path) -> PathBuf {
    let env = k8s_testenv::env();
    let text = std::fs::read_to_string(env.kubeconfig()).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("server in kubeconfig")
        .to_owned();
    let listener = TcpListener::bind((host_ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let server = server.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&server).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let mut doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let cluster = &mut doc["clusters"][0]["cluster"];
    cluster["server"] = format!("https://{host_ip}:{port}").into();
    // The serving certificate names 127.0.0.1; the relay changes only the route.
    cluster["tls-server-name"] = "127.0.0.1".into();
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_saphyr::to_string(&doc).unwrap()).unwrap();
    path
}

async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn record(client: &kube::Client) -> Option<TunnelPortRecord> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "kubeedge")
        .get_opt("tunnelport")
        .await
        .ok()??;
    TunnelPortRecord::from_annotation(
        cm.metadata
            .annotations
            .as_ref()?
            .get("tunnelportrecord.kubeedge.io")
            .map(String::as_str),
    )
    .ok()
}

async fn kubelet_port(client: &kube::Client, node: &str) -> Option<i32> {
    let n = Api::<Node>::all(client.clone()).get(node).await.ok()?;
    Some(n.status?.daemon_endpoints?.kubelet_endpoint?.port)
}

fn config(dir: &Path) -> CloudCoreConfig {
    let mut c = support::testenv_config(dir);
    c.modules.iptables_manager.enable = true;
    c.modules.iptables_manager.mode = IptablesMode::External;
    c
}

async fn create_edge_node(client: &kube::Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/edge": ""}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = serde_json::json!({"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A running `kubeedge=cloudcore` pod in `kubeedge` with pod IP `ip`, on a cloud Node (the
/// manager programs only the record entries of live cloudcore pods). The test API server has
/// no scheduler or kubelet: the binding and the status are written as an administrator.
async fn cloudcore_pod(client: &kube::Client, name: &str, ip: &str) {
    let node = format!("{name}-host");
    let nodes: Api<Node> = Api::all(client.clone());
    let host: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": node, "labels": {"node-role.kubernetes.io/control-plane": ""}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &host).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kubeedge");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubeedge": "cloudcore"}},
        "spec": {"nodeName": node, "containers": [{"name": "cloudcore", "image": "cloudcore"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = serde_json::json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

#[actix_rt::test]
async fn external_mode_should_record_the_port_and_the_iptables_manager_should_keep_its_rule() {
    test_tiers::require!(ApiServer, Root);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let ns = Netns::new();
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let kubeedge: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kubeedge"}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &kubeedge)
        .await;
    let dir = std::env::temp_dir().join(format!("iptables-external-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // cloudcore in external mode writes its record although it runs no iptables itself.
    let core = CloudCore::start(&config(&dir), Some(client.clone()), &Metrics::default())
        .await
        .expect("cloudcore starts");
    let r = record(&client).await.expect("tunnelport record written");
    assert_eq!(r.ip_tunnel_port.get("127.0.0.1"), Some(&10351), "{r:?}");

    // An edge whose tunnel connects gets the negotiated port on its Node, not 10003.
    let node = "iptables-external-edge";
    create_edge_node(&client, node).await;
    let hub = core.hub().expect("cloudhub").clone();
    let https = core.addresses().https.expect("https address");
    let certs = bootstrap(&format!("https://{https}"), &hub.token(), node)
        .await
        .expect("edge bootstrap");
    let material = TlsMaterial {
        cert_chain: vec![CertificateDer::from(certs.cert_der.clone())],
        key: PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(certs.key_der.clone())),
        ca: vec![CertificateDer::from(certs.ca_der.clone())],
    };
    let tunnel = core.addresses().tunnel.expect("tunnel address");
    let agent = StreamAgent::new(
        EdgeStreamConfig {
            enable: true,
            server: format!("127.0.0.1:{}", tunnel.port()),
            ..EdgeStreamConfig::default()
        },
        AgentOptions::new(node, "127.0.0.1"),
        edge::stream::client_tls(&material).unwrap(),
    )
    .spawn();
    eventually("the negotiated port on the Node", async || {
        (kubelet_port(&client, node).await? == 10351).then_some(())
    })
    .await;
    let stream_port = core.addresses().stream.expect("stream address").port();

    // The iptables-manager binary, in the namespace, programs what internal mode would, for
    // the entry of a live cloudcore pod.
    let id = std::process::id();
    cloudcore_pod(&client, &format!("cloudcore-a-{id}"), "127.0.0.1").await;
    let kubeconfig = kubeconfig_via(&ns.host_ip, &dir).await;
    let log = std::fs::File::create(dir.join("iptables-manager.log")).unwrap();
    let mut manager = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(binary())
        .args(["iptables-manager", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--forwardport", &stream_port.to_string()])
        .env("POD_NAMESPACE", "kubeedge")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start iptables-manager");
    let log_tail = || std::fs::read_to_string(dir.join("iptables-manager.log")).unwrap_or_default();
    let want = format!(
        "-A TUNNEL-PORT -p tcp -m addrtype ! --dst-type LOCAL -m tcp --dport 10351 -j DNAT --to-destination 127.0.0.1:{stream_port}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ns.nat_rules().contains(&want) {
        assert!(
            Instant::now() < deadline,
            "no DNAT rule; rules:\n{}\nmanager log:\n{}",
            ns.nat_rules(),
            log_tail()
        );
        assert!(
            manager.try_wait().unwrap().is_none(),
            "iptables-manager exited:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rules = ns.nat_rules();
    for jump in ["OUTPUT", "PREROUTING"] {
        assert!(
            rules.contains(&format!(
                "-A {jump} -m comment --comment \"kubeedge tunnel port\" -j TUNNEL-PORT"
            )),
            "{rules}"
        );
    }

    // A second cloudcore's entry appears; the first one's port changes: the rules follow.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "kubeedge");
    let mut changed = record(&client).await.unwrap();
    changed.ip_tunnel_port.insert("127.0.0.1".into(), 10360);
    changed.ip_tunnel_port.insert("10.9.9.9".into(), 10361);
    let patch = serde_json::json!({"metadata": {"annotations": {
        "tunnelportrecord.kubeedge.io": changed.to_annotation(),
    }}});
    cms.patch("tunnelport", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // 10.9.9.9 is no cloudcore pod's address yet: no rule for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ns.nat_rules().contains("--dport 10360 ") {
        assert!(
            Instant::now() < deadline,
            "no rule for 10360:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!ns.nat_rules().contains("10.9.9.9"), "{}", ns.nat_rules());
    assert!(
        log_tail().contains("its IP is not a live cloudcore pod's"),
        "{}",
        log_tail()
    );
    cloudcore_pod(&client, &format!("cloudcore-b-{id}"), "10.9.9.9").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rules = ns.nat_rules();
        if rules.contains(&format!(
            "--dport 10360 -j DNAT --to-destination 127.0.0.1:{stream_port}"
        )) && rules.contains(&format!(
            "--dport 10361 -j DNAT --to-destination 10.9.9.9:{stream_port}"
        )) && !rules.contains("--dport 10351 ")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rules did not follow the record:\n{rules}\nmanager log:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // SIGTERM: the chain and its jumps are removed and the manager exits cleanly.
    run(&["kill", "-TERM", &manager.id().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = manager.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "iptables-manager did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "exit {status}:\n{}", log_tail());
    let rules = ns.nat_rules();
    assert!(!rules.contains("TUNNEL-PORT"), "{rules}");

    drop(agent);
    core.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
