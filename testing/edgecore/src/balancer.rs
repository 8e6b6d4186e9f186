//! A TCP load balancer in front of several cloudcore replicas, as an operator runs one: each
//! new connection goes to the next backend in turn, and a backend that refuses the dial is
//! skipped (the connection goes to the next one that answers). Bytes are relayed unchanged,
//! so TLS is end to end between the edge and the replica.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use edgecore_interop::Balancer;
//! let lb = Balancer::start("127.0.0.1:0".parse().unwrap(), vec![
//!     "127.0.0.11:10000".parse().unwrap(),
//!     "127.0.0.12:10000".parse().unwrap(),
//! ]).await?;
//! println!("edges dial {}", lb.addr());
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// How long one backend dial may take before the next backend is tried.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// A running balancer; stops accepting and cuts every relayed connection when dropped.
#[derive(Debug)]
pub struct Balancer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    backends: Vec<SocketAddr>,
    next: AtomicUsize,
    relays: Mutex<JoinSet<()>>,
    /// Connections relayed now, per backend.
    active: Vec<AtomicUsize>,
}

impl Balancer {
    /// Listens on `listen` and relays to `backends` in turn. Needs a Tokio runtime.
    ///
    /// # Errors
    /// When `listen` cannot be bound.
    pub async fn start(listen: SocketAddr, backends: Vec<SocketAddr>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            active: backends.iter().map(|_| AtomicUsize::new(0)).collect(),
            backends,
            next: AtomicUsize::new(0),
            relays: Mutex::new(JoinSet::new()),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Balancer {
            addr,
            shared,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The backends, in the order connections are dealt to them.
    pub fn backends(&self) -> &[SocketAddr] {
        &self.shared.backends
    }

    /// Connections relayed to each backend now (in [`Balancer::backends`] order).
    pub fn active(&self) -> Vec<usize> {
        self.shared
            .active
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared
            .relays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .abort_all();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let s = shared.clone();
        shared
            .relays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(relay(client, s));
    }
}

/// Dials the backends from the next one in turn until one answers, then relays until either
/// side closes. A client no backend takes is closed.
async fn relay(mut client: TcpStream, shared: Arc<Shared>) {
    let n = shared.backends.len();
    let first = shared.next.fetch_add(1, Ordering::Relaxed);
    for i in 0..n {
        let index = (first + i) % n;
        let dial = TcpStream::connect(shared.backends[index]);
        let Ok(Ok(mut backend)) = tokio::time::timeout(DIAL_TIMEOUT, dial).await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = backend.set_nodelay(true);
        shared.active[index].fetch_add(1, Ordering::Relaxed);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
        shared.active[index].fetch_sub(1, Ordering::Relaxed);
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend that answers every connection with its own name.
    async fn named(name: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        (l.local_addr().unwrap(), answer_with(name, l))
    }

    /// [`named`], whose port a second socket that never listens holds as well (both with
    /// `SO_REUSEPORT`): once the backend stops, connections to the port are refused, and no
    /// other socket (another test's listener, an outgoing connection's source port) can take
    /// it while the test runs. The last value stops the backend ([`stop`]).
    async fn named_and_held(
        name: &'static str,
    ) -> (
        SocketAddr,
        tokio::task::JoinHandle<()>,
        tokio::net::TcpSocket,
        std::net::TcpListener,
    ) {
        let bound = |addr: SocketAddr| {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.set_reuseport(true).unwrap();
            s.bind(addr).unwrap();
            s
        };
        let hold = bound("127.0.0.1:0".parse().unwrap());
        let addr = hold.local_addr().unwrap();
        let l = bound(addr).listen(16).unwrap();
        let stop = std::net::TcpListener::from(rustix::io::dup(&l).unwrap());
        (addr, answer_with(name, l), hold, stop)
    }

    /// Stops a backend: its listener leaves the listening state for every copy of its
    /// descriptor. Aborting its task alone only closes this process's descriptor; a child
    /// process another test is spawning holds a copy until its exec, and the port keeps
    /// accepting (and then resets) connections that long.
    async fn stop(task: tokio::task::JoinHandle<()>, listener: std::net::TcpListener) {
        rustix::net::shutdown(&listener, rustix::net::Shutdown::Read).unwrap();
        task.abort();
        let _ = task.await;
    }

    fn answer_with(name: &'static str, l: TcpListener) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        })
    }

    async fn answer(lb: &Balancer) -> String {
        let mut s = TcpStream::connect(lb.addr()).await.unwrap();
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf).await;
        buf
    }

    #[tokio::test]
    async fn connections_are_dealt_in_turn_and_a_dead_backend_is_skipped() {
        let (a, _ta) = named("a").await;
        let (b, tb, _held, b_listener) = named_and_held("b").await;
        let (c, _tc) = named("c").await;
        let lb = Balancer::start("127.0.0.1:0".parse().unwrap(), vec![a, b, c])
            .await
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(answer(&lb).await);
        }
        assert_eq!(got, ["a", "b", "c"]);
        // b stops; its port stays held without a listener, so connections to it are refused.
        stop(tb, b_listener).await;
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(answer(&lb).await);
        }
        assert_eq!(
            got,
            ["a", "c", "c"],
            "b's turn goes to the next one answering"
        );
    }
}
