//! Which cloudcore replica holds which edge node, when several replicas serve the edge together
//! (active-active, behind one load balancer).
//!
//! Every replica serves the edges connected to it. The replica holding a node's session is the
//! only one that delivers to it, writes its ObjectSync records and re-sends what it missed;
//! the others leave the node alone. Cluster-wide, the holder is named by the Node's
//! `cloudcore` annotation (the value is the holder's own address), which the holder writes
//! when the node connects. The annotation was chosen over a Lease per node because KubeEdge
//! already writes it (operators and tools read it), it costs no extra object per node, and a
//! stale value is harmless: a replica only *refrains* from writing because of it, and the
//! replica a node connects to takes over from the records whatever the annotation says.
//!
//! [`Ownership`] is the one view every module of a replica shares:
//! * cloudhub calls [`Ownership::hold`] / [`Ownership::release`] as sessions start and end;
//! * [`Ownership::follow`] keeps the cluster-wide view from a metadata watch of Nodes;
//! * a module asks [`Ownership::holds`] (this replica holds the node now) and
//!   [`Ownership::held_elsewhere`] (another replica does, as far as the annotation says);
//! * synccontroller asks [`Ownership::take_over`] when a node connects, to learn whether it
//!   came from another replica (and may have missed changes while it was away from all).
//!
//! ```
//! use kubeedge_api::replicas::Ownership;
//! let me = Ownership::new("10.0.0.1");
//! me.observe("edge-1", Some("10.0.0.2"));
//! assert!(me.held_elsewhere("edge-1"));
//! me.hold("edge-1"); // edge-1 reconnected here
//! assert!(me.holds("edge-1") && !me.held_elsewhere("edge-1"));
//! assert_eq!(me.take_over("edge-1").as_deref(), Some("10.0.0.2"));
//! assert_eq!(me.take_over("edge-1"), None, "reported once");
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

/// The Node annotation naming the replica that holds the node's session.
pub const CLOUDCORE_ANNOTATION: &str = "cloudcore";

/// One replica's view of node ownership. Cheap to clone; all clones share the view.
#[derive(Clone)]
pub struct Ownership {
    inner: Arc<Inner>,
}

struct Inner {
    me: String,
    state: Mutex<State>,
    /// True once a first list of Nodes was applied.
    listed: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    /// Nodes with a session on this replica.
    held: HashSet<String>,
    /// Node → the replica its annotation names (only nodes with the annotation).
    holders: HashMap<String, String>,
    /// Nodes that connected here while the annotation named another replica, with that
    /// replica; taken by [`Ownership::take_over`].
    moved: HashMap<String, String>,
    /// Nodes listed in the running relist (between `Init` and `InitDone`).
    relist: Option<HashMap<String, String>>,
}

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Ownership")
            .field("me", &self.inner.me)
            .field("held", &s.held.len())
            .field("annotated", &s.holders.len())
            .finish()
    }
}

impl Ownership {
    /// The view of the replica whose address is `me` (the value its annotations carry).
    pub fn new(me: impl Into<String>) -> Self {
        Ownership {
            inner: Arc::new(Inner {
                me: me.into(),
                state: Mutex::new(State::default()),
                listed: watch::channel(false).0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This replica's address.
    pub fn me(&self) -> &str {
        &self.inner.me
    }

    /// A session of `node` started here. Remembers where the node came from when the
    /// annotation named another replica.
    pub fn hold(&self, node: &str) {
        let mut s = self.state();
        s.held.insert(node.to_owned());
        match s.holders.get(node) {
            Some(other) if *other != self.inner.me => {
                let other = other.clone();
                s.moved.insert(node.to_owned(), other);
            }
            _ => {}
        }
    }

    /// The session of `node` here ended (not replaced by a newer one).
    pub fn release(&self, node: &str) {
        self.state().held.remove(node);
    }

    /// True while this replica holds a session of `node`.
    pub fn holds(&self, node: &str) -> bool {
        self.state().held.contains(node)
    }

    /// True when this replica does not hold `node` and its annotation names another replica:
    /// what happens to the node is that replica's business.
    pub fn held_elsewhere(&self, node: &str) -> bool {
        let s = self.state();
        !s.held.contains(node) && s.holders.get(node).is_some_and(|h| *h != self.inner.me)
    }

    /// The replica the annotation of `node` names, if any.
    pub fn holder(&self, node: &str) -> Option<String> {
        self.state().holders.get(node).cloned()
    }

    /// Nodes held here now.
    pub fn held(&self) -> usize {
        self.state().held.len()
    }

    /// The replica `node` came from, once, if it connected here while held by another.
    pub fn take_over(&self, node: &str) -> Option<String> {
        self.state().moved.remove(node)
    }

    /// Records the annotation of `node` (`None`: it has none).
    pub fn observe(&self, node: &str, holder: Option<&str>) {
        let mut s = self.state();
        match holder.filter(|h| !h.is_empty()) {
            Some(h) => {
                if s.holders.get(node).map(String::as_str) != Some(h) {
                    s.holders.insert(node.to_owned(), h.to_owned());
                }
            }
            None => {
                s.holders.remove(node);
            }
        }
    }

    /// Forgets a deleted node.
    pub fn forget(&self, node: &str) {
        let mut s = self.state();
        s.holders.remove(node);
        s.moved.remove(node);
    }

    /// Applies one event of a Node metadata watch.
    pub fn apply(&self, event: Event<PartialObjectMeta<Node>>) {
        let annotated = |n: &PartialObjectMeta<Node>| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let holder = n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CLOUDCORE_ANNOTATION))
                .cloned();
            (name, holder)
        };
        match event {
            Event::Apply(n) => {
                let (name, holder) = annotated(&n);
                self.observe(&name, holder.as_deref());
            }
            Event::Delete(n) => self.forget(&annotated(&n).0),
            Event::Init => self.state().relist = Some(HashMap::new()),
            Event::InitApply(n) => {
                let (name, holder) = annotated(&n);
                if let (Some(list), Some(h)) = (self.state().relist.as_mut(), holder) {
                    list.insert(name, h);
                }
            }
            Event::InitDone => {
                let mut s = self.state();
                if let Some(list) = s.relist.take() {
                    s.holders = list;
                }
                drop(s);
                self.inner.listed.send_replace(true);
            }
        }
    }

    /// Resolves once the cluster-wide view holds a first list of Nodes ([`Ownership::follow`]
    /// running). Until then [`Ownership::held_elsewhere`] knows no other replica's nodes, so a
    /// replica waits for this before it handles messages.
    pub async fn listed(&self) {
        let mut rx = self.inner.listed.subscribe();
        let _ = rx.wait_for(|listed| *listed).await;
    }

    /// Keeps the cluster-wide view current from a metadata-only watch of Nodes until `stop`.
    pub async fn follow(self, client: kube::Client, stop: CancellationToken) {
        let api = Api::<PartialObjectMeta<Node>>::all(client);
        let mut events = crate::watch::events(api, watcher::Config::default()).boxed();
        info!(me = %self.inner.me, "following node ownership");
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                e = events.next() => match e {
                    Some(e) => self.apply(e),
                    None => break,
                },
            }
        }
        debug!("node ownership watch ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, holder: Option<&str>) -> PartialObjectMeta<Node> {
        let mut n = PartialObjectMeta::<Node>::default();
        n.metadata.name = Some(name.into());
        if let Some(h) = holder {
            n.metadata.annotations = Some([(CLOUDCORE_ANNOTATION.into(), h.into())].into());
        }
        n
    }

    #[test]
    fn a_node_is_held_elsewhere_only_while_another_replica_is_named_and_it_is_not_here() {
        let o = Ownership::new("a");
        assert!(!o.held_elsewhere("n"), "no annotation: nobody's");
        o.observe("n", Some("a"));
        assert!(!o.held_elsewhere("n"), "named here");
        o.observe("n", Some("b"));
        assert!(o.held_elsewhere("n"));
        o.hold("n");
        assert!(
            !o.held_elsewhere("n"),
            "a session here wins over the annotation"
        );
        o.release("n");
        assert!(o.held_elsewhere("n"));
        o.forget("n");
        assert!(!o.held_elsewhere("n"));
    }

    #[test]
    fn a_takeover_is_reported_only_for_nodes_that_came_from_another_replica() {
        let o = Ownership::new("a");
        o.hold("fresh");
        assert_eq!(o.take_over("fresh"), None, "never annotated");
        o.observe("back", Some("a"));
        o.hold("back");
        assert_eq!(o.take_over("back"), None, "came back to the same replica");
        o.observe("moved", Some("b"));
        o.hold("moved");
        assert_eq!(o.take_over("moved").as_deref(), Some("b"));
        assert_eq!(o.take_over("moved"), None);
    }

    #[test]
    fn a_relist_replaces_the_view_and_a_delete_forgets() {
        let o = Ownership::new("a");
        o.apply(Event::Apply(node("gone", Some("b"))));
        o.apply(Event::Apply(node("kept", Some("b"))));
        for e in [
            Event::Init,
            Event::InitApply(node("kept", Some("c"))),
            Event::InitApply(node("plain", None)),
            Event::InitDone,
        ] {
            o.apply(e);
        }
        assert_eq!(o.holder("gone"), None);
        assert_eq!(o.holder("kept").as_deref(), Some("c"));
        assert!(
            *o.inner.listed.borrow(),
            "listed once the first list is done"
        );
        assert_eq!(o.holder("plain"), None);
        o.apply(Event::Delete(node("kept", Some("c"))));
        assert_eq!(o.holder("kept"), None);
    }
}
