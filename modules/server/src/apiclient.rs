//! The Kubernetes API client cloudcore runs on: kube's middleware over one HTTP/2 connection.
//!
//! `kube::Client::try_from(Config)` speaks HTTP/1.1 only, which costs one TLS connection per
//! request in flight: a replica with thousands of edges connecting held 170–270 connections
//! to the API server, each with its own TLS state and buffers. The API server speaks HTTP/2
//! (as client-go uses it), so here the connection is negotiated by ALPN and every watch and
//! request shares it; servers without HTTP/2 get HTTP/1.1 as before.

use std::time::Duration;

use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::{BoxError, ServiceBuilder};

/// How often an idle HTTP/2 connection is pinged, and how long an answer may take before the
/// connection is dropped and the next request dials again (client-go's health check: a read
/// idle timeout of 30 s and a ping timeout of 15 s). Watches see the loss as a stream error
/// and restart.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Flow-control windows of the connection (client-go's: 4 MiB a stream, 1 GiB the
/// connection). Every watch and request shares the connection, and a watch whose reader is
/// busy keeps what the API server sent it unread, up to its stream's window. The connection's
/// window must never be what stops a stream: with hyper's defaults (2 MiB a stream, 5 MiB the
/// connection) three watches falling behind took it all, and every other watch and answer on
/// the connection stopped for good — among them the answer their readers were waiting for.
/// What is held unread stays bounded by the stream window times the streams open at once
/// (one per watch, plus the requests in flight).
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 1 << 30;

/// A client for `config` with the same authentication, extra headers (User-Agent,
/// impersonation), base URI and retries as kube's own, over HTTP/2 when the server offers it.
///
/// Errors: the TLS or authentication settings of `config` are unusable.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let tls = config.rustls_client_config()?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // As client-go (Go sets it on every socket): a request's HTTP/2 frames are small writes,
    // and with Nagle's algorithm the second waits for the API server's delayed ACK (40 ms).
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match config.tls_server_name.as_deref() {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = builder.enable_all_versions().wrap_connector(http);
    let http: HttpClient<_, kube::client::Body> = HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}
