//! The request executed is the request authorized: a metaServer list or watch whose key names
//! one object returns that object only, whatever else its namespace holds, and discovery
//! paths that could be read two ways are refused before anything is sent.

use super::metaserver::{Answer, application};
use super::*;

/// The names of a list answer's items.
fn item_names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

impl Scenario {
    /// Sends a metaServer `list` of `key` with `options`.
    async fn meta_list(&self, key: &str, options: Value) -> Answer {
        self.edge
            .apply(application("list", key, Some(options), None))
            .await
    }
}

/// A pod of the node references Secret `used` and ConfigMap `cfg`; the namespace also holds
/// Secret `private` and ConfigMap `other`, which nothing of the node references.
async fn namespace_with_one_used_secret(s: &Scenario) {
    for name in ["used", "private"] {
        secret(s, name).await;
    }
    for name in ["cfg", "other"] {
        configmap(s, name).await;
    }
    s.own_pod(
        "web",
        json!({"volumes": [{"name": "s", "secret": {"secretName": "used"}},
            {"name": "c", "configMap": {"name": "cfg"}}]}),
    )
    .await;
}

#[tokio::test]
async fn a_list_naming_a_secret_its_pod_uses_returns_that_secret_only() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n1-secret").await;
    namespace_with_one_used_secret(&s).await;
    let key = format!("/core/v1/secrets/{}/used", s.ns);
    // The Node authorizer learns the pod a moment after it is created.
    let list = eventually(WAIT, "the list of the used Secret", || async {
        let a = s.meta_list(&key, json!({})).await;
        (a.status() == "Approved").then(|| a.body())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(item_names(&list), ["used"], "only the named Secret: {list}");
    // Paged as edges page: still only that Secret.
    let paged = s.meta_list(&key, json!({"limit": 1})).await.approved();
    assert_eq!(item_names(&paged), ["used"]);
    // A second name in the edge's own field selector is the one the API server would take
    // (terms are sorted): decided for that name, refused.
    let other_name = s
        .meta_list(&key, json!({"fieldSelector": "metadata.name=private"}))
        .await;
    other_name.rejected(403);
    assert!(other_name.app["RespBody"].is_null());
}

#[tokio::test]
async fn a_list_naming_a_configmap_or_its_own_node_returns_that_object_only() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n1-cm").await;
    namespace_with_one_used_secret(&s).await;
    s.other_node().await;
    let key = format!("/core/v1/configmaps/{}/cfg", s.ns);
    let list = eventually(WAIT, "the list of the used ConfigMap", || async {
        let a = s.meta_list(&key, json!({})).await;
        (a.status() == "Approved").then(|| a.body())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(item_names(&list), ["cfg"], "{list}");
    let nodes = s
        .meta_list(&format!("/core/v1/nodes/null/{}", s.node), json!({}))
        .await
        .approved();
    assert_eq!(item_names(&nodes), [s.node.as_str()], "its own Node only");
}

#[tokio::test]
async fn a_list_of_a_whole_namespace_of_secrets_is_refused() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n1-all").await;
    namespace_with_one_used_secret(&s).await;
    let all = s
        .meta_list(&format!("/core/v1/secrets/{}/null", s.ns), json!({}))
        .await;
    all.rejected(403);
    assert!(all.app["RespBody"].is_null(), "nothing listed: {}", all.app);
    let private = s
        .meta_list(&format!("/core/v1/secrets/{}/private", s.ns), json!({}))
        .await;
    private.rejected(403);
    assert!(private.app["RespBody"].is_null());
}

#[tokio::test]
async fn discovery_paths_with_dot_segments_are_refused() {
    test_tiers::require!(ApiServer);
    let s = Scenario::new("n21-dots").await;
    for path in [
        "/apis/../metrics",
        "/apis/../../version",
        "/api/..",
        "/apis/./apps",
    ] {
        let answer = s.edge.apply(application("get", path, None, None)).await;
        answer.rejected(400);
    }
    // The discovery the metaServer needs still answers.
    let apps = s
        .edge
        .apply(application("get", "/apis/apps/v1", None, None))
        .await
        .approved();
    assert_eq!(apps["kind"], "APIResourceList");
}
