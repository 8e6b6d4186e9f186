//! Node jobs on real edges: unmodified edgecores with their taskManager module on, each in an
//! edge host of its own (`edgecore_interop::host`: containerd and edgecore in their own mount
//! and PID namespaces, so what keadm installs, stops and starts stays inside), pulling from
//! registries on loopback (Debian's docker-registry) filled with images built here from
//! busybox-static (umoci, skopeo).
//!
//! * ImagePrePullJob: images pulled into each edge's containerd, with and without a pull
//!   secret; a missing image reported per image; concurrency and failureTolerate across
//!   several edges, one of them offline.
//! * NodeUpgradeJob, the whole flow: Check (the installation-package image pulled, keadm
//!   copied out of it through a privileged CRI container), WaitingConfirmation, BackUp
//!   (`keadm backup edge`), Upgrade (`keadm upgrade edge`: edgecore stopped, replaced from the
//!   image and started again by keadm, the new one reporting the upgrade from keadm's report
//!   file when it reconnects).
//! * ConfigUpdateJob: Check, BackUp, then `keadm config-update`, which writes the field and
//!   restarts edgecore through `sudo systemctl`; without an init system that fails, the edge
//!   rolls back (`keadm rollback edge` restores the backup and restarts edgecore itself) and
//!   the rollback's report dies with the old process: the node times out.
//! * Edges that cannot run a job: no container runtime (the pull fails with the edge's error),
//!   the taskManager off (edgecore's default: the task is dropped, the node times out).
//!
//! Run: `cargo test -p cloudcore-server --test edgecore node_jobs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use edgecore_interop::host::{EdgeHost, EdgeHostSpec};
use edgecore_interop::images::{OciImage, busybox_image};
use edgecore_interop::registry::Registry;
use edgecore_interop::{EDGE_LABEL, EdgeConfig, Interop, store_key};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
/// The version an upgrade goes to (the installation package's tag).
const TO_VERSION: &str = "v1.23.1";

/// The test images, built once per machine into the binary cache folder, in a folder named by
/// what they are made of (busybox, keadm, edgecore), and reused by every later run.
struct Images {
    pause: OciImage,
    app: OciImage,
    tools: OciImage,
    package: OciImage,
}

fn images() -> Result<&'static Images> {
    static IMAGES: OnceLock<std::result::Result<Images, String>> = OnceLock::new();
    IMAGES
        .get_or_init(|| build_images().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("building the test images: {e}"))
}

fn build_images() -> Result<Images> {
    use std::hash::{Hash, Hasher};
    let keadm = edgecore_interop::binary::keadm()?;
    let edgecore = edgecore_interop::binary::edgecore()?;
    // The cached binaries are named by their hashes; busybox by its size and time. "v1": the
    // layout below.
    let busybox = std::fs::metadata("/bin/busybox").ok();
    let mut key = std::hash::DefaultHasher::new();
    (
        "v1",
        keadm.display().to_string(),
        edgecore.display().to_string(),
        busybox.as_ref().map(|m| m.len()),
        busybox.as_ref().and_then(|m| m.modified().ok()),
    )
        .hash(&mut key);
    let key = format!("{:016x}", key.finish());
    let cache = edgecore_interop::binary::cache_dir();
    let dir = cache.join(format!("node-job-images-{key}"));
    let layout = |name: &str| OciImage {
        layout: dir.join(name).join("oci"),
        tag: "latest".into(),
    };
    if !dir.is_dir() {
        let tmp = cache.join(format!("node-job-images-{key}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let build = |name: &str, files: &[(&Path, &str)], cmd: &[&str]| -> Result<()> {
            let d = tmp.join(name);
            std::fs::create_dir_all(&d)?;
            busybox_image(&d, "latest", files, cmd)?;
            Ok(())
        };
        build("pause", &[], &["/bin/sleep", "2147483647"])?;
        build("app", &[], &["sh"])?;
        build("tools", &[], &["sh"])?;
        build(
            "package",
            &[
                (keadm.as_path(), "/usr/local/bin/keadm"),
                (edgecore.as_path(), "/usr/local/bin/edgecore"),
            ],
            &["sh"],
        )?;
        // Another run may have finished first: then its copy is used and this one dropped.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    Ok(Images {
        pause: layout("pause"),
        app: layout("app"),
        tools: layout("tools"),
        package: layout("package"),
    })
}

/// Two registries: an open one with every image, and one behind a user and password.
struct Registries {
    open: Registry,
    private: Registry,
    _dir: TempDir,
}

const USER: &str = "puller";
const PASSWORD: &str = "s3cret-pull";

impl Registries {
    async fn start() -> Result<Registries> {
        let imgs = images()?;
        let dir = TempDir::new("registries")?;
        let open = Registry::start(&dir.0.join("open"), None).await?;
        let private = Registry::start(&dir.0.join("private"), Some((USER, PASSWORD))).await?;
        open.push(&imgs.pause, "test/pause:3.6")?;
        open.push(&imgs.app, "test/app:1")?;
        open.push(&imgs.tools, "test/tools:2")?;
        open.push(
            &imgs.package,
            &format!("kubeedge/installation-package:{TO_VERSION}"),
        )?;
        private.push(&imgs.app, "private/app:1")?;
        Ok(Registries {
            open,
            private,
            _dir: dir,
        })
    }

    fn addrs(&self) -> Vec<SocketAddr> {
        vec![self.open.addr(), self.private.addr()]
    }
}

/// A folder removed on drop (kept when a test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Result<TempDir> {
        let d = std::env::temp_dir().join(format!(
            "node-jobs-{what}-{}-{}",
            std::process::id(),
            &beehive::new_id()[..8]
        ));
        std::fs::create_dir_all(&d)?;
        Ok(TempDir(d))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The cloud of a scenario, with edge hosts for `nodes` (the scenario's own node first).
async fn edge_hosts(
    it: &mut Interop,
    regs: &Registries,
    extra: &[&str],
    keadm: bool,
) -> Result<Vec<EdgeHost>> {
    let client = it.client();
    let mut names = vec![it.node().to_owned()];
    for n in extra {
        edge_node(&client, n).await?;
        names.push((*n).to_owned());
    }
    let token = it.token()?;
    let ports = it.cloud_spec().ports;
    let mut hosts = Vec::new();
    for n in &names {
        ready(&client, n).await?;
        let config = EdgeConfig::new(n, &token, ports.https_addr(), ports.websocket_addr());
        let spec = EdgeHostSpec {
            config,
            registries: regs.addrs(),
            sandbox_image: regs.open.image("test/pause:3.6"),
            keadm,
        };
        hosts.push(EdgeHost::start(&spec).await?);
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let m = it.metrics().await?;
        if m.connected_nodes() == names.len() as f64 {
            break;
        }
        for h in &mut hosts {
            h.check_alive()?;
        }
        ensure!(
            Instant::now() < deadline,
            "{} of {} edges connected",
            m.connected_nodes(),
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(hosts)
}

async fn edge_node(client: &kube::Client, name: &str) -> Result<()> {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {EDGE_LABEL: ""}}}))?;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await?;
    Ok(())
}

/// Ready and its version, as edged would report them (edged is off in these edges): keadm
/// reads the running edgecore's version from the Node's kubeletVersion
/// (`<kubernetes>-kubeedge-<edgecore>`) through the edge's metaServer.
async fn ready(client: &kube::Client, name: &str) -> Result<()> {
    let version = format!(
        "v1.31.12-kubeedge-{}",
        edgecore_interop::binary::EDGECORE_VERSION
    );
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "nodeInfo": {"kubeletVersion": version}}});
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

async fn apply(obj: &Value) -> Result<()> {
    edgecore_interop::kubectl_ok(&["apply", "-f", "-"], Some(&serde_json::to_vec(obj)?)).await?;
    Ok(())
}

async fn job(kind: &str, name: &str) -> Result<Value> {
    let out = edgecore_interop::kubectl_ok(
        &[
            "get",
            &format!("{kind}s.operations.kubeedge.io"),
            name,
            "-o",
            "json",
        ],
        None,
    )
    .await?;
    Ok(serde_json::from_slice(&out)?)
}

fn entry(job: &Value, node: &str) -> Value {
    job["status"]["nodeStatus"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["nodeName"] == node))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Polls the job until it is in `phase`; while it runs, `watch` sees every version read.
async fn until_phase(
    hosts: &mut [EdgeHost],
    kind: &str,
    name: &str,
    phase: &str,
    mut watch: impl FnMut(&Value),
) -> Result<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let j = job(kind, name).await?;
        watch(&j);
        if j["status"]["phase"] == phase {
            return Ok(j);
        }
        for h in hosts.iter_mut() {
            h.check_alive()?;
        }
        if Instant::now() >= deadline {
            bail!(
                "{kind} {name} not {phase} within {WAIT:?}: {}",
                serde_json::to_string_pretty(&j["status"])?
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn in_progress(j: &Value) -> usize {
    j["status"]["nodeStatus"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["phase"] == "InProgress").count())
        .unwrap_or(0)
}

#[tokio::test]
async fn image_prepull_jobs_pull_into_each_edges_containerd() -> Result<()> {
    test_tiers::require!(ApiServer, Root, Edgecore);
    let regs = Registries::start().await?;
    let mut it = Interop::builder("prepull-a").start_cloud().await?;
    let mut hosts = edge_hosts(&mut it, &regs, &["prepull-b", "prepull-c"], false).await?;
    let nodes: Vec<String> = hosts.iter().map(|h| h.node().to_owned()).collect();
    let (app, tools) = (
        regs.open.image("test/app:1"),
        regs.open.image("test/tools:2"),
    );

    // Two images to three edges, two at a time.
    apply(
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": "open"},
        "spec": {"imagePrePullTemplate": {"images": [app, tools], "nodeNames": nodes,
            "concurrency": 2}}}),
    )
    .await?;
    let mut most = 0;
    let j = until_phase(&mut hosts, "imageprepulljob", "open", "Completed", |j| {
        most = most.max(in_progress(j));
    })
    .await?;
    ensure!(most <= 2, "{most} nodes pulled at once with concurrency 2");
    for h in &hosts {
        let e = entry(&j, h.node());
        ensure!(e["phase"] == "Successful", "{}: {e}", h.node());
        ensure!(
            e["imageStatus"]
                == json!([{"image": app, "status": "True"}, {"image": tools, "status": "True"}]),
            "{e}"
        );
        let actions: Vec<&str> = e["actionFlow"]
            .as_array()
            .context("actionFlow")?
            .iter()
            .filter_map(|a| a["action"].as_str())
            .collect();
        ensure!(actions == ["Check", "Pull"], "{actions:?}");
        let have = h.images()?;
        for image in [&app, &tools] {
            ensure!(
                have.iter().any(|i| i == image),
                "{} has {have:?}, not {image}",
                h.node()
            );
        }
    }

    // A private registry: the job's pull secret reaches the edge under a name of its own, as
    // the CRI auth config the edge decodes, and is gone again once the node is done.
    let private = regs.private.image("private/app:1");
    let ns = k8s_testenv::namespace("pull").await;
    let auth = base64_encode(&format!("{USER}:{PASSWORD}"));
    let config = json!({"auths": {regs.private.addr().to_string():
        {"username": USER, "password": PASSWORD, "auth": auth}}});
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()}}))?;
    Api::<Secret>::namespaced(it.client(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    // The job without the secret asks for an image the other job does not pull: both run at
    // once, and an image already in an edge's containerd passes its Check without the registry.
    let unpulled = regs.private.image("private/app:2");
    for (name, image, secret) in [
        ("private", &private, Some(format!("{ns}/regcred"))),
        ("anonymous", &unpulled, None),
    ] {
        let mut t = json!({"images": [image], "nodeNames": &nodes[..2], "concurrency": 2,
            "failureTolerate": "0"});
        if let Some(s) = secret {
            t["imageSecrets"] = s.into();
        }
        apply(
            &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
            "metadata": {"name": name}, "spec": {"imagePrePullTemplate": t}}),
        )
        .await?;
    }
    let j = until_phase(
        &mut hosts,
        "imageprepulljob",
        "private",
        "Completed",
        |_| {},
    )
    .await?;
    for h in &hosts[..2] {
        ensure!(entry(&j, h.node())["phase"] == "Successful", "{j}");
        ensure!(
            h.images()?.contains(&private),
            "{}: {:?}",
            h.node(),
            h.images()?
        );
        let copy = store_key(&ns, "secret", "ImagePrePullJob.private");
        let deadline = Instant::now() + Duration::from_secs(30);
        while h.store().get(&copy)?.is_some() {
            ensure!(
                Instant::now() < deadline,
                "{}: the secret copy stays",
                h.node()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Without the secret the same pull is refused by the registry, per image.
    let j = until_phase(
        &mut hosts,
        "imageprepulljob",
        "anonymous",
        "Failure",
        |_| {},
    )
    .await?;
    for h in &hosts[..2] {
        let e = entry(&j, h.node());
        ensure!(e["phase"] == "Failure", "{e}");
        ensure!(e["imageStatus"][0]["status"] == "False", "{e}");
        let why = e["imageStatus"][0]["reason"].as_str().unwrap_or_default();
        ensure!(why.contains("unauthorized") || why.contains("401"), "{why}");
    }

    // One image missing: the pull fails for that image only, and the node with it.
    let missing = regs.open.image("test/missing:0");
    apply(
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": "missing"},
        "spec": {"imagePrePullTemplate": {"images": [app, missing], "nodeNames": [nodes[0]]}}}),
    )
    .await?;
    let j = until_phase(&mut hosts, "imageprepulljob", "missing", "Failure", |_| {}).await?;
    let e = entry(&j, &nodes[0]);
    ensure!(
        e["imageStatus"][0] == json!({"image": app, "status": "True"}),
        "{e}"
    );
    ensure!(
        e["imageStatus"][1]["image"] == missing && e["imageStatus"][1]["status"] == "False",
        "{e}"
    );
    ensure!(
        e["reason"] == "there were some failures when pulling images",
        "the edge's reason: {e}"
    );

    // failureTolerate across the edges: one more node is offline (no edge), 1 of 4 failed.
    edge_node(&it.client(), "prepull-offline").await?;
    ready(&it.client(), "prepull-offline").await?;
    let mut four = nodes.clone();
    four.push("prepull-offline".into());
    for (name, tolerate) in [("tolerant", "0.3"), ("strict", "0.2")] {
        apply(
            &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
            "metadata": {"name": name},
            "spec": {"imagePrePullTemplate": {"images": [app], "nodeNames": four,
                "concurrency": 3, "failureTolerate": tolerate}}}),
        )
        .await?;
    }
    let j = until_phase(
        &mut hosts,
        "imageprepulljob",
        "tolerant",
        "Completed",
        |_| {},
    )
    .await?;
    ensure!(
        entry(&j, "prepull-offline")["reason"]
            == "the node prepull-offline is not connected to the current cloudcore instance",
        "{j}"
    );
    let j = until_phase(&mut hosts, "imageprepulljob", "strict", "Failure", |_| {}).await?;
    ensure!(
        j["status"]["reason"]
            == "the number of failed nodes is 1/4, which exceeds the failure tolerance threshold",
        "{j}"
    );
    drop(hosts);
    it.finish();
    Ok(())
}

fn base64_encode(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn a_node_upgrade_job_runs_keadm_on_a_real_edge_host() -> Result<()> {
    test_tiers::require!(ApiServer, Root, Edgecore);
    let regs = Registries::start().await?;
    let mut it = Interop::builder("upgrade-a").start_cloud().await?;
    let mut hosts = edge_hosts(&mut it, &regs, &[], false).await?;
    let node = it.node().to_owned();
    let image = format!("{}/kubeedge/installation-package", regs.open.addr());
    apply(
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "NodeUpgradeJob",
        "metadata": {"name": "upgrade"},
        "spec": {"version": TO_VERSION, "image": image, "nodeNames": [node],
            "timeoutSeconds": 240}}),
    )
    .await?;
    let j = until_phase(&mut hosts, "nodeupgradejob", "upgrade", "Completed", |_| {}).await;
    let host = &hosts[0];
    let keadm = host.written("/usr/local/bin/keadm").context("keadm path")?;
    let j = j.with_context(|| format!("edgecore log:\n{}", tail(&host.edgecore_log(), 60)))?;
    let e = entry(&j, &node);
    let actions: Vec<(String, String)> = e["actionFlow"]
        .as_array()
        .context("actionFlow")?
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap_or_default().to_owned(),
                a["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    ensure!(e["phase"] == "Successful", "{e}");
    let names: Vec<&str> = actions.iter().map(|(a, _)| a.as_str()).collect();
    ensure!(
        names.starts_with(&["Check", "WaitingConfirmation", "BackUp"])
            && names.contains(&"Upgrade"),
        "{actions:?}"
    );
    ensure!(e["currentVersion"] == TO_VERSION, "{e}");
    // What keadm did on the edge host: keadm copied out of the image, a backup, edgecore
    // replaced from the image and started again by keadm.
    let copied = std::fs::read(&keadm).context("keadm copied from the image")?;
    let original = std::fs::read(edgecore_interop::binary::keadm()?)?;
    ensure!(copied == original, "the image's keadm");
    ensure!(
        host.written("/var/log/kubeedge/edgecore.log")
            .is_some_and(|p| p.is_file()),
        "keadm started the new edgecore"
    );
    drop(hosts);
    it.finish();
    Ok(())
}

#[tokio::test]
async fn a_config_update_job_runs_keadm_and_rolls_back_without_an_init_system() -> Result<()> {
    test_tiers::require!(ApiServer, Root, Edgecore);
    let regs = Registries::start().await?;
    let mut it = Interop::builder("config-a").start_cloud().await?;
    let mut hosts = edge_hosts(&mut it, &regs, &[], true).await?;
    let node = it.node().to_owned();
    apply(
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ConfigUpdateJob",
        "metadata": {"name": "heartbeat"},
        "spec": {"nodeNames": [node], "timeoutSeconds": 30,
            "updateFields": {"modules.edgeHub.heartbeat": "20"}}}),
    )
    .await?;
    let j = until_phase(
        &mut hosts,
        "configupdatejob",
        "heartbeat",
        "Failure",
        |_| {},
    )
    .await
    .with_context(|| tail(&hosts[0].edgecore_log(), 60))?;
    let e = entry(&j, &node);
    let flow = e["actionFlow"].as_array().context("actionFlow")?;
    let got: Vec<(&str, &str)> = flow
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap_or_default(),
                a["status"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // keadm config-update wrote the field, then could not restart edgecore (it runs
    // `sudo systemctl restart edgecore.service`); the edge rolled back with `keadm rollback
    // edge`, which restored the backup and restarted edgecore by itself, and that report died
    // with the old process: the node times out.
    ensure!(
        got == [("Check", "True"), ("BackUp", "True"), ("Update", "False")],
        "{got:?}\n{e}"
    );
    let why = flow[2]["reason"].as_str().unwrap_or_default();
    ensure!(why.contains("failed restart edgecore"), "{why}");
    ensure!(
        e["phase"] == "Unknown" && e["reason"] == "The node task has timed out",
        "{e}"
    );
    ensure!(
        flow.iter()
            .all(|a| !a["time"].as_str().unwrap_or_default().is_empty()),
        "the cloud's time where the edge sends none: {flow:?}"
    );
    let host = &hosts[0];
    let backup = host
        .written(&format!(
            "/etc/kubeedge/backup/{}/edgecore.yaml",
            edgecore_interop::binary::EDGECORE_VERSION
        ))
        .context("backup path")?;
    ensure!(
        backup.is_file(),
        "keadm backup edge wrote {}",
        backup.display()
    );
    let config = std::fs::read_to_string(
        host.written("/etc/kubeedge/config/edgecore.yaml")
            .context("config path")?,
    )?;
    ensure!(
        config.contains("heartbeat: 15"),
        "the rollback restored the backed-up configuration"
    );
    ensure!(
        host.written("/var/log/kubeedge/edgecore.log")
            .is_some_and(|p| p.is_file()),
        "keadm restarted edgecore"
    );
    drop(hosts);
    it.finish();
    Ok(())
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// An ImagePrePullJob for the scenario's one node.
async fn prepull_for(it: &Interop, name: &str, timeout: u32) -> Result<()> {
    apply(
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": name},
        "spec": {"imagePrePullTemplate": {"images": ["registry.invalid/app:1"],
            "nodeNames": [it.node()], "timeoutSeconds": timeout}}}),
    )
    .await
}

async fn phase_of(it: &mut Interop, name: &str, phase: &str) -> Result<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        it.check_edge_alive()?;
        let j = job("imageprepulljob", name).await?;
        if j["status"]["phase"] == phase {
            return Ok(j);
        }
        ensure!(
            Instant::now() < deadline,
            "{name} not {phase}: {}",
            j["status"]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn an_edge_without_a_container_runtime_reports_the_pull_failed() -> Result<()> {
    test_tiers::require!(ApiServer, Edgecore);
    // The edge's CRI endpoint leads nowhere (edgecore's default would be this machine's
    // /run/containerd).
    let dir = TempDir::new("no-cri")?;
    let mut it = Interop::builder("no-cri")
        .edge_task_manager()
        .container_runtime_endpoint(format!("unix://{}/none.sock", dir.0.display()))
        .start_cloud()
        .await?;
    ready(&it.client(), it.node()).await?;
    it.start_edge()?;
    it.wait_connected(WAIT).await?;
    prepull_for(&it, "no-runtime", 120).await?;
    let j = phase_of(&mut it, "no-runtime", "Failure").await?;
    let e = entry(&j, it.node());
    let actions: Vec<(&str, &str)> = e["actionFlow"]
        .as_array()
        .context("actionFlow")?
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap_or_default(),
                a["status"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    ensure!(actions == [("Check", "True"), ("Pull", "False")], "{e}");
    // The edge fails before any image: no per-image result, its error as the node's reason.
    ensure!(e["imageStatus"].is_null(), "{e}");
    let why = e["reason"].as_str().unwrap_or_default();
    ensure!(why.contains("failed to new remote image service"), "{why}");
    it.finish();
    Ok(())
}

#[tokio::test]
async fn an_edge_with_its_task_manager_off_never_answers_and_times_out() -> Result<()> {
    test_tiers::require!(ApiServer, Edgecore);
    // edgecore's default: the task is dropped on the edge without a word.
    let mut it = Interop::builder("tm-off").start_cloud().await?;
    ready(&it.client(), it.node()).await?;
    it.start_edge()?;
    it.wait_connected(WAIT).await?;
    prepull_for(&it, "unanswered", 5).await?;
    let j = phase_of(&mut it, "unanswered", "Failure").await?;
    let e = entry(&j, it.node());
    ensure!(
        e["phase"] == "Unknown" && e["reason"] == "The node task has timed out",
        "{e}"
    );
    ensure!(e["actionFlow"].is_null(), "nothing reported: {e}");
    it.finish();
    Ok(())
}
