//! Edge devicetwin → Kubernetes (docs/controllers.md#devicecontroller): twin and state reports
//! written to DeviceStatus, membership detail requests answered. A report is written only after
//! node authorization (`authz`) has allowed it.

use std::sync::Arc;

use beehive::constants::operation;
use beehive::{Content, Message};
use kube::api::{GetParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::authz::authorize;
use kubeedge_api::devices::{Device, DeviceStatus};
use kubeedge_api::names::{DEVICECONTROLLER, GROUP_TWIN};
use kubeedge_api::status::StatusError;
use kubeedge_api::watch::key;
use serde_json::json;
use tracing::{debug, warn};

use crate::authz::{Refusal, Request, classify, decide, refusal_answer};
use crate::request_kind::{Kind, UNKNOWN_KIND};
use crate::shared::{Shared, confirmation, member};
use crate::twins::{StateUpdate, TwinUpdate, merge_twins};

impl Shared {
    /// Handles one request; `false` when it was refused, failed or was dropped.
    pub(crate) async fn handle(&self, kind: Kind, msg: Message) -> bool {
        let result = match classify(&msg.route.resource) {
            Some(req) if req.kind == kind => match kind {
                Kind::Twin => self.twin_report(&msg, req).await,
                Kind::State => self.state_report(&msg, req).await,
                Kind::MembershipDetail => self.membership_detail(&msg, req).await,
            },
            _ => Err(StatusError::bad_request("not a request of this queue")),
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                debug!(kind = kind.name(), msg_id = %msg.header.id, resource = %msg.route.resource, error = %e, "device request not applied");
                false
            }
        }
    }

    /// Records a refusal of `msg`: a warning naming the node, kind, device (as sent), resource
    /// and reason, and the counter of its kind.
    pub(crate) fn record_refusal(
        &self,
        msg: &Message,
        kind: Option<Kind>,
        node: &str,
        device: &str,
        refusal: &Refusal,
    ) {
        self.denials.add(kind);
        warn!(
            node = %node,
            kind = kind.map_or(UNKNOWN_KIND, Kind::metric_name),
            device = %device,
            resource = %msg.route.resource,
            operation = %msg.route.operation,
            reason = %refusal,
            "edge request refused"
        );
    }

    /// The device `req` is about, when the requesting node may report on it; a refusal is
    /// recorded and answered here. Decided from the Device watch cache; only while the cache
    /// has not listed yet is a device it lacks read once from the API server (as cloudcore).
    async fn authorized_device(
        &self,
        msg: &Message,
        req: Request<'_>,
    ) -> Result<Arc<Device>, StatusError> {
        let refuse = |refusal: Refusal| {
            self.record_refusal(msg, Some(req.kind), req.node, req.device, &refusal);
            refusal
        };
        let (ns, name) = match req.device_ref() {
            Ok(found) => found,
            Err(refusal) => return Err(self.answer_refusal(msg, req, refuse(refusal)).await),
        };
        let device = match self.devices.get(&key(Some(ns), name)) {
            Some(d) => Some(d),
            None if !self.devices.is_ready() => self.read_device(ns, name).await?,
            None => None,
        };
        match decide(req.node, ns, name, device) {
            Ok(device) => Ok(device),
            Err(refusal) => Err(self.answer_refusal(msg, req, refuse(refusal)).await),
        }
    }

    /// Sends the refusal's answer; returns its status.
    async fn answer_refusal(
        &self,
        msg: &Message,
        req: Request<'_>,
        refusal: Refusal,
    ) -> StatusError {
        self.send(refusal_answer(msg, req.node, &refusal)).await;
        refusal.status(req.node)
    }

    /// One GET of a Device as cloudcore (`None` when it does not exist). Transport and server
    /// errors are returned, not refused: the request stays unanswered and devicetwin retries it.
    async fn read_device(&self, ns: &str, name: &str) -> Result<Option<Arc<Device>>, StatusError> {
        let request = kube::core::Request::new(Device::url_path(&(), Some(ns)))
            .get(name, &GetParams::default());
        match self.own_request::<Device>(request).await {
            Ok(d) => Ok(Some(Arc::new(d))),
            Err(e) if e.code() == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Merge-patches the DeviceStatus of a report of `req`, once the policy allowed it for
    /// the report's node. A refusal (the device left the node since the report was decided)
    /// is recorded and not answered: devicetwin retries and the retry is refused in full.
    async fn patch_status(
        &self,
        msg: &Message,
        req: Request<'_>,
        status: &DeviceStatus,
        body: serde_json::Value,
    ) -> Result<(), StatusError> {
        let (ns, name) = (status.namespace().unwrap_or_default(), status.name_any());
        let request = kube::core::Request::new(DeviceStatus::url_path(&(), Some(&ns))).patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&body),
        );
        let authorized = match authorize(&self.policy, req.node, request.map_err(Into::into)).await
        {
            Ok(a) => a,
            Err(refusal) => {
                self.record_refusal(msg, Some(req.kind), req.node, req.device, &refusal);
                return Err(refusal.status(req.node));
            }
        };
        let written: DeviceStatus = self.kube.send(authorized).await?;
        self.remember(written);
        Ok(())
    }

    async fn twin_report(&self, msg: &Message, req: Request<'_>) -> Result<(), StatusError> {
        let device = self.authorized_device(msg, req).await?;
        let node = req.node;
        let update: TwinUpdate = msg
            .content
            .parse_bytes()
            .map_err(|e| StatusError::bad_request(format!("content is not a twin update: {e}")))?;
        let status = self.ensure_status(&device).await?;
        let twins = merge_twins(
            status
                .status
                .as_ref()
                .map(|s| s.twins.clone())
                .unwrap_or_default(),
            &device.spec.properties,
            &update.twin,
        );
        // The list replaces the stored one (merge patch of an array).
        self.patch_status(msg, req, &status, json!({"status": {"twins": twins}}))
            .await?;
        self.send(confirmation(msg, node)).await;
        Ok(())
    }

    async fn state_report(&self, msg: &Message, req: Request<'_>) -> Result<(), StatusError> {
        let device = self.authorized_device(msg, req).await?;
        let node = req.node;
        let update: StateUpdate = msg
            .content
            .parse_bytes()
            .map_err(|e| StatusError::bad_request(format!("content is not a state update: {e}")))?;
        let status = self.ensure_status(&device).await?;
        let mut patch = serde_json::Map::new();
        if !update.device.state.is_empty() {
            patch.insert("state".into(), update.device.state.into());
        }
        if !update.device.last_online_time.is_empty() {
            patch.insert(
                "lastOnlineTime".into(),
                update.device.last_online_time.into(),
            );
        }
        self.patch_status(msg, req, &status, json!({ "status": patch }))
            .await?;
        self.send(confirmation(msg, node)).await;
        Ok(())
    }

    /// An extension (KubeEdge ignores membership detail requests): a confirmation that clears the
    /// edge's retry entry, then the list of devices bound to the node as a parentless
    /// `membership/detail` message. It lists only the requesting node's devices, so it needs no
    /// other check.
    async fn membership_detail(&self, msg: &Message, req: Request<'_>) -> Result<(), StatusError> {
        let node = req.node;
        self.send(confirmation(msg, node)).await;
        if !self.devices.wait_ready_for(self.cache_wait).await {
            warn!(node = %node, "devices not listed yet: membership detail not answered");
            return Err(StatusError::new(
                503,
                "ServiceUnavailable",
                "devices not listed yet",
            ));
        }
        let mut devices: Vec<Arc<Device>> = self.devices.filter(|d| d.spec.node_name == node);
        devices.sort_by_key(|d| key(d.meta().namespace.as_deref(), &d.name_any()));
        let content = json!({
            "event_id": beehive::new_id(),
            "timestamp": beehive::now_millis(),
            "devices": devices.iter().map(|d| member(d)).collect::<Vec<_>>(),
        });
        let detail = Message::new()
            .with_route(
                DEVICECONTROLLER,
                GROUP_TWIN,
                format!("node/{node}/membership/detail"),
                operation::UPDATE,
            )
            .with_content(Content::json(&content).unwrap_or_default());
        self.send(detail).await;
        Ok(())
    }
}
