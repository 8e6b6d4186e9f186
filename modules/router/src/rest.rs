//! The REST listener: `<METHOD> /<edge node>/<namespace>/<rule path>[/<more>][?query]`, plain
//! HTTP on `modules.router.address:port`, every method and path.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode as ActixStatus;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use tracing::{debug, info};

use crate::metrics::RestResult;
use crate::shared::{FORWARDED, Reply, Shared};

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the listener's socket (so a taken port fails the start, not a later rule).
pub(crate) fn bind(address: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(address)
}

/// Starts serving on `listener` on the current actix system.
pub(crate) fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
) -> std::io::Result<(ServerHandle, SocketAddr)> {
    let addr = listener.local_addr()?;
    let max = shared.config.max_concurrent as usize;
    let data = web::Data::new(shared);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(handle))
    })
    .workers(1)
    .max_connections(max.saturating_mul(2).max(64))
    .client_request_timeout(HEAD_TIMEOUT)
    .disable_signals()
    .shutdown_timeout(2)
    .listen(listener)?
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    info!(%addr, "router REST listener serving");
    Ok((handle, addr))
}

fn respond(reply: Reply) -> HttpResponse {
    let status = ActixStatus::from_u16(reply.status.as_u16()).unwrap_or(ActixStatus::BAD_GATEWAY);
    let mut out = HttpResponse::build(status);
    for (name, value) in reply.headers {
        if let (Ok(n), Ok(v)) = (
            actix_web::http::header::HeaderName::try_from(name.as_str()),
            actix_web::http::header::HeaderValue::try_from(value.as_str()),
        ) {
            out.append_header((n, v));
        }
    }
    out.body(reply.body)
}

/// The request URI split as KubeEdge reads it: node, namespace, and what follows.
fn split(uri: &str) -> Option<(&str, &str, &str)> {
    let mut parts = uri.strip_prefix('/')?.splitn(3, '/');
    let node = parts.next().filter(|s| !s.is_empty())?;
    let ns = parts.next().filter(|s| !s.is_empty() && !s.contains('?'))?;
    Some((node, ns, parts.next().unwrap_or("")))
}

async fn handle(
    shared: web::Data<Arc<Shared>>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    let shared = shared.get_ref();
    let reply = call(shared, &req, payload).await;
    debug!(method = %req.method(), uri = %req.uri(), status = reply.status.as_u16(), "rest call");
    respond(reply)
}

async fn call(shared: &Arc<Shared>, req: &HttpRequest, payload: web::Payload) -> Reply {
    let m = &shared.metrics;
    let uri = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |pq| pq.as_str().to_owned());
    let Some((node, ns, rest)) = split(&uri) else {
        m.rest(RestResult::NoRule);
        return Reply::text(StatusCode::NOT_FOUND, "Request error");
    };
    // spec: any name is accepted upstream; here only an edge node's.
    if !shared.nodes.contains(node) {
        m.rest(RestResult::UnknownNode);
        return Reply::text(
            StatusCode::NOT_FOUND,
            format!("{node:?} is not an edge node"),
        );
    }
    let Some((rule, matched)) = shared.table().rest_rule(ns, rest) else {
        m.rest(RestResult::NoRule);
        return Reply::text(StatusCode::NOT_FOUND, "Request error");
    };
    let method = Method::from_bytes(req.method().as_str().as_bytes()).unwrap_or(Method::GET);
    let mut headers = HeaderMap::new();
    for (name, value) in req.headers() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(n, v);
        }
    }
    let here = shared.ownership.holds(node);
    let holder = shared
        .ownership
        .holder(node)
        .filter(|h| !here && h != shared.ownership.me() && !headers.contains_key(FORWARDED));
    if !here && holder.is_none() {
        m.rest(RestResult::NotConnected);
        let reply = Reply::text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("node {node:?} is not connected"),
        );
        shared.status.failure(
            &rule.route.key,
            format!("503 Service Unavailable: node {node:?} is not connected"),
        );
        return reply;
    }
    let Some(permits) = shared.permits(&rule) else {
        m.rest(RestResult::Busy);
        shared.status.failure(
            &rule.route.key,
            "429 Too Many Requests: the rule has too many deliveries in progress",
        );
        return Reply::text(
            StatusCode::TOO_MANY_REQUESTS,
            format!("rule {} has too many calls in progress", rule.route.key),
        );
    };
    let body = match read_body(req, payload, shared.config.max_body_bytes as usize).await {
        Ok(b) => b,
        Err(reply) => {
            if reply.status == StatusCode::PAYLOAD_TOO_LARGE {
                m.rest(RestResult::TooLarge);
            }
            shared.status.failure(
                &rule.route.key,
                format!("{}: {}", reply.status, String::from_utf8_lossy(&reply.body)),
            );
            return reply;
        }
    };
    let reply = match holder {
        Some(holder) => {
            m.rest(RestResult::Proxied);
            shared.forward(&holder, &method, &uri, &headers, body).await
        }
        None => {
            let reply = shared
                .rest_call(&rule, &matched, node, &method, &headers, body)
                .await;
            m.rest(if reply.status.is_success() {
                RestResult::Delivered
            } else if reply.status == StatusCode::GATEWAY_TIMEOUT {
                RestResult::Timeout
            } else {
                RestResult::TargetError
            });
            reply
        }
    };
    drop(permits);
    reply
}

/// The whole body, refused with `413` beyond `limit` bytes (before reading it when the client
/// says its length).
async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, Reply> {
    let too_large = || {
        Reply::text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| Reply::text(StatusCode::BAD_REQUEST, e.to_string()))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uri_splits_into_node_namespace_and_the_rest() {
        assert_eq!(
            split("/e1/default/test/a?x=1"),
            Some(("e1", "default", "test/a?x=1"))
        );
        assert_eq!(split("/e1/default"), Some(("e1", "default", "")));
        assert_eq!(split("/e1"), None);
        assert_eq!(split("/e1/?x"), None);
        assert_eq!(split("//ns/x"), None);
    }
}
