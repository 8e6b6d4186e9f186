//! The decision on the DeviceStatus writes made for an edge node's twin and state reports,
//! taken on the request itself ([`kubeedge_api::authz`]): a node writes only the status of a
//! Device bound to it (`spec.nodeName`).
//!
//! The Node authorizer does not know Devices, so the cluster cannot decide these writes for a
//! node: they are made with cloudcore's identity once this policy allowed them, and no RBAC
//! grant to `system:nodes` is needed (one would let every node write every Device's status
//! through any path that writes as the node).

use std::sync::Arc;

use kube::Resource;
use kube::api::GetParams;
use kubeedge_api::authz::{Act, EdgeRequest, Policy};
use kubeedge_api::devices::{Device, GROUP};
use kubeedge_api::watch::{Cache, key};

use crate::authz::{Refusal, decide};

/// The node policy of the twin and state handlers.
#[derive(Clone)]
pub(crate) struct DevicePolicy {
    devices: Cache<Device>,
    /// cloudcore's identity, for a Device the cache has not listed yet.
    lookup: kube::Client,
}

impl std::fmt::Debug for DevicePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePolicy").finish_non_exhaustive()
    }
}

impl DevicePolicy {
    pub(crate) fn new(devices: Cache<Device>, lookup: kube::Client) -> Self {
        DevicePolicy { devices, lookup }
    }

    /// The Device `namespace/name`: from the cache, or, before it has listed, read once.
    async fn device(&self, namespace: &str, name: &str) -> Option<Arc<Device>> {
        if let Some(d) = self.devices.get(&key(Some(namespace), name)) {
            return Some(d);
        }
        if self.devices.is_ready() {
            return None;
        }
        let request = kube::core::Request::new(Device::url_path(&(), Some(namespace)))
            .get(name, &GetParams::default())
            .ok()?;
        self.lookup
            .request::<Device>(request)
            .await
            .ok()
            .map(Arc::new)
    }
}

impl Policy for DevicePolicy {
    type Error = Refusal;

    async fn decide(&self, r: &EdgeRequest<'_>) -> Result<Act, Refusal> {
        let i = r.info();
        let writable = i.is(GROUP, "devicestatuses")
            && i.verb == "patch"
            && i.subresource.is_empty()
            && !i.namespace.is_empty()
            && !i.name.is_empty();
        if !writable {
            return Err(Refusal::NotBound {
                namespace: i.namespace.clone(),
                name: i.name.clone(),
                why: format!("no rule allows {i}"),
            });
        }
        let device = self.device(&i.namespace, &i.name).await;
        decide(r.node(), &i.namespace, &i.name, device)?;
        Ok(Act::Cloudcore)
    }
}
