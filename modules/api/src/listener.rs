//! Admission limits for the listeners that face the edge: how many connections may be open,
//! how many may be still unauthenticated (TLS handshake and request head in progress), how
//! many of those one source (an IPv4 address, an IPv6 /64) and one network (an IPv4 /24, an
//! IPv6 /48) may hold, and how long a connection may stay unauthenticated.
//!
//! IPv6 sources are keyed by their /64: one host usually holds a whole /64 and can use any
//! address in it, so a per-address limit would not limit it at all.
//!
//! A server asks its [`Gate`] to [`admit`](Gate::admit) every accepted socket before it spends
//! anything on it, keeps the [`Admission`] as long as the connection lives, and calls
//! [`Admission::authenticated`] once the peer has proven who it is. Dropping the admission
//! releases its slots. [`Gate::stats`] is what `/metrics` shows.
//!
//! Besides its own limits every gate keeps the process within its open-file limit
//! (`RLIMIT_NOFILE`): a socket accepted while fewer than [`files_reserve`] descriptors are
//! left is closed at once ([`Refused::Files`]), so the process refuses cleanly instead of
//! reaching the limit, where `accept` itself fails and everything else that opens a file
//! (API server connections, certificates, logs) fails with it.
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use kubeedge_api::listener::{Gate, ListenerLimits, Refused};
//! let limits = ListenerLimits { max_unauthenticated_per_ip: 1, ..ListenerLimits::default() };
//! let gate = Gate::new("demo", limits);
//! let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
//! let first = gate.admit(peer).unwrap();
//! assert!(matches!(gate.admit(peer), Err(Refused::PerIp { .. })));
//! first.authenticated();
//! let _second = gate.admit(peer).unwrap();
//! assert_eq!(gate.stats().open, 2);
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

/// The limits of one listener (YAML: `maxConnections`, `maxHandshakes`,
/// `maxUnauthenticatedPerIP`, `maxUnauthenticatedPerNetwork`, `preAuthTimeoutSeconds`). Zero
/// in a count means "no limit".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerLimits {
    /// Open connections, authenticated or not (default 10,000).
    pub max_connections: u32,
    /// Connections not yet authenticated: TLS handshake or request head in progress
    /// (default 1,024).
    pub max_handshakes: u32,
    /// Unauthenticated connections from one source: an IPv4 address or an IPv6 /64
    /// (default 64). Edges behind one NAT share an address; a refused edge retries, and
    /// authenticated connections do not count.
    #[serde(rename = "maxUnauthenticatedPerIP")]
    pub max_unauthenticated_per_ip: u32,
    /// Unauthenticated connections from one network: an IPv4 /24 or an IPv6 /48 (default
    /// 256, a quarter of the default `maxHandshakes`), so that one network's addresses
    /// together cannot take the whole handshake budget from everyone else.
    pub max_unauthenticated_per_network: u32,
    /// Seconds a connection may take to finish TLS and send its request head (default 10).
    pub pre_auth_timeout_seconds: u32,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: 10_000,
            max_handshakes: 1_024,
            max_unauthenticated_per_ip: 64,
            max_unauthenticated_per_network: 256,
            pre_auth_timeout_seconds: 10,
        }
    }
}

impl ListenerLimits {
    /// `preAuthTimeoutSeconds` as a duration (at least 1 s).
    pub fn pre_auth_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.pre_auth_timeout_seconds.max(1)))
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// `maxConnections` connections are open.
    #[error("{limit} connections are open (maxConnections)")]
    Connections {
        /// The limit reached.
        limit: u32,
    },
    /// `maxHandshakes` connections are unauthenticated.
    #[error("{limit} connections are authenticating (maxHandshakes)")]
    Handshakes {
        /// The limit reached.
        limit: u32,
    },
    /// The source (an IPv4 address, an IPv6 /64) holds `maxUnauthenticatedPerIP`
    /// unauthenticated connections.
    #[error("{ip} holds {limit} unauthenticated connections (maxUnauthenticatedPerIP)")]
    PerIp {
        /// The source: the address, or the first address of its IPv6 /64.
        ip: IpAddr,
        /// The limit reached.
        limit: u32,
    },
    /// The network (an IPv4 /24, an IPv6 /48) holds `maxUnauthenticatedPerNetwork`
    /// unauthenticated connections.
    #[error(
        "{network}/{prefix} holds {limit} unauthenticated connections (maxUnauthenticatedPerNetwork)"
    )]
    PerNetwork {
        /// The network's first address.
        network: IpAddr,
        /// Its prefix length (24 or 48).
        prefix: u8,
        /// The limit reached.
        limit: u32,
    },
    /// The process has fewer than [`files_reserve`] descriptors left below its open-file
    /// limit.
    #[error("{open} files are open, the process may open {limit} (raise LimitNOFILE)")]
    Files {
        /// Descriptors open in the process.
        open: u64,
        /// The process's open-file limit (soft `RLIMIT_NOFILE`).
        limit: u64,
    },
}

impl Refused {
    /// The metrics label: `connections`, `handshakes`, `per_ip`, `per_network` or `files`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Connections { .. } => "connections",
            Refused::Handshakes { .. } => "handshakes",
            Refused::PerIp { .. } => "per_ip",
            Refused::PerNetwork { .. } => "per_network",
            Refused::Files { .. } => "files",
        }
    }
}

/// Descriptors a process with open-file limit `limit` keeps free for everything but new
/// connections (outgoing connections, files, the accept itself): 1/32 of the limit, at least
/// 64. With the limit at 20,000 connections are refused from 19,375 open files on.
pub fn files_reserve(limit: u64) -> u64 {
    (limit / 32).max(64)
}

/// The process's open-file limit (soft `RLIMIT_NOFILE`); `None` when unlimited.
pub fn file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// How many open files a connection admitted now may bring the process to before it is
/// refused: the open-file limit less [`files_reserve`]; `None` when unlimited.
pub fn file_budget() -> Option<u64> {
    file_limit().map(|l| l.saturating_sub(files_reserve(l)))
}

/// Descriptors open in this process; `None` where `/proc` cannot tell.
///
/// Linux 6.2 and later report the count as the size of `/proc/self/fd`, which is cheap.
/// Older kernels report 0 and the directory is counted instead, which costs a moment per
/// thousand descriptors: that count is taken at most every [`RECOUNT`] and the admissions
/// since are added to it.
fn open_files() -> Option<u64> {
    let size = std::fs::metadata("/proc/self/fd").ok()?.len();
    if size > 0 {
        return Some(size);
    }
    let mut counted = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    match *counted {
        Some((at, n)) if now.duration_since(at) < RECOUNT => {
            Some(n + ADMITTED.load(Ordering::Relaxed))
        }
        _ => {
            let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
            ADMITTED.store(0, Ordering::Relaxed);
            *counted = Some((now, n));
            Some(n)
        }
    }
}

/// How often the open descriptors are recounted where the kernel does not report the count.
const RECOUNT: Duration = Duration::from_millis(100);
/// The last count of `/proc/self/fd` (kernels before 6.2) and when it was taken.
static COUNTED: Mutex<Option<(Instant, u64)>> = Mutex::new(None);
/// Connections admitted by every gate since that count.
static ADMITTED: AtomicU64 = AtomicU64::new(0);

/// [`Refused::Files`] when the process is within [`files_reserve`] of its open-file limit.
fn check_files() -> Result<(), Refused> {
    let Some(limit) = file_limit() else {
        return Ok(());
    };
    match open_files() {
        Some(open) if open >= limit.saturating_sub(files_reserve(limit)) => {
            Err(Refused::Files { open, limit })
        }
        _ => Ok(()),
    }
}

#[derive(Debug, Default)]
struct Counts {
    open: u64,
    handshaking: u64,
    /// Unauthenticated connections by [`source`].
    per_ip: HashMap<IpAddr, u32>,
    /// Unauthenticated connections by [`network`].
    per_network: HashMap<IpAddr, u32>,
}

#[derive(Debug, Default)]
struct Totals {
    accepted: AtomicU64,
    refused_connections: AtomicU64,
    refused_handshakes: AtomicU64,
    refused_per_ip: AtomicU64,
    refused_per_network: AtomicU64,
    refused_files: AtomicU64,
    timed_out: AtomicU64,
}

/// The admission state of one listener. Shared (`Arc`) by its accept loop and connections;
/// every decision is made under one short lock, so the limits hold exactly.
#[derive(Debug)]
pub struct Gate {
    listener: &'static str,
    limits: ListenerLimits,
    counts: Mutex<Counts>,
    totals: Totals,
}

/// A point-in-time copy of a [`Gate`]'s gauges and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// The listener's name (a metrics label).
    pub listener: &'static str,
    /// Connections open now.
    pub open: u64,
    /// Connections not yet authenticated now.
    pub handshaking: u64,
    /// Connections admitted since start.
    pub accepted: u64,
    /// Refused because `maxConnections` were open.
    pub refused_connections: u64,
    /// Refused because `maxHandshakes` were authenticating.
    pub refused_handshakes: u64,
    /// Refused because their source held `maxUnauthenticatedPerIP`.
    pub refused_per_ip: u64,
    /// Refused because their network held `maxUnauthenticatedPerNetwork`.
    pub refused_per_network: u64,
    /// Refused because the process was within [`files_reserve`] of its open-file limit.
    pub refused_files: u64,
    /// Closed because they did not authenticate within `preAuthTimeoutSeconds`.
    pub timed_out: u64,
}

impl Gate {
    /// A gate for the listener named `listener` (used in logs and metrics).
    pub fn new(listener: &'static str, limits: ListenerLimits) -> Arc<Gate> {
        Arc::new(Gate {
            listener,
            limits,
            counts: Mutex::new(Counts::default()),
            totals: Totals::default(),
        })
    }

    /// The limits this gate enforces.
    pub fn limits(&self) -> &ListenerLimits {
        &self.limits
    }

    /// The listener's name.
    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// Admits a new unauthenticated connection from `peer`, or says why not (counted and
    /// logged). The caller closes a refused socket at once, without reading from it.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admission, Refused> {
        let peer = canonical(peer);
        let (from, net) = (source(peer), network(peer));
        // Outside the lock: it reads /proc.
        let files = check_files();
        let refused = {
            let mut c = self.lock();
            let l = &self.limits;
            let on_ip = c.per_ip.get(&from).copied().unwrap_or(0);
            let on_net = c.per_network.get(&net.0).copied().unwrap_or(0);
            if let Err(why) = files {
                Some(why)
            } else if l.max_connections > 0 && c.open >= u64::from(l.max_connections) {
                Some(Refused::Connections {
                    limit: l.max_connections,
                })
            } else if l.max_handshakes > 0 && c.handshaking >= u64::from(l.max_handshakes) {
                Some(Refused::Handshakes {
                    limit: l.max_handshakes,
                })
            } else if l.max_unauthenticated_per_ip > 0 && on_ip >= l.max_unauthenticated_per_ip {
                Some(Refused::PerIp {
                    ip: from,
                    limit: l.max_unauthenticated_per_ip,
                })
            } else if l.max_unauthenticated_per_network > 0
                && on_net >= l.max_unauthenticated_per_network
            {
                Some(Refused::PerNetwork {
                    network: net.0,
                    prefix: net.1,
                    limit: l.max_unauthenticated_per_network,
                })
            } else {
                c.open += 1;
                c.handshaking += 1;
                *c.per_ip.entry(from).or_insert(0) += 1;
                *c.per_network.entry(net.0).or_insert(0) += 1;
                None
            }
        };
        if let Some(why) = refused {
            let counter = match why {
                Refused::Connections { .. } => &self.totals.refused_connections,
                Refused::Handshakes { .. } => &self.totals.refused_handshakes,
                Refused::PerIp { .. } => &self.totals.refused_per_ip,
                Refused::PerNetwork { .. } => &self.totals.refused_per_network,
                Refused::Files { .. } => &self.totals.refused_files,
            };
            // Refusals come in floods; the counter carries the volume, the log the first few.
            if counter.fetch_add(1, Ordering::Relaxed) % 1000 == 0 {
                warn!(listener = self.listener, peer = %peer, reason = why.reason(), error = %why, "connection refused");
            }
            return Err(why);
        }
        self.totals.accepted.fetch_add(1, Ordering::Relaxed);
        ADMITTED.fetch_add(1, Ordering::Relaxed);
        Ok(Admission {
            gate: self.clone(),
            peer,
            authenticated: AtomicBool::new(false),
        })
    }

    /// The gauges and counters now.
    pub fn stats(&self) -> ListenerStats {
        let (open, handshaking) = {
            let c = self.lock();
            (c.open, c.handshaking)
        };
        let t = &self.totals;
        ListenerStats {
            listener: self.listener,
            open,
            handshaking,
            accepted: t.accepted.load(Ordering::Relaxed),
            refused_connections: t.refused_connections.load(Ordering::Relaxed),
            refused_handshakes: t.refused_handshakes.load(Ordering::Relaxed),
            refused_per_ip: t.refused_per_ip.load(Ordering::Relaxed),
            refused_per_network: t.refused_per_network.load(Ordering::Relaxed),
            refused_files: t.refused_files.load(Ordering::Relaxed),
            timed_out: t.timed_out.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn leave_handshake(&self, peer: IpAddr) {
        let mut c = self.lock();
        let c = &mut *c;
        c.handshaking = c.handshaking.saturating_sub(1);
        for (table, key) in [
            (&mut c.per_ip, source(peer)),
            (&mut c.per_network, network(peer).0),
        ] {
            if let Some(n) = table.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    table.remove(&key);
                }
            }
        }
    }
}

/// An IPv4 peer seen through an IPv6 socket counts as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `ip` with all but its first `bits` bits cleared.
fn prefix(ip: IpAddr, bits: u32) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

/// The source a peer counts as in per-source limits: its IPv4 address (also when seen as an
/// IPv4-mapped IPv6 address), or the first address of its IPv6 /64.
pub fn source(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        v4 @ IpAddr::V4(_) => v4,
        v6 @ IpAddr::V6(_) => prefix(v6, 64),
    }
}

/// The network a canonical peer counts in, with its prefix length: its IPv4 /24, or its
/// IPv6 /48.
fn network(ip: IpAddr) -> (IpAddr, u8) {
    match ip {
        IpAddr::V4(_) => (prefix(ip, 24), 24),
        IpAddr::V6(_) => (prefix(ip, 48), 48),
    }
}

/// One admitted connection's slots. Keep it as long as the connection lives; dropping it
/// releases them.
#[derive(Debug)]
pub struct Admission {
    gate: Arc<Gate>,
    peer: IpAddr,
    authenticated: AtomicBool,
}

impl Admission {
    /// The peer has authenticated: the connection leaves the handshake and per-address
    /// counts and stays in the open count. Idempotent.
    pub fn authenticated(&self) {
        if !self.authenticated.swap(true, Ordering::AcqRel) {
            self.gate.leave_handshake(self.peer);
        }
    }

    /// Whether [`authenticated`](Self::authenticated) was called.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }

    /// The peer's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// Runs the pre-authentication step `fut` (TLS, request head) under the listener's
    /// `preAuthTimeoutSeconds`; `None` (counted and logged) when it did not finish in time.
    pub async fn pre_auth<F: Future>(&self, fut: F) -> Option<F::Output> {
        match tokio::time::timeout(self.gate.limits.pre_auth_timeout(), fut).await {
            Ok(out) => Some(out),
            Err(_) => {
                self.timed_out();
                None
            }
        }
    }

    /// Counts (and logs) one connection closed for not authenticating in time, for servers
    /// that enforce the deadline themselves.
    pub fn timed_out(&self) {
        self.gate.totals.timed_out.fetch_add(1, Ordering::Relaxed);
        info!(listener = self.gate.listener, peer = %self.peer, timeout_s = self.gate.limits.pre_auth_timeout_seconds, "connection closed: not authenticated in time");
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if !self.authenticated.load(Ordering::Acquire) {
            self.gate.leave_handshake(self.peer);
        }
        let mut c = self.gate.lock();
        c.open = c.open.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    fn limits(conns: u32, handshakes: u32, per_ip: u32) -> ListenerLimits {
        ListenerLimits {
            max_connections: conns,
            max_handshakes: handshakes,
            max_unauthenticated_per_ip: per_ip,
            max_unauthenticated_per_network: 0,
            pre_auth_timeout_seconds: 1,
        }
    }

    fn v6(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_ipv6_64_counts_as_one_source() {
        let gate = Gate::new("t", limits(0, 0, 2));
        // One host, any addresses of its /64.
        let _a = gate.admit(v6("2001:db8:1:2::1")).unwrap();
        let _b = gate.admit(v6("2001:db8:1:2:ffff::9")).unwrap();
        assert_eq!(
            gate.admit(v6("2001:db8:1:2:1234:5678:9abc:def0"))
                .unwrap_err(),
            Refused::PerIp {
                ip: v6("2001:db8:1:2::"),
                limit: 2
            }
        );
        // The next /64 is another source.
        let _c = gate.admit(v6("2001:db8:1:3::1")).unwrap();
        assert_eq!(gate.stats().refused_per_ip, 1);
    }

    #[test]
    fn one_network_cannot_take_the_whole_handshake_budget() {
        let gate = Gate::new(
            "t",
            ListenerLimits {
                max_unauthenticated_per_network: 3,
                ..limits(0, 10, 2)
            },
        );
        let mut held = Vec::new();
        for last in 1..=3 {
            held.push(gate.admit(ip(last)).unwrap());
        }
        // A fourth address of 127.0.0.0/24: the network is full, the budget is not.
        assert_eq!(
            gate.admit(ip(4)).unwrap_err(),
            Refused::PerNetwork {
                network: ip(0),
                prefix: 24,
                limit: 3
            }
        );
        let other_v4 = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1));
        held.push(gate.admit(other_v4).expect("another /24 is served"));
        // IPv6: /64s of one /48 share it; another /48 does not.
        for n in 1..=3 {
            held.push(gate.admit(v6(&format!("2001:db8:1:{n}::1"))).unwrap());
        }
        assert!(matches!(
            gate.admit(v6("2001:db8:1:ff::1")),
            Err(Refused::PerNetwork { prefix: 48, .. })
        ));
        held.push(
            gate.admit(v6("2001:db8:2::1"))
                .expect("another /48 is served"),
        );
        // Authenticated connections leave the count.
        held[0].authenticated();
        held.push(gate.admit(ip(4)).expect("a slot of the /24 was freed"));
        assert_eq!(gate.stats().refused_per_network, 2);
        drop(held);
        let c = gate.lock();
        assert!(c.per_ip.is_empty() && c.per_network.is_empty());
    }

    #[test]
    fn per_ip_limit_counts_only_unauthenticated_connections_of_that_address() {
        let gate = Gate::new("t", limits(0, 0, 2));
        let a = gate.admit(ip(1)).unwrap();
        let _b = gate.admit(ip(1)).unwrap();
        assert_eq!(
            gate.admit(ip(1)).unwrap_err(),
            Refused::PerIp {
                ip: ip(1),
                limit: 2
            }
        );
        let _other = gate.admit(ip(2)).expect("another address is not affected");
        a.authenticated();
        a.authenticated();
        let _c = gate
            .admit(ip(1))
            .expect("an authenticated connection frees its slot");
        let s = gate.stats();
        assert_eq!(
            (s.open, s.handshaking, s.accepted, s.refused_per_ip),
            (4, 3, 4, 1)
        );
    }

    #[test]
    fn handshake_and_connection_caps_hold_and_dropping_releases_them() {
        let gate = Gate::new("t", limits(3, 2, 0));
        let a = gate.admit(ip(1)).unwrap();
        let b = gate.admit(ip(2)).unwrap();
        assert!(matches!(
            gate.admit(ip(3)),
            Err(Refused::Handshakes { limit: 2 })
        ));
        a.authenticated();
        b.authenticated();
        let c = gate.admit(ip(3)).unwrap();
        assert!(matches!(
            gate.admit(ip(4)),
            Err(Refused::Connections { limit: 3 })
        ));
        drop(c);
        drop(a);
        let _d = gate.admit(ip(4)).unwrap();
        let s = gate.stats();
        assert_eq!((s.open, s.handshaking), (2, 1));
        assert_eq!((s.refused_connections, s.refused_handshakes), (1, 1));
        drop(b);
        drop(_d);
        let s = gate.stats();
        assert_eq!((s.open, s.handshaking), (0, 0));
        assert!(
            gate.lock().per_ip.is_empty(),
            "no address entry outlives its connections"
        );
    }

    #[test]
    fn mapped_ipv6_peers_count_as_their_ipv4_address() {
        let gate = Gate::new("t", limits(0, 0, 1));
        let _a = gate.admit(ip(9)).unwrap();
        let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 9).to_ipv6_mapped());
        assert!(matches!(gate.admit(mapped), Err(Refused::PerIp { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn pre_auth_deadline_is_counted() {
        let gate = Gate::new("t", limits(0, 0, 0));
        let a = gate.admit(ip(1)).unwrap();
        assert_eq!(a.pre_auth(async { 7 }).await, Some(7));
        assert_eq!(a.pre_auth(std::future::pending::<()>()).await, None);
        assert_eq!(gate.stats().timed_out, 1);
    }

    #[test]
    fn yaml_keys_and_defaults() {
        let l: ListenerLimits =
            serde_saphyr::from_str("maxConnections: 5\nmaxUnauthenticatedPerIP: 3").unwrap();
        assert_eq!((l.max_connections, l.max_unauthenticated_per_ip), (5, 3));
        assert_eq!((l.max_handshakes, l.pre_auth_timeout_seconds), (1024, 10));
        assert_eq!(l.max_unauthenticated_per_network, 256);
    }
}
