//! Edge → Kubernetes against a real API server (docs/controllers.md), with the
//! requests injected exactly as cloudhub publishes them.

use crate::support::*;
use beehive::Content;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, Pod, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

#[actix_rt::test]
async fn nodepatch_writes_the_status_and_answers_object_resp() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    let patch =
        r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}"#;
    let resource = format!("node/{e1}/null/nodepatch/{e1}");
    let req = request(&resource, "patch", Content::string(patch));
    let resp = env.ask(req.clone()).await;
    assert_eq!(resp.header.parent_id, req.header.id);
    assert_eq!(
        (
            resp.route.operation.as_str(),
            resp.route.group.as_str(),
            resp.route.source.as_str(),
            resp.route.resource.as_str()
        ),
        ("response", "resource", "edgecontroller", resource.as_str())
    );
    let c = body(&resp);
    assert_eq!(keys(&c), ["Err", "Object"]);
    assert!(c["Err"].is_null());
    let live = Api::<Node>::all(env.client.clone()).get(&e1).await.unwrap();
    assert_eq!(rv(&resp), live.resource_version().unwrap());
    assert_eq!(
        c["Object"]["metadata"]["resourceVersion"].as_str(),
        live.resource_version().as_deref()
    );
    let ready = live
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("True", Some("KubeletReady"))
    );
    env.stop().await;
}

#[actix_rt::test]
async fn nodepatch_for_a_missing_node_answers_404_in_err() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let ghost = unique("ghost");
    let resource = format!("node/{ghost}/null/nodepatch/{ghost}");
    let resp = env
        .ask(request(
            &resource,
            "patch",
            Content::string(r#"{"status":{}}"#),
        ))
        .await;
    let c = body(&resp);
    assert!(c["Object"].is_null());
    assert_eq!(c["Err"]["ErrStatus"]["code"], 404);
    assert_eq!(c["Err"]["ErrStatus"]["reason"], "NotFound");
    assert_eq!(c["Err"]["ErrStatus"]["status"], "Failure");
    env.stop().await;
}

#[actix_rt::test]
async fn node_registration_takes_the_name_from_the_resource_and_keeps_all_labels() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e9 = unique("e9");
    // The annotation naming another replica is the edge's claim, not the replicas' word.
    let node = json!({"metadata": {"name": "ignored", "labels": {
        "kubernetes.io/hostname": e9, "node-role.kubernetes.io/edge": "", "team": "a"},
        "annotations": {"cloudcore": "10.9.9.9"}}});
    let resp = env
        .ask(request(
            &format!("node/{e9}/null/node/{e9}"),
            "insert",
            content(node),
        ))
        .await;
    let c = body(&resp);
    assert_eq!(keys(&c), ["Err", "Object"]);
    assert!(c["Err"].is_null(), "{c}");
    let live = Api::<Node>::all(env.client.clone()).get(&e9).await.unwrap();
    let labels = live.labels();
    assert_eq!(labels.get("kubernetes.io/hostname"), Some(&e9));
    assert_eq!(
        labels
            .get("node-role.kubernetes.io/edge")
            .map(String::as_str),
        Some("")
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        live.annotations().get("cloudcore").map(String::as_str),
        Some(CLOUDCORE_IP)
    );
    assert!(
        Api::<Node>::all(env.client.clone())
            .get_opt("ignored")
            .await
            .unwrap()
            .is_none()
    );
    env.stop().await;
}

#[actix_rt::test]
async fn registering_an_existing_node_answers_409_and_changes_nothing() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    let before = edge_node(&env.client, &e1).await;
    let node = json!({"metadata": {"labels": {"intruder": "yes"}}});
    let resp = env
        .ask(request(
            &format!("node/{e1}/null/node/{e1}"),
            "insert",
            content(node),
        ))
        .await;
    let c = body(&resp);
    assert_eq!(c["Err"]["ErrStatus"]["code"], 409);
    assert_eq!(c["Err"]["ErrStatus"]["reason"], "AlreadyExists");
    let after = Api::<Node>::all(env.client.clone()).get(&e1).await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    assert!(!after.labels().contains_key("intruder"));
    env.stop().await;
}

#[actix_rt::test]
async fn configmap_query_answers_the_raw_object_with_its_version() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let cm = configmap(&env.client, &ns, "cfg", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "web", &e1, mounting_configmap("cfg")).await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    let resource = format!("node/{e1}/{ns}/configmap/cfg");
    let resp = env.ask(request(&resource, "query", Content::null())).await;
    let c = body(&resp);
    assert_eq!(
        (c["kind"].as_str(), c["apiVersion"].as_str()),
        (Some("ConfigMap"), Some("v1"))
    );
    assert_eq!(c["data"]["a"], "1");
    assert_eq!(rv(&resp), cm.resource_version().unwrap());
    assert_eq!(resp.route.resource, resource);
    env.stop().await;
}

#[actix_rt::test]
async fn query_of_a_missing_secret_answers_a_raw_404_status() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    pod_with(
        &env.client,
        &ns,
        "web",
        &e1,
        json!({"imagePullSecrets": [{"name": "missing"}]}),
    )
    .await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/secret/missing"),
            "query",
            Content::null(),
        ))
        .await;
    let c = body(&resp);
    assert_eq!(keys(&c), ["ErrStatus"], "a raw error, not an ObjectResp");
    assert_eq!(err_status(&c), (Some(404), Some("NotFound")));
    assert_eq!(c["ErrStatus"]["message"], "secret \"missing\" not found");
    env.stop().await;
}

#[actix_rt::test]
async fn service_account_token_query_returns_a_token() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    Api::<ServiceAccount>::namespaced(env.client.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let pod = pod_with(
        &env.client,
        &ns,
        "web",
        &e1,
        // The projected token volume the ServiceAccount admission plugin adds.
        json!({"serviceAccountName": "default", "volumes": [{"name": "kube-api-access",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}),
    )
    .await;
    let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
        "expirationSeconds": 3600,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": pod.uid()}}});
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/serviceaccounttoken/default"),
            "query",
            content(tr),
        ))
        .await;
    let c = body(&resp);
    assert_eq!(c["kind"], "TokenRequest", "{c}");
    assert!(!c["status"]["token"].as_str().unwrap_or_default().is_empty());
    env.stop().await;
}

#[actix_rt::test]
async fn persistent_volume_query_reads_the_cluster_scoped_object() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1, pv) = (
        k8s_testenv::namespace("ec").await,
        unique("e1"),
        unique("pv"),
    );
    edge_node(&env.client, &e1).await;
    // The node reaches the volume through a pod of its own that uses the volume's claim.
    pod_with(
        &env.client,
        &ns,
        "db",
        &e1,
        json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}),
    )
    .await;
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/db"), "insert"))
        .await;
    let volume: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv"},
        "claimRef": {"namespace": ns, "name": "data"}}}))
    .unwrap();
    Api::<PersistentVolume>::all(env.client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    let resp = env
        .ask(request(
            &format!("node/{e1}/null/persistentvolume/{pv}"),
            "query",
            Content::null(),
        ))
        .await;
    let c = body(&resp);
    assert_eq!(
        (c["kind"].as_str(), c["metadata"]["name"].as_str()),
        (Some("PersistentVolume"), Some(pv.as_str()))
    );
    env.stop().await;
}

#[actix_rt::test]
async fn podpatch_applies_to_the_status_and_answers_the_pod() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    pod(&env.client, &ns, "web", &e1).await;
    let patch = r#"{"status":{"phase":"Running","podIP":"10.1.2.3"}}"#;
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/podpatch/web"),
            "patch",
            Content::string(patch),
        ))
        .await;
    let c = body(&resp);
    assert!(c["Err"].is_null(), "{c}");
    assert_eq!(c["Object"]["status"]["podIP"], "10.1.2.3");
    let live = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(live.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(rv(&resp), live.metadata.resource_version.unwrap());
    env.stop().await;
}

#[actix_rt::test]
async fn pod_delete_honours_the_uid_precondition_and_always_says_ok() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web", &e1).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    let resource = format!("node/{e1}/{ns}/pod/web");
    let wrong = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
    let resp = env.ask(request(&resource, "delete", content(wrong))).await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    assert!(
        pods.get_opt("web").await.unwrap().is_some(),
        "a wrong UID keeps the pod"
    );
    let right = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": web.uid()}});
    let resp = env.ask(request(&resource, "delete", content(right))).await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    assert!(
        pods.get_opt("web").await.unwrap().is_none(),
        "the right UID deletes it"
    );
    let resp = env
        .ask(request(
            &resource,
            "delete",
            Content::string("some-old-uid"),
        ))
        .await;
    assert_eq!(resp.content.as_json(), r#""OK""#, "a missing pod is OK too");
    env.stop().await;
}

#[actix_rt::test]
async fn pod_insert_creates_a_mirror_pod() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let node = Api::<Node>::all(env.client.clone()).get(&e1).await.unwrap();
    let pod = json!({"metadata": {"name": "mirror-x", "namespace": ns,
            "annotations": {"kubernetes.io/config.mirror": "hash"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": e1,
                "uid": node.uid(), "controller": true}]},
        "spec": {"nodeName": e1, "containers": [{"name": "c", "image": "nginx"}]}});
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/pod/mirror-x"),
            "insert",
            content(pod),
        ))
        .await;
    let c = body(&resp);
    assert!(c["Err"].is_null(), "{c}");
    assert_eq!(c["Object"]["metadata"]["name"], "mirror-x");
    let live = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("mirror-x")
        .await
        .unwrap();
    assert_eq!(
        c["Object"]["metadata"]["uid"].as_str(),
        live.uid().as_deref()
    );
    env.stop().await;
}

#[actix_rt::test]
async fn node_update_adds_labels_and_keeps_everything_else() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    let nodes = Api::<Node>::all(env.client.clone());
    edge_node(&env.client, &e1).await;
    nodes
        .patch(
            &e1,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"keep": "me", "cloudcore": "10.0.0.1"}}}),
            ),
        )
        .await
        .unwrap();
    let resource = format!("node/{e1}/null/node/{e1}");
    // The edge's copy names another replica: which one holds the node is not the edge's to say.
    let resp = env
        .ask(request(
            &resource,
            "update",
            content(json!({"metadata": {"labels": {"zone": "z1"},
                "annotations": {"cloudcore": "10.9.9.9"}}})),
        ))
        .await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    assert_eq!(resp.route.resource, resource);
    let live = nodes.get(&e1).await.unwrap();
    assert_eq!(rv(&resp), live.resource_version().unwrap());
    assert_eq!(live.labels().get("zone").map(String::as_str), Some("z1"));
    assert!(live.labels().contains_key("node-role.kubernetes.io/edge"));
    assert_eq!(
        live.annotations().get("keep").map(String::as_str),
        Some("me")
    );
    assert_eq!(
        live.annotations().get("cloudcore").map(String::as_str),
        Some("10.0.0.1")
    );
    env.stop().await;
}

#[actix_rt::test]
async fn leases_are_created_updated_and_queried_with_object_resp() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    let resource = format!("node/{e1}/kube-node-lease/lease/{e1}");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": e1, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": e1, "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"}});
    let resp = env.ask(request(&resource, "insert", content(lease))).await;
    let c = body(&resp);
    assert!(c["Err"].is_null(), "{c}");
    let mut created = c["Object"].clone();
    created["spec"]["renewTime"] = json!("2026-01-01T00:00:10.000000Z");
    let resp = env
        .ask(request(&resource, "update", content(created)))
        .await;
    assert!(body(&resp)["Err"].is_null(), "{}", body(&resp));
    let live = Api::<Lease>::namespaced(env.client.clone(), "kube-node-lease")
        .get(&e1)
        .await
        .unwrap();
    assert_eq!(
        live.spec.unwrap().renew_time.unwrap().0.to_string(),
        "2026-01-01T00:00:10Z"
    );
    let resp = env.ask(request(&resource, "query", Content::null())).await;
    let c = body(&resp);
    assert_eq!(keys(&c), ["Err", "Object"]);
    assert_eq!(c["Object"]["metadata"]["name"].as_str(), Some(e1.as_str()));
    env.stop().await;
}

#[actix_rt::test]
async fn an_event_is_created_and_not_answered() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    pod(&env.client, &ns, "web", &e1).await;
    let event = json!({"metadata": {"name": "web.1", "namespace": ns},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": ns},
        "reason": "Started", "message": "started", "type": "Normal"});
    let req = request(
        &format!("node/{e1}/{ns}/event/web.1"),
        "insert",
        content(event),
    );
    let id = req.header.id.clone();
    env.inject(req).await;
    let events = Api::<Event>::namespaced(env.client.clone(), &ns);
    let mut found = None;
    for _ in 0..100 {
        if let Some(e) = events.get_opt("web.1").await.unwrap() {
            found = Some(e);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        found.expect("event created").reason.as_deref(),
        Some("Started")
    );
    assert!(
        env.settle(|m| m.header.parent_id == id).await.is_empty(),
        "events are not answered"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn legacy_pod_status_is_written_and_keeps_unchanged_transition_times() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web", &e1).await;
    let status = json!({"UID": web.uid(), "Name": "web", "Status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    let resource = format!("node/{e1}/{ns}/podstatus/web");
    let resp = env
        .ask(request(&resource, "update", content(status.clone())))
        .await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    let ready = |p: Pod| {
        p.status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
    };
    let first = ready(pods.get("web").await.unwrap());
    assert_eq!(first.status, "True");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let resp = env.ask(request(&resource, "update", content(status))).await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    let second = ready(pods.get("web").await.unwrap());
    assert_eq!(second.last_transition_time, first.last_transition_time);
    env.stop().await;
}

#[actix_rt::test]
async fn legacy_pod_status_for_another_uid_deletes_the_edge_copy_only() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web", &e1).await;
    let status = json!({"UID": "stale-uid", "Name": "web", "Status": {"phase": "Failed"}});
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/podstatus/web"),
            "update",
            content(status),
        ))
        .await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    let delete = env
        .expect(
            "edge delete",
            is(format!("node/{e1}/{ns}/pod/web"), "delete"),
        )
        .await;
    assert!(delete.header.parent_id.is_empty());
    assert_eq!(
        body(&delete)["metadata"]["uid"],
        "stale-uid",
        "the edge deletes by UID"
    );
    let live = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        live.resource_version(),
        web.resource_version(),
        "the live pod is untouched"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn legacy_node_status_keeps_volumes_attached_and_the_tunnel_port() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    let nodes = Api::<Node>::all(env.client.clone());
    edge_node(&env.client, &e1).await;
    let live = json!({"status": {
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10350}},
        "volumesAttached": [{"name": "kubernetes.io/csi/x^vol", "devicePath": "/dev/x"}]}});
    nodes
        .patch_status(&e1, &PatchParams::default(), &Patch::Merge(live))
        .await
        .unwrap();
    let reported = json!({"UID": "u", "Status": {
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2020-01-01T00:00:00Z"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"kubeletVersion": "v1.31.0-kubeedge", "machineID": "", "systemUUID": "", "bootID": "",
            "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64"}},
        "ExtendResources": {"nvidia.com/gpu": [{"name": "gpu0", "type": "nvidia", "capacity": "1"}]}});
    let resp = env
        .ask(request(
            &format!("node/{e1}/null/nodestatus/{e1}"),
            "update",
            content(reported),
        ))
        .await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    assert_eq!(resp.route.resource, format!("node/{e1}/null/node/{e1}"));
    let node = nodes.get(&e1).await.unwrap();
    let status = node.status.clone().unwrap();
    assert_eq!(
        status.node_info.unwrap().kubelet_version,
        "v1.31.0-kubeedge",
        "the status was replaced"
    );
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        10350
    );
    assert_eq!(status.volumes_attached.unwrap()[0].device_path, "/dev/x");
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_ne!(
        ready.last_heartbeat_time.unwrap().0.to_string(),
        "2020-01-01T00:00:00Z",
        "stale heartbeat refreshed"
    );
    assert_eq!(
        node.annotations()
            .get("huawei.com/gpu-status")
            .map(String::as_str),
        Some(r#"[{"healthy":true,"id":"gpu0"}]"#)
    );
    assert_eq!(rv(&resp), node.resource_version().unwrap());
    env.stop().await;
}

#[actix_rt::test]
async fn connection_events_unknown_types_and_bad_bodies_write_nothing_and_break_nothing() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    let before = edge_node(&env.client, &e1).await;
    let mut connected = beehive::Message::new()
        .with_route("cloudhub", "resource", format!("node/{e1}"), "connected")
        .with_content(
            Content::json(&json!({"event_type": "connected", "timestamp": 1, "client_id": e1}))
                .unwrap(),
        );
    connected.header.sync = false;
    env.hub_event(connected).await;
    let mut unknown = request(
        &format!("node/{e1}/default/foo/x"),
        "query",
        Content::null(),
    );
    unknown.header.sync = false;
    env.inject(unknown).await;
    let malformed = request(
        &format!("node/{e1}/null/nodepatch/{e1}"),
        "patch",
        Content::string("{not json"),
    );
    let answer = env.ask(malformed).await;
    assert_eq!(
        body(&answer)["Err"]["ErrStatus"]["code"],
        400,
        "a bad body is answered, not dropped"
    );
    let resp = env
        .ask(request(
            &format!("node/{e1}/null/nodepatch/{e1}"),
            "patch",
            Content::string(r#"{"status":{}}"#),
        ))
        .await;
    assert!(
        body(&resp)["Err"].is_null(),
        "the next valid request is served"
    );
    // The connection event is served by its own worker pool, so it may land after the
    // nodepatch above: wait for it rather than assume an order between kinds.
    let nodes = Api::<Node>::all(env.client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        let n = nodes.get(&e1).await.unwrap();
        let annotated = n.annotations().get("cloudcore").map(String::as_str) == Some(CLOUDCORE_IP);
        if annotated || tokio::time::Instant::now() >= deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(after.labels(), before.labels());
    assert_eq!(
        after.annotations().get("cloudcore").map(String::as_str),
        Some(CLOUDCORE_IP),
        "connected sets the annotation"
    );
    assert!(env.metrics.snapshot().ignored >= 1);
    env.stop().await;
}

#[actix_rt::test]
async fn a_waiting_request_of_an_unknown_type_is_answered_400() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    let resp = env
        .ask(request(
            &format!("node/{e1}/default/foo/x"),
            "query",
            Content::null(),
        ))
        .await;
    let c = body(&resp);
    assert_eq!(err_status(&c), (Some(400), Some("BadRequest")));
    env.stop().await;
}

/// Every name `route.source` can claim for a cloud module, written out rather than taken from
/// the list cloudhub drops on: these tests bypass that list and go to the controller directly.
const CLOUD_NAMES: [&str; 14] = [
    "router",
    "router_eventbus",
    "router_servicebus",
    "cloudhub",
    "cloudStream",
    "csrapprover",
    "devicecontroller",
    "dynamiccontroller",
    "edgecontroller",
    "nodeupgradejobcontroller",
    "policycontroller",
    "synccontroller",
    "taskmanager",
    "udsserver",
];

#[actix_rt::test]
async fn rule_status_is_taken_from_the_router_module_only_whatever_an_edge_claims() {
    test_tiers::require!(ApiServer);
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let env = start().await;
    let ns = k8s_testenv::namespace("ec").await;
    let name = unique("r");
    let rules = Api::<kubeedge_api::rules::Rule>::namespaced(env.client.clone(), &ns);
    let rule = rule(&name);
    let created = rules.create(&Default::default(), &rule).await.unwrap();
    let status = |source: &str, node: &str| {
        let mut m = beehive::Message::new()
            .with_route(
                source,
                "resource",
                format!("node/{node}/{ns}/rulestatus/{name}"),
                "update",
            )
            .with_content(content(
                json!({"Status": "FAIL", "Error": {"Detail": "pwned"}}),
            ));
        m.header.sync = false;
        m
    };
    // As cloudhub relays an edge's message, whatever cloud module the route names, and
    // under the node name the router uses.
    for source in CLOUD_NAMES {
        env.inject(status(source, "nodeid")).await;
        env.inject(status(source, "e1")).await;
    }
    // The edge relay is not the router either when it names no source at all.
    env.inject(status("", "nodeid")).await;
    // A write, had one been made, takes one round trip to the API server.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rules.get(&name).await.unwrap();
    assert_eq!(
        after.resource_version(),
        created.resource_version(),
        "no rule status from the edge relay: {:?}",
        after.status
    );
    // The router module itself is served: the same message from its endpoint counts.
    env.inject_from(&env.bus.endpoint("router"), status("router", "nodeid"))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = rules.get(&name).await.unwrap();
        if now.status.as_ref().is_some_and(|s| s.fail_messages == 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the router's status was not written: {:?}",
            now.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.stop().await;
}

#[actix_rt::test]
async fn a_connection_event_is_taken_from_cloudhub_itself_only() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    let event = |source: &str| {
        let mut m = beehive::Message::new()
            .with_route(source, "resource", format!("node/{e1}"), "connected")
            .with_content(content(
                json!({"event_type": "connected", "timestamp": 1, "client_id": e1}),
            ));
        m.header.sync = false;
        m
    };
    for source in CLOUD_NAMES {
        env.inject(event(source)).await;
    }
    // Another cloud module is not cloudhub either.
    env.inject_from(&env.bus.endpoint("router"), event("cloudhub"))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let nodes = Api::<Node>::all(env.client.clone());
    assert_eq!(
        nodes.get(&e1).await.unwrap().annotations().get("cloudcore"),
        None,
        "no connection event from an edge or another module"
    );
    env.hub_event(event("cloudhub")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while nodes
        .get(&e1)
        .await
        .unwrap()
        .annotations()
        .get("cloudcore")
        .map(String::as_str)
        != Some(CLOUDCORE_IP)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cloudhub's own event was not taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.stop().await;
}
