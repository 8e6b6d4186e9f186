//! Sends, back-pressure and groups: a full mailbox makes `send`
//! wait and `try_send` fail, group sends keep order and reach each member once, membership may
//! change mid-send, and many senders into one full mailbox lose and duplicate nothing.

use std::time::Duration;

use crate::support::{Probe, number_of, numbered, until};
use beehive::{Bus, Error, Message};

#[actix_rt::test]
async fn a_send_to_a_full_mailbox_waits_and_try_send_fails_at_once() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("slow", "g", 2).unwrap();
    let ep = bus.endpoint("x");
    ep.send("slow", numbered(0, 0)).await.unwrap();
    ep.send("slow", numbered(0, 1)).await.unwrap();
    let err = ep.try_send("slow", numbered(0, 2)).unwrap_err();
    assert!(matches!(err, Error::MailboxFull { .. }), "{err}");
    assert_eq!(
        number_of(&err.into_message().unwrap()),
        (0, 2),
        "handed back"
    );

    let blocked = ep.send("slow", numbered(0, 3));
    tokio::pin!(blocked);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut blocked)
            .await
            .is_err(),
        "a plain send waits while the mailbox is full"
    );
    assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, 0));
    blocked.await.unwrap();
    assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, 1));
    assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, 3));
}

#[actix_rt::test]
async fn the_1025th_message_does_not_get_into_a_default_mailbox_even_with_many_senders() {
    let bus = Bus::new();
    let _never_read = bus.register_inbox("stuck", "g", 0).unwrap();
    // Many cloned endpoints: with actix's futures-mpsc each clone could push one extra.
    let senders: Vec<_> = (0..64).map(|i| bus.endpoint(&format!("s{i}"))).collect();
    let mut accepted = 0;
    for i in 0..1024 {
        senders[i % 64]
            .try_send("stuck", numbered(i % 64, i))
            .unwrap();
        accepted += 1;
    }
    for s in &senders {
        assert!(matches!(
            s.try_send("stuck", Message::new()),
            Err(Error::MailboxFull { .. })
        ));
        assert!(
            tokio::time::timeout(Duration::from_millis(2), s.send("stuck", Message::new()))
                .await
                .is_err()
        );
    }
    assert_eq!(accepted, 1024);
    assert_eq!(bus.module_stats("stuck").unwrap().depth, 1024);
    assert_eq!(bus.module_stats("stuck").unwrap().rejected_full, 64);
}

#[actix_rt::test]
async fn slots_come_back_in_chunks_but_all_once_the_receiver_has_taken_everything() {
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("busy", "g", 1024).unwrap();
    let ep = bus.endpoint("x");
    let depth = || bus.module_stats("busy").unwrap().depth;
    for i in 0..1024 {
        ep.try_send("busy", numbered(0, i)).unwrap();
    }
    // One message out of a full mailbox: it no longer counts as queued, but its slot waits
    // for the rest of its chunk, so the mailbox still takes nothing.
    assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, 0));
    assert_eq!(depth(), 1023);
    assert!(matches!(
        ep.try_send("busy", Message::new()),
        Err(Error::MailboxFull { .. })
    ));
    // A full chunk (64 messages) frees 64 slots, and no more.
    for i in 1..64 {
        assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, i));
    }
    assert_eq!(depth(), 960);
    for i in 0..64 {
        ep.try_send("busy", numbered(1, i)).unwrap();
    }
    assert!(matches!(
        ep.try_send("busy", Message::new()),
        Err(Error::MailboxFull { .. })
    ));
    for _ in 0..960 + 64 {
        inbox.recv().await.unwrap();
    }
    // A batch smaller than a chunk: its slots come back when its last message is taken.
    for i in 0..5 {
        ep.try_send("busy", numbered(2, i)).unwrap();
    }
    for i in 0..5 {
        assert_eq!(number_of(&inbox.recv().await.unwrap()), (2, i));
    }
    assert_eq!(depth(), 0);
    for i in 0..1024 {
        ep.try_send("busy", numbered(3, i)).unwrap();
    }
    assert_eq!(depth(), 1024);
}

#[actix_rt::test]
async fn the_capacity_is_configurable_per_module() {
    let bus = Bus::new();
    let mut probe = Probe::new("small", "g");
    probe.capacity = 3;
    bus.register(probe).unwrap(); // not started: nothing drains it
    let ep = bus.endpoint("x");
    for _ in 0..3 {
        ep.try_send("small", Message::new()).unwrap();
    }
    assert!(matches!(
        ep.try_send("small", Message::new()),
        Err(Error::MailboxFull { .. })
    ));
    assert_eq!(bus.module_stats("small").unwrap().capacity, 3);
}

#[actix_rt::test]
async fn many_senders_into_one_full_mailbox_lose_nothing_and_keep_their_order() {
    const SENDERS: usize = 16;
    const EACH: usize = 2_000;
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("sink", "g", 8).unwrap();
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let ep = bus.endpoint(&format!("sender-{s}"));
        tasks.push(actix_rt::spawn(async move {
            for i in 0..EACH {
                ep.send("sink", numbered(s, i)).await.unwrap();
            }
        }));
    }
    let mut next = [0usize; SENDERS];
    for _ in 0..SENDERS * EACH {
        let (s, i) = number_of(&inbox.recv().await.unwrap());
        assert_eq!(i, next[s], "sender {s} out of order or duplicated");
        next[s] += 1;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(next.iter().all(|n| *n == EACH));
    assert!(inbox.try_recv().is_none(), "nothing extra");
}

#[actix_rt::test]
async fn many_senders_on_many_threads_lose_nothing() {
    const SENDERS: usize = 4;
    const EACH: usize = 5_000;
    let bus = Bus::new();
    let mut inbox = bus.register_inbox("sink", "g", 16).unwrap();
    let mut threads = Vec::new();
    for s in 0..SENDERS {
        let ep = bus.endpoint(&format!("t{s}"));
        threads.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for i in 0..EACH {
                    ep.send("sink", numbered(s, i)).await.unwrap();
                }
            });
        }));
    }
    let mut next = [0usize; SENDERS];
    for _ in 0..SENDERS * EACH {
        let (s, i) = number_of(&inbox.recv().await.unwrap());
        assert_eq!(i, next[s]);
        next[s] += 1;
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[actix_rt::test]
async fn a_sender_blocked_on_a_full_mailbox_gets_an_error_when_the_target_stops() {
    let bus = Bus::new();
    let mut probe = Probe::new("target", "g");
    probe.capacity = 1;
    bus.register(probe).unwrap(); // never started: the mailbox stays full
    let ep = bus.endpoint("x");
    ep.send("target", Message::new()).await.unwrap();
    let ep2 = ep.clone();
    let blocked = actix_rt::spawn(async move { ep2.send("target", numbered(0, 9)).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    bus.remove("target").await.unwrap();
    let err = blocked.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::Stopped { .. }),
        "not a false success: {err}"
    );
    assert_eq!(number_of(&err.into_message().unwrap()), (0, 9));
}

#[actix_rt::test]
async fn a_group_send_reaches_every_member_exactly_once() {
    let bus = Bus::new();
    let mut inboxes: Vec<_> = (0..5)
        .map(|i| bus.register_inbox(&format!("m{i}"), "ctl", 0).unwrap())
        .collect();
    let _other = bus.register_inbox("outsider", "other", 0).unwrap();
    let ep = bus.endpoint("hub");
    let msg = Message::new();
    assert_eq!(ep.send_to_group("ctl", msg.clone()).await.unwrap(), 5);
    for inbox in &mut inboxes {
        assert_eq!(inbox.recv().await.unwrap().header.id, msg.header.id);
        assert!(inbox.try_recv().is_none());
    }
}

#[actix_rt::test]
async fn a_group_send_to_an_unknown_or_empty_group_errors() {
    let bus = Bus::new();
    let ep = bus.endpoint("hub");
    let err = ep
        .send_to_group("nobody", numbered(1, 1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EmptyGroup { .. }), "{err}");
    assert_eq!(number_of(&err.into_message().unwrap()), (1, 1));
    let _a = bus.register_inbox("a", "g", 0).unwrap();
    bus.leave_group("a", "g");
    assert!(matches!(
        ep.send_to_group("g", Message::new()).await,
        Err(Error::EmptyGroup { .. })
    ));
}

#[actix_rt::test]
async fn group_sends_from_one_sender_keep_their_order_at_every_member() {
    let bus = Bus::new();
    let mut inboxes: Vec<_> = (0..4)
        .map(|i| bus.register_inbox(&format!("m{i}"), "g", 4).unwrap())
        .collect();
    let ep = bus.endpoint("hub");
    let sender = actix_rt::spawn(async move {
        for i in 0..2_000 {
            ep.send_to_group("g", numbered(0, i)).await.unwrap();
        }
    });
    for i in 0..2_000 {
        for inbox in &mut inboxes {
            assert_eq!(number_of(&inbox.recv().await.unwrap()).1, i);
        }
    }
    sender.await.unwrap();
}

#[actix_rt::test]
async fn a_full_group_member_back_pressures_without_growing_and_others_still_receive() {
    let bus = Bus::new();
    let _full = bus.register_inbox("full", "g", 2).unwrap(); // never read
    let mut fast = bus.register_inbox("fast", "g", 1024).unwrap();
    let ep = bus.endpoint("hub");
    ep.send_to_group("g", numbered(0, 0)).await.unwrap();
    ep.send_to_group("g", numbered(0, 1)).await.unwrap();
    // The third cannot get into "full": the send waits, but "fast" already has it.
    let third = tokio::time::timeout(
        Duration::from_millis(50),
        ep.send_to_group("g", numbered(0, 2)),
    )
    .await;
    assert!(
        third.is_err(),
        "the sender is back-pressured by the full member"
    );
    for i in 0..3 {
        assert_eq!(number_of(&fast.recv().await.unwrap()).1, i);
    }
    // Nothing was queued on the side: no task or buffer grows per send.
    assert_eq!(bus.module_stats("full").unwrap().depth, 2);
    for _ in 0..100 {
        let _ = tokio::time::timeout(
            Duration::from_micros(10),
            ep.send_to_group("g", Message::new()),
        )
        .await;
    }
    assert_eq!(bus.module_stats("full").unwrap().depth, 2);
    assert_eq!(bus.stats().pending_sync, 0);
}

#[actix_rt::test]
async fn changing_group_membership_during_group_sends_is_safe() {
    let bus = Bus::new();
    let mut inboxes = Vec::new();
    for i in 0..8 {
        inboxes.push(bus.register_inbox(&format!("m{i}"), "g", 100_000).unwrap());
    }
    let ep = bus.endpoint("hub");
    let sender = actix_rt::spawn(async move {
        let mut delivered = 0;
        for _ in 0..5_000 {
            delivered += ep.send_to_group("g", Message::new()).await.unwrap_or(0);
            tokio::task::yield_now().await;
        }
        delivered
    });
    for round in 0..500 {
        let m = format!("m{}", round % 8);
        bus.leave_group(&m, "g");
        tokio::task::yield_now().await;
        bus.join_group(&m, "g").unwrap();
    }
    let delivered = sender.await.unwrap();
    let received: usize = inboxes.iter().map(|i| i.len()).sum();
    assert_eq!(received, delivered, "every reported delivery arrived");
}

#[actix_rt::test]
async fn sends_to_unknown_modules_fail_visibly() {
    let bus = Bus::new();
    let ep = bus.endpoint("x");
    let err = ep.send("ghost", numbered(3, 4)).await.unwrap_err();
    assert_eq!(err.to_string(), "module \"ghost\" is not registered");
    assert_eq!(number_of(&err.into_message().unwrap()), (3, 4));
    assert!(matches!(
        ep.try_send("ghost", Message::new()),
        Err(Error::UnknownModule { .. })
    ));
}

#[actix_rt::test]
async fn actor_modules_receive_group_sends_too() {
    let bus = Bus::new();
    let a = Probe::new("a", "controllers");
    let b = Probe::new("b", "controllers");
    let (sa, sb) = (a.seen.clone(), b.seen.clone());
    bus.register(a).unwrap();
    bus.register(b).unwrap();
    bus.start().unwrap();
    let ep = bus.endpoint("hub");
    for i in 0..100 {
        ep.send_to_group("controllers", numbered(0, i))
            .await
            .unwrap();
    }
    until(|| sa.lock().unwrap().len() == 100 && sb.lock().unwrap().len() == 100).await;
    bus.shutdown().await;
}

/// The result of a spawned send, which must finish soon.
async fn woken<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the blocked sender is woken")
        .unwrap()
}

/// issue 18: a sender blocked on the full mailbox of an inbox nobody reads is woken by
/// shutdown with `Stopped`, the message handed back (as for actor mailboxes).
#[actix_rt::test]
async fn senders_blocked_on_an_unread_inbox_are_woken_by_shutdown() {
    let bus = Bus::new();
    let _never_read = bus.register_inbox("stuck", "stuck", 1).unwrap();
    let ep = bus.endpoint("x");
    ep.send("stuck", numbered(0, 0)).await.unwrap();
    let plain = actix_rt::spawn({
        let ep = ep.clone();
        async move { ep.send("stuck", numbered(0, 1)).await }
    });
    let sync = actix_rt::spawn({
        let ep = ep.clone();
        async move {
            ep.send_sync("stuck", numbered(0, 2), Duration::from_secs(30))
                .await
        }
    });
    let group = actix_rt::spawn({
        let ep = ep.clone();
        async move { ep.send_to_group("stuck", numbered(0, 3)).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!plain.is_finished() && !sync.is_finished() && !group.is_finished());
    tokio::time::timeout(Duration::from_secs(2), bus.shutdown())
        .await
        .expect("shutdown does not wait for an inbox");

    let err = woken(plain).await.unwrap_err();
    assert!(matches!(err, Error::Stopped { .. }), "{err}");
    assert_eq!(number_of(&err.into_message().unwrap()), (0, 1));
    let err = woken(sync).await.unwrap_err();
    assert!(matches!(err, Error::Stopped { .. }), "{err}");
    // The group send skips the stopped member: nobody got it.
    let delivered = woken(group).await.unwrap();
    assert_eq!(delivered, 0);
}

/// issue 18: the same for `remove`.
#[actix_rt::test]
async fn senders_blocked_on_an_unread_inbox_are_woken_by_remove() {
    let bus = Bus::new();
    let _never_read = bus.register_inbox("stuck", "g", 1).unwrap();
    let ep = bus.endpoint("x");
    ep.send("stuck", numbered(0, 0)).await.unwrap();
    let blocked = actix_rt::spawn({
        let ep = ep.clone();
        async move { ep.send("stuck", numbered(0, 1)).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!blocked.is_finished());
    bus.remove("stuck").await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(2), blocked)
        .await
        .expect("the blocked sender is woken")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Stopped { .. }), "{err}");
    assert_eq!(number_of(&err.into_message().unwrap()), (0, 1));
}

/// issue 18: a group send with a deadline says who got the message; members still full at
/// the deadline do not get it, then or later, so resending to exactly those is safe.
#[actix_rt::test]
async fn a_group_send_within_a_deadline_reports_who_got_it() {
    let bus = Bus::new();
    let mut a = bus.register_inbox("a", "g", 1).unwrap();
    let mut b = bus.register_inbox("b", "g", 1).unwrap();
    let mut c = bus.register_inbox("c", "g", 1).unwrap();
    let mut d = bus.register_inbox("d", "g", 1).unwrap();
    let ep = bus.endpoint("x");
    for full in ["a", "c", "d"] {
        ep.send(full, numbered(9, 0)).await.unwrap();
    }
    // `c` makes room while the group send waits; `a` and `d` stay full.
    let reader = actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let first = c.recv().await.unwrap();
        (c, first)
    });
    let got = ep
        .send_to_group_within("g", numbered(0, 1), Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(got.delivered, ["b", "c"]);
    assert_eq!(got.timed_out, ["a", "d"]);
    assert!(got.refused.is_empty());
    assert!(!got.is_complete());

    let (mut c, first) = reader.await.unwrap();
    assert_eq!(number_of(&first), (9, 0));
    assert_eq!(number_of(&c.recv().await.unwrap()), (0, 1));
    assert_eq!(number_of(&b.recv().await.unwrap()), (0, 1));
    // The timed-out members only have what they had; a resend reaches each once.
    for (name, inbox) in [("a", &mut a), ("d", &mut d)] {
        assert_eq!(number_of(&inbox.recv().await.unwrap()), (9, 0));
        assert!(
            inbox.try_recv().is_none(),
            "{name} never got the group message"
        );
        ep.send(name, numbered(0, 1)).await.unwrap();
        assert_eq!(number_of(&inbox.recv().await.unwrap()), (0, 1));
    }
    assert_eq!(
        bus.module_stats("x").unwrap().sent,
        3 + 2 + 2,
        "fills, group deliveries, resends"
    );

    let err = ep
        .send_to_group_within("nobody", numbered(0, 2), Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EmptyGroup { .. }), "{err}");
}

/// issue 18, documented semantics: a plain group send cancelled while it waits for a full
/// member leaves the message with the members that had room and the full members before the
/// one it waited for, in member order — and with no one else.
#[actix_rt::test]
async fn a_cancelled_group_send_has_delivered_a_member_order_prefix_of_the_full_ones() {
    let bus = Bus::new();
    let mut inboxes: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| bus.register_inbox(n, "g", 1).unwrap())
        .collect();
    let ep = bus.endpoint("x");
    // b and c are full; a and d have room.
    ep.send("b", numbered(9, 0)).await.unwrap();
    ep.send("c", numbered(9, 0)).await.unwrap();
    let send = ep.send_to_group("g", numbered(0, 1));
    assert!(
        tokio::time::timeout(Duration::from_millis(30), send)
            .await
            .is_err(),
        "waits for b"
    );
    let got: Vec<Vec<(usize, usize)>> = inboxes
        .iter_mut()
        .map(|i| {
            std::iter::from_fn(|| i.try_recv())
                .map(|m| number_of(&m))
                .collect()
        })
        .collect();
    assert_eq!(got[0], [(0, 1)], "a had room");
    assert_eq!(got[1], [(9, 0)], "b was being waited for: not delivered");
    assert_eq!(got[2], [(9, 0)], "c comes after b: not delivered");
    assert_eq!(got[3], [(0, 1)], "d had room");
}
