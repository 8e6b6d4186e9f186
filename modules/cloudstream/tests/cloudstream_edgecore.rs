//! Interop with an unmodified KubeEdge edgecore (its edgestream, Go + gorilla) against our
//! tunnel: logs, follow with the client going away, metrics and exec, bytes unchanged.
//!
//! The binary is `shared/peers/edgecore/*.xz` beside the repository; it is unpacked into
//! `~/.cache/cloudcore-edgecore` on first use. The test fails loudly when it is missing.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::BytesMut;
use cloudstream::http1::{self, BodyReader};
use support::{Cloud, FakeKubelet, channel_frame, exec_request, kubelet};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODE: &str = "edge-node-1";
const XZ: &str = "edgecore-v1.23.0-beta.0.150-linux-amd64.xz";

fn edgecore_binary() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        root.join("../shared/peers/edgecore").join(XZ),
        PathBuf::from("/work/shared/peers/edgecore").join(XZ),
    ];
    let xz = candidates
        .iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("edgecore archive not found in {candidates:?}"));
    let cache = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache/cloudcore-edgecore");
    std::fs::create_dir_all(&cache).unwrap();
    let bin = cache.join("edgecore-16cd8548");
    if !bin.exists() {
        let tmp = cache.join(format!("edgecore.{}.tmp", std::process::id()));
        let out = std::fs::File::create(&tmp).unwrap();
        let ok = std::process::Command::new("xz")
            .arg("-dc")
            .arg(xz)
            .stdout(out)
            .status()
            .expect("run xz");
        assert!(ok.success(), "xz -dc failed");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
    }
    bin
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// A running edgecore, killed on drop; its log stays in `home/edgecore.log`.
struct Edgecore {
    child: tokio::process::Child,
    home: PathBuf,
}

impl Edgecore {
    async fn start(cloud: &Cloud) -> Edgecore {
        let bin = edgecore_binary();
        let home = std::env::temp_dir().join(format!("cs-edgecore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(home.join("run/ca")).unwrap();
        std::fs::create_dir_all(home.join("run/certs")).unwrap();
        let cert = cloud.edge_ca.node(NODE);
        std::fs::write(
            home.join("run/ca/rootCA.crt"),
            pem("CERTIFICATE", &cloud.edge_ca.ca()),
        )
        .unwrap();
        std::fs::write(
            home.join("run/certs/server.crt"),
            pem("CERTIFICATE", &cert.cert_chain[0]),
        )
        .unwrap();
        std::fs::write(
            home.join("run/certs/server.key"),
            pem("PRIVATE KEY", cert.key.secret_der()),
        )
        .unwrap();
        let template = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/peers/edgecore/edgecore.yaml"),
        )
        .or_else(|_| std::fs::read_to_string("/work/shared/peers/edgecore/edgecore.yaml"))
        .expect("edgecore.yaml template");
        let config = template
            .replace("@EDGECORE_HOME@", home.to_str().unwrap())
            .replace("@TOKEN@", "unused.because.certificates.exist")
            .replace(
                "server: 127.0.0.1:10004",
                &format!("server: {}", cloud.tunnel_server()),
            )
            // Nothing listens there: the hub keeps retrying, which edgestream does not mind.
            .replace("server: 127.0.0.1:10000", "server: 127.0.0.1:9")
            .replace("https://127.0.0.1:10002", "https://127.0.0.1:9");
        let config_path = home.join("edgecore.yaml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(home.join("edgecore.log")).unwrap();
        let child = tokio::process::Command::new(bin)
            .arg("--config")
            .arg(&config_path)
            .arg("--v=4")
            .env("CHECK_EDGECORE_ENVIRONMENT", "false")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start edgecore");
        Edgecore { child, home }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.home.join("edgecore.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Edgecore {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        // Keep the folder (and the log) only when the test failed.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.home);
        }
    }
}

#[actix_rt::test]
async fn a_real_edgecore_should_serve_logs_metrics_and_exec_through_our_tunnel() {
    let cloud = Cloud::start().await;
    // edgecore relays to what the CONNECT URL names: 127.0.0.1:10350, as upstream's cloud sends.
    let kubelet = FakeKubelet::start_on("127.0.0.1:10350").await;
    cloud.pods.place("ns", "web", NODE);
    let edgecore = Edgecore::start(&cloud).await;
    assert!(
        cloud
            .handle
            .wait_for_session(NODE, Duration::from_secs(60))
            .await,
        "edgecore did not open a tunnel; its log:\n{}",
        edgecore.log_tail()
    );
    assert!(
        cloud
            .handle
            .wait_for_session("127.0.0.1", Duration::from_secs(1))
            .await,
        "nodeIP header"
    );

    // logs: the whole body, non-UTF-8 included (edgecore reads 256 bytes per DATA).
    let (head, body) = cloud.get("/containerLogs/ns/web/app?tailLines=5", "").await;
    assert_eq!(head.status, 200);
    assert_eq!(
        body,
        kubelet::log_body(),
        "edgecore log tail:\n{}",
        edgecore.log_tail()
    );

    // metrics: line relay with identity encoding, final newline added.
    let mut conn = cloud.api_conn().await;
    conn.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:10351\r\nAccept-Encoding: gzip\r\n\r\n",
    )
    .await
    .unwrap();
    let (head, body) = support::read_response(&mut conn).await;
    assert_eq!(head.status, 200);
    let mut want = kubelet::METRICS_BODY.to_vec();
    want.push(b'\n');
    assert_eq!(body, want);
    let metrics_req = kubelet
        .requests()
        .into_iter()
        .find(|r| r.path() == "/metrics")
        .unwrap();
    assert_eq!(
        metrics_req.headers.get_str("Accept-Encoding"),
        Some("identity")
    );

    // logs -f: lines stream; when the client goes away edgecore closes the kubelet request.
    let mut api = cloud.api_conn().await;
    api.write_all(b"GET /containerLogs/ns/web/app?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut api, &mut buf).await.unwrap();
    let mut follow = BodyReader::new(&head);
    kubelet.wait_followers(1).await;
    kubelet.push_line(b"from edgecore \xff\n");
    let mut got = Vec::new();
    while got.len() < 16 {
        let piece = tokio::time::timeout(
            Duration::from_secs(10),
            follow.next(&mut api, &mut buf, 4096),
        )
        .await
        .expect("followed line did not arrive")
        .unwrap()
        .unwrap();
        got.extend_from_slice(&piece);
    }
    assert_eq!(got, b"from edgecore \xff\n");
    drop(api);
    assert!(
        kubelet
            .wait_followers_gone(1, Duration::from_secs(10))
            .await,
        "edgecore kept the follow open"
    );

    // exec over WebSocket v5: raw both ways, the kubelet's 101 head included.
    let mut conn = cloud.api_conn().await;
    let (head, _) = exec_request(
        "/exec/ns/web/app?command=cat&input=1&output=1&error=1",
        "GET",
    );
    let mut opening = head;
    opening.extend_from_slice(&channel_frame(0, b"\x00\xff abc\n"));
    conn.write_all(&opening).await.unwrap();
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut closed_stdin = false;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "exec output did not arrive; got {:?}; kubelet saw {:?} / {:?}; edgecore log:\n{}",
                    String::from_utf8_lossy(&received),
                    kubelet.requests().last().map(|r| (r.method.clone(), r.target.clone(), r.headers.clone())),
                    kubelet.execs(),
                    edgecore.log_tail()
                )
            })
            .unwrap();
        if n == 0 {
            break;
        }
        received.extend_from_slice(&chunk[..n]);
        if !closed_stdin && received.windows(6).any(|w| w == b"got 7 ") {
            conn.write_all(&channel_frame(255, &[0])).await.unwrap();
            closed_stdin = true;
        }
    }
    let rec = kubelet
        .execs()
        .into_iter()
        .next()
        .expect("exec reached the kubelet");
    let mut sent = rec.head_sent.clone();
    sent.extend_from_slice(&rec.sent);
    assert_eq!(
        received, sent,
        "client must get exactly what the kubelet sent"
    );
    assert!(received.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
    assert!(String::from_utf8_lossy(&received).contains("NonZeroExitCode"));
}
