//! Interop with an unmodified KubeEdge edgecore (v1.23.0-beta.0.150, `shared/peers/edgecore`)
//! against our cloudcore binary and a real kube-apiserver: bootstrap, keepalive, downstream
//! delivery with acknowledgements, edge and cloud restarts, and `kubectl logs/exec` through the
//! tunnel. One scenario at a time (edgecore's ports are fixed); see `edgecore-interop`.
//!
//! Run: `cargo test --test interop_edgecore` after `cargo build --example cloudcore` (plain
//! `cargo test` builds the example itself).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use edgecore_interop::kubelet::{self, EXIT_CODE};
use edgecore_interop::{EdgeHome, Interop, Stored, kubectl, kubectl_ok, kubectl_spawn, store_key};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Api;
use kubeedge_api::reliablesyncs::{ObjectSync, object_sync_name};
use tokio::io::AsyncReadExt;

/// What the edge should hold for one object: its uid and resourceVersion.
type Expected = BTreeMap<String, (String, String)>;

fn uid_rv(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.uid.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
    )
}

/// The objects of `ns` that must be on the edge now: pods bound to `node`, and the
/// ConfigMaps/Secrets named in `names` that exist in the API server.
async fn expected(
    client: &kube::Client,
    ns: &str,
    node: &str,
    configmaps: &[&str],
    secrets: &[&str],
) -> Result<Expected> {
    let mut want = Expected::new();
    for pod in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?
    {
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) {
            let name = pod.metadata.name.clone().unwrap_or_default();
            want.insert(store_key(ns, "pod", &name), uid_rv(&pod.metadata));
        }
    }
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for name in configmaps {
        if let Some(cm) = cms.get_opt(name).await? {
            want.insert(store_key(ns, "configmap", name), uid_rv(&cm.metadata));
        }
    }
    let secs = Api::<Secret>::namespaced(client.clone(), ns);
    for name in secrets {
        if let Some(s) = secs.get_opt(name).await? {
            want.insert(store_key(ns, "secret", name), uid_rv(&s.metadata));
        }
    }
    Ok(want)
}

/// `None` when the edge's objects in `ns` are exactly `want` (same keys, uids and versions).
fn difference(store: &BTreeMap<String, Stored>, want: &Expected) -> Option<String> {
    let mut diffs = Vec::new();
    for (key, (uid, rv)) in want {
        match store.get(key) {
            None => diffs.push(format!("missing {key} (uid {uid}, rv {rv})")),
            Some(s) if s.uid() != Some(uid) || s.resource_version() != Some(rv) => diffs.push(
                format!(
                    "{key}: edge has uid {:?} rv {:?}, API has uid {uid} rv {rv}",
                    s.uid(),
                    s.resource_version()
                ),
            ),
            Some(_) => {}
        }
    }
    for key in store.keys().filter(|k| !want.contains_key(*k)) {
        diffs.push(format!("stale {key}"));
    }
    (!diffs.is_empty()).then(|| diffs.join("; "))
}

/// Waits until the edge store for `ns` matches the API server; returns how long it took.
async fn converge(
    it: &mut Interop,
    ns: &str,
    configmaps: &[&str],
    secrets: &[&str],
    limit: Duration,
) -> Result<Duration> {
    let start = Instant::now();
    let client = it.client();
    let mut last = String::new();
    while start.elapsed() < limit {
        it.check_edge_alive()?;
        let want = expected(&client, ns, it.node(), configmaps, secrets).await?;
        match difference(&it.store().namespace(ns)?, &want) {
            None => return Ok(start.elapsed()),
            Some(d) => last = d,
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!("edge store did not converge within {limit:?}: {last}")
}

/// Waits until `key` is stored (and `check` holds for it).
async fn stored(
    it: &mut Interop,
    key: &str,
    limit: Duration,
    check: impl Fn(&Stored) -> bool,
) -> Result<Stored> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < limit {
        it.check_edge_alive()?;
        last = it.store().get(key)?;
        if let Some(s) = &last
            && check(s)
        {
            return Ok(s.clone());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{key} not stored as expected within {limit:?}; last seen: {last:?}")
}

async fn gone(it: &mut Interop, key: &str, limit: Duration) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if it.store().get(key)?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("{key} still stored after {limit:?}")
}

/// The acknowledged resourceVersion of `node.uid` in `ns` (`None` while there is no record).
async fn acked_rv(client: &kube::Client, ns: &str, node: &str, uid: &str) -> Result<Option<String>> {
    let rec = Api::<ObjectSync>::namespaced(client.clone(), ns)
        .get_opt(&object_sync_name(node, uid))
        .await?;
    Ok(rec.map(|r| r.status.unwrap_or_default().object_resource_version))
}

async fn wait_acked(client: &kube::Client, ns: &str, node: &str, uid: &str, rv: &str) -> Result<()> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(30) {
        last = acked_rv(client, ns, node, uid).await?;
        if last.as_deref() == Some(rv) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("ObjectSync {node}.{uid} status is {last:?}, want {rv}")
}

async fn wait_record_gone(client: &kube::Client, ns: &str, node: &str, uid: &str) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if acked_rv(client, ns, node, uid).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("ObjectSync {node}.{uid} still exists")
}

/// A pod bound to `node` that references the given ConfigMaps and Secrets (so edgecontroller
/// sends them to that node).
fn pod_yaml(ns: &str, name: &str, node: &str, configmaps: &[&str], secrets: &[&str]) -> String {
    let mut volumes = String::new();
    let mut mounts = String::new();
    for (i, cm) in configmaps.iter().enumerate() {
        volumes.push_str(&format!(
            "  - name: cm{i}\n    configMap:\n      name: {cm}\n      optional: true\n"
        ));
        mounts.push_str(&format!("    - name: cm{i}\n      mountPath: /cm/{i}\n"));
    }
    for (i, s) in secrets.iter().enumerate() {
        volumes.push_str(&format!(
            "  - name: s{i}\n    secret:\n      secretName: {s}\n      optional: true\n"
        ));
        mounts.push_str(&format!("    - name: s{i}\n      mountPath: /s/{i}\n"));
    }
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: {name}\n\
         spec:\n  nodeName: {node}\n  containers:\n  - name: app\n    image: registry.invalid/app:1\n    volumeMounts:\n{mounts}\
         {}",
        if volumes.is_empty() {
            String::new()
        } else {
            format!("  volumes:\n{volumes}")
        }
    )
}

async fn apply(yaml: &str) -> Result<()> {
    kubectl_ok(&["apply", "-f", "-"], Some(yaml.as_bytes())).await?;
    Ok(())
}

async fn k(args: &[&str]) -> Result<()> {
    kubectl_ok(args, None).await?;
    Ok(())
}

fn pem_der(path: &std::path::Path) -> Result<Vec<u8>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    pki::first_pem_der(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn count(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

#[tokio::test]
async fn bootstrap_uses_our_token_and_a_wrong_token_or_ca_hash_is_refused() -> Result<()> {
    let mut it = Interop::builder("interop-boot").start_cloud().await?;
    let client = it.client();
    let token = it.token()?;
    let ca_secret = Api::<Secret>::namespaced(client.clone(), "kubeedge")
        .get("casecret")
        .await?;
    let data = ca_secret.data.unwrap_or_default();
    let ca_der = data.get("cadata").context("cadata")?.0.clone();
    let ca_key = data.get("cakeydata").context("cakeydata")?.0.clone();
    let ca = pki::CertificateAuthority::from_der(ca_der.clone(), ca_key)?;
    let (hash, jwt) = pki::split_token(&token).context("token shape")?;
    ensure!(hash == ca.cert_sha256_hex(), "token names our CA");

    // A JWT signed with another key: our certificate server answers 401 and edgecore gives up
    // (it panics and exits: no retry without the moduleRestart feature gate).
    let wrong_jwt = format!(
        "{hash}.{}",
        pki::create_jwt(b"not the CA key", Duration::from_secs(3600))
    );
    let home = EdgeHome::new("interop-boot-wrong-jwt")?;
    let mut edge = it.launch_edge(&home, &wrong_jwt)?;
    let status = edge.wait_exit(Duration::from_secs(30)).await;
    ensure!(
        status.is_some_and(|s| !s.success()),
        "edgecore with a wrong token should exit with an error, got {status:?}\n{}",
        edge.log_tail(30)
    );
    let log = edge.log();
    ensure!(log.contains("code: 401"), "edge saw our 401:\n{}", edge.log_tail(30));
    ensure!(!home.cert_file().exists(), "no certificate for a wrong token");
    ensure!(home.ca_file().exists(), "the CA was fetched before the refusal");
    ensure!(it.metrics().await?.connected_nodes() == 0.0);
    let rejected = count(&it.cloud().log(), "token rejected");
    ensure!(rejected == 1, "cloudhub logged the refusal once, got {rejected}");
    drop(edge);

    // A valid JWT with the hash of another CA: edgecore refuses our CA itself and never asks
    // for a certificate.
    let other = pki::CertificateAuthority::generate()?;
    let wrong_hash = format!("{}.{jwt}", other.cert_sha256_hex());
    let home = EdgeHome::new("interop-boot-wrong-hash")?;
    let mut edge = it.launch_edge(&home, &wrong_hash)?;
    let status = edge.wait_exit(Duration::from_secs(30)).await;
    ensure!(
        status.is_some_and(|s| !s.success()),
        "edgecore with a wrong CA hash should exit with an error, got {status:?}"
    );
    ensure!(
        edge.log().contains("failed to validate CA certificate"),
        "{}",
        edge.log_tail(30)
    );
    ensure!(!home.cert_file().exists() && !home.ca_file().exists());
    ensure!(it.metrics().await?.connected_nodes() == 0.0);
    ensure!(
        count(&it.cloud().log(), "token rejected") == 1,
        "no certificate request reached us"
    );
    drop(edge);

    // The real token: CA and certificate fetched, WebSocket connected with that certificate.
    it.start_edge()?;
    it.wait_connected(Duration::from_secs(60)).await?;
    let home = it.home();
    ensure!(pem_der(&home.ca_file())? == ca_der, "edge stored our CA");
    let cert = pem_der(&home.cert_file())?;
    let identity = ca.verify_client_cert(&cert, &[])?;
    ensure!(identity.is_node("interop-boot"), "{identity:?}");
    let config = std::fs::read_to_string(home.config_file())?;
    ensure!(
        config.contains("token: \"\"") || config.contains("token: ''"),
        "edgecore blanks the token once it has certificates"
    );
    let log = it.edge().log();
    ensure!(log.contains("Version: v1.23.0-beta.0.150+16cd8548eedb81"));
    ensure!(log.contains("Websocket connect to cloud access successful"));
    // edgecontroller handles the connected event: the node names the cloudcore serving it.
    let nodes = Api::<Node>::all(client.clone());
    edgecore_interop::eventually(Duration::from_secs(20), "cloudcore annotation", || async {
        let n = nodes.get("interop-boot").await.ok()?;
        let a = n.metadata.annotations?;
        (a.get("cloudcore").map(String::as_str) == Some("127.0.0.1")).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn keepalive_holds_the_session_and_a_lost_edge_is_detected_within_the_timeout() -> Result<()>
{
    const HEARTBEAT: u64 = 3;
    const KEEPALIVE: u64 = 8;
    let node = "interop-keepalive";
    let mut it = Interop::builder(node)
        .heartbeat(HEARTBEAT as u32)
        .keepalive_interval(KEEPALIVE as u32)
        .start()
        .await?;

    // Several heartbeats on one session: always connected, keepalives counted, no reconnect.
    let before = it.metrics().await?.node_counter("received", node);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5 * HEARTBEAT) {
        ensure!(it.metrics().await?.connected_nodes() == 1.0, "session lost");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let after = it.metrics().await?.node_counter("received", node);
    ensure!(
        after - before >= 4.0,
        "keepalives every {HEARTBEAT} s: received {before} → {after}"
    );
    let log = it.cloud().log();
    ensure!(count(&log, "edge connected") == 1, "one session only");
    ensure!(count(&log, "keepalive timeout") == 0);

    // A frozen edge keeps its TCP connection but sends nothing: the keepalive timer ends the
    // session, no earlier than the interval after the last keepalive.
    it.edge().pause();
    let took = it
        .wait_disconnected(Duration::from_secs(KEEPALIVE + 4))
        .await?;
    ensure!(
        took >= Duration::from_secs(KEEPALIVE - HEARTBEAT - 1),
        "closed after {took:?}: before the keepalive interval"
    );
    let log = it.cloud().log();
    ensure!(count(&log, "keepalive timeout, closing session") == 1, "reason");
    ensure!(count(&log, "edge disconnected") == 1);
    // The disconnected event reaches edgecontroller, which ignores it (spec: controllers §2.7):
    // the Node keeps its annotation and is not touched.
    edgecore_interop::eventually(Duration::from_secs(5), "event ignored", || async {
        let log = it.cloud.as_ref()?.log();
        log.lines()
            .any(|l| {
                l.contains("message ignored")
                    && l.contains("disconnected event")
                    && l.contains(&format!("node/{node}"))
            })
            .then_some(())
    })
    .await
    .ok();
    Ok(())
}
