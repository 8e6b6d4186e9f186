//! Kubernetes error and response shapes exactly as Go's edge decodes them.
//!
//! Several edge-facing structs have no JSON tags upstream, so their keys are Go field names
//! with capitals (`Object`, `Err`, `ErrStatus`); the edge parses them by exact key.

use serde::{Deserialize, Serialize};

/// Details of a [`ApiStatus`] (`metav1.StatusDetails`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDetails {
    /// Name of the object the status is about.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group of the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Kind (or resource) of the object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

/// A failure as `metav1.Status`, in Go's key order. `status`, `message`, `reason` and `code`
/// are always filled: the edge reads an all-zero value as success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiStatus {
    /// Always `{}`.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// `Failure`.
    pub status: String,
    /// Human-readable description.
    pub message: String,
    /// Machine-readable reason (`NotFound`, `AlreadyExists`, …).
    pub reason: String,
    /// What the error is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// HTTP status code.
    pub code: u16,
}

/// Go's `*errors.StatusError` as JSON: `{"ErrStatus": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{} ({}): {}", err_status.reason, err_status.code, err_status.message)]
pub struct StatusError {
    /// The status.
    #[serde(rename = "ErrStatus")]
    pub err_status: ApiStatus,
}

impl StatusError {
    /// A failure with the given code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        StatusError {
            err_status: ApiStatus {
                metadata: serde_json::Map::new(),
                status: "Failure".into(),
                message: message.into(),
                reason: reason.into(),
                details: None,
                code,
            },
        }
    }

    /// Adds details naming the object.
    pub fn with_details(mut self, kind: &str, name: &str) -> Self {
        self.err_status.details = Some(StatusDetails {
            name: name.into(),
            group: String::new(),
            kind: kind.into(),
        });
        self
    }

    /// `404 NotFound`, worded like client-go: `<kind> "<name>" not found`.
    pub fn not_found(kind: &str, name: &str) -> Self {
        StatusError::new(404, "NotFound", format!("{kind} \"{name}\" not found"))
            .with_details(kind, name)
    }

    /// `400 BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        StatusError::new(400, "BadRequest", message)
    }

    /// `403 Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        StatusError::new(403, "Forbidden", message)
    }

    /// `429 TooManyRequests`: a bounded queue was full.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        StatusError::new(429, "TooManyRequests", message)
    }

    /// `500 InternalError`, also used for transport errors (Go would send `{}` for those).
    pub fn internal(message: impl Into<String>) -> Self {
        StatusError::new(500, "InternalError", message)
    }

    /// The status of a failed API call; non-API failures become `500 InternalError`.
    pub fn from_kube(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => {
                let mut e = StatusError::new(
                    if status.code == 0 { 500 } else { status.code },
                    if status.reason.is_empty() {
                        "InternalError"
                    } else {
                        &status.reason
                    },
                    status.message.clone(),
                );
                if let Some(d) = &status.details {
                    e.err_status.details = Some(StatusDetails {
                        name: d.name.clone(),
                        group: d.group.clone(),
                        kind: d.kind.clone(),
                    });
                }
                e
            }
            other => StatusError::internal(other.to_string()),
        }
    }

    /// The HTTP code.
    pub fn code(&self) -> u16 {
        self.err_status.code
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.err_status.reason
    }
}

/// The answer shape of create/patch/lease/CSR requests: `{"Object": …, "Err": …}`. The edge
/// recognises it only when both keys are present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectResp<T> {
    /// The resulting object, `null` on failure.
    #[serde(rename = "Object")]
    pub object: Option<T>,
    /// The failure, `null` on success.
    #[serde(rename = "Err")]
    pub err: Option<StatusError>,
}

impl<T> ObjectResp<T> {
    /// A success.
    pub fn ok(object: T) -> Self {
        ObjectResp {
            object: Some(object),
            err: None,
        }
    }

    /// A failure.
    pub fn err(err: StatusError) -> Self {
        ObjectResp {
            object: None,
            err: Some(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_error_serializes_like_go() {
        let e = StatusError::not_found("configmap", "cfg");
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"ErrStatus":{"metadata":{},"status":"Failure","message":"configmap \"cfg\" not found","reason":"NotFound","details":{"name":"cfg","kind":"configmap"},"code":404}}"#
        );
    }

    #[test]
    fn object_resp_always_has_both_keys() {
        let r: ObjectResp<serde_json::Value> = ObjectResp::ok(serde_json::json!({"a": 1}));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"Object":{"a":1},"Err":null}"#
        );
        let r: ObjectResp<serde_json::Value> = ObjectResp::err(StatusError::internal("down"));
        assert!(
            serde_json::to_string(&r)
                .unwrap()
                .starts_with(r#"{"Object":null,"Err":{"ErrStatus":"#)
        );
    }
}
