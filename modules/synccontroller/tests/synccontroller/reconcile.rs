//! ObjectSync reconciliation against a real API server (docs/controllers.md#synccontroller:
//! updates, orphan deletes, GC, device source, cluster scope, event-driven reconciles), with a fake
//! edge capturing what is sent to `cloudhub`.

use std::collections::BTreeMap;
use std::time::Duration;

use beehive::{Bus, Message};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeedge_api::devices::Device;
use kubeedge_api::reliablesyncs::{ClusterObjectSync, ObjectSync};
use kubeedge_api::testing::{FakeEdge, faulty_client};
use serde_json::{Value, json};
use synccontroller::{SyncController, SyncControllerConfig, SyncControllerMetrics};

const WAIT: Duration = Duration::from_secs(20);

struct Env {
    bus: Bus,
    edge: FakeEdge,
    client: kube::Client,
    metrics: SyncControllerMetrics,
}

async fn start(interval: u64) -> Env {
    start_with(interval, k8s_testenv::client().await).await
}

/// A synccontroller with a full pass every `interval` seconds, talking through `controller`;
/// the returned [`Env::client`] is a plain one.
async fn start_with(interval: u64, controller: kube::Client) -> Env {
    start_replica(interval, controller, None).await
}

/// [`start_with`], as one of several replicas when `ownership` is given.
async fn start_replica(
    interval: u64,
    controller: kube::Client,
    ownership: Option<kubeedge_api::replicas::Ownership>,
) -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let bus = Bus::new();
    let edge = FakeEdge::register(&bus, "cloudhub");
    let config = SyncControllerConfig {
        reconcile_interval_seconds: interval,
        ..SyncControllerConfig::default()
    };
    let mut sc = SyncController::new(config, bus.endpoint("synccontroller"), controller);
    if let Some(o) = ownership {
        sc = sc.with_ownership(o);
    }
    let metrics = sc.metrics();
    bus.register(sc).unwrap();
    bus.start().unwrap();
    Env {
        bus,
        edge,
        client,
        metrics,
    }
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id()[..8])
}

async fn node(client: &kube::Client, name: &str) -> Node {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap()
}

async fn pod(client: &kube::Client, ns: &str, name: &str) -> Pod {
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
}

fn spec(api_version: &str, kind: &str, name: &str) -> Value {
    json!({"objectAPIVersion": api_version, "objectKind": kind, "objectName": name})
}

/// Creates ObjectSync `<ns>/<name>` and sets its acknowledged version (unless empty).
async fn object_sync(client: &kube::Client, ns: &str, name: &str, spec: Value, acked: &str) {
    let api = Api::<ObjectSync>::namespaced(client.clone(), ns);
    let os: ObjectSync =
        serde_json::from_value(json!({"apiVersion": "reliablesyncs.kubeedge.io/v1alpha1",
        "kind": "ObjectSync", "metadata": {"name": name}, "spec": spec}))
        .unwrap();
    api.create(&PostParams::default(), &os).await.unwrap();
    if !acked.is_empty() {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"objectResourceVersion": acked}})),
        )
        .await
        .unwrap();
    }
}

/// Records that `node` acknowledged `pod` at version `acked` (unset when empty): ObjectSync
/// `<node>.<pod uid>` in the pod's namespace.
async fn pod_record(client: &kube::Client, node: &str, pod: &Pod, acked: &str) {
    let ns = pod.namespace().unwrap();
    let name = format!("{node}.{}", pod.uid().unwrap());
    object_sync(
        client,
        &ns,
        &name,
        spec("v1", "Pod", &pod.name_any()),
        acked,
    )
    .await;
}

/// Creates ClusterObjectSync `name` and sets its acknowledged version (unless empty).
async fn cluster_object_sync(client: &kube::Client, name: &str, spec: Value, acked: &str) {
    let api = Api::<ClusterObjectSync>::all(client.clone());
    let os: ClusterObjectSync =
        serde_json::from_value(json!({"apiVersion": "reliablesyncs.kubeedge.io/v1alpha1",
        "kind": "ClusterObjectSync", "metadata": {"name": name}, "spec": spec}))
        .unwrap();
    api.create(&PostParams::default(), &os).await.unwrap();
    if !acked.is_empty() {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"objectResourceVersion": acked}})),
        )
        .await
        .unwrap();
    }
}

fn is(resource: String, op: &'static str) -> impl Fn(&Message) -> bool {
    move |m| m.route.resource == resource && m.route.operation == op
}

fn body(m: &Message) -> Value {
    serde_json::from_str(m.content.as_json()).unwrap()
}

#[actix_rt::test]
async fn a_newer_pod_is_resent_and_an_acknowledged_one_is_not() {
    test_tiers::require!(ApiServer);
    let env = start(5).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web").await;
    let calm = pod(&env.client, &ns, "calm").await;
    pod_record(&env.client, &e1, &web, "1").await;
    let calm_rv = calm.resource_version().unwrap();
    pod_record(&env.client, &e1, &calm, &calm_rv).await;
    let m = env
        .edge
        .wait_for(
            Duration::from_secs(10),
            is(format!("node/{e1}/{ns}/pod/web"), "update"),
        )
        .await
        .expect("update within 10 s");
    assert_eq!(
        (m.route.source.as_str(), m.route.group.as_str()),
        ("edgecontroller", "resource")
    );
    assert_eq!(m.header.resource_version, web.resource_version().unwrap());
    assert_eq!(
        (body(&m)["kind"].as_str(), body(&m)["apiVersion"].as_str()),
        (Some("Pod"), Some("v1"))
    );
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        env.edge
            .matching(|m| m.route.resource.ends_with("/pod/calm"))
            .is_empty(),
        "acknowledged: nothing sent"
    );
    env.bus.shutdown().await;
}

/// A record without a status: its writer is setting it (status is a separate call) or died
/// between the two calls. Nothing is sent at first (an acknowledged version may be on its way);
/// a record that stays without a status counts as never acknowledged and its object is sent.
#[actix_rt::test]
async fn a_record_without_a_status_sends_nothing_at_first_then_the_object() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let started = tokio::time::Instant::now();
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web").await;
    pod_record(&env.client, &e1, &web, "").await;
    let passes = env.metrics.snapshot().passes;
    while env.metrics.snapshot().passes < passes + 3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        env.edge
            .matching(|m| m.route.resource.starts_with(&format!("node/{e1}/")))
            .is_empty(),
        "nothing while the status may be on its way"
    );
    let m = env
        .edge
        .wait_for(
            Duration::from_secs(60),
            is(format!("node/{e1}/{ns}/pod/web"), "update"),
        )
        .await
        .expect("a record left without a status gets its object");
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "not before the grace: {:?}",
        started.elapsed()
    );
    assert_eq!(
        m.header.resource_version,
        web.metadata.resource_version.clone().unwrap()
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_gone_object_gets_a_delete_again_and_again_until_the_record_goes() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let uid = "11111111-2222-3333-4444-555555555555";
    let name = format!("{e1}.{uid}");
    object_sync(&env.client, &ns, &name, spec("v1", "Pod", "web"), "5").await;
    let resource = format!("node/{e1}/{ns}/pod/web");
    let deletes = env
        .edge
        .wait_count(2, WAIT, is(resource.clone(), "delete"))
        .await;
    assert!(deletes.len() >= 2, "repeated");
    let m = &deletes[0];
    assert_eq!(body(m)["metadata"]["uid"], uid);
    assert_eq!(body(m)["metadata"]["name"], "web");
    assert!(m.header.resource_version.is_empty());
    // The ACK of the delete removes the record (cloudhub's job): then it stops.
    Api::<ObjectSync>::namespaced(env.client.clone(), &ns)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = env.edge.matching(is(resource.clone(), "delete")).len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(env.edge.matching(is(resource, "delete")).len(), before);
    env.bus.shutdown().await;
}

/// Every delete costs the API server a GET and a LIST: a node that never acknowledges (away,
/// or hostile) gets it less and less often from the periodic pass, and at once when it connects.
#[actix_rt::test]
async fn an_unacknowledged_delete_is_resent_less_and_less_often_and_at_once_on_connect() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let name = format!("{e1}.21111111-2222-3333-4444-555555555555");
    object_sync(&env.client, &ns, &name, spec("v1", "Pod", "web"), "5").await;
    let delete = is(format!("node/{e1}/{ns}/pod/web"), "delete");
    env.edge
        .wait_for(WAIT, &delete)
        .await
        .expect("a first delete");
    // Passes every second for 8 s: one delete each would be 9 by now; waiting 1, 2, 4 s
    // between them gives 4 (at 0, 1, 3 and 7 s).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let sent = env.edge.matching(&delete).len();
    assert!(
        (2..=6).contains(&sent),
        "{sent} deletes in 8 s of 1 s passes"
    );
    // The next one is due 8 s after the last; a connect brings it at once.
    env.bus
        .endpoint("cloudhub")
        .send("synccontroller", connected(&e1))
        .await
        .unwrap();
    env.edge
        .wait_count(sent + 1, Duration::from_secs(3), &delete)
        .await;
    assert_eq!(
        env.edge.matching(&delete).len(),
        sent + 1,
        "caught up at once on connect"
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_recreated_object_gets_a_delete_with_the_old_uid_and_no_update() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let old = pod(&env.client, &ns, "web").await;
    let old_uid = old.uid().unwrap();
    Api::<Pod>::namespaced(env.client.clone(), &ns)
        .delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pod(&env.client, &ns, "web").await;
    object_sync(
        &env.client,
        &ns,
        &format!("{e1}.{old_uid}"),
        spec("v1", "Pod", "web"),
        "1",
    )
    .await;
    let resource = format!("node/{e1}/{ns}/pod/web");
    let m = env
        .edge
        .wait_for(WAIT, is(resource.clone(), "delete"))
        .await
        .expect("delete");
    assert_eq!(body(&m)["metadata"]["uid"].as_str(), Some(old_uid.as_str()));
    // The edge's metaServer store is keyed by kind: without it the copy would stay there; and
    // its watches report only versions newer than they hold, so the delete carries a current one.
    assert!(
        body(&m)["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
    );
    assert_eq!(
        (&body(&m)["apiVersion"], &body(&m)["kind"]),
        (&serde_json::json!("v1"), &serde_json::json!("Pod"))
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.edge.matching(is(resource, "update")).is_empty());
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn endpoint_slices_are_not_resent_unfiltered() {
    test_tiers::require!(ApiServer);
    // What a node sees of a slice depends on the node (dynamiccontroller filters it), so the
    // sync loop leaves its newer versions to dynamiccontroller.
    let env = start(1).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": ns},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "elsewhere"}]
        }))
        .unwrap();
    let slice = Api::namespaced(env.client.clone(), &ns)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
    object_sync(
        &env.client,
        &ns,
        &format!("{e1}.{}", slice.uid().unwrap()),
        spec("discovery.k8s.io/v1", "EndpointSlice", "web-1"),
        "1",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let resource = format!("node/{e1}/{ns}/endpointslice/web-1");
    assert!(env.edge.matching(is(resource, "update")).is_empty());
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_cluster_object_sync_of_a_node_resends_the_node() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let e1 = unique("e1");
    let n = node(&env.client, &e1).await;
    cluster_object_sync(
        &env.client,
        &format!("{e1}.{}", n.uid().unwrap()),
        spec("v1", "Node", &e1),
        "1",
    )
    .await;
    let m = env
        .edge
        .wait_for(WAIT, is(format!("node/{e1}/null/node/{e1}"), "update"))
        .await
        .expect("node update");
    assert_eq!(body(&m)["kind"], "Node");
    assert_eq!(m.header.resource_version, n.resource_version().unwrap());
    env.bus.shutdown().await;
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_some()
}

#[actix_rt::test]
async fn deleting_a_node_deletes_its_records_only() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let ns = k8s_testenv::namespace("sc").await;
    let base = unique("gc");
    let (dotted, plain) = (format!("{base}.2"), base.clone());
    let dotted_node = node(&env.client, &dotted).await;
    node(&env.client, &plain).await;
    let web = pod(&env.client, &ns, "web").await;
    let uid = web.uid().unwrap();
    let (doomed, kept) = (format!("{dotted}.{uid}"), format!("{plain}.{uid}"));
    object_sync(
        &env.client,
        &ns,
        &doomed,
        spec("v1", "Pod", "web"),
        &web.resource_version().unwrap(),
    )
    .await;
    object_sync(
        &env.client,
        &ns,
        &kept,
        spec("v1", "Pod", "web"),
        &web.resource_version().unwrap(),
    )
    .await;
    cluster_object_sync(
        &env.client,
        &format!("{dotted}.{}", dotted_node.uid().unwrap()),
        spec("v1", "Node", &dotted),
        "1",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Api::<Node>::all(env.client.clone())
        .delete(&dotted, &DeleteParams::default())
        .await
        .unwrap();
    let syncs = Api::<ObjectSync>::namespaced(env.client.clone(), &ns);
    let clusters = Api::<ClusterObjectSync>::all(env.client.clone());
    let mut gone = false;
    for _ in 0..50 {
        if !exists(&syncs, &doomed).await
            && !exists(
                &clusters,
                &format!("{dotted}.{}", dotted_node.uid().unwrap()),
            )
            .await
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone, "records of node {dotted} deleted");
    assert!(
        exists(&syncs, &kept).await,
        "records of node {plain} untouched"
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn records_of_missing_nodes_are_deleted_at_start_before_any_resend() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let (ns, ghost) = (k8s_testenv::namespace("sc").await, unique("ghost"));
    let web = pod(&client, &ns, "web").await;
    let name = format!("{ghost}.{}", web.uid().unwrap());
    object_sync(&client, &ns, &name, spec("v1", "Pod", "web"), "1").await;
    let env = start(1).await;
    let syncs = Api::<ObjectSync>::namespaced(env.client.clone(), &ns);
    let mut gone = false;
    for _ in 0..50 {
        if !exists(&syncs, &name).await {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone, "record of a node that does not exist was deleted");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        env.edge
            .matching(|m| m.route.resource.starts_with(&format!("node/{ghost}/")))
            .is_empty()
    );
    env.bus.shutdown().await;
}

/// The node list can be older than the record list (they are separate watches): a node
/// created just before its first record, absent from a stale node list, keeps its records.
#[actix_rt::test]
async fn a_record_of_a_node_missing_from_a_stale_node_list_is_kept() {
    test_tiers::require!(ApiServer);
    let (controller, faults) = faulty_client(k8s_testenv::config().await);
    // The controller's node list is taken now (before the node exists) but answered late.
    faults.delay_next(
        http::Method::GET,
        "/api/v1/nodes",
        1,
        Duration::from_secs(4),
    );
    let env = start_with(3600, controller).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web").await;
    let name = format!("{e1}.{}", web.uid().unwrap());
    object_sync(&env.client, &ns, &name, spec("v1", "Pod", "web"), "1").await;
    let update = env
        .edge
        .wait_for(WAIT, is(format!("node/{e1}/{ns}/pod/web"), "update"))
        .await;
    assert_eq!(
        faults.injected(),
        1,
        "the node list was the delayed request"
    );
    assert!(
        update.is_some(),
        "the record is reconciled once caches sync"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let syncs = Api::<ObjectSync>::namespaced(env.client.clone(), &ns);
    assert!(exists(&syncs, &name).await, "the record was kept");
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_non_numeric_acknowledged_version_never_stops_the_loop() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let a = pod(&env.client, &ns, "a").await;
    let b = pod(&env.client, &ns, "b").await;
    pod_record(&env.client, &e1, &a, "abc").await;
    pod_record(&env.client, &e1, &b, "1").await;
    let updates = env
        .edge
        .wait_count(3, WAIT, is(format!("node/{e1}/{ns}/pod/b"), "update"))
        .await;
    assert!(updates.len() >= 3, "other records keep being reconciled");
    assert!(
        !env.edge
            .matching(is(format!("node/{e1}/{ns}/pod/a"), "update"))
            .is_empty(),
        "unknown version: resend"
    );
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn device_records_are_resent_as_devicecontroller() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let device: Device = serde_json::from_value(
        json!({"apiVersion": "devices.kubeedge.io/v1beta1", "kind": "Device",
        "metadata": {"name": "d1"}, "spec": {"nodeName": e1, "deviceModelRef": {"name": "m1"}}}),
    )
    .unwrap();
    let d = Api::<Device>::namespaced(env.client.clone(), &ns)
        .create(&PostParams::default(), &device)
        .await
        .unwrap();
    object_sync(
        &env.client,
        &ns,
        &format!("{e1}.{}", d.uid().unwrap()),
        spec("devices.kubeedge.io/v1beta1", "Device", "d1"),
        "1",
    )
    .await;
    let m = env
        .edge
        .wait_for(WAIT, is(format!("node/{e1}/{ns}/device/d1"), "update"))
        .await
        .expect("device update");
    assert_eq!(m.route.source, "devicecontroller", "for devicetwin");
    assert_eq!(body(&m)["apiVersion"], "devices.kubeedge.io/v1beta1");
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn a_cluster_scoped_object_recorded_under_a_namespace_is_found_by_name() {
    test_tiers::require!(ApiServer);
    let env = start(1).await;
    let e1 = unique("e1");
    node(&env.client, &e1).await;
    let va: VolumeAttachment = serde_json::from_value(json!({"metadata": {"name": unique("va")},
        "spec": {"attacher": "csi.example.com", "nodeName": e1, "source": {"persistentVolumeName": "pv"}}}))
    .unwrap();
    let va = Api::<VolumeAttachment>::all(env.client.clone())
        .create(&PostParams::default(), &va)
        .await
        .unwrap();
    let va_name = va.name_any();
    object_sync(
        &env.client,
        "default",
        &format!("{e1}.{}", va.uid().unwrap()),
        spec("storage.k8s.io/v1", "VolumeAttachment", &va_name),
        "1",
    )
    .await;
    let resource = format!("node/{e1}/default/volumeattachment/{va_name}");
    let m = env
        .edge
        .wait_for(WAIT, is(resource.clone(), "update"))
        .await
        .expect("update, not delete: cluster-scoped, found by name");
    assert_eq!(body(&m)["kind"], "VolumeAttachment");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.edge.matching(is(resource, "delete")).is_empty());
    env.bus.shutdown().await;
}

#[actix_rt::test]
async fn object_changes_are_reconciled_at_once_without_waiting_for_a_pass() {
    test_tiers::require!(ApiServer);
    let env = start(3600).await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web").await;
    let rv = web.resource_version().unwrap();
    pod_record(&env.client, &e1, &web, &rv).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let labels: BTreeMap<&str, &str> = [("v", "2")].into();
    let changed = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
    let m = env
        .edge
        // The pass interval is an hour: anything within 15 s is event-driven (the margin is
        // for a loaded machine).
        .wait_for(
            Duration::from_secs(15),
            is(format!("node/{e1}/{ns}/pod/web"), "update"),
        )
        .await
        .expect("event-driven update");
    assert_eq!(
        m.header.resource_version,
        changed.resource_version().unwrap()
    );
    env.bus.shutdown().await;
}

/// The edge deletes ConfigMaps by name, not UID: for an object deleted and recreated under the
/// same name while the edge was away, a delete meant for the old copy could remove the new one
/// (the two travel separately). When the node has a record of the new copy, that copy is on its
/// way and replaces the old one by name: the old record is dropped and no delete is sent.
#[actix_rt::test]
async fn a_recreated_configmap_whose_new_copy_is_recorded_gets_no_delete() {
    test_tiers::require!(ApiServer);
    use k8s_openapi::api::core::v1::ConfigMap;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&client, &e1).await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let names = ["c0", "c1", "c2", "c3"];
    let mut old_records = Vec::new();
    for name in names {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let old = api.create(&PostParams::default(), &cm).await.unwrap();
        api.delete(name, &DeleteParams::default()).await.unwrap();
        let new = api.create(&PostParams::default(), &cm).await.unwrap();
        // The old copy's record without a status: a record of a previous incarnation may be
        // dropped by any test's controller at once, before a status write could follow.
        for (copy, acked) in [(&new, "0"), (&old, "")] {
            object_sync(
                &client,
                &ns,
                &format!("{e1}.{}", copy.uid().unwrap()),
                spec("v1", "ConfigMap", name),
                acked,
            )
            .await;
        }
        old_records.push(format!("{e1}.{}", old.uid().unwrap()));
    }
    // Started after the records exist: the first full pass handles them all.
    let env = start(1).await;
    for name in names {
        env.edge
            .wait_for(
                WAIT,
                is(format!("node/{e1}/{ns}/configmap/{name}"), "update"),
            )
            .await
            .expect("the new copy is sent");
    }
    let syncs = Api::<ObjectSync>::namespaced(env.client.clone(), &ns);
    for record in &old_records {
        assert!(
            wait_gone(&syncs, record).await,
            "{record}: the old copy's record is dropped"
        );
    }
    let passes = env.metrics.snapshot().passes;
    while env.metrics.snapshot().passes < passes + 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deletes = env
        .edge
        .matching(|m| m.route.resource.contains("/configmap/") && m.route.operation == "delete");
    assert!(deletes.is_empty(), "no delete by name: {deletes:?}");
    env.bus.shutdown().await;
}

/// When no record of the new copy appears (the new copy is not for that edge), the old copy is
/// still deleted at the edge, after a grace period that gives the new copy's record time to
/// appear.
#[actix_rt::test]
async fn a_recreated_configmap_not_sent_to_the_node_gets_its_old_copy_deleted_after_a_grace() {
    test_tiers::require!(ApiServer);
    use k8s_openapi::api::core::v1::ConfigMap;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&client, &e1).await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    let old = api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("c", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let old_uid = old.uid().unwrap();
    object_sync(
        &client,
        &ns,
        &format!("{e1}.{old_uid}"),
        spec("v1", "ConfigMap", "c"),
        "1",
    )
    .await;
    let started = tokio::time::Instant::now();
    let env = start(1).await;
    let m = env
        .edge
        .wait_for(WAIT, is(format!("node/{e1}/{ns}/configmap/c"), "delete"))
        .await
        .expect("the old copy is deleted");
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "not before the grace period: {:?}",
        started.elapsed()
    );
    assert_eq!(body(&m)["metadata"]["uid"].as_str(), Some(old_uid.as_str()));
    assert!(
        env.edge
            .matching(is(format!("node/{e1}/{ns}/configmap/c"), "update"))
            .is_empty()
    );
    env.bus.shutdown().await;
}

/// A Node deleted and recreated under the same name (new UID) while its edge was away: the
/// record of the old Node is dropped and nothing is sent for it. A delete of the node's own
/// Node would take it from the edge's store, and cloudhub would end the edge's session on it,
/// again on every pass.
#[actix_rt::test]
async fn a_recreated_node_drops_the_old_record_and_sends_no_delete() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let client = k8s_testenv::client().await;
    let (e1, e2) = (unique("e1"), unique("e2"));
    let nodes = Api::<Node>::all(client.clone());
    let old = node(&client, &e1).await;
    nodes.delete(&e1, &DeleteParams::default()).await.unwrap();
    let new = node(&client, &e1).await;
    assert_ne!(old.uid(), new.uid());
    let before_start = format!("{e1}.{}", old.uid().unwrap());
    // Without a status: such a record may be dropped at once (see below).
    cluster_object_sync(&client, &before_start, spec("v1", "Node", &e1), "").await;
    let env = start(1).await;
    // A record that appears while running is decided on its own event, not only by a pass.
    let e2_node = node(&env.client, &e2).await;
    let while_running = format!("{e2}.11111111-2222-3333-4444-555555555555");
    cluster_object_sync(&env.client, &while_running, spec("v1", "Node", &e2), "").await;
    let clusters = Api::<ClusterObjectSync>::all(env.client.clone());
    // Every test's controller sees every record of the shared API server, so which one drops a
    // record (and counts it) is not asserted; without the fix none would.
    for record in [&before_start, &while_running] {
        assert!(wait_gone(&clusters, record).await, "{record} dropped");
    }
    let passes = env.metrics.snapshot().passes;
    while env.metrics.snapshot().passes < passes + 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in [&e1, &e2] {
        let sent = env
            .edge
            .matching(|m| m.route.resource.starts_with(&format!("node/{n}/")));
        assert!(sent.is_empty(), "nothing sent to {n}: {sent:?}");
    }
    // The live Node's own record is served as always.
    cluster_object_sync(
        &env.client,
        &format!("{e2}.{}", e2_node.uid().unwrap()),
        spec("v1", "Node", &e2),
        "1",
    )
    .await;
    env.edge
        .wait_for(WAIT, is(format!("node/{e2}/null/node/{e2}"), "update"))
        .await
        .expect("the live node is sent");
    env.bus.shutdown().await;
}

/// Waits (up to 10 s) until `name` no longer exists.
async fn wait_gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..50 {
        if !exists(api, name).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// A pod bound to `node` (pods created by [`pod`] are not bound).
async fn bound_pod(client: &kube::Client, ns: &str, name: &str, node: &str) -> Pod {
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
}

/// cloudhub's `connected` event for `node`.
fn connected(node: &str) -> Message {
    Message::new().with_route("cloudhub", "resource", format!("node/{node}"), "connected")
}

/// Several replicas: records of a node another replica holds are left alone; once the node
/// connects here they are reconciled at once (not at the next pass), and because it came from
/// another replica its bound pods without any record are sent too — a pod it has a record of
/// is not sent again.
#[actix_rt::test]
async fn only_nodes_held_here_are_reconciled_and_a_moved_node_gets_its_unrecorded_pods() {
    test_tiers::require!(ApiServer);
    use kubeedge_api::replicas::Ownership;
    let ownership = Ownership::new("10.0.0.1");
    let env = start_replica(1, k8s_testenv::client().await, Some(ownership.clone())).await;
    let Env {
        bus,
        edge,
        client,
        metrics,
    } = env;
    let (ns, e1) = (k8s_testenv::namespace("sc").await, unique("e1"));
    node(&client, &e1).await;
    ownership.observe(&e1, Some("10.0.0.2"));
    let stale = bound_pod(&client, &ns, "stale", &e1).await;
    let current = bound_pod(&client, &ns, "current", &e1).await;
    let missed = bound_pod(&client, &ns, "missed", &e1).await;
    pod_record(&client, &e1, &stale, "1").await;
    pod_record(&client, &e1, &current, &current.resource_version().unwrap()).await;
    let passes = metrics.snapshot().passes;
    while metrics.snapshot().passes < passes + 3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        edge.matching(|m| m.route.resource.starts_with(&format!("node/{e1}/")))
            .is_empty(),
        "held by another replica: nothing sent"
    );

    // The node connects here, coming from 10.0.0.2.
    ownership.hold(&e1);
    // An edge's message claiming cloudhub's event, as cloudhub relays it (its endpoint
    // `cloudhub/edge`): not an event, so the moved node's unrecorded pod is not sent.
    bus.endpoint("cloudhub")
        .sub("edge")
        .send("synccontroller", connected(&e1))
        .await
        .unwrap();
    let passes = metrics.snapshot().passes;
    while metrics.snapshot().passes < passes + 2 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        edge.matching(is(format!("node/{e1}/{ns}/pod/missed"), "update"))
            .is_empty(),
        "a connected event relayed from an edge caught the node up"
    );
    bus.endpoint("cloudhub")
        .send("synccontroller", connected(&e1))
        .await
        .unwrap();
    let m = edge
        .wait_for(WAIT, is(format!("node/{e1}/{ns}/pod/stale"), "update"))
        .await
        .expect("the stale record is reconciled");
    assert_eq!(m.header.resource_version, stale.resource_version().unwrap());
    let m = edge
        .wait_for(WAIT, is(format!("node/{e1}/{ns}/pod/missed"), "update"))
        .await
        .expect("the unrecorded pod is sent");
    assert_eq!(
        m.header.resource_version,
        missed.resource_version().unwrap()
    );
    assert_eq!(body(&m)["metadata"]["uid"], missed.uid().unwrap());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        edge.matching(|m| m.route.resource.ends_with("/pod/current"))
            .is_empty(),
        "acknowledged: nothing sent"
    );
    assert_eq!(
        edge.matching(is(format!("node/{e1}/{ns}/pod/missed"), "update"))
            .len(),
        1,
        "sent once (its record comes from cloudhub, which is not running here)"
    );
    bus.shutdown().await;
}

/// A failed replica's nodes arrive by the thousand: a burst of moved nodes is looked up
/// together (one list of every bound pod rather than one list per node), and each node gets
/// exactly its own unrecorded pods.
#[actix_rt::test]
async fn a_burst_of_moved_nodes_each_gets_its_own_unrecorded_pods() {
    test_tiers::require!(ApiServer);
    use kubeedge_api::replicas::Ownership;
    let ownership = Ownership::new("10.0.0.1");
    let env = start_replica(1, k8s_testenv::client().await, Some(ownership.clone())).await;
    let ns = k8s_testenv::namespace("sc").await;
    let nodes: Vec<String> = (0..12).map(|i| unique(&format!("b{i}"))).collect();
    let mut pods = Vec::new();
    for n in &nodes {
        node(&env.client, n).await;
        ownership.observe(n, Some("10.0.0.2"));
        pods.push(bound_pod(&env.client, &ns, &format!("p-{n}"), n).await);
    }
    let stand_in = env.bus.endpoint("cloudhub");
    for n in &nodes {
        ownership.hold(n);
        stand_in.send("synccontroller", connected(n)).await.unwrap();
    }
    for (n, pod) in nodes.iter().zip(&pods) {
        let m = env
            .edge
            .wait_for(WAIT, is(format!("node/{n}/{ns}/pod/p-{n}"), "update"))
            .await
            .unwrap_or_else(|| panic!("the unrecorded pod of {n} is sent"));
        assert_eq!(m.header.resource_version, pod.resource_version().unwrap());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in &nodes {
        let to_node = env
            .edge
            .matching(|m| m.route.resource.starts_with(&format!("node/{n}/")));
        assert_eq!(
            to_node.len(),
            1,
            "{n} gets its own pod only, once: {to_node:?}"
        );
    }
    env.bus.shutdown().await;
}
