//! KubeEdge's `featureGates.requireAuthorization` on cloudcore and a real edge: the edge's
//! metaServer requests its own kubelet-serving certificate (a CSR it sends through cloudhub
//! and edgecontroller), cloudcore's CSR approver approves it, kube-controller-manager signs it
//! with the cluster's CA, and the metaServer serves HTTPS with exactly that certificate. An
//! edge whose certificate is not issued within four minutes exits, so the edge staying up is
//! part of what is checked.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use local_up::{Cluster, LocalUp, eventually};
use serde_json::Value;

use crate::support::{self, POLL};

/// Where the metaServer serves (edgecore's defaults): its `server` and `dummyServer`.
const METASERVER: [&str; 2] = ["127.0.0.1:10550", "169.254.30.10:10550"];
/// The condition KubeEdge's approver writes, which ours writes too.
const REASON: &str = "AutoApproved";
const MESSAGE: &str = "Auto approving MetaServer serving certificate.";
/// How long the edge waits for its certificate before it gives up and exits.
const EDGE_PATIENCE: Duration = Duration::from_secs(240);

#[tokio::test]
async fn the_edge_metaserver_serves_with_the_certificate_cloudcore_approved() {
    test_tiers::require!(ApiServer, Root, Edgecore);
    let cluster = tokio::task::spawn_blocking(|| {
        LocalUp::new()
            .edges(1)
            .require_authorization(true)
            .log_level(support::LOG_LEVEL)
            .start()
    })
    .await
    .expect("local-up task")
    .unwrap_or_else(|e| panic!("{e}"));
    let checked = support::scenario(
        "the metaServer's own CSR is approved, signed and served",
        metaserver_certificate(&cluster),
    )
    .await;
    let down = tokio::task::spawn_blocking(move || support::down_and_check(cluster))
        .await
        .expect("down task");
    checked.unwrap();
    down.unwrap();
}

async fn metaserver_certificate(c: &Cluster) -> Result<()> {
    let node = c.nodes()[0].as_str();
    // client-go's certificate manager names the request after its store and the node.
    let name = format!("metaserver-csr-{node}");
    let csr: Value = eventually(
        EDGE_PATIENCE,
        POLL,
        "the metaServer's CSR issued",
        || async {
            let csr = c.kubectl_json(&["get", "csr", &name]).await.ok()?;
            let issued = csr["status"]["certificate"]
                .as_str()
                .is_some_and(|s| !s.is_empty());
            issued.then_some(csr)
        },
    )
    .await?;

    // What the edge asked for, and who sent it: cloudcore (no impersonation here).
    ensure!(
        csr["spec"]["signerName"] == "kubernetes.io/kubelet-serving",
        "signer: {}",
        csr["spec"]["signerName"]
    );
    ensure!(
        csr["spec"]["username"] == "system:serviceaccount:kubeedge:cloudcore",
        "requested by {}",
        csr["spec"]["username"]
    );
    // Approved by our approver, with KubeEdge's condition, and by nobody else.
    let conditions = csr["status"]["conditions"]
        .as_array()
        .context("no conditions")?;
    ensure!(
        conditions.len() == 1
            && conditions[0]["type"] == "Approved"
            && conditions[0]["status"] == "True"
            && conditions[0]["reason"] == REASON
            && conditions[0]["message"] == MESSAGE,
        "conditions: {conditions:?}"
    );
    let metrics = c.metrics().await?;
    ensure!(
        metrics.sum("csrapprover_approved_total") == 1.0,
        "csrapprover_approved_total is {}",
        metrics.sum("csrapprover_approved_total")
    );

    // The issued certificate: the node's serving identity for both addresses, signed by the
    // cluster's CA (kube-controller-manager's kubelet-serving signer).
    let ca = c.dir().join("k8s/pki/ca.crt");
    let ca = ca.to_str().context("CA path")?;
    let issued = c.dir().join("metaserver-issued.crt");
    let b64 = c
        .kubectl_ok(&["get", "csr", &name, "-o", "jsonpath={.status.certificate}"])
        .await?;
    std::fs::write(&issued, STANDARD.decode(b64.trim())?)?;
    let issued = issued.to_str().context("path")?;
    let text = openssl(&[
        "x509",
        "-in",
        issued,
        "-noout",
        "-subject",
        "-ext",
        "subjectAltName",
    ])?;
    ensure!(
        text.contains(&format!("CN = system:node:{node}")),
        "subject: {text}"
    );
    for addr in METASERVER {
        let ip = addr.split(':').next().unwrap_or_default();
        ensure!(text.contains(&format!("IP Address:{ip}")), "SANs: {text}");
    }
    openssl(&["verify", "-CAfile", ca, issued])?;
    let fingerprint = openssl(&["x509", "-in", issued, "-noout", "-fingerprint", "-sha256"])?;

    // The metaServer serves with it on both addresses, in the edge's network namespace, and a
    // client that trusts only the cluster's CA accepts it for that address. The edge serves
    // once it has polled the issued certificate (every 5 s).
    for addr in METASERVER {
        let served = eventually(
            Duration::from_secs(60),
            POLL,
            "the metaServer serving",
            || {
                let script = format!(
                    "openssl s_client -connect {addr} -CAfile {ca} -verify_return_error \
                 -verify_ip {ip} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256",
                    ip = addr.split(':').next().unwrap_or_default()
                );
                async move { c.netns(node, &["sh", "-c", &script]).await.ok() }
            },
        )
        .await?;
        ensure!(
            served.trim() == fingerprint.trim(),
            "{addr} serves {served:?}, the issued certificate is {fingerprint:?}"
        );
    }
    let version = c
        .netns(
            node,
            &[
                "curl",
                "-sSf",
                "--cacert",
                ca,
                &format!("https://{}/version", METASERVER[0]),
            ],
        )
        .await?;
    ensure!(version.contains("gitVersion"), "/version: {version}");

    // Nothing was refused on the way, and the edge is up and Ready.
    support::no_refusals_since(&c.metrics().await?, &BTreeMap::new())?;
    let replies = support::error_replies(c)?;
    ensure!(replies.is_empty(), "error replies: {replies:?}");
    let crashes = support::edge_crashes(c);
    ensure!(crashes.is_empty(), "{crashes:?}");
    ensure!(
        support::ready_status(&support::node(c, node).await?) == "True",
        "{node} is not Ready"
    );
    Ok(())
}

/// `openssl ARGS…`, which must succeed; its stdout.
fn openssl(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .context("openssl (apt-get install openssl)")?;
    ensure!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
