//! Applications answered straight from the API server: list, get, the writes and discovery.
//!
//! Reads are decided for the node first (a SubjectAccessReview as `system:node:<name>`) unless
//! they are made as the node anyway; writes are always made as the node, so the API server's
//! Node authorizer, RBAC and NodeRestriction admission decide them whole.

use kubeedge_api::access::Attributes;
use kubeedge_api::application::{Application, ListOptions, PatchInfo, verb};
use kubeedge_api::client::Identity;
use kubeedge_api::status::StatusError;
use serde_json::Value;

use crate::discovery::ResourceInfo;
use crate::filter;
use crate::key::{self, ResourceKey};
use crate::shared::Shared;

/// Discovery paths served as they are (verb `get`), trailing `/` ignored.
pub(crate) fn is_pass_through(key: &str, verb_: &str) -> bool {
    if verb_ != verb::GET {
        return false;
    }
    let path = key.strip_suffix('/').unwrap_or(key);
    if matches!(
        path,
        "/api"
            | "/apis"
            | "/version"
            | "/healthz"
            | "/livez"
            | "/readyz"
            | "/openapi/v2"
            | "/openapi/v3"
    ) {
        return true;
    }
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    };
    match segs.as_slice() {
        ["api", v] => name_ok(v),
        ["apis", g] => name_ok(g),
        ["apis", g, v] => name_ok(g) && name_ok(v),
        _ => false,
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass).
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn with_query(path: String, query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return path;
    }
    let q: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    format!("{path}?{}", q.join("&"))
}

/// The write options the API server takes as query parameters (`fieldManager`, `dryRun`,
/// `fieldValidation`, and `force` for apply patches).
fn write_query(options: &Value) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    for key in ["fieldManager", "fieldValidation"] {
        if let Some(v) = options
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
        {
            q.push((key, v.to_owned()));
        }
    }
    if let Some(dry) = options.get("dryRun").and_then(Value::as_array) {
        for d in dry.iter().filter_map(Value::as_str) {
            q.push(("dryRun", d.to_owned()));
        }
    }
    if options.get("force").and_then(Value::as_bool) == Some(true) {
        q.push(("force", "true".into()));
    }
    q
}

fn request(
    method: http::Method,
    uri: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::ACCEPT, "application/json");
    if let Some(ct) = content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    b.body(body)
        .map_err(kube::core::request::Error::BuildRequest)
}

fn bad_options(e: serde_json::Error) -> StatusError {
    StatusError::bad_request(format!("failed to parse Option bytes: {e}"))
}

fn attributes(
    key: &ResourceKey,
    info: &ResourceInfo,
    verb_: &str,
    subresource: &str,
) -> Attributes {
    Attributes {
        verb: verb_.to_owned(),
        group: key.group.clone(),
        version: key.version.clone(),
        resource: key.resource.clone(),
        subresource: subresource.to_owned(),
        namespace: if info.namespaced {
            key.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        },
        name: key.name.clone().unwrap_or_default(),
        ..Attributes::default()
    }
}

/// Serves every verb but `watch`: the `RespBody` on success.
pub(crate) async fn serve(
    shared: &Shared,
    node: &str,
    app: &Application,
) -> Result<Option<Vec<u8>>, StatusError> {
    if is_pass_through(&app.key, &app.verb) {
        let text = shared
            .call(
                &shared.reads,
                Identity::Cloudcore,
                request(http::Method::GET, &app.key, None, Vec::new()),
            )
            .await?;
        return Ok(Some(text.into_bytes()));
    }
    let key = ResourceKey::parse(&app.key)?;
    let subresource = key::subresource(&app.subresource)?;
    let info = shared.resolver.resolve(&key).await?;
    if info.namespaced && key.namespace.is_none() && !matches!(app.verb.as_str(), verb::LIST) {
        return Err(StatusError::bad_request(format!(
            "{} is namespaced: the request names no namespace",
            key.resource
        )));
    }
    let named = |sub: &str| {
        key.object_path(info.namespaced, sub)
            .ok_or_else(|| StatusError::bad_request("the request names no object".to_owned()))
    };
    match app.verb.as_str() {
        verb::LIST => {
            let options: ListOptions = app.options().map_err(bad_options)?;
            if !shared.reads.impersonates() {
                let mut attrs = attributes(&key, &info, verb::LIST, "");
                attrs.field_selector = options.field_selector.clone();
                attrs.label_selector = options.label_selector.clone();
                shared.authorize(node, &attrs).await?;
            }
            let uri = with_query(key.collection_path(info.namespaced), &options.list_query());
            let text = read(shared, node, &uri).await?;
            Ok(Some(filtered(shared, node, &info, text).await))
        }
        verb::GET => {
            if !shared.reads.impersonates() {
                shared
                    .authorize(node, &attributes(&key, &info, verb::GET, subresource))
                    .await?;
            }
            let uri = named(subresource)?;
            let text = read(shared, node, &uri).await?;
            Ok(Some(filtered(shared, node, &info, text).await))
        }
        verb::CREATE => {
            let options: Value = app.options().map_err(bad_options)?;
            let mut body = app.req_body.clone().unwrap_or_default();
            let uri = if subresource.is_empty() {
                key.collection_path(info.namespaced)
            } else {
                // A subresource create names its object; the body may not.
                body = named_body(body, key.name.as_deref());
                named(subresource)?
            };
            let uri = with_query(uri, &write_query(&options));
            let text = write(
                shared,
                node,
                http::Method::POST,
                &uri,
                "application/json",
                body,
            )
            .await?;
            Ok(Some(text.into_bytes()))
        }
        verb::UPDATE | verb::UPDATE_STATUS => {
            let options: Value = app.options().map_err(bad_options)?;
            let sub = if app.verb == verb::UPDATE_STATUS {
                "status"
            } else {
                subresource
            };
            let uri = with_query(named(sub)?, &write_query(&options));
            let body = app.req_body.clone().unwrap_or_default();
            let text = write(
                shared,
                node,
                http::Method::PUT,
                &uri,
                "application/json",
                body,
            )
            .await?;
            Ok(Some(text.into_bytes()))
        }
        verb::PATCH => {
            let patch: PatchInfo = app.options().map_err(bad_options)?;
            let patch_type = match patch.patch_type.as_str() {
                t @ ("application/json-patch+json"
                | "application/merge-patch+json"
                | "application/strategic-merge-patch+json"
                | "application/apply-patch+yaml"
                | "application/apply-patch+cbor") => t,
                other => {
                    return Err(StatusError::new(
                        415,
                        "UnsupportedMediaType",
                        format!("the patch type {other:?} is not supported"),
                    ));
                }
            };
            let mut key = key.clone();
            if !patch.name.is_empty() {
                // From PatchInfo, not the key: checked as the key's name was.
                key.name = Some(key::object_name(&patch.name)?.to_owned());
            }
            let sub = patch
                .subresources
                .as_ref()
                .and_then(|s| s.first())
                .map(String::as_str)
                .unwrap_or(subresource);
            let sub = key::subresource(sub)?;
            let path = key
                .object_path(info.namespaced, sub)
                .ok_or_else(|| StatusError::bad_request("the patch names no object"))?;

            let uri = with_query(path, &write_query(&patch.options));
            let text = write(
                shared,
                node,
                http::Method::PATCH,
                &uri,
                patch_type,
                patch.data.unwrap_or_default(),
            )
            .await?;
            Ok(Some(text.into_bytes()))
        }
        verb::DELETE => {
            let uri = named("")?;
            let body = app.option.clone().unwrap_or_default();
            write(
                shared,
                node,
                http::Method::DELETE,
                &uri,
                "application/json",
                body,
            )
            .await?;
            Ok(None)
        }
        other => Err(StatusError::bad_request(format!(
            "unsupported Application Verb type :{}",
            other.chars().take(32).collect::<String>()
        ))),
    }
}

/// A read as the node (impersonated when reads are).
async fn read(shared: &Shared, node: &str, uri: &str) -> Result<String, StatusError> {
    let req = request(http::Method::GET, uri, None, Vec::new());
    shared.call(&shared.reads, Identity::Node(node), req).await
}

/// A write, always as the node.
async fn write(
    shared: &Shared,
    node: &str,
    method: http::Method,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<String, StatusError> {
    let req = request(method, uri, Some(content_type), body);
    shared.call(&shared.writes, Identity::Node(node), req).await
}

/// `body` with `metadata.name` set to `name` when it has none.
fn named_body(body: Vec<u8>, name: Option<&str>) -> Vec<u8> {
    let (Some(name), Ok(mut v)) = (name, serde_json::from_slice::<Value>(&body)) else {
        return body;
    };
    if v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
    {
        return body;
    }
    if let Some(obj) = v.as_object_mut() {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("name".into(), Value::String(name.to_owned()));
        }
    }
    serde_json::to_vec(&v).unwrap_or(body)
}

/// The API server's answer as the node may see it: filtered when the type has filters,
/// otherwise the bytes as they came.
async fn filtered(shared: &Shared, node: &str, info: &ResourceInfo, text: String) -> Vec<u8> {
    if !filter::filters_kind(&info.resource.kind) {
        return text.into_bytes();
    }
    let Ok(mut v) = serde_json::from_str::<Value>(&text) else {
        return text.into_bytes();
    };
    match shared.topology().await {
        Some(lookup) => filter::filter(&mut v, &info.resource.kind, node, &lookup),
        None => filter::filter(&mut v, &info.resource.kind, node, &filter::NoLookup),
    }
    serde_json::to_vec(&v).unwrap_or_else(|_| text.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_paths_pass_through_and_nothing_else() {
        for p in [
            "/api",
            "/apis/",
            "/version",
            "/api/v1",
            "/apis/apps",
            "/apis/apps/v1",
            "/openapi/v2",
            "/readyz",
        ] {
            assert!(is_pass_through(p, "get"), "{p}");
        }
        for p in [
            "/metrics",
            "/api/v1/pods",
            "/apis/apps/v1/deployments",
            "/core/v1/services/null/null",
            "/apis/a/b/../../x",
        ] {
            assert!(!is_pass_through(p, "get"), "{p}");
        }
        assert!(!is_pass_through("/api", "list"));
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(
            with_query(
                "/api/v1/services".into(),
                &[("labelSelector", "app in (a,b)".into())]
            ),
            "/api/v1/services?labelSelector=app%20in%20%28a%2Cb%29"
        );
        let q = write_query(
            &serde_json::json!({"fieldManager":"kubectl","dryRun":["All"],"force":true}),
        );
        assert_eq!(
            q,
            vec![
                ("fieldManager", "kubectl".into()),
                ("dryRun", "All".into()),
                ("force", "true".into())
            ]
        );
    }

    #[test]
    fn a_nameless_subresource_body_gets_the_keys_name() {
        let b = named_body(
            br#"{"kind":"TokenRequest","spec":{}}"#.to_vec(),
            Some("sa1"),
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["metadata"]["name"], "sa1");
    }
}
