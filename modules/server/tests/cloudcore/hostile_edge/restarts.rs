//! Revocation across a cloudcore that was not running: a Node deleted while no cloudcore ran,
//! or deleted and created again under the same name meanwhile, is noticed when cloudcore
//! starts (it remembers the edge nodes it has seen in `kubeedge/edgenodes` and compares them
//! with its first full Node list), so the old certificate no longer connects. The nodes are
//! not edge-labelled: no other cloudcore of this test binary counts them as its edges, so
//! only the restarted one can notice their deletion.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use edge::hub::{EdgeCerts, HubClient, HubClientConfig};
use edgecore_interop::{CloudSpec, Cloudcore, eventually};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, PostParams};

const WAIT: Duration = Duration::from_secs(30);

fn spec() -> (CloudSpec, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "cloudcore-restarts-{}-{}",
        std::process::id(),
        &beehive::new_id()[..8]
    ));
    let mut spec = CloudSpec::for_testenv(&dir).expect("cloud spec");
    spec.replica_address = Some(crate::support::replica_address());
    (spec, dir)
}

async fn bootstrap(core: &Cloudcore, node: &str) -> EdgeCerts {
    let https = format!("https://{}", core.spec().ports.https_addr());
    edge::hub::bootstrap(&https, &core.token().expect("token"), node)
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {node}: {e}"))
}

/// Connects `node` with `certs`: the connected client, or `None` when the session did not
/// come up within `limit`.
async fn session(
    core: &Cloudcore,
    node: &str,
    certs: &EdgeCerts,
    limit: Duration,
) -> Option<HubClient> {
    let tls = Arc::new(certs.client_tls().expect("client TLS"));
    let config = HubClientConfig::new(node, core.spec().ports.websocket_addr().to_string());
    let (hub, mut events) = HubClient::start(config, tls);
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let up = eventually(limit, "connected", || async {
        hub.is_connected().then_some(())
    })
    .await
    .is_ok();
    if up {
        Some(hub)
    } else {
        hub.stop();
        None
    }
}

/// Whether `node` connects with `certs` within `limit` (the session is closed again).
async fn connects(core: &Cloudcore, node: &str, certs: &EdgeCerts, limit: Duration) -> bool {
    session(core, node, certs, limit)
        .await
        .map(|hub| hub.stop())
        .is_some()
}

async fn create_node(nodes: &Api<Node>, name: &str) -> Node {
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("a Node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("admin creates the Node")
}

/// Waits until `kubeedge/edgenodes` remembers `node` as `uid`.
async fn remembered(client: &kube::Client, node: &str, uid: &str) {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "kubeedge");
    eventually(
        WAIT,
        "the node remembered in kubeedge/edgenodes",
        || async {
            let data = cms.get_opt("edgenodes").await.ok()??.data?;
            data.get(node)?.starts_with(uid).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{node}: {e}"));
}

#[tokio::test]
async fn nodes_deleted_or_recreated_while_cloudcore_was_down_are_revoked_when_it_starts() {
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let (spec, dir) = spec();
    let mut core = Cloudcore::start(&spec)
        .await
        .unwrap_or_else(|e| panic!("cloudcore: {e}"));
    let id = &beehive::new_id()[..8];
    let (gone, again, kept) = (
        format!("rs-gone-{id}"),
        format!("rs-again-{id}"),
        format!("rs-kept-{id}"),
    );
    let mut certs = Vec::new();
    for name in [&gone, &again, &kept] {
        let node = create_node(&nodes, name).await;
        let c = bootstrap(&core, name).await;
        let hub = session(&core, name, &c, WAIT)
            .await
            .unwrap_or_else(|| panic!("{name} connects"));
        remembered(&client, name, node.metadata.uid.as_deref().unwrap()).await;
        hub.stop();
        certs.push(c);
    }
    assert!(core.stop().await, "cloudcore stops cleanly");

    // While no cloudcore runs: one Node deleted, one deleted and created again.
    nodes.delete(&gone, &DeleteParams::default()).await.unwrap();
    nodes
        .delete(&again, &DeleteParams::default())
        .await
        .unwrap();
    eventually(WAIT, "both Nodes gone", || async {
        let a = nodes.get_opt(&gone).await.ok()?;
        let b = nodes.get_opt(&again).await.ok()?;
        (a.is_none() && b.is_none()).then_some(())
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    create_node(&nodes, &again).await;

    let mut core = Cloudcore::start(&spec)
        .await
        .unwrap_or_else(|e| panic!("cloudcore again: {e}"));
    let short = Duration::from_secs(5);
    assert!(
        !connects(&core, &gone, &certs[0], short).await,
        "the deleted node's certificate still connects"
    );
    assert!(
        !connects(&core, &again, &certs[1], short).await,
        "the re-created node's old certificate still connects"
    );
    assert!(
        connects(&core, &kept, &certs[2], WAIT).await,
        "an untouched node keeps its certificate"
    );
    // The re-created node's edge bootstraps again and connects.
    let fresh = bootstrap(&core, &again).await;
    assert!(connects(&core, &again, &fresh, WAIT).await);

    core.stop().await;
    for name in [&again, &kept] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
