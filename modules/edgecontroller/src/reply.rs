//! The messages edgecontroller sends: responses in the four shapes the edge decodes (`"OK"`,
//! raw object, raw `ErrStatus`, ObjectResp; docs/controllers.md) and downstream pushes.
//!
//! | Shape | Content |
//! |---|---|
//! | success marker | `"OK"` |
//! | raw object | the object (apiVersion/kind set), header RV = object RV |
//! | raw error | `{"ErrStatus": {...}}` |
//! | ObjectResp | `{"Object": <object or null>, "Err": <ErrStatus or null>}` |
//!
//! Typed `k8s-openapi` and `kube`-derived objects always serialise `apiVersion` and `kind`
//! (they are constants of the type, not cached fields), so TypeMeta is set without touching
//! cached objects.

use beehive::constants::{SUCCESS_CONTENT, operation};
use beehive::{Content, Message, Str};
use kubeedge_api::names::{EDGECONTROLLER, GROUP_RESOURCE};
use kubeedge_api::status::{ObjectResp, StatusError};
use serde::Serialize;

/// JSON content of `value`; a value that cannot be encoded becomes a `500` error content
/// (never happens for API objects, but the edge must get an answer either way).
pub(crate) fn json<T: Serialize + ?Sized>(value: &T) -> Content {
    Content::json(value).unwrap_or_else(|e| {
        let err = StatusError::internal(format!("cannot encode content: {e}"));
        Content::json(&err).unwrap_or_else(|_| Content::string(err.to_string()))
    })
}

/// A response to `req`: new id, parent = request id, source `edgecontroller`, group
/// `resource`, operation `response`.
pub(crate) fn response(req: &Message, resource: impl Into<Str>, content: Content) -> Message {
    Message::with_parent(req.header.id.clone())
        .with_route(
            EDGECONTROLLER,
            GROUP_RESOURCE,
            resource,
            operation::RESPONSE,
        )
        .with_content(content)
}

/// `"OK"` at the request's resource.
pub(crate) fn ok(req: &Message) -> Message {
    response(
        req,
        req.route.resource.clone(),
        Content::string(SUCCESS_CONTENT),
    )
}

/// `"OK"` at `resource`, header RV = the written object's `rv`.
pub(crate) fn ok_at(req: &Message, resource: impl Into<Str>, rv: Option<String>) -> Message {
    response(req, resource, Content::string(SUCCESS_CONTENT))
        .with_resource_version(rv.unwrap_or_default())
}

/// A raw `{"ErrStatus": …}` at `resource`.
pub(crate) fn raw_error(req: &Message, resource: impl Into<Str>, err: &StatusError) -> Message {
    response(req, resource, json(err))
}

/// A raw object at `resource`, with its resource version in the header.
pub(crate) fn object<T: Serialize>(
    req: &Message,
    resource: impl Into<Str>,
    obj: &T,
    rv: &str,
) -> Message {
    response(req, resource, json(obj)).with_resource_version(rv)
}

/// An ObjectResp at the request's resource; header RV = `rv` on success.
pub(crate) fn object_resp<T: Serialize>(
    req: &Message,
    result: Result<T, StatusError>,
    rv: Option<String>,
) -> Message {
    let (resp, rv) = match result {
        Ok(obj) => (ObjectResp::ok(obj), rv.unwrap_or_default()),
        Err(e) => (ObjectResp::err(e), String::new()),
    };
    response(req, req.route.resource.clone(), json(&resp)).with_resource_version(rv)
}

/// A downstream push (no parent id: the edge stores it instead of treating it as a reply).
pub(crate) fn push(resource: impl Into<Str>, op: &str, content: Content, rv: &str) -> Message {
    Message::new()
        .with_route(EDGECONTROLLER, GROUP_RESOURCE, resource, op)
        .with_content(content)
        .with_resource_version(rv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn req() -> Message {
        Message::new().with_route("edged", "meta", "node/e1/default/configmap/cfg", "query")
    }

    #[test]
    fn responses_answer_the_request_as_edgecontroller() {
        let r = req();
        let resp = ok(&r);
        assert_eq!(resp.header.parent_id, r.header.id);
        assert_ne!(resp.header.id, r.header.id);
        assert_eq!(
            (
                resp.route.source.as_str(),
                resp.route.group.as_str(),
                resp.route.operation.as_str()
            ),
            ("edgecontroller", "resource", "response")
        );
        assert_eq!(resp.route.resource, "node/e1/default/configmap/cfg");
        assert_eq!(resp.content.as_json(), r#""OK""#);
    }

    #[test]
    fn typed_objects_carry_type_meta_and_the_header_rv() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("cfg".into());
        let resp = object(&req(), "node/e1/default/configmap/cfg", &cm, "42");
        let v: serde_json::Value = resp.content.parse().unwrap();
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("v1"), Some("ConfigMap"))
        );
        assert_eq!(resp.header.resource_version, "42");
    }

    #[test]
    fn object_resp_always_has_both_members() {
        let ok: Message = object_resp(&req(), Ok(ConfigMap::default()), Some("5".into()));
        let v: serde_json::Value = ok.content.parse().unwrap();
        assert!(v["Err"].is_null() && v["Object"]["kind"] == "ConfigMap");
        assert_eq!(ok.header.resource_version, "5");
        let err = object_resp::<ConfigMap>(
            &req(),
            Err(StatusError::not_found("nodes", "x")),
            Some("5".into()),
        );
        let v: serde_json::Value = err.content.parse().unwrap();
        assert!(v["Object"].is_null());
        assert_eq!(v["Err"]["ErrStatus"]["code"], 404);
        assert_eq!(err.header.resource_version, "");
    }
}
