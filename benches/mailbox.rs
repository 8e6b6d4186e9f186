//! Mailbox throughput of the beehive bus, each workload beside a raw tokio baseline in the
//! same run (these machines are noisy: compare ratios, not absolute numbers).
//!
//! `cargo bench --bench mailbox` — prints criterion's figures, then a table of messages/s and
//! the bus/baseline ratio per workload, and p50/p99 latencies of the sync round trip.
//!
//! Workloads (messages carry ≈100 bytes of content and are built before timing):
//! * point-to-point: 1 sender → 1 module, 1,000,000 messages; baseline `mpsc::channel(1024)`;
//! * sync round trip: 100,000 sequential `send_sync` answered by `send_resp`; baseline an mpsc
//!   request carrying a oneshot reply;
//! * group fan-out: 100,000 group sends to 8 modules; baseline 8 raw channels;
//! * many-to-one: 8 senders → 1 module, 1,000,000 messages; baseline 8 senders into one channel.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::{Actor, Context, Handler};
use beehive::{Bus, Content, DEFAULT_MAILBOX_CAPACITY, Endpoint, Message, Module};
use criterion::{BenchmarkId, Criterion, Throughput};
use tokio::sync::{Notify, mpsc, oneshot};

const P2P: usize = 1_000_000;
const SYNC: usize = 100_000;
const FANOUT: usize = 100_000;
const MEMBERS: usize = 8;
const MANY: usize = 1_000_000;
const SENDERS: usize = 8;

/// Messages per second of every timed iteration, by workload and variant.
static RESULTS: Mutex<BTreeMap<(&'static str, &'static str), Vec<f64>>> =
    Mutex::new(BTreeMap::new());

fn record(workload: &'static str, variant: &'static str, messages: usize, took: Duration) {
    let rate = messages as f64 / took.as_secs_f64();
    RESULTS
        .lock()
        .unwrap()
        .entry((workload, variant))
        .or_default()
        .push(rate);
}

fn messages(n: usize) -> Vec<Message> {
    let body = Content::string("x".repeat(98)); // 100 bytes of JSON text
    (0..n)
        .map(|_| {
            Message::new()
                .with_route("bench", "resource", "node/n/default/pod/p", "update")
                .with_content(body.clone())
        })
        .collect()
}

/// Counts what it receives and wakes the timer when `target` deliveries have arrived.
struct Sink {
    name: String,
    group: String,
    count: Arc<AtomicUsize>,
    target: Arc<AtomicUsize>,
    done: Arc<Notify>,
    answer: Option<Endpoint>,
}

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<Message> for Sink {
    type Result = ();
    fn handle(&mut self, msg: Message, _ctx: &mut Context<Self>) {
        if let Some(ep) = &self.answer {
            ep.send_resp(msg.response(Content::null()));
            return;
        }
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.target.load(Ordering::Relaxed) {
            self.done.notify_one();
        }
    }
}

impl Module for Sink {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &str {
        &self.group
    }
}

struct Counter {
    count: Arc<AtomicUsize>,
    target: Arc<AtomicUsize>,
    done: Arc<Notify>,
}

impl Counter {
    fn new() -> Self {
        Counter {
            count: Arc::default(),
            target: Arc::default(),
            done: Arc::default(),
        }
    }
    fn arm(&self, target: usize) {
        self.count.store(0, Ordering::Relaxed);
        self.target.store(target, Ordering::Relaxed);
    }
    fn sink(&self, name: &str, group: &str) -> Sink {
        Sink {
            name: name.into(),
            group: group.into(),
            count: self.count.clone(),
            target: self.target.clone(),
            done: self.done.clone(),
            answer: None,
        }
    }
}

fn bench_point_to_point(c: &mut Criterion, rt: &mut actix_rt::SystemRunner) {
    let mut g = c.benchmark_group("point_to_point");
    g.throughput(Throughput::Elements(P2P as u64))
        .sample_size(10);
    let counter = Counter::new();
    let bus = rt.block_on(async {
        let bus = Bus::new();
        bus.register(counter.sink("sink", "sinks")).unwrap();
        bus.start().unwrap();
        bus
    });
    let ep = bus.endpoint("sender");
    g.bench_function(BenchmarkId::new("beehive", P2P), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(P2P);
                counter.arm(P2P);
                let took = rt.block_on(async {
                    let start = Instant::now();
                    for m in msgs {
                        ep.send("sink", m).await.unwrap();
                    }
                    counter.done.notified().await;
                    start.elapsed()
                });
                record("point-to-point", "beehive", P2P, took);
                total += took;
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("mpsc(1024)", P2P), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(P2P);
                let took = rt.block_on(async {
                    let (tx, mut rx) = mpsc::channel::<Message>(DEFAULT_MAILBOX_CAPACITY);
                    let start = Instant::now();
                    let recv = actix_rt::spawn(async move {
                        let mut n = 0;
                        while rx.recv().await.is_some() {
                            n += 1;
                        }
                        n
                    });
                    for m in msgs {
                        tx.send(m).await.unwrap();
                    }
                    drop(tx);
                    assert_eq!(recv.await.unwrap(), P2P);
                    start.elapsed()
                });
                record("point-to-point", "baseline", P2P, took);
                total += took;
            }
            total
        })
    });
    g.finish();
    rt.block_on(bus.shutdown());
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

static LATENCIES: Mutex<Vec<(&'static str, Duration, Duration)>> = Mutex::new(Vec::new());

fn bench_sync(c: &mut Criterion, rt: &mut actix_rt::SystemRunner) {
    let mut g = c.benchmark_group("sync_round_trip");
    g.throughput(Throughput::Elements(SYNC as u64))
        .sample_size(10);
    let counter = Counter::new();
    let bus = rt.block_on(async {
        let bus = Bus::new();
        let mut responder = counter.sink("meta", "meta");
        responder.answer = Some(bus.endpoint("meta"));
        bus.register(responder).unwrap();
        bus.start().unwrap();
        bus
    });
    let ep = bus.endpoint("edged");
    let timeout = Duration::from_secs(10);
    let mut lat_bus = Vec::new();
    g.bench_function(BenchmarkId::new("beehive", SYNC), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(SYNC);
                let (took, lat) = rt.block_on(async {
                    let mut lat = Vec::with_capacity(SYNC);
                    let start = Instant::now();
                    for m in msgs {
                        let t = Instant::now();
                        ep.send_sync("meta", m, timeout).await.unwrap();
                        lat.push(t.elapsed());
                    }
                    (start.elapsed(), lat)
                });
                lat_bus = lat;
                record("sync round trip", "beehive", SYNC, took);
                total += took;
            }
            total
        })
    });
    let mut lat_raw = Vec::new();
    g.bench_function(BenchmarkId::new("mpsc+oneshot", SYNC), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(SYNC);
                let (took, lat) = rt.block_on(async {
                    let (tx, mut rx) = mpsc::channel::<(Message, oneshot::Sender<Message>)>(
                        DEFAULT_MAILBOX_CAPACITY,
                    );
                    let responder = actix_rt::spawn(async move {
                        while let Some((m, reply)) = rx.recv().await {
                            let _ = reply.send(m.response(Content::null()));
                        }
                    });
                    let mut lat = Vec::with_capacity(SYNC);
                    let start = Instant::now();
                    for m in msgs {
                        let t = Instant::now();
                        let (rtx, rrx) = oneshot::channel();
                        tx.send((m, rtx)).await.unwrap();
                        rrx.await.unwrap();
                        lat.push(t.elapsed());
                    }
                    let took = start.elapsed();
                    drop(tx);
                    responder.await.unwrap();
                    (took, lat)
                });
                lat_raw = lat;
                record("sync round trip", "baseline", SYNC, took);
                total += took;
            }
            total
        })
    });
    g.finish();
    for (name, mut lat) in [("beehive", lat_bus), ("baseline", lat_raw)] {
        lat.sort();
        if !lat.is_empty() {
            LATENCIES
                .lock()
                .unwrap()
                .push((name, percentile(&lat, 0.5), percentile(&lat, 0.99)));
        }
    }
    rt.block_on(bus.shutdown());
}

fn bench_fanout(c: &mut Criterion, rt: &mut actix_rt::SystemRunner) {
    let mut g = c.benchmark_group("group_fanout");
    g.throughput(Throughput::Elements((FANOUT * MEMBERS) as u64))
        .sample_size(10);
    let counter = Counter::new();
    let bus = rt.block_on(async {
        let bus = Bus::new();
        for i in 0..MEMBERS {
            bus.register(counter.sink(&format!("member-{i}"), "controllers"))
                .unwrap();
        }
        bus.start().unwrap();
        bus
    });
    let ep = bus.endpoint("cloudhub");
    g.bench_function(BenchmarkId::new("beehive", FANOUT), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(FANOUT);
                counter.arm(FANOUT * MEMBERS);
                let took = rt.block_on(async {
                    let start = Instant::now();
                    for m in msgs {
                        ep.send_to_group("controllers", m).await.unwrap();
                    }
                    counter.done.notified().await;
                    start.elapsed()
                });
                record(
                    "group fan-out (deliveries)",
                    "beehive",
                    FANOUT * MEMBERS,
                    took,
                );
                total += took;
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("8 x mpsc(1024)", FANOUT), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(FANOUT);
                let took = rt.block_on(async {
                    let mut txs = Vec::new();
                    let mut receivers = Vec::new();
                    for _ in 0..MEMBERS {
                        let (tx, mut rx) = mpsc::channel::<Message>(DEFAULT_MAILBOX_CAPACITY);
                        txs.push(tx);
                        receivers.push(actix_rt::spawn(async move {
                            let mut n = 0;
                            while rx.recv().await.is_some() {
                                n += 1;
                            }
                            n
                        }));
                    }
                    let start = Instant::now();
                    for m in msgs {
                        for tx in &txs {
                            tx.send(m.clone()).await.unwrap();
                        }
                    }
                    drop(txs);
                    for r in receivers {
                        assert_eq!(r.await.unwrap(), FANOUT);
                    }
                    start.elapsed()
                });
                record(
                    "group fan-out (deliveries)",
                    "baseline",
                    FANOUT * MEMBERS,
                    took,
                );
                total += took;
            }
            total
        })
    });
    g.finish();
    rt.block_on(bus.shutdown());
}

fn bench_many_to_one(c: &mut Criterion, rt: &mut actix_rt::SystemRunner) {
    let mut g = c.benchmark_group("many_to_one");
    g.throughput(Throughput::Elements(MANY as u64))
        .sample_size(10);
    let counter = Counter::new();
    let bus = rt.block_on(async {
        let bus = Bus::new();
        bus.register(counter.sink("sink", "sinks")).unwrap();
        bus.start().unwrap();
        bus
    });
    let senders: Vec<Endpoint> = (0..SENDERS)
        .map(|i| bus.endpoint(&format!("sender-{i}")))
        .collect();
    g.bench_function(BenchmarkId::new("beehive", MANY), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let batches: Vec<Vec<Message>> =
                    (0..SENDERS).map(|_| messages(MANY / SENDERS)).collect();
                counter.arm(MANY);
                let took = rt.block_on(async {
                    let start = Instant::now();
                    for (ep, batch) in senders.iter().cloned().zip(batches) {
                        actix_rt::spawn(async move {
                            for m in batch {
                                ep.send("sink", m).await.unwrap();
                            }
                        });
                    }
                    counter.done.notified().await;
                    start.elapsed()
                });
                record("many-to-one", "beehive", MANY, took);
                total += took;
            }
            total
        })
    });
    g.bench_function(BenchmarkId::new("8 senders, mpsc(1024)", MANY), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let batches: Vec<Vec<Message>> =
                    (0..SENDERS).map(|_| messages(MANY / SENDERS)).collect();
                let took = rt.block_on(async {
                    let (tx, mut rx) = mpsc::channel::<Message>(DEFAULT_MAILBOX_CAPACITY);
                    let start = Instant::now();
                    for batch in batches {
                        let tx = tx.clone();
                        actix_rt::spawn(async move {
                            for m in batch {
                                tx.send(m).await.unwrap();
                            }
                        });
                    }
                    drop(tx);
                    let mut n = 0;
                    while rx.recv().await.is_some() {
                        n += 1;
                    }
                    assert_eq!(n, MANY);
                    start.elapsed()
                });
                record("many-to-one", "baseline", MANY, took);
                total += took;
            }
            total
        })
    });
    g.finish();
    rt.block_on(bus.shutdown());
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[allow(clippy::print_stdout)] // a bench reports on stdout
fn report() {
    let results = RESULTS.lock().unwrap();
    println!(
        "\n{:<30} {:>16} {:>16} {:>8}",
        "workload (median of runs)", "beehive msg/s", "baseline msg/s", "ratio"
    );
    for workload in [
        "point-to-point",
        "sync round trip",
        "group fan-out (deliveries)",
        "many-to-one",
    ] {
        let (Some(bus), Some(raw)) = (
            results.get(&(workload, "beehive")),
            results.get(&(workload, "baseline")),
        ) else {
            continue;
        };
        let (bus, raw) = (median(bus), median(raw));
        println!("{workload:<30} {bus:>16.0} {raw:>16.0} {:>7.2}x", bus / raw);
    }
    for (name, p50, p99) in LATENCIES.lock().unwrap().iter() {
        println!("sync round trip latency {name:<9} p50 {p50:>9.2?}  p99 {p99:>9.2?}");
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();
    let mut rt = actix_rt::System::new();
    bench_point_to_point(&mut c, &mut rt);
    bench_sync(&mut c, &mut rt);
    bench_fanout(&mut c, &mut rt);
    bench_many_to_one(&mut c, &mut rt);
    c.final_summary();
    report();
}
