//! One configuration's run: a cluster with two real edges, three lines of scenarios at once.
//!
//! - the steady edge (`edge-node-1`) registers itself and stays Ready for at least five
//!   minutes, through the next two lines, on edged's own Lease cadence;
//! - on the steady edge, one after another: a Deployment and its pod status, volumes and
//!   environment, logs, exec, attach and port-forward, scaling to zero and deleting;
//! - on the other edge (`edge-node-2`): edgecore killed and restarted with pods running, then
//!   the edge cut off for two minutes while its Deployment changes;
//! - when those are done, cloudcore restarts; both edges come back Ready and run a new
//!   Deployment.
//!
//! A failing scenario does not stop the others; the test fails at the end naming each. After
//! every line, and before cloudcore stops, the refusal and failure counters must not have
//! grown since the edges registered; at the end `down` must leave nothing on the host.

mod lifecycle;
mod node;
mod stream;
mod workload;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use local_up::{Cluster, LocalUp, eventually};

use crate::support::{self, POLL};

/// The edge every scenario but the disruptive ones uses.
const STEADY: &str = "edge-node-1";
/// The edge that is killed, restarted and cut off.
const DISRUPTED: &str = "edge-node-2";

/// The refusal counters as they were when the edges had registered (cloudcore counts from
/// zero again after it restarts).
#[derive(Debug, Default)]
struct Baseline(Mutex<BTreeMap<String, f64>>);

impl Baseline {
    async fn check(&self, c: &Cluster) -> Result<()> {
        let now = c.metrics().await?;
        let baseline = self.0.lock().unwrap().clone();
        support::no_refusals_since(&now, &baseline)
    }

    fn restarted(&self) {
        self.0.lock().unwrap().clear();
    }

    /// Counts `by` more of `key` as expected (a refusal a scenario provokes on purpose).
    fn expect(&self, key: &str, by: f64) {
        *self.0.lock().unwrap().entry(key.to_owned()).or_default() += by;
    }
}

/// Which configuration runs, for the progress lines.
const fn configuration() -> &'static str {
    if super::IMPERSONATE {
        "impersonated"
    } else {
        "kubeedge-defaults"
    }
}

#[tokio::test]
async fn real_edges_run_pods_through_cloudcore() {
    // local-up's own packages (containerd, runc, CNI, umoci, busybox-static) it checks itself,
    // naming the package.
    test_tiers::require!(ApiServer, Root, Edgecore);
    let cluster = tokio::task::spawn_blocking(|| {
        LocalUp::new()
            .edges(2)
            .impersonate(super::IMPERSONATE)
            .log_level(support::LOG_LEVEL)
            .start()
    })
    .await
    .expect("local-up task")
    .unwrap_or_else(|e| panic!("{e}"));
    let c = &cluster;
    let mut failures: Vec<String> = Vec::new();

    // Both Leases exist before the baseline: a kubelet asks for its Lease before creating it,
    // and that first answer is NotFound. edged's lease controller backs off when it runs before
    // its own Node is in its local store, and was seen to create the Lease 70 s after start.
    let leases = eventually(Duration::from_secs(180), POLL, "node leases", || async {
        let l = c
            .kubectl_json(&["-n", "kube-node-lease", "get", "leases"])
            .await
            .ok()?;
        (l["items"].as_array()?.len() == 2).then_some(())
    })
    .await;
    let baseline = Baseline::default();
    match (leases, c.metrics().await) {
        (Ok(()), Ok(m)) => *baseline.0.lock().unwrap() = support::refusals(&m),
        (Err(e), _) => failures.push(format!("{e:#}")),
        (_, Err(e)) => failures.push(format!("metrics: {e:#}")),
    }

    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let watch = scenario(
        "the steady edge registers itself and stays Ready",
        node::registers_and_stays_ready(c, STEADY, done_rx),
    );
    let rest = async {
        let steady = async {
            let mut r = vec![
                scenario(
                    "a Deployment runs where the scheduler put it",
                    workload::deployment_runs_and_reports_status(c),
                )
                .await,
                scenario(
                    "volumes and environment hold the right content",
                    workload::volumes_and_environment(c),
                )
                .await,
                scenario("logs, logs -f, logs --previous", stream::logs(c)).await,
                scenario(
                    "exec with stdin and a tty, attach, port-forward",
                    stream::exec_attach_port_forward(c, &baseline),
                )
                .await,
                scenario(
                    "scaling to zero and deleting remove the containers",
                    workload::scale_to_zero_and_delete(c),
                )
                .await,
            ];
            r.push(baseline.check(c).await);
            r
        };
        let disrupted = async {
            let mut r = vec![
                scenario(
                    "edgecore killed and restarted keeps its pods",
                    lifecycle::edgecore_restart(c, DISRUPTED),
                )
                .await,
                scenario(
                    "an edge away two minutes converges when back",
                    lifecycle::away_while_deployment_changes(c, DISRUPTED),
                )
                .await,
            ];
            r.push(baseline.check(c).await);
            r
        };
        let (mut s, d) = tokio::join!(steady, disrupted);
        s.extend(d);
        let _ = done_tx.send(true);
        s
    };
    let (watched, mut results) = tokio::join!(watch, rest);
    // After the watch: the edges miss Lease renewals for up to a minute when cloudcore
    // restarts (edgehub waits 30 s to reconnect, and edged's Lease update sent meanwhile waits
    // 60 s for its answer), which the controller manager may see as Unknown.
    results.push(
        scenario(
            "cloudcore restarted; both edges carry on",
            lifecycle::cloudcore_restart(c, &baseline, [STEADY, DISRUPTED]),
        )
        .await,
    );
    for r in std::iter::once(watched).chain(results) {
        if let Err(e) = r {
            failures.push(format!("{e:#}"));
        }
    }
    if let Err(e) = baseline.check(c).await {
        failures.push(format!("{e:#}"));
    }
    match support::error_replies(c) {
        Ok(replies) if replies.is_empty() => {}
        Ok(replies) => failures.push(format!(
            "cloudcore answered real edge requests with errors:\n  {}",
            replies.join("\n  ")
        )),
        Err(e) => failures.push(format!("{e:#}")),
    }
    // First: a crashed edgecore explains most of what failed after it.
    let crashes = support::edge_crashes(c);
    failures.splice(0..0, crashes);
    if !failures.is_empty() {
        let logs = cluster.dir().join("logs");
        // The cluster goes down with the test process (its owner); the logs stay.
        let _keep = cluster.keep();
        panic!(
            "{} failure(s) (logs in {}):\n- {}",
            failures.len(),
            logs.display(),
            failures.join("\n- ")
        );
    }
    if let Err(e) = tokio::task::spawn_blocking(move || support::down_and_check(cluster))
        .await
        .expect("down task")
    {
        panic!("{e:#}");
    }
}

/// [`support::scenario`] with the configuration's name.
async fn scenario(name: &str, f: impl Future<Output = Result<()>>) -> Result<()> {
    support::scenario(&format!("{}: {name}", configuration()), f).await
}

/// A name unique within the run, for namespaces.
fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
