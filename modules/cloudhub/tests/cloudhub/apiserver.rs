//! cloudhub against a real kube-apiserver (k8s-testenv): ObjectSync records, secrets, token,
//! `/node/{name}`.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use beehive::{Content, Message};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kubeedge_api::reliablesyncs::{ClusterObjectSync, ObjectSync};

async fn crds() {
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
}

#[actix_rt::test]
async fn acknowledgements_are_recorded_as_objectsyncs_on_the_apiserver() {
    test_tiers::require!(ApiServer);
    crds().await;
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("hub-os").await;
    let store = Arc::new(cloudhub::KubeStore::new(client.clone()));
    let h = Harness::with_kube(client.clone(), store, Default::default()).await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let objectsyncs = Api::<ObjectSync>::namespaced(client.clone(), &ns);

    // First sight creates the record at "0"; the ACK sets the version.
    let mut msg = pod("edge-1", "web", "uid-web", "48213", "insert");
    msg.route.resource = format!("node/edge-1/{ns}/pod/web").into();
    h.downstream(msg.clone()).await;
    let got = e.recv().await;
    assert_eq!(got.route.resource, format!("{ns}/pod/web"));
    let os = objectsyncs.get("edge-1.uid-web").await.unwrap();
    assert_eq!(
        (
            os.spec.object_api_version.as_str(),
            os.spec.object_kind.as_str(),
            os.spec.object_name.as_str()
        ),
        ("v1", "Pod", "web")
    );
    assert_eq!(os.status.unwrap().object_resource_version, "0");
    e.ack(&got).await;
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 1)).await;
    h.hub.flush_records().await;
    let os = objectsyncs.get("edge-1.uid-web").await.unwrap();
    assert_eq!(os.status.unwrap().object_resource_version, "48213");

    // An older version is suppressed by the record after a fresh session (no in-memory state).
    drop(e);
    h.wait_nodes(0).await;
    let mut e = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    let mut old = pod("edge-1", "web", "uid-web", "48213", "update");
    old.route.resource = format!("node/edge-1/{ns}/pod/web").into();
    h.downstream(old).await;
    assert!(e.recv_within(Duration::from_millis(800)).await.is_none());

    // Cluster-scoped: a ClusterObjectSync.
    let pv = Message::new()
        .with_route("edgecontroller", "resource", "node/edge-1/null/persistentvolume/pv1", "update")
        .with_resource_version("77")
        .with_content(Content::json(&serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1", "uid": "uid-pv"}})).unwrap());
    h.downstream(pv).await;
    let got = e.recv().await;
    e.ack(&got).await;
    // A node's counters add up over its connections: the pod's ACK was the first.
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 2)).await;
    h.hub.flush_records().await;
    let cos = Api::<ClusterObjectSync>::all(client.clone())
        .get("edge-1.uid-pv")
        .await
        .unwrap();
    assert_eq!(cos.status.unwrap().object_resource_version, "77");

    // ACK of a delete removes the record.
    let mut del = pod("edge-1", "web", "uid-web", "48300", "delete");
    del.route.resource = format!("node/edge-1/{ns}/pod/web").into();
    h.downstream(del).await;
    let got = e.recv().await;
    e.ack(&got).await;
    wait_until(|| h.hub.node_stats("edge-1").is_some_and(|s| s.acked == 3)).await;
    h.hub.flush_records().await;
    assert!(
        objectsyncs
            .get_opt("edge-1.uid-web")
            .await
            .unwrap()
            .is_none()
    );
    Api::<ClusterObjectSync>::all(client)
        .delete("edge-1.uid-pv", &DeleteParams::default())
        .await
        .unwrap();
}

#[actix_rt::test]
async fn node_check_answers_found_not_found_and_apiserver_errors() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let node = Node {
        metadata: ObjectMeta {
            name: Some("hub-check-node".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let nodes = Api::<Node>::all(client.clone());
    let _ = nodes.create(&PostParams::default(), &node).await;
    let h = Harness::with_kube(
        client.clone(),
        Arc::new(cloudhub::MemoryStore::new()),
        Default::default(),
    )
    .await;
    let insecure = pki::tls::insecure_client_config;
    let (status, body) = https(h.https, insecure(), "GET", "/node/hub-check-node", &[], b"").await;
    assert_eq!((status, body.as_slice()), (200, &b"Node found"[..]));
    let (status, body) = https(h.https, insecure(), "GET", "/node/no-such-node", &[], b"").await;
    assert_eq!((status, body.as_slice()), (404, &b"Node not found"[..]));
    // An unreachable apiserver gives 500.
    let mut cfg = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    cfg.connect_timeout = Some(Duration::from_millis(500));
    let broken = kube::Client::try_from(cfg).unwrap();
    let dir = TempDir::new("cloudhub-broken");
    let bus = beehive::Bus::new();
    // Material from files so the broken client is only used by /node.
    let c = config(&dir.0);
    let ca = pki::CertificateAuthority::generate().unwrap();
    pki::write_pem_pair(
        &c.tls_ca_file,
        &c.tls_ca_key_file,
        &pki::CertAndKey {
            cert_der: ca.cert_der().to_vec(),
            key_der: ca.key_der().to_vec(),
        },
    )
    .unwrap();
    let server = ca.issue_server_cert(&["127.0.0.1".into()], &[]).unwrap();
    pki::write_pem_pair(&c.tls_cert_file, &c.tls_private_key_file, &server).unwrap();
    let hub = cloudhub::CloudHub::new(
        c,
        bus.endpoint("cloudhub"),
        Some(broken),
        Arc::new(cloudhub::MemoryStore::new()),
    )
    .await
    .unwrap();
    let handle = hub.handle();
    bus.register(hub).unwrap();
    bus.start().unwrap();
    let addrs = handle.start_servers().unwrap();
    let (status, body) = https(addrs.https.unwrap(), insecure(), "GET", "/node/x", &[], b"").await;
    assert_eq!(
        (status, body.as_slice()),
        (500, &b"Failed to query node information"[..])
    );
    nodes
        .delete("hub-check-node", &DeleteParams::default())
        .await
        .unwrap();
}

#[actix_rt::test]
async fn secrets_are_created_once_reused_on_restart_and_the_token_is_refreshed() {
    test_tiers::require!(ApiServer);
    let client = k8s_testenv::client().await;
    let secrets = Api::<Secret>::namespaced(client.clone(), "kubeedge");
    for name in ["casecret", "cloudcoresecret", "tokensecret"] {
        let _ = secrets.delete(name, &DeleteParams::default()).await;
    }
    let options = cloudhub::HubOptions {
        token_refresh: Some(Duration::from_millis(1500)),
        ..Default::default()
    };
    let first = Harness::with_kube(
        client.clone(),
        Arc::new(cloudhub::MemoryStore::new()),
        options,
    )
    .await;
    let ca = secrets.get("casecret").await.unwrap().data.unwrap();
    let cadata = ca["cadata"].0.clone();
    let cakeydata = ca["cakeydata"].0.clone();
    assert_eq!(cadata, first.hub.ca().cert_der());
    let core = secrets.get("cloudcoresecret").await.unwrap().data.unwrap();
    assert_eq!(core["cloudcoredata"].0, first.hub.server_cert().cert_der);
    assert!(
        !first.dir.0.join("ca/rootCA.crt").exists(),
        "with Kubernetes the CA lives in the secret"
    );

    let token = String::from_utf8(
        secrets.get("tokensecret").await.unwrap().data.unwrap()["tokendata"]
            .0
            .clone(),
    )
    .unwrap();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 4);
    assert_eq!(parts[0], pki::sha256_hex(&cadata));
    let exp = pki::verify_jwt(&parts[1..].join("."), &cakeydata).unwrap();
    // exp = now + 2 × tokenRefreshDuration (12 h by config).
    assert!((exp - (beehive::now_millis() / 1000 + 24 * 3600)).abs() < 120);
    // Rewritten on schedule.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let later = String::from_utf8(
        secrets.get("tokensecret").await.unwrap().data.unwrap()["tokendata"]
            .0
            .clone(),
    )
    .unwrap();
    assert_ne!(later, token);
    // The hub's token and the Secret agree once a refresh's write has landed (another refresh
    // may start between the two reads).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let stored = String::from_utf8(
            secrets.get("tokensecret").await.unwrap().data.unwrap()["tokendata"]
                .0
                .clone(),
        )
        .unwrap();
        if stored == first.hub.token() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub's token never matched the Secret's"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A restart reuses the stored CA and server certificate.
    let second = Harness::with_kube(
        client,
        Arc::new(cloudhub::MemoryStore::new()),
        Default::default(),
    )
    .await;
    assert_eq!(second.hub.ca().cert_der(), cadata.as_slice());
    assert_eq!(second.hub.server_cert(), first.hub.server_cert());
    assert_eq!(second.hub.token().split('.').next(), Some(parts[0]));
}

/// A record ensured for a message its session could not finish (status "0") while a worker
/// records the acknowledgement of the same object: whatever the interleaving, the
/// acknowledged version stays.
#[actix_rt::test]
async fn an_ensured_record_never_overwrites_an_acknowledgement_written_meanwhile() {
    test_tiers::require!(ApiServer);
    use cloudhub::{ObjectSyncStore, SyncKey, SyncSpec};
    crds().await;
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("ensure-race").await;
    let store = Arc::new(cloudhub::KubeStore::new(client.clone()));
    let spec = SyncSpec {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "web".into(),
    };
    let keys: Vec<SyncKey> = (0..120)
        .map(|i| SyncKey {
            node: "edge-race".into(),
            namespace: ns.clone(),
            uid: format!("uid-{i}"),
        })
        .collect();
    // The acknowledgement starts at staggered moments, so that across the keys it lands
    // before, between and after the two writes of the ensure.
    let races = keys.iter().zip(0u64..).map(|(key, i)| {
        let (store, spec) = (store.clone(), spec.clone());
        async move {
            let ensure = store.create(key, &spec);
            let ack = async {
                tokio::time::sleep(Duration::from_micros(250 * (i % 40))).await;
                store.set_acked(key, &spec, "7").await
            };
            let (created, acked) = futures::join!(ensure, ack);
            created.expect("ensure");
            acked.expect("ack");
        }
    });
    futures::future::join_all(races).await;
    for key in &keys {
        assert_eq!(
            store.get(key).await.expect("get").as_deref(),
            Some("7"),
            "{}",
            key.name()
        );
    }
}

/// The acknowledgement of a first-seen object whose record was not written yet creates the
/// record with that version; where the record exists after all, the version is set on it.
#[actix_rt::test]
async fn an_acknowledgement_at_first_sight_creates_its_record_with_the_version() {
    use cloudhub::{ObjectSyncStore, SyncKey, SyncSpec};
    crds().await;
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("create-acked").await;
    let store = cloudhub::KubeStore::new(client.clone());
    let spec = SyncSpec {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "web".into(),
    };
    let key = |uid: &str| SyncKey {
        node: "edge-first".into(),
        namespace: ns.clone(),
        uid: uid.into(),
    };
    let (missing, existing) = (key("uid-missing"), key("uid-existing"));
    store.create(&existing, &spec).await.expect("create");
    assert_eq!(store.get(&existing).await.unwrap().as_deref(), Some("0"));
    assert_eq!(store.get(&missing).await.unwrap(), None);
    for k in [&missing, &existing] {
        store
            .create_acked(k, &spec, "9")
            .await
            .expect("create_acked");
        assert_eq!(
            store.get(k).await.unwrap().as_deref(),
            Some("9"),
            "{}",
            k.name()
        );
    }
    let no_kind = SyncSpec {
        kind: String::new(),
        ..spec
    };
    assert!(
        store
            .create_acked(&key("uid-other"), &no_kind, "9")
            .await
            .is_err(),
        "a record without a kind is refused"
    );
}

/// A start-up sends every object to nodes that are not connected yet, and each gets its record
/// (the sync loop delivers from it). A node that connects while that backlog is being written
/// has its own record written ahead of it, not after the records of every node still away; and
/// the backlog is written in full all the same.
#[actix_rt::test]
async fn a_node_that_connects_overtakes_the_records_of_nodes_still_away() {
    test_tiers::require!(ApiServer);
    crds().await;
    let client = k8s_testenv::client().await;
    let ns = k8s_testenv::namespace("hub-backlog").await;
    let store = Arc::new(cloudhub::KubeStore::new(client.clone()));
    let h = Harness::with_kube(client.clone(), store, Default::default()).await;
    let objectsyncs = Api::<ObjectSync>::namespaced(client.clone(), &ns);
    let sent_to = |node: &str, uid: &str| {
        let mut msg = pod(node, "web", uid, "7", "insert");
        msg.route.resource = format!("node/{node}/{ns}/pod/web").into();
        msg
    };
    const BACKLOG: u64 = 1_500;
    // The records the writer takes at a time.
    const IN_FLIGHT: u64 = 32;
    for i in 0..BACKLOG {
        h.downstream(sent_to(&format!("away-{i}"), &format!("uid-{i}")))
            .await;
    }
    // The late node's object is queued after the whole backlog.
    h.downstream(sent_to("edge-late", "uid-late")).await;
    wait_until(|| h.hub.stats().dropped_offline == BACKLOG + 1).await;
    let _edge = h.connect("edge-late").await;
    let before = h.hub.stats().records_written;
    assert!(
        before + 8 * IN_FLIGHT < BACKLOG,
        "the backlog was written ({before} of {BACKLOG}) before the node connected: nothing to overtake"
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while objectsyncs
        .get_opt("edge-late.uid-late")
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no record for edge-late"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Written since the connect: the batch in flight when it came, the rest of the late
    // record's batch and what the poll's delay lets through (a few batches), not the rest of
    // the backlog.
    let since = h.hub.stats().records_written - before;
    assert!(
        since <= 4 * IN_FLIGHT,
        "the late node's record waited for {since} records of the backlog written after its connect"
    );
    h.hub.flush_records().await;
    let stats = h.hub.stats();
    assert_eq!(
        (stats.records_written, stats.records_failed),
        (BACKLOG + 1, 0)
    );
    assert!(objectsyncs.get_opt("away-0.uid-0").await.unwrap().is_some());
}
