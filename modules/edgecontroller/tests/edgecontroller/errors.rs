//! Failure handling against a real API server: API server down, 409 conflicts, 410 Gone
//! watches, objects deleted mid-flight, reads a node may not make, malformed bodies, full
//! queues, impersonation and graceful stop. Faults are injected by a client layer
//! (`kubeedge_api::testing::faulty_client`) in front of the real server.

use std::time::{Duration, Instant};

use crate::support::*;
use beehive::{Content, Message};
use edgecontroller::EdgeControllerConfig;
use http::Method;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn code(m: &Message) -> Option<u64> {
    let c = body(m);
    c["ErrStatus"]["code"]
        .as_u64()
        .or_else(|| c["Err"]["ErrStatus"]["code"].as_u64())
}

#[actix_rt::test]
async fn an_unreachable_api_server_is_answered_with_a_complete_500() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let env = start_with(client, EdgeControllerConfig::default(), |ec| ec).await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    faults.set_down(true);
    let patch = request(
        &format!("node/{e1}/null/nodepatch/{e1}"),
        "patch",
        Content::string(r#"{"status":{}}"#),
    );
    let resp = env.ask(patch).await;
    let err = &body(&resp)["Err"]["ErrStatus"];
    assert_eq!(
        (
            err["code"].as_u64(),
            err["reason"].as_str(),
            err["status"].as_str()
        ),
        (Some(500), Some("InternalError"), Some("Failure"))
    );
    assert!(
        !err["message"].as_str().unwrap_or_default().is_empty(),
        "never an empty status"
    );
    let query = env
        .ask(request(
            &format!("node/{e1}/null/persistentvolume/pv"),
            "query",
            Content::null(),
        ))
        .await;
    assert_eq!(code(&query), Some(500));
    faults.set_down(false);
    let resp = env
        .ask(request(
            &format!("node/{e1}/null/nodepatch/{e1}"),
            "patch",
            Content::string(r#"{"status":{}}"#),
        ))
        .await;
    assert!(
        body(&resp)["Err"].is_null(),
        "served again once the server is back"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn watches_recover_after_the_api_server_was_down() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let env = start_with(client, EdgeControllerConfig::default(), |ec| {
        ec.with_watch_timeout(Duration::from_secs(1))
    })
    .await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    env.expect("node", is(format!("node/{e1}/null/node/{e1}"), "update"))
        .await;
    faults.set_down(true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    pod(&env.client, &ns, "during", &e1).await;
    faults.set_down(false);
    env.expect(
        "pod created during the outage",
        is(format!("node/{e1}/{ns}/pod/during"), "insert"),
    )
    .await;
    env.stop().await;
}

#[actix_rt::test]
async fn a_lost_watch_relists_and_sends_only_what_changed() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let env = start_with(client, EdgeControllerConfig::default(), |ec| {
        ec.with_watch_timeout(Duration::from_secs(1))
    })
    .await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    configmap(&env.client, &ns, "cfg", &[("a", "1")]).await;
    pod_with(&env.client, &ns, "same", &e1, mounting_configmap("cfg")).await;
    pod(&env.client, &ns, "changed", &e1).await;
    pod(&env.client, &ns, "gone", &e1).await;
    for p in ["same", "changed", "gone"] {
        env.expect(p, is(format!("node/{e1}/{ns}/pod/{p}"), "insert"))
            .await;
    }
    tokio::time::sleep(QUIET).await;
    let mark = env.edge.messages().len();

    // Lose the watches, change things meanwhile, then come back with "resource version too old".
    faults.set_down(true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    pods.patch(
        "changed",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    force_delete_pod(&env.client, &ns, "gone").await;
    pod(&env.client, &ns, "new", &e1).await;
    for resource in ["/pods", "/configmaps", "/secrets", "/nodes"] {
        faults.expire_next_watch(resource);
    }
    faults.set_down(false);

    env.expect(
        "changed",
        is(format!("node/{e1}/{ns}/pod/changed"), "update"),
    )
    .await;
    env.expect("gone", is(format!("node/{e1}/{ns}/pod/gone"), "delete"))
        .await;
    env.expect("new", is(format!("node/{e1}/{ns}/pod/new"), "insert"))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mine = for_node(&e1);
    let mut after: Vec<String> = env.edge.messages()[mark..]
        .iter()
        .filter(|m| mine(m))
        .map(|m| format!("{} {}", m.route.operation, m.route.resource))
        .collect();
    after.sort();
    let mut want = vec![
        format!("delete node/{e1}/{ns}/pod/gone"),
        format!("insert node/{e1}/{ns}/pod/new"),
        format!("update node/{e1}/{ns}/pod/changed"),
    ];
    want.sort();
    assert_eq!(after, want, "the relist resent nothing that did not change");
    assert!(
        faults.injected() >= 4,
        "410s were injected: {}",
        faults.injected()
    );
    env.stop().await;
}

#[actix_rt::test]
async fn conflicting_status_writes_are_retried_then_reported() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let env = start_with(client, EdgeControllerConfig::default(), |ec| ec).await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    let status = json!({"UID": "u", "Status": {"nodeInfo": {"kubeletVersion": "v9", "machineID": "", "systemUUID": "",
        "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "",
        "operatingSystem": "linux", "architecture": "amd64"}}});
    let resource = format!("node/{e1}/null/nodestatus/{e1}");
    let path = format!("/nodes/{e1}/status");
    faults.fail_next(Method::PUT, &path, 2, 409, "Conflict");
    let resp = env
        .ask(request(&resource, "update", content(status.clone())))
        .await;
    assert_eq!(
        resp.content.as_json(),
        r#""OK""#,
        "two conflicts, third attempt wins"
    );
    let live = Api::<Node>::all(env.client.clone()).get(&e1).await.unwrap();
    assert_eq!(
        live.status.unwrap().node_info.unwrap().kubelet_version,
        "v9"
    );
    faults.fail_next(Method::PUT, &path, 3, 409, "Conflict");
    let resp = env.ask(request(&resource, "update", content(status))).await;
    assert_eq!(
        code(&resp),
        Some(409),
        "persistent conflicts are answered, not dropped"
    );
    assert_eq!(faults.injected(), 5);
    env.stop().await;
}

#[actix_rt::test]
async fn objects_deleted_mid_flight_get_404_and_are_not_recreated() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let env = start_with(client, EdgeControllerConfig::default(), |ec| ec).await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    edge_node(&env.client, &e1).await;
    let web = pod(&env.client, &ns, "web", &e1).await;
    // Once the controller has sent the pod, authorization decides from its cache and the
    // only GET of the pod is the handler's.
    env.expect("pod", is(format!("node/{e1}/{ns}/pod/web"), "insert"))
        .await;
    // The GET is answered (pod present) only after the pod has been deleted.
    faults.delay_next(
        Method::GET,
        &format!("/namespaces/{ns}/pods/web"),
        1,
        Duration::from_secs(2),
    );
    let status = json!({"UID": web.uid(), "Name": "web", "Status": {"phase": "Running"}});
    let req = request(
        &format!("node/{e1}/{ns}/podstatus/web"),
        "update",
        content(status),
    );
    let id = req.header.id.clone();
    env.inject(req).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    force_delete_pod(&env.client, &ns, "web").await;
    let resp = env.expect("answer", |m| m.header.parent_id == id).await;
    assert_eq!(code(&resp), Some(404), "{}", resp.content.as_json());
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    assert!(
        pods.get_opt("web").await.unwrap().is_none(),
        "nothing was recreated"
    );
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/podpatch/web"),
            "patch",
            Content::string(r#"{"status":{"phase":"Running"}}"#),
        ))
        .await;
    assert_eq!(code(&resp), Some(404));
    Api::<Node>::all(env.client.clone())
        .delete(&e1, &DeleteParams::default())
        .await
        .unwrap();
    let resp = env
        .ask(request(
            &format!("node/{e1}/null/node/{e1}"),
            "update",
            content(json!({"metadata": {"labels": {"a": "b"}}})),
        ))
        .await;
    assert_eq!(
        code(&resp),
        Some(404),
        "node update of a deleted node is answered"
    );
    assert!(
        Api::<Node>::all(env.client.clone())
            .get_opt(&e1)
            .await
            .unwrap()
            .is_none()
    );
    env.stop().await;
}

#[actix_rt::test]
async fn reads_of_objects_no_pod_of_the_node_uses_are_forbidden() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1, e2) = (
        k8s_testenv::namespace("ec").await,
        unique("e1"),
        unique("e2"),
    );
    edge_node(&env.client, &e1).await;
    edge_node(&env.client, &e2).await;
    configmap(&env.client, &ns, "private", &[("a", "1")]).await;
    secret(&env.client, &ns, "theirs").await;
    let claim = json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "mine"}}]});
    pod_with(&env.client, &ns, "p1", &e1, claim).await;
    pod_with(
        &env.client,
        &ns,
        "p2",
        &e2,
        json!({"imagePullSecrets": [{"name": "theirs"}]}),
    )
    .await;
    env.expect("p2", is(format!("node/{e2}/{ns}/pod/p2"), "insert"))
        .await;
    env.expect("p1", is(format!("node/{e1}/{ns}/pod/p1"), "insert"))
        .await;
    for (kind, name) in [
        ("configmap", "private"),
        ("secret", "theirs"),
        ("persistentvolumeclaim", "other"),
    ] {
        let resp = env
            .ask(request(
                &format!("node/{e1}/{ns}/{kind}/{name}"),
                "query",
                Content::null(),
            ))
            .await;
        let c = body(&resp);
        assert_eq!(
            err_status(&c),
            (Some(403), Some("Forbidden")),
            "{kind}: {c}"
        );
        assert!(
            c["ErrStatus"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("system:node:{e1}"))
        );
    }
    let resp = env
        .ask(request(
            &format!("node/{e2}/{ns}/secret/theirs"),
            "query",
            Content::null(),
        ))
        .await;
    assert_eq!(
        body(&resp)["kind"],
        "Secret",
        "the node whose pod uses it may read it"
    );
    let resp = env
        .ask(request(
            &format!("node/{e1}/{ns}/persistentvolumeclaim/mine"),
            "query",
            Content::null(),
        ))
        .await;
    assert_eq!(
        code(&resp),
        Some(404),
        "a used but missing claim is NotFound, not Forbidden"
    );
    env.stop().await;
}

#[actix_rt::test]
async fn malformed_requests_are_answered_400_and_write_nothing() {
    test_tiers::require!(ApiServer);
    let env = start().await;
    let (ns, e1) = (k8s_testenv::namespace("ec").await, unique("e1"));
    // The node and its pod exist, so every request passes node authorization and fails
    // on its content.
    let node_rv = edge_node(&env.client, &e1).await.resource_version();
    let pod_rv = pod(&env.client, &ns, "web", &e1).await.resource_version();
    let garbage = || Content::string("{definitely not json");
    let cases = vec![
        request(
            &format!("node/{e1}/null/nodepatch/{e1}"),
            "patch",
            garbage(),
        ),
        request(&format!("node/{e1}/{ns}/podpatch/web"), "patch", garbage()),
        request(
            &format!("node/{e1}/null/node/{e1}"),
            "insert",
            content(json!({"metadata": "not an object"})),
        ),
        request(
            &format!("node/{e1}/null/node/{e1}"),
            "update",
            content(json!(["x"])),
        ),
        request(
            &format!("node/{e1}/{ns}/pod/web"),
            "delete",
            content(json!({"gracePeriodSeconds": "soon"})),
        ),
        request(
            &format!("node/{e1}/{ns}/pod/web"),
            "insert",
            content(json!({"spec": 5})),
        ),
        request(
            &format!("node/{e1}/kube-node-lease/lease/{e1}"),
            "insert",
            content(json!({"spec": "x"})),
        ),
        request(
            &format!("node/{e1}/{ns}/podstatus/web"),
            "update",
            content(json!({"Status": 7})),
        ),
        request(
            &format!("node/{e1}/null/nodestatus/{e1}"),
            "update",
            content(json!({"Status": "x"})),
        ),
        request(
            &format!("node/{e1}/{ns}/serviceaccounttoken/default"),
            "query",
            content(json!({"spec": 1})),
        ),
        request(
            &format!("node/{e1}/{ns}/configmap"),
            "query",
            Content::null(),
        ),
        request(
            &format!("node/{e1}/default/certificatesigningrequest/c"),
            "insert",
            content(json!({"spec": 1})),
        ),
    ];
    for req in cases {
        let what = format!("{} {}", req.route.operation, req.route.resource);
        let resp = env.ask(req).await;
        assert_eq!(code(&resp), Some(400), "{what}: {}", resp.content.as_json());
        assert_eq!(
            body(&resp).get("Err").is_some(),
            body(&resp).get("Object").is_some(),
            "{what}: shape"
        );
    }
    let node = Api::<Node>::all(env.client.clone()).get(&e1).await.unwrap();
    assert_eq!(node.resource_version(), node_rv, "the node is unchanged");
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    assert_eq!(pods.get("web").await.unwrap().resource_version(), pod_rv);
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 1);
    env.stop().await;
}

#[actix_rt::test]
async fn a_full_queue_answers_429_while_other_kinds_keep_flowing() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let mut config = EdgeControllerConfig::default();
    config.buffer.patch_node = 1;
    config.load.patch_node_workers = 1;
    let env = start_with(client, config, |ec| ec).await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    faults.delay_next(
        Method::PATCH,
        &format!("/nodes/{e1}/status"),
        100,
        Duration::from_secs(3),
    );
    let resource = format!("node/{e1}/null/nodepatch/{e1}");
    let reqs: Vec<Message> = (0..6)
        .map(|_| request(&resource, "patch", Content::string(r#"{"status":{}}"#)))
        .collect();
    for r in &reqs {
        env.inject(r.clone()).await;
    }
    // A lease renewal is not held up by the saturated node status queue.
    let started = Instant::now();
    let lease = env
        .ask(request(
            &format!("node/{e1}/kube-node-lease/lease/{e1}"),
            "query",
            Content::null(),
        ))
        .await;
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "lease answered in {:?}",
        started.elapsed()
    );
    assert_eq!(body(&lease)["Err"]["ErrStatus"]["code"], 404);
    let mut rejected = 0;
    for r in &reqs {
        let resp = env
            .expect("answer", |m| m.header.parent_id == r.header.id)
            .await;
        let c = body(&resp);
        if c["Err"]["ErrStatus"]["code"] == 429 {
            assert_eq!(c["Err"]["ErrStatus"]["reason"], "TooManyRequests");
            rejected += 1;
        } else {
            assert!(c["Err"].is_null(), "{c}");
        }
    }
    assert!((1..=5).contains(&rejected), "rejected {rejected}");
    let q = env.metrics.snapshot().queue("patchNode").cloned().unwrap();
    assert_eq!(q.rejected, rejected as u64);
    assert_eq!((q.capacity, q.workers), (1, 1));
    env.stop().await;
}

#[actix_rt::test]
async fn volume_reads_are_decided_in_process_first_with_or_without_impersonation() {
    test_tiers::require!(ApiServer);
    // A persistent volume is read as cloudcore for the decision, and the GET made for the
    // edge is decided on it before it is sent: with or without impersonation, cloudcore's
    // rule refuses (and counts) a volume the node's pods do not use, in its own words.
    let pv: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": unique("pv")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/tmp/pv"}}}))
    .unwrap();
    let client = k8s_testenv::client().await;
    let pv = Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    for impersonate in [true, false] {
        let env = start_with(client.clone(), EdgeControllerConfig::default(), |ec| {
            ec.with_impersonation(impersonate)
        })
        .await;
        let e1 = unique("e1");
        edge_node(&env.client, &e1).await;
        let resp = env
            .ask(request(
                &format!("node/{e1}/null/persistentvolume/{}", pv.name_any()),
                "query",
                Content::null(),
            ))
            .await;
        let err = &body(&resp)["ErrStatus"];
        assert_eq!(err["code"], 403, "{err}");
        let message = err["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("system:node:{e1}")), "{err}");
        assert!(!message.contains("at the cluster scope"), "{err}");
        let denied = env.metrics.snapshot().denied;
        let counted = denied
            .iter()
            .find(|(k, _)| *k == "queryPersistentVolume")
            .map(|(_, n)| *n);
        assert_eq!(counted, Some(1), "{denied:?}");
        // The node's own status: both layers allow it.
        let resp = env
            .ask(request(
                &format!("node/{e1}/null/nodepatch/{e1}"),
                "patch",
                Content::string(r#"{"status":{"phase":"Running"}}"#),
            ))
            .await;
        assert!(body(&resp)["Err"].is_null(), "{}", resp.content.as_json());
        env.stop().await;
    }
}

#[actix_rt::test]
async fn stopping_lets_in_flight_handlers_finish_and_refuses_queued_requests() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let mut config = EdgeControllerConfig::default();
    config.load.patch_node_workers = 1;
    let env = start_with(client, config, |ec| {
        ec.with_drain_timeout(Duration::from_secs(5))
    })
    .await;
    let e1 = unique("e1");
    edge_node(&env.client, &e1).await;
    faults.delay_next(
        Method::PATCH,
        &format!("/nodes/{e1}/status"),
        10,
        Duration::from_secs(1),
    );
    let resource = format!("node/{e1}/null/nodepatch/{e1}");
    let reqs: Vec<Message> = (0..3)
        .map(|_| request(&resource, "patch", Content::string(r#"{"status":{}}"#)))
        .collect();
    for r in &reqs {
        env.inject(r.clone()).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.life.stop();
    assert!(
        env.life.join(Duration::from_secs(10)).await,
        "every task ended"
    );
    let first = env
        .expect("in-flight answer", |m| {
            m.header.parent_id == reqs[0].header.id
        })
        .await;
    assert!(
        body(&first)["Err"].is_null(),
        "the in-flight request finished: {}",
        first.content.as_json()
    );
    for r in &reqs[1..] {
        let resp = env
            .expect("refusal", |m| m.header.parent_id == r.header.id)
            .await;
        assert_eq!(body(&resp)["Err"]["ErrStatus"]["code"], 503);
    }
    env.bus.shutdown().await;
}

/// One edge sending flat out cannot take a whole queue: past its share (an eighth of the
/// queue here) its requests are answered `429` at once, while another node's requests of the
/// same kind are still taken and written.
#[actix_rt::test]
async fn a_flooding_node_is_held_to_its_share_while_another_node_keeps_being_answered() {
    test_tiers::require!(ApiServer);
    let (client, faults) = faulty().await;
    let mut config = EdgeControllerConfig::default();
    config.buffer.patch_node = 64;
    config.load.patch_node_workers = 12;
    config.node_queue_share_min = 4;
    let env = start_with(client, config, |ec| ec).await;
    let (hostile, calm) = (unique("hostile"), unique("calm"));
    edge_node(&env.client, &hostile).await;
    edge_node(&env.client, &calm).await;
    // The hostile node's writes are slow, so what it sends piles up in the queue.
    faults.delay_next(
        Method::PATCH,
        &format!("/nodes/{hostile}/status"),
        200,
        Duration::from_secs(3),
    );
    let patch = || Content::string(r#"{"status":{}}"#);
    let flood: Vec<Message> = (0..200)
        .map(|_| {
            request(
                &format!("node/{hostile}/null/nodepatch/{hostile}"),
                "patch",
                patch(),
            )
        })
        .collect();
    for r in &flood {
        env.inject(r.clone()).await;
    }
    let calm_requests: Vec<Message> = (0..6)
        .map(|_| {
            request(
                &format!("node/{calm}/null/nodepatch/{calm}"),
                "patch",
                patch(),
            )
        })
        .collect();
    for r in &calm_requests {
        env.inject(r.clone()).await;
    }
    for r in &calm_requests {
        let resp = env
            .expect("calm node answered", |m| m.header.parent_id == r.header.id)
            .await;
        let c = body(&resp);
        assert!(c["Err"].is_null(), "the calm node is served: {c}");
        assert_eq!(c["Object"]["metadata"]["name"], calm.as_str());
    }
    let (mut taken, mut refused) = (0, 0);
    for r in &flood {
        let resp = env
            .expect("hostile node answered", |m| {
                m.header.parent_id == r.header.id
            })
            .await;
        let c = body(&resp);
        if code(&resp) == Some(429) {
            assert_eq!(c["Err"]["ErrStatus"]["reason"], "TooManyRequests");
            let message = c["Err"]["ErrStatus"]["message"]
                .as_str()
                .unwrap_or_default();
            assert!(
                message.contains("already has 8 patchNode requests"),
                "{message}"
            );
            refused += 1;
        } else {
            assert!(c["Err"].is_null(), "{c}");
            taken += 1;
        }
    }
    // The share is 8 (64 / 8); a slow machine may see some of them finish during the flood.
    assert!(
        (8..=16).contains(&taken),
        "hostile node got {taken} requests in"
    );
    let q = env.metrics.snapshot().queue("patchNode").cloned().unwrap();
    assert_eq!(q.node_share, Some(8));
    assert_eq!(q.rejected_over_share, refused);
    assert_eq!(q.rejected, 0, "the queue itself never filled");
    env.stop().await;
}

/// One legacy status message cannot fan out into thousands of API calls: a list longer than
/// the node can run pods is refused whole with `413` before anything is read or written.
#[actix_rt::test]
async fn a_legacy_pod_status_list_longer_than_the_node_can_run_is_refused_whole() {
    test_tiers::require!(ApiServer);
    let admin = k8s_testenv::client().await;
    let (ns, e1, big) = (
        k8s_testenv::namespace("ec").await,
        unique("e1"),
        unique("big"),
    );
    edge_node(&admin, &e1).await;
    edge_node(&admin, &big).await;
    Api::<Node>::all(admin.clone())
        .patch_status(
            &big,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"pods": "200"}}})),
        )
        .await
        .unwrap();
    let web = pod(&admin, &ns, "web", &e1).await;
    let env = start().await;
    let entry = json!({"UID": web.uid(), "Name": "web", "Status": {"phase": "Failed"}});
    let list = |n: usize| content(json!(vec![entry.clone(); n]));
    let resource = format!("node/{e1}/{ns}/podstatus");
    // The node's pod capacity is unknown: the kubelet's default, 110.
    let resp = env.ask(request(&resource, "update", list(111))).await;
    let reply = body(&resp);
    assert_eq!(
        err_status(&reply),
        (Some(413), Some("RequestEntityTooLarge")),
        "{reply}"
    );
    let message = reply["ErrStatus"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 110"), "{message}");
    let live = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        live.resource_version(),
        web.resource_version(),
        "nothing written"
    );
    assert_eq!(env.metrics.snapshot().pod_status_lists_refused, 1);
    // A node that can run more pods may send a longer list.
    let resp = env
        .ask(request(
            &format!("node/{big}/{ns}/podstatus"),
            "update",
            list(201),
        ))
        .await;
    let message = body(&resp)["ErrStatus"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("at most 200"), "{message}");
    // A list within the bound is written as before.
    let resp = env.ask(request(&resource, "update", list(2))).await;
    assert_eq!(resp.content.as_json(), r#""OK""#);
    let live = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(live.status.unwrap().phase.as_deref(), Some("Failed"));
    assert_eq!(env.metrics.snapshot().pod_status_lists_refused, 2);
    env.stop().await;
}
