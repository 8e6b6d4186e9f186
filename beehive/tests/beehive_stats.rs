//! Counters after a scripted run (beehive.md §5, behaviour 36).

mod support;

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
