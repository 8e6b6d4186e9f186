//! The test environment end to end: a real API server, driven through kube and kubectl.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeedge_api::names::EDGE_NODE_LABEL;
use kubeedge_api::reliablesyncs::{ObjectSync, ObjectSyncSpec, ObjectSyncStatus};

fn edge_node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {EDGE_NODE_LABEL: ""}},
    }))
    .unwrap()
}

#[tokio::test]
async fn an_edge_node_can_be_created_selected_and_its_status_patched() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let nodes: Api<Node> = Api::all(client);
    nodes
        .create(&PostParams::default(), &edge_node("e2e-edge-1"))
        .await
        .unwrap();
    let selected = nodes
        .list(&ListParams::default().labels(&format!("{EDGE_NODE_LABEL}=")))
        .await
        .unwrap();
    assert!(
        selected
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("e2e-edge-1"))
    );

    let patch = serde_json::json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "EdgeReady", "message": "ok",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}},
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
    }});
    let patched = nodes
        .patch_status(
            "e2e-edge-1",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    let status = patched.status.unwrap();
    assert_eq!(status.conditions.unwrap()[0].status, "True");
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        10350
    );
}

#[tokio::test]
async fn the_project_crds_register_and_objectsync_status_is_a_subresource() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let ns = k8s_testenv::namespace("crd").await;
    let api: Api<ObjectSync> = Api::namespaced(k8s_testenv::client().await, &ns);
    let os = ObjectSync::new(
        "edge-1.0f7c",
        ObjectSyncSpec {
            object_api_version: "v1".into(),
            object_kind: "Pod".into(),
            object_name: "web".into(),
        },
    );
    api.create(&PostParams::default(), &os).await.unwrap();
    let status =
        serde_json::json!({"status": ObjectSyncStatus { object_resource_version: "42".into() }});
    api.patch_status(
        "edge-1.0f7c",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
    let got = api.get("edge-1.0f7c").await.unwrap();
    assert_eq!(got.status.unwrap().object_resource_version, "42");
    assert_eq!(got.spec.object_kind, "Pod");
}

#[tokio::test]
async fn a_pod_bound_to_the_edge_node_is_seen_by_a_field_selected_watch() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("watch").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let config = watcher::Config::default().fields("spec.nodeName=e2e-edge-watch");
    let mut stream = watcher(pods.clone(), config).applied_objects().boxed();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"nodeName": "e2e-edge-watch", "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap();
    let other: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "elsewhere"},
        "spec": {"nodeName": "some-cloud-node", "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &other).await.unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
        .await
        .expect("watch event within 20 s")
        .unwrap()
        .unwrap();
    assert_eq!(seen.metadata.name.as_deref(), Some("web"));
}

#[tokio::test]
async fn the_controllers_watch_streams_cache_objects_without_managed_fields() {
    test_tiers::require!(ApiServer);
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("strip").await;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "owned"}, "data": {"k": "v"},
    }))
    .unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    // The API server records field ownership on every write; the watch streams drop it.
    assert!(
        created
            .metadata
            .managed_fields
            .is_some_and(|m| !m.is_empty()),
        "the API server records managedFields"
    );
    let mut events = kubeedge_api::watch::events(cms, watcher::Config::default()).boxed();
    let listed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(Event::InitApply(cm)) = events.next().await {
                return cm;
            }
        }
    })
    .await
    .expect("listed within 20 s");
    assert_eq!(listed.metadata.name.as_deref(), Some("owned"));
    assert_eq!(listed.metadata.managed_fields, None);
}

#[test]
fn kubectl_works_against_the_environment() {
    test_tiers::require!(ApiServer);
    let env = k8s_testenv::env();
    let run = |args: &[&str], stdin: Option<&str>| {
        use std::io::Write;
        let mut cmd = env.kubectl();
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl on PATH");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(run(&["get", "ns", "-o", "name"], None).contains("namespace/default"));
    let manifest = r#"
apiVersion: v1
kind: Node
metadata:
  name: kubectl-edge
  labels: {node-role.kubernetes.io/edge: ""}
---
apiVersion: v1
kind: Pod
metadata: {name: kubectl-pod, namespace: default}
spec:
  nodeName: kubectl-edge
  containers: [{name: c, image: nginx}]
"#;
    run(&["apply", "-f", "-"], Some(manifest));
    assert!(
        run(
            &[
                "get",
                "nodes",
                "-l",
                "node-role.kubernetes.io/edge=",
                "-o",
                "name"
            ],
            None
        )
        .contains("node/kubectl-edge")
    );
    let crd_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/crds");
    run(&["apply", "-f", crd_dir], None);
    let crds = run(&["get", "crd", "-o", "name"], None);
    assert!(
        crds.contains("objectsyncs.reliablesyncs.kubeedge.io"),
        "{crds}"
    );
}
