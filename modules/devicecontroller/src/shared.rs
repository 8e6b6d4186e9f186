//! What the device downstream loop and the upstream handlers share: caches, the DeviceStatus
//! of each device, and the messages to cloudhub.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use beehive::constants::operation;
use beehive::{Content, Endpoint, Message};
use kube::api::{GetParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::client::NodeClient;
use kubeedge_api::devices::{Device, DeviceModel, DeviceStatus};
use kubeedge_api::names::{CLOUDHUB, DEVICECONTROLLER, GROUP_RESOURCE, GROUP_TWIN};
use kubeedge_api::status::StatusError;
use kubeedge_api::watch::{Cache, key};
use serde::Serialize;
use serde_json::json;
use tracing::{info, warn};

use crate::metrics::Denials;
use crate::policy::DevicePolicy;

/// Shared state.
pub(crate) struct Shared {
    /// Sends the DeviceStatus writes `policy` allowed for a node, and nothing else.
    pub(crate) kube: NodeClient,
    /// Decides the writes made for a node's reports.
    pub(crate) policy: DevicePolicy,
    /// cloudcore's own calls: DeviceStatus records and Device lookups.
    pub(crate) own: kube::Client,
    pub(crate) endpoint: Endpoint,
    pub(crate) devices: Cache<Device>,
    pub(crate) models: Cache<DeviceModel>,
    pub(crate) statuses: Cache<DeviceStatus>,
    /// The DeviceStatus as last written by this controller, which the watch may not have
    /// delivered yet; the newer of this and the cached copy is the base of the next write.
    pub(crate) written: Mutex<HashMap<String, Arc<DeviceStatus>>>,
    pub(crate) cache_wait: Duration,
    /// Refused edge requests, by kind.
    pub(crate) denials: Arc<Denials>,
    /// False once listing DeviceStatuses was refused (KubeEdge's ClusterRole grants none):
    /// Devices are then sent without one.
    pub(crate) statuses_permitted: Arc<AtomicBool>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("kube", &self.kube)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

fn newer(a: Option<Arc<DeviceStatus>>, b: Option<Arc<DeviceStatus>>) -> Option<Arc<DeviceStatus>> {
    let rv = |s: &DeviceStatus| {
        s.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match (a, b) {
        (Some(a), Some(b)) => Some(if rv(&b) > rv(&a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl Shared {
    /// Whether DeviceStatuses may be read and written (see `statuses_permitted`).
    pub(crate) fn statuses_permitted(&self) -> bool {
        self.statuses_permitted.load(Ordering::Relaxed)
    }

    /// The device's DeviceStatus: known, else read, else created (same name and namespace,
    /// controller owner reference to the Device). As cloudcore.
    pub(crate) async fn ensure_status(
        &self,
        device: &Device,
    ) -> Result<Arc<DeviceStatus>, StatusError> {
        let (ns, name) = (device.namespace().unwrap_or_default(), device.name_any());
        let k = key(Some(&ns), &name);
        let known = newer(self.statuses.get(&k), self.written_status(&k));
        if let Some(s) = known {
            return Ok(s);
        }
        let api = || kube::core::Request::new(DeviceStatus::url_path(&(), Some(&ns)));
        match self
            .own_request::<DeviceStatus>(api().get(&name, &GetParams::default()))
            .await
        {
            Ok(s) => return Ok(Arc::new(s)),
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
        let status = json!({
            "apiVersion": kubeedge_api::devices::API_VERSION,
            "kind": "DeviceStatus",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [{
                "apiVersion": kubeedge_api::devices::API_VERSION, "kind": "Device", "name": name,
                "uid": device.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true}]},
            "spec": {},
            "status": {},
        });
        let body = serde_json::to_vec(&status).map_err(|e| StatusError::internal(e.to_string()))?;
        match self
            .own_request::<DeviceStatus>(api().create(&PostParams::default(), body))
            .await
        {
            Ok(s) => {
                info!(device = %k, "DeviceStatus created");
                Ok(Arc::new(s))
            }
            // Created meanwhile (another writer): read it.
            Err(e) if e.code() == 409 => self
                .own_request::<DeviceStatus>(api().get(&name, &GetParams::default()))
                .await
                .map(Arc::new),
            Err(e) => Err(e),
        }
    }

    /// A request of cloudcore's own, as cloudcore.
    pub(crate) async fn own_request<T: serde::de::DeserializeOwned>(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, StatusError> {
        let request = request.map_err(|e| StatusError::bad_request(e.to_string()))?;
        self.own
            .request::<T>(request)
            .await
            .map_err(|e| StatusError::from_kube(&e))
    }

    fn written_status(&self, k: &str) -> Option<Arc<DeviceStatus>> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(k)
            .cloned()
    }

    /// Remembers a DeviceStatus this controller just wrote.
    pub(crate) fn remember(&self, status: DeviceStatus) {
        let k = key(status.metadata.namespace.as_deref(), &status.name_any());
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k, Arc::new(status));
    }

    /// Forgets a deleted device's written status.
    pub(crate) fn forget(&self, k: &str) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(k);
    }

    /// Sends to cloudhub; failures are logged.
    pub(crate) async fn send(&self, msg: Message) {
        let (resource, op) = (msg.route.resource.clone(), msg.route.operation.clone());
        if let Err(error) = self.endpoint.send(CLOUDHUB, msg).await {
            warn!(%resource, operation = %op, %error, "cannot send to cloudhub");
        }
    }
}

/// `{"id": "<ns>/<name>", "name", "description"}` of a membership message.
pub(crate) fn member(device: &Device) -> serde_json::Value {
    let mut m = json!({
        "id": key(device.namespace().as_deref(), &device.name_any()),
        "name": device.name_any(),
    });
    if let Some(d) = device.labels().get("description").filter(|d| !d.is_empty()) {
        m["description"] = d.clone().into();
    }
    m
}

/// `node/<node>/membership` `update`, group `twin` (no-ACK at cloudhub).
pub(crate) fn membership(
    node: &str,
    added: Option<Vec<serde_json::Value>>,
    removed: Option<Vec<serde_json::Value>>,
) -> Message {
    let content = json!({
        "event_id": beehive::new_id(),
        "timestamp": beehive::now_millis(),
        "added_devices": added,
        "removed_devices": removed,
    });
    Message::new()
        .with_route(
            DEVICECONTROLLER,
            GROUP_TWIN,
            format!("node/{node}/membership"),
            operation::UPDATE,
        )
        .with_content(Content::json(&content).unwrap_or_default())
}

/// A device or model message: `node/<node>/<ns>/<type>/<name>`, group `resource`, RV header.
pub(crate) fn object_message<K: Resource + Serialize>(
    node: &str,
    resource_type: &str,
    obj: &K,
    op: &str,
) -> Option<Message> {
    let resource = kubeedge_api::NodeResource::new(
        node,
        obj.meta().namespace.as_deref().unwrap_or_default(),
        resource_type,
        obj.meta().name.as_deref().unwrap_or_default(),
    )
    .build()
    .ok()?;
    let rv = obj.meta().resource_version.clone().unwrap_or_default();
    Some(
        Message::new()
            .with_route(DEVICECONTROLLER, GROUP_RESOURCE, resource, op)
            .with_content(Content::json(obj).ok()?)
            .with_resource_version(rv),
    )
}

/// The confirmation devicetwin waits for: `node/<node>/twin`, group `twin`, `"OK"`.
pub(crate) fn confirmation(req: &Message, node: &str) -> Message {
    Message::with_parent(req.header.id.clone())
        .with_route(
            DEVICECONTROLLER,
            GROUP_TWIN,
            format!("node/{node}/twin"),
            operation::RESPONSE,
        )
        .with_content(Content::string(beehive::constants::SUCCESS_CONTENT))
}
