//! The edge metaServer's requests (module dynamiccontroller) from an edge that sends them
//! itself, as edgecore's metaServer does: Applications under route `metaserver` /
//! `dynamiccontroller`, answered `Approved` or `Rejected` in the Application shape. The node
//! reads what the cluster lets `system:node:<name>` read, writes only as the node, and
//! malformed requests get a `400` at once while cloudcore keeps serving.

use super::*;
use k8s_openapi::api::core::v1::Service;
use kubeedge_api::application::Application;

/// An Application as edgecore's metaServer writes it.
pub(super) fn application(
    verb: &str,
    key: &str,
    option: Option<Value>,
    body: Option<Value>,
) -> Value {
    let mut app = Application::request(format!("{}{}", short_id(), short_id()), verb, key);
    app.option = option.map(|v| v.to_string().into_bytes());
    app.req_body = body.map(|v| v.to_string().into_bytes());
    serde_json::to_value(app).expect("an Application encodes")
}

/// The answer to one metaServer message.
pub(super) struct Answer {
    pub(super) msg: Message,
    pub(super) app: Value,
}

impl Answer {
    pub(super) fn status(&self) -> &str {
        self.app["Status"].as_str().unwrap_or("")
    }

    pub(super) fn code(&self) -> u64 {
        self.app["Error"]["ErrStatus"]["code"].as_u64().unwrap_or(0)
    }

    /// `RespBody` decoded as JSON (`Null` when absent).
    pub(super) fn body(&self) -> Value {
        match self.app["RespBody"].as_str() {
            Some(b) => serde_json::from_slice(
                &base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .expect("RespBody is base64"),
            )
            .expect("RespBody is JSON"),
            None => Value::Null,
        }
    }

    pub(super) fn approved(&self) -> Value {
        assert_eq!(self.status(), "Approved", "expected Approved: {}", self.app);
        self.body()
    }

    pub(super) fn rejected(&self, code: u64) {
        assert_eq!(self.status(), "Rejected", "expected Rejected: {}", self.app);
        assert_eq!(self.code(), code, "{}", self.app);
        let e = &self.app["Error"]["ErrStatus"];
        assert_eq!(e["status"], "Failure", "{}", self.app);
        assert!(
            !e["message"].as_str().unwrap_or("").is_empty() && self.app["Reason"] == e["message"],
            "a rejection says why: {}",
            self.app
        );
    }
}

impl Edge {
    /// Sends `content` as the metaServer does (resource `resource`) and waits for the answer.
    pub(super) async fn meta(&self, resource: &str, content: Content) -> Answer {
        let what = format!("metaServer {resource} {}", content.as_json());
        let pending = self
            .send_as("metaserver", "dynamiccontroller", resource, "null", content)
            .await;
        let msg = match tokio::time::timeout(REPLY_WAIT, pending.rx).await {
            Ok(Ok(m)) => m,
            _ => panic!("no answer within {REPLY_WAIT:?} to {what}"),
        };
        assert_eq!(msg.route.source, "dynamiccontroller");
        assert_eq!(msg.route.operation, "applicationResponse");
        let app = serde_json::from_str(msg.content.as_json()).expect("an Application");
        Answer { msg, app }
    }

    pub(super) async fn apply(&self, app: Value) -> Answer {
        let answer = self.meta("null", json_content(&app)).await;
        assert_eq!(answer.msg.route.resource, "ignore/Application/ignore");
        assert_eq!(
            answer.app["ID"], app["ID"],
            "the reply is the request's Application"
        );
        answer
    }

    /// The pushes so far whose resource contains `part`.
    fn pushes_with(&self, part: &str) -> Vec<String> {
        self.pushed
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m.route.resource.contains(part))
            .map(|m| format!("{} {}", m.route.operation, m.route.resource))
            .collect()
    }
}

async fn service(s: &Scenario, name: &str, labels: Value) -> Service {
    let svc: Service = from(json!({
        "metadata": {"name": name, "namespace": s.ns, "labels": labels},
        "spec": {"ports": [{"port": 80}]}
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &svc).await
}

#[tokio::test]
async fn metaserver_lists_gets_and_discovery_are_answered_for_the_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-read").await;
    let app_label = unique("app");
    let a = service(&s, "svc-a", json!({"app": app_label})).await;
    service(&s, "svc-b", json!({})).await;

    let list = s
        .edge
        .apply(application(
            "list",
            &format!("/core/v1/services/{}/null", s.ns),
            Some(json!({"labelSelector": format!("app={app_label}"), "limit": 500})),
            None,
        ))
        .await
        .approved();
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (&json!("ServiceList"), &json!("v1"))
    );
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["svc-a"]);

    let got = s
        .edge
        .apply(application(
            "get",
            &format!("/core/v1/services/{}/svc-a", s.ns),
            Some(json!({})),
            None,
        ))
        .await
        .approved();
    assert_eq!(got["metadata"]["uid"].as_str(), a.metadata.uid.as_deref());
    assert_eq!(got["kind"], "Service");

    let api = s
        .edge
        .apply(application("get", "/api", None, None))
        .await
        .approved();
    assert_eq!(api["kind"], "APIVersions", "discovery is JSON: {api}");
    let groups = s
        .edge
        .apply(application("get", "/apis", None, None))
        .await
        .approved();
    assert_eq!(groups["kind"], "APIGroupList");
    let version = s
        .edge
        .apply(application("get", "/version", None, None))
        .await
        .approved();
    assert!(
        version["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with('v')),
        "{version}"
    );
}

#[tokio::test]
async fn metaserver_reads_beyond_the_node_are_rejected_with_403() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-deny").await;
    let secret: Secret =
        from(json!({"metadata": {"name": "private", "namespace": s.ns}, "stringData": {"k": "v"}}));
    create(Api::namespaced(s.client.clone(), &s.ns), &secret).await;

    let get = s
        .edge
        .apply(application(
            "get",
            &format!("/core/v1/secrets/{}/private", s.ns),
            Some(json!({})),
            None,
        ))
        .await;
    get.rejected(403);
    assert!(
        get.app["RespBody"].is_null(),
        "nothing of the secret: {}",
        get.app
    );
    s.edge
        .apply(application(
            "list",
            "/core/v1/secrets/null/null",
            Some(json!({})),
            None,
        ))
        .await
        .rejected(403);
    // A watch is served from cloudcore's caches: refused before anything is sent.
    s.edge
        .apply(application(
            "watch",
            "/core/v1/secrets/null/null",
            Some(json!({"watch": true})),
            None,
        ))
        .await
        .rejected(403);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.edge.pushes_with("/secret/"), Vec::<String>::new());
}

#[tokio::test]
async fn metaserver_writes_are_made_as_the_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-write").await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planted"}, "data": {"a": "b"}});
    s.edge
        .apply(application(
            "create",
            &format!("/core/v1/configmaps/{}/null", s.ns),
            Some(json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"})),
            Some(cm),
        ))
        .await
        .rejected(403);
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns);
    assert!(
        cms.get_opt("planted").await.unwrap().is_none(),
        "nothing created"
    );

    // A node may annotate itself (NodeRestriction), through the metaServer too.
    let patch = |node: &str, value: &str| {
        let info = json!({
            "Name": node,
            "PatchType": "application/merge-patch+json",
            "Data": base64::engine::general_purpose::STANDARD
                .encode(json!({"metadata": {"annotations": {"metaserver.test/written": value}}}).to_string()),
            "Options": {"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-patch"},
            "Subresources": [""]
        });
        application(
            "patch",
            &format!("/core/v1/nodes/null/{node}"),
            Some(info),
            None,
        )
    };
    let own = s.edge.apply(patch(&s.node, "yes")).await.approved();
    assert_eq!(
        own["metadata"]["annotations"]["metaserver.test/written"],
        "yes"
    );
    let nodes: Api<Node> = Api::all(s.client.clone());
    let node = nodes.get(&s.node).await.unwrap();
    assert_eq!(
        node.annotations()
            .get("metaserver.test/written")
            .map(String::as_str),
        Some("yes")
    );

    let other = unique("other");
    edge_node(&s.client, &other).await;
    s.edge.apply(patch(&other, "no")).await.rejected(403);
    let node = nodes.get(&other).await.unwrap();
    assert!(
        node.annotations().get("metaserver.test/written").is_none(),
        "other node unchanged"
    );
}

#[tokio::test]
async fn malformed_metaserver_requests_are_rejected_400_at_once() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-bad").await;
    let started = std::time::Instant::now();
    let a = s
        .edge
        .meta("null", Content::string("not an application"))
        .await;
    a.rejected(400);
    // Answered by the check, not by the edge's 10 s wait running out: anything under that
    // tells the two apart, however loaded the machine.
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "answered at once, not after the edge's 10 s: {:?}",
        started.elapsed()
    );

    let bad_base64 = {
        let mut app = application("list", "/core/v1/services/null/null", None, None);
        app["Option"] = json!("%%%");
        app
    };
    s.edge.apply(bad_base64).await.rejected(400);
    for key in [
        "/core/v1/pods/../x",
        "/core/v1/pods/default/a%2Fb",
        "core/v1/pods/null/null",
    ] {
        s.edge
            .apply(application("get", key, Some(json!({})), None))
            .await
            .rejected(400);
    }
    let svc = format!("/core/v1/services/{}/null", s.ns);
    for option in [
        json!({"labelSelector": "!!"}),
        json!({"fieldSelector": "a=b=c"}),
    ] {
        s.edge
            .apply(application("watch", &svc, Some(option), None))
            .await
            .rejected(400);
    }
    s.edge
        .apply(application(
            "watch",
            "/foo.example/v1/bars/null/null",
            Some(json!({})),
            None,
        ))
        .await
        .rejected(404);
    s.edge
        .apply(application("explode", &svc, Some(json!({})), None))
        .await
        .rejected(400);
    // Still serving.
    s.edge
        .apply(application("list", &svc, Some(json!({})), None))
        .await
        .approved();
}

#[tokio::test]
async fn watch_events_follow_the_selection() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-watch").await;
    let app_label = unique("app");
    let watch = s
        .edge
        .apply(application(
            "watch",
            &format!("/core/v1/services/{}/null", s.ns),
            Some(json!({"labelSelector": format!("app={app_label}"), "watch": true, "timeoutSeconds": 431})),
            None,
        ))
        .await;
    assert!(watch.approved().is_null(), "a watch answer has no body");

    let svc = service(&s, "watched", json!({"app": app_label})).await;
    service(&s, "unwatched", json!({})).await;
    let resource = format!("{}/service/watched", s.ns);
    let insert = s.edge.pushed(&resource, "insert").await;
    assert_eq!(insert.route.source, "dynamiccontroller");
    assert!(insert.header.parent_id.is_empty());
    assert_eq!(
        Some(insert.header.resource_version.as_str()),
        svc.metadata.resource_version.as_deref()
    );
    let content: Value = serde_json::from_str(insert.content.as_json()).unwrap();
    assert_eq!(
        (&content["kind"], &content["apiVersion"]),
        (&json!("Service"), &json!("v1"))
    );

    // Leaving the selection is a delete for this node.
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    services
        .patch(
            "watched",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await
        .unwrap();
    s.edge.pushed(&resource, "delete").await;
    assert_eq!(
        s.edge.pushes_with("/service/unwatched"),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_watch_sync_registers_only_the_edges_own_watches() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-sync").await;
    let app_label = unique("app");
    let key = format!("/core/v1/services/{}/null", s.ns);
    let option = json!({"labelSelector": format!("app={app_label}"), "watch": true});

    let mut foreign = application("watch", &key, Some(option.clone()), None);
    foreign["Nodename"] = json!(unique("victim"));
    let id = foreign["ID"].as_str().unwrap().to_owned();
    let sync = s
        .edge
        .meta(
            "watchapp/sync",
            json_content(&json!({ id.clone(): foreign })),
        )
        .await;
    assert_eq!(sync.msg.route.resource, "watchapp/sync");
    assert_eq!(sync.app[&id]["Status"], "Rejected", "{}", sync.app);
    assert_eq!(sync.app[&id]["Error"]["ErrStatus"]["code"], 403);

    let own = application("watch", &key, Some(option), None);
    let own_id = own["ID"].as_str().unwrap().to_owned();
    let sync = s
        .edge
        .meta("watchapp/sync", json_content(&json!({ own_id: own })))
        .await;
    assert_eq!(sync.app, json!({}), "all registered");
    service(&s, "first", json!({"app": app_label})).await;
    s.edge
        .pushed(&format!("{}/service/first", s.ns), "insert")
        .await;

    // The edge lists no watch any more: the listener goes, later changes are not sent.
    let sync = s.edge.meta("watchapp/sync", json_content(&json!({}))).await;
    assert_eq!(sync.app, json!({}));
    service(&s, "second", json!({"app": app_label})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.edge.pushes_with("/service/second"), Vec::<String>::new());
}

#[tokio::test]
async fn a_nodes_watches_are_recorded_and_dropped_with_the_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-gone").await;
    s.edge
        .apply(application(
            "watch",
            &format!("/core/v1/services/{}/null", s.ns),
            Some(json!({"watch": true})),
            None,
        ))
        .await
        .approved();
    let records: Api<ConfigMap> = Api::namespaced(s.client.clone(), "kubeedge");
    let name = format!("dynamiccontroller.{}", s.node);
    let record = eventually(WAIT, "the node's watches recorded", || async {
        records.get_opt(&name).await.ok().flatten()
    })
    .await
    .expect("record written");
    let watches: Value = serde_json::from_str(&record.data.unwrap()["watches"]).unwrap();
    assert_eq!(watches.as_object().map(|w| w.len()), Some(1), "{watches}");

    Api::<Node>::all(s.client.clone())
        .delete(&s.node, &Default::default())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the record of a deleted node dropped",
        || async { matches!(records.get_opt(&name).await, Ok(None)).then_some(()) },
    )
    .await
    .expect("record deleted with the node");
}

/// Lets group `system:nodes` do `verbs` on `resources` of `group` in `ns` (as an operator
/// would, for an edge application that needs more than the Node authorizer gives).
async fn grant_nodes(s: &Scenario, group: &str, resources: &[&str], verbs: &[&str]) {
    let name = unique("nodes-may");
    let role: k8s_openapi::api::rbac::v1::Role = from(json!({
        "metadata": {"name": name, "namespace": s.ns},
        "rules": [{"apiGroups": [group], "resources": resources, "verbs": verbs}]
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &role).await;
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = from(json!({
        "metadata": {"name": name, "namespace": s.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &binding).await;
}

/// The names of a list answer's items.
fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn lists_page_with_continue_and_large_lists_arrive_whole() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-page").await;
    grant_nodes(&s, "", &["configmaps"], &["get", "list", "watch"]).await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns);
    let filler = "x".repeat(2048);
    let count = 2000;
    futures::StreamExt::for_each_concurrent(futures::stream::iter(0..count), 16, |i| {
        let (cms, filler) = (cms.clone(), filler.clone());
        async move {
            let cm: ConfigMap =
                from(json!({"metadata": {"name": format!("cm-{i:04}")}, "data": {"f": filler}}));
            cms.create(&PostParams::default(), &cm)
                .await
                .expect("create");
        }
    })
    .await;
    let key = format!("/core/v1/configmaps/{}/null", s.ns);
    // RBAC decisions are cached by the API server's authorizer for a moment after a grant.
    let first = eventually(WAIT, "a first page", || async {
        let a = s
            .edge
            .apply(application("list", &key, Some(json!({"limit": 1})), None))
            .await;
        (a.status() == "Approved").then(|| a.body())
    })
    .await
    .expect("the node may list ConfigMaps here");
    assert_eq!(item_names(&first).len(), 1);
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("a continue token")
        .to_owned();
    let second = s
        .edge
        .apply(application(
            "list",
            &key,
            Some(json!({"limit": 1, "continue": token})),
            None,
        ))
        .await
        .approved();
    assert_eq!(item_names(&second).len(), 1);
    assert_ne!(item_names(&first), item_names(&second), "the next page");

    // The whole list in one reply, within the edge's reply wait (how fast is for the
    // examples to measure, not for a test on a shared machine).
    let all = s
        .edge
        .apply(application("list", &key, Some(json!({})), None))
        .await;
    let raw = all.app["RespBody"].as_str().map_or(0, str::len);
    let all = all.approved();
    assert_eq!(item_names(&all).len(), count, "every item");
    assert!(raw > 4 << 20, "a reply over 4 MiB ({raw} bytes of base64)");
}

#[tokio::test]
async fn objects_of_a_crd_created_after_start_are_listed_and_watched() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-crd").await;
    let group = format!("{}.metaserver.test", short_id());
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        from(json!({
            "metadata": {"name": format!("widgets.{group}")},
            "spec": {
                "group": group,
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }));
    k8s_testenv::install_crds(&[crd]).await;
    grant_nodes(&s, &group, &["widgets"], &["get", "list", "watch"]).await;
    let widgets = kube::core::ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(s.client.clone(), &s.ns, &widgets);
    let widget = |name: &str| -> kube::api::DynamicObject {
        from(
            json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name}, "spec": {"size": 1}}),
        )
    };
    api.create(&PostParams::default(), &widget("first"))
        .await
        .unwrap();

    let key = format!("/{group}/v1/widgets/{}/null", s.ns);
    let list = eventually(WAIT, "the new type listed", || async {
        let a = s
            .edge
            .apply(application("list", &key, Some(json!({})), None))
            .await;
        (a.status() == "Approved").then(|| a.body())
    })
    .await
    .expect("a CRD created after cloudcore started is served");
    assert_eq!(item_names(&list), ["first"]);
    s.edge
        .apply(application(
            "watch",
            &key,
            Some(json!({"watch": true})),
            None,
        ))
        .await
        .approved();
    api.create(&PostParams::default(), &widget("second"))
        .await
        .unwrap();
    let pushed = s
        .edge
        .pushed(&format!("{}/widget/second", s.ns), "insert")
        .await;
    let content: Value = serde_json::from_str(pushed.content.as_json()).unwrap();
    assert_eq!(content["kind"], "Widget");
}

#[tokio::test]
async fn node_group_topology_limits_the_endpoints_a_node_sees() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-topo").await;
    grant_nodes(
        &s,
        "discovery.k8s.io",
        &["endpointslices"],
        &["get", "list", "watch"],
    )
    .await;
    let nodes: Api<Node> = Api::all(s.client.clone());
    let group_of = |g: &str| json!({"metadata": {"labels": {"apps.kubeedge.io/belonging-to": g}}});
    nodes
        .patch(
            &s.node,
            &PatchParams::default(),
            &Patch::Merge(group_of("g1")),
        )
        .await
        .unwrap();
    let (peer, stranger) = (unique("peer"), unique("stranger"));
    edge_node(&s.client, &peer).await;
    edge_node(&s.client, &stranger).await;
    nodes
        .patch(
            &peer,
            &PatchParams::default(),
            &Patch::Merge(group_of("g1")),
        )
        .await
        .unwrap();
    nodes
        .patch(
            &stranger,
            &PatchParams::default(),
            &Patch::Merge(group_of("g2")),
        )
        .await
        .unwrap();
    let svc: Service = from(json!({
        "metadata": {"name": "web", "namespace": s.ns,
            "annotations": {"apps.kubeedge.io/service-topology": "range-nodegroup"}},
        "spec": {"ports": [{"port": 80}]}
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &svc).await;
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = from(json!({
        "metadata": {"name": "web-1", "namespace": s.ns, "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.1.0.1"], "nodeName": s.node},
            {"addresses": ["10.1.0.2"], "nodeName": peer},
            {"addresses": ["10.1.0.3"], "nodeName": stranger},
            {"addresses": ["10.1.0.4"]}
        ]
    }));
    create(Api::namespaced(s.client.clone(), &s.ns), &slice).await;
    let addresses = |v: &Value| -> Vec<String> {
        v["endpoints"]
            .as_array()
            .map(|e| {
                e.iter()
                    .map(|e| e["addresses"][0].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let key = format!("/discovery.k8s.io/v1/endpointslices/{}/web-1", s.ns);
    // The filter reads Services and Nodes from caches that follow the API server.
    eventually(WAIT, "only the node's group", || async {
        let a = s
            .edge
            .apply(application("get", &key, Some(json!({})), None))
            .await;
        (a.status() == "Approved" && addresses(&a.body()) == ["10.1.0.1", "10.1.0.2"]).then_some(())
    })
    .await
    .expect("get: the g1 endpoints only");
    let list = s
        .edge
        .apply(application(
            "list",
            &format!("/discovery.k8s.io/v1/endpointslices/{}/null", s.ns),
            Some(json!({})),
            None,
        ))
        .await
        .approved();
    assert_eq!(
        addresses(&list["items"][0]),
        ["10.1.0.1", "10.1.0.2"],
        "list: {list}"
    );
    s.edge
        .apply(application(
            "watch",
            &format!("/discovery.k8s.io/v1/endpointslices/{}/null", s.ns),
            Some(json!({"watch": true})),
            None,
        ))
        .await
        .approved();
    let pushed = s
        .edge
        .pushed(&format!("{}/endpointslice/web-1", s.ns), "insert")
        .await;
    let content: Value = serde_json::from_str(pushed.content.as_json()).unwrap();
    assert_eq!(
        addresses(&content),
        ["10.1.0.1", "10.1.0.2"],
        "watch: {content}"
    );
}

#[tokio::test]
async fn identical_watches_share_one_listener() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-same").await;
    let key = format!("/core/v1/services/{}/null", s.ns);
    let watch = application("watch", &key, Some(json!({"watch": true})), None);
    s.edge.apply(watch.clone()).await.approved();
    s.edge.apply(watch).await.approved();
    let other = application(
        "watch",
        &key,
        Some(json!({"watch": true, "labelSelector": "app=x"})),
        None,
    );
    s.edge.apply(other).await.approved();
    let records: Api<ConfigMap> = Api::namespaced(s.client.clone(), "kubeedge");
    let name = format!("dynamiccontroller.{}", s.node);
    eventually(WAIT, "two listeners recorded", || async {
        let cm = records.get_opt(&name).await.ok()??;
        let watches: Value = serde_json::from_str(cm.data?.get("watches")?).ok()?;
        (watches.as_object()?.len() == 2).then_some(())
    })
    .await
    .expect("identical watches are one listener, a different selector another");
    // One object, one push, however many listeners of the node select it.
    service(&s, "one", json!({"app": "x"})).await;
    s.edge
        .pushed(&format!("{}/service/one", s.ns), "insert")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(s.edge.pushes_with("/service/one").len(), 1);
}

#[tokio::test]
async fn update_updatestatus_and_delete_go_to_the_api_server_as_the_node() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("meta-rw").await;
    let nodes: Api<Node> = Api::all(s.client.clone());
    let key = format!("/core/v1/nodes/null/{}", s.node);
    // The replica that holds the node marks it (annotation `cloudcore`) a moment after the
    // edge connects; an update read before that would remove the mark, which is refused.
    let own = eventually(WAIT, "the node marked by its replica", || async {
        let node = nodes.get(&s.node).await.ok()?;
        node.metadata
            .annotations
            .as_ref()?
            .contains_key("cloudcore")
            .then_some(node)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let mut own = to_value(&own);
    // As a client does: what it read, with its change (the `cloudcore` annotation kept).
    own["metadata"]["annotations"]["metaserver.test/update"] = json!("1");
    let updated = s
        .edge
        .apply(application(
            "update",
            &key,
            Some(json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"})),
            Some(own.clone()),
        ))
        .await
        .approved();
    assert_eq!(
        updated["metadata"]["annotations"]["metaserver.test/update"],
        "1"
    );
    // The same stale version again: the API server's conflict reaches the edge unchanged.
    s.edge
        .apply(application("update", &key, Some(json!({})), Some(own)))
        .await
        .rejected(409);

    let mut status = updated.clone();
    status["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "MetaServerTest",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    let mut app = application("updatestatus", &key, Some(json!({})), Some(status));
    app["Subresource"] = json!("status");
    s.edge.apply(app).await.approved();
    let node = nodes.get(&s.node).await.unwrap();
    let reasons: Vec<String> = node
        .status
        .and_then(|st| st.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.reason.unwrap_or_default())
        .collect();
    assert!(reasons.iter().any(|r| r == "MetaServerTest"), "{reasons:?}");

    // A pod bound to the node may be deleted by it, one bound elsewhere may not.
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    let pod = |name: &str, node: &str| -> Pod {
        from(
            json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}),
        )
    };
    create(pods.clone(), &pod("mine", &s.node)).await;
    let other = unique("elsewhere");
    edge_node(&s.client, &other).await;
    create(pods.clone(), &pod("theirs", &other)).await;
    let delete = |name: &str| {
        application(
            "delete",
            &format!("/core/v1/pods/{}/{name}", s.ns),
            Some(
                json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "gracePeriodSeconds": 0}),
            ),
            None,
        )
    };
    // NodeRestriction reads pods from its own cache: a pod created a moment ago may still be
    // "not found" there for a moment.
    let answer = |name: &'static str| {
        let (edge, app) = (&s.edge, delete(name));
        async move {
            eventually(WAIT, "NodeRestriction knows the pod", || async {
                let a = edge.apply(app.clone()).await;
                (a.code() != 404).then_some(a)
            })
            .await
            .expect("an answer other than 404")
        }
    };
    answer("theirs").await.rejected(403);
    assert!(
        pods.get_opt("theirs").await.unwrap().is_some(),
        "another node's pod stays"
    );
    answer("mine").await.approved();
    eventually(WAIT, "own pod deleted", || async {
        matches!(pods.get_opt("mine").await, Ok(None)).then_some(())
    })
    .await
    .expect("the node deleted its own pod");
}

#[tokio::test]
async fn a_flooding_node_is_refused_429_while_others_are_served() {
    test_tiers::require!(ApiServer);
    let (flooder, other) = (
        Scenario::new("meta-flood").await,
        Scenario::new("meta-calm").await,
    );
    let key = format!("/core/v1/services/{}/null", flooder.ns);
    let mut pending = Vec::new();
    for _ in 0..300 {
        let app = application("list", &key, Some(json!({})), None);
        pending.push(
            flooder
                .edge
                .send_as(
                    "metaserver",
                    "dynamiccontroller",
                    "null",
                    "null",
                    json_content(&app),
                )
                .await,
        );
    }
    let started = std::time::Instant::now();
    let calm = other
        .edge
        .apply(application(
            "list",
            &format!("/core/v1/services/{}/null", other.ns),
            Some(json!({})),
            None,
        ))
        .await;
    calm.approved();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "another node waited {:?}",
        started.elapsed()
    );
    let mut refused = 0;
    for p in pending {
        let m = tokio::time::timeout(REPLY_WAIT, p.rx)
            .await
            .expect("every request answered")
            .unwrap();
        let app: Value = serde_json::from_str(m.content.as_json()).unwrap();
        if app["Status"] == "Rejected" {
            assert_eq!(app["Error"]["ErrStatus"]["code"], 429, "{app}");
            refused += 1;
        }
    }
    assert!(
        refused >= 100,
        "beyond the burst, refused: {refused} of 300"
    );
}
