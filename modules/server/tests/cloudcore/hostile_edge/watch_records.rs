//! What an edge's watches make cloudcore record: no ObjectSync per watched object, but a
//! record per node of what its watches delivered, bounded by `maxDeliveredBytesPerNode` (16 KiB
//! for the shared cloudcore here) and kept in the node's `kubeedge/dynamiccontroller.<node>`
//! ConfigMap. With it, an object deleted while the edge (or cloudcore) was away is deleted at
//! the edge once it is back: edgecore replays its watches from its own store, so nothing else
//! would remove it.

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::DeleteParams;
use kubeedge_api::reliablesyncs::ObjectSync;

use super::metaserver::application;
use super::*;

/// The shared cloudcore's `maxDeliveredBytesPerNode`.
const RECORD_BOUND: usize = 16 << 10;

async fn headless_service(api: Api<Service>, name: &str, label: &str) -> Service {
    let svc: Service = from(json!({
        "metadata": {"name": name, "labels": {"app": label}},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}));
    create(api, &svc).await
}

/// Registers a watch of the services in `ns` (labelled `app=<label>` when given).
async fn watch_services(edge: &Edge, ns: &str, label: Option<&str>) {
    let mut option = json!({"watch": true});
    if let Some(l) = label {
        option["labelSelector"] = json!(format!("app={l}"));
    }
    let answer = edge
        .apply(application(
            "watch",
            &format!("/core/v1/services/{ns}/null"),
            Some(option),
            None,
        ))
        .await;
    assert!(answer.approved().is_null(), "the watch is registered");
}

/// The pushes to `edge` of `operation` about services of `ns`.
fn service_pushes(edge: &Edge, ns: &str, operation: &str) -> Vec<Message> {
    let prefix = format!("{ns}/service/");
    edge.pushed
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.route.resource.starts_with(&prefix) && m.route.operation == operation)
        .cloned()
        .collect()
}

/// The ObjectSync records of `node` in `ns`.
async fn object_syncs(client: &kube::Client, ns: &str, node: &str) -> Vec<String> {
    Api::<ObjectSync>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .expect("admin lists ObjectSyncs")
        .items
        .into_iter()
        .map(|r| r.name_any())
        .filter(|n| n.starts_with(&format!("{node}.")))
        .collect()
}

/// The `delivered` record of `node` once it holds `want` (by uid), as JSON text.
async fn delivered_record(
    client: &kube::Client,
    node: &str,
    want: impl Fn(&serde_json::Map<String, Value>) -> bool,
) -> String {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kubeedge");
    let name = format!("dynamiccontroller.{node}");
    eventually(
        Duration::from_secs(30),
        "the node's delivery record",
        || async {
            let text = cms.get_opt(&name).await.ok()??.data?.remove("delivered")?;
            let map: serde_json::Map<String, Value> = serde_json::from_str(&text).ok()?;
            want(&map).then_some(text)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{node}: {e}"))
}

#[tokio::test]
async fn a_node_watching_many_objects_grows_no_object_sync_and_a_bounded_record() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n15-many").await;
    let label = unique("app");
    const SERVICES: usize = 150;
    for i in 0..SERVICES {
        headless_service(s.api(), &format!("svc-{i}"), &label).await;
    }
    let untracked_before = cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value("dynamiccontroller_delivered_untracked_total", &[])
        .unwrap_or(0.0);
    watch_services(&s.edge, &s.ns, Some(&label)).await;
    // Every object is delivered, recorded or not.
    eventually(
        Duration::from_secs(60),
        "every service at the edge",
        || async { (service_pushes(&s.edge, &s.ns, "insert").len() >= SERVICES).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}: {} of {SERVICES}",
            service_pushes(&s.edge, &s.ns, "insert").len()
        )
    });
    // The edge acknowledged each (the client does as edgecore does); ObjectSyncs would be
    // written within moments of an acknowledgement.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let records = object_syncs(&s.client, &s.ns, &s.node).await;
    assert!(records.is_empty(), "watch events recorded: {records:?}");
    // The node's record of what it was delivered stops at its bound.
    let text = delivered_record(&s.client, &s.node, |m| m.len() > 10).await;
    let recorded = serde_json::from_str::<serde_json::Map<String, Value>>(&text)
        .unwrap()
        .len();
    assert!(
        text.len() <= RECORD_BOUND && (10..SERVICES).contains(&recorded),
        "{recorded} of {SERVICES} objects recorded in {} bytes (bound {RECORD_BOUND})",
        text.len()
    );
    let untracked = cloud()
        .metrics()
        .await
        .expect("/metrics")
        .value("dynamiccontroller_delivered_untracked_total", &[])
        .expect("dynamiccontroller_delivered_untracked_total is exported");
    assert!(
        untracked - untracked_before >= (SERVICES - recorded) as f64,
        "objects beyond the bound are counted: {untracked_before} -> {untracked}"
    );
}

#[tokio::test]
async fn a_delete_missed_while_the_edge_was_away_reaches_it_when_it_reconnects() {
    test_tiers::require!(ApiServer);
    let mut s = Scenario::new("n15-away").await;
    let (ns, node) = (s.ns.clone(), s.node.clone());
    let services: Api<Service> = s.api();
    let label = unique("app");
    headless_service(services.clone(), "kept", &label).await;
    let gone = headless_service(services.clone(), "gone", &label).await;
    watch_services(&s.edge, &ns, None).await;
    s.edge.pushed(&format!("{ns}/service/gone"), "insert").await;
    s.edge.pushed(&format!("{ns}/service/kept"), "insert").await;
    // The edge goes away; the service is deleted meanwhile.
    s.edge.client.stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    services
        .delete("gone", &DeleteParams::default())
        .await
        .expect("admin deletes the service");
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.edge = Edge::connect(&node).await;
    let delete = s.edge.pushed(&format!("{ns}/service/gone"), "delete").await;
    assert_eq!(delete.route.source, "dynamiccontroller", "{delete}");
    let obj: Value = serde_json::from_str(delete.content.as_json()).expect("JSON content");
    assert_eq!(
        (&obj["apiVersion"], &obj["kind"], &obj["metadata"]["uid"]),
        (
            &json!("v1"),
            &json!("Service"),
            &json!(gone.metadata.uid.unwrap())
        ),
        "the delete names the object for the edge's store: {obj}"
    );
    assert!(
        service_pushes(&s.edge, &ns, "delete")
            .iter()
            .all(|m| m.route.resource.ends_with("/gone")),
        "only the deleted service is deleted at the edge"
    );
    let records = object_syncs(&s.client, &ns, &node).await;
    assert!(records.is_empty(), "watch events recorded: {records:?}");
}

#[tokio::test]
async fn a_delete_missed_while_cloudcore_was_restarted_reaches_the_edge() {
    test_tiers::require!(ApiServer);
    let (client, ns, node) = Scenario::names("n15-restart").await;
    edge_node(&client, &node).await;
    let dir = std::env::temp_dir().join(format!(
        "cloudcore-n15-restart-{}-{}",
        std::process::id(),
        short_id()
    ));
    let mut spec = CloudSpec::for_testenv(&dir).expect("cloud spec");
    spec.impersonate = super::super::IMPERSONATE;
    spec.replica_address = Some(crate::support::replica_address());
    let mut core = Cloudcore::start(&spec)
        .await
        .unwrap_or_else(|e| panic!("cloudcore: {e}"));
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let label = unique("app");
    headless_service(services.clone(), "kept", &label).await;
    let gone = headless_service(services.clone(), "gone", &label).await;
    let gone_uid = gone.metadata.uid.clone().unwrap();
    let edge = Edge::connect_to(&core, &node).await;
    watch_services(&edge, &ns, None).await;
    edge.pushed(&format!("{ns}/service/gone"), "insert").await;
    // Recorded before cloudcore stops (it also writes what is pending when it stops).
    delivered_record(&client, &node, |m| m.contains_key(&gone_uid)).await;
    drop(edge);
    assert!(core.stop().await, "cloudcore stops cleanly");

    // While no cloudcore runs (and the edge is away): the service is deleted.
    services
        .delete("gone", &DeleteParams::default())
        .await
        .expect("admin deletes the service");

    let mut core = Cloudcore::start(&spec)
        .await
        .unwrap_or_else(|e| panic!("cloudcore again: {e}"));
    let edge = Edge::connect_to(&core, &node).await;
    let delete = edge.pushed(&format!("{ns}/service/gone"), "delete").await;
    assert_eq!(delete.route.source, "dynamiccontroller", "{delete}");
    let obj: Value = serde_json::from_str(delete.content.as_json()).expect("JSON content");
    assert_eq!(obj["metadata"]["uid"], json!(gone_uid), "{obj}");
    assert!(
        obj["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty()),
        "the delete carries a current version, so the edge's open watches report it: {obj}"
    );
    assert!(
        service_pushes(&edge, &ns, "delete")
            .iter()
            .all(|m| m.route.resource.ends_with("/gone")),
        "only the deleted service is deleted at the edge"
    );
    drop(edge);
    core.stop().await;
    let _ = Api::<k8s_openapi::api::core::v1::Node>::all(client)
        .delete(&node, &DeleteParams::default())
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}
