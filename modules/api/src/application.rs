//! The edge metaServer's request envelope (`Application`) and the options it carries.
//!
//! The edge encodes these with Go's `encoding/json` and no field tags: keys are the Go field
//! names (`ID`, `Key`, `Verb`, …), `[]byte` fields are padded standard base64 strings or
//! `null`, and the error is always present (`{"ErrStatus":{"metadata":{}}}` when empty). The
//! edge reads only `Status`, `RespBody`, `Error` and `Reason` of a reply, so a reply is the
//! request with those four fields replaced.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::status::StatusError;

/// Application verbs (`Verb`).
pub mod verb {
    /// Read one object (also discovery pass-through).
    pub const GET: &str = "get";
    /// Read a collection.
    pub const LIST: &str = "list";
    /// Register a watch listener.
    pub const WATCH: &str = "watch";
    /// Create an object.
    pub const CREATE: &str = "create";
    /// Delete an object.
    pub const DELETE: &str = "delete";
    /// Replace an object.
    pub const UPDATE: &str = "update";
    /// Replace an object's status.
    pub const UPDATE_STATUS: &str = "updatestatus";
    /// Patch an object.
    pub const PATCH: &str = "patch";
}

/// Application statuses (`Status`). A reply carries exactly [`APPROVED`](status::APPROVED)
/// or [`REJECTED`](status::REJECTED): the edge treats anything else as a failure without an
/// API error.
pub mod status {
    /// The cloud served the request; `RespBody` holds the result.
    pub const APPROVED: &str = "Approved";
    /// The cloud refused or the API server failed; `Error` holds the Kubernetes status.
    pub const REJECTED: &str = "Rejected";
    /// What every request carries on the wire.
    pub const IN_APPLYING: &str = "InApplying";
}

/// The resource of the edge's watch-sync message (`watchapp/sync`).
pub const WATCH_SYNC_RESOURCE: &str = "watchapp/sync";
/// The resource of every single-Application reply.
pub const REPLY_RESOURCE: &str = "ignore/Application/ignore";

/// One metaServer request, as the edge sends it and as the cloud answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Application {
    /// SHA-256 of the request; identical requests of one node share it.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// `/<group>/<version>/<resource>/<namespace>/<name>` (group `core`, `null` for none), or
    /// the raw path of a discovery request.
    #[serde(rename = "Key", default)]
    pub key: String,
    /// One of [`verb`].
    #[serde(rename = "Verb", default)]
    pub verb: String,
    /// The node as the edge names itself; the cloud uses the connection's node instead.
    #[serde(rename = "Nodename", default)]
    pub node_name: String,
    /// JSON of the verb's options.
    #[serde(rename = "Option", default, with = "go_bytes")]
    pub option: Option<Vec<u8>>,
    /// JSON of the request object (create, update, updatestatus).
    #[serde(rename = "ReqBody", default, with = "go_bytes")]
    pub req_body: Option<Vec<u8>>,
    /// The request subresource (`status`, `scale`, …) or empty.
    #[serde(rename = "Subresource", default)]
    pub subresource: String,
    /// The result (JSON, or the raw body of a discovery request).
    #[serde(rename = "RespBody", default, with = "go_bytes")]
    pub resp_body: Option<Vec<u8>>,
    /// One of [`status`].
    #[serde(rename = "Status", default)]
    pub status: String,
    /// Free text of a failure that is not a Kubernetes status.
    #[serde(rename = "Reason", default)]
    pub reason: String,
    /// The Kubernetes status of a failure; `None` encodes as Go's empty value.
    #[serde(rename = "Error", default, with = "go_error")]
    pub error: Option<StatusError>,
    /// The edge's last close time (RFC 3339); echoed unchanged.
    #[serde(rename = "Timestamp", default = "zero_time")]
    pub timestamp: String,
}

fn zero_time() -> String {
    "0001-01-01T00:00:00Z".into()
}

impl Application {
    /// A request as the edge sends it: `verb` on `key`, status `InApplying`, no options yet.
    pub fn request(id: impl Into<String>, verb: &str, key: &str) -> Application {
        Application {
            id: id.into(),
            key: key.into(),
            verb: verb.into(),
            status: status::IN_APPLYING.into(),
            timestamp: zero_time(),
            ..Application::default()
        }
    }

    /// The reply to this request: `Approved` with `body` as `RespBody` (unchanged when `None`).
    pub fn approved(&self, body: Option<Vec<u8>>) -> Application {
        Application {
            resp_body: body.or_else(|| self.resp_body.clone()),
            status: status::APPROVED.into(),
            reason: String::new(),
            error: None,
            ..self.clone()
        }
    }

    /// The reply to this request: `Rejected` with `error`, its message also in `Reason` so a
    /// client that reads only the text sees why.
    pub fn rejected(&self, error: StatusError) -> Application {
        Application {
            status: status::REJECTED.into(),
            reason: error.err_status.message.clone(),
            error: Some(error),
            ..self.clone()
        }
    }

    /// The options as `T`; absent options decode from `{}`.
    pub fn options<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match self.option.as_deref() {
            None | Some(b"") | Some(b"null") => serde_json::from_slice(b"{}"),
            Some(bytes) => serde_json::from_slice(bytes),
        }
    }
}

/// `metav1.ListOptions` as the edge sends them (list and watch). Unknown keys are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListOptions {
    /// Label selector, Kubernetes syntax.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
    /// Field selector, Kubernetes syntax.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field_selector: String,
    /// Set on watch requests.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub watch: bool,
    /// Bookmarks asked for (the edge never streams any).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_watch_bookmarks: bool,
    /// Resource version to list at or watch from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// How `resourceVersion` applies to a list.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version_match: String,
    /// Server-side duration of a watch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// Continue token of the previous page.
    #[serde(rename = "continue", skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
    /// WatchList streaming.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// The options as URL query pairs for a list request (`watch` and watch-only keys left
    /// out: a list is always a list).
    pub fn list_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let mut push = |k: &'static str, v: &str| {
            if !v.is_empty() {
                q.push((k, v.to_owned()));
            }
        };
        push("labelSelector", &self.label_selector);
        push("fieldSelector", &self.field_selector);
        push("resourceVersion", &self.resource_version);
        push("resourceVersionMatch", &self.resource_version_match);
        push("continue", &self.continue_token);
        if let Some(limit) = self.limit.filter(|l| *l > 0) {
            q.push(("limit", limit.to_string()));
        }
        q
    }
}

/// `metaserver.PatchInfo`: the patch request of verb `patch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchInfo {
    /// The object's name.
    #[serde(rename = "Name", default)]
    pub name: String,
    /// The patch media type (`application/merge-patch+json`, …).
    #[serde(rename = "PatchType", default)]
    pub patch_type: String,
    /// The patch document.
    #[serde(rename = "Data", default, with = "go_bytes")]
    pub data: Option<Vec<u8>>,
    /// `metav1.PatchOptions` (`fieldManager`, `force`, `dryRun`).
    #[serde(rename = "Options", default)]
    pub options: serde_json::Value,
    /// Subresources; `[""]` when there is none.
    #[serde(rename = "Subresources", default)]
    pub subresources: Option<Vec<String>>,
}

/// Go's `[]byte`: padded standard base64, `null` for nil.
mod go_bytes {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(bytes) => s.serialize_str(&STANDARD.encode(bytes)),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        STANDARD
            .decode(text.as_bytes())
            .map(Some)
            .map_err(|e| D::Error::custom(format!("illegal base64 data: {e}")))
    }
}

/// Go's `apierrors.StatusError` value: always an object, `{"ErrStatus":{"metadata":{}}}`
/// when empty. Anything the edge sends here is ignored (it echoes old errors on re-sends).
mod go_error {
    use super::*;

    pub(super) fn serialize<S: Serializer>(
        v: &Option<StatusError>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(e) => e.serialize(s),
            None => serde_json::json!({"ErrStatus": {"metadata": {}}}).serialize(s),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<StatusError>, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list request exactly as edgecore writes it.
    const LIST: &str = r#"{"ID":"73be5b1b3efc0577d458308ebd95dcac424dd06862e93d840c6ba05480969a63","Key":"/core/v1/services/null/null","Verb":"list","Nodename":"edge-node-1","Option":"eyJsaW1pdCI6NTAwfQ==","ReqBody":null,"Subresource":"","RespBody":null,"Status":"InApplying","Reason":"","Error":{"ErrStatus":{"metadata":{}}},"Timestamp":"0001-01-01T00:00:00Z"}"#;

    #[test]
    fn a_request_decodes_and_its_options_are_read() {
        let app: Application = serde_json::from_str(LIST).unwrap();
        assert_eq!(app.key, "/core/v1/services/null/null");
        assert_eq!(app.verb, verb::LIST);
        assert_eq!(app.option.as_deref(), Some(&br#"{"limit":500}"#[..]));
        let o: ListOptions = app.options().unwrap();
        assert_eq!(o.limit, Some(500));
        assert_eq!(o.list_query(), vec![("limit", "500".to_owned())]);
    }

    #[test]
    fn an_approved_reply_is_the_request_with_go_shaped_fields() {
        let app: Application = serde_json::from_str(LIST).unwrap();
        let reply = serde_json::to_value(app.approved(Some(b"{}".to_vec()))).unwrap();
        assert_eq!(reply["Status"], "Approved");
        assert_eq!(reply["RespBody"], "e30=");
        assert_eq!(reply["ReqBody"], serde_json::Value::Null);
        assert_eq!(
            reply["Error"],
            serde_json::json!({"ErrStatus": {"metadata": {}}})
        );
        assert_eq!(reply["Timestamp"], "0001-01-01T00:00:00Z");
        assert_eq!(reply["ID"], app.id);
    }

    #[test]
    fn a_rejected_reply_carries_a_complete_status_and_the_text() {
        let app: Application = serde_json::from_str(LIST).unwrap();
        let reply =
            serde_json::to_value(app.rejected(StatusError::not_found("secrets", "nope"))).unwrap();
        assert_eq!(reply["Status"], "Rejected");
        assert_eq!(reply["Error"]["ErrStatus"]["code"], 404);
        assert_eq!(reply["Error"]["ErrStatus"]["reason"], "NotFound");
        assert_eq!(reply["Reason"], "secrets \"nope\" not found");
    }

    #[test]
    fn bad_base64_is_an_error_naming_it() {
        let bad = LIST.replace("eyJsaW1pdCI6NTAwfQ==", "%%%");
        let e = serde_json::from_str::<Application>(&bad).unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
    }

    #[test]
    fn a_patch_request_decodes() {
        let p: PatchInfo = serde_json::from_str(
            r#"{"Name":"cm1","PatchType":"application/merge-patch+json","Data":"eyJhIjoxfQ==","Options":{"kind":"PatchOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"kubectl-patch"},"Subresources":[""]}"#,
        )
        .unwrap();
        assert_eq!(p.data.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(p.options["fieldManager"], "kubectl-patch");
    }
}
