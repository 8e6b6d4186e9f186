//! End to end with the real API server: `kubectl logs` (plain and `-f`) and `kubectl exec`
//! reach the edge's kubelet through cloudstream, bytes unchanged; the Node's kubelet port is
//! set when the edge connects; the tunnel-port ConfigMap is negotiated and cleaned.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{self, FakeKubelet, Pki, kubelet, raw_dial, upgrade_request};
use beehive::Bus;
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamHandle, CloudStreamTls, ServerTls, TlsMaterial,
    Tuning, TunnelPortRecord,
};
use edge::stream::AgentHandle;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeedge_wire::tunnel::MessageType;
use tokio::io::AsyncReadExt;

fn env_stream_tls() -> TlsMaterial {
    let pki = k8s_testenv::env().pki();
    TlsMaterial::from_files(
        &pki.join("stream.crt"),
        &pki.join("stream.key"),
        &pki.join("ca.crt"),
    )
    .unwrap()
}

/// A Node at 127.0.0.1 reporting `port` as its kubelet port.
async fn create_node(client: &kube::Client, name: &str, port: u16) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/edge": ""}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = serde_json::json!({"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn kubelet_port(client: &kube::Client, name: &str) -> i32 {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    node.status
        .unwrap()
        .daemon_endpoints
        .unwrap()
        .kubelet_endpoint
        .unwrap()
        .port
}

/// A running pod `web` (container `app`) bound to `node`.
async fn create_pod(client: &kube::Client, ns: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = serde_json::json!({"status": {"phase": "Running",
        "containerStatuses": [{"name": "app", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}});
    pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

struct E2e {
    ns: String,
    handle: CloudStreamHandle,
    kubelet: FakeKubelet,
    _edge: AgentHandle,
    _bus: Bus,
}

/// Binds the API server's kubelet-client identity to `system:kubelet-api-admin`, as
/// kubeadm-made clusters do (the test certificate is also in `system:masters`, which the
/// stream server's SubjectAccessReviews allow anyway).
async fn grant_api_server_identity(client: &kube::Client) {
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cloudstream-test:kube-apiserver-kubelet-client"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}],
    }))
    .unwrap();
    match Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("cluster role binding: {e}"),
    }
}

/// cloudstream with the test environment's serving certificate and CA, a Node whose kubelet
/// port (10350 at first) the tunnel connect rewrites to the stream port, a pod on it, and an
/// edge agent relaying to a fake kubelet.
async fn setup() -> E2e {
    support::init_tracing();
    let client = k8s_testenv::client().await;
    grant_api_server_identity(&client).await;
    let ns = k8s_testenv::namespace("cs").await;
    let node = format!("edge-{ns}");
    let edge_ca = Pki::new("kubeedge-ca");
    let bus = Bus::new();
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(edge_ca.server()),
        stream: Some(ServerTls::Material(env_stream_tls())),
    };
    let cs = CloudStream::new(
        config,
        bus.endpoint("cloudStream"),
        Some(client.clone()),
        tls,
    )
    .unwrap();
    let handle = cs.handle();
    let port = handle.stream_addr().port();
    // No iptables here: the advertised port is the stream port itself.
    bus.register(cs.with_advertised_port(port)).unwrap();
    bus.start().unwrap();
    create_node(&client, &node, 10350).await;
    create_pod(&client, &ns, &node).await;
    let kubelet = FakeKubelet::start().await;
    let server = format!("127.0.0.1:{}", handle.tunnel_addr().port());
    let edge = support::start_agent(
        server,
        &node,
        "127.0.0.1",
        kubelet.addr,
        &edge_ca.node(&node),
    );
    assert!(edge.wait_connected(Duration::from_secs(10)).await);
    tokio::time::timeout(Duration::from_secs(20), async {
        while kubelet_port(&client, &node).await != i32::from(port) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the tunnel connect did not set the node's kubelet port");
    E2e {
        ns,
        handle,
        kubelet,
        _edge: edge,
        _bus: bus,
    }
}

fn kubectl() -> tokio::process::Command {
    let mut c = tokio::process::Command::from(k8s_testenv::env().kubectl());
    c.kill_on_drop(true);
    c
}

#[actix_rt::test]
async fn kubectl_logs_should_return_the_edge_body_unchanged() {
    test_tiers::require!(ApiServer);
    let e = setup().await;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        kubectl()
            .args([
                "logs",
                "-n",
                &e.ns,
                "web",
                "-c",
                "app",
                "--tail=10",
                "--timestamps",
            ])
            .output(),
    )
    .await
    .expect("kubectl logs hung")
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout,
        kubelet::log_body(),
        "kubectl must print the edge's bytes unchanged"
    );
    let seen = e.kubelet.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path(), format!("/containerLogs/{}/web/app", e.ns));
    assert!(
        seen[0].target.contains("tailLines=10") && seen[0].target.contains("timestamps=true"),
        "{}",
        seen[0].target
    );
    assert!(e.handle.counters().bytes_from_edge >= kubelet::log_body().len() as u64);
    // The API server's identity passed a SubjectAccessReview, not a bypass.
    assert!(e.handle.counters().authz_reviews >= 1);
    assert_eq!(e.handle.counters().authz_denied, 0);
}

#[actix_rt::test]
async fn kubectl_logs_follow_should_stream_lines_and_end_the_edge_request_on_interrupt() {
    test_tiers::require!(ApiServer);
    let e = setup().await;
    let mut child = kubectl()
        .args(["logs", "-f", "-n", &e.ns, "web"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    e.kubelet.wait_followers(1).await;
    let mut got = Vec::new();
    for line in [&b"first\n"[..], b"second \xff\xfe line\n", b"third\n"] {
        e.kubelet.push_line(line);
        let want = got.len() + line.len();
        tokio::time::timeout(Duration::from_secs(10), async {
            let mut chunk = [0u8; 256];
            while got.len() < want {
                let n = stdout.read(&mut chunk).await.unwrap();
                assert!(n > 0, "kubectl ended early");
                got.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .expect("line did not reach kubectl");
    }
    assert_eq!(got, b"first\nsecond \xff\xfe line\nthird\n");
    child.kill().await.unwrap();
    assert!(
        e.kubelet
            .wait_followers_gone(1, Duration::from_secs(15))
            .await,
        "the edge's kubelet request must end after kubectl goes away"
    );
}

#[actix_rt::test]
async fn kubectl_exec_should_relay_stdin_stdout_stderr_and_the_exit_code() {
    test_tiers::require!(ApiServer);
    let e = setup().await;
    let input: &[u8] = b"hello \xff\xfe\x00 edge\n";
    let mut child = kubectl()
        .args(["exec", "-i", "-n", &e.ns, "web", "-c", "app", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, input)
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl exec hung")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.stdout, input,
        "stdout must be the echoed bytes; stderr: {stderr}"
    );
    assert!(
        stderr.contains(&format!("got {} bytes", input.len())),
        "{stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(kubelet::EXIT_CODE as i32),
        "{stderr}"
    );
    // The fake records the exec when its connection ends, just after kubectl's.
    tokio::time::timeout(Duration::from_secs(5), async {
        while e.kubelet.execs().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("exec not recorded");
    let execs = e.kubelet.execs();
    assert_eq!(execs.len(), 1);
    assert!(
        execs[0]
            .target
            .starts_with(&format!("/exec/{}/web/app?", e.ns))
    );
    let req = &e.kubelet.requests()[0];
    assert_eq!(req.headers.get_str("Upgrade"), Some("SPDY/3.1"));
}

#[actix_rt::test]
async fn failed_node_update_should_send_close_connect_and_close_the_tunnel() {
    test_tiers::require!(ApiServer);
    support::init_tracing();
    let client = k8s_testenv::client().await;
    let edge_ca = Pki::new("kubeedge-ca");
    let bus = Bus::new();
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(edge_ca.server()),
        stream: Some(ServerTls::Material(env_stream_tls())),
    };
    let tuning = Tuning {
        node_update_interval: Duration::from_millis(100),
        node_update_deadline: Duration::from_millis(400),
        ..Tuning::default()
    };
    let cs = CloudStream::new(config, bus.endpoint("cloudStream"), Some(client), tls)
        .unwrap()
        .with_tuning(tuning);
    let handle = cs.handle();
    bus.register(cs).unwrap();
    bus.start().unwrap();
    let (head, tunnel, _) = raw_dial(
        handle.tunnel_addr().port(),
        &edge_ca.node("no-such-node"),
        // The peer address: with no Node there are no addresses to check another IP against.
        &upgrade_request(Some("no-such-node"), Some("127.0.0.1")),
    )
    .await
    .unwrap();
    assert_eq!(head.status, 101);
    let mut t = tunnel.unwrap();
    let m = t.next_tunnel().await.expect("CLOSE_CONNECT expected");
    assert_eq!((m.connect_id, m.kind), (0, MessageType::CloseConnect));
    assert_eq!(&m.data[..], b"failed to Update KubeletEndpoint Port");
    assert!(
        t.next_tunnel().await.is_none(),
        "tunnel must close after CLOSE_CONNECT"
    );
}

async fn record(client: &kube::Client) -> TunnelPortRecord {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "kubeedge")
        .get("tunnelport")
        .await
        .unwrap();
    TunnelPortRecord::from_annotation(
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("tunnelportrecord.kubeedge.io"))
            .map(String::as_str),
    )
    .unwrap()
}

/// Creates a running pod labelled `kubeedge=cloudcore` with `ip`, bound to `node`, and
/// deletes it.
async fn cloudcore_pod_lifecycle(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    ip: &str,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubeedge": "cloudcore"}},
        "spec": {"nodeName": node, "containers": [{"name": "cloudcore", "image": "cloudcore"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status =
        serde_json::json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    pods.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
}

/// One test owns the cluster-wide `kubeedge/tunnelport` ConfigMap.
#[actix_rt::test]
async fn tunnel_port_negotiation_and_cloudcore_pod_deletion_should_keep_the_record() {
    test_tiers::require!(ApiServer);
    support::init_tracing();
    let client = k8s_testenv::client().await;
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kubeedge"}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;

    let negotiate = cloudstream::negotiate::negotiate_tunnel_port;
    assert_eq!(negotiate(client.clone(), "10.1.1.1").await.unwrap(), 10351);
    assert_eq!(negotiate(client.clone(), "10.1.1.2").await.unwrap(), 10352);
    assert_eq!(negotiate(client.clone(), "10.1.1.1").await.unwrap(), 10351);
    // Concurrent negotiations get distinct ports (conflicts are retried, not fatal).
    let (a, b) = tokio::join!(
        negotiate(client.clone(), "10.1.1.3"),
        negotiate(client.clone(), "10.1.1.4")
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a, b);
    assert!([a, b].iter().all(|p| [10353, 10354].contains(p)));
    let r = record(&client).await;
    assert_eq!(r.ip_tunnel_port.len(), 4);

    // The record follows through the watch the iptables manager uses.
    let stop = tokio_util::sync::CancellationToken::new();
    let mut rx = cloudstream::negotiate::watch_record(
        client.clone(),
        stop.clone(),
        &tokio_util::task::TaskTracker::new(),
    );
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|r| r.as_ref().is_some_and(|r| r.ip_tunnel_port.len() == 4)),
    )
    .await
    .expect("record watch")
    .unwrap();

    // Deleting a kubeedge=cloudcore pod releases its IP, but only for a pod in cloudcore's
    // namespace bound to a Node that is not an edge.
    tokio::spawn(cloudstream::negotiate::release_deleted_cloudcores(
        client.clone(),
        "kubeedge".into(),
        stop.clone(),
    ));
    let cloud_node = "cloudstream-test-cloud-node";
    let edge_node = "cloudstream-test-edge-node";
    for (name, labels) in [
        (
            cloud_node,
            serde_json::json!({"node-role.kubernetes.io/control-plane": ""}),
        ),
        (
            edge_node,
            serde_json::json!({"node-role.kubernetes.io/edge": ""}),
        ),
    ] {
        let node: Node = serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "labels": labels}}),
        )
        .unwrap();
        match Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("node {name}: {e}"),
        }
    }
    let other_ns = k8s_testenv::namespace("cs-neg").await;
    // Two impostors that name the IPs of live cloudcores, then the real one.
    cloudcore_pod_lifecycle(&client, &other_ns, "cloudcore-x", cloud_node, "10.1.1.1").await;
    cloudcore_pod_lifecycle(&client, "kubeedge", "cloudcore-edge", edge_node, "10.1.1.3").await;
    cloudcore_pod_lifecycle(&client, "kubeedge", "cloudcore-0", cloud_node, "10.1.1.2").await;
    tokio::time::timeout(
        Duration::from_secs(15),
        rx.wait_for(|r| {
            r.as_ref()
                .is_some_and(|r| !r.ip_tunnel_port.contains_key("10.1.1.2"))
        }),
    )
    .await
    .expect("deleted cloudcore's IP not released")
    .unwrap();
    // The listener handles deletions in order: the impostors' came first and changed nothing.
    let r = record(&client).await;
    assert!(
        r.ip_tunnel_port.contains_key("10.1.1.3"),
        "a pod bound to an edge node must not release an IP"
    );
    assert_eq!(r.ip_tunnel_port.get("10.1.1.1"), Some(&10351));
    assert!(r.port.contains_key(&10352), "ports stay reserved");
    stop.cancel();
}
