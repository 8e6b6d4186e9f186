//! Interop with an unmodified KubeEdge edgecore (v1.23 line, /work/shared/peers/edgecore):
//! it bootstraps its certificate from our certificate server with our token, connects to our
//! WebSocket, keeps alive, receives a downstream update and acknowledges it.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use beehive::{Content, Message};
use support::*;

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers/edgecore")
}

/// The edgecore binary, unpacked once into a cache folder outside the repo.
fn edgecore() -> PathBuf {
    let cache = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache/cloudcore-edgecore");
    let bin = cache.join("edgecore-16cd8548");
    if !bin.exists() {
        std::fs::create_dir_all(&cache).unwrap();
        let xz = std::fs::read_dir(shared())
            .expect("shared/peers/edgecore")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "xz"))
            .expect("the edgecore archive");
        let tmp = cache.join(format!("edgecore.{}.tmp", std::process::id()));
        let out = std::fs::File::create(&tmp).unwrap();
        let status = Command::new("xz")
            .arg("-dc")
            .arg(&xz)
            .stdout(out)
            .status()
            .expect("xz");
        assert!(status.success());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
    }
    bin
}

struct Edgecore(Child);

impl Drop for Edgecore {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[actix_rt::test]
async fn real_edgecore_bootstraps_connects_keeps_alive_and_acknowledges() {
    let mut h = Harness::start().await;
    let home = TempDir::new("edgecore-home");
    let template = std::fs::read_to_string(shared().join("edgecore.yaml")).unwrap();
    let config = template
        .replace("@EDGECORE_HOME@", &home.0.display().to_string())
        .replace("@TOKEN@", &h.hub.token())
        .replace(
            "https://127.0.0.1:10002",
            &format!("https://127.0.0.1:{}", h.https.port()),
        )
        .replace(
            "server: 127.0.0.1:10000",
            &format!("server: 127.0.0.1:{}", h.ws.port()),
        )
        // Only the hub is under test here: no tunnel, no local metaserver port.
        .replace(
            "  edgeStream:\n    enable: true",
            "  edgeStream:\n    enable: false",
        )
        .replace(
            "    metaServer:\n      enable: true",
            "    metaServer:\n      enable: false",
        );
    let file = home.0.join("edgecore.yaml");
    std::fs::write(&file, config).unwrap();
    let log = std::fs::File::create(home.0.join("edgecore.log")).unwrap();
    let child = Command::new(edgecore())
        .arg("--config")
        .arg(&file)
        .arg("--v=4")
        .env("CHECK_EDGECORE_ENVIRONMENT", "false")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("start edgecore");
    let _edge = Edgecore(child);
    let dump = || std::fs::read_to_string(home.0.join("edgecore.log")).unwrap_or_default();

    // Certificate bootstrap, then the WebSocket session.
    let ev = tokio::time::timeout(Duration::from_secs(60), h.controllers.recv())
        .await
        .unwrap_or_else(|_| panic!("edgecore did not connect; its log:\n{}", dump()))
        .unwrap();
    assert_eq!(
        (ev.route.resource.as_str(), ev.route.operation.as_str()),
        ("node/edge-node-1", "connected")
    );
    assert!(home.0.join("run/certs/server.crt").exists());
    wait_until(|| {
        h.hub
            .node_stats("edge-node-1")
            .is_some_and(|s| s.received >= 1)
    })
    .await;

    // An ACK-class update is stored by its metamanager and acknowledged.
    let cm = Message::new()
        .with_route("edgecontroller", "resource", "node/edge-node-1/default/configmap/interop", "update")
        .with_resource_version("42")
        .with_content(
            Content::json(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "interop", "namespace": "default", "uid": "interop-uid", "resourceVersion": "42"},
                "data": {"k": "v"}
            }))
            .unwrap(),
        );
    h.downstream(cm).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while h.hub.node_stats("edge-node-1").is_none_or(|s| s.acked != 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ACK from edgecore; its log:\n{}",
            dump()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.hub.flush_records().await;
    let key = cloudhub::SyncKey {
        node: "edge-node-1".into(),
        namespace: "default".into(),
        uid: "interop-uid".into(),
    };
    assert_eq!(h.store.record(&key).map(|r| r.1).as_deref(), Some("42"));
    assert_eq!(
        h.hub.node_stats("edge-node-1").unwrap().retried,
        0,
        "acknowledged within the first 5 s"
    );
}
