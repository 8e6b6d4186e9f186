//! Mailbox throughput of the beehive bus, each workload beside a raw tokio baseline in the
//! same run (these machines are noisy: compare ratios, not absolute numbers).
//!
//! `cargo bench -p beehive --bench mailbox` — prints criterion's figures, then a table of
//! messages/s and the bus/baseline ratio per workload, and p50/p99 latencies of the sync round
//! trip, then one machine-readable line per workload, the same form as the Go beehive harness
//! (`benches/go-beehive`) prints, which `scripts/bench-vs-go` puts side by side:
//!
//! ```text
//! workload=p2p impl=beehive msgs=1000000 runs=12 secs=0.3012 rate=3320000 tokio_rate=4900000 lost=0 reordered=0
//! ```
//!
//! `rate` and `tokio_rate` are medians over the timed runs (group fan-out counts deliveries:
//! 8 per send); `lost` (sync answers that never came) and `reordered` (messages that arrived
//! after a later one of the same sender, per receiving module) are summed over all runs. The
//! sequence number travels in `header.timestamp`, so checking order costs no decoding.
//!
//! Workloads (messages carry ≈100 bytes of content and are built before timing):
//! * point-to-point: 1 sender → 1 module, 1,000,000 messages; baseline `mpsc::channel(1024)`;
//! * sync round trip: 100,000 sequential `send_sync` answered by `send_resp`; baseline an mpsc
//!   request carrying a oneshot reply;
//! * group fan-out: 100,000 group sends to 8 modules; baseline 8 raw channels;
//! * many-to-one: 8 senders → 1 module, 1,000,000 messages; baseline 8 senders into one channel.
//!
//! Senders (the sync caller too) are tasks on the actix system's thread, beside the modules;
//! `BENCH_SENDER_THREAD=1` runs them on a thread of their own (see [`start_senders`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// Lost sync answers and reordered deliveries, summed over every run, by workload.
static FAULTS: Mutex<BTreeMap<&'static str, (usize, usize)>> = Mutex::new(BTreeMap::new());

fn record_faults(workload: &'static str, lost: usize, reordered: usize) {
    let mut faults = FAULTS.lock().unwrap();
    let entry = faults.entry(workload).or_default();
    entry.0 += lost;
    entry.1 += reordered;
}

/// Runs of the workloads so far: a new run number for every batch of messages, so receivers
/// can tell runs apart.
static ROUND: AtomicU64 = AtomicU64::new(0);

fn messages(n: usize) -> Vec<Message> {
    messages_from(0, n)
}

/// `n` messages of `sender`, each numbered in `header.timestamp`:
/// run << 40 | sender << 32 | index.
fn messages_from(sender: u64, n: usize) -> Vec<Message> {
    let round = ROUND.fetch_add(1, Ordering::Relaxed) + 1;
    let body = Content::string("x".repeat(98)); // 100 bytes of JSON text
    (0..n)
        .map(|i| {
            let mut m = Message::new()
                .with_route("bench", "resource", "node/n/default/pod/p", "update")
                .with_content(body.clone());
            m.header.timestamp = (round << 40 | sender << 32 | i as u64) as i64;
            m
        })
        .collect()
}

/// Counts messages that arrive after a later one of the same sender (and run).
#[derive(Default)]
struct Order {
    /// Per sender: (run, highest index seen).
    last: [(u64, u64); SENDERS],
}

impl Order {
    fn out_of_order(&mut self, ts: i64) -> bool {
        let ts = ts as u64;
        let (round, sender, index) = (ts >> 40, (ts >> 32) & 0xff, ts & 0xffff_ffff);
        let (r, last) = &mut self.last[sender as usize % SENDERS];
        if *r == round && index < *last {
            return true;
        }
        (*r, *last) = (round, index);
        false
    }
}

/// Counts what it receives (and what arrives out of order) and wakes the timer when
/// `target` deliveries have arrived.
struct Sink {
    name: String,
    group: String,
    count: Arc<AtomicUsize>,
    target: Arc<AtomicUsize>,
    done: Arc<Notify>,
    answer: Option<Endpoint>,
    order: Order,
    reordered: Arc<AtomicUsize>,
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
        if self.order.out_of_order(msg.header.timestamp) {
            self.reordered.fetch_add(1, Ordering::Relaxed);
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
    reordered: Arc<AtomicUsize>,
}

impl Counter {
    fn new() -> Self {
        Counter {
            count: Arc::default(),
            target: Arc::default(),
            done: Arc::default(),
            reordered: Arc::default(),
        }
    }
    fn arm(&self, target: usize) {
        self.count.store(0, Ordering::Relaxed);
        self.target.store(target, Ordering::Relaxed);
    }
    /// Reordered deliveries since the last call.
    fn take_reordered(&self) -> usize {
        self.reordered.swap(0, Ordering::Relaxed)
    }
    fn sink(&self, name: &str, group: &str) -> Sink {
        Sink {
            name: name.into(),
            group: group.into(),
            count: self.count.clone(),
            target: self.target.clone(),
            done: self.done.clone(),
            answer: None,
            order: Order::default(),
            reordered: self.reordered.clone(),
        }
    }
}

/// Where the senders of the throughput workloads run. By default on the actix system's thread,
/// beside the receiving modules: one core for the whole bus. With `BENCH_SENDER_THREAD=1` on a
/// thread of their own (a current-thread tokio runtime), closer to Go's harness, whose sender
/// and receiver goroutines the Go scheduler spreads over all cores; on a machine shared with
/// other work this is slower, not faster (the two threads wait for each other's time slices).
/// The raw tokio baselines do the same as the bus.
fn start_senders<F>(work: F) -> Sending<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    if std::env::var_os("BENCH_SENDER_THREAD").is_none_or(|v| v != "1") {
        return Sending::Task(actix_rt::spawn(work));
    }
    Sending::Thread(std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    }))
}

/// Senders started by [`start_senders`].
enum Sending<T> {
    Thread(std::thread::JoinHandle<T>),
    Task(tokio::task::JoinHandle<T>),
}

impl<T> Sending<T> {
    async fn join(self) -> T {
        match self {
            Sending::Thread(t) => t.join().unwrap(),
            Sending::Task(t) => t.await.unwrap(),
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
                let ep = ep.clone();
                let took = rt.block_on(async {
                    let start = Instant::now();
                    let sender = start_senders(async move {
                        for m in msgs {
                            ep.send("sink", m).await.unwrap();
                        }
                    });
                    counter.done.notified().await;
                    let took = start.elapsed();
                    sender.join().await;
                    took
                });
                record("point-to-point", "beehive", P2P, took);
                record_faults("point-to-point", 0, counter.take_reordered());
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
                    let sender = start_senders(async move {
                        for m in msgs {
                            tx.send(m).await.unwrap();
                        }
                    });
                    assert_eq!(recv.await.unwrap(), P2P);
                    let took = start.elapsed();
                    sender.join().await;
                    took
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
    // An answer not back within this is counted as lost.
    let timeout = Duration::from_secs(1);
    let mut lat_bus = Vec::new();
    g.bench_function(BenchmarkId::new("beehive", SYNC), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let msgs = messages(SYNC);
                let ep = ep.clone();
                // The caller is a task on the system, as the senders of the other workloads (and
                // the bus's callers in a program) are, not the runtime's root future: waking
                // that one costs a system call per answer (eventfd and epoll), in the baseline too.
                let (took, lat, lost) = rt.block_on(async move {
                    start_senders(async move {
                        let mut lat = Vec::with_capacity(SYNC);
                        let mut lost = 0;
                        let start = Instant::now();
                        for m in msgs {
                            let t = Instant::now();
                            let id = m.header.id.clone();
                            match ep.send_sync("meta", m, timeout).await {
                                Ok(answer) if answer.header.parent_id == id => {
                                    lat.push(t.elapsed())
                                }
                                _ => lost += 1,
                            }
                        }
                        (start.elapsed(), lat, lost)
                    })
                    .join()
                    .await
                });
                lat_bus = lat;
                record("sync round trip", "beehive", SYNC - lost, took);
                record_faults("sync round trip", lost, 0);
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
                    let (took, lat) = start_senders(async move {
                        let mut lat = Vec::with_capacity(SYNC);
                        let start = Instant::now();
                        for m in msgs {
                            let t = Instant::now();
                            let (rtx, rrx) = oneshot::channel();
                            tx.send((m, rtx)).await.unwrap();
                            rrx.await.unwrap();
                            lat.push(t.elapsed());
                        }
                        (start.elapsed(), lat)
                    })
                    .join()
                    .await;
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
                let ep = ep.clone();
                let took = rt.block_on(async {
                    let start = Instant::now();
                    let sender = start_senders(async move {
                        for m in msgs {
                            ep.send_to_group("controllers", m).await.unwrap();
                        }
                    });
                    counter.done.notified().await;
                    let took = start.elapsed();
                    sender.join().await;
                    took
                });
                record(
                    "group fan-out (deliveries)",
                    "beehive",
                    FANOUT * MEMBERS,
                    took,
                );
                record_faults("group fan-out (deliveries)", 0, counter.take_reordered());
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
                    let sender = start_senders(async move {
                        for m in msgs {
                            for tx in &txs {
                                tx.send(m.clone()).await.unwrap();
                            }
                        }
                    });
                    for r in receivers {
                        assert_eq!(r.await.unwrap(), FANOUT);
                    }
                    let took = start.elapsed();
                    sender.join().await;
                    took
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
                let batches: Vec<Vec<Message>> = (0..SENDERS)
                    .map(|s| messages_from(s as u64, MANY / SENDERS))
                    .collect();
                counter.arm(MANY);
                let senders = senders.clone();
                let took = rt.block_on(async {
                    let start = Instant::now();
                    let sending = start_senders(async move {
                        let tasks: Vec<_> = senders
                            .into_iter()
                            .zip(batches)
                            .map(|(ep, batch)| {
                                tokio::spawn(async move {
                                    for m in batch {
                                        ep.send("sink", m).await.unwrap();
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            t.await.unwrap();
                        }
                    });
                    counter.done.notified().await;
                    let took = start.elapsed();
                    sending.join().await;
                    took
                });
                record("many-to-one", "beehive", MANY, took);
                record_faults("many-to-one", 0, counter.take_reordered());
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
                    let sending = start_senders(async move {
                        let tasks: Vec<_> = batches
                            .into_iter()
                            .map(|batch| {
                                let tx = tx.clone();
                                tokio::spawn(async move {
                                    for m in batch {
                                        tx.send(m).await.unwrap();
                                    }
                                })
                            })
                            .collect();
                        drop(tx);
                        for t in tasks {
                            t.await.unwrap();
                        }
                    });
                    let mut n = 0;
                    while rx.recv().await.is_some() {
                        n += 1;
                    }
                    assert_eq!(n, MANY);
                    let took = start.elapsed();
                    sending.join().await;
                    took
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
    // One line per workload in the Go harness's form (benches/go-beehive).
    let faults = FAULTS.lock().unwrap();
    for (workload, key, msgs) in [
        ("point-to-point", "p2p", P2P),
        ("sync round trip", "sync", SYNC),
        ("group fan-out (deliveries)", "fanout", FANOUT * MEMBERS),
        ("many-to-one", "many2one", MANY),
    ] {
        let (Some(bus), Some(raw)) = (
            results.get(&(workload, "beehive")),
            results.get(&(workload, "baseline")),
        ) else {
            continue;
        };
        let (lost, reordered) = faults.get(workload).copied().unwrap_or_default();
        let rate = median(bus);
        println!(
            "workload={key} impl=beehive msgs={msgs} runs={} secs={:.4} rate={rate:.0} tokio_rate={:.0} lost={lost} reordered={reordered}",
            bus.len(),
            msgs as f64 / rate,
            median(raw)
        );
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
