//! One reconcile: what a ServiceAccountAccess must hold and which edge nodes must hold it, the
//! writes that make it so, and the messages that tell the nodes.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use beehive::{Content, Endpoint, Message};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::names::{CLOUDHUB, GROUP_RESOURCE, POLICYCONTROLLER};
use kubeedge_api::policy::{AccessSpec, AccessStatus, RESOURCE_TYPE, ServiceAccountAccess};
use tracing::{debug, info, warn};

use crate::caches::Caches;
use crate::metrics::PolicyControllerMetrics;
use crate::subjects::{Account, Found, spec};

/// The service account a pod runs as (`default` when the pod names none).
pub(crate) fn pod_account(pod: &Pod) -> Option<(String, String)> {
    let ns = pod.metadata.namespace.clone()?;
    let spec = pod.spec.as_ref()?;
    let name = spec
        .service_account_name
        .clone()
        .or_else(|| spec.service_account.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    Some((ns, name))
}

/// What reconciles need.
#[derive(Clone)]
pub(crate) struct Reconciler {
    pub(crate) client: kube::Client,
    pub(crate) caches: Caches,
    pub(crate) endpoint: Endpoint,
    pub(crate) metrics: PolicyControllerMetrics,
    pub(crate) sent: Arc<Sent>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler").finish_non_exhaustive()
    }
}

impl Reconciler {
    /// The edge nodes running pods of `namespace/account` that are not being deleted, sorted.
    pub(crate) fn nodes_of(&self, namespace: &str, account: &str) -> Vec<String> {
        let nodes: BTreeSet<String> = self
            .caches
            .pods
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && pod_account(p).is_some_and(|(ns, sa)| ns == namespace && sa == account)
            })
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .filter(|n| self.caches.nodes.contains(n))
            .collect();
        nodes.into_iter().collect()
    }

    /// The spec for `namespace/account` from the caches; bindings whose role is missing are
    /// left out (Kubernetes RBAC ignores them; KubeEdge stops collecting there and pushes a
    /// partial list).
    fn desired(
        &self,
        namespace: &str,
        sa: &k8s_openapi::api::core::v1::ServiceAccount,
    ) -> AccessSpec {
        let account = Account {
            namespace: namespace.to_owned(),
            name: sa.name_any(),
        };
        let c = &self.caches;
        let cluster_rules = |name: &str| {
            c.cluster_roles
                .get(name)
                .map(|r| r.rules.clone().unwrap_or_default())
        };
        let cluster_bindings = c
            .cluster_bindings
            .filter(|b| account.in_subjects(b.subjects.as_ref(), None))
            .iter()
            .filter_map(|b| {
                Some(Found {
                    rules: cluster_rules(&b.role_ref.name)?,
                    binding: kubeedge_api::policy::EmbeddedBinding {
                        metadata: kubeedge_api::policy::EmbeddedMeta::of(&b.metadata),
                        subjects: b.subjects.clone().unwrap_or_default(),
                        role_ref: b.role_ref.clone(),
                    },
                })
            })
            .collect();
        let role_bindings = c
            .bindings
            .filter(|b| {
                b.metadata.namespace.as_deref() == Some(namespace)
                    && account.in_subjects(b.subjects.as_ref(), Some(namespace))
            })
            .iter()
            .filter_map(|b| {
                let rules = match b.role_ref.kind.as_str() {
                    "Role" => c
                        .roles
                        .get_by(Some(namespace), &b.role_ref.name)
                        .map(|r| r.rules.clone().unwrap_or_default()),
                    _ => cluster_rules(&b.role_ref.name),
                }?;
                Some(Found {
                    rules,
                    binding: kubeedge_api::policy::EmbeddedBinding {
                        metadata: kubeedge_api::policy::EmbeddedMeta::of(&b.metadata),
                        subjects: b.subjects.clone().unwrap_or_default(),
                        role_ref: b.role_ref.clone(),
                    },
                })
            })
            .collect();
        spec(sa, role_bindings, cluster_bindings)
    }

    /// Brings `namespace/name` to what the caches say, then tells each edge node what it
    /// lacks. API errors are returned (the key is tried again after a back-off).
    ///
    /// What a node is sent depends on what this replica sent it ([`Sent`]), not on the stored
    /// node list: with several replicas every one reconciles, the first writes, and the one
    /// holding a node's session must still send it (cloudhub drops what it sends to nodes held
    /// elsewhere, and what a node already acknowledged).
    pub(crate) async fn reconcile(&self, key: &str) -> Result<(), kube::Error> {
        let Some((namespace, name)) = key.split_once('/') else {
            return Ok(());
        };
        let stored = self.caches.accesses.get(key);
        let account = stored
            .as_ref()
            .map(|s| s.spec.service_account.metadata.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| name.to_owned());
        let sa = self
            .caches
            .accounts
            .get_by(Some(namespace), &account)
            .filter(|sa| sa.metadata.deletion_timestamp.is_none());
        let nodes = self.nodes_of(namespace, &account);
        let api: Api<ServiceAccountAccess> = Api::namespaced(self.client.clone(), namespace);
        let (Some(sa), false) = (sa, nodes.is_empty()) else {
            // The account is gone, or no edge node runs it any more.
            if let Some(saa) = stored
                .as_ref()
                .filter(|s| s.metadata.deletion_timestamp.is_none())
            {
                info!(key, "service account access no longer needed: deleting it");
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
                let mut told = status_nodes(saa);
                told.extend(self.sent.nodes(key));
                self.send(saa, "delete", &dedup(told)).await;
            } else if let Some(last) = self.sent.last(key) {
                // Deleted by another replica: the nodes this one told learn it from it.
                self.send(&last, "delete", &self.sent.nodes(key)).await;
            }
            self.sent.forget(key);
            return Ok(());
        };
        let desired = self.desired(namespace, &sa);
        let status = AccessStatus {
            node_list: nodes.clone(),
        };
        let current = match &stored {
            None => {
                let saa = ServiceAccountAccess {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(namespace.to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: desired,
                    status: None,
                };
                let mut created = match api.create(&PostParams::default(), &saa).await {
                    Ok(created) => created,
                    // Another replica was first: its object's watch event brings this key
                    // back, with the object in the cache.
                    Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                    Err(e) => return Err(e),
                };
                created.status = Some(status);
                let written = api
                    .replace_status(name, &PostParams::default(), &created)
                    .await?;
                info!(key, nodes = ?nodes, "service account access created");
                written
            }
            Some(saa) if saa.metadata.deletion_timestamp.is_some() => return Ok(()),
            Some(saa) => {
                let mut current = (**saa).clone();
                if current.spec != desired {
                    debug!(key, "service account access changed");
                    current.spec = desired;
                    current.metadata.managed_fields = None;
                    current = api.replace(name, &PostParams::default(), &current).await?;
                }
                if status_nodes(&current) != nodes {
                    current.status = Some(status);
                    current = api
                        .replace_status(name, &PostParams::default(), &current)
                        .await?;
                }
                current
            }
        };
        // Nodes that held it and no longer should.
        let mut gone = status_nodes(stored_or(&stored, &current));
        gone.extend(self.sent.nodes(key));
        let gone: Vec<String> = dedup(gone)
            .into_iter()
            .filter(|n| !nodes.contains(n))
            .collect();
        let last = self.sent.last(key).unwrap_or_else(|| current.clone());
        self.send(&last, "delete", &gone).await;
        self.sent.drop_nodes(key, &gone);
        // Nodes that lack this version of the spec: a first send is an insert, a newer spec
        // an update (a status change alone sends nothing).
        let (insert, update) = self.sent.due(key, &current, &nodes);
        self.send(&current, "insert", &insert).await;
        self.send(&current, "update", &update).await;
        self.sent.record(key, &current, &nodes);
        Ok(())
    }

    /// Sends `saa` to each of `nodes` (source `policycontroller`, group `resource`, resource
    /// `node/<node>/<ns>/serviceaccountaccess/<name>`, the object's resource version), with an
    /// empty status, and `apiVersion`/`kind` set so the sync loop can re-send it.
    async fn send(&self, saa: &ServiceAccountAccess, operation: &'static str, nodes: &[String]) {
        if nodes.is_empty() {
            return;
        }
        let mut content = saa.clone();
        content.status = Some(AccessStatus::default());
        content.metadata.managed_fields = None;
        let ns = saa.namespace().unwrap_or_default();
        let name = saa.name_any();
        let rv = saa.meta().resource_version.clone().unwrap_or_default();
        let Ok(content) = Content::json(&content) else {
            return;
        };
        for node in nodes {
            let msg = Message::new()
                .with_route(
                    POLICYCONTROLLER,
                    GROUP_RESOURCE,
                    format!("node/{node}/{ns}/{RESOURCE_TYPE}/{name}"),
                    operation,
                )
                .with_resource_version(rv.clone())
                .with_content(content.clone());
            match self.endpoint.send(CLOUDHUB, msg).await {
                Ok(()) => self.metrics.sent(operation),
                Err(e) => warn!(node, %e, "service account access not sent"),
            }
        }
    }
}

fn stored_or<'a>(
    stored: &'a Option<std::sync::Arc<ServiceAccountAccess>>,
    current: &'a ServiceAccountAccess,
) -> &'a ServiceAccountAccess {
    stored.as_deref().unwrap_or(current)
}

fn dedup(mut nodes: Vec<String>) -> Vec<String> {
    nodes.sort();
    nodes.dedup();
    nodes
}

/// What this replica sent, per access: the object last sent (the content of a later delete)
/// and, per node, the spec generation it was sent.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    by_key: Mutex<HashMap<String, SentAccess>>,
}

#[derive(Debug)]
struct SentAccess {
    last: ServiceAccountAccess,
    nodes: HashMap<String, i64>,
}

fn generation(saa: &ServiceAccountAccess) -> i64 {
    saa.metadata.generation.unwrap_or_default()
}

impl Sent {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, SentAccess>> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn nodes(&self, key: &str) -> Vec<String> {
        self.map()
            .get(key)
            .map(|s| s.nodes.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn last(&self, key: &str) -> Option<ServiceAccountAccess> {
        self.map().get(key).map(|s| s.last.clone())
    }

    fn forget(&self, key: &str) {
        self.map().remove(key);
    }

    fn drop_nodes(&self, key: &str, nodes: &[String]) {
        if let Some(s) = self.map().get_mut(key) {
            for n in nodes {
                s.nodes.remove(n);
            }
        }
    }

    /// Of `nodes`, those never sent `current` (a new object, or a new node) and those sent an
    /// older spec.
    fn due(
        &self,
        key: &str,
        current: &ServiceAccountAccess,
        nodes: &[String],
    ) -> (Vec<String>, Vec<String>) {
        let map = self.map();
        let sent = map
            .get(key)
            .filter(|s| s.last.metadata.uid == current.metadata.uid);
        let (mut insert, mut update) = (Vec::new(), Vec::new());
        for node in nodes {
            match sent.and_then(|s| s.nodes.get(node)) {
                None => insert.push(node.clone()),
                Some(g) if *g != generation(current) => update.push(node.clone()),
                Some(_) => {}
            }
        }
        (insert, update)
    }

    fn record(&self, key: &str, current: &ServiceAccountAccess, nodes: &[String]) {
        let mut map = self.map();
        let entry = map.entry(key.to_owned()).or_insert_with(|| SentAccess {
            last: current.clone(),
            nodes: HashMap::new(),
        });
        if entry.last.metadata.uid != current.metadata.uid {
            entry.nodes.clear();
        }
        entry.last = current.clone();
        for node in nodes {
            entry.nodes.insert(node.clone(), generation(current));
        }
    }
}

fn status_nodes(saa: &ServiceAccountAccess) -> Vec<String> {
    saa.status
        .as_ref()
        .map(|s| s.node_list.clone())
        .unwrap_or_default()
}
