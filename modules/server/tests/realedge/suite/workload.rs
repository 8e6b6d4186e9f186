//! Pods on the steady edge: a Deployment and its status, what pods mount and see in their
//! environment, and their removal.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use base64::Engine;
use local_up::{Cluster, eventually};
use serde_json::{Value, json};

use super::{STEADY, unique};
use crate::support::{self, apply, container, deployment, exec, pod, pod_spec};

/// A Deployment placed by kube-scheduler runs on the edge; the pod status edged reports
/// (phase, IPs, container statuses, conditions) reaches the API server; containerd on that
/// edge runs the containers, the other edge's does not.
pub(super) async fn deployment_runs_and_reports_status(c: &Cluster) -> Result<()> {
    let ns = support::namespace(c, &unique("deploy")).await?;
    let spec = pod_spec(
        STEADY,
        vec![container(c, "echo started; while true; do sleep 1; done")],
    );
    apply(c, &deployment("web", &ns, 2, spec)).await?;
    let pods = support::wait_running(c, &ns, "app=web", 2).await?;
    let node = support::node(c, STEADY).await?;
    let node_ip = node["status"]["addresses"][0]["address"]
        .as_str()
        .unwrap_or_default();
    let tasks = c.running_tasks(STEADY).await?;
    for p in &pods {
        let name = support::name(p);
        let s = &p["status"];
        ensure!(
            p["spec"]["nodeName"] == STEADY,
            "{name} on {}",
            p["spec"]["nodeName"]
        );
        let events = c
            .kubectl_json(&[
                "-n",
                &ns,
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={name},reason=Scheduled"),
            ])
            .await?;
        ensure!(
            events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["reportingComponent"] == "default-scheduler"
                    || e["source"]["component"] == "default-scheduler"),
            "{name} has no Scheduled event from kube-scheduler: {events}"
        );
        let pod_ip = s["podIP"].as_str().unwrap_or_default();
        ensure!(
            !pod_ip.is_empty() && pod_ip != node_ip && s["podIPs"][0]["ip"] == pod_ip,
            "{name} podIP {pod_ip:?} / podIPs {} (node {node_ip})",
            s["podIPs"]
        );
        ensure!(
            s["hostIP"] == node_ip,
            "{name} hostIP {} (node {node_ip})",
            s["hostIP"]
        );
        ensure!(
            s["qosClass"] == "BestEffort",
            "{name} qosClass {}",
            s["qosClass"]
        );
        ensure!(!s["startTime"].is_null(), "{name} has no startTime");
        let cs = &s["containerStatuses"][0];
        ensure!(
            cs["name"] == "main"
                && cs["ready"] == true
                && cs["started"] == true
                && cs["restartCount"] == 0
                && !cs["state"]["running"]["startedAt"].is_null()
                && cs["image"] == c.image()
                && cs["imageID"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("sha256:")),
            "{name} container status {cs}"
        );
        for kind in [
            "PodScheduled",
            "Initialized",
            "PodReadyToStartContainers",
            "ContainersReady",
            "Ready",
        ] {
            let cond = s["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["type"] == kind);
            ensure!(
                cond.is_some_and(|x| x["status"] == "True"),
                "{name} condition {kind}: {cond:?}"
            );
        }
        let id = support::container_id(p).with_context(|| format!("{name} containerID {cs}"))?;
        ensure!(
            tasks.contains(&id),
            "{name}'s container {id} is not running on {STEADY}: {tasks:?}"
        );
        let logs = c.kubectl_ok(&["-n", &ns, "logs", &name]).await?;
        ensure!(logs == "started\n", "{name} logs {logs:?}");
    }
    let elsewhere = c.containers(super::DISRUPTED, &ns).await?;
    ensure!(
        elsewhere.is_empty(),
        "{} runs containers of {ns}: {elsewhere:?}",
        super::DISRUPTED
    );
    let d = c
        .kubectl_json(&["-n", &ns, "get", "deployment", "web"])
        .await?;
    ensure!(
        d["status"]["readyReplicas"] == 2 && d["status"]["availableReplicas"] == 2,
        "Deployment status {}",
        d["status"]
    );
    support::drop_namespace(c, &ns).await;
    Ok(())
}

/// ConfigMap, Secret, projected service-account token and downward-API volumes hold the right
/// content; environment from a ConfigMap, a Secret and fields; the default token is one the
/// API server accepts; an updated ConfigMap reaches the mounted file.
pub(super) async fn volumes_and_environment(c: &Cluster) -> Result<()> {
    let ns = support::namespace(c, &unique("volumes")).await?;
    apply(
        c,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns},
            "data": {"greeting": "hello", "app.conf": "level=debug\n"}}),
    )
    .await?;
    apply(
        c,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "env", "namespace": ns},
            "data": {"MODE": "fast"}}),
    )
    .await?;
    apply(
        c,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"password": "s3cr3t"}}),
    )
    .await?;
    let mut main = container(c, "while true; do sleep 1; done");
    main["env"] = json!([
        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]);
    main["envFrom"] = json!([{"configMapRef": {"name": "env"}}]);
    main["volumeMounts"] = json!([
        {"name": "settings", "mountPath": "/etc/settings"},
        {"name": "creds", "mountPath": "/etc/creds"},
        {"name": "token", "mountPath": "/etc/token"},
        {"name": "podinfo", "mountPath": "/etc/podinfo"},
    ]);
    let mut spec = pod_spec(STEADY, vec![main]);
    spec["volumes"] = json!([
        {"name": "settings", "configMap": {"name": "settings"}},
        {"name": "creds", "secret": {"secretName": "creds"}},
        {"name": "token", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 3600}},
            {"configMap": {"name": "settings", "items": [{"key": "greeting", "path": "greeting"}]}},
        ]}},
        {"name": "podinfo", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
        ]}},
    ]);
    apply(c, &pod("vol", &ns, spec)).await?;
    let p = support::wait_running(c, &ns, "app=vol", 1).await?.remove(0);
    let cat = |path: &'static str| {
        let ns = ns.clone();
        async move { exec(c, &ns, "vol", &["cat", path]).await }
    };
    ensure!(
        cat("/etc/settings/greeting").await? == "hello",
        "configMap greeting"
    );
    ensure!(
        cat("/etc/settings/app.conf").await? == "level=debug\n",
        "configMap app.conf"
    );
    ensure!(
        cat("/etc/creds/password").await? == "s3cr3t",
        "secret password"
    );
    ensure!(
        cat("/etc/token/greeting").await? == "hello",
        "projected configMap"
    );
    let labels = cat("/etc/podinfo/labels").await?;
    ensure!(labels == "app=\"vol\"", "downward API labels {labels:?}");
    ensure!(
        cat("/etc/podinfo/name").await? == "vol",
        "downward API name"
    );
    ensure!(
        cat("/etc/podinfo/namespace").await? == ns,
        "downward API namespace"
    );

    let audience_token = cat("/etc/token/token").await?;
    let claims = jwt_claims(&audience_token)?;
    ensure!(
        claims["aud"] == json!(["vault"]),
        "projected token audience {}",
        claims["aud"]
    );
    bound_to(&claims, &ns, "vol", &p)?;
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token = exec(c, &ns, "vol", &["cat", &format!("{sa}/token")]).await?;
    bound_to(&jwt_claims(&token)?, &ns, "vol", &p)?;
    ensure!(
        exec(c, &ns, "vol", &["cat", &format!("{sa}/namespace")]).await? == ns,
        "default token volume namespace"
    );
    let ca = exec(c, &ns, "vol", &["cat", &format!("{sa}/ca.crt")]).await?;
    ensure!(
        ca.contains("BEGIN CERTIFICATE"),
        "default token volume ca.crt {ca:?}"
    );
    let who = whoami(c, &token).await?;
    ensure!(
        who == format!("system:serviceaccount:{ns}:default"),
        "the API server takes the pod's token for {who:?}"
    );

    let env = exec(c, &ns, "vol", &["env"]).await?;
    let pod_ip = p["status"]["podIP"].as_str().unwrap_or_default();
    for want in [
        "GREETING=hello".to_owned(),
        "PASSWORD=s3cr3t".to_owned(),
        "MODE=fast".to_owned(),
        format!("NODE_NAME={STEADY}"),
        format!("POD_IP={pod_ip}"),
    ] {
        ensure!(env.lines().any(|l| l == want), "env lacks {want}: {env}");
    }

    c.kubectl_ok(&[
        "-n",
        &ns,
        "patch",
        "configmap",
        "settings",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"updated"}}"#,
    ])
    .await?;
    // kubelet re-reads a mounted ConfigMap on its pod sync (every minute) through the edge.
    eventually(
        Duration::from_secs(180),
        Duration::from_secs(3),
        "updated ConfigMap mounted",
        || async { (cat("/etc/settings/greeting").await.ok()? == "updated").then_some(()) },
    )
    .await?;
    support::drop_namespace(c, &ns).await;
    Ok(())
}

/// The claims of a JWT (not verified here: the API server verifies it in [`whoami`]).
fn jwt_claims(token: &str) -> Result<Value> {
    let payload = token.split('.').nth(1).context("not a JWT")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .context("JWT payload is not base64url")?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// The token is bound to pod `name` (its uid) in `ns`, as the default service account.
fn bound_to(claims: &Value, ns: &str, name: &str, p: &Value) -> Result<()> {
    let k = &claims["kubernetes.io"];
    ensure!(
        k["namespace"] == ns
            && k["pod"]["name"] == name
            && k["pod"]["uid"] == p["metadata"]["uid"]
            && k["serviceaccount"]["name"] == "default",
        "token claims {claims}"
    );
    Ok(())
}

/// Who the API server says `token` is, asked with that token alone.
async fn whoami(c: &Cluster, token: &str) -> Result<String> {
    let server = c
        .kubectl_ok(&[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .await?;
    let ca = c
        .kubectl_ok(&[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority}",
        ])
        .await?;
    let out = tokio::process::Command::new(c.kubectl_program())
        .args(["--kubeconfig", "/dev/null", "--server", &server])
        .args(["--certificate-authority", &ca, "--token", token])
        .args(["auth", "whoami", "-o", "json"])
        .kill_on_drop(true)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl auth whoami with the pod's token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let review: Value = serde_json::from_slice(&out.stdout)?;
    Ok(review["status"]["userInfo"]["username"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Scaling to zero and deleting the Deployment remove the pods from the API and their
/// containers (sandboxes included) from the edge's containerd.
pub(super) async fn scale_to_zero_and_delete(c: &Cluster) -> Result<()> {
    let ns = support::namespace(c, &unique("scale")).await?;
    let spec = pod_spec(STEADY, vec![container(c, "while true; do sleep 1; done")]);
    apply(c, &deployment("web", &ns, 3, spec)).await?;
    support::wait_running(c, &ns, "app=web", 3).await?;
    let held = c.containers(STEADY, &ns).await?;
    ensure!(
        held.len() == 6,
        "3 pods, 6 containers (sandboxes included): {held:?}"
    );
    c.kubectl_ok(&["-n", &ns, "scale", "deployment", "web", "--replicas=0"])
        .await?;
    support::wait_no_pods(c, &ns, "app=web").await?;
    no_containers_left(c, &ns).await?;

    c.kubectl_ok(&["-n", &ns, "scale", "deployment", "web", "--replicas=2"])
        .await?;
    support::wait_running(c, &ns, "app=web", 2).await?;
    c.kubectl_ok(&["-n", &ns, "delete", "deployment", "web"])
        .await?;
    support::wait_no_pods(c, &ns, "app=web").await?;
    no_containers_left(c, &ns).await?;
    support::drop_namespace(c, &ns).await;
    Ok(())
}

/// kubelet removes a deleted pod's containers after stopping them (its garbage collection
/// runs every minute).
async fn no_containers_left(c: &Cluster, ns: &str) -> Result<()> {
    let last = std::sync::Mutex::new(Vec::new());
    let r = eventually(
        Duration::from_secs(150),
        Duration::from_secs(2),
        "containers removed",
        || async {
            let left = c.containers(STEADY, ns).await.ok()?;
            let empty = left.is_empty();
            *last.lock().unwrap() = left;
            empty.then_some(())
        },
    )
    .await;
    r.with_context(|| {
        format!(
            "containers of {ns} left on {STEADY}: {:?}",
            last.lock().unwrap()
        )
    })
}
