//! Cloud modules' sources from an edge: cloudhub drops an upstream message that claims the
//! source of any cloud module (or a cloud-only source such as `router_eventbus`), whatever
//! its operation, so no handler that trusts a cloud source can be reached by an edge. The
//! `router` source is the one that once let an edge write any Rule's status as cloudcore.

use super::*;

#[tokio::test]
async fn an_edge_claiming_a_cloud_modules_source_should_change_nothing() {
    let s = Scenario::new("src").await;
    let rule: Rule = from(json!({"apiVersion": "rules.kubeedge.io/v1", "kind": "Rule",
        "metadata": {"name": "r"}, "spec": {"source": "a", "sourceResource": {},
            "target": "b", "targetResource": {}}}));
    let rules: Api<Rule> = Api::namespaced(s.client.clone(), &s.ns);
    let existing = create(rules.clone(), &rule).await;
    // Written out rather than taken from the list under test.
    let cloud_sources = [
        "router",
        "router_eventbus",
        "router_servicebus",
        "dynamiccontroller",
        "taskmanager",
        "policycontroller",
        "nodeupgradejobcontroller",
        "edgecontroller",
        "devicecontroller",
        "synccontroller",
        "cloudhub",
        "cloudStream",
    ];
    for source in cloud_sources {
        for group in ["resource", "router", "user"] {
            s.edge
                .send_as(
                    source,
                    group,
                    &format!("{}/rulestatus/r", s.ns),
                    "update",
                    json_content(&json!({"Status": "FAIL", "Error": {"Detail": "pwned"}})),
                )
                .await;
        }
    }
    // The status write, had one been made, takes one round trip to the API server.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.unchanged(
        &rules,
        &existing,
        "rule status from an edge claiming a cloud source",
    )
    .await;
    // The session is still up and served: a request of its own is answered.
    let own = s
        .edge
        .ask(
            &format!("default/node/{}", s.node),
            "query",
            Content::null(),
        )
        .await;
    assert_eq!(own.raw_object("Node")["metadata"]["name"], s.node.as_str());
}
