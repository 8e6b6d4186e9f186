//! Processes going away: edgecore killed and restarted, an edge cut off for two minutes, and
//! cloudcore restarted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use local_up::{Cluster, eventually};
use serde_json::{Value, json};

use super::{Baseline, unique};
use crate::support::{self, POLL, apply, container, deployment, exec, pod_spec};

/// The containers (sandboxes included) of `ns` that run on `node`'s containerd.
async fn running_in(c: &Cluster, node: &str, ns: &str) -> Result<BTreeSet<String>> {
    let held: BTreeSet<String> = c.containers(node, ns).await?.into_iter().collect();
    let running: BTreeSet<String> = c.running_tasks(node).await?.into_iter().collect();
    Ok(held.intersection(&running).cloned().collect())
}

/// Container id of each pod, by pod name.
fn ids(pods: &[Value]) -> Vec<(String, Option<String>, u64)> {
    let mut v: Vec<_> = pods
        .iter()
        .map(|p| {
            (
                support::name(p),
                support::container_id(p),
                p["status"]["containerStatuses"][0]["restartCount"]
                    .as_u64()
                    .unwrap_or(u64::MAX),
            )
        })
        .collect();
    v.sort();
    v
}

/// edgecore killed (SIGKILL) with pods running: the pods keep running meanwhile; restarted,
/// the Node is Ready with a fresh Lease renewal, the same containers run (none restarted,
/// none duplicated), and the tunnel serves exec again.
pub(super) async fn edgecore_restart(c: &Cluster, node: &str) -> Result<()> {
    let ns = support::namespace(c, &unique("restart")).await?;
    let spec = pod_spec(node, vec![container(c, "while true; do sleep 1; done")]);
    apply(c, &deployment("keep", &ns, 2, spec)).await?;
    let before = ids(&support::wait_running(c, &ns, "app=keep", 2).await?);
    let containers = running_in(c, node, &ns).await?;
    ensure!(
        containers.len() == 4,
        "2 pods, 4 running containers: {containers:?}"
    );

    c.kill(node).await?;
    let killed = chrono_now(c).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let meanwhile = running_in(c, node, &ns).await?;
    ensure!(
        meanwhile == containers,
        "with edgecore gone the containers are {meanwhile:?}, were {containers:?}"
    );
    c.start(node).await?;
    eventually(
        Duration::from_secs(120),
        POLL,
        "a Lease renewal after the restart",
        || async {
            let lease = c
                .kubectl_json(&["-n", "kube-node-lease", "get", "lease", node])
                .await
                .ok()?;
            (lease["spec"]["renewTime"].as_str()? > killed.as_str()).then_some(())
        },
    )
    .await?;
    support::wait_ready_status(c, node, "True", Duration::from_secs(120)).await?;
    // kubelet syncs every pod once after it starts; give it that time to do anything wrong.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let after = ids(&support::wait_running(c, &ns, "app=keep", 2).await?);
    ensure!(
        after == before,
        "pods after the restart {after:?}, before {before:?}"
    );
    let now = running_in(c, node, &ns).await?;
    let all = c.containers(node, &ns).await?;
    ensure!(
        now == containers && all.len() == 4,
        "containers after the restart: running {now:?}, all {all:?}; before {containers:?}"
    );
    let out = exec(c, &ns, &before[0].0, &["echo", "back"]).await?;
    ensure!(out == "back\n", "exec after the restart: {out:?}");
    support::drop_namespace(c, &ns).await;
    Ok(())
}

/// The API server's clock, as an RFC 3339 string comparable with Lease times (the Namespace
/// made now carries it).
async fn chrono_now(c: &Cluster) -> Result<String> {
    let name = unique("clock");
    let ns = c.kubectl_json(&["create", "namespace", &name]).await?;
    let t = ns["metadata"]["creationTimestamp"]
        .as_str()
        .context("no creationTimestamp")?
        .to_owned();
    support::drop_namespace(c, &name).await;
    Ok(t)
}

/// The edge loses its network for two minutes: the cloud sees the Node go Unknown; meanwhile
/// its Deployment gets a new template and a second replica. Back, the edge is Ready, runs
/// exactly the two new pods (the old one stopped and gone from the API and from containerd's
/// running tasks), and nothing was evicted while it was away.
pub(super) async fn away_while_deployment_changes(c: &Cluster, node: &str) -> Result<()> {
    let ns = support::namespace(c, &unique("away")).await?;
    let mut main = container(c, "while true; do sleep 1; done");
    main["env"] = json!([{"name": "VERSION", "value": "1"}]);
    apply(c, &deployment("app", &ns, 1, pod_spec(node, vec![main]))).await?;
    let old = support::wait_running(c, &ns, "app=app", 1).await?;
    let old_name = support::name(&old[0]);
    let old_id = support::container_id(&old[0]).context("old container id")?;

    c.disconnect(node).await?;
    let away = Instant::now();
    let result = async {
        support::wait_ready_status(c, node, "Unknown", Duration::from_secs(120)).await?;
        c.kubectl_ok(&["-n", &ns, "set", "env", "deployment/app", "VERSION=2"])
            .await?;
        c.kubectl_ok(&["-n", &ns, "scale", "deployment/app", "--replicas=2"])
            .await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let wait = Duration::from_secs(120).saturating_sub(away.elapsed());
    tokio::time::sleep(wait).await;
    c.reconnect(node).await?;
    result?;

    support::wait_ready_status(c, node, "True", Duration::from_secs(180)).await?;
    let last = std::sync::Mutex::new(Vec::new());
    let new = eventually(Duration::from_secs(240), POLL, "the new pods", || async {
        let pods = support::pods(c, &ns, "app=app").await.ok()?;
        *last.lock().unwrap() = pods.clone();
        let fresh = pods.iter().all(|p| {
            support::running_ready(p)
                && p["spec"]["containers"][0]["env"] == json!([{"name": "VERSION", "value": "2"}])
        });
        (pods.len() == 2 && fresh).then_some(pods)
    })
    .await
    .with_context(|| format!("last seen: {}", support::summary(&last.lock().unwrap())))?;
    ensure!(
        new.iter().all(|p| support::name(p) != old_name),
        "the old pod {old_name} is still there"
    );
    for p in &new {
        let v = exec(c, &ns, &support::name(p), &["sh", "-c", "echo $VERSION"]).await?;
        ensure!(v == "2\n", "{} runs VERSION={v:?}", support::name(p));
    }
    let last = std::sync::Mutex::new(BTreeSet::new());
    eventually(
        Duration::from_secs(120),
        Duration::from_secs(2),
        "the old container stopped",
        || async {
            let running = running_in(c, node, &ns).await.ok()?;
            *last.lock().unwrap() = running.clone();
            (running.len() == 4 && !running.contains(&old_id)).then_some(())
        },
    )
    .await
    .with_context(|| {
        format!(
            "running on {node}: {:?} (old {old_id})",
            last.lock().unwrap()
        )
    })?;
    // The taint manager schedules deletions when the unreachable taint lands ("Marking for
    // deletion" after the pods' 300 s toleration) and cancels them when it goes.
    let events = c
        .kubectl_json(&[
            "-n",
            &ns,
            "get",
            "events",
            "--field-selector",
            "reason=TaintManagerEviction",
        ])
        .await?;
    let evicted: Vec<&str> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.starts_with("Marking for deletion"))
        .collect();
    ensure!(
        evicted.is_empty(),
        "pods were evicted while the edge was away: {evicted:?}"
    );
    support::drop_namespace(c, &ns).await;
    Ok(())
}

/// cloudcore stopped and started again: both edges reconnect (hub and tunnel), renew their
/// Leases and are Ready, and each runs a pod of a new Deployment spread over them by the scheduler, whose logs and
/// exec work. The refusal counters are checked before the stop; cloudcore counts from zero
/// after it.
pub(super) async fn cloudcore_restart(
    c: &Cluster,
    baseline: &Baseline,
    nodes: [&str; 2],
) -> Result<()> {
    baseline.check(c).await.context("before the restart")?;
    let stopped = chrono_now(c).await?;
    c.stop("cloudcore").await?;
    baseline.restarted();
    c.start("cloudcore").await?;
    eventually(
        Duration::from_secs(150),
        POLL,
        "both edges connected again",
        || async {
            let m = c.metrics().await.ok()?;
            (m.sum("KubeEdge_CloudHub_connected_nodes") == 2.0
                && m.sum("cloudstream_tunnels") == 2.0)
                .then_some(())
        },
    )
    .await?;
    for n in nodes {
        eventually(
            Duration::from_secs(180),
            POLL,
            "Lease renewed after the restart",
            || async {
                let lease = c
                    .kubectl_json(&["-n", "kube-node-lease", "get", "lease", n])
                    .await
                    .ok()?;
                (lease["spec"]["renewTime"].as_str()? > stopped.as_str()).then_some(())
            },
        )
        .await
        .with_context(|| format!("{n} renews its Lease"))?;
        support::wait_ready_status(c, n, "True", Duration::from_secs(180)).await?;
    }
    let ns = support::namespace(c, &unique("after-restart")).await?;
    let mut spec = json!({
        "terminationGracePeriodSeconds": 5,
        "containers": [container(c, "echo up on $NODE; while true; do sleep 1; done")],
        "topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }],
    });
    spec["containers"][0]["env"] =
        json!([{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]);
    apply(c, &deployment("spread", &ns, 2, spec)).await?;
    let pods = support::wait_running(c, &ns, "app=spread", 2).await?;
    let on: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_owned))
        .collect();
    ensure!(
        on == nodes.iter().map(|n| n.to_string()).collect(),
        "spread over {on:?}"
    );
    for p in &pods {
        let name = support::name(p);
        let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
        let logs = c.kubectl_ok(&["-n", &ns, "logs", &name]).await?;
        ensure!(logs == format!("up on {node}\n"), "{name} logs {logs:?}");
        let out = exec(c, &ns, &name, &["sh", "-c", "echo $NODE"]).await?;
        ensure!(out == format!("{node}\n"), "{name} exec {out:?}");
    }
    support::drop_namespace(c, &ns).await;
    Ok(())
}
