//! Leader election through a real Lease: one of two replicas is active at a time.

use std::time::Duration;

use cloudcore_server::config::LeaderElectionConfig;
use cloudcore_server::leader::{Attempt, LeaderElector};

fn config(ns: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        leader_elect: true,
        lease_duration: 3,
        renew_deadline: 2,
        retry_period: 1,
        resource_name: "cloudcore".into(),
        resource_namespace: ns.into(),
    }
}

#[tokio::test]
async fn only_one_replica_leads_and_the_other_takes_over_when_it_stops_renewing() {
    test_tiers::require!(ApiServer);
    let ns = k8s_testenv::namespace("leader").await;
    let a = LeaderElector::new(k8s_testenv::client().await, &config(&ns), "replica-a");
    let b = LeaderElector::new(k8s_testenv::client().await, &config(&ns), "replica-b");

    assert_eq!(a.try_acquire().await.unwrap(), Attempt::Leading);
    assert_eq!(
        b.try_acquire().await.unwrap(),
        Attempt::Following("replica-a".into())
    );
    // a renews: b still follows.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(a.try_acquire().await.unwrap(), Attempt::Leading);
    assert_eq!(
        b.try_acquire().await.unwrap(),
        Attempt::Following("replica-a".into())
    );

    // a stops renewing (crashed); b takes over once the lease expires, and a notices.
    let took_over = tokio::time::timeout(Duration::from_secs(10), b.acquire()).await;
    assert!(took_over.is_ok(), "b became leader after the lease expired");
    assert_eq!(
        a.try_acquire().await.unwrap(),
        Attempt::Following("replica-b".into())
    );
    let lost = tokio::time::timeout(Duration::from_secs(5), a.hold()).await;
    assert!(lost.is_ok(), "hold() returns when leadership is gone");
}
