//! The floor under the mailbox bench: what moving and dropping the bench's messages costs on
//! one thread with no bus at all.
//!
//! `cargo bench -p beehive --bench message_floor` builds 1,000,000 messages as
//! `benches/mailbox.rs` does (≈100 bytes of shared content, a UUID id and four short route
//! strings each), then times, per message:
//! * `drop`: dropping them in order (releasing what each message holds);
//! * `queue+drop`: pushing them into a `VecDeque`, swapping it out every 1024 messages as the
//!   mailbox's receiver does, and dropping each one taken out;
//! * `queue, no free`: the same, but leaking each message instead of dropping it (the cost of
//!   the moves alone);
//! * `2 threads`: pushed from this thread into a queue of at most 1024 under a lock, which a
//!   second thread swaps out whole and drops (the mailbox's scheme); both spin instead of
//!   sleeping, so no wake-up is ever paid, and each message crosses between cores.
//!
//! No bus can hand these messages to a module faster than `queue+drop` on one thread, or than
//! `2 threads` when sender and module run on different cores.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use beehive::{Content, Message};

const N: usize = 1_000_000;
const RUNS: usize = 5;

fn messages() -> Vec<Message> {
    let body = Content::string("x".repeat(98));
    (0..N)
        .map(|i| {
            let mut m = Message::new()
                .with_route("bench", "resource", "node/n/default/pod/p", "update")
                .with_content(body.clone());
            m.header.timestamp = i as i64;
            m
        })
        .collect()
}

/// Median messages per second of `RUNS` runs of `work` over fresh messages.
fn rate(work: impl Fn(Vec<Message>) -> i64) -> f64 {
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| {
            let msgs = messages();
            let start = Instant::now();
            std::hint::black_box(work(msgs));
            N as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

fn through_queue(msgs: Vec<Message>, free: bool) -> i64 {
    let mut queue = VecDeque::new();
    let mut batch = VecDeque::new();
    let mut sum = 0;
    let mut take = |batch: &mut VecDeque<Message>| {
        while let Some(m) = batch.pop_front() {
            let m = std::hint::black_box(m);
            sum += m.header.timestamp;
            if !free {
                std::mem::forget(m);
            }
        }
    };
    for m in msgs {
        queue.push_back(m);
        if queue.len() == 1024 {
            std::mem::swap(&mut queue, &mut batch);
            take(&mut batch);
        }
    }
    take(&mut queue);
    sum
}

fn across_threads(msgs: Vec<Message>) -> i64 {
    let queue = Arc::new(Mutex::new(VecDeque::<Message>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (queue, done) = (queue.clone(), done.clone());
        std::thread::spawn(move || {
            let mut batch = VecDeque::new();
            let mut sum = 0;
            loop {
                // Read before taking the batch: once it is set, this batch holds the last ones.
                let finished = done.load(Ordering::Acquire);
                std::mem::swap(&mut *queue.lock().unwrap(), &mut batch);
                if batch.is_empty() {
                    if finished {
                        return sum;
                    }
                    std::hint::spin_loop();
                }
                sum += batch.drain(..).map(|m| m.header.timestamp).sum::<i64>();
            }
        })
    };
    for m in msgs {
        let mut m = Some(m);
        while let Some(message) = m.take() {
            let mut q = queue.lock().unwrap();
            if q.len() < 1024 {
                q.push_back(message);
            } else {
                drop(q);
                m = Some(message);
                std::hint::spin_loop();
            }
        }
    }
    done.store(true, Ordering::Release);
    receiver.join().unwrap_or_default()
}

#[allow(clippy::print_stdout)] // a bench reports on stdout
fn main() {
    println!("Message: {} bytes", std::mem::size_of::<Message>());
    let drop_only = rate(|msgs| msgs.into_iter().map(|m| m.header.timestamp).sum());
    let queue_drop = rate(|msgs| through_queue(msgs, true));
    let queue_leak = rate(|msgs| through_queue(msgs, false));
    let threads = rate(across_threads);
    for (what, rate) in [
        ("drop", drop_only),
        ("queue+drop", queue_drop),
        ("queue, no free", queue_leak),
        ("2 threads", threads),
    ] {
        println!("{what:<16} {:>6.1} M msg/s", rate / 1e6);
    }
}
