//! Counters after a scripted run: every counter is exact.

use std::time::Duration;

use beehive::{Bus, Content, Message, ModuleStatsSnapshot};

#[actix_rt::test]
async fn counters_are_exact_after_a_scripted_run() {
    let bus = Bus::new();
    let mut hub = bus.register_inbox("hub", "hubs", 3).unwrap();
    let mut other = bus.register_inbox("other", "hubs", 10).unwrap();
    let ctl = bus.endpoint("ctl");

    // 3 sends fill hub; 2 try_sends are rejected.
    for _ in 0..3 {
        ctl.send("hub", Message::new()).await.unwrap();
    }
    assert!(ctl.try_send("hub", Message::new()).is_err());
    assert!(ctl.try_send("hub", Message::new()).is_err());
    // Drain one, then a group send reaches both members (2 sends).
    hub.recv().await.unwrap();
    assert_eq!(ctl.send_to_group("hubs", Message::new()).await.unwrap(), 2);
    // One sync request to `other` that times out, answered late.
    let _ = ctl
        .send_sync("other", Message::new(), Duration::from_millis(20))
        .await
        .unwrap_err();
    let group_msg = other.recv().await.unwrap();
    let req = other.recv().await.unwrap();
    let responder = bus.endpoint("other");
    responder.send_resp(req.response(Content::null()));
    // One answer nobody asked for.
    responder.send_resp(group_msg.response(Content::null()));

    let stats = bus.stats();
    let get = |n: &str| stats.modules.iter().find(|m| m.name == n).cloned().unwrap();
    assert_eq!(
        get("ctl"),
        ModuleStatsSnapshot {
            name: "ctl".into(),
            sent: 3 + 2 + 1,
            sync_timeouts: 1,
            late_responses: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        get("hub"),
        ModuleStatsSnapshot {
            name: "hub".into(),
            received: 1,
            rejected_full: 2,
            depth: 3,
            capacity: 3,
            ..Default::default()
        }
    );
    assert_eq!(
        get("other"),
        ModuleStatsSnapshot {
            name: "other".into(),
            received: 2,
            depth: 0,
            capacity: 10,
            ..Default::default()
        }
    );
    assert_eq!(stats.unmatched_responses, 1);
    assert_eq!(stats.pending_sync, 0);
}

/// issue 18: sends refused because the target stopped or was removed are counted on the
/// target (`rejected_stopped`); names never registered create no counters.
#[actix_rt::test]
async fn sends_refused_because_the_target_stopped_or_was_removed_are_counted() {
    use beehive::Error;

    let bus = Bus::new();
    let _gone = bus.register_inbox("gone", "g", 4).unwrap();
    let _stuck = bus.register_inbox("stuck", "s", 1).unwrap();
    let ep = bus.endpoint("ctl");
    bus.remove("gone").await.unwrap();
    assert!(matches!(
        ep.send("gone", Message::new()).await,
        Err(Error::UnknownModule { .. })
    ));
    assert!(ep.try_send("gone", Message::new()).is_err());
    assert!(
        ep.send_sync("gone", Message::new(), Duration::from_millis(10))
            .await
            .is_err()
    );
    assert_eq!(bus.module_stats("gone").unwrap().rejected_stopped, 3);

    // A name that was never registered counts nowhere.
    assert!(ep.send("nobody", Message::new()).await.is_err());
    assert!(bus.module_stats("nobody").is_none());

    // Registered again: accepted, and the count stays as it was.
    let _again = bus.register_inbox("gone", "g", 4).unwrap();
    ep.send("gone", Message::new()).await.unwrap();
    assert_eq!(bus.module_stats("gone").unwrap().rejected_stopped, 3);

    // A sender waiting for room when the module stops is refused and counted.
    ep.send("stuck", Message::new()).await.unwrap();
    let blocked = actix_rt::spawn({
        let ep = ep.clone();
        async move { ep.send("stuck", Message::new()).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    bus.shutdown().await;
    assert!(matches!(blocked.await.unwrap(), Err(Error::Stopped { .. })));
    assert_eq!(bus.module_stats("stuck").unwrap().rejected_stopped, 1);
}

/// issue 18: an actor module that stopped on its own refuses sends, and each is counted.
#[actix_rt::test]
async fn sends_to_a_module_that_stopped_on_its_own_are_counted() {
    use crate::support::{Behaviour, Probe, make_panic, until};
    use beehive::Error;

    let bus = Bus::new();
    let mut probe = Probe::new("fragile", "g");
    probe.behaviour = Behaviour::PanicOnRequest;
    bus.register(probe).unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    make_panic(&ep, "fragile").await;
    until(|| {
        matches!(
            ep.try_send("fragile", Message::new()),
            Err(Error::Stopped { .. })
        )
    })
    .await;
    let before = bus.module_stats("fragile").unwrap().rejected_stopped;
    assert!(before >= 1);
    assert!(ep.send("fragile", Message::new()).await.is_err());
    assert!(
        ep.send_sync("fragile", Message::new(), Duration::from_millis(10))
            .await
            .is_err()
    );
    assert_eq!(
        bus.module_stats("fragile").unwrap().rejected_stopped,
        before + 2
    );
    bus.shutdown().await;
}
