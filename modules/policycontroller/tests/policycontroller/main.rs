//! The policycontroller against the real API server, with an inbox standing in for cloudhub
//! (what the edges are sent). Each test works in a namespace of its own with edge nodes of its
//! own; the tests take turns, since a ClusterRoleBinding touches every account.

use std::time::Duration;

use beehive::{Bus, Message};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kubeedge_api::policy::ServiceAccountAccess;
use kubeedge_api::testing::FakeEdge;
use policycontroller::PolicyController;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &beehive::new_id()[..8])
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

struct World {
    client: kube::Client,
    hub: FakeEdge,
    ns: String,
    _bus: Bus,
}

impl World {
    async fn new() -> World {
        k8s_testenv::install_crds(&kubeedge_api::policy::crds()).await;
        let client = k8s_testenv::client().await;
        let bus = Bus::new();
        let hub = FakeEdge::register(&bus, "cloudhub");
        let pc = PolicyController::new(bus.endpoint("policycontroller"), client.clone());
        let synced = pc.synced();
        bus.register(pc).unwrap();
        bus.start().unwrap();
        tokio::time::timeout(WAIT, synced)
            .await
            .expect("caches listed");
        World {
            ns: k8s_testenv::namespace("pc").await,
            client,
            hub,
            _bus: bus,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn node(&self, edge: bool) -> String {
        let name = unique(if edge { "edge" } else { "plain" });
        let labels = if edge {
            json!({EDGE_LABEL: ""})
        } else {
            json!({})
        };
        create(
            &Api::<Node>::all(self.client.clone()),
            json!({"metadata": {"name": name, "labels": labels}}),
        )
        .await;
        name
    }

    async fn account(&self, name: &str) -> ServiceAccount {
        create(&self.api(), json!({"metadata": {"name": name}})).await
    }

    async fn pod(&self, name: &str, account: &str, node: &str) {
        create::<Pod>(
            &self.api(),
            json!({"metadata": {"name": name},
                   "spec": {"nodeName": node, "serviceAccountName": account,
                            "automountServiceAccountToken": false,
                            "containers": [{"name": "c", "image": "nginx"}]}}),
        )
        .await;
    }

    async fn delete_pod(&self, name: &str) {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        self.api::<Pod>()
            .delete(name, &dp)
            .await
            .expect("delete pod");
    }

    /// The access `name` once `check` holds for it.
    async fn access_where(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&ServiceAccountAccess) -> bool,
    ) -> ServiceAccountAccess {
        let api = self.api::<ServiceAccountAccess>();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let got = api.get_opt(name).await.expect("read access");
            if let Some(a) = got.as_ref().filter(|a| check(a)) {
                return a.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: {what} not within {WAIT:?}; now {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn gone(&self, name: &str) {
        let api = self.api::<ServiceAccountAccess>();
        let deadline = tokio::time::Instant::now() + WAIT;
        while api.get_opt(name).await.expect("read").is_some() {
            assert!(tokio::time::Instant::now() < deadline, "{name} not deleted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn resource(&self, node: &str, name: &str) -> String {
        format!("node/{node}/{}/serviceaccountaccess/{name}", self.ns)
    }

    /// Messages for `node` about access `name` so far, as `(operation, content)`.
    fn sent(&self, node: &str, name: &str) -> Vec<(String, Value)> {
        let resource = self.resource(node, name);
        self.hub
            .matching(|m| m.route.resource == resource)
            .iter()
            .map(|m| (m.route.operation.to_string(), m.content.parse().unwrap()))
            .collect()
    }

    /// Waits for the `n`th message for `node` about `name` and returns it.
    async fn nth(&self, node: &str, name: &str, n: usize) -> Message {
        let resource = self.resource(node, name);
        let got = self
            .hub
            .wait_count(n, WAIT, |m| m.route.resource == resource)
            .await;
        assert!(
            got.len() >= n,
            "{resource}: {} messages, want {n}: {:?}",
            got.len(),
            self.sent(node, name)
        );
        got[n - 1].clone()
    }
}

fn rules_of(content: &Value, list: &str, binding: &str) -> Option<Value> {
    let key = if list == "accessRoleBinding" {
        "roleBinding"
    } else {
        "clusterRoleBinding"
    };
    content["spec"][list]
        .as_array()?
        .iter()
        .find(|b| b[key]["metadata"]["name"] == binding)
        .map(|b| b["rules"].clone())
}

#[actix_rt::test]
async fn an_account_used_on_edge_nodes_reaches_exactly_those_nodes_and_follows_its_rbac() {
    let _turn = TURN.lock().await;
    let w = World::new().await;
    let (e1, e2, plain) = (w.node(true).await, w.node(true).await, w.node(false).await);
    let sa = w.account("app-sa").await;

    // 1. A pod on an edge node: the access is created and the node gets one insert.
    w.pod("app", "app-sa", &e1).await;
    let saa = w
        .access_where("app-sa", "node list [e1]", |a| {
            a.status
                .as_ref()
                .is_some_and(|s| s.node_list == [e1.clone()])
        })
        .await;
    assert_eq!(saa.spec.service_account.metadata.name, "app-sa");
    assert_eq!(Some(saa.spec.service_account_uid.clone()), sa.metadata.uid);
    let insert = w.nth(&e1, "app-sa", 1).await;
    assert_eq!(
        (
            insert.route.source.as_str(),
            insert.route.group.as_str(),
            insert.route.operation.as_str()
        ),
        ("policycontroller", "resource", "insert")
    );
    assert!(!insert.header.resource_version.is_empty());
    let content: Value = insert.content.parse().unwrap();
    assert_eq!(content["apiVersion"], "policy.kubeedge.io/v1alpha1");
    assert_eq!(content["kind"], "ServiceAccountAccess");
    assert_eq!(
        content["status"],
        json!({}),
        "the node list stays in the cloud"
    );
    assert!(content["metadata"]["uid"].is_string());

    // 2. A RoleBinding to the account: the access gains it with its role's rules; update.
    create::<Role>(
        &w.api(),
        json!({"metadata": {"name": "reader"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await;
    create::<RoleBinding>(
        &w.api(),
        json!({"metadata": {"name": "app-read"},
               "subjects": [{"kind": "ServiceAccount", "name": "app-sa", "namespace": w.ns}],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}}),
    )
    .await;
    let update = w.nth(&e1, "app-sa", 2).await;
    assert_eq!(update.route.operation, "update");
    let content: Value = update.content.parse().unwrap();
    assert_eq!(
        rules_of(&content, "accessRoleBinding", "app-read").unwrap()[0]["verbs"],
        json!(["get", "list"])
    );

    // 3. The role's rules change: update with the new rules.
    let patch =
        json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]});
    w.api::<Role>()
        .patch(
            "reader",
            &Default::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let update = w.nth(&e1, "app-sa", 3).await;
    let content: Value = update.content.parse().unwrap();
    assert_eq!(
        rules_of(&content, "accessRoleBinding", "app-read").unwrap()[0]["verbs"],
        json!(["get"])
    );

    // 4. Cluster-wide bindings: to all service accounts it applies; to all authenticated users
    // not (as KubeEdge).
    let (all_sa, all_auth) = (unique("all-sa"), unique("all-auth"));
    for (name, group) in [
        (&all_sa, "system:serviceaccounts"),
        (&all_auth, "system:authenticated"),
    ] {
        create::<ClusterRoleBinding>(
            &Api::all(w.client.clone()),
            json!({"metadata": {"name": name},
                   "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}],
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}}),
        )
        .await;
    }
    let saa = w
        .access_where("app-sa", "the system:serviceaccounts binding", |a| {
            a.spec
                .access_cluster_role_binding
                .iter()
                .any(|b| b.cluster_role_binding.metadata.name == all_sa)
        })
        .await;
    assert!(
        !saa.spec
            .access_cluster_role_binding
            .iter()
            .any(|b| b.cluster_role_binding.metadata.name == all_auth)
    );
    for name in [&all_sa, &all_auth] {
        Api::<ClusterRoleBinding>::all(w.client.clone())
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    w.access_where("app-sa", "the cluster bindings gone", |a| {
        !a.spec
            .access_cluster_role_binding
            .iter()
            .any(|b| b.cluster_role_binding.metadata.name == all_sa)
    })
    .await;
    let sent_e1 = w.sent(&e1, "app-sa").len();

    // 5. A second pod on another edge node: it gets an insert, the first node nothing.
    w.pod("app2", "app-sa", &e2).await;
    let mut both = vec![e1.clone(), e2.clone()];
    both.sort();
    w.access_where("app-sa", "node list [e1, e2]", |a| {
        a.status.as_ref().is_some_and(|s| s.node_list == both)
    })
    .await;
    assert_eq!(w.nth(&e2, "app-sa", 1).await.route.operation, "insert");
    assert_eq!(w.sent(&e1, "app-sa").len(), sent_e1, "nothing new for e1");

    // A pod on a node that is not an edge node changes nothing.
    w.pod("app3", "app-sa", &plain).await;

    // 6. The first pod goes: its node gets a delete; the last goes: the access is deleted and
    // the last node told.
    w.delete_pod("app").await;
    w.access_where("app-sa", "node list [e2]", |a| {
        a.status
            .as_ref()
            .is_some_and(|s| s.node_list == [e2.clone()])
    })
    .await;
    // The status and the messages are written by different steps: the delete for e1 may
    // follow the status the wait above saw.
    let deadline = tokio::time::Instant::now() + WAIT;
    while w.sent(&e1, "app-sa").last().map(|(op, _)| op.as_str()) != Some("delete") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no delete for e1: {:?}",
            w.sent(&e1, "app-sa")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.delete_pod("app2").await;
    w.gone("app-sa").await;
    let last = w.nth(&e2, "app-sa", 2).await;
    assert_eq!(last.route.operation, "delete");
    assert!(
        w.sent(&plain, "app-sa").is_empty(),
        "never to a non-edge node"
    );
    assert_eq!(
        w.sent(&e1, "app-sa").last().unwrap().0,
        "delete",
        "nothing for e1 after its delete"
    );
}

#[actix_rt::test]
async fn deleting_the_account_deletes_its_access_everywhere_and_missing_roles_are_left_out() {
    let _turn = TURN.lock().await;
    let w = World::new().await;
    let e1 = w.node(true).await;
    w.account("worker").await;
    // A binding to a role that does not exist, beside one that does.
    create::<Role>(
        &w.api(),
        json!({"metadata": {"name": "exists"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
    )
    .await;
    for (binding, role) in [("a-missing", "no-such-role"), ("b-present", "exists")] {
        create::<RoleBinding>(
            &w.api(),
            json!({"metadata": {"name": binding},
                   "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": w.ns}],
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role}}),
        )
        .await;
    }
    w.pod("job", "worker", &e1).await;
    let saa = w
        .access_where("worker", "created with its binding", |a| {
            !a.spec.access_role_binding.is_empty()
        })
        .await;
    let names: Vec<&str> = saa
        .spec
        .access_role_binding
        .iter()
        .map(|b| b.role_binding.metadata.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["b-present"],
        "the binding without a role is left out, the other kept"
    );
    w.nth(&e1, "worker", 1).await;
    w.api::<ServiceAccount>()
        .delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    w.gone("worker").await;
    assert_eq!(w.nth(&e1, "worker", 2).await.route.operation, "delete");
}

#[actix_rt::test]
async fn a_replica_that_finds_the_access_written_by_another_still_tells_the_nodes() {
    let _turn = TURN.lock().await;
    // The first replica writes the access and its node list.
    let w = World::new().await;
    let e1 = w.node(true).await;
    w.account("shared").await;
    w.pod("p", "shared", &e1).await;
    w.access_where("shared", "written", |a| {
        a.status
            .as_ref()
            .is_some_and(|s| s.node_list == [e1.clone()])
    })
    .await;
    w.nth(&e1, "shared", 1).await;
    // A second replica starts: nothing is left to write, yet it sends the access (its cloudhub
    // delivers it when the node's session is there, and drops it otherwise).
    let bus = Bus::new();
    let hub = FakeEdge::register(&bus, "cloudhub");
    let pc = PolicyController::new(bus.endpoint("policycontroller"), w.client.clone());
    bus.register(pc).unwrap();
    bus.start().unwrap();
    let resource = w.resource(&e1, "shared");
    let got = hub
        .wait_for(WAIT, |m| m.route.resource == resource)
        .await
        .expect("the second replica sends the access");
    assert_eq!(got.route.operation, "insert");
}
