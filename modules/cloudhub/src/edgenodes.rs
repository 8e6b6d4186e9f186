//! The edge nodes the cluster has, remembered across restarts in ConfigMap
//! `kubeedge/edgenodes` (key: node name, value: `<uid> <creation time, unix seconds>`), so
//! that a Node deleted while no cloudcore was running, or deleted and created again, is
//! noticed at the next start: its name is in the table but not in the first full Node list
//! (or is there with another UID).
//!
//! A node is remembered once its Node carries the edge label or it has a session here; it is
//! forgotten when its deletion has been turned into a revocation. The table therefore holds
//! the live edge nodes, about 50 bytes plus the name each (some 15,000 nodes of 20-character
//! names before the 1 MiB object limit; a write past it fails, is logged and counted, and that
//! node is then only protected by the watch of a running cloudcore).

use std::collections::{BTreeMap, HashSet};

use kube::api::ObjectMeta;
use tracing::warn;

use crate::error::Result;
use crate::kv;

/// The ConfigMap (namespace `kubeedge`) holding the edge nodes.
pub const EDGE_NODES: &str = "edgenodes";

/// One Node object: its UID and creation time (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incarnation {
    pub(crate) uid: String,
    pub(crate) created: i64,
}

impl Incarnation {
    /// The incarnation a Node's metadata describes (`None` without a UID).
    pub(crate) fn of(meta: &ObjectMeta) -> Option<Self> {
        Some(Incarnation {
            uid: meta.uid.clone().filter(|u| !u.is_empty())?,
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
        })
    }

    fn encode(&self) -> String {
        format!("{} {}", self.uid, self.created)
    }

    fn decode(text: &str) -> Option<Self> {
        let (uid, created) = text.trim().split_once(' ')?;
        Some(Incarnation {
            uid: uid.to_owned(),
            created: created.trim().parse().ok()?,
        })
    }
}

/// The remembered edge nodes, as stored plus the writes that failed (retried by
/// [`EdgeNodes::flush`]).
#[derive(Debug, Default)]
pub(crate) struct EdgeNodes {
    known: BTreeMap<String, Incarnation>,
    unwritten: HashSet<String>,
}

impl EdgeNodes {
    /// Reads the stored table (empty when the ConfigMap does not exist). Unreadable values
    /// are skipped with a warning.
    pub(crate) async fn load(client: &kube::Client) -> Result<Self> {
        let mut known = BTreeMap::new();
        for (name, value) in kv::read(client, EDGE_NODES).await? {
            match Incarnation::decode(&value) {
                Some(inc) => {
                    known.insert(name, inc);
                }
                None => {
                    warn!(node = %name, value = %value, "kubeedge/{EDGE_NODES}: unreadable entry ignored")
                }
            }
        }
        Ok(EdgeNodes {
            known,
            unwritten: HashSet::new(),
        })
    }

    /// The remembered incarnation of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Incarnation> {
        self.known.get(name)
    }

    /// Every remembered node.
    pub(crate) fn snapshot(&self) -> Vec<(String, Incarnation)> {
        self.known
            .iter()
            .map(|(n, i)| (n.clone(), i.clone()))
            .collect()
    }

    /// Remembers `name` as `inc` (written only when it changed); false when the write failed
    /// (it is retried by [`EdgeNodes::flush`]).
    pub(crate) async fn remember(
        &mut self,
        client: &kube::Client,
        name: &str,
        inc: Incarnation,
    ) -> bool {
        if self.known.get(name) == Some(&inc) {
            return true;
        }
        self.known.insert(name.to_owned(), inc);
        self.write(client, name).await
    }

    /// Forgets `name`; false when the write failed (retried by [`EdgeNodes::flush`]).
    pub(crate) async fn forget(&mut self, client: &kube::Client, name: &str) -> bool {
        if self.known.remove(name).is_none() && !self.unwritten.contains(name) {
            return true;
        }
        self.write(client, name).await
    }

    /// Remembers `name` as `inc` without writing it; the next [`EdgeNodes::flush`] does, with
    /// every other noted change in a few requests (a full Node list of thousands of nodes would
    /// otherwise cost a request each before edges are admitted).
    pub(crate) fn note(&mut self, name: &str, inc: Incarnation) {
        if self.known.get(name) != Some(&inc) {
            self.known.insert(name.to_owned(), inc);
            self.unwritten.insert(name.to_owned());
        }
    }

    /// Forgets `name` without writing it; the next [`EdgeNodes::flush`] does.
    pub(crate) fn note_forgotten(&mut self, name: &str) {
        if self.known.remove(name).is_some() {
            self.unwritten.insert(name.to_owned());
        }
    }

    async fn write(&mut self, client: &kube::Client, name: &str) -> bool {
        let value = self.known.get(name).map(Incarnation::encode);
        match kv::set(client, EDGE_NODES, name, value.as_deref()).await {
            Ok(()) => {
                self.unwritten.remove(name);
                true
            }
            Err(e) => {
                warn!(node = name, error = %e, "kubeedge/{EDGE_NODES}: write failed; retried at the next resync");
                self.unwritten.insert(name.to_owned());
                false
            }
        }
    }

    /// Writes every noted change and what failed before, [`FLUSH_BATCH`] keys a request (a
    /// batch that fails stays unwritten for the next flush and costs no other batch); the
    /// number still unwritten.
    pub(crate) async fn flush(&mut self, client: &kube::Client) -> usize {
        let mut pending: Vec<String> = self.unwritten.iter().cloned().collect();
        pending.sort_unstable();
        for batch in pending.chunks(FLUSH_BATCH) {
            let entries: BTreeMap<String, Option<String>> = batch
                .iter()
                .map(|n| (n.clone(), self.known.get(n).map(Incarnation::encode)))
                .collect();
            match kv::set_many(client, EDGE_NODES, &entries).await {
                Ok(()) => {
                    for n in batch {
                        self.unwritten.remove(n);
                    }
                }
                Err(e) => {
                    warn!(nodes = batch.len(), error = %e, "kubeedge/{EDGE_NODES}: write failed; retried at the next resync");
                }
            }
        }
        self.unwritten.len()
    }
}

/// Keys written by one request of [`EdgeNodes::flush`]: some 20 KiB of patch at 256 keys.
const FLUSH_BATCH: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnations_round_trip_and_bad_values_are_refused() {
        let inc = Incarnation {
            uid: "5c1b7a0e-1f0e-4a4e-9f43-2f3b8d0c9a11".into(),
            created: 1_700_000_000,
        };
        assert_eq!(Incarnation::decode(&inc.encode()), Some(inc));
        for bad in ["", "uid", "uid soon", " 12"] {
            assert_eq!(Incarnation::decode(bad), None, "{bad:?}");
        }
    }
}
