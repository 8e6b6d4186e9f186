//! Which resource types the API server serves: resolved from its discovery documents on first
//! use, refreshed when a type is not found (so CRDs created later are found without a restart).
//!
//! Edges choose the group/versions they ask for, so only those the API server lists are ever
//! fetched and remembered (the list itself is read at most every few seconds): a made-up
//! group costs neither a discovery call nor memory, and what is remembered is bounded by the
//! cluster's API and by `maxDiscoveryEntries`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::core::ApiResource;
use kube::discovery::Scope;
use kubeedge_api::status::StatusError;

use crate::key::ResourceKey;

/// A group/version is asked again at most this often when a type is missing from it.
const REFRESH_MIN: Duration = Duration::from_secs(5);

/// A served resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceInfo {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// The verbs the API server serves for it.
    pub verbs: Vec<String>,
}

impl ResourceInfo {
    /// The message type segment of objects of this type: the kind, lower-cased.
    pub(crate) fn type_name(&self) -> String {
        self.resource.kind.to_lowercase()
    }

    pub(crate) fn serves(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

type Types = HashMap<String, Arc<ResourceInfo>>;

/// Discovery answers per group/version, shared by every request.
pub(crate) struct Resolver {
    client: kube::Client,
    cache: Mutex<HashMap<String, (Arc<Types>, Instant)>>,
    /// The group/versions the API server serves, and when they were listed.
    served: Mutex<Option<(Arc<HashSet<String>>, Instant)>>,
    max_entries: usize,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

fn not_found(key: &ResourceKey) -> StatusError {
    StatusError::new(
        404,
        "NotFound",
        format!(
            "the server could not find the requested resource ({} {})",
            key.api_version(),
            key.resource
        ),
    )
}

impl Resolver {
    /// A resolver remembering at most `max_entries` group/versions.
    pub(crate) fn new(client: kube::Client, max_entries: usize) -> Self {
        Resolver {
            client,
            cache: Mutex::new(HashMap::new()),
            served: Mutex::new(None),
            max_entries: max_entries.max(1),
        }
    }

    /// Group/versions remembered.
    pub(crate) fn len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether the API server serves `gv` (`v1`, `apps/v1`): from its group list, read again
    /// when `gv` is not in it and the list is older than [`REFRESH_MIN`].
    async fn serves(&self, gv: &str) -> Result<bool, StatusError> {
        let known = self
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((set, at)) = &known
            && (set.contains(gv) || at.elapsed() < REFRESH_MIN)
        {
            return Ok(set.contains(gv));
        }
        let core = self
            .client
            .list_core_api_versions()
            .await
            .map_err(|e| StatusError::from_kube(&e))?;
        let groups = self
            .client
            .list_api_groups()
            .await
            .map_err(|e| StatusError::from_kube(&e))?;
        let set: HashSet<String> = core
            .versions
            .into_iter()
            .chain(
                groups
                    .groups
                    .into_iter()
                    .flat_map(|g| g.versions.into_iter().map(|v| v.group_version)),
            )
            .collect();
        let served = set.contains(gv);
        *self.served.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Arc::new(set), Instant::now()));
        Ok(served)
    }

    /// The type `key` names: `404 NotFound` when the API server does not serve it,
    /// `500` when discovery fails.
    pub(crate) async fn resolve(
        &self,
        key: &ResourceKey,
    ) -> Result<Arc<ResourceInfo>, StatusError> {
        let gv = key.api_version();
        let cached = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.get(&gv).cloned()
        };
        if let Some((types, at)) = &cached {
            if let Some(info) = types.get(&key.resource) {
                return Ok(info.clone());
            }
            if at.elapsed() < REFRESH_MIN {
                return Err(not_found(key));
            }
        }
        if !self.serves(&gv).await? {
            return Err(not_found(key));
        }
        let types = Arc::new(self.fetch(key).await?);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if !cache.contains_key(&gv) && cache.len() >= self.max_entries {
            let oldest = cache
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                cache.remove(&k);
            }
        }
        cache.insert(gv, (types.clone(), Instant::now()));
        drop(cache);
        types
            .get(&key.resource)
            .cloned()
            .ok_or_else(|| not_found(key))
    }

    async fn fetch(&self, key: &ResourceKey) -> Result<Types, StatusError> {
        let gv = kube::core::GroupVersion::gv(&key.group, &key.version);
        let group = match kube::discovery::pinned_group(&self.client, &gv).await {
            Ok(group) => group,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Types::new()),
            Err(e) => return Err(StatusError::from_kube(&e)),
        };
        Ok(group
            .versioned_resources(&key.version)
            .into_iter()
            .map(|(resource, caps)| {
                let info = ResourceInfo {
                    namespaced: caps.scope == Scope::Namespaced,
                    verbs: caps.operations,
                    resource,
                };
                (info.resource.plural.clone(), Arc::new(info))
            })
            .collect())
    }
}
