//! The watch caches every reconcile reads (KubeEdge reads the API server directly on every
//! reconcile: each pod event lists the edge nodes, each reconcile lists all bindings).

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::PartialObjectMeta;
use kubeedge_api::policy::ServiceAccountAccess;
use kubeedge_api::watch::{self, Cache, CacheWriter};

/// Read side of every cache (cheap to clone).
#[derive(Debug, Clone)]
pub(crate) struct Caches {
    pub(crate) accesses: Cache<ServiceAccountAccess>,
    pub(crate) accounts: Cache<ServiceAccount>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) nodes: Cache<PartialObjectMeta<Node>>,
    pub(crate) roles: Cache<Role>,
    pub(crate) cluster_roles: Cache<ClusterRole>,
    pub(crate) bindings: Cache<RoleBinding>,
    pub(crate) cluster_bindings: Cache<ClusterRoleBinding>,
}

/// Write side, owned by the watch task.
#[derive(Debug)]
pub(crate) struct Writers {
    pub(crate) accesses: CacheWriter<ServiceAccountAccess>,
    pub(crate) accounts: CacheWriter<ServiceAccount>,
    pub(crate) pods: CacheWriter<Pod>,
    pub(crate) nodes: CacheWriter<PartialObjectMeta<Node>>,
    pub(crate) roles: CacheWriter<Role>,
    pub(crate) cluster_roles: CacheWriter<ClusterRole>,
    pub(crate) bindings: CacheWriter<RoleBinding>,
    pub(crate) cluster_bindings: CacheWriter<ClusterRoleBinding>,
}

/// Empty caches.
pub(crate) fn new() -> (Writers, Caches) {
    let (accesses_w, accesses) = watch::cache();
    let (accounts_w, accounts) = watch::cache();
    let (pods_w, pods) = watch::cache();
    let (nodes_w, nodes) = watch::cache();
    let (roles_w, roles) = watch::cache();
    let (cluster_roles_w, cluster_roles) = watch::cache();
    let (bindings_w, bindings) = watch::cache();
    let (cluster_bindings_w, cluster_bindings) = watch::cache();
    (
        Writers {
            accesses: accesses_w,
            accounts: accounts_w,
            pods: pods_w,
            nodes: nodes_w,
            roles: roles_w,
            cluster_roles: cluster_roles_w,
            bindings: bindings_w,
            cluster_bindings: cluster_bindings_w,
        },
        Caches {
            accesses,
            accounts,
            pods,
            nodes,
            roles,
            cluster_roles,
            bindings,
            cluster_bindings,
        },
    )
}

impl Caches {
    /// Whether every cache has listed once (before that a binding list could be partial, and
    /// a partial list pushed to an edge takes permissions away there).
    pub(crate) fn ready(&self) -> bool {
        self.accesses.is_ready()
            && self.accounts.is_ready()
            && self.pods.is_ready()
            && self.nodes.is_ready()
            && self.roles.is_ready()
            && self.cluster_roles.is_ready()
            && self.bindings.is_ready()
            && self.cluster_bindings.is_ready()
    }

    /// Resolves once [`Caches::ready`].
    pub(crate) async fn wait_ready(&self) {
        self.accesses.wait_ready().await;
        self.accounts.wait_ready().await;
        self.pods.wait_ready().await;
        self.nodes.wait_ready().await;
        self.roles.wait_ready().await;
        self.cluster_roles.wait_ready().await;
        self.bindings.wait_ready().await;
        self.cluster_bindings.wait_ready().await;
    }
}
