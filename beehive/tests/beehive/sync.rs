//! Sync request/response through the waiter table: every caller gets its
//! own answer, late answers are dropped and counted, duplicate ids refused, and shutdown wakes
//! every waiter.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::{Probe, until};
use beehive::{Bus, Content, Error, Message, RespOutcome};

#[actix_rt::test]
async fn send_sync_returns_the_response_to_this_request_and_delivers_sync_true() {
    let bus = Bus::new();
    let probe = Probe::new("meta", "meta").answering(bus.endpoint("meta"));
    let seen = probe.seen.clone();
    bus.register(probe).unwrap();
    bus.start().unwrap();
    let req = Message::new().with_route("edged", "meta", "default/pod/p", "query");
    let resp = bus
        .endpoint("edged")
        .send_sync("meta", req.clone(), Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(resp.header.parent_id, req.header.id);
    assert_eq!(resp.content.as_string().as_deref(), Some("meta"));
    assert!(
        seen.lock().unwrap()[0].header.sync,
        "the delivered copy is marked sync"
    );
    assert!(!req.header.sync, "the caller's value is untouched");
    bus.shutdown().await;
}

#[actix_rt::test]
async fn send_sync_to_an_unknown_or_stopped_module_errors_at_once() {
    let bus = Bus::new();
    let ep = bus.endpoint("x");
    let start = Instant::now();
    assert!(matches!(
        ep.send_sync("ghost", Message::new(), Duration::from_secs(5))
            .await,
        Err(Error::UnknownModule { .. })
    ));
    let _inbox = bus.register_inbox("gone", "g", 0).unwrap();
    bus.remove("gone").await.unwrap();
    assert!(matches!(
        ep.send_sync("gone", Message::new(), Duration::from_secs(5))
            .await,
        Err(Error::UnknownModule { .. })
    ));
    let mut p = Probe::new("off", "g");
    p.enabled = false;
    bus.register(p).unwrap();
    assert!(matches!(
        ep.send_sync("off", Message::new(), Duration::from_secs(5))
            .await,
        Err(Error::ModuleDisabled { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[actix_rt::test]
async fn a_late_answer_is_dropped_counted_and_never_reaches_another_waiter() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("slow", "g", 0).unwrap();
    let caller = bus.endpoint("caller");
    let first = Message::new();
    let err = caller
        .send_sync("slow", first.clone(), Duration::from_millis(30))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ResponseTimeout { ref id, .. } if *id == first.header.id),
        "{err}"
    );

    // A second request is waiting when the late answer to the first arrives.
    let second = Message::new();
    let c2 = caller.clone();
    let s2 = second.clone();
    let waiting =
        actix_rt::spawn(async move { c2.send_sync("slow", s2, Duration::from_secs(2)).await });
    let req1 = inbox.recv().await.unwrap();
    let req2 = inbox.recv().await.unwrap();
    assert_eq!(req2.header.id, second.header.id);
    let responder = bus.endpoint("slow");
    assert_eq!(
        responder.send_resp(req1.response(Content::string("late"))),
        RespOutcome::Late
    );
    assert_eq!(
        responder.send_resp(req2.response(Content::string("right"))),
        RespOutcome::Delivered
    );
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.content.as_string().as_deref(), Some("right"));
    let stats = bus.module_stats("caller").unwrap();
    assert_eq!((stats.sync_timeouts, stats.late_responses), (1, 1));
}

#[actix_rt::test]
async fn a_zero_timeout_means_the_30s_default() {
    tokio::time::pause();
    let bus = Bus::new();
    let _inbox = bus.register_inbox("silent", "g", 0).unwrap();
    let start = tokio::time::Instant::now();
    let err = bus
        .endpoint("x")
        .send_sync("silent", Message::new(), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ResponseTimeout { timeout, .. } if timeout == Duration::from_secs(30))
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "{waited:?}"
    );
}

#[actix_rt::test]
async fn send_sync_to_a_full_mailbox_fails_with_an_enqueue_timeout_and_never_lands() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("full", "g", 1).unwrap();
    let ep = bus.endpoint("x");
    ep.send(
        "full",
        Message::new().with_content(Content::string("filler")),
    )
    .await
    .unwrap();
    let req = Message::new();
    let err = ep
        .send_sync("full", req.clone(), Duration::from_millis(30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EnqueueTimeout { .. }), "{err}");
    assert_eq!(
        inbox.recv().await.unwrap().content.as_string().as_deref(),
        Some("filler")
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        inbox.try_recv().is_none(),
        "the timed-out request must not land later"
    );
}

#[actix_rt::test]
async fn a_synchronous_responder_never_loses_an_answer_in_100k_calls() {
    let bus = Bus::new();
    bus.register(Probe::new("meta", "meta").answering(bus.endpoint("meta")))
        .unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("edged");
    for i in 0..100_000 {
        let req = Message::new();
        let resp = ep
            .send_sync("meta", req.clone(), Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(resp.header.parent_id, req.header.id);
    }
    assert_eq!(bus.module_stats("edged").unwrap().sync_timeouts, 0);
    bus.shutdown().await;
}

#[actix_rt::test]
async fn send_resp_for_an_unknown_parent_is_dropped_and_counted() {
    let bus = Bus::new();
    let ep = bus.endpoint("x");
    let stray = Message::with_parent("no-such-request");
    assert_eq!(ep.send_resp(stray), RespOutcome::Unmatched);
    assert_eq!(
        ep.send_resp(Message::new()),
        RespOutcome::Unmatched,
        "no parent id at all"
    );
    assert_eq!(bus.stats().unmatched_responses, 2);
}

#[actix_rt::test]
async fn concurrent_sync_calls_to_one_module_each_get_their_own_answer() {
    let bus = Bus::new();
    bus.register(Probe::new("meta", "meta").answering(bus.endpoint("meta")))
        .unwrap();
    bus.start().unwrap();
    let (a, b) = (Message::new(), Message::new());
    let ep = bus.endpoint("x");
    let (ra, rb) = tokio::join!(
        ep.send_sync("meta", a.clone(), Duration::from_secs(2)),
        ep.send_sync("meta", b.clone(), Duration::from_secs(2))
    );
    assert_eq!(ra.unwrap().header.parent_id, a.header.id);
    assert_eq!(rb.unwrap().header.parent_id, b.header.id);
    bus.shutdown().await;
}

#[actix_rt::test]
async fn ten_thousand_concurrent_calls_answered_in_random_order_all_match() {
    const N: usize = 10_000;
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("meta", "meta", N).unwrap();
    let responder = bus.endpoint("meta");
    let answerer = actix_rt::spawn(async move {
        let mut pending = Vec::with_capacity(N);
        for _ in 0..N {
            pending.push(inbox.recv().await.unwrap());
        }
        // A deterministic shuffle (xorshift) of the answer order.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for i in (1..pending.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            pending.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for req in pending {
            let body = req.header.id.to_string();
            responder.send_resp(req.response(Content::string(body)));
        }
    });
    let ep = bus.endpoint("callers");
    let mut calls = Vec::with_capacity(N);
    for _ in 0..N {
        let ep = ep.clone();
        calls.push(actix_rt::spawn(async move {
            let req = Message::new();
            let resp = ep
                .send_sync("meta", req.clone(), Duration::from_secs(30))
                .await
                .unwrap();
            assert_eq!(resp.header.parent_id, req.header.id);
            assert_eq!(resp.content.as_string().unwrap(), req.header.id);
        }));
    }
    for c in calls {
        c.await.unwrap();
    }
    answerer.await.unwrap();
    assert_eq!(bus.stats().pending_sync, 0);
}

#[actix_rt::test]
async fn a_duplicate_in_flight_id_is_refused_and_an_empty_id_is_never_a_key() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("meta", "g", 0).unwrap();
    let ep = bus.endpoint("x");
    let req = Message::new();
    let ep1 = ep.clone();
    let r1 = req.clone();
    let first =
        actix_rt::spawn(async move { ep1.send_sync("meta", r1, Duration::from_secs(2)).await });
    let delivered = inbox.recv().await.unwrap();
    let err = ep
        .send_sync("meta", req.clone(), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateMessageId(_)), "{err}");
    bus.endpoint("meta")
        .send_resp(delivered.response(Content::null()));
    assert!(
        first.await.unwrap().is_ok(),
        "the first waiter still gets its answer"
    );

    let mut empty = Message::new();
    empty.header.id = beehive::Id::EMPTY;
    assert!(matches!(
        ep.send_sync("meta", empty, Duration::from_secs(1)).await,
        Err(Error::EmptyMessageId)
    ));
    assert!(
        inbox.try_recv().is_none(),
        "a refused request is not delivered"
    );
}

#[actix_rt::test]
async fn a_response_from_another_module_completes_the_waiter() {
    let bus = Bus::new();
    let mut hub = bus.register_inbox("cloudhub", "cloudhub", 0).unwrap();
    let ep = bus.endpoint("csi");
    let req = Message::new().with_route(
        "cloudhub",
        "resource",
        "node/e1/ns/volume/v1",
        "createvolume",
    );
    let relay = bus.endpoint("relay-from-edge");
    actix_rt::spawn(async move {
        let r = hub.recv().await.unwrap();
        // The answer comes from the edge, relayed by a module that is not the destination.
        relay.send_resp(r.response(Content::string("created")));
    });
    let resp = ep
        .send_sync("cloudhub", req, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(resp.content.as_string().as_deref(), Some("created"));
}

#[actix_rt::test]
async fn the_wire_type_field_does_not_decide_delivery() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("meta", "g", 0).unwrap();
    let ep = bus.endpoint("x");
    let responder = bus.endpoint("meta");
    actix_rt::spawn(async move {
        let r = inbox.recv().await.unwrap();
        let mut resp = r.response(Content::null());
        resp.header.message_type = "unixpacket-or-anything".into();
        responder.send_resp(resp);
    });
    assert!(
        ep.send_sync("meta", Message::new(), Duration::from_secs(2))
            .await
            .is_ok()
    );
}

fn members(bus: &Bus, n: usize, group: &str) {
    for i in 0..n {
        let name = format!("m{i}");
        bus.register(Probe::new(&name, group).answering(bus.endpoint(&name)))
            .unwrap();
    }
}

#[actix_rt::test]
async fn group_send_sync_returns_once_every_member_answered() {
    let bus = Bus::new();
    members(&bus, 3, "ctl");
    bus.start().unwrap();
    let req = Message::new();
    let answers = bus
        .endpoint("hub")
        .send_to_group_sync("ctl", req.clone(), Duration::from_secs(2))
        .await
        .unwrap();
    let who: HashSet<String> = answers.iter().map(|(m, _)| m.clone()).collect();
    assert_eq!(who, HashSet::from(["m0".into(), "m1".into(), "m2".into()]));
    assert!(
        answers
            .iter()
            .all(|(m, r)| r.header.parent_id == req.header.id
                && r.content.as_string().as_deref() == Some(m))
    );
    bus.shutdown().await;
}

#[actix_rt::test]
async fn group_send_sync_with_a_silent_member_times_out_naming_who_answered() {
    let bus = Bus::new();
    members(&bus, 2, "ctl");
    bus.register(Probe::new("mute", "ctl")).unwrap();
    bus.start().unwrap();
    let err = bus
        .endpoint("hub")
        .send_to_group_sync("ctl", Message::new(), Duration::from_millis(100))
        .await
        .unwrap_err();
    match err {
        Error::GroupTimeout {
            answered, missing, ..
        } => {
            let mut who: Vec<_> = answered.into_iter().map(|(m, _)| m).collect();
            who.sort();
            assert_eq!(who, vec!["m0", "m1"]);
            assert_eq!(missing, vec!["mute"]);
        }
        other => panic!("expected a group timeout, got {other}"),
    }
    bus.shutdown().await;
}

#[actix_rt::test]
async fn a_double_answer_does_not_stand_in_for_a_silent_member() {
    let bus = Bus::new();
    let mut a = bus.register_inbox("a", "g", 0).unwrap();
    let _b = bus.register_inbox("b", "g", 0).unwrap();
    let responder_a = bus.endpoint("a");
    actix_rt::spawn(async move {
        let r = a.recv().await.unwrap();
        assert_eq!(
            responder_a.send_resp(r.response(Content::null())),
            RespOutcome::Delivered
        );
        assert_eq!(
            responder_a.send_resp(r.response(Content::null())),
            RespOutcome::Unmatched
        );
    });
    let err = bus
        .endpoint("hub")
        .send_to_group_sync("g", Message::new(), Duration::from_millis(80))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::GroupTimeout { ref missing, .. } if missing == &vec!["b".to_string()]),
        "{err}"
    );
}

/// The wait ends on the last answer, not on a poll (Go's group sync polls every 20 ms). Measured
/// on tokio's paused clock: it moves only when every task waits for a timer, so a poll of any
/// period shows as that period, an answer-driven return as none, whatever the machine's load.
#[actix_rt::test]
async fn group_send_sync_returns_promptly_after_the_last_answer() {
    tokio::time::pause();
    let bus = Bus::new();
    let mut inboxes: Vec<_> = (0..3)
        .map(|i| bus.register_inbox(&format!("m{i}"), "g", 0).unwrap())
        .collect();
    let responders: Vec<_> = (0..3).map(|i| bus.endpoint(&format!("m{i}"))).collect();
    let last_answer = std::rc::Rc::new(std::cell::Cell::new(None::<tokio::time::Instant>));
    let stamp = last_answer.clone();
    actix_rt::spawn(async move {
        let mut reqs = Vec::new();
        for inbox in &mut inboxes {
            reqs.push(inbox.recv().await.unwrap());
        }
        // Answers a moment apart on the clock, as modules answer.
        for (req, ep) in reqs.iter().zip(&responders) {
            tokio::time::sleep(Duration::from_millis(7)).await;
            ep.send_resp(req.response(Content::null()));
        }
        stamp.set(Some(tokio::time::Instant::now()));
    });
    bus.endpoint("hub")
        .send_to_group_sync("g", Message::new(), Duration::from_secs(5))
        .await
        .unwrap();
    let lag = last_answer.get().expect("answered").elapsed();
    assert_eq!(
        lag,
        Duration::ZERO,
        "returned {lag:?} of clock time after the last answer"
    );
}

#[actix_rt::test]
async fn group_send_sync_to_an_empty_group_errors() {
    let bus = Bus::new();
    let err = bus
        .endpoint("hub")
        .send_to_group_sync("none", Message::new(), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EmptyGroup { .. }), "{err}");
}

#[actix_rt::test]
async fn shutdown_wakes_every_pending_sync_call_with_an_error() {
    let bus = Bus::new();
    let _inbox = bus.register_inbox("silent", "g", 0).unwrap();
    let _inbox2 = bus.register_inbox("silent2", "g", 0).unwrap();
    let mut calls = Vec::new();
    for _ in 0..50 {
        let ep = bus.endpoint("x");
        calls.push(actix_rt::spawn(async move {
            ep.send_sync("silent", Message::new(), Duration::from_secs(60))
                .await
        }));
    }
    let ep = bus.endpoint("x");
    let group = actix_rt::spawn(async move {
        ep.send_to_group_sync("g", Message::new(), Duration::from_secs(60))
            .await
    });
    until(|| bus.stats().pending_sync == 51).await;
    let start = Instant::now();
    bus.shutdown().await;
    for c in calls {
        assert!(matches!(
            c.await.unwrap(),
            Err(Error::Shutdown { message: None })
        ));
    }
    assert!(matches!(
        group.await.unwrap(),
        Err(Error::Shutdown { message: None })
    ));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "nobody is left hanging"
    );
}

#[actix_rt::test]
async fn many_sync_waiters_timing_out_at_once_do_not_leak_or_cross_answers() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("slow", "g", 2_000).unwrap();
    let mut calls = Vec::new();
    for _ in 0..1_000 {
        let ep = bus.endpoint("x");
        calls.push(actix_rt::spawn(async move {
            ep.send_sync("slow", Message::new(), Duration::from_millis(50))
                .await
        }));
    }
    for c in calls {
        assert!(matches!(
            c.await.unwrap(),
            Err(Error::ResponseTimeout { .. })
        ));
    }
    assert_eq!(bus.stats().pending_sync, 0);
    let responder = bus.endpoint("slow");
    let mut late = 0;
    while let Some(req) = inbox.try_recv() {
        if responder.send_resp(req.response(Content::null())) == RespOutcome::Late {
            late += 1;
        }
    }
    assert_eq!(late, 1_000);
    let stats = bus.module_stats("x").unwrap();
    assert_eq!((stats.sync_timeouts, stats.late_responses), (1_000, 1_000));
}

/// Polls `fut` once, with a waker that does nothing.
fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

#[actix_rt::test]
async fn a_cancelled_caller_frees_its_waiter_at_every_stage() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("silent", "g", 0).unwrap();
    let caller = bus.endpoint("caller");
    let responder = bus.endpoint("silent");

    // Dropped after its first poll (queued, the timer not armed yet), after its second (the
    // timer armed), and while waiting on the runtime under an outer timeout.
    for polls in [1, 2] {
        let req = Message::new();
        let mut call = Box::pin(caller.send_sync("silent", req.clone(), Duration::from_secs(60)));
        for _ in 0..polls {
            assert!(poll_once(call.as_mut()).is_pending());
        }
        assert!(caller.is_waiting(&req.header.id));
        assert_eq!(bus.stats().pending_sync, 1);
        drop(call);
        assert!(!caller.is_waiting(&req.header.id), "after {polls} polls");
        assert_eq!(bus.stats().pending_sync, 0, "after {polls} polls");
        let delivered = inbox.recv().await.unwrap();
        assert_eq!(
            responder.send_resp(delivered.response(Content::null())),
            RespOutcome::Unmatched,
            "nobody waits for it any more"
        );
    }
    let req = Message::new();
    let outer = tokio::time::timeout(
        Duration::from_millis(20),
        caller.send_sync("silent", req.clone(), Duration::from_secs(60)),
    )
    .await;
    assert!(outer.is_err(), "cancelled by the outer timeout");
    assert_eq!(bus.stats().pending_sync, 0);
    inbox.recv().await.unwrap();

    let stats = bus.module_stats("caller").unwrap();
    assert_eq!((stats.sync_timeouts, stats.late_responses), (0, 0));
    assert_eq!(bus.stats().unmatched_responses, 2);
}

#[actix_rt::test]
async fn a_timeout_never_fires_before_its_time_on_the_real_clock() {
    let bus = Bus::new();
    let _inbox = bus.register_inbox("silent", "g", 0).unwrap();
    let caller = bus.endpoint("caller");
    for millis in [1, 30, 120] {
        let timeout = Duration::from_millis(millis);
        let start = Instant::now();
        let err = caller
            .send_sync("silent", Message::new(), timeout)
            .await
            .unwrap_err();
        let waited = start.elapsed();
        assert!(matches!(err, Error::ResponseTimeout { .. }), "{err}");
        assert!(waited >= timeout, "{waited:?} < {timeout:?}");
    }
    assert_eq!(bus.module_stats("caller").unwrap().sync_timeouts, 3);
    assert_eq!(bus.stats().pending_sync, 0);
}

#[actix_rt::test]
async fn an_answer_after_several_rounds_or_from_another_thread_reaches_its_caller() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("meta", "g", 0).unwrap();
    let responder = bus.endpoint("meta");
    let (to_thread, requests) = std::sync::mpsc::channel::<Message>();
    // Answers from a thread of its own, a little later: the caller has armed its timer by then.
    let answering = std::thread::spawn(move || {
        for req in requests {
            std::thread::sleep(Duration::from_millis(5));
            responder.send_resp(req.response(Content::string("from a thread")));
        }
    });
    let relay = actix_rt::spawn(async move {
        while let Ok(req) = inbox.recv().await {
            // Some rounds of the local scheduler pass before the request leaves.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            to_thread.send(req).unwrap();
        }
    });
    let caller = bus.endpoint("caller");
    for _ in 0..20 {
        let req = Message::new();
        let resp = caller
            .send_sync("meta", req.clone(), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(resp.header.parent_id, req.header.id);
        assert_eq!(resp.content.as_string().as_deref(), Some("from a thread"));
    }
    let stats = bus.module_stats("caller").unwrap();
    assert_eq!((stats.sync_completed, stats.sync_timeouts), (20, 0));
    assert_eq!(bus.stats().pending_sync, 0);
    // The relay ends with the inbox, and the thread with the relay's channel.
    bus.shutdown().await;
    relay.await.unwrap();
    answering.join().unwrap();
}
