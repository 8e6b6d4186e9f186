//! Which Node lists which IP, from a watch of every Node (only the addresses are kept), so a
//! tunnel's `SessionInternalIP` is judged against every Node and not only the one the edge
//! writes itself.
//!
//! An IP's owner is the Node that has listed it as an `InternalIP` (else `ExternalIP`;
//! `Hostname` and DNS entries are never IPs of anyone) for the longest: a node that adds
//! another node's address to its own status later does not become its owner. Nodes listed
//! with the same IP in the first full list (no history to tell them apart) contest it: nobody
//! owns it until the others drop it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How strongly a Node claims an address: an `InternalIP` outranks an `ExternalIP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Internal,
    External,
}

/// One Node listing one IP: its rank and since when (a sequence number; 0 for the first list).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listing {
    node: String,
    rank: Rank,
    since: u64,
}

/// Who an IP belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// No Node lists it.
    Nobody,
    /// This Node listed it first.
    Node(String),
    /// These Nodes listed it in the same first list.
    Contested(Vec<String>),
}

#[derive(Debug, Default)]
struct Index {
    by_node: HashMap<String, Vec<(IpAddr, Rank)>>,
    by_ip: HashMap<IpAddr, Vec<Listing>>,
    seq: u64,
}

impl Index {
    /// Sets `node`'s addresses; pairs it already had keep their age.
    fn set(&mut self, node: &str, ips: Vec<(IpAddr, Rank)>, since: u64) {
        let old = self.by_node.remove(node).unwrap_or_default();
        for (ip, _) in &old {
            if !ips.iter().any(|(i, _)| i == ip)
                && let Some(l) = self.by_ip.get_mut(ip)
            {
                l.retain(|x| x.node != node);
                if l.is_empty() {
                    self.by_ip.remove(ip);
                }
            }
        }
        for (ip, rank) in &ips {
            let listings = self.by_ip.entry(*ip).or_default();
            match listings.iter_mut().find(|x| x.node == node) {
                Some(x) => x.rank = *rank,
                None => listings.push(Listing {
                    node: node.to_owned(),
                    rank: *rank,
                    since,
                }),
            }
        }
        if !ips.is_empty() {
            self.by_node.insert(node.to_owned(), ips);
        }
    }

    fn owner(&self, ip: &IpAddr) -> Owner {
        let Some(listings) = self.by_ip.get(ip) else {
            return Owner::Nobody;
        };
        let Some(best) = listings.iter().map(|l| (l.rank, l.since)).min() else {
            return Owner::Nobody;
        };
        let first: Vec<String> = listings
            .iter()
            .filter(|l| (l.rank, l.since) == best)
            .map(|l| l.node.clone())
            .collect();
        match <[String; 1]>::try_from(first) {
            Ok([node]) => Owner::Node(node),
            Err(nodes) => Owner::Contested(nodes),
        }
    }
}

/// The IPs a Node's `status.addresses` lists, with their rank (canonical, duplicates once).
fn addresses(node: &Node) -> Vec<(IpAddr, Rank)> {
    let mut out: Vec<(IpAddr, Rank)> = Vec::new();
    for a in node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
    {
        let rank = match a.type_.as_str() {
            "InternalIP" => Rank::Internal,
            "ExternalIP" => Rank::External,
            _ => continue,
        };
        let Ok(ip) = a.address.trim().parse::<IpAddr>() else {
            continue;
        };
        let ip = ip.to_canonical();
        match out.iter_mut().find(|(i, _)| *i == ip) {
            Some(x) => x.1 = x.1.min(rank),
            None => out.push((ip, rank)),
        }
    }
    out
}

/// The address index, fed by [`NodeAddresses::run`].
#[derive(Debug, Default)]
pub(crate) struct NodeAddresses {
    index: Mutex<Index>,
    synced: AtomicBool,
}

impl NodeAddresses {
    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True once the first full list has been indexed.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Who owns `ip` now.
    pub(crate) fn owner(&self, ip: IpAddr) -> Owner {
        self.lock().owner(&ip.to_canonical())
    }

    /// Whether `node`'s Node lists `ip` (as an InternalIP or ExternalIP) in the index.
    pub(crate) fn lists(&self, node: &str, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.lock()
            .by_node
            .get(node)
            .is_some_and(|ips| ips.iter().any(|(i, _)| *i == ip))
    }

    /// Records what a GET of `node` just showed, ahead of the watch (as the newest listing).
    pub(crate) fn observed(&self, node: &Node) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        let mut index = self.lock();
        index.seq += 1;
        let since = index.seq;
        index.set(name, addresses(node), since);
    }

    fn apply(&self, node: &Node, first_list: bool) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        let mut index = self.lock();
        let since = if first_list {
            0
        } else {
            index.seq += 1;
            index.seq
        };
        index.set(name, addresses(node), since);
    }

    fn delete(&self, name: &str) {
        self.lock().set(name, Vec::new(), 0);
    }

    /// After a full list: Nodes the index has but the list lacks are gone.
    fn keep_only(&self, listed: &std::collections::HashSet<String>) {
        let mut index = self.lock();
        let gone: Vec<String> = index
            .by_node
            .keys()
            .filter(|n| !listed.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            index.set(&name, Vec::new(), 0);
        }
    }

    /// Watches every Node until `stop`, keeping the index.
    pub(crate) async fn run(&self, client: kube::Client, stop: CancellationToken) {
        let nodes = kube::Api::<Node>::all(client);
        let mut events = watcher::watcher(nodes, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut listing: Option<std::collections::HashSet<String>> = None;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                e = events.next() => match e {
                    Some(e) => e,
                    None => return,
                },
            };
            match event {
                Ok(Event::Init) => listing = Some(Default::default()),
                Ok(Event::InitApply(n)) => {
                    // Only the very first list has no history: later lists come after a
                    // watch gap, so what they show anew is newer than what was known.
                    self.apply(&n, !self.is_synced());
                    if let (Some(l), Some(name)) = (listing.as_mut(), n.metadata.name) {
                        l.insert(name);
                    }
                }
                Ok(Event::InitDone) => {
                    if let Some(l) = listing.take() {
                        self.keep_only(&l);
                    }
                    self.synced.store(true, Ordering::Release);
                }
                Ok(Event::Apply(n)) => self.apply(&n, false),
                Ok(Event::Delete(n)) => {
                    if let Some(name) = n.metadata.name.as_deref() {
                        self.delete(name);
                    }
                }
                Err(e) => warn!(error = %e, "node address watch failed; retrying with back-off"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn node(name: &str, addrs: &[(&str, &str)]) -> Node {
        let addrs: Vec<_> = addrs
            .iter()
            .map(|(t, a)| serde_json::json!({"type": t, "address": a}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "status": {"addresses": addrs}
        }))
        .unwrap()
    }

    #[test]
    fn the_first_internal_lister_owns_an_ip_and_hostnames_are_no_ips() {
        let a = NodeAddresses::default();
        a.apply(
            &node(
                "victim",
                &[("InternalIP", "10.0.0.5"), ("Hostname", "10.0.0.9")],
            ),
            true,
        );
        a.apply(&node("other", &[("InternalIP", "10.0.0.6")]), true);
        assert_eq!(a.owner(ip("10.0.0.5")), Owner::Node("victim".into()));
        assert_eq!(a.owner(ip("10.0.0.9")), Owner::Nobody, "a Hostname entry");
        // The attacker adds the victim's address (and keeps its own) later.
        a.apply(
            &node(
                "attacker",
                &[("InternalIP", "10.0.0.7"), ("InternalIP", "10.0.0.5")],
            ),
            false,
        );
        assert_eq!(a.owner(ip("10.0.0.5")), Owner::Node("victim".into()));
        assert!(a.lists("attacker", ip("10.0.0.5")));
        // An ExternalIP never outranks an InternalIP, whatever its age.
        a.apply(&node("ext", &[("ExternalIP", "10.0.0.6")]), true);
        assert_eq!(a.owner(ip("10.0.0.6")), Owner::Node("other".into()));
        // The victim goes: the next lister owns it.
        a.delete("victim");
        assert_eq!(a.owner(ip("10.0.0.5")), Owner::Node("attacker".into()));
    }

    #[test]
    fn listers_of_one_first_list_contest_an_ip_until_one_drops_it() {
        let a = NodeAddresses::default();
        a.apply(&node("a", &[("InternalIP", "10.0.0.5")]), true);
        a.apply(&node("b", &[("InternalIP", "::ffff:10.0.0.5")]), true);
        assert_eq!(
            a.owner(ip("10.0.0.5")),
            Owner::Contested(vec!["a".into(), "b".into()])
        );
        a.apply(&node("b", &[("InternalIP", "10.0.0.6")]), false);
        assert_eq!(a.owner(ip("10.0.0.5")), Owner::Node("a".into()));
        // An unchanged address keeps its age through an update.
        a.apply(
            &node(
                "a",
                &[("InternalIP", "10.0.0.5"), ("InternalIP", "10.0.0.8")],
            ),
            false,
        );
        a.apply(&node("c", &[("InternalIP", "10.0.0.5")]), false);
        assert_eq!(a.owner(ip("10.0.0.5")), Owner::Node("a".into()));
        let listed = ["c".to_owned()].into_iter().collect();
        a.keep_only(&listed);
        assert_eq!(a.owner(ip("10.0.0.5")), Owner::Node("c".into()));
        assert!(!a.lists("a", ip("10.0.0.8")));
    }
}
