//! Applications answered straight from the API server: list, get, the writes and discovery.
//!
//! Each Application becomes the one API request that serves it, and that request is decided
//! ([`MetaPolicy`]) before it is sent: reads by a SubjectAccessReview as `system:node:<name>`
//! on the attributes read from the request (unless they are made as the node anyway), writes
//! by the API server as the node after the rules the cluster lacks. A list whose key names an
//! object lists that object only (`fieldSelector=metadata.name=<name>`), so the list reviewed
//! and the list executed are one.

use kubeedge_api::application::{Application, ListOptions, PatchInfo, verb};
use kubeedge_api::authz::{Authorized, RequestInfo, authorize};
use kubeedge_api::status::StatusError;
use serde_json::Value;

use crate::discovery::ResourceInfo;
use crate::filter;
use crate::key::{self, ResourceKey};
use crate::policy::{MetaPolicy, is_discovery};
use crate::shared::Shared;

/// Whether `key` with `verb_` is a discovery read (served as it is; trailing `/` ignored).
pub(crate) fn is_pass_through(key: &str, verb_: &str) -> bool {
    verb_ == verb::GET && RequestInfo::parse("GET", key, "").is_ok_and(|i| is_discovery(&i))
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

pub(crate) fn with_query(path: String, query: &[(&str, String)]) -> String {
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
) -> Result<http::Request<Vec<u8>>, http::Error> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::ACCEPT, "application/json");
    if let Some(ct) = content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    b.body(body)
}

/// `request` decided for `node` by the metaServer's policy.
async fn decided(
    shared: &Shared,
    node: &str,
    request: Result<http::Request<Vec<u8>>, http::Error>,
) -> Result<Authorized, StatusError> {
    authorize(&MetaPolicy(shared), node, request.map_err(Into::into)).await
}

/// The list query of `options`, narrowed to object `name` when the key names one: the
/// field selector then requires `metadata.name=<name>` (and whatever the edge asked).
pub(crate) fn list_query(options: &ListOptions, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut query = options.list_query();
    if let Some(name) = name {
        let fs = match options.field_selector.as_str() {
            "" => format!("metadata.name={name}"),
            edge => format!("metadata.name={name},{edge}"),
        };
        query.retain(|(k, _)| *k != "fieldSelector");
        query.push(("fieldSelector", fs));
    }
    query
}

fn bad_options(e: serde_json::Error) -> StatusError {
    StatusError::bad_request(format!("failed to parse Option bytes: {e}"))
}

/// Serves every verb but `watch`: the `RespBody` on success.
pub(crate) async fn serve(
    shared: &Shared,
    node: &str,
    app: &Application,
) -> Result<Option<Vec<u8>>, StatusError> {
    if is_pass_through(&app.key, &app.verb) {
        // `/apis/` and `/apis` are one path to the API server: one entry.
        let path = app.key.strip_suffix('/').unwrap_or(&app.key);
        let get = request(http::Method::GET, path, None, Vec::new());
        // Decided for this node first; the answer may then come from another node's fetch:
        // discovery is always fetched as cloudcore (impersonation or not), so every node's
        // request for `path` is the same request with the same answer.
        // A decision to send it as the node would make the answer the node's own: not shared.
        let authorized = decided(shared, node, get).await?;
        if shared.reads.as_node(authorized.act()) {
            let text = shared.call(&shared.reads, authorized).await?;
            return Ok(Some(text.into_bytes()));
        }
        let text = shared
            .passthrough
            .get(path, shared.call(&shared.reads, authorized))
            .await?;
        return Ok(Some(text.as_bytes().to_vec()));
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
            let query = list_query(&options, key.name.as_deref());
            let uri = with_query(key.collection_path(info.namespaced), &query);
            let text = read(shared, node, &uri).await?;
            Ok(Some(filtered(shared, node, &info, text).await))
        }
        verb::GET => {
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

/// A read, once decided: as the node when reads are impersonated.
async fn read(shared: &Shared, node: &str, uri: &str) -> Result<String, StatusError> {
    let req = request(http::Method::GET, uri, None, Vec::new());
    shared
        .call(&shared.reads, decided(shared, node, req).await?)
        .await
}

/// A write, once decided: always as the node.
async fn write(
    shared: &Shared,
    node: &str,
    method: http::Method,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<String, StatusError> {
    let req = request(method, uri, Some(content_type), body);
    shared
        .call(&shared.writes, decided(shared, node, req).await?)
        .await
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
            "/apis/apps/v1",
            "/openapi/v2",
        ] {
            assert!(is_pass_through(p, "get"), "{p}");
        }
        for p in [
            "/metrics",
            "/api/v1/pods",
            "/core/v1/services/null/null",
            "/apis/a/b/../../x",
            "/apis/../metrics",
            "/apis/..",
        ] {
            assert!(!is_pass_through(p, "get"), "{p}");
        }
        assert!(!is_pass_through("/api", "list"));
    }

    #[test]
    fn a_list_of_a_named_object_lists_that_object_only() {
        let options = ListOptions {
            field_selector: "spec.type=x".into(),
            label_selector: "a=b".into(),
            ..ListOptions::default()
        };
        let q = list_query(&options, Some("s1"));
        assert!(q.contains(&("fieldSelector", "metadata.name=s1,spec.type=x".into())));
        assert!(q.contains(&("labelSelector", "a=b".into())));
        let uri = with_query("/api/v1/namespaces/ns/secrets".into(), &q);
        let (path, query) = uri.split_once('?').unwrap();
        let i = RequestInfo::parse("GET", path, query).unwrap();
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("list", "s1"));
        assert!(
            !list_query(&ListOptions::default(), None)
                .iter()
                .any(|(k, _)| *k == "fieldSelector")
        );
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
