//! Module registration, start and shutdown: documented start order, one
//! shutdown hook each, refused duplicates, late modules, restarts and stopped receivers.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{Behaviour, Probe, make_panic, number_of, numbered, until};
use beehive::{Backoff, Bus, BusConfig, Error, Message, RestartPolicy};

#[actix_rt::test]
async fn a_module_receives_what_is_sent_to_its_name_in_send_order() {
    let bus = Bus::new();
    let probe = Probe::new("meta", "meta");
    let seen = probe.seen.clone();
    bus.register(probe).unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("edged");
    for i in 0..500 {
        ep.send("meta", numbered(0, i)).await.unwrap();
    }
    until(|| seen.lock().unwrap().len() == 500).await;
    let order: Vec<usize> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|m| number_of(m).1)
        .collect();
    assert_eq!(order, (0..500).collect::<Vec<_>>());
    bus.shutdown().await;
}

#[actix_rt::test]
async fn a_disabled_module_is_not_started_and_sending_to_it_fails() {
    let bus = Bus::new();
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut probe = Probe::new("off", "g").with_log(log.clone());
    probe.enabled = false;
    bus.register(probe).unwrap();
    bus.start().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        log.borrow().is_empty(),
        "disabled module must not start: {:?}",
        log.borrow()
    );
    let err = bus
        .endpoint("x")
        .send("off", Message::new())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ModuleDisabled { .. }), "{err}");
    assert!(err.into_message().is_some(), "the message is handed back");
}

#[actix_rt::test]
async fn registering_a_duplicate_name_is_refused() {
    let bus = Bus::new();
    bus.register(Probe::new("hub", "g")).unwrap();
    let err = bus.register(Probe::new("hub", "other")).unwrap_err();
    assert!(
        matches!(err, Error::DuplicateModule(ref n) if n == "hub"),
        "{err}"
    );
    assert!(matches!(
        bus.register_inbox("hub", "g", 0),
        Err(Error::DuplicateModule(_))
    ));
}

#[actix_rt::test]
async fn modules_start_in_registration_order_after_every_mailbox_exists() {
    let bus = Bus::new();
    let log = Rc::new(RefCell::new(Vec::new()));
    for name in ["a", "b", "c", "d"] {
        bus.register(Probe::new(name, "all").with_log(log.clone()))
            .unwrap();
    }
    // Messages sent before start are queued: every mailbox exists at registration.
    let ep = bus.endpoint("x");
    for name in ["a", "b", "c", "d"] {
        ep.send(name, Message::new()).await.unwrap();
    }
    bus.start().unwrap();
    until(|| log.borrow().len() == 4).await;
    assert_eq!(
        *log.borrow(),
        vec!["start a", "start b", "start c", "start d"]
    );
    bus.shutdown().await;
}

#[actix_rt::test]
async fn shutdown_runs_each_hook_once_in_reverse_registration_order() {
    let bus = Bus::new();
    let log = Rc::new(RefCell::new(Vec::new()));
    for name in ["a", "b", "c"] {
        bus.register(Probe::new(name, "all").with_log(log.clone()))
            .unwrap();
    }
    bus.start().unwrap();
    until(|| log.borrow().len() == 3).await;
    log.borrow_mut().clear();
    bus.shutdown().await;
    bus.shutdown().await; // a second call does nothing
    assert_eq!(
        *log.borrow(),
        vec![
            "shutdown c",
            "stopped c",
            "shutdown b",
            "stopped b",
            "shutdown a",
            "stopped a"
        ]
    );
}

#[actix_rt::test]
async fn shutdown_handles_queued_messages_before_the_hook() {
    let bus = Bus::new();
    let log = Rc::new(RefCell::new(Vec::new()));
    let probe = Probe::new("a", "g").with_log(log.clone());
    let seen = probe.seen.clone();
    bus.register(probe).unwrap();
    let ep = bus.endpoint("x");
    for i in 0..100 {
        ep.send("a", numbered(0, i)).await.unwrap();
    }
    bus.start().unwrap();
    bus.shutdown().await;
    assert_eq!(
        seen.lock().unwrap().len(),
        100,
        "queued messages are handled, not dropped"
    );
    assert!(log.borrow().contains(&"shutdown a".to_string()));
}

#[actix_rt::test]
async fn removing_a_module_takes_it_out_of_all_its_groups() {
    let bus = Bus::new();
    let a = Probe::new("a", "g1");
    let b = Probe::new("b", "g1");
    let (seen_a, seen_b) = (a.seen.clone(), b.seen.clone());
    bus.register(a).unwrap();
    bus.register(b).unwrap();
    bus.join_group("a", "g2").unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    assert_eq!(ep.send_to_group("g1", Message::new()).await.unwrap(), 2);
    bus.remove("a").await.unwrap();
    assert_eq!(ep.send_to_group("g1", Message::new()).await.unwrap(), 1);
    let err = ep.send_to_group("g2", Message::new()).await.unwrap_err();
    assert!(matches!(err, Error::EmptyGroup { .. }), "{err}");
    assert!(matches!(
        ep.send("a", Message::new()).await,
        Err(Error::UnknownModule { .. })
    ));
    until(|| seen_b.lock().unwrap().len() == 2).await;
    assert_eq!(seen_a.lock().unwrap().len(), 1);
    bus.shutdown().await;
}

#[actix_rt::test]
async fn receive_on_a_stopped_module_is_a_closed_error_after_the_queue_drains() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("edged", "edged", 4).unwrap();
    let ep = bus.endpoint("x");
    ep.send("edged", numbered(0, 1)).await.unwrap();
    bus.shutdown().await;
    assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, 1));
    let err = inbox.recv().await.unwrap_err();
    assert!(matches!(err, Error::Stopped { .. }), "{err}");
    assert!(
        inbox.recv().await.is_err(),
        "stays closed, never an empty message"
    );
}

#[actix_rt::test]
async fn after_shutdown_sends_fail_with_a_clear_error_and_hand_the_message_back() {
    let bus = Bus::new();
    bus.register(Probe::new("a", "g")).unwrap();
    bus.start().unwrap();
    bus.shutdown().await;
    let ep = bus.endpoint("x");
    // Each send gives its own message back, so a caller can dead-letter it without a clone.
    let handed_back = |result: Result<(), Error>, sent: &Message| match result {
        Err(e @ Error::Shutdown { .. }) => {
            assert_eq!(e.to_string(), "the bus is shut down");
            let back = e.into_message().expect("the message is handed back");
            assert_eq!(back.header.id, sent.header.id);
        }
        other => panic!("expected Shutdown, got {other:?}"),
    };
    let m = Message::new();
    handed_back(ep.send("a", m.clone()).await, &m);
    let m = Message::new();
    handed_back(ep.try_send("a", m.clone()), &m);
    let m = Message::new();
    handed_back(ep.send_to_group("g", m.clone()).await.map(drop), &m);
    let m = Message::new();
    handed_back(
        ep.send_sync("a", m.clone(), Duration::from_millis(10))
            .await
            .map(drop),
        &m,
    );
    let m = Message::new();
    handed_back(
        ep.send_to_group_sync("g", m.clone(), Duration::from_millis(10))
            .await
            .map(drop),
        &m,
    );
    assert!(matches!(
        bus.register(Probe::new("late", "g")),
        Err(Error::Shutdown { message: None })
    ));
}

#[actix_rt::test]
async fn a_module_started_late_gets_nothing_sent_before_it_registered() {
    let bus = Bus::new();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    let err = ep.send("late", Message::new()).await.unwrap_err();
    assert!(matches!(err, Error::UnknownModule { .. }), "{err}");
    let probe = Probe::new("late", "g");
    let seen = probe.seen.clone();
    bus.register(probe).unwrap(); // the bus has started: it starts at once
    ep.send("late", numbered(0, 7)).await.unwrap();
    until(|| seen.lock().unwrap().len() == 1).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(number_of(&seen.lock().unwrap()[0]), (0, 7));
    bus.shutdown().await;
}

#[actix_rt::test]
async fn a_panicking_module_is_restarted_with_backoff_and_keeps_its_mailbox() {
    let bus = Bus::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let starts = Rc::new(RefCell::new(Vec::new()));
    let (s, l) = (seen.clone(), starts.clone());
    let policy = RestartPolicy {
        max_restarts: Some(3),
        backoff: Backoff::new(Duration::from_millis(20), Duration::from_millis(200)),
    };
    bus.register_restartable(
        move || {
            let mut p = Probe::new("fragile", "g")
                .with_seen(s.clone())
                .with_log(l.clone());
            p.behaviour = Behaviour::PanicOnRequest;
            p
        },
        policy,
    )
    .unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    make_panic(&ep, "fragile").await;
    // Queued while the module is down: must survive into the restarted instance.
    for i in 0..10 {
        ep.send("fragile", numbered(0, i)).await.unwrap();
    }
    let began = std::time::Instant::now();
    until(|| seen.lock().unwrap().len() == 10).await;
    assert!(
        began.elapsed() >= Duration::from_millis(15),
        "restart waits for the back-off"
    );
    let stats = bus.module_stats("fragile").unwrap();
    assert_eq!(stats.restarts, 1);
    assert!(!stats.failed, "a restarted module has not failed");
    let starts_seen = starts
        .borrow()
        .iter()
        .filter(|l| l.starts_with("start"))
        .count();
    assert_eq!(starts_seen, 2);
    bus.shutdown().await;
}

#[actix_rt::test]
async fn a_module_without_policy_that_dies_makes_senders_fail_instead_of_block() {
    let bus = Bus::new();
    let mut probe = Probe::new("fragile", "g");
    probe.behaviour = Behaviour::PanicOnRequest;
    probe.capacity = 1;
    bus.register(probe).unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    assert!(!bus.module_stats("fragile").unwrap().failed);
    make_panic(&ep, "fragile").await;
    let started = std::time::Instant::now();
    loop {
        match ep.send("fragile", Message::new()).await {
            Ok(()) => tokio::time::sleep(Duration::from_millis(1)).await,
            Err(e) => {
                assert!(matches!(e, Error::Stopped { .. }), "{e}");
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    assert!(
        bus.module_stats("fragile").unwrap().failed,
        "a module that died without a policy counts as failed"
    );
}

#[actix_rt::test]
async fn a_module_whose_restarts_are_used_up_has_failed() {
    let bus = Bus::new();
    let policy = RestartPolicy {
        max_restarts: Some(1),
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(1)),
    };
    bus.register_restartable(
        || {
            let mut p = Probe::new("fragile", "g");
            p.behaviour = Behaviour::PanicOnRequest;
            p
        },
        policy,
    )
    .unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    make_panic(&ep, "fragile").await;
    until(|| bus.module_stats("fragile").unwrap().restarts == 1).await;
    assert!(!bus.module_stats("fragile").unwrap().failed);
    make_panic(&ep, "fragile").await;
    until(|| bus.module_stats("fragile").unwrap().failed).await;
    assert_eq!(bus.module_stats("fragile").unwrap().restarts, 1);
}

#[actix_rt::test]
async fn modules_stopped_by_the_bus_have_not_failed() {
    let bus = Bus::new();
    bus.register(Probe::new("a", "g")).unwrap();
    bus.register(Probe::new("b", "g")).unwrap();
    bus.start().unwrap();
    bus.remove("a").await.unwrap();
    bus.shutdown().await;
    assert!(bus.stats().modules.iter().all(|m| !m.failed));
}

#[actix_rt::test]
async fn the_restart_backoff_grows_and_is_capped() {
    let p = RestartPolicy::default();
    assert_eq!(p.backoff(1), Duration::from_secs(1));
    assert_eq!(p.backoff(2), Duration::from_secs(2));
    assert_eq!(p.backoff(5), Duration::from_secs(16));
    assert_eq!(p.backoff(6), Duration::from_secs(30));
    assert_eq!(p.backoff(60), Duration::from_secs(30));
}

#[actix_rt::test]
async fn start_outside_an_actix_system_is_an_error() {
    let result = std::thread::spawn(|| {
        let bus = Bus::with_config(BusConfig::default());
        bus.start().err().map(|e| e.to_string())
    })
    .join()
    .unwrap();
    assert_eq!(
        result.as_deref(),
        Some("no actix system is running on this thread")
    );
}

#[actix_rt::test]
async fn messages_taken_in_a_batch_but_not_handled_survive_a_restart_in_order() {
    // The actor takes everything queued in one go; the panic on the first message must put
    // the rest back, in front of what arrives later, for the restarted instance.
    let bus = Bus::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let policy = RestartPolicy {
        max_restarts: Some(1),
        backoff: Backoff::new(Duration::from_millis(5), Duration::from_millis(5)),
    };
    bus.register_restartable(
        move || {
            let mut p = Probe::new("fragile", "g").with_seen(s.clone());
            p.behaviour = Behaviour::PanicOnRequest;
            p
        },
        policy,
    )
    .unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("x");
    make_panic(&ep, "fragile").await;
    for i in 0..10 {
        ep.send("fragile", numbered(0, i)).await.unwrap();
    }
    // Let the first instance take the batch and die, then queue more behind it.
    tokio::time::sleep(Duration::from_millis(1)).await;
    for i in 10..20 {
        ep.send("fragile", numbered(0, i)).await.unwrap();
    }
    until(|| seen.lock().unwrap().len() == 20).await;
    let order: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|m| number_of(m).1)
        .collect();
    assert_eq!(order, (0..20).collect::<Vec<_>>());
    assert_eq!(bus.module_stats("fragile").unwrap().depth, 0);
    bus.shutdown().await;
}
