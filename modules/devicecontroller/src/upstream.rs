//! Edge devicetwin → Kubernetes (spec §5.4, W14, W16): twin and state reports written to
//! DeviceStatus, membership detail requests answered.

use std::sync::Arc;

use beehive::constants::operation;
use beehive::{Content, Message};
use kube::api::{Patch, PatchParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::client::Identity;
use kubeedge_api::devices::{Device, DeviceStatus};
use kubeedge_api::names::{DEVICECONTROLLER, GROUP_TWIN};
use kubeedge_api::status::StatusError;
use kubeedge_api::watch::key;
use serde_json::json;
use tracing::{debug, warn};

use crate::shared::{Shared, confirmation, member};
use crate::twins::{StateUpdate, TwinUpdate, merge_twins};

/// The request kinds devicetwin sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Twin,
    State,
    MembershipDetail,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Twin, Kind::State, Kind::MembershipDetail];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Twin => "updateDeviceTwins",
            Kind::State => "updateDeviceStatus",
            Kind::MembershipDetail => "membershipDetail",
        }
    }
}

/// Go's classification: by substring, first match wins.
pub(crate) fn classify(resource: &str) -> Option<Kind> {
    if resource.contains("twin/edge_updated") {
        Some(Kind::Twin)
    } else if resource.contains("membership/detail") {
        Some(Kind::MembershipDetail)
    } else if resource.contains("state/update") {
        Some(Kind::State)
    } else {
        None
    }
}

/// `node/<node>/device/<ns>/<name>/...` → (node, `<ns>/<name>`).
pub(crate) fn device_of(resource: &str) -> Option<(&str, String)> {
    let parts: Vec<&str> = resource.split('/').collect();
    match parts.as_slice() {
        ["node", node, "device", ns, name, ..]
            if !node.is_empty() && !ns.is_empty() && !name.is_empty() =>
        {
            Some((node, key(Some(ns), name)))
        }
        _ => None,
    }
}

impl Shared {
    /// Handles one request; `false` when it failed or was dropped.
    pub(crate) async fn handle(&self, kind: Kind, msg: Message) -> bool {
        let result = match kind {
            Kind::Twin => self.twin_report(&msg).await,
            Kind::State => self.state_report(&msg).await,
            Kind::MembershipDetail => self.membership_detail(&msg).await,
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                debug!(kind = kind.name(), msg_id = %msg.header.id, resource = %msg.route.resource, error = %e, "device request not applied");
                false
            }
        }
    }

    /// The cached device a report is about; unknown devices are dropped unanswered.
    async fn reported_device(&self, msg: &Message) -> Result<(String, Arc<Device>), StatusError> {
        let (node, id) = device_of(&msg.route.resource).ok_or_else(|| {
            StatusError::bad_request(format!("no device in resource {:?}", msg.route.resource))
        })?;
        self.devices.wait_ready_for(self.cache_wait).await;
        let device = self
            .devices
            .get(&id)
            .ok_or_else(|| StatusError::not_found("device", &id))?;
        Ok((node.to_owned(), device))
    }

    async fn patch_status(
        &self,
        who: Identity<'_>,
        status: &DeviceStatus,
        body: serde_json::Value,
    ) -> Result<(), StatusError> {
        let (ns, name) = (status.namespace().unwrap_or_default(), status.name_any());
        let request = kube::core::Request::new(DeviceStatus::url_path(&(), Some(&ns))).patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&body),
        );
        let written: DeviceStatus = self.kube.request(who, request).await?;
        self.remember(written);
        Ok(())
    }

    async fn twin_report(&self, msg: &Message) -> Result<(), StatusError> {
        let update: TwinUpdate = msg
            .content
            .parse_bytes()
            .map_err(|e| StatusError::bad_request(format!("content is not a twin update: {e}")))?;
        let (node, device) = self.reported_device(msg).await?;
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
        self.patch_status(
            Identity::Node(&node),
            &status,
            json!({"status": {"twins": twins}}),
        )
        .await?;
        self.send(confirmation(msg, &node)).await;
        Ok(())
    }

    async fn state_report(&self, msg: &Message) -> Result<(), StatusError> {
        let update: StateUpdate = msg
            .content
            .parse_bytes()
            .map_err(|e| StatusError::bad_request(format!("content is not a state update: {e}")))?;
        let (node, device) = self.reported_device(msg).await?;
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
        // Go writes states with cloudcore's identity.
        self.patch_status(Identity::Cloudcore, &status, json!({ "status": patch }))
            .await?;
        self.send(confirmation(msg, &node)).await;
        Ok(())
    }

    /// W16 (extension): a confirmation that clears the edge's retry entry, then the list of
    /// devices bound to the node as a parentless `membership/detail` message.
    async fn membership_detail(&self, msg: &Message) -> Result<(), StatusError> {
        let node = kubeedge_api::node_of(&msg.route.resource)
            .ok_or_else(|| StatusError::bad_request("membership detail without a node"))?
            .to_owned();
        self.send(confirmation(msg, &node)).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_classified_like_go() {
        assert_eq!(
            classify("node/e/device/ns/d/twin/edge_updated"),
            Some(Kind::Twin)
        );
        assert_eq!(
            classify("node/e/device/ns/d/state/update"),
            Some(Kind::State)
        );
        assert_eq!(
            classify("node/e/membership/detail"),
            Some(Kind::MembershipDetail)
        );
        assert_eq!(classify("node/e/device/ns/d/twin/cloud_updated"), None);
        assert_eq!(
            device_of("node/e1/device/default/d1/twin/edge_updated"),
            Some(("e1", "default/d1".to_string()))
        );
        assert_eq!(device_of("node/e1/membership/detail"), None);
        assert_eq!(device_of("node//device/a/b/twin"), None);
    }
}
