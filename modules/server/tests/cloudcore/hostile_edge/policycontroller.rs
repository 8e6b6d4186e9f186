//! ServiceAccountAccesses (featureGates.requireAuthorization): what an edge learns of the
//! cluster's RBAC is the accesses of the service accounts its own pods run as, and an edge
//! cannot pass for the policycontroller.

use super::*;
use kubeedge_api::policy::ServiceAccountAccess;

#[tokio::test]
async fn an_edge_gets_the_access_of_its_own_pods_account_and_no_other_node_does() {
    let s = Scenario::new("saa").await;
    let other = Scenario::new("saa-other").await;
    let account: ServiceAccount = from(json!({"metadata": {"name": "app-sa"}}));
    create(s.api::<ServiceAccount>(), &account).await;
    s.own_pod(
        "app",
        json!({"serviceAccountName": "app-sa", "automountServiceAccountToken": false}),
    )
    .await;
    let resource = format!("{}/serviceaccountaccess/app-sa", s.ns);
    let got = s.edge.pushed(&resource, "insert").await;
    assert_eq!(got.route.source, "policycontroller");
    let content: Value = got.content.parse().expect("an object");
    assert_eq!(
        content["spec"]["serviceAccount"]["metadata"]["name"],
        "app-sa"
    );
    assert_eq!(
        content["status"],
        json!({}),
        "other nodes' names stay in the cloud"
    );
    let stored: ServiceAccountAccess = s.get(&s.api(), "app-sa").await.expect("the access");
    assert_eq!(
        stored.status.map(|st| st.node_list),
        Some(vec![s.node.clone()])
    );
    assert!(
        other
            .edge
            .pushed
            .lock()
            .unwrap()
            .iter()
            .all(|m| !m.route.resource.contains("serviceaccountaccess")),
        "another edge node learns nothing of it"
    );
}

#[tokio::test]
async fn an_edge_cannot_pass_for_the_policycontroller() {
    let s = Scenario::new("saa-forge").await;
    let refused = || async {
        cloud()
            .metrics()
            .await
            .expect("/metrics")
            .value(
                "cloudhub_node_messages_dropped_total",
                &[("node", s.node.as_str()), ("reason", "refused")],
            )
            .unwrap_or(0.0)
    };
    let before = refused().await;
    s.edge
        .send_as(
            "policycontroller",
            "resource",
            &format!("{}/serviceaccountaccess/x", s.ns),
            "insert",
            json_content(&json!({"metadata": {"name": "x"}})),
        )
        .await;
    eventually(WAIT, "the message dropped by cloudhub", || async {
        (refused().await > before).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    s.absent(
        &s.api::<ServiceAccountAccess>(),
        "x",
        "an access from an edge",
    )
    .await;
}
