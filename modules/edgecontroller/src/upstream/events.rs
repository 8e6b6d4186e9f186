//! Events from edged: create, update or patch, as the node, never answered (the edge does not
//! wait).

use beehive::Message;
use beehive::constants::operation;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use kubeedge_api::status::StatusError;
use serde::Deserialize;
use tracing::debug;

use super::{Kind, Outcome, Upstream, api, parts};

/// `common/types.EventPatchInfo`.
#[derive(Debug, Deserialize)]
struct EventPatch {
    event: Event,
    #[serde(rename = "patchData")]
    data: String,
}

impl Upstream {
    /// Writes the event in its own namespace (the resource's when the event has none).
    pub(crate) async fn event(&self, msg: &Message) -> Outcome {
        match self.write_event(msg).await {
            Ok(()) => Outcome::Ok,
            Err(e) => {
                debug!(msg_id = %msg.header.id, resource = %msg.route.resource, error = %e, "event not written");
                Outcome::Failed
            }
        }
    }

    async fn write_event(&self, msg: &Message) -> Result<(), StatusError> {
        let r = parts(msg, false, false)?;
        let bad = |e: serde_json::Error| {
            StatusError::bad_request(format!("content is not an event: {e}"))
        };
        let namespace = |e: &Event| {
            e.metadata
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| r.namespace.clone())
        };
        let request = match msg.route.operation.as_str() {
            operation::PATCH => {
                let p: EventPatch = msg.content.parse_bytes().map_err(bad)?;
                let patch: serde_json::Value = serde_json::from_str(&p.data).map_err(bad)?;
                let name = p.event.metadata.name.clone().unwrap_or_default();
                api::<Event>(Some(&namespace(&p.event))).patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
            }
            op => {
                let mut e: Event = msg.content.parse_bytes().map_err(bad)?;
                let ns = namespace(&e);
                e.metadata.namespace = Some(ns.clone());
                let name = e.metadata.name.clone().unwrap_or_default();
                if op == operation::INSERT {
                    e.metadata.resource_version = None;
                }
                let body =
                    serde_json::to_vec(&e).map_err(|e| StatusError::internal(e.to_string()))?;
                if op == operation::INSERT {
                    api::<Event>(Some(&ns)).create(&PostParams::default(), body)
                } else {
                    api::<Event>(Some(&ns)).replace(&name, &PostParams::default(), body)
                }
            }
        };
        // As the node: with impersonation on, the API server checks the event too.
        self.call::<serde_json::Value>(Kind::ProcessEvent, msg, &r.node, request)
            .await
            .map(|_| ())
    }
}
