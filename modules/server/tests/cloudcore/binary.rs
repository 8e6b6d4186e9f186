//! The cloudcore binary as a process: it starts with the default configuration against the real
//! API server and serves every port, refuses bad configuration files with the documented
//! messages, runs the demo, stops on SIGTERM within 5 s without losing an acknowledged
//! message, and loses nothing it wrote to an edge before a crash (SIGKILL) that came before the
//! edge's acknowledgement.

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kubeedge_api::reliablesyncs::ObjectSync;

use crate::support::binary;

/// A running cloudcore process and where it listens; killed on drop.
pub(crate) struct Cloudcore {
    child: Child,
    dir: tempdir::TempDir,
    ports: Ports,
}

#[derive(Clone, Copy, Debug)]
struct Ports {
    websocket: u16,
    https: u16,
    tunnel: u16,
    stream: u16,
    monitor: u16,
}

mod tempdir {
    use std::path::{Path, PathBuf};

    /// A folder removed on drop.
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn new(prefix: &str) -> Self {
            let p = std::env::temp_dir().join(format!("{prefix}-{}", beehive::new_id()));
            std::fs::create_dir_all(&p).expect("temp dir");
            TempDir(p)
        }
        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The default configuration with free ports, a fresh certificate folder and the test API
/// server's kubeconfig and stream certificates.
fn config(
    dir: &Path,
    ports: Ports,
    adjust: impl FnOnce(&mut cloudcore_server::config::CloudCoreConfig),
) -> String {
    let env = k8s_testenv::env();
    let pki = env.pki();
    let mut c = cloudcore_server::config::CloudCoreConfig::default();
    c.kube_api_config.kube_config = env.kubeconfig().display().to_string();
    c.common_config.monitor_server.bind_address = format!("127.0.0.1:{}", ports.monitor);
    // Read without credentials here; the monitor topic tests the Webhook default.
    c.common_config.monitor_server.authorization.mode =
        Some(cloudcore_server::config::MonitorAuthorizationMode::AlwaysAllow);
    c.replicas.address = crate::support::replica_address();
    let hub = &mut c.modules.cloud_hub;
    hub.advertise_address = vec!["127.0.0.1".into()];
    hub.websocket.address = "127.0.0.1".into();
    hub.websocket.port = ports.websocket;
    hub.https.address = "127.0.0.1".into();
    hub.https.port = ports.https;
    hub.tls_ca_file = dir.join("ca/rootCA.crt");
    hub.tls_ca_key_file = dir.join("ca/rootCA.key");
    hub.tls_cert_file = dir.join("certs/server.crt");
    hub.tls_private_key_file = dir.join("certs/server.key");
    hub.unixsocket.address = format!("unix://{}", dir.join("kubeedge.sock").display());
    let s = &mut c.modules.cloud_stream;
    s.enable = true;
    s.tunnel_port = u32::from(ports.tunnel);
    s.stream_port = u32::from(ports.stream);
    s.tls_tunnel_ca_file = dir.join("none").display().to_string();
    s.tls_tunnel_cert_file = dir.join("none").display().to_string();
    s.tls_tunnel_private_key_file = dir.join("none").display().to_string();
    s.tls_stream_ca_file = pki.join("ca.crt").display().to_string();
    s.tls_stream_cert_file = pki.join("stream.crt").display().to_string();
    s.tls_stream_private_key_file = pki.join("stream.key").display().to_string();
    c.modules.iptables_manager.enable = false;
    adjust(&mut c);
    serde_saphyr::to_string(&c).expect("yaml")
}

impl Cloudcore {
    async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Starts the binary with the test configuration changed by `adjust`. Free ports are
    /// picked by binding port 0 and releasing it, so another process can take one before
    /// cloudcore binds it: a start that fails on a taken port is retried with new ports.
    pub(crate) async fn start_with(
        adjust: impl Fn(&mut cloudcore_server::config::CloudCoreConfig),
    ) -> Self {
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        for _attempt in 0..3 {
            let dir = tempdir::TempDir::new("cloudcore-bin");
            let p = edgecore_interop::listen_ports(5).expect("free ports");
            let ports = Ports {
                websocket: p[0],
                https: p[1],
                tunnel: p[2],
                stream: p[3],
                monitor: p[4],
            };
            let path = dir.path().join("cloudcore.yaml");
            std::fs::write(&path, config(dir.path(), ports, &adjust)).expect("write config");
            let log = std::fs::File::create(dir.path().join("cloudcore.log")).expect("log file");
            let child = Command::new(binary())
                .arg("--config")
                .arg(&path)
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("start cloudcore");
            let mut cloud = Cloudcore { child, dir, ports };
            match cloud.wait_ready(Duration::from_secs(30)).await {
                Ok(()) => return cloud,
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!("cloudcore did not become ready; log:\n{log}"),
            }
        }
        panic!("cloudcore found a port taken three times in a row");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cloudcore.log")).unwrap_or_default()
    }

    /// SIGKILL (a crash: nothing is flushed), then the same binary on the same configuration
    /// and ports, until ready.
    async fn crash_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("cloudcore.log"))
            .expect("log file");
        self.child = Command::new(binary())
            .arg("--config")
            .arg(self.dir.path().join("cloudcore.yaml"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("restart cloudcore");
        if let Err(log) = self.wait_ready(Duration::from_secs(30)).await {
            panic!("cloudcore did not become ready after the restart; log:\n{log}");
        }
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        self.get_as(path, None)
    }

    /// `GET path` on the monitor server with `token` as the bearer token.
    pub(crate) fn get_as(&self, path: &str, token: Option<&str>) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.ports.monitor)).ok()?;
        use std::io::Write;
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        Some((
            status,
            out.split_once("\r\n\r\n")
                .map(|(_, b)| b.to_owned())
                .unwrap_or_default(),
        ))
    }

    /// Waits for `/readyz`; `Err(log)` when the process exits or `limit` passes first.
    async fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let began = Instant::now();
        while began.elapsed() < limit {
            if let Some((200, _)) = self.get("/readyz") {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited with {status}:\n{}", self.log()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("not ready within {limit:?}:\n{}", self.log()))
    }

    fn token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ca/tokendata"))
            .expect("token file")
            .trim()
            .to_owned()
    }

    async fn sigterm(&mut self) -> Duration {
        let began = Instant::now();
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success());
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(
                    status.success(),
                    "cloudcore exited with {status}; log:\n{}",
                    self.log()
                );
                return began.elapsed();
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "cloudcore ignored SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cloudcore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_handshake(port: u16, client: Arc<rustls::ClientConfig>) -> Result<(), String> {
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut conn = rustls::ClientConnection::new(client, name).map_err(|e| e.to_string())?;
    let mut sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[tokio::test]
async fn the_binary_starts_against_the_api_server_and_serves_all_its_ports() {
    test_tiers::require!(ApiServer);
    let cloud = Cloudcore::start().await;
    let (status, body) = cloud.get("/healthz").expect("healthz");
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, metrics) = cloud.get("/metrics").expect("metrics");
    assert_eq!(status, 200);
    for family in [
        "KubeEdge_CloudHub_connected_nodes 0",
        "beehive_mailbox_depth{module=\"cloudhub\"}",
        "beehive_mailbox_capacity{module=\"edgecontroller\"} 1024",
        "cloudstream_tunnels 0",
        "edgecontroller_queue_depth{kind=\"patchNode\"}",
        "edgecontroller_requests_rejected_total{kind=\"patchNode\",reason=\"node_share\"} 0",
        "devicecontroller_requests_rejected_total{kind=\"updateDeviceStatus\",reason=\"queue_full\"} 0",
        "synccontroller_superseded_dropped_total 0",
        "cloudhub_certserver_unauthorized_total 0",
        "cloudhub_messages_dropped_total{reason=\"queue_full\"} 0",
        "cloudhub_connection_tasks 0",
        "cloudcore_listener_connections{listener=\"cloudhub_websocket\"} 0",
        "cloudcore_listener_refused_total{listener=\"cloudstream_tunnel\",reason=\"per_ip\"} 0",
        "cloudcore_listener_preauth_timeouts_total{listener=\"cloudstream_stream\"} 0",
    ] {
        assert!(
            metrics.contains(family),
            "{family} missing from /metrics:\n{metrics}"
        );
    }
    // Off by default (featureGates.requireAuthorization): the modules of the gate do not run.
    for module in ["csrapprover_", "policycontroller_"] {
        assert!(
            !metrics.contains(module),
            "{module}* with the gate off:\n{metrics}"
        );
    }
    // KubeEdge's default `unixsocket.enable: true`: the CSI driver's socket, owner only.
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let socket = std::fs::metadata(cloud.dir.path().join("kubeedge.sock")).expect("the socket");
    assert!(socket.file_type().is_socket());
    assert_eq!(socket.permissions().mode() & 0o777, 0o600);
    assert!(metrics.contains("udsserver_requests_total{outcome=\"answered\"} 0"));

    // With Kubernetes the CA lives in Secret kubeedge/casecret (created at first start).
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(k8s_testenv::client().await, "kubeedge");
    let data = secrets
        .get("casecret")
        .await
        .expect("casecret")
        .data
        .expect("data");
    let ca =
        pki::CertificateAuthority::from_der(data["cadata"].0.clone(), data["cakeydata"].0.clone())
            .unwrap();
    let anonymous = Arc::new(pki::tls::client_config(ca.cert_der(), None).unwrap());
    tls_handshake(cloud.ports.https, anonymous.clone()).expect("https handshake");
    // WebSocket and tunnel demand a client certificate signed by the CA.
    let edge = ca.issue(&pki::IssueOptions::edge("edge-x")).unwrap();
    let with_cert = Arc::new(
        pki::tls::client_config(ca.cert_der(), Some((&edge.cert_der, &edge.key_der))).unwrap(),
    );
    tls_handshake(cloud.ports.websocket, with_cert.clone())
        .expect("websocket handshake with an edge certificate");
    tls_handshake(cloud.ports.tunnel, with_cert)
        .expect("tunnel handshake with an edge certificate");
    // The stream server presents the certificate the API server trusts.
    let pki_dir = k8s_testenv::env().pki();
    let apiserver_ca = pem_file_der(&pki_dir.join("ca.crt"));
    let kubelet_client = (
        pem_file_der(&pki_dir.join("kubelet-client.crt")),
        pem_file_der(&pki_dir.join("kubelet-client.key")),
    );
    let apiserver = Arc::new(
        pki::tls::client_config(&apiserver_ca, Some((&kubelet_client.0, &kubelet_client.1)))
            .unwrap(),
    );
    tls_handshake(cloud.ports.stream, apiserver)
        .expect("stream server handshake as the API server");
    assert!(cloud.log().contains("cloudcore started"), "{}", cloud.log());
}

/// The DER of the first PEM block of a file.
fn pem_file_der(path: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(path).expect("pem file");
    pki::first_pem_der(&text).expect("a PEM block")
}

fn run_with_config(text: &str) -> (i32, String) {
    let dir = tempdir::TempDir::new("cloudcore-badcfg");
    let path = dir.path().join("cloudcore.yaml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(binary())
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_configuration_files_are_refused_naming_the_field() {
    let cases = [
        (
            "modules:\n  cloudHub:\n    advertiseAddress: [127.0.0.1]\n    nodeLimt: 5\n",
            "unknown field: modules.cloudHub.nodeLimt",
        ),
        (
            "modules:\n  cloudHub:\n    advertiseAddress: [127.0.0.1]\n    keepaliveInterval: soon\n",
            "modules.cloudHub.keepaliveInterval: invalid u32",
        ),
        (
            "modules:\n  cloudHub:\n    advertiseAddress: []\n",
            "modules.cloudHub: advertiseAddress must not be empty",
        ),
        (
            "modules:\n  cloudHub: {advertiseAddress: [127.0.0.1]}\n  nodeUpgradeJobController: {enable: true}\n",
            "modules.nodeUpgradeJobController.enable: this module is not available",
        ),
        (
            "modules:\n  cloudHub: {advertiseAddress: [127.0.0.1]}\n  edgeController: {enable: false}\n  router: {enable: true}\n",
            "modules.router.enable: the router learns its rules from modules.edgeController",
        ),
        ("kind: EdgeCore\n", "kind: must be CloudCore"),
        ("[1, 2]\n", "expected mapping start"),
    ];
    for (yaml, want) in cases {
        let (code, stderr) = run_with_config(yaml);
        assert_eq!(code, 1, "{yaml}: {stderr}");
        assert!(
            stderr.contains(want),
            "for {yaml:?} expected {want:?} in {stderr:?}"
        );
    }
    let out = Command::new(binary())
        .args(["--config", "/nonexistent/cloudcore.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/cloudcore.yaml")
    );
}

#[test]
fn defaultconfig_and_minconfig_print_loadable_files() {
    for flag in ["--defaultconfig", "--minconfig"] {
        let out = Command::new(binary()).arg(flag).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.starts_with("apiVersion: cloudcore.config.kubeedge.io/v1alpha2"),
            "{text}"
        );
        cloudcore_server::config::CloudCoreConfig::from_yaml(&text)
            .unwrap_or_else(|e| panic!("{flag}: {e}"));
    }
}

#[test]
fn the_demo_completes_its_flow() {
    let out = Command::new(binary())
        .args(["--demo", "--demo-nodes", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "3 edge nodes bootstrapped their certificates and connected",
        "controller: edge-3 reports web-3 Running",
        "cloudhub: every node acknowledged its pod",
        "  | [edge-1] all good",
        "demo complete",
    ] {
        assert!(
            stdout.contains(line),
            "{line:?} missing from the demo output:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn sigterm_stops_within_5s_without_losing_an_acknowledged_message() {
    test_tiers::require!(ApiServer);
    let mut cloud = Cloudcore::start().await;
    let client = k8s_testenv::client().await;
    let node_name = format!("edge-{}", &beehive::new_id()[..8]);
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name, "labels": {"node-role.kubernetes.io/edge": ""}},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();

    let certs = edge::hub::bootstrap(
        &format!("https://127.0.0.1:{}", cloud.ports.https),
        &cloud.token(),
        &node_name,
    )
    .await
    .expect("bootstrap with the token");
    let config =
        edge::hub::HubClientConfig::new(&node_name, format!("127.0.0.1:{}", cloud.ports.websocket));
    let (edge, mut events) =
        edge::hub::HubClient::start(config, Arc::new(certs.client_tls().unwrap()));

    let ns = k8s_testenv::namespace("sigterm").await;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap();
    let pod = Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let rv = pod.metadata.resource_version.clone().unwrap();
    // The client acknowledges an insert as soon as it receives it.
    let received = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.recv().await {
            if let edge::hub::HubEvent::Message(m) = ev
                && m.route.resource == format!("{ns}/pod/web")
            {
                return m;
            }
        }
        panic!("event stream ended");
    })
    .await
    .unwrap_or_else(|_| panic!("pod never reached the edge; log:\n{}", cloud.log()));
    assert_eq!(received.header.resource_version, rv);
    // Wait until the hub has taken the ACK (its counter moved), not until it is recorded:
    // SIGTERM comes at once, and the record must still be written.
    // The test's edge is the only one of this cloudcore: the hub-wide sum is its count.
    let acked = "cloudhub_messages_acked_total";
    let deadline = Instant::now() + Duration::from_secs(10);
    while cloud
        .get("/metrics")
        .and_then(|(_, m)| sample(&m, acked))
        .unwrap_or(0.0)
        < 1.0
    {
        assert!(Instant::now() < deadline, "the ACK never reached the hub");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = cloud.sigterm().await;
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?}");
    edge.stop();

    let record = Api::<ObjectSync>::namespaced(client, &ns)
        .get(&format!("{node_name}.{uid}"))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the acknowledged pod has no ObjectSync: {e}; log:\n{}",
                cloud.log()
            )
        });
    assert_eq!(
        record.status.map(|s| s.object_resource_version).as_deref(),
        Some(rv.as_str()),
        "acknowledged version recorded"
    );
}

/// The first message about a new pod is written to the edge without waiting for its record
/// (created beside the write, the acknowledgement recorded after it). A crash after the write
/// and before the edge's acknowledgement loses nothing: after the restart the pod reaches the
/// edge again and its acknowledgement is recorded; and a pod deleted while cloudcore was down
/// after its record was created is deleted at the edge.
#[actix_rt::test]
async fn a_crash_between_writing_a_pod_and_its_acknowledgement_loses_nothing() {
    let mut cloud = Cloudcore::start().await;
    let client = k8s_testenv::client().await;
    let node_name = format!("edge-{}", &beehive::new_id()[..8]);
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name, "labels": {"node-role.kubernetes.io/edge": ""}},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let certs = edge::hub::bootstrap(
        &format!("https://127.0.0.1:{}", cloud.ports.https),
        &cloud.token(),
        &node_name,
    )
    .await
    .expect("bootstrap with the token");
    let mut config =
        edge::hub::HubClientConfig::new(&node_name, format!("127.0.0.1:{}", cloud.ports.websocket));
    // This edge acknowledges only when the test says so.
    config.auto_ack = false;
    config.backoff = beehive::Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_millis(500),
    };
    let (edge, mut events) =
        edge::hub::HubClient::start(config, Arc::new(certs.client_tls().unwrap()));
    let ns = k8s_testenv::namespace("crash").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let syncs = Api::<ObjectSync>::namespaced(client.clone(), &ns);
    let new_pod = |name: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "nginx"}]},
        }))
        .unwrap()
    };

    // Two pods reach the edge; neither is acknowledged. "gone"'s record exists (created beside
    // the write) before the crash.
    let kept = pods
        .create(&PostParams::default(), &new_pod("kept"))
        .await
        .unwrap();
    let gone = pods
        .create(&PostParams::default(), &new_pod("gone"))
        .await
        .unwrap();
    let m = next(
        &mut events,
        format!("{ns}/pod/kept"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(m.route.operation, "insert");
    next(
        &mut events,
        format!("{ns}/pod/gone"),
        Duration::from_secs(30),
    )
    .await;
    let gone_record = format!("{node_name}.{}", gone.metadata.uid.clone().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while syncs.get_opt(&gone_record).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "no record beside the write");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Crash before any acknowledgement; "gone" is deleted while cloudcore is down.
    let _ = cloud.child.kill();
    let _ = cloud.child.wait();
    // Gone at once (grace 0): with no kubelet, a graceful delete would leave the pod in the
    // API server, marked for deletion, until a kubelet confirmed it.
    let now = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("gone", &now).await.unwrap();
    cloud.crash_and_restart().await;

    // "kept" reaches the edge again, and its acknowledgement is recorded.
    let m = next(
        &mut events,
        format!("{ns}/pod/kept"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        m.header.resource_version,
        kept.metadata.resource_version.clone().unwrap()
    );
    edge.send(kubeedge_wire::hub::ack_for(&m)).await.unwrap();
    let kept_record = format!("{node_name}.{}", kept.metadata.uid.clone().unwrap());
    let rv = kept.metadata.resource_version.clone().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let recorded = syncs
            .get_opt(&kept_record)
            .await
            .unwrap()
            .and_then(|r| r.status)
            .map(|s| s.object_resource_version);
        if recorded.as_deref() == Some(rv.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the acknowledgement after the restart was not recorded ({recorded:?}); log:\n{}",
            cloud.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // "gone" is deleted at the edge: its record outlived the crash.
    let m = next(
        &mut events,
        format!("{ns}/pod/gone"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(m.route.operation, "delete", "{m}");
    edge.stop();
}

/// The next message for `resource` the edge receives, within `limit`.
async fn next(
    events: &mut tokio::sync::mpsc::Receiver<edge::hub::HubEvent>,
    resource: String,
    limit: Duration,
) -> beehive::Message {
    tokio::time::timeout(limit, async {
        while let Some(ev) = events.recv().await {
            if let edge::hub::HubEvent::Message(m) = ev
                && m.route.resource == resource
            {
                return m;
            }
        }
        panic!("event stream ended");
    })
    .await
    .unwrap_or_else(|_| panic!("{resource} never reached the edge"))
}

/// A sample's value in a Prometheus text exposition.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// Whether the server closes `sock` (EOF or reset) within `limit` without being sent anything.
fn closed_by_server(sock: &mut TcpStream, limit: Duration) -> bool {
    sock.set_read_timeout(Some(limit)).expect("timeout");
    let mut byte = [0u8; 1];
    match sock.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[tokio::test]
async fn listener_limits_from_the_config_file_hold_and_show_in_metrics() {
    test_tiers::require!(ApiServer);
    let cloud = Cloudcore::start_with(|c| {
        let per_ip = kubeedge_api::listener::ListenerLimits {
            max_unauthenticated_per_ip: 2,
            pre_auth_timeout_seconds: 3,
            ..Default::default()
        };
        c.modules.cloud_hub.websocket.limits = per_ip.clone();
        c.modules.cloud_stream.tunnel_limits = per_ip;
    })
    .await;
    for (port, listener) in [
        (cloud.ports.websocket, "cloudhub_websocket"),
        (cloud.ports.tunnel, "cloudstream_tunnel"),
    ] {
        // Three idle sockets from one address: two are admitted and wait for their TLS, one
        // is closed unread. Workers take accepted sockets in no fixed order, so which one is
        // refused is not known in advance.
        let mut socks: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let closed: Vec<bool> = socks
            .iter_mut()
            .map(|s| closed_by_server(s, Duration::from_millis(100)))
            .collect();
        assert_eq!(
            closed.iter().filter(|c| **c).count(),
            1,
            "{listener}: one of three idle sockets from one address is refused ({closed:?})"
        );
        let mut idle: Vec<TcpStream> = socks
            .into_iter()
            .zip(closed)
            .filter_map(|(s, c)| (!c).then_some(s))
            .collect();
        let (_, metrics) = cloud.get("/metrics").expect("metrics");
        let refused = format!(
            "cloudcore_listener_refused_total{{listener=\"{listener}\",reason=\"per_ip\"}}"
        );
        assert_eq!(sample(&metrics, &refused), Some(1.0), "{metrics}");
        let waiting =
            format!("cloudcore_listener_handshakes_in_progress{{listener=\"{listener}\"}}");
        assert_eq!(sample(&metrics, &waiting), Some(2.0), "{metrics}");
        // The pre-authentication deadline closes the idle ones and counts them.
        for sock in &mut idle {
            assert!(
                closed_by_server(sock, Duration::from_secs(5)),
                "{listener}: an idle socket is closed at the deadline"
            );
        }
        let timed_out =
            format!("cloudcore_listener_preauth_timeouts_total{{listener=\"{listener}\"}}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, metrics) = cloud.get("/metrics").expect("metrics");
            let done = sample(&metrics, &timed_out) == Some(2.0)
                && sample(&metrics, &waiting) == Some(0.0);
            if done {
                break;
            }
            assert!(Instant::now() < deadline, "{listener}: {metrics}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// cloudcore's API server client: every watch and request shares one HTTP/2 connection
/// (counted by a TCP relay in front of the API server; kube's HTTP/1.1 client opens one per
/// request in flight).
#[tokio::test]
async fn requests_in_flight_together_share_one_connection_to_the_api_server() {
    test_tiers::require!(ApiServer);
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{ListParams, WatchParams};
    let mut config = k8s_testenv::config().await;
    let port = config.cluster_url.port_u16().expect("API server port");
    let relay = edgecore_interop::Balancer::start(
        "127.0.0.1:0".parse().unwrap(),
        vec![format!("127.0.0.1:{port}").parse().unwrap()],
    )
    .await
    .unwrap();
    config.cluster_url = format!("https://{}", relay.addr()).parse().unwrap();
    let namespaces: Api<Namespace> = Api::all(cloudcore_server::apiclient::client(config).unwrap());
    // A watch holds its stream open while 64 lists run at once.
    let mut watch = namespaces
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .expect("watch")
        .boxed();
    let params = ListParams::default().limit(1);
    let lists = futures::future::join_all((0..64).map(|_| namespaces.list(&params))).await;
    assert!(lists.iter().all(Result::is_ok), "every list answered");
    assert!(watch.next().await.is_some(), "the watch streams");
    assert_eq!(
        relay.active(),
        vec![1],
        "one connection for the watch and 64 concurrent lists"
    );
}

/// Watches whose readers fall behind hold only their own streams: on the one HTTP/2 connection,
/// four watches left unread with more than the connection's worth of events waiting must not
/// stop a request beside them. With the connection window smaller than the streams' windows
/// together (hyper's defaults: 5 MiB against 2 MiB a stream), the unread events took the whole
/// connection window and every other watch and answer on the connection stopped for good — a
/// controller that waits for an answer while its own watch fills never got it.
#[tokio::test]
async fn watches_left_unread_do_not_stop_the_requests_beside_them() {
    test_tiers::require!(ApiServer);
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{ListParams, WatchParams};
    let ns = k8s_testenv::namespace("h2-window").await;
    let admin: Api<ConfigMap> = Api::namespaced(k8s_testenv::client().await, &ns);
    // 10 ConfigMaps of 900 KiB: each watch from "0" has ~9 MiB of events to send.
    let data = "x".repeat(900 * 1024);
    for i in 0..10 {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("big-{i}")},
            "data": {"blob": data},
        }))
        .unwrap();
        admin
            .create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let client = cloudcore_server::apiclient::client(k8s_testenv::config().await).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let mut unread = Vec::new();
    for _ in 0..4 {
        let watch = cms
            .watch(&WatchParams::default().timeout(120), "0")
            .await
            .expect("watch");
        unread.push(watch);
    }
    // Time for the API server to fill every window it is given.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Stalled for good, this list never returns: the deadline only bounds the failure.
    let listed = tokio::time::timeout(
        Duration::from_secs(60),
        cms.list(&ListParams::default().limit(2)),
    )
    .await
    .expect("a list answered beside four unread watches")
    .expect("list");
    assert_eq!(listed.items.len(), 2);
    drop(unread);
}
